"""The paper's baselines: reference figures, feasibility, determinism, real external tools."""

from __future__ import annotations

import shutil

import pytest
from conftest import LATENCY, REFERENCE, THROUGHPUT, latency_path, throughput_path
from hypothesis import HealthCheck, given, settings
from strategies import examples, small_workloads

import dnnplace


@pytest.mark.parametrize("key", THROUGHPUT)
def test_single_accelerator_reproduces_reference(key):
    w = dnnplace.load_workload(throughput_path(key))
    sol = dnnplace.solve(w, "single")
    assert sol.value == pytest.approx(REFERENCE["single_accelerator_maxload"][key], rel=5e-6)  # 6 significant digits
    assert len(sol.split.accelerators) == 1 and not sol.split.cpus


@pytest.mark.parametrize("key", LATENCY)
def test_greedy_latency_reproduces_reference_exactly(key):
    w = dnnplace.load_workload(latency_path(key))
    sol = dnnplace.solve(w, "greedy", objective="latency")
    assert sol.evaluation.feasible
    assert sol.value == pytest.approx(REFERENCE["greedy_latency"][key], rel=1e-12)
    assert sol.split.meta["totalLatency"] == sol.value


@pytest.mark.parametrize("key", ["LayerGraphs/inceptionv3_inference", "LayerGraphs/resnet50_training",
                                 "OperatorGraphs/bert_l-3_inference"])
def test_pipedream_matches_reference_where_the_emulation_agrees(key):
    w = dnnplace.load_workload(throughput_path(key))
    sol = dnnplace.solve(w, "pipedream")
    assert sol.evaluation.feasible and sol.evaluation.contiguous
    assert sol.value == pytest.approx(REFERENCE["pipedream_maxload"][key], rel=5e-6)
    assert sol.value >= dnnplace.solve(w, "dp").value - 1e-9


def test_scotch_runs_the_real_gpart():
    assert shutil.which("gpart") or shutil.which("scotch_gpart"), "make installs Debian's scotch"
    w = dnnplace.load_workload(throughput_path("LayerGraphs/resnet50_inference"))
    sol = dnnplace.solve(w, "scotch")
    assert sol.evaluation.feasible
    assert 2 <= len(sol.split.accelerators) <= w.max_accelerators
    assert sol.value < REFERENCE["single_accelerator_maxload"]["LayerGraphs/resnet50_inference"]


def test_metis_partitions():
    w = dnnplace.load_workload(throughput_path("LayerGraphs/gnmt_inference"))
    sol = dnnplace.solve(w, "metis")
    assert sol.evaluation.feasible and len(sol.split.accelerators) == w.max_accelerators


def test_local_search_is_deterministic_for_a_seed_and_respects_memory():
    w = dnnplace.load_workload(throughput_path("LayerGraphs/bert24_inference")).with_budget(memory=2.5e9)
    a = dnnplace.solve(w, "local-search", seed=3, restarts=3)
    b = dnnplace.solve(w, "local-search", seed=3, restarts=3)
    assert a.split.accelerators == b.split.accelerators and a.value == b.value
    assert a.evaluation.feasible


SMALL = settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SMALL
@given(small_workloads(max_nodes=7, max_acc=3, max_cpu=1))
def test_baselines_return_feasible_splits(w):
    try:
        dp = dnnplace.solve(w, "dp")
    except dnnplace.DnnplaceError:
        return
    for method, params in (("local-search", {"restarts": 2}), ("pipedream", {}), ("scotch", {}), ("metis", {})):
        try:
            sol = dnnplace.solve(w, method, **params)
        except dnnplace.InfeasibleError:
            continue
        kinds = {v.kind for v in sol.evaluation.violations}
        if method in ("scotch", "metis"):
            kinds.discard("memory")  # partitioners balance time, not memory
        assert not kinds, (method, sol.evaluation.violations)
        if method == "pipedream":
            assert sol.value >= dp.value - 1e-9
    greedy = dnnplace.solve(w, "greedy", objective="latency")
    # each accelerator gets a run of a topological order (CPU nodes run independently in the latency model)
    assert all(d.contiguous for d in greedy.evaluation.devices if d.kind == "accelerator")
    assert not {v.kind for v in greedy.evaluation.violations} - {"devices"}


def test_partitioners_with_nothing_to_partition():
    # every class unsupported: all on the CPU, and gpart is not called on an empty graph
    nodes = [{"id": i, "fpgaLatency": 1.0, "cpuLatency": 0.5, "supportedOnFpga": False} for i in range(3)]
    w = dnnplace.workload_from_records(nodes, [], accelerators=2, cpus=1)
    for method in ("scotch", "metis"):
        sol = dnnplace.solve(w, method)
        assert sol.evaluation.feasible and not sol.split.accelerators
