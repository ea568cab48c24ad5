"""Hand-checked evaluator cases: communication, violations, completion, latency pieces."""

from __future__ import annotations

import math

import pytest

import dnnplace
from dnnplace.errors import InputError


def chain3(**kw):
    nodes = [
        {"id": 1, "fpgaLatency": 1.0, "cpuLatency": 10.0, "size": 1.0},
        {"id": 2, "fpgaLatency": 2.0, "cpuLatency": 3.0, "size": 1.0},
        {"id": 3, "fpgaLatency": 4.0, "cpuLatency": 40.0, "size": 1.0},
    ]
    return dnnplace.workload_from_records(nodes, [(1, 2, 0.5), (2, 3, 0.25), (1, 3, 0.5)],
                                          accelerators=kw.get("k", 2), cpus=kw.get("l", 1),
                                          memory=kw.get("memory", 10.0))


def test_communication_paid_once_per_crossing_output():
    w = chain3()
    ev = dnnplace.evaluate(w, dnnplace.Split.of([[1], [2, 3]]))
    acc0, acc1 = ev.devices
    assert acc0.communication == 0.5  # node 1's output leaves once, though two edges cross
    assert acc1.communication == 0.5
    assert acc1.load == 6.5 and ev.max_load == 6.5
    assert ev.feasible and ev.contiguous


def test_cpu_pays_no_communication_and_non_contiguous_sets_are_flagged():
    w = chain3()
    ev = dnnplace.evaluate(w, dnnplace.Split.of([[1, 3]], [[2]]))
    assert ev.devices[1].communication == 0.0 and ev.devices[1].load == 3.0
    assert not ev.devices[0].contiguous
    # latency: acc0 runs {1} then {3} as two calls; the CPU runs node 2 in between
    first = 1.0 + 0.5  # compute + node 1's output
    second_start = first + 3.0  # node 2 on the CPU
    # node 3's call receives node 2's output and node 1's (another call, even on the same accelerator)
    assert ev.latency == pytest.approx(second_start + 0.25 + 0.5 + 4.0)


def test_violations_are_reported():
    w = chain3(k=1, l=0, memory=0.5)
    ev = dnnplace.evaluate(w, dnnplace.Split.of([[1, 2], [3]], [[2]]))
    kinds = {v.kind for v in ev.violations}
    assert {"memory", "devices", "duplicate"} <= kinds
    ev = dnnplace.evaluate(w, dnnplace.Split.of([[1]]))
    assert "unplaced" in {v.kind for v in ev.violations}
    assert math.isnan(ev.latency)


def test_unknown_node_in_split_is_an_input_error():
    with pytest.raises(InputError, match="node id 99"):
        dnnplace.evaluate(chain3(), dnnplace.Split.of([[1, 2, 3, 99]]))


def test_colocation_and_unsupported():
    nodes = [
        {"id": 1, "fpgaLatency": 1.0, "cpuLatency": 1.0, "colorClass": 5},
        {"id": 2, "fpgaLatency": 1.0, "cpuLatency": 1.0, "colorClass": 5, "supportedOnFpga": False},
    ]
    w = dnnplace.workload_from_records(nodes, [(1, 2, 0.0)], accelerators=2, cpus=1)
    kinds = {v.kind for v in dnnplace.evaluate(w, dnnplace.Split.of([[1], [2]])).violations}
    assert kinds == {"colocation", "unsupported"}


def test_forward_only_training_split_is_completed():
    nodes = [
        {"id": 1, "fpgaLatency": 1.0, "cpuLatency": 1.0, "colorClass": 1},
        {"id": 2, "fpgaLatency": 1.0, "cpuLatency": 1.0, "colorClass": 2},
        {"id": 11, "fpgaLatency": 2.0, "cpuLatency": 2.0, "colorClass": 1, "isBackwardNode": True},
        {"id": 12, "fpgaLatency": 2.0, "cpuLatency": 2.0, "colorClass": 2, "isBackwardNode": True},
    ]
    w = dnnplace.workload_from_records(nodes, [(1, 2, 0.5), (12, 11, 0.5)], accelerators=2, cpus=0)
    ev = dnnplace.evaluate(w, dnnplace.Split.of([[1], [2]]))
    assert ev.feasible and ev.assignment.completed == 2
    assert ev.max_load == pytest.approx(1 + 2 + 0.5 + 0.5)
    assert ev.devices[0].forward_load == pytest.approx(1.5)
    assert ev.fw_plus_bw == pytest.approx(1.5 + 2.5)


def test_deadlocked_latency_is_infinite():
    # acc0 = {1, 4}, acc1 = {2, 3}: 1 -> 2 and 3 -> 4 make the calls wait on each other
    nodes = [{"id": i, "fpgaLatency": 1.0, "cpuLatency": 1.0} for i in range(1, 5)]
    w = dnnplace.workload_from_records(nodes, [(1, 2, 0.0), (3, 4, 0.0)], accelerators=2, cpus=0)
    ev = dnnplace.evaluate(w, dnnplace.Split.of([[1, 4], [2, 3]]))
    assert math.isinf(ev.latency) and "cycle" in ev.latency_note


def test_overlapped_communication():
    w = chain3()
    ev = dnnplace.evaluate(w, dnnplace.Split.of([[1], [2, 3]]), overlap_comm=True)
    assert ev.devices[1].load == 6.0 and ev.devices[0].load == 1.0
