"""A thin MIP builder over HiGHS (highspy): columns and rows in bulk, honest results.

Models are assembled as numpy triplets and handed to HiGHS in one call, which
is far faster than adding constraints one by one through the modelling layer.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from dnnplace.core.solver import INTERRUPT_GRACE_S, ProgressFn
from dnnplace.errors import DnnplaceError, SolverTimeout

INF = float("inf")


@dataclass
class MipResult:
    """What HiGHS proved: status, incumbent values, objective, bound and gap."""

    status: str  # optimal (gap 0) | bounded (optimal within a positive gap) | time_limit | infeasible | no_solution
    values: np.ndarray | None
    objective: float
    bound: float
    gap: float
    seconds: float


@contextmanager
def _silenced_stdout():
    """Send file descriptor 1 to /dev/null (C code bypasses sys.stdout)."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _run_interruptibly(h: Any, stop_at: float | None = None, stop: threading.Event | None = None) -> None:
    """``h.run()`` in HiGHS's solver thread, so that Ctrl-C stops it within a fraction of a second.

    The main thread waits in short slices; on KeyboardInterrupt it asks HiGHS to
    stop (its interrupt callbacks poll the request), waits for the solver thread
    to wind down and re-raises, so the CLI exits 130 without writing anything.
    Past ``stop_at`` (``time.perf_counter()`` seconds) it asks HiGHS to stop as
    well and lets it return what it has: HiGHS checks its own time limit only
    between steps, and on a large model was seen running seconds past it.  Once
    ``stop`` is set (by a caller running this in a thread of its own, which
    receives no KeyboardInterrupt) it stops HiGHS the same way.
    """
    h.HandleUserInterrupt = True  # subscribes the simplex / IPM / MIP interrupt callbacks
    h.startSolve()
    cancelled = False
    try:
        while not h.wait(0.05)[0]:
            late = stop_at is not None and time.perf_counter() > stop_at
            if not cancelled and (late or (stop is not None and stop.is_set())):
                h.cancelSolve()
                cancelled = True
    except KeyboardInterrupt:
        h.cancelSolve()
        give_up = time.monotonic() + INTERRUPT_GRACE_S
        while time.monotonic() < give_up:
            try:
                if h.wait(0.05)[0]:
                    break
            except KeyboardInterrupt:
                h.cancelSolve()
        raise


class BuildTimeout(SolverTimeout):
    """The deadline passed while the model was still being built (or before HiGHS could start)."""


STOP_GRACE_SECONDS = 0.2  # past its time limit by this much, HiGHS is asked to stop (see _run_interruptibly)
GAP_ZERO = 1e-9  # a relative gap at most this is "optimal"; above it the result is "bounded"


class MipBuilder:
    """Collects variables and sparse rows, then solves with HiGHS.

    With a ``deadline`` (``time.perf_counter()`` seconds) building checks the clock every few thousand
    rows and raises :class:`BuildTimeout` once it has passed; :meth:`solve` gives HiGHS what is left.
    """

    def __init__(self, deadline: float | None = None) -> None:
        self.deadline = deadline
        self._ticks = 0
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.cost: list[float] = []
        self.integer: list[bool] = []
        self.row_lo: list[float] = []
        self.row_hi: list[float] = []
        self.row_idx: list[np.ndarray] = []
        self.row_val: list[np.ndarray] = []

    @property
    def n_cols(self) -> int:
        return len(self.lb)

    def check_deadline(self) -> None:
        """Raise :class:`BuildTimeout` when the deadline has passed."""
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise BuildTimeout("the time limit ran out while building the IP model; raise --time-limit")

    def _tick(self) -> None:
        self._ticks += 1
        if self._ticks >= 2048:
            self._ticks = 0
            self.check_deadline()

    def add_vars(self, count: int, lb: float = 0.0, ub: float = INF, cost: float = 0.0,
                 integer: bool = False) -> np.ndarray:
        """Add ``count`` columns; return their indices."""
        self._tick()
        start = len(self.lb)
        self.lb.extend([lb] * count)
        self.ub.extend([ub] * count)
        self.cost.extend([cost] * count)
        self.integer.extend([integer] * count)
        return np.arange(start, start + count, dtype=np.int64)

    def fix(self, cols: np.ndarray, value: float) -> None:
        self._tick()
        for c in np.atleast_1d(cols).tolist():
            self.lb[c] = value
            self.ub[c] = value

    def row(self, idx: Sequence[Any] | np.ndarray, val: Sequence[float] | np.ndarray, lo: float = -INF,
            hi: float = INF) -> None:
        """Add ``lo <= sum(val * x[idx]) <= hi``."""
        self._tick()
        self.row_idx.append(np.asarray(idx, dtype=np.int64))
        self.row_val.append(np.asarray(val, dtype=np.float64))
        self.row_lo.append(lo)
        self.row_hi.append(hi)

    def solve(
        self,
        *,
        time_limit: float | None,
        gap: float,
        threads: int | None,
        start: dict[int, float] | None = None,
        progress: ProgressFn | None = None,
        label: str = "IP",
        stop: threading.Event | None = None,
        highs_options: dict[str, Any] | None = None,
    ) -> MipResult:
        """Solve; ``start`` gives values of some integer columns as a MIP start.

        ``time_limit`` None: no limit (but the builder's deadline, when it has one, still applies).
        """
        if self.deadline is not None:
            remaining = self.deadline - time.perf_counter()
            if remaining <= 0:
                self.check_deadline()
            time_limit = remaining if time_limit is None else min(time_limit, remaining)
        try:
            import highspy
        except ImportError:  # pragma: no cover - highspy is a dependency
            raise DnnplaceError("the IP methods need highspy: pip install highspy") from None
        with _silenced_stdout():  # HiGHS prints its banner on construction
            h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("mip_rel_gap", float(gap))
        if gap <= GAP_ZERO:  # a proven optimum: no absolute tolerance either (HiGHS's default is 1e-6)
            h.setOptionValue("mip_abs_gap", 0.0)
        if time_limit is not None:
            h.setOptionValue("time_limit", float(time_limit))
        if threads is not None:
            h.setOptionValue("threads", int(threads))
        for key, value in (highs_options or {}).items():
            h.setOptionValue(key, value)
        n = self.n_cols
        inf = highspy.kHighsInf
        lb = np.array(self.lb)
        ub = np.array(self.ub)
        h.addVars(n, np.where(np.isinf(lb), -inf, lb), np.where(np.isinf(ub), inf, ub))
        h.changeColsCost(n, np.arange(n, dtype=np.int32), np.array(self.cost))
        ints = np.flatnonzero(np.array(self.integer)).astype(np.int32)
        if ints.size:
            h.changeColsIntegrality(ints.size, ints,
                                    np.full(ints.size, highspy.HighsVarType.kInteger))
        if self.row_idx:
            lens = np.array([r.size for r in self.row_idx])
            starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int32)
            lo = np.array(self.row_lo)
            hi = np.array(self.row_hi)
            h.addRows(len(self.row_idx), np.where(np.isinf(lo), -inf, lo), np.where(np.isinf(hi), inf, hi),
                      int(lens.sum()), starts, np.concatenate(self.row_idx).astype(np.int32),
                      np.concatenate(self.row_val))
        if start:
            idx = np.array(sorted(start), dtype=np.int32)
            h.setSolution(idx.size, idx, np.array([start[i] for i in idx.tolist()]))
        t0 = time.perf_counter()
        if progress is not None:
            def on_log(e: Any) -> None:
                d = e.data_out
                progress(time.perf_counter() - t0, time_limit or 0.0,
                         f"{label}: incumbent {d.mip_primal_bound:.6g}, bound {d.mip_dual_bound:.6g},"
                         f" gap {100 * min(d.mip_gap, 9.99):.1f}%")

            h.cbMipImprovingSolution.subscribe(on_log)
            h.cbMipLogging.subscribe(on_log)
        _run_interruptibly(h, None if time_limit is None else t0 + float(time_limit) + STOP_GRACE_SECONDS, stop)
        seconds = time.perf_counter() - t0
        model_status = h.getModelStatus()
        info = h.getInfo()
        ms = highspy.HighsModelStatus
        has_sol = info.primal_solution_status == 2  # kSolutionStatusFeasible
        if model_status == ms.kInfeasible:
            return MipResult("infeasible", None, INF, INF, INF, seconds)
        values = np.array(h.getSolution().col_value) if has_sol else None
        objective = float(info.objective_function_value) if has_sol else INF
        bound = float(info.mip_dual_bound)
        if model_status == ms.kOptimal:
            # HiGHS stops "optimal" within mip_rel_gap: only a zero gap proves the optimum
            status = "optimal" if has_sol and float(info.mip_gap) <= GAP_ZERO else "bounded"
        elif has_sol:
            status = "time_limit"
        else:
            status = "no_solution"
        gap_v = float(info.mip_gap) if has_sol else INF
        if start and values is not None and abs(float(np.dot(self.cost, values)) - objective) > 1e-6 * max(
                1.0, abs(objective)):
            # HiGHS can report the optimum's objective while handing back the MIP start's columns: those
            # are not the solution it found, so solve again without the start (in the time that is left)
            again_limit = None if time_limit is None else max(1.0, time_limit - seconds)
            out_of_time = self.deadline is not None and time.perf_counter() >= self.deadline
            if out_of_time or (stop is not None and stop.is_set()):
                return MipResult("time_limit", values, float(np.dot(self.cost, values)), bound, gap_v, seconds)
            again = self.solve(time_limit=again_limit, gap=gap, threads=threads, progress=progress, label=label,
                               stop=stop, highs_options=highs_options)
            return MipResult(again.status, again.values, again.objective, again.bound, again.gap,
                             seconds + again.seconds)
        return MipResult(status, values, objective, bound, gap_v, seconds)
