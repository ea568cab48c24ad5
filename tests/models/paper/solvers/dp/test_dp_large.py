"""The DP's answers on graphs too large for an exact lattice: always a split with what was proven."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import throughput_path

import dnnplace
from dnnplace.models.paper.paper_json import load_workload, workload_from_records

pytestmark = pytest.mark.slow  # graphs of 10^5 nodes and solves to their time limit


def test_time_limit_returns_the_best_split_with_its_bound():
    w = load_workload(throughput_path("LayerGraphs/inceptionv3_training"))
    sol = dnnplace.solve(w, "dp", time_limit=0.3, max_ideals=5_000_000)
    assert sol.status == "time_limit"
    assert sol.evaluation.feasible and sol.evaluation.contiguous
    assert 0 < sol.bound <= sol.value and sol.gap == (sol.value - sol.bound) / sol.value


def test_over_the_ideal_budget_gives_bound_and_gap_not_a_refusal():
    w = load_workload(throughput_path("LayerGraphs/inceptionv3_inference"))
    exact = dnnplace.solve(w, "dp")
    sol = dnnplace.solve(w, "dp", max_ideals=2_000)
    assert sol.status in ("bounded", "optimal")
    assert sol.bound <= exact.value + 1e-9 <= sol.value + 2e-9
    assert sol.split.meta["bound"] == sol.bound and sol.split.meta["gap"] == sol.gap


def test_a_hundred_thousand_isolated_nodes_are_answered():
    n = 100_000
    nodes = [{"id": i, "fpgaLatency": 1.0, "cpuLatency": 2.0, "supportedOnFpga": True, "size": 1.0,
              "isBackwardNode": False, "colorClass": i} for i in range(n)]
    w = workload_from_records(nodes, [], accelerators=4, cpus=1, memory=1e9)
    sol = dnnplace.solve(w, "dp")
    assert sol.evaluation.feasible
    assert sol.status == "bounded" and sol.bound <= sol.value
    # 4 accelerators at 1 per node and a CPU at 2 per node: the optimum is n / 4.5
    assert sol.bound <= n / 4.5 <= sol.value <= 1.01 * n / 4.5
    assert np.isfinite(sol.gap)


def test_kernel_calls_stop_at_their_work_budget_and_resume_exactly(monkeypatch):
    # Ctrl-C and deadlines are honoured between kernel calls, so a call must end once its work
    # budget is spent, however cheap the ideals before were; resuming must give the same table
    from dnnplace.models.paper.solvers.dp import kernel

    w = load_workload(throughput_path("LayerGraphs/resnet50_training"))
    whole = dnnplace.solve(w, "dp")
    real, spans = kernel.dp_range, []

    def one_unit_of_work(lo, hi, max_work, *args):
        stop, pairs = real(lo, hi, 1, *args)
        spans.append(stop - lo)
        return stop, pairs

    monkeypatch.setattr(kernel, "dp_range", one_unit_of_work)
    chunked = dnnplace.solve(w, "dp")
    assert spans and max(spans) == 1
    assert chunked.value == whole.value and chunked.status == whole.status


def test_time_limit_covers_the_relaxations_and_the_ip_phase():
    """--time-limit bounds both phases of the default method; the answer still carries a certified bound."""
    w = load_workload(throughput_path("LayerGraphs/inceptionv3_inference"))
    exact = dnnplace.solve(w, "dp")
    sol = dnnplace.solve(w, "dp", max_ideals=2_000, gap=0.0, time_limit=2.0)
    assert sol.runtime_s <= 2.0 + 1.5  # HiGHS and the last DP chunk may stop a little late (shared CPUs)
    assert sol.evaluation.feasible and sol.evaluation.contiguous
    assert sol.bound <= exact.value + 1e-9 <= sol.value + 2e-9
    assert sol.status in ("time_limit", "bounded", "optimal")
