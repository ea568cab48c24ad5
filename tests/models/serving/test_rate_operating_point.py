"""Under a request rate: the plan's proof is about what the deployment can serve (its capacity at the batch
limits), while its TTFT / TPOT are those of the batch each replica runs to serve its share of the rate -- the
share the engine's router gives it."""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from pathlib import Path

import pytest

import dnnplace
from dnnplace.models.serving.evaluation import evaluate, load_shares
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.simulator import simulate
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingProblem, Stage

ROOT = Path(__file__).resolve().parents[3]
M8B = ROOT / "examples" / "serving" / "llama3.1-8b.json"


def _p(**kw) -> ServingProblem:
    return problem(M8B, gpus=kw.pop("gpus", "1xh100"), isl=1024, osl=256, **kw)


@functools.cache
def _offline() -> tuple[ServingConfig, float, str, float]:
    sol = dnnplace.solve(_p(), time_limit=10)
    return sol.plan.config, evaluate(_p(), sol.plan.config).output_tokens_per_s, sol.status, sol.gap


def test_the_proof_under_a_rate_is_the_offline_one_and_what_is_served_is_the_demand():
    config, capacity, status, gap = _offline()
    rate = 0.3 * capacity / 256
    sol = dnnplace.solve(_p(rate=rate), time_limit=10)
    ev = evaluate(_p(rate=rate), sol.plan.config)
    assert sol.plan.config == config
    assert (sol.status, sol.gap) == (status, gap)  # not "feasible, gap 70 %" from comparing demand with capacity
    assert ev.output_tokens_per_s == pytest.approx(rate * 256)
    assert ev.capacity_tokens_per_s == pytest.approx(capacity)
    assert not ev.saturated


def test_a_replica_under_a_rate_runs_the_batch_whose_throughput_is_the_demand():
    config, capacity, _, _ = _offline()
    limit = evaluate(_p(rate=capacity / 256 * 2.0), config)
    assert limit.saturated and limit.tpot_ms == pytest.approx(limit.replicas[0].tpot_s * 1e3)
    tpots = []
    for frac in (0.05, 0.2, 0.5, 0.8):
        ev = evaluate(_p(rate=frac * capacity / 256), config)
        (n,) = ev.running
        demand = frac * capacity
        # Little's law through the evaluator's own closed loop: fewer clients serve less, more serve more
        if n > 2:
            assert evaluate(_p(concurrency=math.floor(n)), config).output_tokens_per_s <= demand * 1.01
        assert evaluate(_p(concurrency=math.ceil(n)), config).output_tokens_per_s >= demand * 0.99
        assert ev.tpot_ms < limit.tpot_ms
        tpots.append(ev.tpot_ms)
    assert tpots == sorted(tpots)


def test_the_tpot_at_a_rate_agrees_with_the_simulation_on_one_gpu():
    """The simulation streams Poisson arrivals through the engine's scheduler; on one GPU, below saturation, the
    evaluator's running batch gives the TPOT it measures (queueing moves TTFT, not TPOT)."""
    config, capacity, _, _ = _offline()
    for frac in (0.1, 0.6):
        p = _p(rate=frac * capacity / 256)
        sim = simulate(p, config, rate=frac * capacity / 256, requests=600)
        assert evaluate(p, config).tpot_ms == pytest.approx(sim.tpot_ms["mean"], rel=0.1)


def _two_kinds(engine: str, rate: float | None = None) -> tuple[ServingProblem, ServingConfig]:
    p = _p(gpus="1xh100+1xl40s", engine=engine, rate=rate)
    reps = tuple(Replica((Stage(g, 0, (i,), 32),)) for i, g in enumerate(("h100", "l40s")))
    return p, ServingConfig(reps, 256, 8192)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_router_decides_which_replica_saturates(engine):
    p, cfg = _two_kinds(engine)
    caps = [r.tokens_per_s for r in evaluate(p, cfg).replicas]
    fast, slow = caps
    assert fast > 1.5 * slow
    demand = 0.5 * (2 * slow + fast + slow)  # above twice the slower one's, below both together
    loaded, c2 = _two_kinds(engine, rate=demand / 256)
    ev = evaluate(loaded, c2)
    shares = load_shares(loaded, caps, demand)
    assert sum(shares) == pytest.approx(demand)
    if engine == "vllm":  # least-loaded: both equally busy, the rate is served
        assert not ev.saturated and ev.output_tokens_per_s == pytest.approx(demand)
        assert shares[0] / shares[1] == pytest.approx(fast / slow)
    else:  # round robin: the L40S gets half the requests, more than it serves
        assert ev.saturated and ev.output_tokens_per_s == pytest.approx(slow + demand / 2)


def test_the_search_ranks_by_capacity_at_any_rate():
    """A rate far below every deployment's capacity leaves the ranking as it is offline, not a tie."""
    p, cfg = _two_kinds("vllm", rate=0.01)
    low = evaluate(p, cfg)
    assert low.capacity_tokens_per_s == pytest.approx(evaluate(_two_kinds("vllm")[0], cfg).output_tokens_per_s)
    single = replace(cfg, replicas=cfg.replicas[:1])
    assert evaluate(p, single).capacity_tokens_per_s < low.capacity_tokens_per_s
    assert evaluate(p, single).output_tokens_per_s == pytest.approx(low.output_tokens_per_s)


def test_under_a_rate_the_simulation_judges_whether_the_plan_keeps_up():
    """Without SLOs too: the evaluator's even micro-batches serve 8 requests/s on a PP4 replica of Llama 3.1 70B
    FP8 on 4 H100s, the engine's own (uneven under a trickle of arrivals) do not, so a deployment that keeps up
    in the simulation is the plan, and the plan says what the simulation saw."""
    m70 = ROOT / "examples" / "llm" / "llama3.1-70b.json"
    offline = dnnplace.solve(problem(m70, gpus="4xh100", precision="fp8"), time_limit=20).plan
    p = problem(m70, gpus="4xh100", precision="fp8", rate=8.0)
    assert not evaluate(p, offline.config).saturated
    assert simulate(p, offline.config, rate=8.0, requests=600).tpot_ms["mean"] > 2 * evaluate(p, offline.config).tpot_ms
    plan = dnnplace.solve(p, time_limit=20).plan
    sim = plan.meta["slo_simulated"]
    assert sim["meets_slo"] and not sim["saturated"] and "slo_judged_by" not in plan.meta
