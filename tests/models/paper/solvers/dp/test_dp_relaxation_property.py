"""Exact reductions and relaxations of the DP against brute force on small random DAGs.

The instances look like real operator graphs in miniature: a backbone, free
metadata-only nodes (views: no compute, no memory, but their output still
costs a transfer), and cheap chains that start at a source and join the
backbone later (a causal mask, position ids), in inference and training.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import brute_force_contiguous_optimum, max_load
from strategies import examples

import dnnplace
from dnnplace.models.paper.paper_json import workload_from_records

SETTINGS = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def graphs_with_views_and_side_chains(draw, training: bool):
    n_back = draw(st.integers(2, 4))
    n_side = draw(st.integers(0, 2 if not training else 1))
    times = st.floats(0.5, 10.0, allow_nan=False).map(lambda x: round(x, 2))
    nodes: list[dict] = []
    edges: set[tuple[int, int]] = set()

    def add(free: bool) -> int:
        i = len(nodes)
        acc = 0.0 if free else draw(times)
        nodes.append({"id": i, "fpgaLatency": acc, "cpuLatency": 0.0 if free else round(acc * 3, 2),
                      "supportedOnFpga": True, "size": 0.0 if free else float(draw(st.integers(0, 2))),
                      "isBackwardNode": False, "colorClass": i})
        return i

    back = []
    for _ in range(n_back):
        i = add(draw(st.integers(0, 2)) == 0)
        if back:
            edges.add((back[-1], i))
            if len(back) >= 2 and draw(st.booleans()):
                edges.add((back[-2], i))  # residual
        back.append(i)
    for _ in range(n_side):
        length = draw(st.integers(1, 2))
        prev = None
        for _ in range(length):
            i = add(draw(st.booleans()))
            if prev is not None:
                edges.add((prev, i))
            prev = i
        edges.add((prev, draw(st.sampled_from(back[1:] if len(back) > 1 else back))))
    n = len(nodes)
    cost = {i: round(draw(st.floats(0.0, 3.0)), 2) for i in range(n)}
    edge_list = [(i, j, cost[i]) for i, j in sorted(edges)]
    if training:
        for i in range(n):
            f = nodes[i]
            bt = 0.0 if f["fpgaLatency"] == 0 else draw(times)
            nodes.append({"id": n + i, "fpgaLatency": bt, "cpuLatency": round(bt * 3, 2), "supportedOnFpga": True,
                          "size": 0.0, "isBackwardNode": True, "colorClass": i})
        bcost = {j: max(cost[i] for i, jj in edges if jj == j) for _, j in edges}
        for i, j in sorted(edges):
            edge_list.append((n + j, n + i, bcost[j]))  # the gradient of i's output (one cost per source)
    k = draw(st.integers(1, 3))
    cpus = draw(st.integers(0, 1))
    return workload_from_records(nodes, edge_list, accelerators=k, cpus=cpus, memory=1e9)


def _oracle_value(w, split) -> float:
    acc = [{w.index_of[v] for v in d} for d in split.accelerators]
    cpu = [{w.index_of[v] for v in d} for d in split.cpus]
    return max_load(w, acc, cpu)


def _check_exact(w) -> None:
    expected = brute_force_contiguous_optimum(w)
    sol = dnnplace.solve(w, "dp")
    assert sol.evaluation.feasible and sol.evaluation.contiguous
    assert sol.status == "optimal"
    assert math.isclose(sol.value, expected, rel_tol=1e-9, abs_tol=1e-9), (sol.value, expected)
    assert math.isclose(_oracle_value(w, sol.split), sol.value, rel_tol=1e-9, abs_tol=1e-9)


def _check_relaxed(w) -> None:
    expected = brute_force_contiguous_optimum(w)
    sol = dnnplace.solve(w, "dp", max_ideals=3)  # forces the relaxation path on most instances
    assert sol.evaluation.feasible and sol.evaluation.contiguous
    assert sol.bound is not None
    assert sol.bound <= expected + 1e-9, (sol.bound, expected)
    assert expected <= sol.value + 1e-9
    assert math.isclose(_oracle_value(w, sol.split), sol.value, rel_tol=1e-9, abs_tol=1e-9)
    assert sol.split.meta["maxLoad" if "maxLoad" in sol.split.meta else "objectiveValue"] == sol.value
    if sol.status == "optimal":
        assert math.isclose(sol.value, expected, rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.parametrize("training", [False, True])
@SETTINGS
@given(data=st.data())
def test_exact_reductions_keep_the_optimum(training, data):
    _check_exact(data.draw(graphs_with_views_and_side_chains(training=training)))


@pytest.mark.parametrize("training", [False, True])
@SETTINGS
@given(data=st.data())
def test_relaxation_bound_brackets_the_optimum(training, data):
    _check_relaxed(data.draw(graphs_with_views_and_side_chains(training=training)))


@pytest.mark.parametrize("training", [False, True])
@SETTINGS
@given(data=st.data())
def test_coarse_upper_bound_first_keeps_the_optimum(training, data):
    """The coarse lattice's split (a restriction) only tightens the exact DP's pruning: same optimum."""
    from unittest import mock

    from dnnplace.models.paper.solvers.dp_ip import DPThenIP

    with mock.patch.object(DPThenIP, "policy", replace(DPThenIP.policy, coarse_first=0)):
        _check_exact(data.draw(graphs_with_views_and_side_chains(training=training)))


@SETTINGS
@given(data=st.data())
def test_replicating_a_view_never_raises_the_optimum(data):
    """`profile` replaces a view (free, one input, at least its base's bytes) by edges from its base to its readers.

    Every split of the graph with the view, the view dropped, is a split of the
    replicated graph with no larger load on any device: the replicated optimum is
    never above the original one (docs/catalogue.md, "Views are recomputed").
    """
    w = data.draw(graphs_with_views_and_side_chains(training=False))
    ids = [int(v) for v in w.node_ids]
    succ = {v: [] for v in ids}
    pred = {v: [] for v in ids}
    for a, b in zip(w.edge_src.tolist(), w.edge_dst.tolist(), strict=False):
        succ[ids[a]].append(ids[b])
        pred[ids[b]].append(ids[a])
    cost = {ids[i]: float(w.comm_cost[i]) for i in range(w.n)}
    acc = {ids[i]: float(w.acc_time[i]) for i in range(w.n)}
    views = [v for v in ids if acc[v] == 0 and len(pred[v]) == 1 and succ[v]]
    if not views:
        return
    v = data.draw(st.sampled_from(views))
    base = pred[v][0]
    cost[v] = max(cost[v], cost[base])  # the view's bytes are at least its base's
    nodes = [{"id": u, "fpgaLatency": acc[u], "cpuLatency": float(w.cpu_time[w.index_of[u]]),
              "size": float(w.size[w.index_of[u]]), "colorClass": u} for u in ids]
    edges = [(a, b, cost[a]) for a in ids for b in succ[a]]
    original = workload_from_records(nodes, edges, accelerators=w.max_accelerators, cpus=w.max_cpus, memory=1e9)
    kept = [nd for nd in nodes if nd["id"] != v]
    rewired = {(a, b) for a, b, _ in edges if v not in (a, b)} | {(base, s) for s in succ[v]}
    replicated = workload_from_records(kept, [(a, b, cost[a]) for a, b in sorted(rewired)],
                                       accelerators=w.max_accelerators, cpus=w.max_cpus, memory=1e9)
    assert brute_force_contiguous_optimum(replicated) <= brute_force_contiguous_optimum(original) + 1e-9


@pytest.mark.parametrize("training", [False, True])
@SETTINGS
@given(data=st.data())
def test_free_units_that_only_store_keep_the_optimum(training, data):
    """Free units holding a weight (and isolated ones, as Gemma's metadata checks) count as free where memory
    cannot bind: the exact DP still finds the brute-force optimum, with memory ample or tight (where a
    zero-cost leaf that stores something once joined its neighbour and pushed everything onto a CPU)."""
    w = data.draw(graphs_with_views_and_side_chains(training=training))
    ids = [int(v) for v in w.node_ids]
    nodes = []
    for i, v in enumerate(ids):
        size = float(w.size[i])
        if w.acc_time[i] == 0 and not w.backward[i]:
            size = float(data.draw(st.integers(0, 3)))
        nodes.append({"id": v, "fpgaLatency": float(w.acc_time[i]), "cpuLatency": float(w.cpu_time[i]),
                      "size": size, "isBackwardNode": bool(w.backward[i]), "colorClass": int(w.color[i])})
    extra = data.draw(st.integers(0, 2))
    for j in range(extra):  # isolated free nodes that store something
        nodes.append({"id": max(ids) + 1 + j, "fpgaLatency": 0.0, "cpuLatency": 0.0, "size": 2.0,
                      "isBackwardNode": False, "colorClass": max(ids) + 1 + j})
    edges = [(ids[a], ids[b], float(c)) for a, b, c in zip(w.edge_src.tolist(), w.edge_dst.tolist(),
                                                          w.edge_cost.tolist(), strict=False)]
    total = sum(nd["size"] for nd in nodes)
    memory = data.draw(st.sampled_from([1e9, total, max(1.0, total - 2.0), max(1.0, total / 2)]))
    w2 = workload_from_records(nodes, edges, accelerators=w.max_accelerators, cpus=w.max_cpus, memory=memory)
    if math.isinf(brute_force_contiguous_optimum(w2)):
        with pytest.raises(dnnplace.DnnplaceError):
            dnnplace.solve(w2, "dp")
        return
    _check_exact(w2)


@pytest.mark.parametrize("training", [False, True])
@SETTINGS
@given(data=st.data())
def test_ip_second_phase_brackets_the_optimum(training, data):
    """The default method's IP phase, forced after every relaxation: its split and bound still bracket the
    optimum, the split is a pipeline, and "optimal" only with the brute-force value."""
    from unittest import mock

    from dnnplace.models.paper.solvers.dp.incumbent import is_pipeline
    from dnnplace.models.paper.solvers.dp_ip import DPThenIP

    w = data.draw(graphs_with_views_and_side_chains(training=training))
    expected = brute_force_contiguous_optimum(w)
    with mock.patch.object(DPThenIP, "policy", replace(DPThenIP.policy, finish_min_seconds=0.0)):
        sol = dnnplace.solve(w, "dp", max_ideals=3, gap=0.0)
    assert sol.evaluation.feasible and sol.evaluation.contiguous and is_pipeline(w, sol.split)
    IP_PHASES.append("ip_status" in sol.stats)
    assert sol.bound is not None and sol.bound <= expected + 1e-9, (sol.bound, expected)
    assert expected <= sol.value + 1e-9
    if sol.status == "optimal":
        assert math.isclose(sol.value, expected, rel_tol=1e-9, abs_tol=1e-9)


IP_PHASES: list[bool] = []


def test_the_ip_phase_ran():
    """The test above reached the IP phase on some instances (it runs first: pytest keeps file order)."""
    if IP_PHASES:
        assert any(IP_PHASES)


def test_is_pipeline_refuses_devices_feeding_each_other():
    import numpy as np

    from dnnplace.models.paper.solvers.dp.incumbent import is_pipeline
    from dnnplace.models.paper.split import Split

    nodes = [{"id": i, "fpgaLatency": 1.0, "cpuLatency": 1.0, "size": 0.0, "colorClass": i} for i in range(4)]
    w = workload_from_records(nodes, [(0, 1, 1.0), (2, 3, 1.0)], accelerators=2, cpus=0, memory=1e9)
    assert is_pipeline(w, Split.from_assignment(w.node_ids, np.array([0, 1, 0, 1]), 2, 0))
    assert not is_pipeline(w, Split.from_assignment(w.node_ids, np.array([0, 1, 1, 0]), 2, 0))
