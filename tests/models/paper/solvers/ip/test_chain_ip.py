"""The chain-of-ideals IP (the default method's second phase) against brute force on tiny instances.

Its optimum is the DP's (a min over chains of ideals), its bound never
exceeds it, with a warm start or without, on the exact units and on a
relaxation whose left-out compute is spread as fluid.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import brute_force_contiguous_optimum
from strategies import examples, small_workloads

import dnnplace
from dnnplace.models.paper.evaluation import evaluate
from dnnplace.models.paper.solvers.dp.incumbent import is_pipeline
from dnnplace.models.paper.solvers.dp.relax import relax
from dnnplace.models.paper.solvers.dp_ip import DPThenIP, split_of_stages, unit_devices
from dnnplace.models.paper.solvers.ip.chain import chain_ip_applies, solve_chain_ip
from dnnplace.models.paper.solvers.prepare import prepare

pytest.importorskip("highspy")
SETTINGS = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _tol(x: float) -> float:
    return 1e-6 * max(1.0, abs(x))


def _solve(p, start=None, overlap=False, **kw):
    return solve_chain_ip(p, start, deadline=time.perf_counter() + 30.0, gap=0.0, overlap=overlap, **kw)


@SETTINGS
@given(w=small_workloads(max_cpu=0, shared=True), overlap=st.booleans(), warm=st.booleans())
def test_chain_ip_finds_the_brute_force_optimum(w, overlap, warm):
    """Every pipeline is one of its solutions and nothing else is: same optimum as brute force, the split
    re-valued by the evaluator, the bound below the optimum."""
    p = prepare(w)
    expected = brute_force_contiguous_optimum(w, overlap)
    if not chain_ip_applies(p):
        assert not p.supported.all()
        return
    start = None
    if warm and math.isfinite(expected):
        start = unit_devices(p, dnnplace.solve(w, "dp", overlap_comm=overlap).split)
    res = _solve(p, start, overlap=overlap)
    if math.isinf(expected):
        assert res.stage is None
        return
    assert res.stage is not None
    split = split_of_stages(p, res.stage)
    ev = evaluate(w, split, overlap_comm=overlap, complete=False)
    assert ev.feasible and ev.contiguous and is_pipeline(w, split)
    assert math.isclose(ev.max_load, expected, rel_tol=1e-6, abs_tol=1e-6), (ev.max_load, expected)
    assert res.bound <= expected + _tol(expected)


@SETTINGS
@given(w=small_workloads(max_cpu=0, training=False), overlap=st.booleans(), data=st.data())
def test_relaxed_chain_ip_with_fluid_bounds_the_optimum(w, overlap, data):
    """Units left out, their compute spread over the stages as fluid: still a lower bound on the whole graph."""
    p = prepare(w)
    expected = brute_force_contiguous_optimum(w, overlap)
    if not chain_ip_applies(p) or math.isinf(expected) or p.n_units < 2:
        return
    drop = np.array(data.draw(st.lists(st.booleans(), min_size=p.n_units, max_size=p.n_units)))
    if drop.all():
        drop[0] = False
    rel = relax(p, drop)
    fluid = float(w.acc_time[rel.prepared.unit_of < 0].sum())
    res = _solve(rel.prepared, overlap=overlap, fluid=fluid)
    assert res.bound <= expected + _tol(expected), (res.bound, expected)


@SETTINGS
@given(w=small_workloads(max_cpu=0), data=st.data())
def test_lower_bound_floor_keeps_the_bound_valid(w, data):
    """A floor at or below the optimum (the DP's proven bound) never lifts the IP's bound above the optimum."""
    p = prepare(w)
    expected = brute_force_contiguous_optimum(w)
    if not chain_ip_applies(p) or math.isinf(expected):
        return
    floor = expected * data.draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]))
    res = _solve(p, lower_bound=floor)
    assert floor - 2 * _tol(floor) <= res.bound <= expected + _tol(expected)  # the bound loses 1e-6 (tolerance)


def test_second_phase_on_accelerators_is_the_chain_ip():
    """The default method hands a wide accelerator-only graph to the chain IP, and its answer is certified."""
    from unittest import mock

    from dnnplace.models.paper.paper_json import workload_from_records
    nodes = [{"id": i, "fpgaLatency": 1.0 + (i % 3), "cpuLatency": 1.0, "size": 0.0, "colorClass": i}
             for i in range(9)]
    edges = [(0, i, 0.5) for i in range(1, 8)] + [(i, 8, 0.25) for i in range(1, 8)]  # 7 parallel branches
    w = workload_from_records(nodes, edges, accelerators=3, cpus=0, memory=1e9)
    expected = brute_force_contiguous_optimum(w)
    with mock.patch.object(DPThenIP, "policy", replace(DPThenIP.policy, finish_min_seconds=0.0)):
        sol = dnnplace.solve(w, "dp", max_ideals=3, gap=0.0)
    assert sol.stats.get("ip_units") is not None  # the chain IP ran (the assignment IP does not set it)
    assert sol.bound <= expected + _tol(expected) and math.isclose(sol.value, expected, rel_tol=1e-9)


def test_large_graphs_get_the_ip_only_with_a_time_limit():
    """Above policy.ip_max_units the default budget skips the IP (its root LP outlasts it); a time limit runs it."""
    from unittest import mock

    from dnnplace.models.paper.paper_json import workload_from_records
    nodes = [{"id": i, "fpgaLatency": 1.0 + (i % 3), "cpuLatency": 1.0, "size": 0.0, "colorClass": i}
             for i in range(9)]
    edges = [(0, i, 0.5) for i in range(1, 8)] + [(i, 8, 0.25) for i in range(1, 8)]
    w = workload_from_records(nodes, edges, accelerators=3, cpus=0, memory=1e9)
    with mock.patch.object(DPThenIP, "policy", replace(DPThenIP.policy, finish_min_seconds=0.0, ip_max_units=1)):
        default = dnnplace.solve(w, "dp", max_ideals=3, gap=0.0)
        limited = dnnplace.solve(w, "dp", max_ideals=3, gap=0.0, time_limit=20.0)
    assert "ip_units" not in default.stats and "left out" in default.stats["ip_phase"]
    assert limited.stats.get("ip_units") is not None
    assert math.isclose(limited.value, brute_force_contiguous_optimum(w), rel_tol=1e-9)
