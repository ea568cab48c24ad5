"""The optimal contiguous-split DP (SPEC "Dynamic program") behind the solver interface.

Steps: prepare units; solve the *linearised* unit chain first (tiny lattice)
to get an upper bound; then run the exact DP over all ideals with that bound,
which lets the kernel skip sets that are too slow to matter.  The result is
exact: the bound only discards candidates whose load exceeds a value that an
actual contiguous split already achieves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from dnnplace.errors import InfeasibleError, SolverTimeout, TooManyIdealsError
from dnnplace.model.split import Split
from dnnplace.model.workload import Workload
from dnnplace.solvers.prepare import Prepared, linearized, merge_free_units, prepare
from dnnplace.solvers.base import ProgressFn, RunContext, Solver, SolverOutput, param
from dnnplace.solvers.dp.ideals import IdealLattice, enumerate_ideals
from dnnplace.solvers.dp.relax import (
    Relaxed,
    UnitAnchors,
    anchors,
    follow_roots,
    gathering_units,
    incomparable_counts,
    inert_units,
    reinsert,
    relax,
    restriction_groups,
    spine,
    surely_more_ideals,
    unit_topological_order,
    view_units,
)

REFINE_SECONDS = 10.0  # narrowing a relaxation stops after this long once some bound is proven
RELAX_SECONDS = 30.0  # without --time-limit, the relaxations stop after this long with what they proved
COARSE_FIRST = 10_000  # above this many ideals, a coarser lattice's optimum first tightens the exact DP's bound
LARGE_UNITS = 4000  # above this many units the ideal machinery is skipped (see _coarse_chain)
DEFAULT_SECONDS = 9.0  # with a second phase and no --time-limit: the relaxation path's whole budget
FOLD_ALLOWANCE = 0.25  # of --gap times the trivial bound: what the folds may add to the optimum in all
WIDER_UNITS = 1000  # above: no folds with an allowance (a second pass costs ~1 s on Mamba's 1,650 units and has
#                     never made such a lattice fit; the relaxations need that time)
EXACT_SHARE = 0.3  # of that budget: an exact DP over more than COARSE_FIRST ideals (DeepSeek-V3: 105k ideals, 676 M
#                    pairs, 46 s), then the relaxations and the IP on the rest
RELAX_SHARE = 0.7  # with a second phase: the relaxations' share of the budget, the rest is the second phase's
IP_FIRST_UNITS = 600  # up to this many units the second phase (the chain IP) gets most of the budget instead:
RELAX_SHARE_SMALL = 0.25  # HiGHS closes DeBERTa-v2 and DeepSeek-V3 there, the relaxations do not
IP_MAX_UNITS = 800  # above this many units no second phase in the default budget: HiGHS's root LP alone outlasts
#                     it (Mamba-1: 1,650 units, 13 s) and was seen overrunning its deadline by 6 s; with
#                     --time-limit it runs (Jamba: 965 units, within 0.5 % of the optimum after 73 s)
FINISH_MIN_SECONDS = 0.5  # a second phase with less time left than this is not started
PROBE_SECONDS = 0.5  # a budgeted exact DP runs this long alone before the IP starts beside it: HiGHS's presolve
#                      cannot be cancelled, and started at once it held up exact DPs that end in 0.2 s by seconds
#                      (Llama-16's 647 units)
IP_AT_ONCE_IDEALS = 50_000  # above this many ideals the IP starts with the exact DP: its work grows with the
#                             square of the ideals and it has not finished in its share on any graph this size
#                             (T5-2, 47k ideals: 1.2 s; DeepSeek-V3, 105k: 46 s), while the IP needs all the time

#: A second phase after the relaxations (:func:`dnnplace.solvers.dp_ip.ip_finish`): given the units the DP
#: works on (their workload and deficit), the incumbent split, the bound proven so far on the workload (for
#: pipelines), the time to stop, the options and an event that asks it to stop early (it runs in a thread beside
#: the DP), it returns a split (or None), a lower bound on the workload for every pipeline split, and stats.
Finisher = Callable[[Prepared, Split, float, float, "DPOptions", threading.Event],
                    tuple[Split | None, float, dict]]


@dataclass(frozen=True)
class DPResult:
    """The DP's optimum and the per-unit device it chose (-1: none)."""

    value: float
    unit_device: np.ndarray  # accelerators 0..A-1 in pipeline order, then CPUs
    n_acc_used: int
    n_cpu_used: int
    pairs: int
    chain: tuple[int, ...] = ()  # device of every piece in pipeline order (first ideal first)


@dataclass(frozen=True)
class DPOptions:
    """What one DP run reads: the method's parameters and the run's context."""

    max_ideals: int = 200_000
    gap: float = 0.01
    contract_layers: bool = False
    linearize: bool = False
    overlap_comm: bool = False
    time_limit: float | None = None
    progress: ProgressFn | None = None
    finish: Finisher | None = None  # the second phase when the relaxations leave a gap (see solve_dp)


@dataclass
class DPSolver(Solver):
    """Max-load-optimal contiguous split over the ideal lattice (certified bound when it must relax)."""

    name = "dp"
    objectives = ("throughput",)
    summary = "optimal contiguous split (dynamic program over ideals)"

    max_ideals: int = param(200_000, "ideals the exact DP may enumerate before it relaxes", minimum=1,
                                 maximum=10**9)
    gap: float = param(0.01, "relative gap to prove when the DP must relax", minimum=0, maximum=1)
    contract_layers: bool = param(False, "fuse nodes sharing a layerId")
    linearize: bool = param(False, "chain the graph along a topological order (as PipeDream)")

    def warm_up(self) -> None:
        from dnnplace.solvers.dp.kernel import warm_up

        warm_up()

    def solve(self, workload: Workload, run: RunContext) -> SolverOutput:
        return solve_dp(workload, DPOptions(**self.get_params(), overlap_comm=run.overlap_comm,
                                            time_limit=run.time_limit, progress=run.progress))


def solve_dp(workload: Workload, options: DPOptions, extra_groups: np.ndarray | None = None) -> SolverOutput:
    """The optimum, or a split with a certified bound when the lattice is too large.

    1. Prepare units and apply the exact reductions.
    2. Upper bound: the DP on one topological order of the units (a chain,
       tiny lattice) -- a real split.
    3. If the lattice (inert units left out) fits ``max_ideals``: the exact DP
       (for the default method, one over more than :data:`COARSE_FIRST` ideals
       gets :data:`EXACT_SHARE` of :data:`DEFAULT_SECONDS`, or of the
       ``time_limit``; if it does not finish, steps 4-5 use the rest).
    4. Otherwise relax (:mod:`dnnplace.solvers.dp.relax`): leave out the units
       parallel to most others, from many to few, while the lattice fits;
       each relaxed optimum is a lower bound and, with the units put back, a
       split.  Stop once the gap is within ``options.gap``.
    5. With ``options.finish`` (the default method's IP) and a gap still above
       ``options.gap``: the second phase runs in a thread beside steps 3-4
       from the moment a budgeted exact DP starts (above
       :data:`IP_AT_ONCE_IDEALS` ideals) or has run :data:`PROBE_SECONDS`, or
       the relaxations start (:class:`_SecondPhase`),
       from the best split then, until the budget ends; the relaxations get :data:`RELAX_SHARE` (up to
       :data:`IP_FIRST_UNITS` units: :data:`RELAX_SHARE_SMALL`) of the time.
       The better split and the better bound are kept (both certified).
       Without a ``time_limit`` this path takes :data:`DEFAULT_SECONDS` in all.

    Every split is valued by the evaluator; ``extra_groups`` fuses further
    nodes (the PipeDream emulation's biconnected components).
    """
    start = time.perf_counter()
    deadline = None if options.time_limit is None else start + options.time_limit
    if max(workload.max_accelerators, workload.max_cpus) > workload.n:
        # no split uses more devices than there are nodes; the DP's tables grow with the budget
        workload = workload.with_budget(min(workload.max_accelerators, workload.n), min(workload.max_cpus, workload.n))
    p0 = prepare(workload, contract_layers=options.contract_layers, linearize=options.linearize,
                 extra_groups=extra_groups)
    p = merge_free_units(p0, compute_slack=not options.overlap_comm)
    stats: dict[str, float | int] = {"units": p.n_units}
    best = _Best(workload, options)
    best.bound = _trivial_bound(p0)
    if p.n_units > LARGE_UNITS:
        _coarse_chain(p, best, options, deadline, stats)
        return best.output(stats)
    if not options.linearize and p.n_units > 1:
        chain = linearized(p)
        # no deadline: this chain (at most LARGE_UNITS + 1 ideals) is the answer a time limit falls back on
        first = run_dp(chain, enumerate_ideals(chain, max(options.max_ideals, p.n_units + 2)), workload,
                       overlap=options.overlap_comm, ub=np.inf)
        if np.isfinite(first.value):
            best.offer(_split_of(p, first, None))
        stats["upper_bound"] = float(first.value)
    exact = p  # the units of the exact reductions alone (no deficit): the second phase works on these
    second: _SecondPhase | None = None
    inert, base, lattice = _exact_lattice(p, options)
    if lattice is None and not options.overlap_comm and p.n_units <= WIDER_UNITS:
        # too wide for the exact DP: fold the cheap units whose folds may raise a load a little as well
        # (the relaxations then work on the folded units too: Mamba-2 training 10.1 % -> 3.2 %)
        wider = merge_free_units(p, compute_slack=True, allowance=FOLD_ALLOWANCE * options.gap * best.bound)
        if wider.n_units < p.n_units:
            p = wider
            inert, base, lattice = _exact_lattice(p, options)
            best.deficit = p.deficit
            stats.update(units=p.n_units, fold_deficit=p.deficit)
    best.prove(_trivial_bound(p))
    q = base.prepared if base is not None else p
    stats["inert_units"] = int(inert.sum())
    try:
        if lattice is not None:
            stats["ideals"] = lattice.n_ideals
            if lattice.n_ideals > COARSE_FIRST and not options.linearize:
                _coarse_upper_bound(p, lattice.n_ideals, best, options, deadline, stats)
            # the default method: a large exact DP gets a share of the budget (or of --time-limit), with the IP
            # beside it (at once on a huge lattice, else once the DP has run a while)
            budgeted = options.finish is not None and lattice.n_ideals > COARSE_FIRST
            budget = DEFAULT_SECONDS if options.time_limit is None else options.time_limit
            exact_end = start + EXACT_SHARE * budget
            holder: list[_SecondPhase | None] = []
            if budgeted and lattice.n_ideals > IP_AT_ONCE_IDEALS:
                holder.append(_SecondPhase.start(exact, best, options, start, deadline, stats))
            began = time.perf_counter()

            def watch() -> None:
                """Start the IP beside the exact DP once it has run a while."""
                if not holder and time.perf_counter() - began >= PROBE_SECONDS:
                    holder.append(_SecondPhase.start(exact, best, options, start, deadline, stats))

            try:
                result = run_dp(q, lattice, workload, overlap=options.overlap_comm, ub=best.cutoff(),
                                deadline=exact_end if budgeted else deadline,
                                progress=options.progress, on_chunk=watch if budgeted else None)
            except SolverTimeout:
                if not budgeted:
                    raise
                stats["exact_dp_stopped_after_s"] = round(time.perf_counter() - start, 3)
                _relax_then_finish(p, exact, inert, best, options, start, deadline, stats,
                                   holder[0] if holder else None)
                return best.output(stats)
            finally:
                second = holder[0] if holder else None  # cancelled below if the exact DP ended first
            stats["pairs_examined"] = result.pairs
            if np.isfinite(result.value):
                best.offer(_split_of(p, result, base))
                best.prove(result.value)
                stats["dp_value"] = float(result.value)
            elif best.split is None:
                raise InfeasibleError(_infeasible_message(workload))
            else:
                best.prove(best.value)  # nothing below the incumbent exists
        else:
            running, second = second, None
            _relax_then_finish(p, exact, inert, best, options, start, deadline, stats, running)
    except SolverTimeout:
        if best.split is None:
            raise
        best.timed_out = True
    finally:
        if second is not None:  # the exact DP ended first (or an error or Ctrl-C came): the IP is not needed
            second.cancel()
    if best.split is None:
        raise InfeasibleError(_infeasible_message(workload))
    return best.output(stats)


def _exact_lattice(p: Prepared, options: DPOptions) -> tuple[np.ndarray, Relaxed | None, IdealLattice | None]:
    """Inert units, ``p`` without them, and its lattice if it fits ``max_ideals`` (else None)."""
    inert = inert_units(p)
    base = relax(p, inert) if inert.any() else None
    q = base.prepared if base is not None else p
    try:
        lattice = None if surely_more_ideals(q, options.max_ideals) else enumerate_ideals(q, options.max_ideals)
    except TooManyIdealsError:
        lattice = None
    return inert, base, lattice


def _relax_then_finish(p: Prepared, exact: Prepared, inert: np.ndarray, best: _Best, options: DPOptions,
                       start: float, deadline: float | None, stats: dict,
                       second: _SecondPhase | None = None) -> None:
    """:func:`_relax_and_finish`; a caller's time limit that ends with the gap above ``--gap`` is ``time_limit``."""
    try:
        _relax_and_finish(p, exact, inert, best, options, start, deadline, stats, second)
    finally:
        if second is not None:
            second.cancel()
    if deadline is not None and best.gap() > options.gap:
        best.timed_out = True


def _relax_and_finish(p: Prepared, exact: Prepared, inert: np.ndarray, best: _Best, options: DPOptions,
                      start: float, deadline: float | None, stats: dict, second: _SecondPhase | None) -> None:
    """Step 4 and 5 of :func:`solve_dp`: the relaxations, with the second phase beside them.

    The relaxations work on ``p`` (perhaps folded with an allowance); the
    second phase on ``exact``, the units before those folds, so that what it
    proves needs no deficit subtracted (Mamba-2 training: proven optimal).
    The second phase runs in a thread from the start (``second``, or started
    here) until the budget ends, while the relaxations use their share; then
    the better split and the better bound are kept.

    Raises :class:`SolverTimeout` only when the caller's ``time_limit`` ran out
    (the answer's status is then ``time_limit``); the default budget ending is
    not a time limit.
    """
    if options.finish is None:
        end = time.perf_counter() + RELAX_SECONDS
        relax_end = end if deadline is None else min(deadline, end)
        refine_end = time.perf_counter() + REFINE_SECONDS
    else:
        end = start + DEFAULT_SECONDS if deadline is None else deadline
        # the IP gets most of a caller's time limit whatever the size (the relaxations plateau on wide graphs)
        share = RELAX_SHARE_SMALL if exact.n_units <= IP_FIRST_UNITS or deadline is not None else RELAX_SHARE
        relax_end = refine_end = start + share * (end - start)
        if second is None:
            second = _SecondPhase.start(exact, best, options, start, deadline, stats)
    try:
        _relaxations(p, inert, best, options, relax_end, stats, refine_until=min(refine_end, relax_end),
                     exact=exact)
    except SolverTimeout:
        if deadline is not None and time.perf_counter() >= deadline:
            raise
        stats["relaxation_stopped_after_s"] = round(time.perf_counter() - start, 3)  # an answer with its bound
    if second is None:
        return
    out = second.join(cancel=best.split is not None and best.gap() <= options.gap)
    if out is None:
        return
    split, bound, more = out
    stats.update(more)
    stats["relaxation_bound"] = best.bound
    if split is not None:
        if is_pipeline(p.workload, split):
            best.offer(split)
        else:
            stats["ip_split_refused"] = "its devices feed each other in a cycle"
    best.bound = max(best.bound, bound)  # the IP's bound holds for every contiguous split, chains included


class _SecondPhase:
    """``options.finish`` in a thread beside the DP, from the incumbent and bound known when it starts.

    HiGHS runs in a native thread of its own and the DP's kernel on the
    other core, so neither waits for the other: the IP gets the whole budget
    instead of what the relaxations leave (DeepSeek-V3 training: 5 s -> 8 s).
    Ctrl-C reaches only the main thread; :meth:`cancel` then stops HiGHS.
    """

    def __init__(self, run: Callable[[threading.Event], tuple[Split | None, float, dict]]) -> None:
        self.stop = threading.Event()
        self.out: tuple[Split | None, float, dict] | None = None
        self.error: BaseException | None = None

        def target() -> None:
            try:
                self.out = run(self.stop)
            except BaseException as e:  # re-raised in the main thread by join
                self.error = e

        self.thread = threading.Thread(target=target, name="dnnplace-second-phase", daemon=True)
        self.thread.start()

    @classmethod
    def start(cls, exact: Prepared, best: _Best, options: DPOptions, start: float, deadline: float | None,
              stats: dict) -> _SecondPhase | None:
        """Start it if it may help: a gap to close, a small enough graph (or a time limit), time left."""
        finish = options.finish
        if finish is None or best.split is None or best.gap() <= options.gap:
            return None
        if exact.n_units > IP_MAX_UNITS and deadline is None:
            stats["ip_phase"] = f"left out: more than {IP_MAX_UNITS} units (give --time-limit to run it)"
            return None
        end = start + DEFAULT_SECONDS if deadline is None else deadline
        if end - time.perf_counter() < FINISH_MIN_SECONDS:
            return None
        split, bound = best.split, best.bound
        return cls(lambda stop: finish(exact, split, bound, end, options, stop))

    def join(self, cancel: bool = False) -> tuple[Split | None, float, dict] | None:
        """Its split, bound and stats (asking it to stop first with ``cancel``)."""
        if cancel:
            self.stop.set()
        self._wait()
        if self.error is not None:
            raise self.error
        return self.out

    def cancel(self) -> None:
        """Stop it and wait until it has (its result and any error are dropped)."""
        self.stop.set()
        self._wait()

    def _wait(self) -> None:
        """Until the thread ends, in slices so that Ctrl-C gets through: HiGHS answers a cancel between steps (its
        presolve is one step, up to 2 s on DeepSeek-V3), and highspy lets one solver run at a time in a process."""
        while self.thread.is_alive():
            self.thread.join(0.05)


def is_pipeline(w: Workload, split: Split) -> bool:
    """Do the split's devices form a pipeline: no two of them feed each other through forward edges?"""
    from dnnplace.errors import DnnplaceError
    from dnnplace.evaluation import evaluate
    from dnnplace.utils.graph import order_devices

    dev = evaluate(w, split, complete=False).assignment.device
    fwd = ~w.backward
    crossing = fwd[w.edge_src] & fwd[w.edge_dst] & (dev[w.edge_src] != dev[w.edge_dst])
    try:
        order_devices(int(dev.max(initial=-1)) + 1,
                      zip(dev[w.edge_src[crossing]].tolist(), dev[w.edge_dst[crossing]].tolist()))
    except DnnplaceError:
        return False
    return True


def _coarse_chain(p: Prepared, best: _Best, options: DPOptions, deadline: float | None, stats: dict) -> None:
    """Huge graphs: consecutive runs of one topological order fused into blocks, the block chain solved.

    Fusing is a restriction, so the split is real; the bound is the trivial
    one.  This keeps a graph of 100,000 units to seconds instead of an
    enumeration that cannot finish.
    """
    order = unit_topological_order(p)
    block = np.empty(p.n_units, dtype=np.int64)
    block[order] = np.arange(len(order)) * LARGE_UNITS // (2 * len(order))
    fused = merge_free_units(prepare(p.workload, linearize=True, extra_groups=block[p.unit_of]))
    result = run_dp(fused, enumerate_ideals(fused, fused.n_units + 2), p.workload, overlap=options.overlap_comm,
                    deadline=deadline, progress=options.progress)
    stats.update(coarse_blocks=fused.n_units, pairs_examined=result.pairs)
    if np.isfinite(result.value):
        best.offer(_split_of(fused, result, None))
    if best.split is None:
        raise InfeasibleError(_infeasible_message(p.workload) + f" (or the {p.n_units:,}-unit graph needs a finer"
                              " search than its block chain)")


def _relaxations(p: Prepared, inert: np.ndarray, best: _Best, options: DPOptions, deadline: float | None,
                 stats: dict, refine_until: float, exact: Prepared | None = None) -> None:
    """Lower bounds (and splits) from relaxations that fit the ideal budget.

    Units are left out in order of how many units they run beside per unit
    of cost they carry (so views and other free units parallel to much of the
    graph go first); the count doubles until the lattice fits, then each
    fitting relaxation is solved exactly, and the search narrows between the
    largest count that did not fit and the smallest that did while the gap
    is above ``options.gap`` and until ``refine_until`` (once some bound is proven).

    Left-out units pass an input on (``relax(pass_on=True)``) and a piece is
    charged the compute of the left-out units it must hold (:func:`anchors`):
    on Mamba, whose per-step read-outs are a quarter of the work and all
    parallel to the scan, this took the bound from 2.3 % below the optimum
    to the optimum itself.

    The spine relaxation comes first, on ``exact`` (the units before the folds
    with an allowance, if given): its lattice is a chain whatever the width,
    so the folds buy it nothing and their deficit would cost its bound.
    """
    views = view_units(p) & ~inert
    base = inert | views
    candidates = _parallel_first(p, base)
    stats["view_units"] = int(views.sum())
    tried = 0
    if deadline is not None and time.perf_counter() > deadline:
        raise SolverTimeout("dp: time limit reached while relaxing")
    mine = (views, base, candidates)  # the spine of p itself needs no second look at its units
    if _spine_relaxation(p if exact is None else exact, best, options, deadline, refine_until, stats,
                         mine if exact is None or exact is p else None):
        tried += 1
        if best.gap() > options.gap and best.split is not None:  # its cut through a scan, a step or two better
            from dnnplace.solvers.polish import polish

            before = best.value
            best.offer(polish(p.workload, best.split, min(refine_until, time.perf_counter() + POLISH_SECONDS),
                              options.overlap_comm))
            stats["polished_from"] = before
        if best.gap() <= options.gap:
            stats["relaxations"] = tried
            return
    too_few, enough = -1, None
    k = 0  # then: views and inert units alone (a nearly exact relaxation)
    if not views.any() and candidates.size:
        too_few, k = 0, min(8, candidates.size)  # inert units alone: the lattice solve_dp already found too large
    while True:
        if deadline is not None and time.perf_counter() > deadline:
            raise SolverTimeout("dp: time limit reached while relaxing")
        if enough is not None and time.perf_counter() > refine_until:
            break
        drop = base.copy()
        drop[candidates[:k]] = True
        if not _solve_relaxation(p, drop, views, best, options, deadline, refine_until, stats):
            too_few = k
        else:
            enough = k
            tried += 1
            if best.gap() <= options.gap:
                break
        if enough is None:
            if k == candidates.size:
                break
            k = min(max(8, 2 * k), candidates.size)
        else:
            nxt = (too_few + enough) // 2
            if nxt <= too_few or nxt >= enough:
                break
            k = nxt
    stats["relaxations"] = tried


def _spine_relaxation(q: Prepared, best: _Best, options: DPOptions, deadline: float | None, refine_until: float,
                      stats: dict, parts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> bool:
    """Everything parallel to a longest path of ``q`` left out (a chain lattice: a cut through a scan).

    First with the gathering units kept too (:func:`relax.gathering_units`) and left-out compute charged to
    its readers (:func:`relax.receivers`), if that lattice has at most :data:`SPINE_IDEALS` ideals: in a
    training scan cut in the middle, every step on the far side sends its gradients of the sliced tensors
    to their gathering nodes, and each read-out's gradient to its step (Jamba training: 8.2 % -> 0.47 %).
    Then, unless that closed the gap, the plain spine (neither form bounds better everywhere).

    ``parts``: ``q``'s views, views-and-inert units and :func:`_parallel_first` order, when the caller has them.
    """
    if parts is None:
        inert = inert_units(q)
        views = view_units(q) & ~inert
        base = inert | views
        parts = (views, base, _parallel_first(q, base))
    views, base, candidates = parts
    drop = base.copy()
    drop[candidates[~spine(q)[candidates]]] = True
    if drop.sum() == base.sum():
        return False
    gather = drop & ~base & gathering_units(q)
    saved, best.deficit = best.deficit, q.deficit  # bounds proven on q lose q's deficit alone
    try:
        gathered = bool(gather.any()) and not options.overlap_comm and _solve_relaxation(
            q, drop & ~gather, views, best, options, deadline, refine_until, stats, max_ideals=SPINE_IDEALS,
            receive=True)
        if gathered and best.gap() <= options.gap:
            return True
        return _solve_relaxation(q, drop, views, best, options, deadline, refine_until, stats) or gathered
    finally:
        best.deficit = saved


def _solve_relaxation(p: Prepared, drop: np.ndarray, views: np.ndarray, best: _Best, options: DPOptions,
                      deadline: float | None, refine_until: float, stats: dict, max_ideals: int | None = None,
                      receive: bool = False) -> bool:
    """One relaxation of :func:`_relaxations`: its bound and splits offered to ``best``; does its lattice fit?

    ``max_ideals``: a smaller budget than ``options.max_ideals`` for this one; ``receive``: see
    :func:`relax.receivers` (neither form of the relaxation bounds better than the other everywhere).
    """
    rel = relax(p, drop, pass_on=True, receive=receive)  # views pass their input on (passed_inputs)
    lattice = None
    budget = options.max_ideals if max_ideals is None else min(max_ideals, options.max_ideals)
    if rel.prepared.n_units and not surely_more_ideals(rel.prepared, budget):
        try:
            lattice = enumerate_ideals(rel.prepared, budget)
        except TooManyIdealsError:
            lattice = None
    if lattice is None:
        return not rel.prepared.n_units
    anchored = anchors(p, rel)
    result = run_dp(rel.prepared, lattice, p.workload, overlap=options.overlap_comm, ub=best.cutoff(),
                    deadline=deadline, progress=options.progress, anchored=anchored)
    stats.update(relaxed_units_left_out=int(drop.sum()), ideals=lattice.n_ideals, pairs_examined=result.pairs)
    if np.isfinite(result.value):
        best.prove(result.value)
        best.offer(_split_of(p, result, rel))
        if views.any():
            best.offer(_split_of(p, result, rel, lazy=views))
    soft = refine_until if deadline is None else min(deadline, refine_until)
    try:  # optional improvements: bounded by the refinement time
        if best.gap() > options.gap:
            _restricted_split(p, drop, best, options, soft, budget=max(4096, 4 * lattice.n_ideals))
        if best.gap() > options.gap:
            _fluid_bound(p, rel, lattice, best, options, soft, anchored)
    except SolverTimeout:
        if deadline is not None and time.perf_counter() > deadline:
            raise
    return True


def _parallel_first(p: Prepared, exclude: np.ndarray) -> np.ndarray:
    """Units parallel to others, most parallel per unit of cost first (the ones that multiply the ideals)."""
    inc = incomparable_counts(p)
    mass = p.acc_time + np.bincount(p.comm.home, weights=p.comm.cost, minlength=p.n_units)
    scale = max(float(mass.max(initial=0.0)), 1e-300)
    score = inc / (mass / scale + 1e-3)
    candidates = np.flatnonzero(~exclude & (inc > 0) & p.supported)
    return candidates[np.argsort(-score[candidates], kind="stable")]


def _coarse_upper_bound(p: Prepared, n_ideals: int, best: _Best, options: DPOptions,
                        deadline: float | None, stats: dict) -> None:
    """Before a large exact DP: the optimum of a coarser lattice, a real split that tightens its pruning.

    The most parallel units are fused to a neighbour (:func:`_restricted_split`,
    a restriction), more of them until the fused lattice has at most a tenth
    of the ideals.  The exact DP's work grows with its upper bound, so a
    split at or near the optimum pays for itself many times over.
    """
    inert = inert_units(p)
    candidates = _parallel_first(p, inert)
    k = min(8, candidates.size)
    while k > 0:
        drop = inert.copy()
        drop[candidates[:k]] = True
        labels = _fusing_labels(p, drop)
        fused = merge_free_units(prepare(p.workload, contract_layers=options.contract_layers,
                                         linearize=options.linearize, extra_groups=labels),
                                 compute_slack=not options.overlap_comm)
        try:
            lattice = enumerate_ideals(fused, max(64, n_ideals // 10))
        except TooManyIdealsError:
            k = 0 if k == candidates.size else min(2 * k, candidates.size)
            continue
        result = run_dp(fused, lattice, p.workload, overlap=options.overlap_comm, ub=best.cutoff(),
                        deadline=deadline)
        if np.isfinite(result.value):
            best.offer(_split_of(fused, result, None))
        stats.update(coarse_units_fused=k, coarse_ideals=lattice.n_ideals, coarse_value=float(result.value))
        return


def _fusing_labels(p: Prepared, drop: np.ndarray) -> np.ndarray:
    """:func:`restriction_groups`, with left-out units that have no neighbour at all joined to one other unit.

    Such units are inert (they cost nothing: see :func:`inert_units`); left alone
    each would double the fused lattice.
    """
    isolated = np.ones(p.n_units, dtype=bool)
    isolated[p.edge_src] = False
    isolated[p.edge_dst] = False
    labels = restriction_groups(p, drop)
    alone = (drop & isolated)[p.unit_of]
    if alone.any() and (~alone).any():
        labels[alone] = labels[np.flatnonzero(~alone)[0]]
    return labels


def _restricted_split(p: Prepared, drop: np.ndarray, best: _Best, options: DPOptions,
                      deadline: float | None, budget: int | None = None) -> None:
    """Offer the optimum of the graph with the left-out units fused to a neighbour (a real split).

    ``budget`` caps the fused lattice (a restriction is only worth a DP about
    as large as the relaxation's).
    """
    fused = merge_free_units(prepare(p.workload, contract_layers=options.contract_layers,
                                     linearize=options.linearize, extra_groups=_fusing_labels(p, drop)),
                             compute_slack=not options.overlap_comm)
    try:
        lattice = enumerate_ideals(fused, options.max_ideals if budget is None else min(budget, options.max_ideals))
    except TooManyIdealsError:
        return
    result = run_dp(fused, lattice, p.workload, overlap=options.overlap_comm, ub=best.cutoff(), deadline=deadline)
    if np.isfinite(result.value):
        best.offer(_split_of(fused, result, None))


def fluid_certifies(rel: Relaxed, lattice: IdealLattice, cap: float, overlap: bool,
                    deadline: float | None, anchored: UnitAnchors | None = None) -> bool:
    """Is ``cap`` a proven lower bound: does *no* split of the whole graph keep every load within it?

    The relaxation forgets where most left-out compute runs; yet in any split
    of the whole graph with every load at most ``cap``, each device's relaxed
    load plus the left-out compute it runs is at most ``cap``, and a left-out
    unit runs on a piece no earlier than those of its remaining units before
    it and no later than those of its remaining units after it
    (:func:`relax.anchors`).  So along the chain of pieces, the left-out
    compute placed up to an ideal is at most the spare capacity so far, at
    most the compute that may run within the ideal, and at least the compute
    that must (a unit with a remaining unit after it inside).  The kernel
    finds, per ideal, the most that can be placed (more placed never hurts
    the pieces to come); if no chain of at most ``k`` pieces (an unused
    accelerator holds ``cap`` of left-out work) places it all, no split
    exists.  Without anchors this is the sum test: relaxed loads summing to at
    most ``k * cap - W``.  Read-outs of a scan cut between two pieces must run
    on one of the two, not on a light device elsewhere (Jamba).  Only for
    budgets without CPU cores and without overlapped communication (a CPU
    would absorb left-out work at another speed; overlapped loads do not add
    up).
    """
    return _fluid_chain(rel, lattice, cap, overlap, deadline, anchored) is None


def _fluid_chain(rel: Relaxed, lattice: IdealLattice, cap: float, overlap: bool, deadline: float | None,
                 anchored: UnitAnchors | None) -> DPResult | None:
    """:func:`fluid_certifies`' test: ``None`` if ``cap`` is certified, else a relaxed chain within it."""
    p = rel.prepared
    w = p.workload
    if w.max_cpus > 0 or overlap:
        return DPResult(np.inf, np.full(p.n_units, -1, dtype=np.int64), 0, 0, 0)  # certifies nothing
    work = rel.fluid_work()
    result = run_dp(p, lattice, w, ub=np.inf, deadline=deadline, piece_cap=cap, anchored=anchored,
                    left_out_work=work)
    if not result.value <= -work + 1e-9 * (cap + work):  # not all left-out work placed (or no chain at all)
        return None
    return result


SPINE_IDEALS = 20_000  # the spine with its gathering units (relax.gathering_units) if its lattice fits this
POLISH_SECONDS = 1.5  # moving groups of classes across a stage boundary after the spine relaxation (solvers.polish)
FLUID_STEPS = 6  # bisection steps of the fluid bound on a lattice ...
FLUID_STEPS_SMALL = 12  # ... and on one of at most FLUID_SMALL ideals (a spine: milliseconds per step)
FLUID_SMALL = 5000


def _fluid_bound(p: Prepared, rel: Relaxed, lattice: IdealLattice, best: _Best, options: DPOptions,
                 deadline: float | None, anchored: UnitAnchors | None = None) -> None:
    """Raise ``best.bound`` by :func:`fluid_certifies`: first at the target gap, then by bisection.

    The relaxed chain within the least cap not certified is put back as a split
    too (left-out units following :func:`follow_roots`): its cuts are priced
    with the left-out work in place, unlike the relaxed optimum's.
    """
    if not np.isfinite(best.value):
        return
    target = best.value * (1 - options.gap) + best.deficit  # caps on the folded units (see _Best.prove)
    if target <= best.bound + best.deficit:
        return
    small = lattice.n_ideals <= FLUID_SMALL
    within = _fluid_chain(rel, lattice, target, options.overlap_comm, deadline, anchored)
    lo, hi = best.bound + best.deficit, target  # hi is not certified
    if within is None:
        if not small:
            best.prove(target)
            return
        # a spine's tests take milliseconds: the bound it proves, not just the target (the gap it reports)
        lo, hi = target, best.value + best.deficit
    for _ in range(FLUID_STEPS_SMALL if small else FLUID_STEPS):
        mid = 0.5 * (lo + hi)
        if mid <= lo * (1 + 1e-6):
            break
        chain = _fluid_chain(rel, lattice, mid, options.overlap_comm, deadline, anchored)
        if chain is None:
            lo = mid
        else:
            hi, within = mid, chain
    best.prove(lo)
    if within is not None and np.isfinite(within.value) and within.chain:
        best.offer(_split_of(p, within, rel, follow=follow_roots(p, rel.dropped)))


class _Best:
    """The incumbent split (valued by the evaluator) and the best proven lower bound."""

    def __init__(self, workload: Workload, options: DPOptions) -> None:
        self.workload = workload
        self.overlap = options.overlap_comm
        self.split: Split | None = None
        self.value = np.inf
        self.bound = 0.0  # on the workload itself
        self.deficit = 0.0  # Prepared.deficit of the units the DP works on
        self.timed_out = False

    def prove(self, bound: float) -> None:
        """Record a lower bound proven on the (folded) units: less their deficit on the workload."""
        self.bound = max(self.bound, bound - self.deficit)

    def offer(self, split: Split) -> None:
        from dnnplace.evaluation import evaluate

        ev = evaluate(self.workload, split, overlap_comm=self.overlap, complete=False)
        if ev.feasible and ev.max_load < self.value:
            self.split, self.value = split, float(ev.max_load)

    def cutoff(self) -> float:
        """A pruning bound for the DP: nothing worse than the incumbent matters."""
        return self.value * (1 + 1e-9) + 1e-12 if np.isfinite(self.value) else np.inf

    def gap(self) -> float:
        if not np.isfinite(self.value) or self.value <= 0:
            return 0.0 if self.value == 0 else np.inf
        return max(0.0, (self.value - self.bound) / self.value)

    def output(self, stats: dict) -> SolverOutput:
        assert self.split is not None
        bound = min(self.bound, self.value)
        if self.timed_out:
            status = "time_limit"
        elif bound >= self.value * (1 - 1e-9):
            status, bound = "optimal", self.value
        else:
            status = "bounded"
        stats["dp_value"] = self.value
        return SolverOutput(plan=self.split, status=status, bound=float(bound), stats=stats)


def _split_of(p: Prepared, result: DPResult, rel: Relaxed | None, lazy: np.ndarray | None = None,
              follow: np.ndarray | None = None) -> Split:
    """The DP's chain as a split of the workload; left-out units are put back (:func:`reinsert`)."""
    w = p.workload
    if rel is not None and not result.chain:  # everything left out was inert: one device holds it all
        on_acc = w.max_accelerators > 0
        return Split.from_assignment(w.node_ids, np.zeros(w.n, dtype=np.int64), int(on_acc), int(not on_acc))
    if rel is None:
        device = result.unit_device[p.unit_of]
    else:
        position = np.empty(len(result.chain), dtype=np.int64)
        kept_pos = np.zeros(rel.kept.size, dtype=np.int64)
        chain_pos = {d: i for i, d in enumerate(result.chain)}
        for u in range(rel.kept.size):
            kept_pos[u] = chain_pos[int(result.unit_device[u])]
        position[:] = result.chain
        unit_pos = reinsert(p, rel, kept_pos, max(1, len(result.chain)), lazy, follow)
        device = position[unit_pos][p.unit_of]
    return Split.from_assignment(w.node_ids, device, result.n_acc_used, result.n_cpu_used)


def _trivial_bound(p: Prepared) -> float:
    """Every unit runs somewhere, at its cheaper kind's speed: a lower bound without any search."""
    w = p.workload
    fits = p.size + p.shared.unit_bytes() <= w.memory
    acc = np.where(p.supported & fits & (w.max_accelerators > 0), p.acc_time, np.inf)
    cheapest = np.minimum(acc, p.cpu_time if w.max_cpus > 0 else np.inf)
    if not np.isfinite(cheapest).all():
        return 0.0
    devices = w.max_accelerators + w.max_cpus
    return float(max(cheapest.max(initial=0.0), cheapest.sum() / max(devices, 1)))


def _infeasible_message(workload: Workload) -> str:
    return (f"no contiguous split fits: with {workload.max_accelerators} accelerators of"
            f" {workload.memory:.6g} bytes and {workload.max_cpus} CPU cores some contiguous"
            " piece always exceeds memory or holds an unsupported node")


def run_dp(
    p: Prepared,
    lattice: IdealLattice,
    w: Workload,
    *,
    overlap: bool = False,
    ub: float = np.inf,
    deadline: float | None = None,
    progress: Any = None,
    piece_cap: float = np.inf,
    anchored: UnitAnchors | None = None,
    on_chunk: Callable[[], None] | None = None,
    left_out_work: float = 0.0,
) -> DPResult:
    """Run the kernel over the whole lattice and backtrack the optimal chain.

    A finite ``piece_cap`` runs the fluid test instead (:func:`fluid_certifies`;
    ``left_out_work``: the left-out compute in all, of which what ``anchored``
    does not place may run anywhere).  ``anchored``: left-out units a piece
    must hold, for a relaxation (:func:`relax.anchors`).  ``on_chunk`` is
    called after each call of the kernel.
    """
    args, dp, choice, kind = _kernel_args(p, lattice, w, overlap=overlap, ub=ub, piece_cap=piece_cap,
                                          anchored=anchored, left_out_work=left_out_work)
    pairs = _run_chunks(args, lattice.n_ideals, deadline, progress, on_chunk)
    return _backtrack(p, lattice, w, dp, choice, kind, pairs)


class KernelArgs(NamedTuple):
    """The arguments of :func:`~dnnplace.solvers.dp.kernel.dp_range` after ``(lo, hi, max_work)``, by meaning."""

    lattice: Any  # kernel.LatticeSums
    transfers: Any  # kernel.Transfers
    limits: Any  # kernel.Limits
    tables: Any  # kernel.Tables: dp, choice, kind (filled in place)
    scratch: Any  # kernel.Scratch
    shared: Any  # kernel.Shared: the shared parameter groups of the units
    anchored: Any  # kernel.Anchored: left-out units a piece must hold (a relaxation's; else empty)


def _kernel_args(p: Prepared, lattice: IdealLattice, w: Workload, *, overlap: bool, ub: float,
                 piece_cap: float, anchored: UnitAnchors | None = None, left_out_work: float = 0.0
                 ) -> tuple[KernelArgs, np.ndarray, np.ndarray, np.ndarray]:
    """The kernel's arrays: lattice sums, per-source transfer tables, the DP tables and scratch space."""
    from dnnplace.solvers.dp.kernel import (
        Anchored,
        LatticeSums,
        Limits,
        Scratch,
        Shared,
        Tables,
        Transfers,
        no_anchors,
        whole_ideal_comm,
        whole_ideal_shared,
    )

    n_cpu, n_acc = w.max_cpus, w.max_accelerators
    N = lattice.n_ideals
    dp = np.empty((N, n_cpu + 1, n_acc + 1))
    dp[0] = 0.0
    choice = np.zeros((N, n_cpu + 1, n_acc + 1), dtype=np.int64)
    kind = np.zeros((N, n_cpu + 1, n_acc + 1), dtype=np.int8)
    src = p.comm
    n_src = src.home.size
    home_order = np.argsort(src.home, kind="stable")
    n_tgt = np.diff(src.target_ptr)
    tgt_owner = np.repeat(np.arange(n_src, dtype=np.int64), n_tgt)
    tgt_order = np.argsort(src.target_idx, kind="stable")
    transfers = Transfers(
        home_ptr=_ptr(src.home, p.n_units), home_src=home_order.astype(np.int64),
        tgt_ptr=_ptr(src.target_idx, p.n_units), tgt_src=tgt_owner[tgt_order],
        src_home=src.home, src_cost=src.cost, src_ntgt=n_tgt.astype(np.int64),
        src_slice=np.full(n_src, np.inf) if src.slice_cost is None else src.slice_cost,
        src_trunk=np.full(n_src, np.inf) if src.trunk_cost is None else src.trunk_cost,
    )
    if anchored is None:
        anc = no_anchors(p.n_units, N)
    else:
        t = anchored.weight.size
        anc = Anchored(unit_ptr=anchored.ptr, unit_item=anchored.item, side=anchored.side, weight=anchored.weight,
                       before=np.zeros(t, dtype=np.int64), after=np.zeros(t, dtype=np.int64), whole=np.zeros(N),
                       n_before=anchored.n_before, avail=np.zeros(N), due=np.zeros(N))
    whole_comm, held, avail, due = whole_ideal_comm(lattice.down_ptr, lattice.down_ideal, lattice.down_unit,
                                                    transfers, np.zeros(n_src, dtype=np.int64),
                                                    np.zeros(p.n_units, dtype=np.int8), anc)
    # the fluid test: items without anchors before may run from the start, other left-out work anywhere
    avail += left_out_work - float(anc.weight[anc.n_before > 0].sum())
    if np.isfinite(piece_cap):  # accelerators left empty before the first piece hold left-out work too
        dp[0] = -np.minimum(avail[0], np.arange(n_acc + 1) * piece_cap)[None, :]
    anc = anc._replace(whole=held, avail=avail, due=due)
    work_acc, forced_cpu, ratio = _work_bounds(p, lattice, float(w.memory))
    sh = p.shared
    args = KernelArgs(
        lattice=LatticeSums(
            down_ptr=lattice.down_ptr, down_ideal=lattice.down_ideal, down_unit=lattice.down_unit,
            acc_sum=lattice.acc_sum, cpu_sum=lattice.cpu_sum, size_sum=lattice.size_sum,
            unsup_sum=lattice.unsupported_sum, work_acc=work_acc, forced_cpu=forced_cpu, whole_comm=whole_comm,
        ),
        transfers=transfers,
        limits=Limits(n_cpu=n_cpu, n_acc=n_acc, memory=float(w.memory), ub=float(ub), overlap=bool(overlap),
                      ratio=ratio, piece_cap=float(piece_cap)),
        tables=Tables(dp=dp, choice=choice, kind=kind),
        scratch=Scratch(stamp=np.full(N, -1, dtype=np.int64), stack_j=np.zeros(p.n_units + 2, dtype=np.int64),
                        stack_e=np.zeros(p.n_units + 2, dtype=np.int64),
                        stack_x=np.zeros(p.n_units + 2, dtype=np.int64), cnt=np.zeros(n_src, dtype=np.int64),
                        in_s=np.zeros(p.n_units, dtype=np.int8),
                        rel=np.zeros((4, (n_cpu + 1) * (n_acc + 1)), dtype=np.int64)),
        shared=Shared(unit_ptr=sh.ptr, unit_group=sh.group, size=sh.size,
                      count=np.zeros(sh.size.size, dtype=np.int64),
                      whole=whole_ideal_shared(lattice.down_ptr, lattice.down_ideal, lattice.down_unit, sh.ptr,
                                               sh.group, sh.size)),
        anchored=anc,
    )
    return args, dp, choice, kind


def _run_chunks(args: KernelArgs, N: int, deadline: float | None, progress: Any,
                on_chunk: Callable[[], None] | None = None) -> int:
    """The kernel over ideals 1..N-1 in calls of about 20 ms (Ctrl-C and deadlines between them).

    A call is bounded by work (pairs examined plus ideals filled), not by a
    count of ideals: an ideal's cost varies by orders of magnitude along the
    lattice, and a count that was cheap a moment ago once made a call last
    over a second.
    """
    from dnnplace.solvers.dp.kernel import dp_range

    pairs = 0
    lo, budget = 1, 1024
    while lo < N:
        t = time.perf_counter()
        hi, p = dp_range(lo, N, budget, *args)
        elapsed = time.perf_counter() - t
        pairs += p
        done = p + (hi - lo)
        if elapsed < 0.005:
            budget = min(budget * 2, 1 << 40)
        else:
            budget = max(64, int(done * 0.02 / elapsed))
        lo = hi
        if progress is not None:
            progress(lo, N, "DP over ideals")
        if on_chunk is not None:
            on_chunk()
        if deadline is not None and time.perf_counter() > deadline and lo < N:
            raise SolverTimeout(f"dp: time limit reached after {lo:,} of {N:,} ideals; raise --time-limit"
                                " or use --contract-layers / --linearize")
    return pairs


def _backtrack(p: Prepared, lattice: IdealLattice, w: Workload, dp: np.ndarray, choice: np.ndarray,
               kind: np.ndarray, pairs: int) -> DPResult:
    """The optimal chain of pieces, from the full ideal back to the empty one."""
    from dnnplace.solvers.dp.kernel import ACC_PIECE, CPU_PIECE, FEWER_ACCS, FEWER_CPUS

    n_cpu, n_acc = w.max_cpus, w.max_accelerators
    full = lattice.full
    value = float(dp[full, n_cpu, n_acc])
    unit_device = np.full(p.n_units, -1, dtype=np.int64)
    if not np.isfinite(value):
        return DPResult(value, unit_device, 0, 0, pairs)
    acc_sets: list[int] = []
    cpu_sets: list[int] = []
    backwards: list[tuple[bool, int]] = []  # (is CPU, index in its list), last piece first
    c, a, cur = n_cpu, n_acc, full
    masks = lattice.masks
    while cur != 0:
        k, j = int(kind[cur, c, a]), int(choice[cur, c, a])
        if k == CPU_PIECE:
            backwards.append((True, len(cpu_sets)))
            cpu_sets.append(masks[cur] & ~masks[j])
            c, cur = c - 1, j
        elif k == ACC_PIECE:
            backwards.append((False, len(acc_sets)))
            acc_sets.append(masks[cur] & ~masks[j])
            a, cur = a - 1, j
        elif k == FEWER_CPUS:
            c -= 1
        elif k == FEWER_ACCS:
            a -= 1
        else:  # pragma: no cover - the kernel always records a choice for finite values
            raise RuntimeError("DP backtracking found no choice")
    pieces = acc_sets[::-1] + cpu_sets[::-1]
    for d, mask in enumerate(pieces):
        for u in _bits(mask):
            unit_device[u] = d
    na, nc = len(acc_sets), len(cpu_sets)
    chain = tuple(na + nc - 1 - i if is_cpu else na - 1 - i for is_cpu, i in reversed(backwards))
    return DPResult(value, unit_device, na, nc, pairs, chain)


def _work_bounds(p: Prepared, lattice: IdealLattice, memory: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-ideal work for the kernel's relevance test.

    Returns the accelerator time of units an accelerator can hold, the CPU
    time of units only a CPU can hold, and the most accelerator time one CPU
    second can stand in for (the largest acc/cpu ratio of a unit).
    """
    capable = p.supported & (p.size + p.shared.unit_bytes() <= memory)
    work = np.where(capable, p.acc_time, 0.0)
    forced = np.where(capable, 0.0, p.cpu_time)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(capable & (p.acc_time > 0), p.acc_time / p.cpu_time, 0.0)
    ratio = float(ratios.max(initial=0.0))
    has = np.diff(lattice.down_ptr) > 0
    first = lattice.down_ptr[:-1]
    parent = np.zeros(lattice.n_ideals, dtype=np.int64)
    unit = np.zeros(lattice.n_ideals, dtype=np.int64)
    parent[has] = lattice.down_ideal[first[has]]
    unit[has] = lattice.down_unit[first[has]]
    work_sum = np.zeros(lattice.n_ideals)
    forced_sum = np.zeros(lattice.n_ideals)
    # ids grow with ideal size, so every parent is filled before its child
    for i in range(1, lattice.n_ideals):
        work_sum[i] = work_sum[parent[i]] + work[unit[i]]
        forced_sum[i] = forced_sum[parent[i]] + forced[unit[i]]
    return work_sum, forced_sum, ratio


def _ptr(keys: np.ndarray, n: int) -> np.ndarray:
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out
