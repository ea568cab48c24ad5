"""Branch and bound over Megatron's parallel configurations, priced by the one LLM evaluator.

1. Build every base configuration (tp, pp, cp, dp, mbs, vp, recompute, distributed optimizer) as
   named columns, one knob at a time (:func:`base_columns`): each knob's natural values (the
   divisors of what the GPUs or the batch leave, or its pin), then the rule set
   (:mod:`dnnplace.models.llm.rules`) filters the rows as soon as the columns a rule reads exist.
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

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.config import GRAD_DTYPES, check_pins, pin_fields
from dnnplace.models.llm.evaluation import fsdp, memory, offload, schedule
from dnnplace.models.llm.evaluation.rules import CONFIG_RULES, check_config, check_problem, filter_rows
from dnnplace.models.llm.evaluation.step import (
    BatchResult,
    Candidates,
    estimate_at,
    evaluate_batch,
    saved_layer_bytes,
)
from dnnplace.models.llm.rules import check_pin_set, describe_removed, problem_columns
from dnnplace.models.llm.solvers.bounds import lower_bounds, offload_room, state_floor, static_memory_lb
from dnnplace.models.llm.solvers.grid import (
    BOUND_ROWS,
    MAX_BASES,
    Columns,
    _Clock,
    _divisors,
    _expand,
    _Pace,
    _TimeUp,
    as_candidates,
    splits,
)
from dnnplace.models.llm.solvers.moe_search import MEMORY_SHORT, _expert_columns, _keep, _moe_fitting
from dnnplace.models.llm.spec import RECOMPUTE, LLMEstimate, LLMPlan, LLMProblem, ParallelConfig

ProgressFn = Callable[[float, float, str], None]
FIXABLE = tuple(f.name for f in pin_fields())
CHUNK_ROWS = 20000  # candidate rows evaluated per numpy batch
BOUND_CELLS = 2e6  # the first bounding batch, in split rows x ranks (then paced by the clock)
EVAL_CELLS = 2e5  # the first pricing batch, in schedule tasks (then paced by the clock)


def _expert_knobs(problem: LLMProblem) -> tuple[str, ...]:
    """Knobs a problem leaves no choice in: the expert-parallel ones of a dense model (the rules force them)."""
    return () if problem.arch.num_experts > 1 else ("ep", "etp", "dispatcher", "recompute_modules", "a2a_overlap")


def _tasks(cols: Columns, problem: LLMProblem) -> np.ndarray:
    """Per base configuration, about how many schedule tasks one of its candidates costs to price: the exact
    run up to the schedule's limit, else its three shorter runs to the steady state (:func:`schedule.makespan`)."""
    pp, vp = cols["pp"].astype(float), cols["vp"].astype(float)
    m = problem.job.global_batch / np.maximum(1.0, cols["dp"] * cols["mbs"])
    exact = 2 * pp * vp * m
    unit, g = np.where(vp > 1, pp, 1.0), np.where(vp > 1, 2.0, pp + 2)
    runs = 3 * 2 * pp * vp * unit * (g + 1)
    return np.where(exact <= schedule.MAX_EXACT_TASKS, exact, np.minimum(exact, runs)) + 8.0


def base_columns(problem: LLMProblem, fixed: dict[str, object], clock: _Clock | None = None,
                 removed: Counter[str] | None = None, emptied: list[str] | None = None,
                 floor: list[float] | None = None, offload: bool = True) -> Columns:
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
    zeros = _zero_choices(problem, fixed)
    size = sum(len(vp_choices[int(p)]) for p in cols["pp"]) * len(rc) * len(zeros)
    if size > MAX_BASES:
        raise DnnplaceError(f"the decision space holds {size:,} base configurations (more than {MAX_BASES:,}): "
                            "pin some knobs (--fix tp=...,pp=...,zero=...)")
    cols = _expand(cols, "vp", cols["pp"], lambda p: vp_choices[p])
    have.add("vp")
    keep()
    cols = _expand(cols, "recompute", np.zeros(len(cols["tp"]), dtype=np.int64), lambda _: rc)
    have.add("recompute")
    cols = _sharding_columns(fixed, cols, zeros)
    have |= {"zero", "distributed_optimizer", "grad_dtype", "cuda_graphs", "routing"}
    if "offload_layers" in fixed:  # a pinned offload: every candidate takes it (the rules say where it may)
        cols["offload_layers"] = np.full(len(cols["tp"]), int(fixed["offload_layers"]),  # type: ignore[call-overload]
                                         dtype=np.int64)
        have.add("offload_layers")
    elif offload and pcols["host_link"] and problem.moe is None:  # else 0 or the smallest N that fits
        cols["offload_free"] = np.ones(len(cols["tp"]), dtype=bool)
    keep()
    if problem.moe is not None:
        cols = _expert_columns(problem, fixed, cols, have, keep_fn=lambda c: _keep(c, pcols, have, removed, emptied,
                                                                                     clock), clock=clock, floor=floor,
                               removed=removed, emptied=emptied)
    return cols


def _zero_choices(problem: LLMProblem, fixed: dict[str, object]) -> list[int]:
    """The ZeRO stages the search tries: the pin, else every stage (0-1 only for a mixture of experts, whose
    cost terms price the distributed optimizer alone); a pinned distributed optimizer leaves its stages."""
    from dnnplace.models.llm.config import ZERO_STAGES

    if "zero" in fixed:
        return [int(fixed["zero"])]  # type: ignore[call-overload]
    stages = [z for z in ZERO_STAGES if problem.arch.num_experts == 1 or z < 2]
    if "distributed_optimizer" in fixed:
        stages = [z for z in stages if (z >= 1) == bool(fixed["distributed_optimizer"])]
    return stages or [0]


def _sharding_columns(fixed: dict[str, object], cols: Columns, zeros: list[int]) -> Columns:
    """The data-parallel sharding knobs: each ZeRO stage of ``zeros`` (ascending, so that ties go to the less
    sharded one), the distributed optimizer it means (or its pin, for the rules to check), and the gradient
    dtype (its pin, else fp32: a numerics choice the search does not make)."""
    from dnnplace.models.llm.config import CUDA_GRAPHS
    from dnnplace.models.llm.moe_knobs import ROUTINGS

    cols = _expand(cols, "zero", np.zeros(len(cols["tp"]), dtype=np.int64), lambda _: zeros)
    cols["distributed_optimizer"] = (np.full(len(cols["tp"]), bool(fixed["distributed_optimizer"]))
                                     if "distributed_optimizer" in fixed else cols["zero"] >= 1)
    grad = GRAD_DTYPES.index(str(fixed.get("grad_dtype", "fp32")))
    cols["grad_dtype"] = np.full(len(cols["tp"]), grad, dtype=np.int64)
    # The CUDA-graph scope: its pin, else none -- a choice of the software stack the recipe makes, not searched.
    graphs = CUDA_GRAPHS.index(str(fixed.get("cuda_graphs", "none")))
    cols["cuda_graphs"] = np.full(len(cols["tp"]), graphs, dtype=np.int64)
    # The MoE routing skew: its pin, else balanced -- a property of the run (is the router forced?), not searched.
    routing = ROUTINGS.index(str(fixed.get("routing", "balanced")))
    cols["routing"] = np.full(len(cols["tp"]), routing, dtype=np.int64)
    return cols


#: The recompute-module sets the search tries with recompute=selective (Megatron's default core_attn, each
#: MoE-specific module alone, and the recipes' combinations); a pinned set is taken as given.  Not every one of
#: the 128 subsets: the search is exhaustive over these.
@dataclass(frozen=True)
class RunnerUp:
    """One of the fastest configurations after the plan's own (each the best layer split of its knobs)."""

    config: ParallelConfig
    estimate: LLMEstimate


class _Runners:
    """The fastest ``count`` + 1 base configurations priced so far, each with its best fitting split; while it is
    full, the slowest of them is what a base's bound must beat to be priced (so that none of the true top
    ``count`` + 1 is pruned)."""

    def __init__(self, count: int) -> None:
        self.size = count + 1
        self.kept: dict[int, tuple[float, Candidates, BatchResult, int]] = {}

    def offer(self, own: np.ndarray, step: np.ndarray, cand: Candidates, res: BatchResult) -> None:
        ok = np.isfinite(step)
        if not ok.any():
            return
        rows = np.flatnonzero(ok)
        order = rows[np.lexsort((step[rows], own[rows]))]  # by base, fastest first
        first = order[np.r_[True, own[order][1:] != own[order][:-1]]]
        for j in first[np.argsort(step[first], kind="stable")][:self.size].tolist():
            k, t = int(own[j]), float(step[j])
            if k not in self.kept or t < self.kept[k][0]:
                self.kept[k] = (t, cand, res, j)
        if len(self.kept) > self.size:
            self.kept = dict(sorted(self.kept.items(), key=lambda kv: kv[1][0])[:self.size])

    def cut(self, best_t: float) -> float:
        if len(self.kept) < self.size:
            return math.inf
        return max(best_t, max(v[0] for v in self.kept.values()))

    def others(self, problem: LLMProblem, best: int) -> list[RunnerUp]:
        """The kept configurations but the plan's own base ``best``, fastest first."""
        out = sorted((v for k, v in self.kept.items() if k != best), key=lambda v: v[0])[:self.size - 1]
        return [RunnerUp(cand.config(j), estimate_at(problem, res, j)) for _, cand, res, j in out]


def search(problem: LLMProblem, fixed: dict[str, object] | None = None, time_limit: float | None = None,
           progress: ProgressFn | None = None) -> LLMPlan:
    """The fastest configuration that fits, with status / bound / gap (module docstring)."""
    return search_with_runner_ups(problem, fixed, time_limit, progress, 0)[0]


class _NothingFits(DnnplaceError):
    """No configuration of the space searched fits (the message says which comes closest; ``closest`` is it,
    priced, for a caller that wants a configuration whether or not it fits)."""

    def __init__(self, message: str, closest: LLMPlan | None = None) -> None:
        super().__init__(message)
        self.closest = closest


def price_pins(problem: LLMProblem, fixed: dict[str, object], time_limit: float | None = None) -> LLMPlan:
    """The fastest configuration keeping ``fixed`` that fits, else the fastest one that does not (its estimate
    says ``fits: false``): ``plan --compare`` prices a configuration beside the plan, and one that does not fit
    is an answer about it, not a failure of the plan."""
    try:
        return search(problem, fixed, time_limit)
    except _NothingFits as exc:
        if exc.closest is None:
            raise
        return exc.closest


def search_with_runner_ups(problem: LLMProblem, fixed: dict[str, object] | None = None,
                           time_limit: float | None = None, progress: ProgressFn | None = None,
                           count: int = 3) -> tuple[LLMPlan, list[RunnerUp]]:
    """:func:`search`, and the ``count`` fastest other configurations that fit (each a different set of knobs
    with its best layer split), found by the same exhaustive branch and bound with the pruning threshold at
    the slowest of the kept ones (exact when the search is; what was priced when the clock stopped it).

    Activation CPU offloading is the search's last resort: the space is first searched without it, and only
    when nothing there fits again with it (0 or the smallest number of layers that fits, per configuration).
    Its copy schedule is priced from Transformer Engine's code but no measured run shows it winning over a
    configuration that fits without it (NVIDIA's recipes offload only where memory demands it), so a plan
    never trades a configuration that fits for an offloaded one on the model's word alone; pin
    ``offload_layers`` to price or search a given count."""
    clock = _Clock(time_limit)
    check_problem(problem)
    fixed = check_pins(dict(fixed or {}))
    check_pin_set(problem, fixed, "fixed")
    if "offload_layers" in fixed:
        return _search_space(problem, fixed, clock, time_limit, progress, count, True)
    try:
        return _search_space(problem, fixed, clock, time_limit, progress, count, False)
    except _NothingFits:
        if not (problem_columns(problem)["host_link"] and problem.moe is None):
            raise
    return _search_space(problem, fixed, clock, time_limit, progress, count, True)


def _search_space(problem: LLMProblem, fixed: dict[str, object], clock: _Clock, time_limit: float | None,
                  progress: ProgressFn | None, count: int, offload: bool) -> tuple[LLMPlan, list[RunnerUp]]:
    """The branch and bound of :func:`search_with_runner_ups` over one space: with or without offloading."""
    removed: Counter[str] = Counter()
    emptied: list[str] = []
    unexpanded: list[float] = []  # proven bounds of the MoE bases left unexpanded (_moe_best_bases)
    try:
        cols = base_columns(problem, fixed, clock, removed, emptied, unexpanded, offload=offload)
    except _TimeUp:
        raise DnnplaceError(_out_of_time(time_limit, "while the configurations were enumerated")) from None
    L = problem.arch.num_layers
    B = len(cols["tp"])
    split_rows: dict[tuple[int, int], np.ndarray] = {}
    # (pp, vp) as one integer per row (vp < 2^20): the distinct pairs and each row's, without a Python loop over
    # the rows (millions for a large MoE space)
    pv = cols["pp"].astype(np.int64) * (1 << 20) + cols["vp"].astype(np.int64)
    pairs, pair_of = np.unique(pv, return_inverse=True)
    for key in [(int(k >> 20), int(k & ((1 << 20) - 1))) for k in pairs]:
        if clock.over():
            raise DnnplaceError(_out_of_time(time_limit, "while the layer splits were enumerated"))
        split_rows[key] = splits(L, *key)
    n_splits = np.array([len(split_rows[(int(k >> 20), int(k & ((1 << 20) - 1)))]) for k in pairs],
                        dtype=np.int64)[pair_of.ravel()] if B else np.zeros(0, dtype=np.int64)
    has_split = n_splits > 0
    if B and not has_split.all():
        removed["split_family"] += int(np.count_nonzero(~has_split))
        if not has_split.any():
            emptied.append("split_family")
        cols = {k: v[has_split] for k, v in cols.items()}
        n_splits = n_splits[has_split]
        B = len(cols["tp"])
    if not B:
        raise DnnplaceError(_why_empty(problem, fixed, removed, emptied[-1] if emptied else None))
    lb, lb_time, floor = np.empty(B), np.empty(B), np.empty(B)
    bound_w = (n_splits * cols["pp"].astype(np.int64)).astype(float) + 8.0
    bound_cum, bound_pace, lo = np.concatenate([[0.0], np.cumsum(bound_w)]), _Pace(BOUND_CELLS), 0
    while lo < B:
        if clock.over():
            raise DnnplaceError(_out_of_time(time_limit, f"while {B:,} configurations were bounded"))
        rows = np.arange(lo, min(bound_pace.take(bound_cum, lo), lo + BOUND_ROWS, B))
        t0 = time.perf_counter()
        floor_rows = np.empty(len(rows))
        lb[rows], lb_time[rows] = lower_bounds(problem, cols, rows, split_rows, floor_rows)
        floor[rows] = floor_rows
        bound_pace.timed(float(bound_cum[rows[-1] + 1] - bound_cum[lo]), time.perf_counter() - t0)
        lo += len(rows)
    # Visited in the order of the bound without the ZeRO floor (the bound of the configuration's ZeRO-0/1
    # twins), so that the twins of one configuration are priced in one batch and share its schedule runs;
    # one whose own bound is no better than the best plan is skipped, and the search stops as before.
    visit = lb - floor
    order = np.argsort(visit, kind="stable")
    best_t, best_bad_t = math.inf, math.inf
    runners = _Runners(count) if count > 0 else None
    best_k = -1
    cut = math.inf  # what a bound must beat to be priced: the best plan's time, or the slowest runner-up's
    best: tuple[Candidates, BatchResult, int] | None = None
    best_bad: tuple[Candidates, BatchResult, int] | None = None
    lean: tuple[Candidates, BatchResult, int] | None = None  # the priced configuration needing the least memory
    lean_mem = math.inf
    status, exhaustive = "optimal", True
    pending = math.inf  # the smallest bound of a chunk the clock stopped half-way
    pace = _Pace(EVAL_CELLS)  # a round's work; each pipeline depth's batches have their own pace (below)
    paces: dict[int, _Pace] = {}
    tasks = _tasks(cols, problem)
    i = 0
    while i < len(order) and visit[order[i]] < cut:
        if clock.over():
            status, exhaustive = "time_limit", False
            break
        groups: dict[int, list[tuple[np.ndarray, int]]] = {}
        work = 0.0
        while i < len(order) and work < pace.budget and visit[order[i]] < cut:
            k = int(order[i])
            i += 1
            if lb[k] >= cut:
                continue
            s = split_rows[(int(cols["pp"][k]), int(cols["vp"][k]))]
            groups.setdefault(int(cols["pp"][k]), []).append((s, k))
            work += len(s) * tasks[k]
        priced = False  # at least one batch per round, so that every round makes progress
        for depth, parts in groups.items():  # one batch per pipeline depth: arrays as wide as pp, no wider
            # a batch's seconds per cell differ by depth (the stage cuts of a 512-deep pipeline): a budget
            # learned on shallow batches sized one deep batch at 2.8 s against a 0.25 s target
            batch_pace = paces.setdefault(depth, _Pace(EVAL_CELLS))
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
                hi = min(batch_pace.take(own_cum, lo), lo + CHUNK_ROWS)
                cand = as_candidates(cols, own[lo:hi], layers[lo:hi])
                t0 = time.perf_counter()
                try:
                    with schedule.deadline(clock.over if clock.limit is not None else None):
                        res = evaluate_batch(problem, cand)
                        offloaded = _offloaded(problem, cols, cand, res, own[lo:hi])
                except schedule.OutOfTime:  # the limit passed inside one long pricing: as at the check above
                    pending = min(float(lb[k]) for ps in groups.values() for _, k in ps)
                    break
                priced = True
                batch_pace.timed(float(own_cum[min(hi, len(own))] - own_cum[lo]), time.perf_counter() - t0)
                pace.timed(float(own_cum[min(hi, len(own))] - own_cum[lo]), time.perf_counter() - t0)
                own_slice, lo = own[lo:hi], hi
                for cb, rb, ob in ((cand, res, own_slice), *offloaded):  # the batch, then its offloaded rows
                    step = np.where(rb.fits, rb.step, np.inf)
                    j = int(np.argmin(step))
                    if step[j] < best_t:
                        best_t, best, best_k = float(step[j]), (cb, rb, j), int(ob[j])
                    if runners is not None:
                        runners.offer(ob, step, cb, rb)
                    cut = best_t if runners is None else runners.cut(best_t)
                    jb = int(np.argmin(rb.step))
                    if rb.step[jb] < best_bad_t:
                        best_bad_t, best_bad = float(rb.step[jb]), (cb, rb, jb)
                    if best is None:  # only a refusal reads it
                        jm = int(np.argmin(rb.mem_total))
                        if rb.mem_total[jm] < lean_mem:
                            lean_mem, lean = float(rb.mem_total[jm]), (cb, rb, jm)
            if pending < math.inf:
                status, exhaustive = "time_limit", False
                break
        if progress is not None:
            progress(i, len(order), f"{i} of {len(order)} configurations")
        if status == "time_limit":
            break
    if unexpanded and best_t > min(unexpanded):  # an unexpanded base might hold a faster plan: say so with its bound
        if best is None and status == "optimal":  # the space ran out, not the clock
            # the gradients in their pinned dtype, else fp32 (the search never picks bf16), as the evaluator
            # counts their bytes
            grad = fsdp.GRAD_DTYPE_BYTES[GRAD_DTYPES.index(str(fixed.get("grad_dtype", "fp32")))]
            least = state_floor(problem, grad)
            if least > problem.device.usable_memory_bytes:  # no layout, expanded or not, can fit: pins cannot help
                raise DnnplaceError(_memory_short(problem, fixed, least, "gradients and optimizer state alone"))
            raise DnnplaceError(f"none of the {len(order):,} expanded configurations fits and the others (bound "
                                f"{min(unexpanded):.3g} s) were not expanded: pin some knobs (--fix ep=...,etp=...)")
        if best is not None:
            status, exhaustive, pending = "time_limit", False, min(pending, min(unexpanded))
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
        cb, rb, jb = best_bad
        closest = LLMPlan(problem, cb.config(jb), estimate_at(problem, rb, jb), status="infeasible", bound=math.inf,
                          gap=0.0, exhaustive=False, runtime_s=clock.elapsed())
        # How far off is the leanest layout (not the fastest, which keeps every activation): the memory bound of
        # those it proved unfit unpriced, or the leanest priced one, whichever says less.
        proven = np.flatnonzero(np.isinf(lb))
        least = _least_memory(problem, cols, proven) if len(proven) else math.inf
        if least < lean_mem:
            part = ("weights, gradients and optimizer state" if problem.moe is not None  # as the bound counts
                    else "model state and activations")
            raise _NothingFits(_memory_short(problem, fixed, least, part), closest)
        raise _NothingFits(_nothing_fits(problem, *(lean or best_bad)), closest)
    cand, res, j = best
    bound = best_t
    if status != "optimal":
        bound = min(best_t, pending, float(lb[order[i:]].min()) if i < len(order) else math.inf)
    if status == "optimal" and _all_pinned(problem, fixed):
        status, exhaustive = "fixed", False
    config = cand.config(j)
    check_config(problem, config)
    others = [] if runners is None else runners.others(problem, best_k)
    plan = LLMPlan(problem, config, estimate_at(problem, res, j), status=status, bound=bound,
                   gap=(best_t - bound) / best_t if best_t > 0 else 0.0, exhaustive=exhaustive,
                   runtime_s=clock.elapsed())
    return plan, others


def _offloaded(problem: LLMProblem, cols: Columns, cand: Candidates, res: BatchResult,
               own: np.ndarray) -> list[tuple[Candidates, BatchResult, np.ndarray]]:
    """The priced candidates that do not fit but may offload (pp = 1, no recomputation, offloading not
    pinned), re-priced with the smallest number of offloaded layers that fits the GPU: by TE's schedule
    (evaluation/llm/offload.py) the step time is non-decreasing and the GPU memory decreasing in N -- by one
    layer's saved activations and their fragmentation allowance per layer -- and the host memory increasing,
    so no other N can be faster and fit.  Empty when there are none."""
    if "offload_free" not in cols:
        return []
    rows = np.flatnonzero(cols["offload_free"][own] & (cand.pp == 1) & (cand.recompute == 0) & ~res.fits)
    if not len(rows):
        return []
    L = problem.arch.num_layers
    saved = saved_layer_bytes(problem, cand.with_offload(rows, np.zeros(len(rows)))) * (1 + memory.FRAGMENTATION)
    n = offload.smallest_fitting(res.mem_total[rows] - problem.device.usable_memory_bytes, saved,
                                 np.full(len(rows), L - 1.0))
    keep = n > 0
    rows, n = rows[keep], n[keep]
    if not len(rows):
        return []
    sub = cand.with_offload(rows, n)
    out = evaluate_batch(problem, sub)
    short = ~np.asarray(out.gpu_fits) & (n < L - 1)  # rounding: one layer more where the bytes only just miss
    if short.any():
        sub = cand.with_offload(rows, n + short)
        out = evaluate_batch(problem, sub)
    return [(sub, out, own[rows])]


def _all_pinned(problem: LLMProblem, fixed: dict[str, object]) -> bool:
    """Did the pins leave the search no choice?  dp follows from the others, a dense model has no expert knobs,
    the gradient dtype is never searched, and the ZeRO stage and the distributed optimizer pin each other
    where one allows a single value of the other (zero pinned, or the distributed optimizer off)."""
    # offload: the smallest that fits; cuda_graphs: its pin or none; routing: its pin or balanced
    implied = {"dp", "grad_dtype", "cuda_graphs", "routing", "offload_layers", *_expert_knobs(problem)}
    if "zero" in fixed:
        implied.add("distributed_optimizer")
    if fixed.get("distributed_optimizer") is False or problem.arch.num_experts > 1 and "distributed_optimizer" in fixed:
        implied.add("zero")
    return all(k in fixed for k in FIXABLE if k not in implied)


def _describe(c: ParallelConfig) -> str:
    return ", ".join(f"{k}={getattr(c, k)}" for k in ("tp", "pp", "vp", "cp", "dp", "mbs", "recompute", "zero"))


def _gb(x: float) -> str:
    return f"{x / 1e9:,.1f}" if x < 1e21 else f"{x / 1e9:.3g}"


def _nothing_fits(problem: LLMProblem, cand: Candidates, res: BatchResult, j: int) -> str:
    """One short line: the priced configuration that needs the least memory (how far the user is from a
    fit: the fastest one keeps every activation and shards nothing), its memory, and the largest part of it."""
    est = estimate_at(problem, res, j)
    part = est.overflow or max(est.memory_breakdown, key=lambda k: est.memory_breakdown[k])
    return (f"no configuration fits in {_gb(problem.device.usable_memory_bytes)} GB per GPU on "
            f"{problem.device.name}; the leanest priced, {_describe(cand.config(j))}, needs "
            f"{_gb(est.memory_per_gpu_bytes)} GB; largest: {part} {_gb(est.memory_breakdown[part])} GB")


def _least_memory(problem: LLMProblem, cols: Columns, rows: np.ndarray) -> float:
    """The least peak memory per GPU that the configurations ``rows`` of ``cols`` are proven to need (the
    search's own memory bound, offloading where allowed): what a user short of memory needs to hear, where the
    fastest configuration's need (everything kept, nothing sharded) overstates the shortfall many times."""
    full = as_candidates(cols, rows, np.zeros((len(rows), 1)))
    return float(static_memory_lb(problem, full, offload_room(problem, cols, rows)).min())


def _memory_short(problem: LLMProblem, fixed: dict[str, object], need: float, part: str) -> str:
    """One line: no layout fits, and the proven least any needs (``need``: a lower bound, so said as one; the
    same words for a dense and an MoE model)."""
    what = ", ".join(f"{k}={v}" for k, v in fixed.items()) or "no fixed values"
    n = problem.cluster.gpus
    return (f"no configuration fits in {_gb(problem.device.usable_memory_bytes)} GB per GPU on "
            f"{problem.device.name} ({n} GPU{'s' * (n != 1)}, {what}): each needs at least {_gb(need)} GB for its "
            f"{part} (add GPUs, or a device with more memory)")


def _out_of_time(time_limit: float | None, when: str) -> str:
    return f"the time limit of {time_limit:g} s ran out {when}; no plan to return (raise --time-limit)"


def _why_empty(problem: LLMProblem, fixed: dict[str, object], removed: Counter[str], last: str | None) -> str:
    """No configuration left: say which rule removed the last candidates (and the most common ones)."""
    n, j = problem.cluster.gpus, problem.job
    what = ", ".join(f"{k}={v}" for k, v in fixed.items()) or "no fixed values"
    if last is not None and last.startswith(MEMORY_SHORT + " "):  # a proven memory bound removed the last rows
        _, need, part = last.split(" ", 2)
        return _memory_short(problem, fixed, float(need), part)
    return (f"no valid configuration for {n} GPUs, batch {j.global_batch}, seq {j.seq_len} ({what}): "
            + describe_removed(removed, last))
