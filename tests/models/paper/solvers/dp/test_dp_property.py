"""The DP equals an exhaustive search over all ideal chains on small random DAGs."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from oracle import brute_force_contiguous_optimum, max_load
from strategies import examples, small_workloads

import dnnplace

SETTINGS = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(w, overlap: bool = False) -> None:
    expected = brute_force_contiguous_optimum(w, overlap)
    if math.isinf(expected):
        try:
            dnnplace.solve(w, "dp", overlap_comm=overlap)
        except dnnplace.DnnplaceError:
            return
        raise AssertionError("DP found a split where brute force found none")
    sol = dnnplace.solve(w, "dp", overlap_comm=overlap)
    ev = sol.evaluation
    assert ev.feasible, ev.violations
    assert ev.contiguous
    assert math.isclose(sol.value, expected, rel_tol=1e-9, abs_tol=1e-9), (sol.value, expected)
    # the oracle's own formula agrees with the evaluator on the returned split
    acc = [{w.index_of[v] for v in d} for d in sol.split.accelerators]
    cpu = [{w.index_of[v] for v in d} for d in sol.split.cpus]
    assert math.isclose(max_load(w, acc, cpu, overlap), ev.max_load, rel_tol=1e-9, abs_tol=1e-9)


@SETTINGS
@given(small_workloads(training=False))
def test_dp_matches_brute_force_inference(w):
    _check(w)


@SETTINGS
@given(small_workloads(max_nodes=5, training=True, max_acc=2, max_cpu=1))
def test_dp_matches_brute_force_training(w):
    _check(w)


@settings(max_examples=examples(30), deadline=None)
@given(small_workloads(max_nodes=6, training=False))
def test_dp_matches_brute_force_overlapped_communication(w):
    _check(w, overlap=True)
