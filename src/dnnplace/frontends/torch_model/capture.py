"""Trace a model into an operator DAG (torch.export) and group fx nodes into workload nodes.

torch.export gives a clean ATen operator graph for residual CNNs, Transformer
encoders and MLPs (control flow such as TransformerEncoderLayer's fast path is
specialised away), with each operator's owning module in
``meta["nn_module_stack"]``; op-level ``torch.fx.symbolic_trace`` fails on
BatchNorm and TransformerEncoderLayer.  Where export fails, the module-level
symbolic trace is the fallback.

A *group* is one workload node: one operator (``op`` granularity) or a
contiguous run, in graph order, of operators of the same leaf module
(``module`` granularity; runs of a topological order never create cycles).
``getitem`` nodes stay with the operator that produced the tuple.

Mixture-of-experts layers that run transformers' eager loop over experts (a
data-dependent trip count) are traced with the grouped implementation
(:mod:`dnnplace.frontends.torch_model.moe`).

torch.export's graph keeps in-place operators (``copy_`` into a slice of a
``new_empty``, ``index_put_`` into an expert accumulator, ``div_`` of routing
weights); their readers consume the *mutated base*, so the fx edges miss the
writer -> reader dependency and its transfer (an attention block would not
depend on its rotary keys, a MoE layer's output not on its experts).  A graph with such a write is functionalized
(:func:`functionalize_writes`): each write becomes an operator returning a new
value (``slice_scatter``, ``index_put``), and every dependency is an edge.
"""

from __future__ import annotations

import io
import logging
import operator
import sys
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.frontends.torch_model.moe import TRACEABLE, portable_graph, traceable_experts


@dataclass
class Captured:
    """The traced graph and its grouping into workload nodes."""

    gm: Any  # torch.fx.GraphModule
    groups: list[list]  # fx nodes per workload node, in graph order
    group_of: dict[str, int]  # fx node name -> workload node index
    module_of: list[str]  # owning module path per group ("" = the root)
    granularity: str
    method: str  # "export" or "symbolic_trace"
    inputs: tuple = ()  # the example inputs as the graph's placeholders take them (keywords flattened in)


@contextmanager
def _quiet_torch_logs():
    """torch.export logs and prints its guard failures; the caller reports the failure in one line."""
    names = [n for n in logging.root.manager.loggerDict if n == "torch" or n.startswith("torch.")]
    saved = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.CRITICAL)
    try:
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            yield
    finally:
        for n, level in saved.items():
            logging.getLogger(n).setLevel(level)


def _module_path(node) -> str:
    stack = node.meta.get("nn_module_stack")
    if stack:
        return list(stack.values())[-1][0]
    if node.op == "call_module":
        return str(node.target)
    return ""


def _is_compute(node) -> bool:
    if node.op == "call_module" and str(node.target).startswith("_guards"):
        return False
    return node.op in ("call_function", "call_module", "call_method") and node.target is not operator.getitem


def _cache_hint(exc: BaseException) -> str:
    """A fix for the commonest export failure of generative models: a KV cache object in the output."""
    text = str(exc)
    if "Cache" in text and "output" in text:
        return ("; the model returns a KV-cache object: build it with use_cache=False"
                " (e.g. config.use_cache = False) for a placement profile")
    return ""


class ExportFailed(DnnplaceError):
    """torch.export failed and the caller asked for no module-level fallback (``capture(export_only=True)``)."""


def capture(model, inputs: tuple, granularity: str = "op", quiet: bool = False,
            kwargs: dict | None = None, export_only: bool = False) -> Captured:
    """Trace ``model`` on ``inputs`` (and keyword ``kwargs``); fall back to a module-level trace if export fails.

    ``export_only``: raise :class:`ExportFailed` instead (a model built on the
    meta device is then built for real and traced again).

    torch.export takes keyword inputs (encoder-decoders need ``decoder_input_ids=``);
    the captured graph's placeholders take them flattened after the positional
    ones, which is what :attr:`Captured.inputs` holds.
    """
    import torch

    if granularity not in ("op", "module"):
        raise DnnplaceError(f"unknown granularity '{granularity}'; choose op or module")
    kwargs = dict(kwargs or {})
    try:
        with _quiet_torch_logs(), traceable_experts(model) as switched:
            gm = functionalize_writes(torch.export.export(model, tuple(inputs), kwargs=kwargs))
        portable_graph(gm)
        if switched and not quiet:
            print(f"note: {len(switched)} eager experts modules (data-dependent loops) traced with their"
                  f" '{TRACEABLE}' implementation, the same function (docs/torch.md)", file=sys.stderr)
        method = "export"
        flat = _flat_inputs(gm, tuple(inputs), kwargs)
    except Exception as exc:
        reason = f"{exc.__class__.__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        hint = _cache_hint(exc)
        if hint:
            raise DnnplaceError(f"cannot trace the model{hint}") from None
        if export_only:
            raise ExportFailed(f"torch.export failed ({reason})") from None
        if kwargs:
            raise DnnplaceError(f"cannot trace the model with keyword inputs ({', '.join(kwargs)}):"
                                f" torch.export failed ({reason})") from None
        flat = tuple(inputs)
        try:
            gm = torch.fx.symbolic_trace(model)
        except Exception as exc2:
            raise DnnplaceError(f"cannot trace the model: torch.export failed ({reason}) and"
                                f" torch.fx.symbolic_trace failed ({exc2.__class__.__name__})") from None
        if not quiet:
            print(f"note: operator-level tracing failed ({reason}); using module granularity", file=sys.stderr)
        method = "symbolic_trace"
        granularity = "module"
    groups: list[list] = []
    group_of: dict[str, int] = {}
    module_of: list[str] = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is operator.getitem:
            src = node.args[0]
            if src.name in group_of:
                g = group_of[src.name]
                groups[g].append(node)
                group_of[node.name] = g
            continue
        if not _is_compute(node):
            continue
        path = _module_path(node)
        if granularity == "module" and groups and module_of[-1] == path and path:
            groups[-1].append(node)
        else:
            groups.append([node])
            module_of.append(path)
        group_of[node.name] = len(groups) - 1
    if not groups:
        raise DnnplaceError("the traced model has no operators")
    return Captured(gm, groups, group_of, module_of, granularity, method, flat)


def mutating(node) -> bool:
    """An in-place ATen operator (its schema writes one of its arguments; after :func:`functionalize_writes`
    only writes to constants are left, e.g. ``add_`` in T5's position buckets)."""
    schema = getattr(node.target, "_schema", None)
    return bool(node.op == "call_function" and schema is not None and schema.is_mutable)


def functionalize_writes(ep) -> Any:
    """The exported program's module, functionalized when an in-place write touches a non-constant value.

    Writes to constants (T5's ``add_`` on its position buckets) are evaluated
    once with the constant, so such graphs are kept as exported; any other
    write is rewritten by ``run_decompositions({})`` (functionalization only,
    no operator decomposed).
    """
    import torch

    gm = ep.module()
    const = constant_nodes(gm)
    if not any(mutating(x) and x.name not in const for x in gm.graph.nodes):
        return gm
    gm = ep.run_decompositions({}).module()
    for x in gm.graph.nodes:  # functional ``copy`` has no derivative: training backpropagates through this one
        if x.op == "call_function" and x.target is torch.ops.aten.copy.default:
            x.target = copy_into
    gm.recompile()
    return gm


def copy_into(dst, src) -> Any:
    """``aten.copy`` (a functionalized ``copy_``): ``dst``'s shape, dtype and device, ``src``'s values.

    Differentiable in ``src``; ``dst``'s values are overwritten, so it gets no gradient.
    """
    return src.to(dtype=dst.dtype, device=dst.device).expand(dst.shape).clone()


def _flat_inputs(gm, args: tuple, kwargs: dict) -> tuple:
    """Positional and keyword inputs in the order of the exported graph's placeholders."""
    import torch
    from torch.utils import _pytree as pytree

    spec = getattr(gm, "_in_spec", None)
    if spec is not None:
        from torch.fx import _pytree as fx_pytree

        leaves = fx_pytree.tree_flatten_spec((args, kwargs), spec)
    else:  # pragma: no cover - older torch
        leaves = pytree.tree_leaves((args, kwargs))
    n_ph = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    tensors = tuple(v for v in leaves if isinstance(v, torch.Tensor))
    if len(tensors) != n_ph:
        raise DnnplaceError(f"the traced graph takes {n_ph} inputs but the example gives {len(tensors)} tensors;"
                            " pass every model input as a tensor")
    return tensors


def constant_nodes(gm) -> set[str]:
    """Operators whose value depends on no model input and no trainable parameter: constants for fixed shapes.

    Position ids, causal masks, rotary ``cos``/``sin`` tables and relative
    position buckets are computed from ``arange`` and buffers alone; a pipeline
    computes them once, not once per sample (every compiler folds them).
    ``dnnplace profile`` leaves them out of the workload (see docs/catalogue.md)
    and :func:`dnnplace.runtime.stages.build_stages` evaluates them once and hands
    each stage the values it reads as buffers.  Random operators are never
    constants.
    """
    import torch

    seeded = torch.Tag.nondeterministic_seeded
    dependent: set[str] = set()
    const: set[str] = set()
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            obj = gm
            for part in str(node.target).split("."):
                obj = getattr(obj, part, None)
            if isinstance(obj, torch.nn.Parameter) and obj.requires_grad:
                dependent.add(node.name)
        elif node.op == "call_function":
            if seeded in getattr(node.target, "tags", ()) or any(i.name in dependent for i in node.all_input_nodes):
                dependent.add(node.name)
            else:
                const.add(node.name)
        else:  # placeholders, modules, methods, the output
            dependent.add(node.name)
    return const
