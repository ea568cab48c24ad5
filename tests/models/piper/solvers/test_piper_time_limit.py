"""Piper's planner under a time limit: the best plan so far with a proven bound, or a one-line refusal."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples
from test_piper_bruteforce import brute_force, tiny_instances

import dnnplace
from dnnplace.errors import InfeasibleError, SolverTimeout
from dnnplace.models.piper.evaluation import evaluate_piper
from dnnplace.models.piper.piper_json import load_piper, parse_piper
from dnnplace.models.piper.solvers import solver

GNMT = Path(dnnplace.__file__).parent / "data" / "piper" / "inputs" / "gnmt.json"


def _stopping_at(call: int):
    """Let the first ``call`` DP runs finish; every later one that runs under the deadline is stopped as by it
    (the run that explains an infeasible instance has no deadline, as in the solver)."""
    real, calls = solver._run_stoppable, []

    def run(args, n_tails, limits):
        calls.append(n_tails)
        if len(calls) > call and limits.deadline is not None:
            raise solver._Stopped
        return real(args, n_tails, limits)

    return mock.patch.object(solver, "_run_stoppable", run), calls


def test_deadline_in_the_all_tails_run_returns_the_chain_plan_with_its_bound():
    inst = load_piper(GNMT).with_overrides(devices=8, memory=1.2 * 2**30)
    exact = solver.solve_piper(inst)
    assert exact.stats["bound_search"] == "chain"  # a chain plan comes first, then the all-tails run
    patch, calls = _stopping_at(1)
    with patch:
        res = solver.solve_piper(inst, time_limit=60)
    assert len(calls) == 2
    assert res.status == "time_limit" and res.plan.meta["status"] == "time_limit"
    ev = evaluate_piper(inst, res.plan)
    assert ev.feasible and ev.tps == res.tps
    assert 0 < res.bound <= exact.tps <= res.tps
    assert res.plan.meta["gap"] == pytest.approx((res.tps - res.bound) / res.tps)


def test_deadline_before_any_plan_is_a_one_line_refusal():
    inst = load_piper(GNMT).with_overrides(devices=8, memory=1.2 * 2**30)
    patch, _ = _stopping_at(0)
    with patch, pytest.raises(SolverTimeout, match="before any plan was found"):
        solver.solve_piper(inst, time_limit=60)


@pytest.mark.timing
def test_a_real_deadline_is_honoured_with_a_plan_or_a_refusal():
    inst = load_piper(GNMT).with_overrides(devices=8, memory=1.2 * 2**30)
    seen = []
    try:
        res = dnnplace.solve(inst, time_limit=0.2, progress=lambda done, total, what: seen.append(total))
    except SolverTimeout:
        return
    # GNMT's run over all tails alone takes over a second: a limit that did not stop it would say optimal
    assert res.method == "piper" and res.status == "time_limit" and res.runtime_s < 5.0 and all(t > 0 for t in seen)
    assert res.bound <= res.value and evaluate_piper(inst, res.plan).feasible


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_instances(), st.integers(0, 4))
def test_any_stop_keeps_a_valid_plan_and_a_true_bound(doc, call):
    inst = parse_piper(doc)
    want = brute_force(doc)
    patch, _ = _stopping_at(call)
    try:
        with patch:
            res = solver.solve_piper(inst, time_limit=60)
    except SolverTimeout:
        return
    except InfeasibleError:
        assert want is None
        return
    assert want is not None
    ev = evaluate_piper(inst, res.plan)
    assert ev.feasible and ev.tps == res.tps
    assert res.bound <= want * (1 + 1e-9) + 1e-12 and res.tps >= want * (1 - 1e-9) - 1e-12
    if res.status == "optimal":
        assert res.tps == pytest.approx(want, rel=1e-9, abs=1e-12)
    else:
        assert res.status == "time_limit"
