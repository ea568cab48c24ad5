"""Shared parameter groups (SPEC "Shared parameters"): DP, IPs and evaluator against brute force.

Every accelerator holding a node that uses a group keeps one copy of it; the
oracle (tests/oracle.py) charges memory straight from that sentence.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from oracle import brute_force_assignments, brute_force_contiguous_optimum, device_memory, fits, is_contiguous, max_load
from strategies import examples, small_workloads

import dnnplace
from dnnplace.models.paper.paper_json import parse_workload, workload_from_records, workload_to_dict

SETTINGS = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
IP_OPTS = {"time_limit": 20.0, "gap": 0.0}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)


def _recheck(w, sol) -> None:
    """The evaluator's memory and copies agree with the oracle on the returned split, and it is feasible."""
    ev = sol.evaluation
    assert ev.feasible, ev.violations
    sh = w.shared
    for d in ev.devices:
        members = {w.index_of[v] for v in d.nodes}
        if d.kind == "accelerator":
            assert math.isclose(d.memory, device_memory(w, members), rel_tol=1e-12, abs_tol=1e-12)
            assert d.memory <= w.memory * (1 + 1e-12)
        using = {sh.names[g] for g in range(sh.count) if set(sh.members(g).tolist()) & members}
        assert set(d.shared) == using, (d.name, d.shared, using)


def _dp_check(w) -> None:
    expected = brute_force_contiguous_optimum(w)
    if math.isinf(expected):
        with pytest.raises(dnnplace.DnnplaceError):
            dnnplace.solve(w, "dp")
        return
    sol = dnnplace.solve(w, "dp")
    _recheck(w, sol)
    assert sol.evaluation.contiguous
    assert sol.status == "optimal"
    assert _close(sol.value, expected), (sol.value, expected)
    acc = [{w.index_of[v] for v in d} for d in sol.split.accelerators]
    cpu = [{w.index_of[v] for v in d} for d in sol.split.cpus]
    assert _close(max_load(w, acc, cpu), sol.value)


@SETTINGS
@given(small_workloads(shared=True, training=False))
def test_dp_with_shared_groups_matches_brute_force_inference(w):
    _dp_check(w)


@SETTINGS
@given(small_workloads(max_nodes=5, training=True, max_acc=2, max_cpu=1, shared=True))
def test_dp_with_shared_groups_matches_brute_force_training(w):
    _dp_check(w)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_workloads(shared=True, training=False))
def test_dp_relaxation_bounds_with_shared_groups(w):
    """A lattice budget too small for the exact DP: the certified bound stays below the optimum."""
    expected = brute_force_contiguous_optimum(w)
    try:
        sol = dnnplace.solve(w, "dp", max_ideals=w.n, gap=0.0)
    except dnnplace.DnnplaceError:
        return
    _recheck(w, sol)
    assert sol.bound <= expected * (1 + 1e-9) + 1e-9 <= sol.value * (1 + 1e-9) + 2e-9


def _brute_throughput(w, contiguous: bool) -> float:
    k, l = w.max_accelerators, w.max_cpus
    best = math.inf
    for labels in brute_force_assignments(w, k + l):
        if not fits(w, labels, k):
            continue
        sets = [{v for v, d in enumerate(labels) if d == dd} for dd in range(k + l)]
        if contiguous and not all(is_contiguous(w, s) for s in sets):
            continue
        best = min(best, max_load(w, sets[:k], sets[k:]))
    return best


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_workloads(max_nodes=5, training=False, max_acc=2, max_cpu=1, shared=True))
def test_ips_with_shared_groups_equal_brute_force(w):
    pytest.importorskip("highspy")
    for method, contiguous in (("ip", True), ("ip-noncontig", False)):
        expected = _brute_throughput(w, contiguous)
        if math.isinf(expected):
            with pytest.raises(dnnplace.DnnplaceError):
                dnnplace.solve(w, method, **IP_OPTS)
            continue
        sol = dnnplace.solve(w, method, **IP_OPTS)
        _recheck(w, sol)
        assert sol.status == "optimal"
        assert _close(sol.value, expected), (method, sol.value, expected)


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_workloads(max_nodes=5, training=False, max_acc=2, max_cpu=1, shared=True))
def test_latency_ip_respects_shared_memory(w):
    pytest.importorskip("highspy")
    sol = dnnplace.solve(w, "ip", objective="latency", **IP_OPTS)
    _recheck(w, sol)


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_workloads(max_nodes=6, shared=True))
def test_baselines_do_not_crash_on_shared_groups(w):
    for method, objective in (("single", "throughput"), ("local-search", "throughput"),
                              ("pipedream", "throughput"), ("scotch", "throughput"), ("metis", "throughput"),
                              ("greedy", "latency")):
        try:
            sol = dnnplace.solve(w, method, objective=objective, time_limit=5.0)
        except dnnplace.DnnplaceError:
            continue
        ev = dnnplace.evaluate(w, sol.split)  # a baseline's split is valued by the one evaluator
        assert ev.max_load == pytest.approx(sol.evaluation.max_load)


def _three_chain(memory: float):
    nodes = [{"id": i, "fpgaLatency": 1.0, "cpuLatency": 10.0, "size": 1.0} for i in range(3)]
    shared = [{"name": "tied", "size": 5.0, "nodes": [0, 2]}]
    return workload_from_records(nodes, [(0, 1, 0.5), (1, 2, 0.5)], accelerators=2, cpus=0, memory=memory,
                                 shared=shared)


def test_every_device_using_a_group_holds_and_pays_one_copy():
    w = _three_chain(7.0)
    ev = dnnplace.evaluate(w, dnnplace.Split.of([[0, 1], [2]]))
    assert [d.memory for d in ev.devices] == [7.0, 6.0]  # 2 own + 5 shared; 1 own + 5 shared
    assert [d.shared for d in ev.devices] == [("tied",), ("tied",)]
    assert ev.to_dict()["sharedParameters"] == [{"name": "tied", "devices": ["acc0", "acc1"]}]
    one = dnnplace.evaluate(w, dnnplace.Split.of([[0, 1, 2]]))
    assert one.devices[0].memory == 8.0 and not one.feasible  # once per device, not per node: 3 + 5 > 7


def test_shared_groups_round_trip_and_absent_key_stays_absent():
    w = _three_chain(7.0)
    doc = workload_to_dict(w)
    assert doc["sharedParameters"] == [{"name": "tied", "size": 5.0, "nodes": [0, 2]}]
    again = parse_workload(doc)
    assert again.shared.names == ("tied",) and list(again.shared.members(0)) == [0, 2]
    plain = workload_from_records([{"id": 0, "fpgaLatency": 1.0, "cpuLatency": 1.0}], [], accelerators=1, cpus=0)
    assert "sharedParameters" not in workload_to_dict(plain) and plain.shared.count == 0


@pytest.mark.parametrize(("value", "message"), [
    ("x", "'sharedParameters' must be a list"),
    ([{"name": "a", "size": 1, "nodes": [9]}], "sharedParameters[0]: unknown node id 9"),
    ([{"name": "a", "size": -1, "nodes": [0]}], "sharedParameters[0]: 'size' is negative"),
    ([{"name": "a", "size": 1, "nodes": []}], "'nodes' must be a non-empty list"),
    ([{"size": 1, "nodes": [0]}], "'name' must be a non-empty string"),
    ([{"name": "a", "size": 1, "nodes": [0]}, {"name": "a", "size": 1, "nodes": [0]}], "duplicate name"),
    ([{"name": "a", "size": 1, "nodes": [0.5]}], "must be an integer"),
])
def test_bad_shared_groups_name_the_culprit(value, message):
    doc = workload_to_dict(_three_chain(7.0))
    doc["sharedParameters"] = value
    with pytest.raises(dnnplace.InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_workload(doc)
