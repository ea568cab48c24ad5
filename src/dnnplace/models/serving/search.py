"""The deployment search: replicas, stage orders, TP and batch limits, each split by the exact DP.

Why this shape: given a replica's stages in order and its batch, the DP's split is optimal; the
search enumerates what the DP takes as given -- the TP size (uniform per replica, as every engine
demands), how the fleet's stage units group into replicas (a DP over the multiset of units: replicas
are independent, their throughputs add), the order of GPU kinds along a pipeline (every permutation
of the kinds, each kind's stages kept contiguous) and the number of sequences in flight (a grid; the
interval bound between grid points gives the plan's ``bound`` and ``gap``).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from dnnplace.models.serving.cost import p2p_time
from dnnplace.models.serving.dp import range_costs, split_dp
from dnnplace.models.serving.evaluation import cached_times, evaluate, evaluate_replica, iteration, link_between
from dnnplace.models.serving.memory import stage_memory
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, ServingProblem, Stage

__all__ = ["best_replica", "search"]

_TPS = (1, 2, 4, 8)


@dataclass(frozen=True)
class _Unit:
    """A stage's GPUs: one kind on one node (key), ``tp`` physical indices."""

    gpu: str
    node: int
    gpus: tuple[int, ...]

    @property
    def key(self) -> tuple[int, str]:
        return (self.node, self.gpu)


def _units(p: ServingProblem, tp: int) -> dict[tuple[int, str], list[_Unit]]:
    out: dict[tuple[int, str], list[_Unit]] = {}
    for n, node in enumerate(p.fleet.nodes):
        for name, gpus in node.kinds().items():
            idx = [g.index for g in gpus]
            out[(n, name)] = [_Unit(name, n, tuple(idx[i:i + tp])) for i in range(0, len(idx) - tp + 1, tp)]
    return out


def _split(p: ServingProblem, stages: list[_Unit], seqs: int, mbt: int,
           mns: int | None = None) -> tuple[float, tuple[int, ...]]:
    """The DP: the smallest bottleneck time holding ``seqs`` sequences of KV, and its split (memory as
    :func:`evaluate` sizes it: activations and logits at the engine's ``mns`` sequences)."""
    n = p.model.num_layers
    pp = len(stages)
    per_mb = max(seqs / pp, 1.0)
    it = iteration(p, per_mb, mbt)
    per_seq = math.ceil((p.workload.isl + p.workload.osl / 2) / p.block) * p.block
    need = seqs * per_seq
    costs = []
    lo, hi = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    for i, u in enumerate(stages):
        tp = len(u.gpus)
        link = "pcie" if p.fleet.nodes[u.node].link == "pcie" else "nvlink"
        lt = cached_times(p, u.gpu, tp, it, p.engine.framework, link)
        prefix = np.concatenate([[0.0], np.cumsum(lt.per_layer)])
        fixed = lt.head if i == pp - 1 else 0.0
        if i < pp - 1:
            a = Stage(u.gpu, u.node, u.gpus, 1)
            b = Stage(stages[i + 1].gpu, stages[i + 1].node, stages[i + 1].gpus, 1)
            fixed += float(p2p_time(u.gpu, it.tokens * p.model.hidden * 2.0, link_between(p, a, b),
                                    p.fleet.network_bandwidth, p.fleet.network_latency_s).seconds[0])
        m0 = stage_memory(p, u.gpu, tp, 0, 0, i == 0, i == pp - 1, mns or seqs, mbt)
        wpre = np.concatenate([[0.0], np.cumsum(p.model.weight_bytes)]) / tp
        kpre = np.concatenate([[0.0], np.cumsum(p.model.kv_per_gpu(tp))])
        free = m0.kv_free - (wpre[hi] - wpre[lo])
        ok = free >= need * (kpre[hi] - kpre[lo])
        costs.append(range_costs(prefix, fixed, ok))
    s = split_dp(costs)
    return s.value, s.layers


def _grid(limit: int) -> list[int]:
    g = sorted({1, *[int(2 ** (k / 2)) for k in range(0, 2 * int(math.log2(max(limit, 1))) + 2)], limit})
    return [b for b in g if b <= limit]


def best_replica(p: ServingProblem, stages: list[_Unit], mns: int, mbt: int) -> tuple[float, float, Replica | None]:
    """(throughput, upper bound, replica) of one pipeline over ``stages`` in this order, exact over the batch.

    Why exact: the DP's smallest bottleneck time ``t(c)`` holding ``c`` sequences grows with ``c``, and
    the decode tokens of an iteration grow with ``c``, so no split running ``c`` in ``[a, b)`` beats
    ``decode(b - 1) / t(a)``.  The batch grid is refined (branch and bound) until every interval's bound
    is below the best evaluated split; each candidate split is priced by :func:`evaluate_replica`, the
    one evaluator, at the batch its KV cache really holds.
    """
    pp = len(stages)
    limit = mns if p.workload.concurrency is None else min(mns, p.workload.concurrency)
    t_of: dict[int, float] = {}
    best, rep = 0.0, None
    tried: set[tuple[int, ...]] = set()

    def probe(b: int) -> float:
        nonlocal best, rep
        if b not in t_of:
            t, layers = _split(p, stages, b, mbt, mns)
            t_of[b] = t
            if math.isfinite(t) and layers not in tried:
                tried.add(layers)
                r = Replica(tuple(Stage(u.gpu, u.node, u.gpus, n) for u, n in zip(stages, layers)))
                v = evaluate_replica(p, r, mns, mbt).tokens_per_s
                if v > best:
                    best, rep = v, r
        return t_of[b]

    def ub(a: int, b: int) -> float:  # a bound on any split running a batch in [a, b]
        t = probe(a)
        return iteration(p, max(b / pp, 1.0), mbt).decode / t if math.isfinite(t) else 0.0

    grid = _grid(limit)
    stack = list(zip(grid, grid[1:] + [grid[-1] + 1]))
    bound = 0.0
    while stack:
        a, b = stack.pop()
        u = ub(a, b - 1)
        if u <= best * (1 + 1e-12) or u == 0.0:
            continue
        if b - a <= 1:
            bound = max(bound, u)  # a single batch: its bound stands only if its own split does not reach it
            continue
        mid = (a + b) // 2
        stack += [(a, mid), (mid, b)]
    return best, max(bound, best), rep


def _place(p: ServingProblem, reps: tuple[Replica, ...]) -> tuple[Replica, ...]:
    """Physical GPUs for the chosen replicas: each (node, kind)'s GPUs in index order, the widest TP
    groups first (aligned), so no GPU serves two stages (the search priced stages by kind, not index)."""
    pools = {(n, name): [g.index for g in gpus] for n, node in enumerate(p.fleet.nodes)
             for name, gpus in node.kinds().items()}
    out: list[Replica | None] = [None] * len(reps)
    for k in sorted(range(len(reps)), key=lambda k: -reps[k].tp):
        stages = []
        for s in reps[k].stages:
            pool = pools[(s.node, s.gpu)]
            stages.append(Stage(s.gpu, s.node, tuple(pool[:s.tp]), s.layers))
            del pool[:s.tp]
        out[k] = Replica(tuple(stages))
    return tuple(r for r in out if r is not None)


def search(p: ServingProblem, *, time_limit: float = 30.0, tp: int | None = None, pp: int | None = None,
           max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None) -> ServingPlan:
    """The best deployment found, with its status, bound and gap (``tp``/``pp``: pins)."""
    t0 = time.monotonic()
    mns = max_num_seqs or p.engine.max_num_seqs
    mbt = max_num_batched_tokens or p.engine.max_num_batched_tokens
    complete = True
    tps = _TPS if tp is None else (tp,)
    by_tp = {t: _units(p, t) for t in tps}
    keys = [k for k, v in _units(p, 1).items() if v]
    counts = tuple(len(_units(p, 1)[k]) for k in keys)
    memo: dict[tuple[tuple[int, ...], int], tuple[float, float, Replica | None]] = {}

    def replica_of(sub: tuple[int, ...], t: int) -> tuple[float, float, Replica | None]:
        """The best pipeline of TP ``t`` over ``sub`` GPUs per (node, kind): every order of the kinds."""
        nonlocal complete
        if (sub, t) in memo:
            return memo[(sub, t)]
        kinds = [i for i, c in enumerate(sub) if c]
        out: tuple[float, float, Replica | None] = (0.0, 0.0, None)
        size = sum(sub) // t
        if (pp is None or size == pp) and size <= p.model.num_layers:
            for order in itertools.permutations(kinds):
                if time.monotonic() - t0 > time_limit:
                    complete = False
                    break
                stages = [u for i in order for u in by_tp[t][keys[i]][:sub[i] // t]]
                v, bd, rep = best_replica(p, stages, mns, mbt)
                out = (v, max(bd, out[1]), rep) if v > out[0] else (out[0], max(out[1], bd), out[2])
        memo[(sub, t)] = out
        return out

    # replicas over the multiset of GPUs (each replica one TP, replicas may differ):
    # best(S) = max over R within S (R holding a GPU of S's first kind, so each split is seen once) of
    # value(R) + best(S - R), and best(S) >= best(S less one GPU) (GPUs may idle)
    best: dict[tuple[int, ...], tuple[float, float, tuple[Replica, ...]]] = {}
    for state in itertools.product(*[range(c + 1) for c in counts]):
        if not any(state):
            best[state] = (0.0, 0.0, ())
            continue
        top: tuple[float, float, tuple[Replica, ...]] = (0.0, 0.0, ())
        first = next(i for i, c in enumerate(state) if c)
        for t in tps:
            for sub in itertools.product(*[range(0, c + 1, t) for c in state]):
                if sub[first] == 0:
                    continue
                v, bd, rep = replica_of(sub, t)
                rv, rb, rr = best[tuple(x - y for x, y in zip(state, sub))]
                cand = v + rv
                top = (top[0], max(top[1], bd + rb), top[2])
                if cand > top[0] and rep is not None:
                    top = (cand, top[1], (rep, *rr))
        for i, c in enumerate(state):
            if c:
                less = best[tuple(c2 - (1 if j == i else 0) for j, c2 in enumerate(state))]
                top = (less[0], max(top[1], less[1]), less[2]) if less[0] > top[0] else \
                    (top[0], max(top[1], less[1]), top[2])
        best[state] = top
        if time.monotonic() - t0 > time_limit:
            complete = False
            break
    full = best.get(counts) or max(best.values(), key=lambda x: x[0])
    best_total, best_bound, best_reps = full[0], full[1], _place(p, full[2])
    runtime = time.monotonic() - t0
    cfg = ServingConfig(tuple(best_reps), mns, mbt)
    if not best_reps:
        return ServingPlan(cfg, "infeasible", None, None, runtime)
    value = evaluate(p, cfg).output_tokens_per_s
    bound = max(best_bound, value)
    gap = (bound - value) / bound if bound > 0 else 0.0
    status = "optimal" if complete and gap < 1e-9 else "feasible"
    return ServingPlan(cfg, status, bound, gap, runtime, {"complete": complete})
