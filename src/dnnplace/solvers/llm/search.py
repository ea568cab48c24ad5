"""Branch and bound over Megatron's parallel configurations, priced by the one LLM evaluator.

1. Build every base configuration (tp, pp, cp, dp, mbs, vp, recompute, distributed optimizer) as
   named columns, one knob at a time (:func:`base_columns`): each knob's natural values (the
   divisors of what the GPUs or the batch leave, or its pin), then the rule set
   (:mod:`dnnplace.model.llm_rules`) filters the rows as soon as the columns a rule reads exist.
   The input limits are checked first (:func:`check_problem`), and a space too large to search is
   refused before it is built.
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

The time limit is checked between the knobs of step 1, between the batches of step 2 and after
every evaluated batch of step 3; a search it stops says ``time_limit`` with the bound not yet
explored, never ``optimal``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable

import numpy as np

from dnnplace.errors import DnnplaceError
from dnnplace.evaluation.llm import memory, schedule
from dnnplace.evaluation.llm import moe as moe_cost
from dnnplace.evaluation.llm.rules import CONFIG_RULES, check_config, check_problem, filter_rows
from dnnplace.evaluation.llm.step import (
    BatchResult,
    Candidates,
    StageCosts,
    estimate_at,
    evaluate_batch,
    p2p_time,
    split_lower_bound,
    stage_costs,
    take_rows,
)
from dnnplace.model.llm import RECOMPUTE, LLMPlan, LLMProblem, ParallelConfig
from dnnplace.model.llm_config import check_pins, pin_fields
from dnnplace.model.llm_rules import describe_removed, problem_columns

ProgressFn = Callable[[float, float, str], None]
Columns = dict[str, np.ndarray]
FIXABLE = tuple(f.name for f in pin_fields())
CHUNK_ROWS = 20000  # candidate rows evaluated per numpy batch
BOUND_ROWS = 200_000  # base configurations bounded per numpy batch
BOUND_CELLS = 2e6  # the first bounding batch, in split rows x ranks (then paced by the clock)
EVAL_CELLS = 2e5  # the first pricing batch, in schedule tasks (then paced by the clock)
MAX_BASES = 2_000_000  # base configurations one search may hold (a few hundred MB of columns and bounds)


def _expert_knobs(problem: LLMProblem) -> tuple[str, ...]:
    """Knobs a problem leaves no choice in: the expert-parallel ones of a dense model (the rules force them)."""
    return () if problem.arch.num_experts > 1 else ("ep", "etp", "dispatcher", "recompute_modules", "a2a_overlap")


class _Clock:
    """The search's deadline (``None``: no limit)."""

    def __init__(self, time_limit: float | None) -> None:
        self.started = time.perf_counter()
        self.limit = time_limit

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def over(self) -> bool:
        return self.limit is not None and self.elapsed() > self.limit


class _Pace:
    """Work per numpy batch, in cells (a row weighs what the cost model does for it: its layer splits times
    its pipeline ranks, or its schedule's tasks), so the clock is read every ``target`` seconds or so from the
    first call on: a batch sized in rows alone could take minutes on one deep, many-micro-batch shape."""

    def __init__(self, start: float, target: float = 0.25, cap: float = 2e9) -> None:
        self.budget, self.target, self.cap = start, target, cap

    def take(self, cum: np.ndarray, lo: int) -> int:
        """The end of the next batch from row ``lo`` (``cum``: the rows' running weight, from 0): as many
        rows as the budget holds, at least one."""
        hi = int(np.searchsorted(cum, cum[lo] + self.budget, side="right")) - 1
        return max(hi, lo + 1)

    def timed(self, work: float, seconds: float) -> None:
        if work and seconds > self.target:
            self.budget = max(1.0, work * self.target / seconds)
        elif work >= self.budget / 2 and seconds < self.target / 4:
            self.budget = min(self.cap, 2 * self.budget)


def _tasks(cols: Columns, problem: LLMProblem) -> np.ndarray:
    """Per base configuration, about how many schedule tasks one of its candidates costs to price: the exact
    run up to the schedule's limit, else its three shorter runs to the steady state (:func:`schedule.makespan`)."""
    pp, vp = cols["pp"].astype(float), cols["vp"].astype(float)
    m = problem.job.global_batch / np.maximum(1.0, cols["dp"] * cols["mbs"])
    exact = 2 * pp * vp * m
    unit, g = np.where(vp > 1, pp, 1.0), np.where(vp > 1, 2.0, pp + 2)
    runs = 3 * 2 * pp * vp * unit * (g + 1)
    return np.where(exact <= schedule.MAX_EXACT_TASKS, exact, np.minimum(exact, runs)) + 8.0


class _TimeUp(Exception):
    """The deadline passed while the space was still being built or bounded."""


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _expand(cols: Columns, name: str, keys: np.ndarray, options: Callable[[int], list[int]]) -> Columns:
    """Each row repeated once per value of knob ``name`` (``options(key)`` for the row's key), in order."""
    table = {int(k): np.asarray(options(int(k)), dtype=np.int64) for k in np.unique(keys)}
    if len(table) == 1:  # the same values for every row: no loop over the rows
        (values,) = table.values()
        rows = np.repeat(np.arange(len(keys)), len(values))
        return {**{k: v[rows] for k, v in cols.items()}, name: np.tile(values, len(keys))}
    parts = [table[int(k)] for k in keys.tolist()]
    counts = np.array([len(p) for p in parts], dtype=np.int64)
    rows = np.repeat(np.arange(len(keys)), counts)
    out = {k: v[rows] for k, v in cols.items()}
    out[name] = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return out


def base_columns(problem: LLMProblem, fixed: dict[str, object], clock: _Clock | None = None,
                 removed: Counter[str] | None = None, emptied: list[str] | None = None,
                 floor: list[float] | None = None) -> Columns:
    """Every base configuration the rules allow, honouring ``fixed``, as named columns (module docstring).

    Knobs are added in the order tp, pp, cp (dp follows), mbs, vp, recompute, distributed optimizer,
    each row's values ascending: ties between equal bounds go to the earlier row.
    """
    clock = clock or _Clock(None)
    removed = removed if removed is not None else Counter()
    n, gbs = problem.cluster.gpus, problem.job.global_batch
    L = problem.arch.num_layers
    pcols = problem_columns(problem)

    def pin_or(name: str, values: list[int]) -> list[int]:
        return [int(fixed[name])] if name in fixed else values  # type: ignore[call-overload]

    def divisors_or_one(k: int, total: int) -> list[int]:
        return _divisors(total // k) if k >= 1 and total % k == 0 else [1]  # [1]: the rules say why not

    cols: Columns = {"tp": np.array(pin_or("tp", _divisors(n)), dtype=np.int64)}
    have = {"tp"}

    def keep() -> None:
        nonlocal cols
        if clock.over():
            raise _TimeUp
        mask = filter_rows(CONFIG_RULES, {**pcols, **cols}, len(cols["tp"]), have, removed, emptied)
        cols = {k: v[mask] for k, v in cols.items()}

    keep()
    cols = _expand(cols, "pp", cols["tp"], lambda t: pin_or("pp", divisors_or_one(t, n)))
    have.add("pp")
    keep()
    cols = _expand(cols, "cp", cols["tp"] * cols["pp"], lambda tp_pp: pin_or("cp", divisors_or_one(tp_pp, n)))
    cols["dp"] = n // (cols["tp"] * cols["pp"] * cols["cp"])
    cols["sequence_parallel"] = cols["tp"] > 1
    have |= {"cp", "dp", "sequence_parallel"}
    if "dp" in fixed:
        ok = cols["dp"] == fixed["dp"]
        if not ok.all():
            removed["pinned dp"] += int(np.count_nonzero(~ok))
        if emptied is not None and len(ok) and not ok.any():
            emptied.append("pinned dp")
        cols = {k: v[ok] for k, v in cols.items()}
    keep()
    cols = _expand(cols, "mbs", cols["dp"], lambda dp: pin_or("mbs", divisors_or_one(dp, gbs)))
    have.add("mbs")
    keep()
    vp_choices = {int(p): pin_or("vp", list(range(1, L // p + 1)) or [1]) for p in np.unique(cols["pp"])}
    rc = [RECOMPUTE.index(str(fixed["recompute"]))] if "recompute" in fixed else [0, 1, 2]
    dist = [bool(fixed["distributed_optimizer"])] if "distributed_optimizer" in fixed else [True, False]
    size = sum(len(vp_choices[int(p)]) for p in cols["pp"]) * len(rc) * len(dist)
    if size > MAX_BASES:
        raise DnnplaceError(f"the decision space holds {size:,} base configurations (more than {MAX_BASES:,}): "
                            "pin some knobs (--fix tp=...,pp=...)")
    cols = _expand(cols, "vp", cols["pp"], lambda p: vp_choices[p])
    have.add("vp")
    keep()
    cols = _expand(cols, "recompute", np.zeros(len(cols["tp"]), dtype=np.int64), lambda _: rc)
    have.add("recompute")
    cols = _expand(cols, "distributed_optimizer", np.zeros(len(cols["tp"]), dtype=np.int64),
                   lambda _: [int(d) for d in dist])
    cols["distributed_optimizer"] = cols["distributed_optimizer"].astype(bool)
    have.add("distributed_optimizer")
    keep()
    if problem.moe is not None:
        cols = _expert_columns(problem, fixed, cols, have, keep_fn=lambda c: _keep(c, pcols, have, removed, emptied,
                                                                                     clock), clock=clock, floor=floor,
                               removed=removed, emptied=emptied)
    return cols


#: The recompute-module sets the search tries with recompute=selective (Megatron's default core_attn, each
#: MoE-specific module alone, and the recipes' combinations); a pinned set is taken as given.  Not every one of
#: the 128 subsets: the search is exhaustive over these.
SEARCHED_MODULE_SETS = ("none", "moe_act", "mla_up_proj", "mlp", "moe", "moe_act+layernorm", "mla_up_proj+mlp",
                        "mla_up_proj+mlp+moe", "moe_act+layernorm+mla_up_proj")


def _keep(cols: Columns, pcols: dict, have: set[str], removed: Counter[str], emptied: list[str] | None,
          clock: _Clock) -> Columns:
    if clock.over():
        raise _TimeUp
    mask = filter_rows(CONFIG_RULES, {**pcols, **cols}, len(cols["tp"]), have, removed, emptied)
    return {k: v[mask] for k, v in cols.items()}


def _expert_columns(problem: LLMProblem, fixed: dict[str, object], cols: Columns, have: set[str],
                    keep_fn: Callable[[Columns], Columns], clock: _Clock | None = None,
                    floor: list[float] | None = None, removed: Counter[str] | None = None,
                    emptied: list[str] | None = None) -> Columns:
    """An MoE model's expert-parallel knobs, one at a time, each filtered by the rules: ep (divisors of the
    experts), etp (up to a node), the dispatcher, the all-to-all overlap, the recompute modules.

    When the last three would take the space past ``MOE_MAX_BASES``, only the bases of the smallest relaxed
    bounds are expanded (:func:`_moe_best_bases`) and the bound of the others is appended to ``floor``."""
    from dnnplace.model.moe_knobs import DISPATCHERS, MODULE_SETS

    n, gpn, e = problem.cluster.gpus, problem.cluster.gpus_per_node, problem.moe.moe.num_experts
    zero = lambda: np.zeros(len(cols["tp"]), dtype=np.int64)  # noqa: E731
    ep = [int(fixed["ep"])] if "ep" in fixed else [d for d in _divisors(math.gcd(e, n))]  # type: ignore
    etp = [int(fixed["etp"])] if "etp" in fixed else [d for d in _divisors(n) if d <= gpn]  # type: ignore
    cols = _expert_grid(problem, cols, ep, etp, removed, emptied)
    have |= {"ep", "etp"}
    cols = keep_fn(cols)
    size = len(cols["tp"]) * len(DISPATCHERS) * 2 * len(SEARCHED_MODULE_SETS)
    if size > MOE_MAX_BASES and not {"dispatcher", "recompute_modules", "a2a_overlap"} <= set(fixed):
        union = 1  # core_attn: what selective recompute without modules reruns
        for name in ([str(fixed["recompute_modules"])] if "recompute_modules" in fixed else SEARCHED_MODULE_SETS):
            union |= MODULE_SETS.index(name)
        cols, theta = _moe_best_bases(problem, cols, clock or _Clock(None), MOE_CHILDREN, union)
        if floor is not None:
            floor.append(theta)
    disp = [DISPATCHERS.index(str(fixed["dispatcher"]))] if "dispatcher" in fixed else list(range(len(DISPATCHERS)))
    cols = _expand(cols, "dispatcher", zero(), lambda _: disp)
    have.add("dispatcher")
    cols = keep_fn(cols)
    a2a = [int(bool(fixed["a2a_overlap"]))] if "a2a_overlap" in fixed else [0, 1]
    cols = _expand(cols, "a2a_overlap", zero(), lambda _: a2a)
    cols["a2a_overlap"] = cols["a2a_overlap"].astype(bool)
    mods = ([MODULE_SETS.index(str(fixed["recompute_modules"]))] if "recompute_modules" in fixed
            else [MODULE_SETS.index(x) for x in SEARCHED_MODULE_SETS])
    cols = _expand(cols, "recompute_modules", cols["recompute"], lambda r: mods if r == 1 else [0])
    have |= {"a2a_overlap", "recompute_modules"}
    return keep_fn(cols)


#: Past this many configurations with the expert knobs, :func:`_moe_best_bases` expands only the bases of the
#: smallest relaxed bounds, up to ``MOE_CHILDREN`` expert-knob configurations.
MOE_MAX_BASES = MAX_BASES
MOE_CHILDREN = 800_000


#: The columns a layer's costs depend on (``stage_costs`` reads no others but dp, for the micro-batch count).
_LAYER_KEYS = ("tp", "cp", "mbs", "sequence_parallel", "recompute", "ep", "etp", "dispatcher", "recompute_modules",
               "a2a_overlap")


def _shared_stage_costs(problem: LLMProblem, cols: Columns, rows: np.ndarray) -> StageCosts:
    """``stage_costs`` of ``rows``, computed once per distinct layer (bases differing only in pp, vp, dp and
    the optimizer share their per-layer costs), with each row's own micro-batch count."""
    key = np.zeros(len(rows), dtype=np.int64)
    for k in _LAYER_KEYS:  # one mixed-radix code over the columns' own (few) values
        values, code = np.unique(cols[k][rows], return_inverse=True)
        key = key * len(values) + code.reshape(-1)
    _, first, back = np.unique(key, return_index=True, return_inverse=True)
    uniq = stage_costs(problem, as_candidates(cols, rows[first], np.zeros((len(first), 1))))
    shared = take_rows(uniq, back.reshape(-1))
    m = problem.job.global_batch / (cols["dp"][rows] * cols["mbs"][rows]).astype(float)
    return dataclasses.replace(shared, m=m)


#: The knobs ep, etp and the average rank's static memory depend on among the bases' (the rest are mbs, vp,
#: recompute): the expert grid is expanded and pruned once per distinct value of these, then joined back.
_GRID_KEYS = ("tp", "pp", "cp", "dp", "sequence_parallel", "distributed_optimizer")


def _expert_grid(problem: LLMProblem, cols: Columns, ep: list[int], etp: list[int],
                 removed: Counter[str] | None = None, emptied: list[str] | None = None) -> Columns:
    """Every base times every (ep, etp) the rules on those columns allow and whose average rank's weights,
    gradients and optimizer state fit (``static_memory_lb``: a proven prune, none of the knobs still to come
    changes them), each base's (ep, etp) in ascending order.  Worked out once per distinct
    :data:`_GRID_KEYS` value and joined back, so the columns are copied once."""
    key = np.zeros(len(cols["tp"]), dtype=np.int64)
    for k in _GRID_KEYS:
        values, code = np.unique(cols[k], return_inverse=True)
        key = key * len(values) + code.reshape(-1)
    _, first, back = np.unique(key, return_index=True, return_inverse=True)
    back = back.reshape(-1)
    u = len(first)
    grid: Columns = {k: cols[k][first] for k in _GRID_KEYS}
    grid.update(vp=np.ones(u, dtype=np.int64), mbs=np.ones(u, dtype=np.int64), recompute=np.zeros(u, dtype=np.int64),
                _id=np.arange(u))
    pcols, have = problem_columns(problem), set(_GRID_KEYS)
    for name, values in (("ep", ep), ("etp", etp)):
        grid = _expand(grid, name, np.zeros(len(grid["tp"]), dtype=np.int64), lambda _, v=values: v)
        have.add(name)
        mask = filter_rows(CONFIG_RULES, {**pcols, **grid}, len(grid["tp"]), have,
                           removed if removed is not None else Counter(), emptied)
        grid = {k: v[mask] for k, v in grid.items()}
    if len(grid["tp"]):
        fits = static_memory_lb(problem, as_candidates(grid, np.arange(len(grid["tp"])),
                                                       np.zeros((len(grid["tp"]), 1))))
        grid = {k: v[fits <= problem.device.usable_memory_bytes] for k, v in grid.items()}
    counts = np.bincount(grid["_id"], minlength=u)  # grid rows are in _id order already
    starts = np.concatenate([[0], np.cumsum(counts)])
    per = counts[back]
    rows = np.repeat(np.arange(len(back)), per)
    offset = np.arange(len(rows)) - np.repeat(np.cumsum(per) - per, per)
    at = starts[back][rows] + offset
    out = {k: v[rows] for k, v in cols.items()}
    out["ep"], out["etp"] = grid["ep"][at], grid["etp"][at]
    return out


def _relaxed(cols: Columns) -> Columns:
    """The bases' relaxation (:func:`_moe_best_bases`): fastest dispatcher, overlap wherever allowed, no modules."""
    n = len(cols["tp"])
    full = cols["recompute"] == 2  # full recompute has no modules and no overlap: priced as it is
    overlap = (cols["ep"] > 1) & ((cols["pp"] == 1) | (cols["vp"] > 1)) & ~full  # where the rules allow it
    return {**cols, "dispatcher": np.full(n, -1, dtype=np.int64), "a2a_overlap": overlap,
            "recompute_modules": np.zeros(n, dtype=np.int64), "recompute": np.where(full, 2, 0)}


def _moe_best_bases(problem: LLMProblem, cols: Columns, clock: _Clock, budget: int,
                    modules: int) -> tuple[Columns, float]:
    """The bases (every knob but the dispatcher, the all-to-all overlap and the recompute modules) whose relaxed
    bound is smallest, up to ``budget`` expert-knob children, and a proven lower bound on the step time of
    every configuration of the others.

    The relaxation prices each base with the fastest dispatcher (``dispatch_times``' negative index), the
    all-to-all overlap on wherever the rules allow it (it only hides communication) and selective
    recomputation as none (its modules only add forward reruns; full recomputation is priced as it is,
    it has no modules and no overlap): every term of the cost model is no larger than with any value of
    those knobs, and the bound of :func:`lower_bounds` is non-decreasing in the terms, so a base's relaxed
    bound is below the step time of every configuration it expands into.  Bases that cannot fit whatever
    the split and the recompute modules (of the bit mask ``modules``) are dropped
    (``moe_memory_lower_bound``); the returned floor is the smallest relaxed bound of the bases left out
    (inf if none).
    """
    from dnnplace.evaluation.llm.moe_step import moe_memory_lower_bound
    from dnnplace.model.moe_knobs import DISPATCHERS

    n = len(cols["tp"])
    relaxed = _relaxed(cols)
    lb = np.empty(n)
    for lo in range(0, n, BOUND_ROWS):
        if clock.over():
            raise _TimeUp
        rows = np.arange(lo, min(lo + BOUND_ROWS, n))
        lb[rows] = lower_bounds(problem, relaxed, rows, costs=_shared_stage_costs(problem, relaxed, rows))[0]
        mem = moe_memory_lower_bound(problem, as_candidates(cols, rows, np.zeros((len(rows), 1))), modules)
        lb[rows] = np.where(mem > problem.device.usable_memory_bytes, np.inf, lb[rows])
    order = np.argsort(lb, kind="stable")
    order = order[np.isfinite(lb[order])]
    children = np.where(cols["recompute"][order] == 1, len(SEARCHED_MODULE_SETS), 1) * len(DISPATCHERS) * 2
    keep = max(int(np.searchsorted(np.cumsum(children), budget, side="right")), min(1, len(order)))
    theta = float(lb[order[keep]]) if keep < len(order) else math.inf
    rows = np.sort(order[:keep])
    return {k: v[rows] for k, v in cols.items()}, theta


def _moe_fitting(problem: LLMProblem, cols: Columns, own: np.ndarray, layers: np.ndarray) -> np.ndarray:
    """Which (configuration, split) rows of an MoE model fit in memory (a dense model: all of them, unchanged).

    Their memory alone is cheap beside the schedules, and for an MoE model most rows a search reaches do not
    fit (activations of every dispatched copy): the search prices only those that do.  A row that does not fit
    is never the plan, so the result is unchanged; only the message when nothing fits is built from the bound.
    """
    if problem.moe is None:
        return np.ones(len(own), dtype=bool)
    from dnnplace.evaluation.llm.step import moe_peak_memory

    return moe_peak_memory(problem, as_candidates(cols, own, layers)) <= problem.device.usable_memory_bytes


def as_candidates(cols: Columns, rows: np.ndarray, layers: np.ndarray) -> Candidates:
    """Rows of named columns as the cost model's :class:`Candidates` (the one place its field names are mapped)."""
    def num(name: str) -> np.ndarray:
        return cols[name][rows].astype(float)

    names = (("ep", "ep"), ("etp", "etp"), ("dispatcher", "dispatcher"), ("modules", "recompute_modules"))
    expert = {k: (num(c) if c in cols else None) for k, c in names}
    a2a = cols["a2a_overlap"][rows].astype(bool) if "a2a_overlap" in cols else None
    return Candidates(tp=num("tp"), pp=num("pp"), vp=num("vp"), cp=num("cp"), dp=num("dp"), mbs=num("mbs"),
                      recompute=num("recompute"), sp=cols["sequence_parallel"][rows].astype(bool),
                      dist=cols["distributed_optimizer"][rows].astype(bool), rank_layers=layers, a2a=a2a, **expert)


def lower_bounds(problem: LLMProblem, cols: Columns, rows: np.ndarray,
                 split_rows: dict[tuple[int, int], np.ndarray] | None = None,
                 costs: StageCosts | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Proven lower bounds on the step time of each base configuration over all its layer splits:
    infinite where no split can fit (:func:`static_memory_lb`), and the time bound alone (``costs``: the
    rows' :func:`stage_costs`, when the caller has them)."""
    L = problem.arch.num_layers
    pp, vp = cols["pp"][rows].astype(float), cols["vp"][rows].astype(float)
    c = as_candidates(cols, rows, np.zeros((len(rows), 1)))
    costs = costs if costs is not None else stage_costs(problem, c)
    layer, first, last = costs.per_layer(), costs.extras("first"), costs.extras("last")
    total = costs.layers_work(np.full(len(rows), float(L))) + first + last  # an MoE model: its exact layer mix
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
    shard = np.where(c.dist, c.dp * c.cp, 1.0)
    if problem.moe is not None:  # the same average over an MoE model's parts (its experts sharded over edp)
        mm = problem.moe
        ep, etp, _, _, _ = c.expert()
        attn = moe_cost.attention_params(mm, c.tp)
        params = (mm.moe.num_dense_layers * (attn + moe_cost.dense_mlp_params(mm, c.tp))
                  + mm.moe.num_moe_layers * (attn + moe_cost.moe_dense_params(mm, c.tp))
                  + memory.embedding_params(a, c.tp) + memory.head_params(a, c.tp, c.pp)) / c.pp
        experts = moe_cost.expert_params(mm, np.full(len(c), float(mm.moe.num_moe_layers)), ep, etp) / c.pp
        eshard = np.where(c.dist, problem.cluster.gpus / (c.pp * ep * etp), 1.0)
        return ((memory.WEIGHT_BYTES + memory.GRAD_BYTES + memory.OPTIMIZER_BYTES / shard) * params
                + (memory.WEIGHT_BYTES + memory.GRAD_BYTES + memory.OPTIMIZER_BYTES / eshard) * experts
                + memory.BUFFER_FIXED_BYTES)
    params = (a.num_layers * memory.layer_params(a, c.tp) + memory.embedding_params(a, c.tp)
              + memory.head_params(a, c.tp, c.pp)) / c.pp
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
    clock = _Clock(time_limit)
    check_problem(problem)
    fixed = check_pins(dict(fixed or {}))
    removed: Counter[str] = Counter()
    emptied: list[str] = []
    floor: list[float] = []  # proven bounds of the MoE bases left unexpanded (_moe_best_bases)
    try:
        cols = base_columns(problem, fixed, clock, removed, emptied, floor)
    except _TimeUp:
        raise DnnplaceError(_out_of_time(time_limit, "while the configurations were enumerated")) from None
    L = problem.arch.num_layers
    B = len(cols["tp"])
    split_rows: dict[tuple[int, int], np.ndarray] = {}
    for key in sorted(set(zip(cols["pp"].tolist(), cols["vp"].tolist(), strict=True))):
        if clock.over():
            raise DnnplaceError(_out_of_time(time_limit, "while the layer splits were enumerated"))
        split_rows[key] = splits(L, *key)
    has_split = np.array([len(split_rows[(p, v)]) > 0 for p, v in zip(cols["pp"].tolist(), cols["vp"].tolist(),
                                                                        strict=True)], dtype=bool)
    if B and not has_split.all():
        removed["split_family"] += int(np.count_nonzero(~has_split))
        if not has_split.any():
            emptied.append("split_family")
        cols = {k: v[has_split] for k, v in cols.items()}
        B = len(cols["tp"])
    if not B:
        raise DnnplaceError(_why_empty(problem, fixed, removed, emptied[-1] if emptied else None))
    lb, lb_time = np.empty(B), np.empty(B)
    bound_w = np.array([len(split_rows[(p, v)]) * p + 8.0 for p, v in zip(cols["pp"].tolist(), cols["vp"].tolist(),
                                                                       strict=True)])
    bound_cum, bound_pace, lo = np.concatenate([[0.0], np.cumsum(bound_w)]), _Pace(BOUND_CELLS), 0
    while lo < B:
        if clock.over():
            raise DnnplaceError(_out_of_time(time_limit, f"while {B:,} configurations were bounded"))
        rows = np.arange(lo, min(bound_pace.take(bound_cum, lo), lo + BOUND_ROWS, B))
        t0 = time.perf_counter()
        lb[rows], lb_time[rows] = lower_bounds(problem, cols, rows, split_rows)
        bound_pace.timed(float(bound_cum[rows[-1] + 1] - bound_cum[lo]), time.perf_counter() - t0)
        lo += len(rows)
    order = np.argsort(lb, kind="stable")
    best_t, best_bad_t = math.inf, math.inf
    best: tuple[Candidates, BatchResult, int] | None = None
    best_bad: tuple[Candidates, BatchResult, int] | None = None
    status, exhaustive = "optimal", True
    pending = math.inf  # the smallest bound of a chunk the clock stopped half-way
    pace = _Pace(EVAL_CELLS)
    tasks = _tasks(cols, problem)
    i = 0
    while i < len(order) and lb[order[i]] < best_t:
        if clock.over():
            status, exhaustive = "time_limit", False
            break
        groups: dict[int, list[tuple[np.ndarray, int]]] = {}
        count = 0
        while i < len(order) and count < pace.budget and lb[order[i]] < best_t:
            k = int(order[i])
            s = split_rows[(int(cols["pp"][k]), int(cols["vp"][k]))]
            groups.setdefault(int(cols["pp"][k]), []).append((s, k))
            count += len(s) * tasks[k]
            i += 1
        priced = False  # at least one batch per round, so that every round makes progress
        for parts in groups.values():  # one batch per pipeline depth: arrays as wide as pp, no wider
            layers = np.concatenate([s for s, _ in parts]).astype(float)
            own = np.concatenate([np.full(len(s), k) for s, k in parts])
            keep = _moe_fitting(problem, cols, own, layers)  # an MoE model: only the rows that fit are priced
            own, layers = own[keep], layers[keep]
            own_cum = np.concatenate([[0.0], np.cumsum(tasks[own])])
            lo = 0
            while lo < len(own):  # a long split list in slices, the clock between them
                if priced and clock.over():
                    pending = min(float(lb[k]) for ps in groups.values() for _, k in ps)
                    break
                hi = min(pace.take(own_cum, lo), lo + CHUNK_ROWS)
                cand = as_candidates(cols, own[lo:hi], layers[lo:hi])
                t0 = time.perf_counter()
                try:
                    with schedule.deadline(clock.over if clock.limit is not None else None):
                        res = evaluate_batch(problem, cand)
                except schedule.OutOfTime:  # the limit passed inside one long pricing: as at the check above
                    pending = min(float(lb[k]) for ps in groups.values() for _, k in ps)
                    break
                priced = True
                pace.timed(float(own_cum[min(hi, len(own))] - own_cum[lo]), time.perf_counter() - t0)
                lo = hi
                step = np.where(res.fits, res.step, np.inf)
                j = int(np.argmin(step))
                if step[j] < best_t:
                    best_t, best = float(step[j]), (cand, res, j)
                jb = int(np.argmin(res.step))
                if res.step[jb] < best_bad_t:
                    best_bad_t, best_bad = float(res.step[jb]), (cand, res, jb)
            if pending < math.inf:
                status, exhaustive = "time_limit", False
                break
        if progress is not None:
            progress(i, len(order), f"{i} of {len(order)} configurations")
        if status == "time_limit":
            break
    if floor and best_t > min(floor):  # an unexpanded base might hold a faster plan: say so with its bound
        if best is None and status == "optimal":  # the space ran out, not the clock
            raise DnnplaceError(f"none of the {len(order):,} expanded configurations fits and the others (bound "
                                f"{min(floor):.3g} s) were not expanded: pin some knobs (--fix ep=...,etp=...)")
        if best is not None:
            status, exhaustive, pending = "time_limit", False, min(pending, min(floor))
    if best is None:
        if status == "time_limit":
            raise DnnplaceError(_out_of_time(time_limit, f"before a configuration that fits was found ({i:,} of "
                                                         f"{len(order):,} explored)"))
        if best_bad is None:  # every configuration was proven not to fit: price the fastest for the message
            k = int(np.argmin(lb_time))
            s = split_rows[(int(cols["pp"][k]), int(cols["vp"][k]))][:CHUNK_ROWS].astype(float)
            cand = as_candidates(cols, np.full(len(s), k), s)
            res = evaluate_batch(problem, cand)
            best_bad = (cand, res, int(np.argmin(res.step)))
        raise DnnplaceError(_nothing_fits(problem, *best_bad))
    cand, res, j = best
    bound = best_t
    if status != "optimal":
        bound = min(best_t, pending, float(lb[order[i:]].min()) if i < len(order) else math.inf)
    if status == "optimal" and all(k in fixed for k in FIXABLE if k != "dp" and k not in _expert_knobs(problem)):
        status, exhaustive = "fixed", False
    config = cand.config(j)
    check_config(problem, config)
    return LLMPlan(problem, config, estimate_at(problem, res, j), status=status, bound=bound,
                   gap=(best_t - bound) / best_t if best_t > 0 else 0.0, exhaustive=exhaustive,
                   runtime_s=clock.elapsed())


def _describe(c: ParallelConfig) -> str:
    return ", ".join(f"{k}={getattr(c, k)}" for k in ("tp", "pp", "vp", "cp", "dp", "mbs", "recompute"))


def _gb(x: float) -> str:
    return f"{x / 1e9:,.1f}" if x < 1e21 else f"{x / 1e9:.3g}"


def _nothing_fits(problem: LLMProblem, cand: Candidates, res: BatchResult, j: int) -> str:
    """One short line: the fastest configuration, its memory, and the largest part of it."""
    est = estimate_at(problem, res, j)
    part = est.overflow or max(est.memory_breakdown, key=lambda k: est.memory_breakdown[k])
    return (f"no configuration fits in {_gb(problem.device.usable_memory_bytes)} GB per GPU on "
            f"{problem.device.name}; the fastest, {_describe(cand.config(j))}, needs "
            f"{_gb(est.memory_per_gpu_bytes)} GB; largest: {part} {_gb(est.memory_breakdown[part])} GB")


def _out_of_time(time_limit: float | None, when: str) -> str:
    return f"the time limit of {time_limit:g} s ran out {when}; no plan to return (raise --time-limit)"


def _why_empty(problem: LLMProblem, fixed: dict[str, object], removed: Counter[str], last: str | None) -> str:
    """No configuration left: say which rule removed the last candidates (and the most common ones)."""
    n, j = problem.cluster.gpus, problem.job
    what = ", ".join(f"{k}={v}" for k, v in fixed.items()) or "no fixed values"
    return (f"no valid configuration for {n} GPUs, batch {j.global_batch}, seq {j.seq_len} ({what}): "
            + describe_removed(removed, last))
