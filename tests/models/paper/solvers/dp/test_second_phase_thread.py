"""The default method's IP runs in a thread beside the DP: it stops when asked and never outlives a solve."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from unittest import mock

import numpy as np
import pytest

import dnnplace
from dnnplace.models.paper.paper_json import workload_from_records
from dnnplace.models.paper.solvers.ip.chain import solve_chain_ip
from dnnplace.models.paper.solvers.prepare import merge_free_units, prepare

pytest.importorskip("highspy")


def _wide(branches: int = 6, length: int = 5, k: int = 4, seed: int = 0):
    """Parallel chains between a fork and a join: many ideals, and an IP that takes a while to close."""
    rng = np.random.default_rng(seed)
    nodes = [{"id": 0, "fpgaLatency": 1.0, "cpuLatency": 1.0, "size": 0.0, "colorClass": 0}]
    edges = []
    cost = {0: 0.5}  # one transfer cost per source (its output)
    for _ in range(branches):
        prev = 0
        for _ in range(length):
            i = len(nodes)
            t = float(rng.uniform(0.5, 3.0))
            nodes.append({"id": i, "fpgaLatency": t, "cpuLatency": t, "size": 0.0, "colorClass": i})
            cost[i] = float(rng.uniform(0.1, 1.0))
            edges.append((prev, i, cost[prev]))
            prev = i
        edges.append((prev, "join", cost[prev]))
    j = len(nodes)
    nodes.append({"id": j, "fpgaLatency": 1.0, "cpuLatency": 1.0, "size": 0.0, "colorClass": j})
    edges = [(a, j if b == "join" else b, c) for a, b, c in edges]
    return workload_from_records(nodes, edges, accelerators=k, cpus=0, memory=1e9)


@pytest.mark.timing
def test_a_set_stop_event_ends_highs_at_once_with_a_valid_bound():
    """Eight chains of six: HiGHS has not closed the gap after 30 s; asked to stop, it answers at once."""
    w = _wide(branches=8, length=6)
    p = merge_free_units(prepare(w))
    stop = threading.Event()
    stop.set()
    t = time.perf_counter()
    res = solve_chain_ip(p, None, deadline=time.perf_counter() + 120.0, gap=0.0, overlap=False, stop=stop)
    assert time.perf_counter() - t < 10.0
    assert res.bound <= dnnplace.solve(w, "dp").value * (1 + 1e-6)


def test_the_bound_of_a_stopped_ip_is_below_the_optimum():
    w = _wide()
    p = merge_free_units(prepare(w))
    stop = threading.Event()
    timer = threading.Timer(0.5, stop.set)
    timer.start()
    res = solve_chain_ip(p, None, deadline=time.perf_counter() + 120.0, gap=0.0, overlap=False, stop=stop)
    timer.cancel()
    assert res.bound <= dnnplace.solve(w, "dp", max_ideals=10**6).value * (1 + 1e-6)


def test_no_second_phase_outlives_the_solve():
    """Through the relaxations (a tiny ideal budget) the IP starts beside them; when the solve returns, its thread
    has ended, whether the relaxations closed the gap first or not."""
    from dnnplace.models.paper.solvers.dp_ip import DPThenIP

    w = _wide(branches=4, length=3)
    with mock.patch.object(DPThenIP, "policy", replace(DPThenIP.policy, finish_min_seconds=0.0)):
        for gap in (0.0, 0.5):
            sol = dnnplace.solve(w, "dp", max_ideals=3, gap=gap)
            assert sol.bound <= sol.value
            assert not [t for t in threading.enumerate() if t.name == "dnnplace-second-phase" and t.is_alive()]
