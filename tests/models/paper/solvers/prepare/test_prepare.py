"""Preparation: units partition the nodes, keep colour classes whole, conserve costs, stay acyclic;
the exact free-unit folding never changes the optimum."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from oracle import brute_force_contiguous_optimum
from strategies import examples, small_workloads

import dnnplace
from dnnplace.models.paper.solvers.prepare import linearized, merge_free_units, prepare


def _check_units(w: dnnplace.Workload, p) -> None:
    assert p.unit_of.shape == (w.n,) and set(p.unit_of.tolist()) == set(range(p.n_units))
    for c in range(w.n_classes):  # a colour class never splits
        assert len(set(p.unit_of[w.class_of == c].tolist())) == 1
    assert p.acc_time.sum() == pytest.approx(w.acc_time.sum())
    assert p.cpu_time.sum() == pytest.approx(w.cpu_time.sum())
    assert p.size.sum() == pytest.approx(w.size.sum())
    g = nx.DiGraph()
    g.add_nodes_from(range(p.n_units))
    g.add_edges_from(zip(p.edge_src.tolist(), p.edge_dst.tolist()))
    assert nx.is_directed_acyclic_graph(g) and not any(a == b for a, b in g.edges)
    fw = ~w.backward
    for a, b in zip(w.edge_src.tolist(), w.edge_dst.tolist()):  # forward precedence survives
        if fw[a] and fw[b] and p.unit_of[a] != p.unit_of[b]:
            assert nx.has_path(g, int(p.unit_of[a]), int(p.unit_of[b]))
    members = p.members()
    assert sorted(np.concatenate(members).tolist()) == list(range(w.n))


@settings(max_examples=examples(60), deadline=None)
@given(small_workloads(max_nodes=8))
def test_prepare_partitions_and_conserves(w):
    for p in (prepare(w, merge_trivial=False), prepare(w), merge_free_units(prepare(w))):
        _check_units(w, p)
    chain = linearized(prepare(w))
    assert chain.edge_src.size >= chain.n_units - 1


def _dp_is_the_brute_force_optimum(w) -> None:
    """The default DP, after every reduction, proves the brute-force optimum (or refuses an infeasible w)."""
    try:
        sol = dnnplace.solve(w, "dp")
    except dnnplace.DnnplaceError:
        return
    assert sol.status == "optimal"
    assert sol.value == pytest.approx(brute_force_contiguous_optimum(w), rel=1e-9, abs=1e-9)


@settings(max_examples=examples(40), deadline=None)
@given(small_workloads(max_nodes=6, max_acc=2, max_cpu=1))
def test_free_unit_folding_keeps_the_optimum(w):
    _dp_is_the_brute_force_optimum(w)


def test_contract_layers_fuses_a_layer():
    nodes = [{"id": i, "fpgaLatency": 1.0, "cpuLatency": 2.0, "layerId": i // 2} for i in range(4)]
    w = dnnplace.workload_from_records(nodes, [(i, i + 1, 0.1) for i in range(3)], accelerators=2, cpus=0)
    p = prepare(w, contract_layers=True, merge_trivial=False)
    assert p.n_units == 2 and p.unit_of[0] == p.unit_of[1] and p.unit_of[2] == p.unit_of[3]


def test_transfer_sources_by_arrays_equal_the_loop():
    """comm_sources groups producers by arrays; the loop that passes inputs on (passing nothing) is the reference."""
    import numpy as np

    import dnnplace
    from dnnplace.models.paper.solvers.prepare import comm_sources

    rng = np.random.default_rng(3)
    for name in ("bert_l-3_training", "gnmt_training", "resnet50_training"):
        w = dnnplace.load_workload(dnnplace.example_path(name))
        for _ in range(4):
            unit_of = rng.integers(-1, 6, w.n)
            mask = rng.random(w.n) < 0.8
            for m in (None, mask):
                a = comm_sources(w, unit_of, m)
                b = comm_sources(w, unit_of, m, via=np.full(w.n, -1))  # the loop, passing nothing on
                for field in ("home", "cost", "target_ptr", "target_idx"):
                    x, y = getattr(a, field), getattr(b, field)
                    assert x.dtype == y.dtype and np.array_equal(x, y), (name, field)


@settings(max_examples=examples(200), deadline=None)
@given(small_workloads(max_nodes=6, max_acc=3, max_cpu=0))
def test_folding_cheap_computing_units_keeps_the_optimum(w):
    # without CPU cores a unit that computes less than the transfer it saves folds too (compute_slack)
    assert merge_free_units(prepare(w), compute_slack=True).n_units <= merge_free_units(prepare(w)).n_units
    _dp_is_the_brute_force_optimum(w)


def test_a_cheap_source_joins_its_only_consumer():
    from dnnplace.models.paper.paper_json import workload_from_records

    # node 0: a parameter-only op (no predecessor) cheaper than sending its output to node 2
    nodes = [{"id": i, "fpgaLatency": t, "cpuLatency": t, "size": 0.0, "colorClass": i}
             for i, t in enumerate([0.5, 3.0, 3.0, 3.0])]
    w = workload_from_records(nodes, [(0, 2, 1.0), (1, 2, 0.1), (2, 3, 0.1)], accelerators=2, cpus=0,
                              memory=100.0)
    p = merge_free_units(prepare(w), compute_slack=True)
    assert p.unit_of[0] == p.unit_of[2] and p.n_units == 3
    assert merge_free_units(prepare(w)).n_units == 4


@settings(max_examples=examples(60), deadline=None)
@given(small_workloads(max_nodes=6, max_acc=3, max_cpu=0))
def test_folds_with_an_allowance_raise_the_optimum_by_at_most_their_deficit(w):
    from dnnplace.models.paper.solvers.dp.exact import run_dp
    from dnnplace.models.paper.solvers.dp.ideals import enumerate_ideals

    p = merge_free_units(prepare(w), compute_slack=True, allowance=1e9)  # every cheap-enough fold, any shortfall
    assert p.deficit >= 0
    folded = run_dp(p, enumerate_ideals(p, 10_000), w, overlap=False, ub=np.inf).value
    try:
        best = brute_force_contiguous_optimum(w)
    except dnnplace.DnnplaceError:
        return
    if not np.isfinite(best):
        return
    assert folded - p.deficit <= best * (1 + 1e-9) + 1e-9  # the certified bound: no higher than the optimum
    assert folded >= best * (1 - 1e-9) - 1e-9  # a fold is a restriction
