"""Mixture-of-experts layers: a traceable experts implementation and FLOP counts for grouped matmuls.

transformers (5.x) runs a layer's experts with one of three implementations, chosen
by the config's ``experts_implementation``:

* ``grouped_mm`` (the default): tokens sorted by expert, offsets from a ``histc``
  of the expert ids, one grouped matmul per projection over all ``T x k`` routed
  rows (under ``torch.export`` always the custom operator
  ``transformers::grouped_mm_fallback``);
* ``batched_mm``: every routed row gathers its expert's weights and one ``bmm``
  multiplies them;
* ``eager``: a Python loop over the experts that were hit, each taking the
  tokens routed to it (``nonzero``/``where``).  Its trip count and every
  matmul's shape depend on the data, so it cannot be exported (a data-dependent
  guard) nor symbolically traced.

:func:`traceable_experts` captures an eager model with the grouped
implementation instead: the same function of the same weights (transformers
guarantees the implementations agree), one operator per projection, whose total
work -- ``T x k`` rows, whatever the routing -- is what the eager loop does in
sum.  :func:`flop_formulas` gives torch's FLOP counter the grouped matmuls it does
not know (it would count them as 0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

TRACEABLE = "grouped_mm"  # what an eager experts module is captured as


def _eager_experts(model) -> list[tuple[str, Any]]:
    """(path, module) of transformers experts modules that would run the eager, untraceable loop.

    A module decorated with ``@use_experts_implementation`` dispatches on
    ``module.config._experts_implementation`` and carries ``_is_expert_parallel``.
    """
    out = []
    for path, module in model.named_modules():
        config = getattr(module, "config", None)
        if hasattr(module, "_is_expert_parallel") and hasattr(module, "has_gate") and \
                getattr(config, "_experts_implementation", None) == "eager":
            out.append((path, module))
    return out


@contextmanager
def traceable_experts(model) -> Iterator[list[str]]:
    """While tracing, run eager transformers experts with the grouped implementation; yields their paths.

    Only the configs of the experts modules are switched (their internal field,
    so sub-configs are left alone), and restored afterwards: the user's model is
    unchanged, the captured graph keeps the grouped operators.
    """
    found = _eager_experts(model)
    saved: dict[int, tuple[Any, Any]] = {}
    for _, module in found:
        cfg = module.config
        if id(cfg) not in saved:
            saved[id(cfg)] = (cfg, cfg.__dict__.get("_experts_implementation_internal"))
    try:
        for cfg, _ in saved.values():
            cfg.__dict__["_experts_implementation_internal"] = TRACEABLE
        yield [path for path, _ in found]
    finally:
        for cfg, value in saved.values():
            cfg.__dict__["_experts_implementation_internal"] = value


_REGISTERED_BY = "transformers.integrations.moe"  # the module whose import defines transformers::grouped_mm_*


def grouped_mm_fallback(input, weight, offs):
    """``transformers::grouped_mm_fallback``, callable in a process that has not imported transformers yet.

    The captured graph calls this function instead of the operator
    (:func:`portable_graph`): a pipeline stage unpickled in a fresh worker
    process imports this module by name, and the call imports the module that
    registers the operator -- a graph naming ``torch.ops.transformers...``
    directly cannot be unpickled there.
    """
    import importlib

    import torch

    importlib.import_module(_REGISTERED_BY)
    return torch.ops.transformers.grouped_mm_fallback(input, weight, offs)


def portable_graph(gm) -> int:
    """Point the graph's calls of transformers' grouped matmul at :func:`grouped_mm_fallback`; how many."""
    import torch

    try:
        op = torch.ops.transformers.grouped_mm_fallback.default
    except (AttributeError, RuntimeError):
        return 0
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is op:
            node.target = grouped_mm_fallback
            count += 1
    if count:
        gm.recompile()
    return count


def grouped_mm_flops(a_shape, b_shape, offs_shape=None, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of ``aten._grouped_mm(a, b, offs)``, from shapes: every row is multiplied once, whatever the groups.

    * ``(M, K) x (G, K, N)`` (offsets split the rows of ``a``): ``2 M K N``;
    * ``(G, M, K) x (G, K, N)`` (a batch): ``2 G M K N``;
    * ``(M, K) x (K, N)`` (offsets split ``K``, a weight gradient): ``2 M K N``;
    * ``(G, M, K) x (K, N)`` (offsets split the columns of ``b``): ``2 M K N``.
    """
    a, b = list(a_shape), list(b_shape)
    if len(a) == 3 and len(b) == 3:
        return 2 * a[0] * a[1] * a[2] * b[2]
    rows = a[-2]
    k = a[-1]
    cols = b[-1]
    return 2 * rows * k * cols


def fallback_flops(input_shape, weight_shape, offs_shape, *args, out_shape=None, **kwargs) -> int:
    """``transformers::grouped_mm_fallback(input (S, K), weight (E, K, N), offs)``: ``2 S K N``."""
    return grouped_mm_flops(input_shape, weight_shape, offs_shape)


def fallback_backward_flops(input_shape, weight_shape, offs_shape, grad_shape, *args, out_shape=None,
                            **kwargs) -> int:
    """Its backward: the input's and the weights' gradients, a grouped matmul each (``4 S K N``)."""
    return 2 * grouped_mm_flops(input_shape, weight_shape, offs_shape)


def flop_formulas() -> dict[Any, Callable[..., int]]:
    """Operator packet -> shape formula, for ``FlopCounterMode(custom_mapping=...)``.

    The transformers operators exist only once ``transformers.integrations.moe``
    was imported (every MoE model imports it); without them nothing is added.
    """
    import torch

    formulas: dict[Any, Callable[..., int]] = {}
    if hasattr(torch.ops.aten, "_grouped_mm"):
        formulas[torch.ops.aten._grouped_mm] = grouped_mm_flops
    ns = torch.ops.transformers
    for name, formula in (("grouped_mm_fallback", fallback_flops),
                          ("grouped_mm_fallback_backward", fallback_backward_flops)):
        try:
            formulas[getattr(ns, name)] = formula
        except (AttributeError, RuntimeError):
            pass
    return formulas
