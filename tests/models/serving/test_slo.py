"""Latency SLOs under a load: judged by the simulation under a request rate (queueing counts), reported beside
the evaluator under a closed loop; the simulation's saturation flag does not mistake long requests for a
growing queue."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from cli_runner import run_cli

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.models.serving import verdicts
from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.simulator import simulate
from dnnplace.models.serving.spec import ServingProblem

ROOT = Path(__file__).resolve().parents[3]
M8B = ROOT / "examples" / "serving" / "llama3.1-8b.json"


@functools.cache
def _capacity() -> tuple[float, float]:
    """(requests/s, unloaded TTFT ms) of the best 1 x H100 deployment of Llama 3.1 8B at 1024 / 256."""
    p = problem(M8B, gpus="1xh100", isl=1024, osl=256)
    ev = evaluate(p, dnnplace.solve(p, time_limit=10).plan.config)
    return ev.requests_per_s, ev.ttft_ms


def _loaded(**kw) -> ServingProblem:
    return problem(M8B, gpus="1xh100", isl=1024, osl=256, **kw)


def test_a_rate_slo_is_checked_by_simulation_and_the_plan_says_so():
    cap, ttft = _capacity()
    sol = dnnplace.solve(_loaded(rate=0.5 * cap, ttft_ms=3 * ttft), time_limit=20)
    sim = sol.plan.meta["slo_simulated"]
    assert sim["meets_slo"] and not sim["saturated"] and sim["completed"] == verdicts.SLO_REQUESTS
    assert sim["ttft_ms"] <= 3 * ttft and sim["load"].endswith("requests/s")


def test_a_deployment_the_simulation_fails_is_not_called_a_pass(monkeypatch):
    """Every deployment meets the SLO unloaded; the simulated load says otherwise: one line, no plan."""
    cap, ttft = _capacity()
    calls = []

    def failing(p, c, time_limit, ev=None):
        calls.append(c)
        return {"load": "x", "requests": 1, "completed": 1, "ttft_ms": 10 * ttft, "tpot_ms": 1.0,
                "saturated": False, "stopped": None, "meets_slo": False}

    monkeypatch.setattr(verdicts, "simulated_slo", failing)
    with pytest.raises(DnnplaceError, match="under the simulated load: the best simulated is TTFT"):
        dnnplace.solve(_loaded(rate=0.5 * cap, ttft_ms=3 * ttft), time_limit=20)
    assert len(calls) >= 2  # the plan, then the others that meet it unloaded, fastest first


def test_a_closed_loop_slo_is_judged_unloaded_with_the_simulation_beside_it():
    _, ttft = _capacity()
    sol = dnnplace.solve(_loaded(concurrency=16, ttft_ms=3 * ttft), time_limit=20)
    sim = sol.plan.meta["slo_simulated"]
    assert sim["load"] == "16 clients" and sim["completed"] == 80 and sim["ttft_ms"] > 0


def test_the_simulated_verdict_is_in_the_plan_file_and_read_back(tmp_path):
    cap, ttft = _capacity()
    out = tmp_path / "plan.json"
    res = run_cli("serve", M8B, "--gpus", "1xh100", "--isl", 1024, "--osl", 256, "--rate", f"{0.5 * cap:.3f}",
                  "--ttft-ms", f"{3 * ttft:.1f}", "-o", out)
    assert res.returncode == 0, res.stderr
    assert "simulated at" in res.stdout and "meets SLO True" in res.stdout.replace("\n", " ")
    doc = json.loads(out.read_text())
    assert doc["slo_simulated"]["meets_slo"] is True
    res = run_cli("evaluate", out)
    assert res.returncode == 0, res.stderr


def test_long_requests_below_capacity_are_not_called_saturated():
    """600 requests at 80 % of capacity, each taking seconds to serve: before the window was shifted by the
    requests' own latency, the last seconds' arrivals still in service read as a growing queue."""
    cap, _ = _capacity()
    p = _loaded()
    sol = dnnplace.solve(p, time_limit=10)
    s = simulate(p, sol.plan.config, rate=0.8 * cap, requests=600)
    assert not s.saturated and s.completed == 600
    assert simulate(p, sol.plan.config, rate=3.0 * cap, requests=600).saturated


def test_a_simulation_cut_short_settles_nothing_and_says_so(monkeypatch):
    cap, ttft = _capacity()

    def cut(p, c, time_limit, ev=None):
        return {"load": "x", "requests": 10, "completed": 3, "ttft_ms": ttft, "tpot_ms": 1.0,
                "saturated": False, "stopped": "time limit", "meets_slo": None}

    monkeypatch.setattr(verdicts, "simulated_slo", cut)
    sol = dnnplace.solve(_loaded(rate=0.5 * cap, ttft_ms=3 * ttft), time_limit=20)
    assert sol.plan.meta["slo_simulated"]["meets_slo"] is None


@pytest.mark.parametrize("bad, culprit", [([], "wrong kind"), ({}, "'load' is missing"),
                                          ({"load": 5}, "'load' has the wrong kind")])
def test_a_plan_file_with_a_bad_simulated_check_is_one_line(tmp_path, bad, culprit):
    cap, ttft = _capacity()
    out = tmp_path / "plan.json"
    res = run_cli("serve", M8B, "--gpus", "1xh100", "--isl", 1024, "--osl", 256, "--rate", f"{0.5 * cap:.3f}",
                  "--ttft-ms", f"{3 * ttft:.1f}", "-o", out)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    doc["slo_simulated"] = bad
    out.write_text(json.dumps(doc))
    res = run_cli("evaluate", out)
    assert res.returncode == 2 and culprit in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_no_time_left_for_the_simulation_is_not_a_refusal():
    """The SLO check gets what the search leaves; with none left, the fastest deployment that meets the SLO
    unloaded is still the answer, its simulated check said as not settled -- never 'no deployment meets'."""
    cap, ttft = _capacity()
    p = _loaded(rate=0.5 * cap, ttft_ms=3 * ttft)
    plan = dnnplace.solve(p, time_limit=10).plan
    chosen, ev = verdicts.meet_slo(p, plan, time_limit=0.0)
    sim = chosen.meta["slo_simulated"]
    assert ev.meets_slo and sim["stopped"] == "time limit" and sim["meets_slo"] is None
