"""Polishing a pipeline split never returns a worse or invalid one, and finds the better cut of a scan."""

from __future__ import annotations

import time

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import brute_force_contiguous_optimum
from strategies import examples, small_workloads

from dnnplace.models.paper.evaluation import evaluate
from dnnplace.models.paper.paper_json import workload_from_records
from dnnplace.models.paper.solvers.polish import polish
from dnnplace.models.paper.split import Split


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=small_workloads(max_nodes=7, max_acc=3, max_cpu=0), data=st.data())
def test_polish_keeps_a_valid_split_no_worse_and_never_below_the_optimum(w, data):
    device = np.array(data.draw(st.lists(st.integers(0, w.max_accelerators - 1), min_size=w.n, max_size=w.n)))
    split = Split.from_assignment(w.node_ids, device, w.max_accelerators, 0)
    ev = evaluate(w, split, complete=False)
    out = polish(w, split, time.perf_counter() + 5.0)
    after = evaluate(w, out, complete=False)
    if not ev.feasible:
        assert out is split
        return
    assert after.feasible
    assert after.max_load <= ev.max_load + 1e-12
    if ev.contiguous:  # a non-contiguous split may be feasible and beat every contiguous one
        assert after.contiguous
        assert after.max_load >= brute_force_contiguous_optimum(w) - 1e-9


def test_polish_moves_a_chain_boundary_to_the_balanced_cut():
    """A chain of six unit-time nodes cut 5 / 1 on two devices becomes 3 / 3 (each pays the transfer once)."""
    nodes = [{"id": i, "fpgaLatency": 1.0, "cpuLatency": 1.0, "size": 0.0, "colorClass": i} for i in range(6)]
    w = workload_from_records(nodes, [(i, i + 1, 0.01) for i in range(5)], accelerators=2, cpus=0, memory=1e9)
    split = Split.from_assignment(w.node_ids, np.array([0, 0, 0, 0, 0, 1]), 2, 0)
    out = polish(w, split, time.perf_counter() + 5.0)
    assert abs(evaluate(w, out).max_load - 3.01) < 1e-9
