"""The portfolio owns its second phase's thread: no way out of a solve leaves one running."""

from __future__ import annotations

import threading
import time
from unittest import mock

import pytest

from dnnplace.core.solver import INTERRUPT_GRACE_S
from dnnplace.errors import SolverTimeout
from dnnplace.models.paper.paper_json import workload_from_records
from dnnplace.models.paper.solvers.dp import portfolio
from dnnplace.models.paper.solvers.dp.policy import DPOptions, DPPolicy


def _wide():
    nodes = [{"id": i, "fpgaLatency": 1.0 + (i % 3), "cpuLatency": 1.0, "size": 0.0, "colorClass": i}
             for i in range(9)]
    edges = [(0, i, 0.5) for i in range(1, 8)] + [(i, 8, 0.25) for i in range(1, 8)]
    return workload_from_records(nodes, edges, accelerators=3, cpus=0, memory=1e9)


def test_a_time_limit_ending_in_the_relaxations_stops_the_second_phase():
    """The relaxations run past the caller's deadline while the second phase (started with them) waits only
    for its stop event: the solve answers ``time_limit`` and has stopped that thread when it returns."""
    started = threading.Event()

    def finish(p, split, bound, end, options, stop):
        started.set()
        stop.wait(30.0)  # ignores its deadline: only the stop event ends it
        return None, 0.0, {}

    def late_spine(*args, **kwargs):
        time.sleep(max(0.0, deadline[0] - time.perf_counter()) + 0.05)
        raise SolverTimeout("dp: time limit reached while relaxing")

    w = _wide()
    portfolio.solve_dp(w, DPOptions())  # compiled code loaded before the clock starts
    options = DPOptions(max_ideals=3, gap=0.0, policy=DPPolicy(relax_share_small=1.0))  # relax until the deadline
    deadline = [time.perf_counter() + 2.0]
    with mock.patch.object(portfolio, "spine_relaxation", late_spine):
        deadline[0] = time.perf_counter() + 2.0
        out = portfolio.solve_dp(w, options, time_limit=2.0, finish=finish)
    assert started.is_set() and out.status == "time_limit"
    assert not [t for t in threading.enumerate() if t.name == "dnnplace-second-phase" and t.is_alive()]


@pytest.mark.timing
def test_ctrl_c_waits_for_the_second_phase_a_bounded_time():
    """Ctrl-C in the relaxations while HiGHS is inside one long step (a presolve: it answers a cancel only between
    steps): the solve re-raises within INTERRUPT_GRACE_S and some slack, and the thread ends at its next step."""
    release, started = threading.Event(), threading.Event()

    def finish(p, split, bound, end, options, stop):
        started.set()
        release.wait(30.0)  # one long step: deaf to the stop event until it ends
        return None, 0.0, {}

    def interrupted_spine(*args, **kwargs):
        started.wait(10.0)
        raise KeyboardInterrupt

    w = _wide()
    portfolio.solve_dp(w, DPOptions())  # compiled code loaded before the clock starts
    options = DPOptions(max_ideals=3, gap=0.0, policy=DPPolicy(relax_share_small=1.0))
    with mock.patch.object(portfolio, "spine_relaxation", interrupted_spine):
        t0 = time.perf_counter()
        try:
            portfolio.solve_dp(w, options, time_limit=20.0, finish=finish)
        except KeyboardInterrupt:
            took = time.perf_counter() - t0
        else:
            raise AssertionError("the interrupt was swallowed")
    assert started.is_set() and took < INTERRUPT_GRACE_S + 1.0, took
    release.set()
    for t in threading.enumerate():
        if t.name == "dnnplace-second-phase":
            t.join(5.0)
            assert not t.is_alive()
