"""The host side of an eager step: the CPU time Megatron-Core spends issuing a layer's ops, where it shows.

Why a term: the host issues every op of an eager step from Python (module call, dispatcher, CUDA launch), at a
cost per op that does not shrink with the op's work (catalogue ``HOST_OVERHEAD``, from published measurements).
The GPU runs behind the host as long as the launch queue holds work, so the host's time is hidden until the
host is the slower of the two between two points where it must wait for the GPU:

* per layer and micro-batch the host spends H = ops x seconds per op (a Transformer Engine module call counts
  as ``te_module_ops`` plain ops; a module captured in a CUDA graph as one op: the graph's replay; TE's grouped
  GEMM launches one kernel per local expert from C++ at ``launch_s``), the backward ``backward_ops`` times the
  forward's;
* without a synchronisation the host runs ahead, and max(0, H - G) is exposed, G the GPU's seconds of the same
  layer (compute and exposed communication, as the cost model prices them);
* every dropless token dispatcher synchronises once per MoE layer forward (megatron-core 0.16.1
  ``token_dispatcher.py``: the all-to-all dispatcher's DtoH copy of the split sizes, synchronised at
  ``before_ep_alltoall``; DeepEP's ``tokens_per_expert.sum().item()``; the all-gather one's ``.cpu()``): the host
  waits for the GPU to drain, so the op it issues after it (the all-to-all) is exposed in full, plus the
  synchronisation's own idle (``sync_s``);
* ``full_iteration`` graphs replay the whole step: nothing is exposed.

Not priced: the embedding and head stages' few ops, the selective recomputation's reruns, the optimizer's ops.
Tests: tests/models/llm/test_llm_host.py (against a hand-computed value).
"""

from __future__ import annotations

import numpy as np

from dnnplace.core.catalogue import HOST_OVERHEAD
from dnnplace.models.llm.config import CUDA_GRAPHS

__all__ = ["DENSE_MODULES", "MOE_MODULES", "graphed", "layer_exposed", "layer_host_seconds"]

Array = np.ndarray

#: The modules of a dense layer and of an MoE layer, as ``HOST_OVERHEAD.module_ops`` names them.
DENSE_MODULES = ("attn", "mlp")
MOE_MODULES = ("attn", "moe_router", "moe_preprocess", "moe_dispatch", "experts", "moe_combine")


def graphed(graphs: Array | None, module: str) -> Array:
    """Per candidate: is ``module`` inside the CUDA-graph scope (index into CUDA_GRAPHS)?  'layer' captures every
    module of a layer, 'full_iteration' the whole step."""
    g = np.zeros(1, dtype=np.int64) if graphs is None else np.asarray(graphs).astype(np.int64)
    hit = np.array([module in CUDA_GRAPHS[i].split("+") or CUDA_GRAPHS[i] in ("layer", "full_iteration")
                    for i in range(len(CUDA_GRAPHS))])
    return hit[g]


def layer_host_seconds(device: str, modules: tuple[str, ...], graphs: Array | None, local_experts: Array | float,
                       shared: bool = False) -> Array:
    """Host seconds to issue one layer's forward for one micro-batch: its modules' ops (a graphed module one op)
    plus TE's per-expert GEMM launches (two grouped linears) where the layer has experts."""
    h, fig = HOST_OVERHEAD.op_seconds(device), HOST_OVERHEAD
    names = modules + (("shared_experts",) if shared else ())
    total: Array = np.zeros_like(np.asarray(local_experts, dtype=float) + (0.0 if graphs is None else 0.0 * graphs))
    for m in names:
        plain, te = fig.module_ops[m]
        ops = plain + fig.te_module_ops * te
        total = total + h * np.where(graphed(graphs, m), 1.0, ops)
    if "experts" in modules:
        total = total + fig.launch_s * 2.0 * np.asarray(local_experts, dtype=float) * ~graphed(graphs, "experts")
    return total


def layer_exposed(device: str, host_f: Array, gpu_f: Array, gpu_b: Array, graphs: Array | None, *, sync: bool,
                  full_recompute: Array, overlap: Array | None = None) -> tuple[Array, Array]:
    """(forward, backward) host seconds one layer exposes per micro-batch (module docstring): the host's excess
    over the GPU, plus, at a dispatcher's synchronisation, its idle and the first op issued after it.  With the
    EP all-to-all overlap (``overlap``) one micro-batch's forward and another's backward are issued together,
    so their host and GPU times are compared summed (the excess charged to the backward)."""
    h, fig = HOST_OVERHEAD.op_seconds(device), HOST_OVERHEAD
    host_b = fig.backward_ops * host_f + np.where(full_recompute, host_f, 0.0)
    exp_f = np.maximum(0.0, host_f - gpu_f)
    exp_b = np.maximum(0.0, host_b - gpu_b)
    if overlap is not None:
        merged = np.maximum(0.0, host_f + host_b - gpu_f - gpu_b)
        exp_f, exp_b = np.where(overlap, 0.0, exp_f), np.where(overlap, merged, exp_b)
    if sync:
        exp_f = exp_f + fig.sync_s + h
    whole = _full_iteration(graphs)
    return np.where(whole, 0.0, exp_f), np.where(whole, 0.0, exp_b)


def _full_iteration(graphs: Array | None) -> Array:
    g = np.zeros(1, dtype=np.int64) if graphs is None else np.asarray(graphs).astype(np.int64)
    return g == CUDA_GRAPHS.index("full_iteration")
