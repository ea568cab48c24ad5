"""The DP's portfolio: which algorithm runs when, for how long, and beside what.

This module alone owns clocks, threads, the incumbent and the stop event.  A
time limit in seconds becomes an absolute deadline once, in :func:`solve_dp`;
every algorithm it calls (:func:`~dnnplace.models.paper.solvers.dp.exact.run_dp`, the
relaxations, the fluid bound, the coarse restrictions, and the second phase
``finish`` -- the chain IP or the assignment IP) takes explicit deadlines and
only checks them.  The shares and thresholds are the :class:`DPPolicy` in
``options.policy``.

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
from typing import Any

import numpy as np

from dnnplace.core.solver import INTERRUPT_GRACE_S, SolverOutput, expired
from dnnplace.errors import InfeasibleError, SolverTimeout
from dnnplace.models.paper.solvers.dp.coarse import coarse_chain, coarse_upper_bound, exact_lattice
from dnnplace.models.paper.solvers.dp.exact import run_dp
from dnnplace.models.paper.solvers.dp.ideals import enumerate_ideals
from dnnplace.models.paper.solvers.dp.incumbent import (
    Incumbent,
    infeasible_message,
    is_pipeline,
    split_of,
    trivial_bound,
)
from dnnplace.models.paper.solvers.dp.policy import DPOptions, DPPolicy
from dnnplace.models.paper.solvers.dp.relaxations import relaxation_parts, relaxation_search, spine_relaxation
from dnnplace.models.paper.solvers.prepare import Prepared, linearized, merge_free_units, prepare
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload

__all__ = ["DPOptions", "DPPolicy", "Finisher", "solve_dp", "solve_dp_by"]

#: A second phase after the relaxations (:func:`dnnplace.models.paper.solvers.dp_ip.ip_finish`): given the units the DP
#: works on (their workload and deficit), the incumbent split, the bound proven so far on the workload (for
#: pipelines), the time to stop, the options and an event that asks it to stop early (it runs in a thread beside
#: the DP), it returns a split (or None), a lower bound on the workload for every pipeline split, and stats.
Finisher = Callable[[Prepared, Split, float, float, DPOptions, threading.Event],
                    tuple[Split | None, float, dict]]


def solve_dp(workload: Workload, options: DPOptions, *, time_limit: float | None = None,
             finish: Finisher | None = None, extra_groups: np.ndarray | None = None) -> SolverOutput:
    """The optimum, or a split with a certified bound when the lattice is too large.

    ``time_limit`` (seconds; None: the policy's budgets) is turned into the
    deadline here, the one place that does.

    1. Prepare units and apply the exact reductions.
    2. Upper bound: the DP on one topological order of the units (a chain,
       tiny lattice) -- a real split.
    3. If the lattice (inert units left out) fits ``max_ideals``: the exact DP
       (with ``finish``, one over more than ``policy.coarse_first`` ideals
       gets ``policy.exact_share`` of ``policy.default_seconds``, or of the
       ``time_limit``; if it does not finish, steps 4-5 use the rest).
    4. Otherwise relax (:mod:`dnnplace.models.paper.solvers.dp.relaxations`): leave out the
       units parallel to most others, from many to few, while the lattice fits;
       each relaxed optimum is a lower bound and, with the units put back, a
       split.  Stop once the gap is within ``options.gap``.
    5. With ``finish`` (the default method's IP) and a gap still above
       ``options.gap``: the second phase runs in a thread beside steps 3-4
       from the moment a budgeted exact DP starts (above
       ``policy.ip_at_once_ideals`` ideals) or has run ``policy.probe_seconds``,
       or the relaxations start (:class:`_SecondPhase`), from the best split
       then, until the budget ends; the relaxations get ``policy.relax_share``
       (up to ``policy.ip_first_units`` units: ``policy.relax_share_small``) of
       the time.  The better split and the better bound are kept (both
       certified).  Without a ``time_limit`` this path takes
       ``policy.default_seconds`` in all.

    Every split is valued by the evaluator; ``extra_groups`` fuses further
    nodes (the PipeDream emulation's biconnected components).
    """
    start = time.perf_counter()
    deadline = None if time_limit is None else start + time_limit
    return _Portfolio(options, finish, start, deadline).solve(workload, extra_groups)


def solve_dp_by(workload: Workload, options: DPOptions, deadline: float | None, *,
                finish: Finisher | None = None, extra_groups: np.ndarray | None = None) -> SolverOutput:
    """:func:`solve_dp` for a caller that holds an absolute ``deadline`` already (the IP's warm start)."""
    return _Portfolio(options, finish, time.perf_counter(), deadline).solve(workload, extra_groups)


class _Portfolio:
    """One solve: its options and second phase, its clock (``start``, ``deadline``), incumbent and stats."""

    def __init__(self, options: DPOptions, finish: Finisher | None, start: float, deadline: float | None) -> None:
        self.options = options
        self.policy = options.policy
        self.finish = finish
        self.start = start
        self.deadline = deadline  # the caller's; None: only the policy's budgets
        self.stats: dict[str, Any] = {}
        self.best: Incumbent | None = None
        self.phases: list[_SecondPhase] = []  # every second phase started: none outlives the solve

    @property
    def end(self) -> float:
        """When the relaxation path with a second phase ends: the caller's deadline, else the default budget."""
        return self.start + self.policy.default_seconds if self.deadline is None else self.deadline

    def solve(self, workload: Workload, extra_groups: np.ndarray | None) -> SolverOutput:
        """Steps 1-5 of :func:`solve_dp`; every thread it started has ended when it returns or raises -- but
        after Ctrl-C (or a signal the CLI turns into one), which waits at most ``INTERRUPT_GRACE_S`` for them:
        HiGHS answers a cancel only between its steps, and a presolve step can take seconds."""
        interrupted = False
        try:
            return self._solve(workload, extra_groups)
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:
            for phase in self.phases:  # a time limit or an error can leave one running (its answer is not needed)
                phase.cancel(INTERRUPT_GRACE_S if interrupted else None)

    def _solve(self, workload: Workload, extra_groups: np.ndarray | None) -> SolverOutput:
        options, policy, stats = self.options, self.policy, self.stats
        if max(workload.max_accelerators, workload.max_cpus) > workload.n:
            # no split uses more devices than there are nodes; the DP's tables grow with the budget
            workload = workload.with_budget(min(workload.max_accelerators, workload.n),
                                            min(workload.max_cpus, workload.n))
        p0 = prepare(workload, contract_layers=options.contract_layers, linearize=options.linearize,
                     extra_groups=extra_groups)
        p = merge_free_units(p0, compute_slack=not options.overlap_comm)
        stats["units"] = p.n_units
        best = self.best = Incumbent(workload, options.overlap_comm)
        best.bound = trivial_bound(p0)
        if p.n_units > policy.large_units:
            coarse_chain(p, best, options, self.deadline, stats)
            return best.output(stats)
        if not options.linearize and p.n_units > 1:
            chain = linearized(p)
            # no deadline: this chain (at most large_units + 1 ideals) is the answer a time limit falls back on
            first = run_dp(chain, enumerate_ideals(chain, max(options.max_ideals, p.n_units + 2)), workload,
                           overlap=options.overlap_comm, ub=np.inf)
            if np.isfinite(first.value):
                best.offer(split_of(p, first, None))
            stats["upper_bound"] = float(first.value)
        exact = p  # the units of the exact reductions alone (no deficit): the second phase works on these
        inert, base, lattice = exact_lattice(p, options)
        if lattice is None and not options.overlap_comm and p.n_units <= policy.wider_units:
            # too wide for the exact DP: fold the cheap units whose folds may raise a load a little as well
            # (the relaxations then work on the folded units too)
            wider = merge_free_units(p, compute_slack=True, allowance=policy.fold_allowance * options.gap * best.bound)
            if wider.n_units < p.n_units:
                p = wider
                inert, base, lattice = exact_lattice(p, options)
                best.deficit = p.deficit
                stats.update(units=p.n_units, fold_deficit=p.deficit)
        best.prove(trivial_bound(p))
        q = base.prepared if base is not None else p
        stats["inert_units"] = int(inert.sum())
        try:
            if lattice is not None:
                stats["ideals"] = lattice.n_ideals
                if lattice.n_ideals > policy.coarse_first and not options.linearize:
                    coarse_upper_bound(p, lattice.n_ideals, best, options, self.deadline, stats)
                # the default method: a large exact DP gets a share of the budget (or of the time limit), with the
                # IP beside it (at once on a huge lattice, else once the DP has run a while)
                budgeted = self.finish is not None and lattice.n_ideals > policy.coarse_first
                budget = policy.default_seconds if self.deadline is None else self.deadline - self.start
                exact_end = self.start + policy.exact_share * budget
                holder: list[_SecondPhase | None] = []
                if budgeted and lattice.n_ideals > policy.ip_at_once_ideals:
                    holder.append(self._second_phase(exact))
                began = time.perf_counter()

                def watch() -> None:
                    """Start the IP beside the exact DP once it has run a while."""
                    if not holder and time.perf_counter() - began >= policy.probe_seconds:
                        holder.append(self._second_phase(exact))

                try:
                    result = run_dp(q, lattice, workload, overlap=options.overlap_comm, ub=best.cutoff(),
                                    deadline=exact_end if budgeted else self.deadline,
                                    progress=options.progress, on_chunk=watch if budgeted else None)
                except SolverTimeout:
                    if not budgeted:
                        raise
                    stats["exact_dp_stopped_after_s"] = round(time.perf_counter() - self.start, 3)
                    self._relax_then_finish(p, exact, inert, holder[0] if holder else None)
                    return best.output(stats)
                # the exact DP ended first: the IP beside it is not needed (solve cancels it)
                stats["pairs_examined"] = result.pairs
                if np.isfinite(result.value):
                    best.offer(split_of(p, result, base))
                    best.prove(result.value)
                    stats["dp_value"] = float(result.value)
                elif best.split is None:
                    raise InfeasibleError(infeasible_message(workload))
                else:
                    best.prove(best.value)  # nothing below the incumbent exists
            else:
                self._relax_then_finish(p, exact, inert, None)
        except SolverTimeout:
            if best.split is None:
                raise
            best.timed_out = True
        if best.split is None:
            raise InfeasibleError(infeasible_message(workload))
        return best.output(stats)

    def _relax_then_finish(self, p: Prepared, exact: Prepared, inert: np.ndarray,
                           second: _SecondPhase | None) -> None:
        """:meth:`_relax_and_finish`; a caller's time limit that ends with the gap above target is ``time_limit``."""
        assert self.best is not None
        self._relax_and_finish(p, exact, inert, second)
        if self.deadline is not None and self.best.gap() > self.options.gap:
            self.best.timed_out = True

    def _relax_and_finish(self, p: Prepared, exact: Prepared, inert: np.ndarray,
                          second: _SecondPhase | None) -> None:
        """Steps 4 and 5 of :func:`solve_dp`: the relaxations, with the second phase beside them.

        The relaxations work on ``p`` (perhaps folded with an allowance); the
        second phase on ``exact``, the units before those folds, so that what it
        proves needs no deficit subtracted.
        The second phase runs in a thread from the start (``second``, or started
        here) until the budget ends, while the relaxations use their share; then
        the better split and the better bound are kept.

        Raises :class:`SolverTimeout` only when the caller's ``time_limit`` ran out
        (the answer's status is then ``time_limit``); the default budget ending is
        not a time limit.
        """
        best, options, policy, stats, deadline = self.best, self.options, self.policy, self.stats, self.deadline
        assert best is not None
        if self.finish is None:
            end = time.perf_counter() + policy.relax_seconds
            relax_end = end if deadline is None else min(deadline, end)
            refine_end = time.perf_counter() + policy.refine_seconds
        else:
            end = self.end
            # the IP gets most of a caller's time limit whatever the size (the relaxations plateau on wide graphs)
            small = exact.n_units <= policy.ip_first_units or deadline is not None
            share = policy.relax_share_small if small else policy.relax_share
            relax_end = refine_end = self.start + share * (end - self.start)
            if second is None:
                second = self._second_phase(exact)
        try:
            self._relaxations(p, exact, inert, relax_end, refine_until=min(refine_end, relax_end))
        except SolverTimeout:
            if deadline is not None and time.perf_counter() >= deadline:
                raise
            stats["relaxation_stopped_after_s"] = round(time.perf_counter() - self.start, 3)  # an answer, bounded
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

    def _relaxations(self, p: Prepared, exact: Prepared, inert: np.ndarray, deadline: float,
                     refine_until: float) -> None:
        """The spine relaxation on ``exact`` (a chain lattice whatever the width: the folds buy it nothing and
        their deficit would cost its bound), a polish of its split, then :func:`relaxation_search` on ``p``."""
        from dnnplace.models.paper.solvers.polish import polish

        best, options, stats = self.best, self.options, self.stats
        assert best is not None
        parts = relaxation_parts(p, inert)
        stats["view_units"] = int(parts[0].sum())
        tried = 0
        if expired(deadline):
            raise SolverTimeout("dp: time limit reached while relaxing")
        if spine_relaxation(exact, best, options, deadline, refine_until, stats, parts if exact is p else None):
            tried += 1
            if best.gap() > options.gap and best.split is not None:  # its cut through a scan, a step or two better
                before = best.value
                best.offer(polish(p.workload, best.split,
                                  min(refine_until, time.perf_counter() + self.policy.polish_seconds),
                                  options.overlap_comm))
                stats["polished_from"] = before
            if best.gap() <= options.gap:
                stats["relaxations"] = tried
                return
        relaxation_search(p, parts, best, options, deadline, stats, refine_until, tried)

    def _second_phase(self, exact: Prepared) -> _SecondPhase | None:
        """Start ``finish`` beside the DP if it may help: a gap to close, a small enough graph (or a time limit),
        time left."""
        best, options, policy, finish = self.best, self.options, self.policy, self.finish
        assert best is not None
        if finish is None or best.split is None or best.gap() <= options.gap:
            return None
        if exact.n_units > policy.ip_max_units and self.deadline is None:
            self.stats["ip_phase"] = f"left out: more than {policy.ip_max_units} units (give --time-limit to run it)"
            return None
        end = self.end
        if end - time.perf_counter() < policy.finish_min_seconds:
            return None
        split, bound = best.split, best.bound
        phase = _SecondPhase(lambda stop: finish(exact, split, bound, end, options, stop))
        self.phases.append(phase)
        return phase


class _SecondPhase:
    """A second phase in a thread beside the DP, from the incumbent and bound known when it starts.

    HiGHS runs in a native thread of its own and the DP's kernel on the
    other core, so neither waits for the other: the IP gets the whole budget
    instead of what the relaxations leave.
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

    def join(self, cancel: bool = False) -> tuple[Split | None, float, dict] | None:
        """Its split, bound and stats (asking it to stop first with ``cancel``)."""
        if cancel:
            self.stop.set()
        self._wait()
        if self.error is not None:
            raise self.error
        return self.out

    def cancel(self, limit: float | None = None) -> None:
        """Stop it and wait until it has, or for ``limit`` seconds at most (its result and any error are
        dropped; past the limit the daemon thread winds down on its own at HiGHS's next step)."""
        self.stop.set()
        self._wait(limit)

    def _wait(self, limit: float | None = None) -> None:
        """Until the thread ends (or ``limit`` seconds), in slices so that Ctrl-C gets through: HiGHS answers a
        cancel between steps (its presolve is one step, up to seconds on a large model), and highspy lets one
        solver run at a time in a process."""
        until = None if limit is None else time.perf_counter() + limit
        while self.thread.is_alive() and (until is None or time.perf_counter() < until):
            self.thread.join(0.05)
