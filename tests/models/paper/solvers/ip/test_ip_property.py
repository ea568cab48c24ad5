"""Integer programs against brute force on tiny instances, and against the DP and greedy."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from oracle import (
    brute_force_assignments,
    fits,
    fw_bw_objective,
    is_contiguous,
    max_load,
    oracle_latency,
)
from strategies import examples, small_workloads

import dnnplace

pytest.importorskip("highspy")
SETTINGS = settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
OPTS = {"time_limit": 20.0, "gap": 0.0}


def _sets(labels, n_dev):
    return [{v for v, d in enumerate(labels) if d == dd} for dd in range(n_dev)]


def brute_throughput(w, contiguous: bool, contiguous_cpus: bool = True, objective: str = "throughput"):
    k, l = w.max_accelerators, w.max_cpus
    best = math.inf
    for labels in brute_force_assignments(w, k + l):
        if not fits(w, labels, k):
            continue
        sets = _sets(labels, k + l)
        if contiguous and not all(is_contiguous(w, s) for s in (sets if contiguous_cpus else sets[:k])):
            continue
        value = (fw_bw_objective(w, labels, k, k + l) if objective == "fw+bw"
                 else max_load(w, sets[:k], sets[k:]))
        best = min(best, value)
    return best


def _close(a, b):
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)


@SETTINGS
@given(small_workloads(max_nodes=5, training=False, max_acc=2, max_cpu=1))
def test_ip_equals_brute_force(w):
    for method, contiguous in (("ip", True), ("ip-noncontig", False)):
        expected = brute_throughput(w, contiguous)
        if math.isinf(expected):
            with pytest.raises(dnnplace.DnnplaceError):
                dnnplace.solve(w, method, **OPTS)
            continue
        sol = dnnplace.solve(w, method, **OPTS)
        assert sol.evaluation.feasible, sol.evaluation.violations
        assert sol.status == "optimal"
        assert _close(sol.value, expected), (method, sol.value, expected)


@SETTINGS
@given(small_workloads(max_nodes=4, training=True, max_acc=2, max_cpu=1))
def test_ip_training_and_fw_bw_equal_brute_force(w):
    for objective in ("throughput", "fw+bw"):
        expected = brute_throughput(w, True, objective=objective)
        if math.isinf(expected):
            continue
        sol = dnnplace.solve(w, "ip", objective=objective, **OPTS)
        assert sol.evaluation.feasible
        assert _close(sol.value, expected), (objective, sol.value, expected)


@SETTINGS
@given(small_workloads(max_nodes=6, training=None, max_acc=3, max_cpu=1))
def test_ip_orderings(w):
    try:
        dp = dnnplace.solve(w, "dp")
    except dnnplace.DnnplaceError:
        return
    ip = dnnplace.solve(w, "ip", **OPTS)
    nc = dnnplace.solve(w, "ip-noncontig", **OPTS)
    assert ip.value <= dp.value + 1e-6
    assert nc.value <= ip.value + 1e-6
    if len(w.edge_src) == w.n - 1 and all(w.edge_dst == w.edge_src + 1) and not w.is_training:
        assert _close(ip.value, dp.value)  # on a chain every contiguous split is an ideal chain


def brute_latency(w):
    k = w.max_accelerators
    best = math.inf
    for labels in brute_force_assignments(w, k + 1):
        if not fits(w, labels, k):
            continue
        if not all(is_contiguous(w, s, forward_only=False) for s in _sets(labels, k)):
            continue
        best = min(best, oracle_latency(w, labels, k))
    return best


@SETTINGS
@given(small_workloads(max_nodes=5, training=False, max_acc=2, max_cpu=1))
def test_latency_ip_equals_brute_force_and_beats_heuristics(w):
    sol = dnnplace.solve(w, "ip", objective="latency", **OPTS)
    assert sol.evaluation.feasible, sol.evaluation.violations
    assert _close(sol.value, brute_latency(w)), (sol.value, brute_latency(w))
    greedy = dnnplace.solve(w, "greedy", objective="latency")
    assert sol.value <= greedy.value + 1e-6
    try:
        dp = dnnplace.solve(w, "dp")
    except dnnplace.DnnplaceError:
        return
    assert sol.value <= dp.evaluation.latency + 1e-6


def test_ip_returns_its_optimum_not_the_mip_start():
    # found by hypothesis: HiGHS reported objective 5.0 but handed back the DP start's columns (value 5.5)
    nodes = [{"id": i, "fpgaLatency": a, "cpuLatency": c, "supportedOnFpga": s, "size": z}
             for i, (a, c, s, z) in enumerate([(0, 0, True, 0), (1, 0.5, True, 3), (1, 2, True, 2),
                                               (1, 5, False, 1), (1, 0.5, True, 1)])]
    w = dnnplace.workload_from_records(nodes, [(i, i + 1, 0.0) for i in range(4)], accelerators=2, cpus=1,
                                       memory=4.0)
    sol = dnnplace.solve(w, "ip-noncontig")
    assert sol.value == pytest.approx(5.0) and sol.value == pytest.approx(sol.stats["ip_objective"])
