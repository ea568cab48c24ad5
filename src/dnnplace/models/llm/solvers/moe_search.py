"""The expert-parallel knobs of the search: ep, etp, dispatcher, overlap, recompute modules, and the
bounded expansion of a mixture-of-experts space (the bases of the smallest relaxed bounds first)."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from dnnplace.models.llm.evaluation.candidates import take_rows
from dnnplace.models.llm.evaluation.rules import CONFIG_RULES, filter_rows
from dnnplace.models.llm.evaluation.step import (
    StageCosts,
    stage_costs,
)
from dnnplace.models.llm.rules import problem_columns
from dnnplace.models.llm.solvers.bounds import lower_bounds, static_memory_lb
from dnnplace.models.llm.solvers.grid import (
    BOUND_ROWS,
    MAX_BASES,
    Columns,
    _Clock,
    _divisors,
    _expand,
    _TimeUp,
    as_candidates,
    row_groups,
)
from dnnplace.models.llm.spec import LLMProblem

SEARCHED_MODULE_SETS = ("core_attn", "moe_act", "mla_up_proj", "mlp", "moe", "moe_act+layernorm", "mla_up_proj+mlp",
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
    from dnnplace.models.llm.moe_knobs import DISPATCHERS, MODULE_SETS

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
        cols, theta = _moe_best_bases(problem, cols, clock or _Clock(None), MOE_CHILDREN, union, removed, emptied)
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
    first, back = row_groups([cols[k][rows] for k in _LAYER_KEYS])
    uniq = stage_costs(problem, as_candidates(cols, rows[first], np.zeros((len(first), 1))))
    shared = take_rows(uniq, back)
    m = problem.job.global_batch / (cols["dp"][rows] * cols["mbs"][rows]).astype(float)
    return dataclasses.replace(shared, m=m)


#: The knobs ep, etp and the average rank's static memory depend on among the bases' (the rest are mbs, vp,
#: recompute): the expert grid is expanded and pruned once per distinct value of these, then joined back.
_GRID_KEYS = ("tp", "pp", "cp", "dp", "sequence_parallel", "distributed_optimizer")


def _constant(values: list[int]) -> Callable[[Any], list[int]]:
    """A value function for :func:`_expand` that gives every row the same choices."""
    return lambda _: values


def _expert_grid(problem: LLMProblem, cols: Columns, ep: list[int], etp: list[int],
                 removed: Counter[str] | None = None, emptied: list[str] | None = None) -> Columns:
    """Every base times every (ep, etp) the rules on those columns allow and whose average rank's weights,
    gradients and optimizer state fit (``static_memory_lb``: a proven prune, none of the knobs still to come
    changes them), each base's (ep, etp) in ascending order.  Worked out once per distinct
    :data:`_GRID_KEYS` value and joined back, so the columns are copied once."""
    first, back = row_groups([cols[k] for k in _GRID_KEYS])
    u = len(first)
    grid: Columns = {k: cols[k][first] for k in _GRID_KEYS}
    grid.update(vp=np.ones(u, dtype=np.int64), mbs=np.ones(u, dtype=np.int64), recompute=np.zeros(u, dtype=np.int64),
                _id=np.arange(u))
    pcols, have = problem_columns(problem), set(_GRID_KEYS)
    for name, choices in (("ep", ep), ("etp", etp)):
        grid = _expand(grid, name, np.zeros(len(grid["tp"]), dtype=np.int64), _constant(choices))
        have.add(name)
        mask = filter_rows(CONFIG_RULES, {**pcols, **grid}, len(grid["tp"]), have,
                           removed if removed is not None else Counter(), emptied)
        grid = {k: v[mask] for k, v in grid.items()}
    if len(grid["tp"]):
        need = static_memory_lb(problem, as_candidates(grid, np.arange(len(grid["tp"])),
                                                       np.zeros((len(grid["tp"]), 1))))
        ok = need <= problem.device.usable_memory_bytes
        _count_memory(ok, need, removed, emptied, "weights, gradients and optimizer state")
        if ok.any():  # else none fits: the search goes on to price the fastest as its answer (a --compare's
            grid = {k: v[ok] for k, v in grid.items()}  # fits: false, the plan's memory shortfall in numbers)
    counts = np.bincount(grid["_id"], minlength=u)  # grid rows are in _id order already
    starts = np.concatenate([[0], np.cumsum(counts)])
    per = counts[back]
    rows = np.repeat(np.arange(len(back)), per)
    offset = np.arange(len(rows)) - np.repeat(np.cumsum(per) - per, per)
    at = starts[back][rows] + offset
    out = {k: v[rows] for k, v in cols.items()}
    out["ep"], out["etp"] = grid["ep"][at], grid["etp"][at]
    return out


#: How a memory shortfall is named among the rules that emptied a search (``_why_empty`` says it as one).
MEMORY_SHORT = "memory"


def _count_memory(ok: np.ndarray, need: np.ndarray, removed: Counter[str] | None, emptied: list[str] | None,
                  what: str) -> None:
    """Count the rows a proven memory bound removed beside the rules' removals, and when it removed the last
    of them say so with the least memory any needed: an MoE model too large for its GPUs is a memory
    shortfall, not the rule that happened to remove the most rows before ("most removed: vp_needs_pp")."""
    gone = int(np.count_nonzero(~ok))
    if removed is not None and gone:
        removed[MEMORY_SHORT] += gone
    if emptied is not None and gone and not ok.any():
        emptied.append(f"{MEMORY_SHORT} {float(need.min()):.17g} {what}")


def _relaxed(cols: Columns) -> Columns:
    """The bases' relaxation (:func:`_moe_best_bases`): fastest dispatcher, overlap wherever allowed, no modules."""
    n = len(cols["tp"])
    full = cols["recompute"] == 2  # full recompute has no modules and no overlap: priced as it is
    overlap = (cols["ep"] > 1) & ((cols["pp"] == 1) | (cols["vp"] > 1)) & ~full  # where the rules allow it
    return {**cols, "dispatcher": np.full(n, -1, dtype=np.int64), "a2a_overlap": overlap,
            "recompute_modules": np.zeros(n, dtype=np.int64), "recompute": np.where(full, 2, 0)}


def _moe_best_bases(problem: LLMProblem, cols: Columns, clock: _Clock, budget: int, modules: int,
                    removed: Counter[str] | None = None, emptied: list[str] | None = None) -> tuple[Columns, float]:
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
    from dnnplace.models.llm.evaluation.moe_step import moe_memory_lower_bound
    from dnnplace.models.llm.moe_knobs import DISPATCHERS

    n = len(cols["tp"])
    relaxed = _relaxed(cols)
    lb, mem, bare = np.empty(n), np.empty(n), np.empty(n)  # bare: the time bound alone
    for lo in range(0, n, BOUND_ROWS):
        if clock.over():
            raise _TimeUp
        rows = np.arange(lo, min(lo + BOUND_ROWS, n))
        lb[rows], bare[rows] = lower_bounds(problem, relaxed, rows, costs=_shared_stage_costs(problem, relaxed, rows))
        mem[rows] = moe_memory_lower_bound(problem, as_candidates(cols, rows, np.zeros((len(rows), 1))), modules)
        lb[rows] = np.where(mem[rows] > problem.device.usable_memory_bytes, np.inf, lb[rows])
    fits = mem <= problem.device.usable_memory_bytes
    _count_memory(fits, mem, removed, emptied, "weights, optimizer state and one micro-batch of activations")
    if not fits.any():  # none can fit: keep the time bounds, so the fastest is priced as the search's answer
        lb = np.where(fits, lb, bare)
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
    from dnnplace.models.llm.evaluation.step import moe_peak_memory

    return moe_peak_memory(problem, as_candidates(cols, own, layers)) <= problem.device.usable_memory_bytes
