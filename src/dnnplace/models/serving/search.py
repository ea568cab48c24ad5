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
from dnnplace.models.serving.evaluation import cached_times, evaluate, iteration, link_between
from dnnplace.models.serving.memory import stage_memory
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, ServingProblem, Stage

__all__ = ["assign_gpus", "best_replica", "search"]

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


def _split(p: ServingProblem, stages: list[_Unit], seqs: int, mbt: int) -> tuple[float, tuple[int, ...]]:
    """The DP: the smallest bottleneck time holding ``seqs`` sequences of KV, and its split."""
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
        m0 = stage_memory(p, u.gpu, tp, 0, 0, i == 0, i == pp - 1, seqs, mbt)
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
    """(throughput, upper bound, replica) of one pipeline over ``stages`` in this order, over the batch grid."""
    best, bound, rep = 0.0, 0.0, None
    grid = _grid(mns)
    vals: list[tuple[int, float, float]] = []
    for b in grid:
        if p.workload.concurrency is not None and b > p.workload.concurrency:
            break
        t, layers = _split(p, stages, b, mbt)
        if not math.isfinite(t):
            break
        it = iteration(p, max(b / len(stages), 1.0), mbt)
        thr = it.decode / t
        vals.append((b, t, thr))
        if thr > best:
            best = thr
            rep = Replica(tuple(Stage(u.gpu, u.node, u.gpus, n) for u, n in zip(stages, layers)))
    for k, (b, t, _) in enumerate(vals):  # throughput in [b, next b) is at most tokens(next) / time(b)
        nxt = vals[k + 1][0] if k + 1 < len(vals) else b
        it = iteration(p, max(nxt / len(stages), 1.0), mbt)
        bound = max(bound, it.decode / t)
    return best, max(bound, best), rep


def search(p: ServingProblem, *, time_limit: float = 30.0, tp: int | None = None, pp: int | None = None,
           max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None) -> ServingPlan:
    """The best deployment found, with its status, bound and gap (``tp``/``pp``: pins)."""
    t0 = time.monotonic()
    mns = max_num_seqs or p.engine.max_num_seqs
    mbt = max_num_batched_tokens or p.engine.max_num_batched_tokens
    complete = True
    best_total, best_bound = 0.0, 0.0
    best_reps: tuple[Replica, ...] = ()
    candidates: list[tuple[float, tuple[Replica, ...]]] = []
    for t in _TPS if tp is None else (tp,):
        units = _units(p, t)
        keys = [k for k, v in units.items() if v]
        if not keys:
            continue
        counts = tuple(len(units[k]) for k in keys)
        memo: dict[tuple[int, ...], tuple[float, float, Replica | None]] = {}

        def replica_of(sub: tuple[int, ...], memo: dict[tuple[int, ...], tuple[float, float, Replica | None]] = memo,
                       units: dict[tuple[int, str], list[_Unit]] = units,
                       keys: list[tuple[int, str]] = keys) -> tuple[float, float, Replica | None]:
            nonlocal complete
            if sub in memo:
                return memo[sub]
            kinds = [i for i, c in enumerate(sub) if c]
            out: tuple[float, float, Replica | None] = (0.0, 0.0, None)
            size = sum(sub)
            if (pp is None or size == pp) and size <= p.model.num_layers:
                for order in itertools.permutations(kinds):
                    if time.monotonic() - t0 > time_limit:
                        complete = False
                        break
                    stages = [u for i in order for u in units[keys[i]][:sub[i]]]
                    v, bd, rep = best_replica(p, stages, mns, mbt)
                    if v > out[0]:
                        out = (v, max(bd, out[1]), rep)
                    else:
                        out = (out[0], max(out[1], bd), out[2])
            memo[sub] = out
            return out

        # replicas over the multiset of units: best(S) = max over sub-multisets R of S of value(R) + best(S - R)
        best: dict[tuple[int, ...], tuple[float, float, tuple[Replica, ...]]] = {}
        for state in itertools.product(*[range(c + 1) for c in counts]):
            if not any(state):
                best[state] = (0.0, 0.0, ())
                continue
            top: tuple[float, float, tuple[Replica, ...]] = (0.0, 0.0, ())
            first = next(i for i, c in enumerate(state) if c)
            for sub in itertools.product(*[range(c + 1) for c in state]):
                if sub[first] == 0:  # the replica holding the first remaining unit kind: each split once
                    continue
                v, bd, rep = replica_of(sub)
                rest = tuple(a - b for a, b in zip(state, sub))
                rv, rb, rr = best[rest]
                cand_v = v + rv
                top = (max(top[0], cand_v), max(top[1], bd + rb), top[2])
                if cand_v > 0 and cand_v >= top[0] and rep is not None:
                    top = (cand_v, top[1], (rep, *rr))
                elif cand_v > 0 and cand_v >= top[0] and rep is None:
                    top = (cand_v, top[1], rr)
            # leaving units idle is allowed: best(state) >= best(state with one unit fewer)
            for i, c in enumerate(state):
                if c:
                    less = tuple(c2 - (1 if j == i else 0) for j, c2 in enumerate(state))
                    if best[less][0] > top[0]:
                        top = (best[less][0], max(top[1], best[less][1]), best[less][2])
            best[state] = top
            if state == counts:  # the whole fleet: each first replica with the best of the rest is a candidate
                for sub in itertools.product(*[range(c + 1) for c in state]):
                    found = replica_of(sub) if sub[first] else (0.0, 0.0, None)
                    if found[2] is not None:
                        others = best[tuple(a - b for a, b in zip(state, sub))]
                        candidates.append((found[0] + others[0], (found[2], *others[2])))
            if time.monotonic() - t0 > time_limit:
                complete = False
                break
        full = best.get(counts) or max(best.values(), key=lambda x: x[0])
        if full[0] > best_total:
            best_total, best_reps = full[0], full[2]
        candidates.append((full[0], full[2]))
        best_bound = max(best_bound, full[1])
    runtime = time.monotonic() - t0
    cfg = ServingConfig(assign_gpus(p, best_reps), mns, mbt)
    if not best_reps:
        return ServingPlan(cfg, "infeasible", None, None, runtime, {"complete": complete, "runner_ups": []})
    value = evaluate(p, cfg).output_tokens_per_s
    bound = max(best_bound, value)
    gap = (bound - value) / bound if bound > 0 else 0.0
    status = "optimal" if complete and gap < 1e-9 else "feasible"
    return ServingPlan(cfg, status, bound, gap, runtime,
                       {"complete": complete, "runner_ups": _runner_ups(p, cfg, candidates, mns, mbt)})


def assign_gpus(p: ServingProblem, reps: tuple[Replica, ...]) -> tuple[Replica, ...]:
    """The replicas on distinct physical GPUs: the search counts units of each (node, kind) and prices a
    replica on the first ones; here each stage takes the next unused unit of its node and kind, in order."""
    taken: dict[tuple[int, str], int] = {}
    out = []
    for r in reps:
        stages = []
        for s in r.stages:
            pool = [g.index for g in p.fleet.nodes[s.node].kinds()[s.gpu]]
            at = taken.get((s.node, s.gpu), 0)
            taken[(s.node, s.gpu)] = at + s.tp
            stages.append(Stage(s.gpu, s.node, tuple(pool[at:at + s.tp]), s.layers))
        out.append(Replica(tuple(stages)))
    return tuple(out)


def _runner_ups(p: ServingProblem, plan: ServingConfig, candidates: list[tuple[float, tuple[Replica, ...]]],
                mns: int, mbt: int, count: int = 5) -> list[ServingConfig]:
    """Up to ``count`` distinct deployments after the plan, best first (each re-priced by the evaluator): what
    a user weighs against it when the error band cannot order them."""
    seen = {plan.replicas}
    ranked: list[tuple[float, ServingConfig]] = []
    for _, reps in sorted(candidates, key=lambda c: -c[0]):
        cfg = ServingConfig(assign_gpus(p, reps), mns, mbt)
        if not reps or cfg.replicas in seen:
            continue
        seen.add(cfg.replicas)
        ev = evaluate(p, cfg)
        if ev.fits:
            ranked.append((ev.output_tokens_per_s, cfg))
        if len(ranked) >= 4 * count:
            break
    return [c for _, c in sorted(ranked, key=lambda x: -x[0])[:count]]
