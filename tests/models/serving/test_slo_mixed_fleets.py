"""Latency SLOs on fleets of mixed GPUs: a slow kind's replica that misses the SLO at any batch is left idle
rather than the fleet being told nothing meets it; the simulation that judges a rate runs long enough for the
engine to fill, so replicas of unequal speed keeping up are not read as a growing queue."""

from __future__ import annotations

import functools
from pathlib import Path

import dnnplace
from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.simulator import simulate
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingProblem, Stage
from dnnplace.models.serving.verdicts import SLO_LIFETIMES, SLO_REQUESTS, slo_requests, without_slowest

ROOT = Path(__file__).resolve().parents[3]
M8B = ROOT / "examples" / "serving" / "llama3.1-8b.json"
CFG = ServingConfig(tuple(Replica((Stage(g, 0, (i,), 32),)) for i, g in enumerate(("h100", "l4"))), 256, 8192)


def _p(**kw) -> ServingProblem:
    return problem(M8B, gpus="1xh100+1xl4", isl=1024, osl=256, **kw)


@functools.cache
def _capacity() -> float:
    """Requests/s the H100 + L4 replicas serve at their limits."""
    return evaluate(_p(), CFG).capacity_tokens_per_s / 256


def test_a_replica_that_misses_the_slo_at_any_batch_is_left_idle():
    rate, tpot = 0.3 * _capacity(), 15.0
    l4 = evaluate(_p(), ServingConfig(CFG.replicas[1:], 1, 8192))
    assert l4.tpot_ms > tpot  # the L4 misses it even with one sequence
    p = _p(rate=rate, tpot_ms=tpot)
    assert not evaluate(p, CFG).meets_slo
    dropped = without_slowest(p, CFG)
    assert [r.stages[0].gpu for r in dropped[-1][0].replicas] == ["h100"] and dropped[-1][1].meets_slo
    plan = dnnplace.solve(p, time_limit=20).plan
    assert {s.gpu for r in plan.config.replicas for s in r.stages} == {"h100"}
    assert plan.meta["slo_simulated"]["meets_slo"]


def test_the_simulated_window_spans_request_lifetimes():
    p = _p(rate=0.6 * _capacity())
    ev = evaluate(p, CFG)
    life = (ev.ttft_ms + 255 * ev.tpot_ms) / 1e3
    n = slo_requests(p, CFG)
    assert n > SLO_REQUESTS and n == int(-(-SLO_LIFETIMES * 0.6 * _capacity() * life // 1))
    # at 60 % of what they serve, the H100 and L4 replicas keep up: over that window the simulation says so
    assert not simulate(p, CFG, rate=0.6 * _capacity(), requests=n).saturated
    assert slo_requests(_p(rate=0.01), CFG) == SLO_REQUESTS
