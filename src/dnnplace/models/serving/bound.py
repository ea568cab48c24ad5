"""An upper bound on any deployment's throughput from per-GPU prices: what a fleet too large for the exact
replica-partition DP can still claim.

Why it holds (every step is a relaxation of :func:`~dnnplace.models.serving.evaluation.evaluate_replica`):

1. A replica runs ``c`` sequences over ``pp`` stages of one TP size; its rate is ``x = decode(m) / T`` with
   ``m = max(c / pp, 1)`` and ``T`` its slowest stage time.  Stage ``i`` holding ``L_i`` layers takes at least
   ``L_i * tau_i(m)`` (``tau``: the smallest per-layer time of its GPU kind and TP at that micro-batch, its
   steps' shares of each step's smallest -- no layer's share-weighted time is smaller; the LM head and the
   activations' send only add), so ``L_i <= T / tau_i`` and, as ``sum L_i = n``,
   ``x = sum_i x L_i / n <= sum_i decode(m) / (n tau_i(m))``: each stage adds at most the rate its GPUs would
   serve holding every layer, at the replica's own iteration.
2. Which ``m`` can a replica run?  Every stage holds the KV of all ``c`` sequences for its layers:
   ``c * per_seq * kv(L_i) <= kv_free_i`` (each engine's rule gives a stage no more tokens than its own free
   memory, :func:`~dnnplace.models.serving.memory.stage_kv_tokens`), and ``kv_free_i`` is at most ``F`` -- the
   most a GPU of that kind and TP has free with no layer at all (weights only take).  Summed over the
   stages: ``c * per_seq * KV_n <= pp * F_max``, so ``m <= F_max / (per_seq * KV_n)`` with ``F_max`` the largest
   over the fleet's kinds at that TP; also ``c <= max_num_seqs`` (and the workload's concurrency), integer.
3. So a stage of kind ``k`` at TP ``t`` adds at most ``t * w_k``, ``w_k`` the best over TP sizes and reachable
   ``m`` (every ``c / pp``, none skipped) of ``decode(m) / (n tau_k,t(m) t)``, and replicas add: the fleet
   serves at most ``sum_k count_k * w_k``, wherever its replicas' stages sit (nodes only change links, which
   step 1 already dropped).  The iterations are the evaluator's own (same float arithmetic), every one
   reachable is priced, none interpolated between, so no monotonicity of the kernel tables is assumed.

What it ignores -- memory beyond the batch cap, the head, the sends, whole layers -- makes it loose (tens of
% on mixed fleets), never wrong; it is exact up to the layer-time cache, which prices an iteration whose
decode count rounds to the same 1e-3 with the first one it met.
"""

from __future__ import annotations

import math

import numpy as np

from dnnplace.models.serving.cost import Iteration, layer_times_matrix
from dnnplace.models.serving.evaluation import prompt_lumps, seq_cap, seq_tokens
from dnnplace.models.serving.memory import launch_memory, stage_memory
from dnnplace.models.serving.spec import ServingProblem

__all__ = ["per_gpu_bound", "per_gpu_rates"]




def _free_max(p: ServingProblem, kinds: list[str], tp: int, mns: int, mbt: int) -> float:
    """The most KV memory any GPU of these kinds at ``tp`` can have free (no layers; first/last either way; a
    launch sized by any of the fleet's GPUs no larger than it, the replica's smallest standing for SGLang's)."""
    fleet = {g.name for g in p.fleet.gpus} | set(kinds)
    return max(max(stage_memory(p, k, tp, 0, 0, f, la, mns, mbt, 1, launch_memory([g])).kv_free, 0.0)
               for k in kinds for g in fleet if launch_memory([g]) <= launch_memory([k])
               for f in (False, True) for la in (False, True))


def _iterations(p: ServingProblem, m_cap: float, limit: int, pps: range | tuple[int, ...],
                mbt: int) -> tuple[np.ndarray, list[Iteration], np.ndarray, np.ndarray, np.ndarray]:
    """Every micro-batch a replica of ``pp`` in ``pps`` stages may run, each once: ``m = max(c / pp, 1)`` for
    integer ``c`` up to ``limit`` and ``pp * m_cap``, and its steps by the evaluator's own
    :func:`~dnnplace.models.serving.evaluation.prompt_lumps`:
    (decode per micro-batch, the distinct steps, for each micro-batch the index of its lighter and heavier
    step and the heavier one's share)."""
    wl = p.workload
    ms: set[float] = set()
    for pp in pps:
        top = limit if math.isinf(m_cap) else min(limit, math.floor(pp * m_cap + 1e-9))
        if top >= 1:
            ms.update(np.maximum(np.arange(1, top + 1, dtype=float) / pp, 1.0).tolist())
    m = np.array(sorted(ms))
    if wl.phase == "decode":  # the evaluator's decode instance: every token decodes
        tokens = np.unique(np.minimum(m, float(mbt)))
        decode = tokens
    else:
        tokens = np.unique(np.minimum(m * (wl.isl + wl.osl) / wl.osl, float(mbt)))  # past the budget: all one
        decode = tokens * wl.osl / (wl.isl + wl.osl)
    prefill = tokens - decode
    kv = wl.held  # the evaluator's iteration attends over it
    lo, hi, share = prompt_lumps(wl.isl, decode, prefill, mbt)
    keys: dict[tuple[float, float], int] = {}
    at_lo, at_hi = np.empty(len(decode), dtype=int), np.empty(len(decode), dtype=int)
    for k, (d, a, b) in enumerate(zip(decode.tolist(), lo.tolist(), hi.tolist())):
        at_lo[k] = keys.setdefault((d, a), len(keys))
        at_hi[k] = keys.setdefault((d, b), len(keys))
    its = [Iteration(d, kv, x, wl.isl) for d, x in keys]
    return decode, its, at_lo, at_hi, share


def per_gpu_rates(p: ServingProblem, gpus: dict[str, int], mns: int, mbt: int, tps: tuple[int, ...],
                  pps: tuple[int, ...] | None = None) -> dict[str, float]:
    """``w_k`` of the module's argument per GPU kind (``gpus``: kind -> count in the fleet), tokens/s per GPU."""
    n = p.model.num_layers
    total = sum(gpus.values())
    deepest = max(range(1, min(n, total) + 1) if pps is None else pps)
    cap = seq_cap(p, deepest, mns)  # the largest any replica may run: a bound
    limit = cap if p.workload.concurrency is None else min(cap, p.workload.concurrency)
    per_seq = seq_tokens(p)
    links = sorted({"pcie" if node.link == "pcie" else "nvlink" for node in p.fleet.nodes if node.gpus})
    out = dict.fromkeys(gpus, 0.0)
    for tp in tps:
        kinds = [k for k, c in gpus.items() if c >= tp]
        if not kinds:
            continue
        kv_n = float(p.model.kv_per_gpu(tp).sum())
        m_cap = _free_max(p, kinds, tp, mns, mbt) / (per_seq * kv_n) if kv_n > 0 else math.inf
        decode, its, at_lo, at_hi, share = _iterations(p, m_cap, limit, range(1, min(n, total // tp) + 1)
                                                       if pps is None else pps, mbt)
        if not its:
            continue
        for k in kinds:
            for lk in links if tp > 1 else links[:1]:  # each node link the kind's TP groups may use
                per, _ = layer_times_matrix(p.model, k, tp, its, p.engine.framework, lk, p.kv_dtype)
                fastest = per.min(axis=1)
                # no layer of a micro-batch's steps is faster than their shares of each step's fastest layer
                tau = (1.0 - share) * fastest[at_lo] + share * fastest[at_hi]
                out[k] = max(out[k], float((decode / (n * tau)).max()) / tp)
    return out


def per_gpu_bound(p: ServingProblem, mns: int, mbt: int, tps: tuple[int, ...],
                  pps: tuple[int, ...] | None = None) -> float:
    """The fleet's throughput bound: each GPU at its kind's best per-GPU rate (the module's argument)."""
    counts: dict[str, int] = {}
    for g in p.fleet.gpus:
        counts[g.name] = counts.get(g.name, 0) + 1
    w = per_gpu_rates(p, counts, mns, mbt, tps, pps)
    return sum(w[k] * c for k, c in counts.items())
