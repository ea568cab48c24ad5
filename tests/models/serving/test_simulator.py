"""The discrete-event simulation: deterministic, exact against the cost functions where the queue is empty,
saturated where the rate is far above capacity, tokens conserved through preemptions, PP micro-batches
in flight, and no crash on random small workloads."""

from __future__ import annotations

import functools
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.cost import Iteration, p2p_time
from dnnplace.models.serving.evaluation import cached_times, evaluate, link_between
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.simulator import simulate
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingProblem, Stage, Workload

LLAMA8B = Path(__file__).resolve().parents[3] / "examples" / "llm" / "llama3.1-8b.json"


@functools.cache
def _problem(isl: int, osl: int, gpus: str = "2xh100", fraction: float = 0.0) -> ServingProblem:
    """One problem object per workload, so the evaluator's price cache serves every test that shares it."""
    return problem(LLAMA8B, gpus=gpus, isl=isl, osl=osl, memory_fraction=fraction)


def _config(parts: tuple[int, ...] = (32,), seqs: int = 256, budget: int = 8192) -> ServingConfig:
    stages = tuple(Stage("h100", 0, (i,), n) for i, n in enumerate(parts))
    return ServingConfig((Replica(stages),), seqs, budget)


def _seconds(p: ServingProblem, c: ServingConfig, it: Iteration) -> float:
    """One request's pass through every stage of the replica, from the evaluator's own price functions."""
    r = c.replicas[0]
    total, lo = 0.0, 0
    for i, s in enumerate(r.stages):
        lt = cached_times(p, s.gpu, s.tp, it, p.engine.framework, "nvlink")
        total += float(lt.per_layer[lo:lo + s.layers].sum())
        lo += s.layers
        if i == r.pp - 1:
            total += lt.head
        else:
            total += float(p2p_time(s.gpu, it.tokens * p.model.hidden * 2.0, link_between(p, s, r.stages[i + 1]),
                                    p.fleet.network_bandwidth, p.fleet.network_latency_s).seconds[0])
    return total


def test_the_same_seed_gives_the_same_run_and_another_seed_another():
    p, c = _problem(256, 32), _config()
    a = simulate(p, c, rate=40.0, requests=150, seed=3).to_dict()
    b = simulate(p, c, rate=40.0, requests=150, seed=3).to_dict()
    assert a == b
    assert simulate(p, c, rate=40.0, requests=150, seed=4).to_dict()["ttft_ms"] != a["ttft_ms"]
    json.dumps(a)  # plain values only
    for k in ("rate", "requests", "completed", "preemptions", "saturated", "output_tokens_per_s",
              "requests_per_s", "ttft_ms", "tpot_ms"):
        assert k in a
    assert set(a["ttft_ms"]) == {"mean", "p50", "p90", "p99"}


@pytest.mark.parametrize("rate", [5.0, 200.0], ids=["idle", "queued"])
def test_inter_token_gaps_add_up_to_each_requests_decode_time(rate):
    """ITL is every gap between two tokens of one request: with every request alike and none preempted its
    token-weighted mean is TPOT's mean, and no gap is shorter than the fastest decode step."""
    p, c = _problem(256, 32), _config()
    s = simulate(p, c, rate=rate, requests=60, seed=2)
    assert s.completed == 60 and s.preemptions == 0
    assert s.itl_ms["mean"] == pytest.approx(s.tpot_ms["mean"], rel=1e-9)
    assert s.itl_ms["p50"] is not None and s.itl_ms["p50"] <= s.itl_ms["p99"]
    assert set(s.to_dict()["itl_ms"]) == {"mean", "p50", "p90", "p99"}
    assert any(line.startswith("ITL ms") for line in s.summary())


@pytest.mark.parametrize("parts", [(32,), (16, 16)], ids=["pp1", "pp2"])
def test_an_empty_queue_costs_one_prefill_through_every_stage_then_one_decode_per_token(parts):
    """At a rate where requests never meet, TTFT is the prompt's pass through every stage (the first
    token is sampled at the end of the prefill, as vLLM does) and TPOT a batch of one's decode pass."""
    isl, osl = 256, 24
    p, c = _problem(isl, osl), _config(parts)
    s = simulate(p, c, rate=0.01, requests=12, seed=1)
    assert s.completed == 12 and s.preemptions == 0 and not s.saturated
    pre = _seconds(p, c, Iteration(0.0, 0.0, float(isl), isl)) * 1e3
    dec = _seconds(p, c, Iteration(1.0, isl + osl / 2, 0.0, isl)) * 1e3
    for k in ("mean", "p50", "p99"):
        assert s.ttft_ms[k] == pytest.approx(pre, rel=1e-9)
        assert s.tpot_ms[k] == pytest.approx(dec, rel=0.01)  # the KV length: interpolated between grid points


def test_far_above_capacity_it_saturates_and_runs_at_the_offline_rate():
    """Requests 1024 in, 64 out on one H100: the simulation's steady throughput within the evaluator's
    error band of its offline throughput (measured: 0.95 of it)."""
    p, c = _problem(1024, 64), _config()
    ev = evaluate(p, c)
    s = simulate(p, c, rate=100 * ev.requests_per_s, requests=1500)
    assert s.saturated and s.completed == 1500
    ratio = s.steady_output_tokens_per_s / ev.output_tokens_per_s
    assert abs(ratio - 1) <= ev.error_band, ratio


@pytest.mark.xfail(strict=False, reason="fixed-length requests admitted together finish together, so their "
                   "prompts arrive in waves (many in one step, then none) that cost more than the evaluator's "
                   "steady two prompts a step: measured 0.88 of evaluate's offline rate at 512/128, outside its "
                   "11 % band")
def test_far_above_capacity_short_prompts_also_run_at_the_offline_rate():
    p, c = _problem(512, 128), _config()
    ev = evaluate(p, c)
    s = simulate(p, c, rate=100 * ev.requests_per_s, requests=2000)
    assert s.saturated
    assert abs(s.steady_output_tokens_per_s / ev.output_tokens_per_s - 1) <= ev.error_band


def test_a_rate_below_capacity_is_not_saturated_and_delivers_the_demand():
    p, c = _problem(512, 64), _config()
    ev = evaluate(p, c)
    rate = 0.3 * ev.requests_per_s
    s = simulate(p, c, rate=rate, requests=800)
    assert not s.saturated and s.completed == 800
    assert s.requests_per_s == pytest.approx(rate, rel=0.1)


def _tiny_kv_fraction(isl: int, osl: int, c: ServingConfig) -> float:
    """The smallest memory fraction whose KV cache holds three requests (found by asking the evaluator)."""
    for k in range(100, 600):
        f = k / 1000
        ev = evaluate(_problem(isl, osl, "2xh100", f), c)
        if ev.fits and ev.replicas[0].kv_tokens >= 3 * (isl + osl):
            return f
    raise AssertionError("no fraction gives a tiny KV cache")


def test_a_tiny_kv_cache_preempts_and_every_request_still_gets_exactly_osl_tokens():
    isl, osl = 256, 64
    c = _config(seqs=64)
    p = _problem(isl, osl, "2xh100", _tiny_kv_fraction(isl, osl, c))
    kv = evaluate(p, c).replicas[0].kv_tokens
    assert kv < 8 * (isl + osl)  # a few requests' worth, for 64 that may run
    s = simulate(p, c, rate=500.0, requests=60, seed=2)
    assert s.preemptions > 0
    assert s.completed == 60 and s.output_tokens == 60 * osl and not s.stopped


def test_pp2_keeps_two_micro_batches_in_flight():
    p = _problem(256, 32)
    s = simulate(p, _config((16, 16)), rate=2000.0, requests=300)
    assert s.micro_batches_in_flight == [2]
    one = simulate(p, _config((32,)), rate=2000.0, requests=300)
    assert one.micro_batches_in_flight == [1]
    assert s.completed == 300 and s.output_tokens == 300 * 32


@pytest.mark.parametrize("engine, router", [("vllm", "least-loaded"), ("sglang", "round-robin")])
def test_two_replicas_share_the_load(engine, router):
    p = problem(LLAMA8B, gpus="2xh100", isl=256, osl=32, engine=engine)
    c = ServingConfig((Replica((Stage("h100", 0, (0,), 32),)), Replica((Stage("h100", 0, (1,), 32),))), 256, 8192)
    single = simulate(p, _config(), rate=3000.0, requests=600)
    both = simulate(p, c, rate=3000.0, requests=600)
    assert both.steady_output_tokens_per_s > 1.6 * single.steady_output_tokens_per_s
    assert both.router.startswith(router)


def test_the_time_limit_stops_cleanly_with_what_was_simulated():
    p, c = _problem(256, 32), _config()
    s = simulate(p, c, rate=0.5, requests=200_000, time_limit=0.3)
    assert s.stopped == "time limit" and 0 < s.completed < 200_000
    assert s.summary()[-1].startswith("stopped early")


@pytest.mark.parametrize("kw, culprit", [({"rate": 0.0}, "--rate"), ({"rate": math.inf}, "--rate"),
                                         ({"rate": 1.0, "requests": 0}, "--requests"),
                                         ({"rate": 1.0, "time_limit": -1.0}, "--time-limit")])
def test_bad_arguments_name_the_culprit(kw, culprit):
    with pytest.raises(DnnplaceError, match=culprit):
        simulate(_problem(256, 32), _config(), **kw)


def test_a_deployment_that_does_not_fit_is_refused_in_one_line():
    p = problem(LLAMA8B, gpus="1xt4", isl=256, osl=32)
    with pytest.raises(DnnplaceError, match="does not fit"):
        simulate(p, ServingConfig((Replica((Stage("t4", 0, (0,), 32),)),), 256, 8192), rate=1.0)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(isl=st.sampled_from([1, 37, 200]), osl=st.integers(1, 40), rate=st.floats(0.5, 5000.0),
       requests=st.integers(1, 40), seqs=st.sampled_from([1, 3, 16]), budget=st.sampled_from([16, 64, 8192]),
       shape=st.sampled_from(["pp1", "pp2", "dp2"]), seed=st.integers(0, 3))
def test_random_small_workloads_hold_the_invariants(isl, osl, rate, requests, seqs, budget, shape, seed):
    p = _problem(isl, 40)
    p = replace(p, workload=Workload(isl, osl))
    pp = 2 if shape == "pp2" else 1
    c = _config((32,) if pp == 1 else (16, 16), seqs, budget)
    if shape == "dp2":
        c = ServingConfig((c.replicas[0], Replica((Stage("h100", 0, (1,), 32),))), seqs, budget)
    s = simulate(p, c, rate=rate, requests=requests, seed=seed, time_limit=20.0)
    assert not s.stopped and s.completed == requests
    # every completed request stops at exactly osl tokens, so a total of requests * osl means none made more
    assert s.output_tokens == requests * osl
    assert max(s.micro_batches_in_flight) <= pp
    t = s.ttft_ms
    assert t["mean"] is not None and 0 < t["p50"] <= t["p90"] <= t["p99"]
    if osl > 1:
        assert s.tpot_ms["p50"] is not None and s.tpot_ms["p50"] > 0
    else:
        assert s.tpot_ms["mean"] is None
    assert s.output_tokens_per_s > 0 and isinstance(s.saturated, bool)
    json.dumps(s.to_dict())
    assert all(isinstance(line, str) for line in s.summary())


def test_an_empty_deployment_is_refused_in_one_line_not_a_crash():
    # what a search that found nothing hands back: no replica to route a request to
    with pytest.raises(DnnplaceError, match="no replica"):
        simulate(_problem(256, 32), ServingConfig((), 256, 8192), offline=True, requests=4)


def _long_prompts(isl: int, osl: int) -> tuple[ServingProblem, ServingConfig]:
    """A cache that holds about one and a half requests, so two running requests must preempt."""
    c = _config(seqs=8, budget=512)
    for k in range(60, 600):
        f = k / 1000
        ev = evaluate(_problem(isl, osl, "2xh100", f), c)
        if ev.fits and ev.replicas[0].kv_tokens >= 1.5 * (isl + osl):
            return _problem(isl, osl, "2xh100", f), c
    raise AssertionError("no fraction gives a cache of one and a half requests")


def test_prefix_caching_keeps_a_preempted_prompt_head_and_saves_its_recompute():
    """vLLM v1 frees a preempted request's blocks tail first into the free queue, which hands out the blocks
    freed longest ago first: re-admitted, it recomputes only what others took.  The same run without prefix
    caching recomputes every preempted prompt whole, so it takes longer and every request still completes."""
    isl, osl = 4096, 64
    p, c = _long_prompts(isl, osl)
    assert p.engine.prefix_cache
    cold = replace(p, engine=replace(p.engine, prefix_cache=False))
    warm_run = simulate(p, c, offline=True, requests=6)
    cold_run = simulate(cold, c, offline=True, requests=6)
    for s in (warm_run, cold_run):
        assert s.completed == 6 and s.output_tokens == 6 * osl and not s.stopped
    assert warm_run.preemptions > 0 and cold_run.preemptions > 0
    assert warm_run.duration_s < cold_run.duration_s


def test_the_free_queue_hands_out_the_blocks_freed_longest_ago_and_a_victim_loses_its_tail_first():
    from dnnplace.models.serving.scheduler import ReplicaScheduler, RequestTable

    p, c = _long_prompts(4096, 64)
    reqs = RequestTable([0.0, 0.0], 4096, 64)
    s = ReplicaScheduler(p, c.replicas[0], 40 * p.block, 8, 512, reqs)
    assert s.free == 40
    s._take(30)  # 10 fresh blocks left at the head of the queue
    reqs.blocks[0], reqs.computed[0] = 30, 30 * p.block - 5  # 29 full blocks and a partial one
    s.running.append(0)
    assert s._preempt() == 0
    assert s.free == 40 and s.cached == {0: 29}
    s._take(12)  # the partial block first, then the 10 fresh ones, then one of the victim's
    assert s.free == 28 and s.cached == {0: 28}
    assert s._reclaim(0) == 28 and s.free == 0 and s.cached == {}
    assert sum(n for _, n in s.free_runs) == s.free


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(isl=st.sampled_from([17, 64, 300]), osl=st.integers(1, 24), requests=st.integers(1, 12),
       blocks=st.integers(4, 40), seqs=st.sampled_from([1, 2, 8]), budget=st.sampled_from([16, 64, 512]),
       cache=st.booleans())
def test_the_block_pool_balances_at_every_step(isl, osl, requests, blocks, seqs, budget, cache):
    """Driving one replica's scheduler by hand through a tiny cache (preemptions everywhere): after every step
    the free blocks and the running requests' blocks add up to the pool, the free queue's runs add up to the free
    blocks, each preempted request's cached count is what its run holds, and every request ends with its osl
    tokens whether or not prefix caching keeps preempted prompts."""
    from dnnplace.models.serving.scheduler import ReplicaScheduler, RequestTable

    p = _problem(isl, 40)
    p = replace(p, workload=Workload(isl, osl), engine=replace(p.engine, prefix_cache=cache))
    need = -(-(isl + osl) // p.block)
    reqs = RequestTable([0.0] * requests, isl, osl)
    s = ReplicaScheduler(p, _config().replicas[0], max(blocks, need) * p.block, seqs, budget, reqs)
    s.waiting.extend(range(requests))
    now, steps = 0.0, 0
    while s.running or s.waiting or s.inflight:
        s.pump(now)
        assert s.inflight, "the scheduler stalled with work left"
        now = s.inflight[0].finish
        s.complete(now)
        steps += 1
        assert steps < 100_000
        assert s.free + sum(reqs.blocks[r] for r in s.running) == s.total_blocks
        if cache:
            assert sum(n for _, n in s.free_runs) == s.free
            owned: dict[int, int] = {}
            for owner, n in s.free_runs:
                if owner >= 0:
                    owned[owner] = owned.get(owner, 0) + n
            assert owned == s.cached
    assert reqs.generated == [osl] * requests
    assert s.free == s.total_blocks
