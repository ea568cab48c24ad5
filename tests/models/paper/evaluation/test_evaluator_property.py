"""The evaluator agrees with a direct computation of SPEC's formulas on random splits."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import device_load, is_contiguous, oracle_latency
from strategies import examples, small_workloads

import dnnplace


@st.composite
def workload_and_split(draw):
    w = draw(small_workloads(max_nodes=8, zero_times=False))
    n_acc = draw(st.integers(1, 3))
    n_cpu = draw(st.integers(0, 2))
    labels = [draw(st.integers(0, n_acc + n_cpu - 1)) for _ in range(w.n)]
    ids = [int(x) for x in w.node_ids]
    accs = [[ids[v] for v in range(w.n) if labels[v] == d] for d in range(n_acc)]
    cpus = [[ids[v] for v in range(w.n) if labels[v] == n_acc + d] for d in range(n_cpu)]
    return w, dnnplace.Split.of(accs, cpus), labels, n_acc


@settings(max_examples=examples(150), deadline=None)
@given(workload_and_split(), st.booleans())
def test_loads_match_spec(case, overlap):
    w, split, labels, n_acc = case
    ev = dnnplace.evaluate(w, split, overlap_comm=overlap)
    n_dev = len(split.accelerators) + len(split.cpus)
    assert len(ev.devices) == n_dev
    expected = []
    for d in range(n_dev):
        members = {v for v in range(w.n) if labels[v] == d}
        load = device_load(w, members, d < n_acc, overlap)
        expected.append(load)
        rep = ev.devices[d]
        assert math.isclose(rep.load, load, rel_tol=1e-9, abs_tol=1e-9)
        assert rep.contiguous == is_contiguous(w, members)
        if d < n_acc:
            assert math.isclose(rep.memory, sum(float(w.size[v]) for v in members), abs_tol=1e-9)
    assert math.isclose(ev.max_load, max(expected), rel_tol=1e-9, abs_tol=1e-9)
    # violations: colour classes and support, written directly
    split_class = any(labels[u] != labels[v] for u in range(w.n) for v in range(w.n) if w.color[u] == w.color[v])
    assert any(v.kind == "colocation" for v in ev.violations) == split_class
    unsupported = any(labels[v] < n_acc and not w.supported[v] for v in range(w.n))
    assert any(v.kind == "unsupported" for v in ev.violations) == unsupported
    over = any(sum(float(w.size[v]) for v in range(w.n) if labels[v] == d) > w.memory for d in range(n_acc))
    assert any(v.kind == "memory" for v in ev.violations) == over


@settings(max_examples=examples(150), deadline=None)
@given(workload_and_split())
def test_latency_matches_fixpoint_of_spec_constraints(case):
    w, split, labels, n_acc = case
    ev = dnnplace.evaluate(w, split)
    if not all(is_contiguous(w, {v for v in range(w.n) if labels[v] == d}, forward_only=False) for d in range(n_acc)):
        return  # the oracle covers one piece per accelerator
    expected = oracle_latency(w, labels, n_acc)
    if math.isinf(expected):
        assert math.isinf(ev.latency)
    else:
        assert math.isclose(ev.latency, expected, rel_tol=1e-9, abs_tol=1e-9)
