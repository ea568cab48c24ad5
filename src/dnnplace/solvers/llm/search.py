"""Branch and bound over Megatron's parallel configurations, priced by the one LLM evaluator.

1. Enumerate every base configuration (tp, pp, vp, cp, dp, mbs, recompute,
   distributed optimizer) that Megatron's rules allow (:mod:`..rules`).
2. Bound each one from below with the evaluator's own per-layer and
   embedding / LM-head costs (:func:`stage_costs`): whatever the layer split, the
   slowest pipeline rank takes at least the average of the ranks and at least the
   first / last extras plus vp layers, and the step time is non-decreasing in the
   slowest rank (:func:`schedule.pipeline_time`); the data-parallel tail and the
   optimizer (>= 0) are left out.  A proven lower bound.
3. In increasing bound order, expand a base configuration into every layer split
   of the family Megatron expresses (:func:`splits`: first and last rank free, the
   middle ranks equal; equal chunks but for a shorter first / last virtual stage)
   and evaluate them all (:func:`evaluate_batch`).  Exact enumeration, so the best
   split is optimal; stop when the next bound is no better than the best plan.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable

import numpy as np

from dnnplace.errors import DnnplaceError
from dnnplace.evaluation.llm import memory, schedule
from dnnplace.evaluation.llm.rules import check_config, check_problem
from dnnplace.evaluation.llm.step import (
    Candidates,
    estimate_at,
    evaluate_batch,
    overflow_text,
    p2p_time,
    split_lower_bound,
    stage_costs,
)
from dnnplace.model.llm import RECOMPUTE, LLMPlan, LLMProblem

ProgressFn = Callable[[float, float, str], None]
FIXABLE = ("tp", "pp", "vp", "cp", "mbs", "recompute", "dp", "distributed_optimizer")
KNOBS = ("tp", "pp", "vp", "cp", "mbs", "recompute", "distributed_optimizer")  # all pinned: status "fixed"
CHUNK_ROWS = 20000  # candidate rows evaluated per numpy batch


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _check_fixed(problem: LLMProblem, fixed: dict[str, object]) -> None:
    unknown = sorted(set(fixed) - set(FIXABLE))
    if unknown:
        raise DnnplaceError(f"cannot fix {', '.join(unknown)}; fixable: {', '.join(FIXABLE)}")
    for k, v in fixed.items():
        if k == "recompute":
            if v not in RECOMPUTE:
                raise DnnplaceError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {v!r}")
        elif k == "distributed_optimizer":
            if not isinstance(v, bool):
                raise DnnplaceError(f"distributed_optimizer must be true or false, got {v!r}")
        elif isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise DnnplaceError(f"fixed {k} must be a positive integer, got {v!r}")
    n = problem.cluster.gpus
    prod = 1
    for k in ("tp", "pp", "cp", "dp"):
        prod *= int(fixed.get(k, 1))  # type: ignore[call-overload]
    if n % prod:
        raise DnnplaceError(f"fixed {'*'.join(k for k in ('tp', 'pp', 'cp', 'dp') if k in fixed)} = {prod} "
                            f"does not divide {n} GPUs")


def base_configs(problem: LLMProblem, fixed: dict[str, object]) -> list[tuple[int, ...]]:
    """(tp, pp, vp, cp, dp, mbs, recompute, dist) tuples Megatron allows, honouring ``fixed``."""
    a, n, j, gpn = problem.arch, problem.cluster.gpus, problem.job, problem.cluster.gpus_per_node

    def opts(name: str, values: list[int]) -> list[int]:
        return [int(fixed[name])] if name in fixed else values  # type: ignore[call-overload]

    out: list[tuple[int, ...]] = []
    for tp in opts("tp", [t for t in _divisors(a.heads) if a.kv_heads % t == 0 and t <= gpn]):
        if n % tp or a.heads % tp or a.kv_heads % tp:
            continue
        for pp in opts("pp", [p for p in _divisors(n // tp) if p <= a.num_layers]):
            if n % (tp * pp) or pp > a.num_layers:
                continue
            for cp in opts("cp", _divisors(n // (tp * pp))):
                if n % (tp * pp * cp) or (cp > 1 and j.seq_len % (2 * cp)) or (j.seq_len // cp) % tp:
                    continue
                dp = n // (tp * pp * cp)
                if "dp" in fixed and fixed["dp"] != dp or j.global_batch % dp:
                    continue
                # any chunk count that gives every virtual stage a layer (uneven chunks: see splits)
                vps = [v for v in range(1, a.num_layers // pp + 1) if v == 1 or pp >= 2]
                for mbs in opts("mbs", _divisors(j.global_batch // dp)):
                    if j.global_batch % (dp * mbs):
                        continue
                    m = j.global_batch // (dp * mbs)
                    for vp in opts("vp", vps):
                        if vp > 1 and (pp < 2 or m % pp or vp * pp > a.num_layers):
                            continue
                        rcs = [RECOMPUTE.index(str(fixed["recompute"]))] if "recompute" in fixed else [0, 1, 2]
                        dists = [int(bool(fixed["distributed_optimizer"]))] if "distributed_optimizer" in fixed \
                            else [1, 0]
                        out.extend((tp, pp, vp, cp, dp, mbs, rc, d) for rc, d in itertools.product(rcs, dists))
    return out


def _as_candidates(base: np.ndarray, layers: np.ndarray) -> Candidates:
    f = base.astype(float)
    return Candidates(f[:, 0], f[:, 1], f[:, 2], f[:, 3], f[:, 4], f[:, 5], f[:, 6], f[:, 0] > 1,
                      base[:, 7].astype(bool), layers)


def lower_bounds(problem: LLMProblem, base: np.ndarray,
                 split_rows: dict[tuple[int, int], np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Proven lower bounds on the step time of each base configuration over all its layer splits:
    infinite where no split can fit (:func:`static_memory_lb`), and the time bound alone."""
    L = problem.arch.num_layers
    pp, vp = base[:, 1].astype(float), base[:, 2].astype(float)
    dummy = np.zeros((len(base), 1))
    c = _as_candidates(base, dummy)
    costs = stage_costs(problem, c)
    layer, first, last = costs.per_layer(), costs.extras("first"), costs.extras("last")
    total = L * layer + first + last
    one = np.where(pp == 1, total, 0.0)
    lb_max = np.maximum.reduce([total / pp, first + vp * layer, last + vp * layer, one])
    p2p = p2p_time(problem, c, costs.tokens)
    lb = schedule.pipeline_time(lb_max, total, costs.m, vp) + schedule.pp_exposed(p2p, c.pp, c.vp, costs.m)
    if split_rows is not None:  # the schedule over the splits the search may choose (a proven bound)
        lb = np.maximum(lb, split_lower_bound(costs, c, p2p, split_rows))
    return np.where(static_memory_lb(problem, c) > problem.device.usable_memory_bytes, np.inf, lb), lb


def static_memory_lb(problem: LLMProblem, c: Candidates) -> np.ndarray:
    """Proven lower bound on the peak memory of any split: the average rank's weights, gradients and
    optimizer state plus the fixed buffer allowance (the fullest rank holds at least the average)."""
    a = problem.arch
    params = (a.num_layers * memory.layer_params(a, c.tp) + memory.embedding_params(a, c.tp)
              + memory.head_params(a, c.tp, c.pp)) / c.pp
    shard = np.where(c.dist, c.dp * c.cp, 1.0)
    return (memory.WEIGHT_BYTES + memory.GRAD_BYTES + memory.OPTIMIZER_BYTES / shard) * params \
        + memory.BUFFER_FIXED_BYTES


def splits(L: int, pp: int, vp: int) -> np.ndarray:
    """Every per-rank layer count of the family Megatron expresses: rows (first, middle..., last).

    Without interleaving (vp = 1): first and last rank free, the middle ranks equal
    (``--decoder-first/last-pipeline-num-layers``).  Interleaved: every virtual stage holds the
    same k layers but the first and the last, which may hold fewer (at least one) -- the split
    NeMo's account-for-embedding/loss options give (126 layers on pp 8 x vp 8: 1, 2, ..., 2, 1),
    written with ``--pipeline-model-parallel-layout``.  Chunks of unequal size inside the
    interleaved schedule are left out: its closed form (:mod:`..schedule`) holds for equal
    chunks, and the simulated schedule shows such splits slower than the formula says.
    """
    if pp == 1:
        return np.array([[L]])
    if vp == 1:
        f = np.arange(1, L)
        if pp == 2:
            return np.stack([f, L - f], axis=1)
        ff, ll = np.meshgrid(f, f, indexing="ij")
        rest = L - ff - ll
        ok = (rest >= pp - 2) & (rest % (pp - 2) == 0)
        ff, ll, mid = ff[ok], ll[ok], rest[ok] // (pp - 2)
        return np.concatenate([ff[:, None], np.repeat(mid[:, None], pp - 2, axis=1), ll[:, None]], axis=1)
    rows = []
    n = pp * vp
    for k in range(1, L // max(n - 2, 1) + 2):
        for short_first in range(k):
            short_last = n * k - short_first - L
            if 0 <= short_last < k:
                rows.append([vp * k - short_first] + [vp * k] * (pp - 2) + [vp * k - short_last])
    return np.array(rows, dtype=np.int64).reshape(-1, pp)


def search(problem: LLMProblem, fixed: dict[str, object] | None = None, time_limit: float | None = None,
           progress: ProgressFn | None = None) -> LLMPlan:
    """The fastest configuration that fits, with status / bound / gap (module docstring)."""
    started = time.perf_counter()
    fixed = dict(fixed or {})
    check_problem(problem)
    _check_fixed(problem, fixed)
    bases = base_configs(problem, fixed)
    if not bases:
        raise DnnplaceError(_why_empty(problem, fixed))
    L = problem.arch.num_layers
    split_rows = {key: splits(L, *key) for key in {(b[1], b[2]) for b in bases}}
    bases = [b for b in bases if len(split_rows[(b[1], b[2])])]  # a layer split of the family exists
    if not bases:
        raise DnnplaceError(_why_empty(problem, fixed))
    base = np.array(bases, dtype=np.int64)
    lb, lb_time = lower_bounds(problem, base, split_rows)
    order = np.argsort(lb, kind="stable")
    best_t, best, best_bad = math.inf, None, None
    best_bad_t = math.inf
    done = 0
    status, exhaustive = "optimal", True
    i = 0
    while i < len(order):
        if lb[order[i]] >= best_t:
            break
        if best is not None and time_limit is not None and time.perf_counter() - started > time_limit:
            status, exhaustive = "time_limit", False
            break
        groups: dict[int, list[tuple[np.ndarray, int]]] = {}
        count = 0
        while i < len(order) and count < CHUNK_ROWS and lb[order[i]] < best_t:
            k = order[i]
            s = split_rows[(int(base[k, 1]), int(base[k, 2]))]
            groups.setdefault(int(base[k, 1]), []).append((s, k))
            count += len(s)
            i += 1
        if not groups:
            break
        for parts in groups.values():  # one batch per pipeline depth: arrays as wide as pp, no wider
            layers = np.concatenate([s for s, _ in parts]).astype(float)
            own = np.concatenate([np.full(len(s), k) for s, k in parts])
            cand = _as_candidates(base[own], layers)
            res = evaluate_batch(problem, cand)
            step = np.where(res.fits, res.step, np.inf)
            j = int(np.argmin(step))
            if step[j] < best_t:
                best_t, best = float(step[j]), (cand, res, j)
            jb = int(np.argmin(res.step))
            if res.step[jb] < best_bad_t:
                best_bad_t, best_bad = float(res.step[jb]), (cand, res, jb)
        done = i
        if progress is not None:
            progress(done, len(order), f"{done} of {len(order)} configurations")
    if best is None:
        if best_bad is None:  # every configuration was proven not to fit: price the fastest for the message
            k = int(np.argmin(lb_time))
            s = split_rows[(int(base[k, 1]), int(base[k, 2]))].astype(float)
            cand = _as_candidates(base[np.full(len(s), k)], s)
            res = evaluate_batch(problem, cand)
            best_bad = (cand, res, int(np.argmin(res.step)))
        cand, res, j = best_bad
        raise DnnplaceError(f"no configuration fits; the fastest, {_describe(cand.config(j))}, "
                            + overflow_text(problem, estimate_at(problem, res, j)))
    cand, res, j = best
    remaining = lb[order[i:]] if i < len(order) else np.array([math.inf])
    bound = min(best_t, float(remaining.min())) if status != "optimal" else best_t
    if status == "optimal" and all(k in fixed for k in KNOBS):
        status, exhaustive = "fixed", False
    config = cand.config(j)
    check_config(problem, config)
    return LLMPlan(problem, config, estimate_at(problem, res, j), status=status, bound=bound,
                   gap=(best_t - bound) / best_t if best_t > 0 else 0.0, exhaustive=exhaustive,
                   runtime_s=time.perf_counter() - started)


def _describe(c: object) -> str:
    return ", ".join(f"{k}={getattr(c, k)}" for k in ("tp", "pp", "vp", "cp", "dp", "mbs", "recompute"))


def _why_empty(problem: LLMProblem, fixed: dict[str, object]) -> str:
    n, j = problem.cluster.gpus, problem.job
    if j.global_batch < n // (int(fixed.get("tp", 1)) * int(fixed.get("pp", 1))  # type: ignore[call-overload]
                              * int(fixed.get("cp", 1))) and "dp" in fixed:  # type: ignore[call-overload]
        return f"global batch {j.global_batch} is smaller than dp"
    what = ", ".join(f"{k}={v}" for k, v in fixed.items()) or "no fixed values"
    return (f"no valid configuration for {n} GPUs, global batch {j.global_batch}, seq {j.seq_len} ({what}): "
            "tp*pp*cp*dp must equal the GPUs, dp*mbs divide the global batch, tp divide the (kv) heads")
