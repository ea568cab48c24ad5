"""TensorRT-LLM's schedulers in the simulation (whole requests reserved, whole prompts, no preemption), the
offline run (every request at once, as ``trtllm-bench`` and ``vllm bench throughput`` send them) and the
closed loop (C clients, each sending its next request when the last completes)."""

from __future__ import annotations

import functools
import json
import math
from collections import deque
from pathlib import Path

import pytest
from cli_runner import run_cli

from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.cost import Iteration
from dnnplace.models.serving.evaluation import cached_times
from dnnplace.models.serving.exporters import trtllm
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.scheduler import ReplicaScheduler, RequestTable
from dnnplace.models.serving.search import search
from dnnplace.models.serving.simulator import simulate
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingProblem, Stage

ROOT = Path(__file__).resolve().parents[3]
LLAMA8B = ROOT / "examples" / "llm" / "llama3.1-8b.json"


@functools.cache
def _problem(engine: str, isl: int = 256, osl: int = 16, context: int | None = None) -> ServingProblem:
    return problem(LLAMA8B, gpus="1xh100", isl=isl, osl=osl, engine=engine, max_model_len=context or isl + osl)


def _config(seqs: int = 64, budget: int = 8192) -> ServingConfig:
    return ServingConfig((Replica((Stage("h100", 0, (0,), 32),)),), seqs, budget)


def _run(p: ServingProblem, c: ServingConfig, kv_tokens: float, n: int) -> tuple[list, ReplicaScheduler]:
    """Every request at t = 0 through one replica's scheduler, batch by batch; the batches it ran."""
    reqs = RequestTable([0.0] * n, p.workload.isl, p.workload.osl)
    s = ReplicaScheduler(p, c.replicas[0], kv_tokens, c.max_num_seqs, c.max_num_batched_tokens, reqs)
    s.waiting = deque(range(n))
    batches = []
    now = 0.0
    while True:
        b = s.schedule()
        if b is None:
            break
        assert len(s.running) <= 3  # never more than the cache holds whole
        s.submit(b, now)
        now = s.inflight[0].finish
        s.complete(now)
        batches.append(b)
    return batches, s


def test_trtllm_reserves_whole_requests_runs_whole_prompts_and_never_preempts():
    """A cache of exactly three whole requests: each wave is one step of three whole prompts, then OSL - 1
    steps of three decodes; 20 requests are seven waves (the last of two), 7 x OSL steps in all."""
    p = _problem("trtllm")
    isl, osl = p.workload.isl, p.workload.osl
    whole = math.ceil((isl + osl) / p.block)
    batches, s = _run(p, _config(), 3 * whole * p.block, 20)
    assert s.preemptions == 0 and not s.running and not s.waiting
    assert len(batches) == 7 * osl
    for w in range(7):
        k = 3 if w < 6 else 2
        wave = batches[w * osl:(w + 1) * osl]
        assert (wave[0].prefill, wave[0].decode) == (k * isl, 0)
        assert all((b.prefill, b.decode) == (0, k) for b in wave[1:])
    assert all(x == osl for x in s.reqs.generated)


def test_trtllm_waits_for_a_whole_prompt_where_vllm_splits_it():
    """A budget of 1.5 prompts: TensorRT-LLM (no chunked prefill) runs one prompt a step, vLLM one and a half."""
    isl = 256
    tr, vl = _problem("trtllm", isl, 16), _problem("vllm", isl, 16)
    c = _config(budget=isl * 3 // 2)
    first_tr = _run(tr, c, 3 * 1024 * tr.block, 3)[0][0]
    assert first_tr.prefill == isl
    reqs = RequestTable([0.0] * 3, isl, 16)
    s = ReplicaScheduler(vl, c.replicas[0], 3 * 1024 * vl.block, c.max_num_seqs, c.max_num_batched_tokens, reqs)
    s.waiting = deque(range(3))
    assert s.schedule().prefill == isl * 3 // 2


def _waiting_run(iters: int, ratio: float, isl: int = 256) -> list:
    """One request generating, then a second one arriving: the steps TensorRT-LLM runs with batch waiting."""
    import dataclasses
    base = _problem("trtllm", isl, 16)
    p = dataclasses.replace(base, engine=dataclasses.replace(
        base.engine, batch_wait_timeout_iters=iters, batch_wait_max_tokens_ratio=ratio))
    c = _config(budget=1024)
    reqs = RequestTable([0.0, 0.0], isl, 16)
    s = ReplicaScheduler(p, c.replicas[0], 10 * 1024 * p.block, c.max_num_seqs, c.max_num_batched_tokens, reqs)
    s.waiting = deque([0])
    steps = []
    for k in range(8):
        if k == 1:
            s.waiting.append(1)  # arrives while request 0 generates
        b = s.schedule()
        s.submit(b, float(k))
        s.complete(s.inflight[0].finish)
        steps.append((b.prefill, b.decode))
    return steps


def test_trtllm_batch_waiting_holds_contexts_back_while_requests_generate():
    """TensorRT-LLM's ``_waiting_requests``: with nothing generating a context runs at once; with a request
    generating, a new context waits ``batch_wait_timeout_iters`` steps (the generations run alone) unless the
    step's tokens reach the ratio of ``max_num_tokens``; off (both 0) it joins the next step."""
    assert _waiting_run(0, 0.0)[:3] == [(256, 0), (256, 1), (0, 2)]  # off: the default
    held = _waiting_run(3, 0.9)  # 256 + 1 tokens < 0.9 x 1,024: held for three steps
    assert held[:6] == [(256, 0), (0, 1), (0, 1), (0, 1), (256, 1), (0, 2)]
    assert _waiting_run(3, 0.2)[:3] == [(256, 0), (256, 1), (0, 2)]  # 257 >= 0.2 x 1,024: no wait
    assert _waiting_run(0, 0.9)[:3] == [(256, 0), (256, 1), (0, 2)]  # no timeout iterations: TRT-LLM never waits


def test_the_offline_run_sends_every_request_at_once_and_reports_the_run():
    p, c = _problem("trtllm"), _config()
    sim = simulate(p, c, offline=True, requests=30)  # 30 prompts of 256 fit one step's 8,192 tokens
    d = sim.to_dict()
    json.dumps(d)
    assert d["offline"] is True and d["rate"] is None and not d["saturated"]
    assert sim.completed == 30 and sim.output_tokens == 30 * p.workload.osl and sim.preemptions == 0
    assert sim.output_tokens_per_s == pytest.approx(sim.output_tokens / sim.duration_s)
    assert "offline (all at once)" in sim.summary()[0]
    # the prompts are queued together and go in one step: every first token comes out at its end
    assert sim.ttft_ms["p99"] == pytest.approx(sim.ttft_ms["p50"]) == pytest.approx(sim.ttft_ms["mean"])
    with pytest.raises(DnnplaceError, match="--requests"):
        simulate(p, c, offline=True, requests=0)


def test_the_trtllm_export_turns_chunked_prefill_on_only_where_a_request_needs_it():
    p = _problem("trtllm", 256, 16, 4096)
    plan = search(p, tp=1, pp=1, max_num_seqs=64, max_num_batched_tokens=2048)
    opts = json.loads(trtllm(p, plan))[0]["llm_api_options"]
    assert opts["enable_chunked_prefill"] is True and opts["max_num_tokens"] == 2048
    plan = search(p, tp=1, pp=1, max_num_seqs=64, max_num_batched_tokens=8192)
    assert "enable_chunked_prefill" not in json.loads(trtllm(p, plan))[0]["llm_api_options"]


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("offline") / "plan.json"
    res = run_cli("serve", LLAMA8B, "--gpus", "1xh100", "--isl", 256, "--osl", 32, "--engine", "trtllm", "-o", out)
    assert res.returncode == 0, res.stderr
    return out


def test_simulate_offline_from_the_command_line(plan_file):
    res = run_cli("simulate", plan_file, "--offline", "--requests", 30)
    assert res.returncode == 0, res.stderr
    assert "all at once" in res.stdout and "30 completed" in res.stdout
    res = run_cli("simulate", plan_file, "--offline", "--rate", 2)
    assert res.returncode == 2 and "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "--offline" in res.stderr and "--rate" in res.stderr
    res = run_cli("simulate", plan_file, "--requests", 0, "--rate", 2)
    assert res.returncode == 2 and "Traceback" not in res.stderr


def _alone(p: ServingProblem, it: Iteration) -> float:
    lt = cached_times(p, "h100", 1, it, p.engine.framework, "nvlink")
    return (float(lt.per_layer.sum()) + lt.head) * 1e3


def test_one_client_sends_its_requests_one_after_another():
    """C = 1: every request runs alone, so its TTFT is one prompt's pass and the run lasts the sum of them."""
    p, c = _problem("vllm", 256, 16), _config()
    sim = simulate(p, c, concurrency=1, requests=5)
    assert sim.completed == 5 and sim.preemptions == 0 and sim.to_dict()["concurrency"] == 1
    pre = _alone(p, Iteration(0.0, 0.0, 256.0, 256))
    assert sim.ttft_ms["mean"] == pytest.approx(pre, rel=1e-9) == pytest.approx(sim.ttft_ms["p99"], rel=1e-9)
    per_request = sim.ttft_ms["mean"] + 15 * sim.tpot_ms["mean"]
    assert sim.duration_s * 1e3 == pytest.approx(5 * per_request, rel=1e-9)


def test_c_clients_keep_c_requests_in_flight():
    """C = 4 prompts go in one step (4 x 256 tokens fit 8,192): each TTFT is that step, longer than one prompt's."""
    p, c = _problem("vllm", 256, 16), _config()
    sim = simulate(p, c, concurrency=4, requests=12)
    assert sim.completed == 12 and sim.output_tokens == 12 * 16
    four = _alone(p, Iteration(0.0, 0.0, 4 * 256.0, 256))
    # 1,024 prompt tokens lie between the price grid's points (scheduler.price_grid): interpolated
    assert sim.ttft_ms["p50"] == pytest.approx(four, rel=0.03)
    assert sim.ttft_ms["p50"] > 1.5 * _alone(p, Iteration(0.0, 0.0, 256.0, 256))
    assert "from 4 clients" in sim.summary()[0]
    with pytest.raises(DnnplaceError, match="--concurrency"):
        simulate(p, c, concurrency=0, requests=4)
    with pytest.raises(DnnplaceError, match="not both"):
        simulate(p, c, concurrency=2, offline=True, requests=4)


def test_simulate_concurrency_from_the_command_line(plan_file):
    res = run_cli("simulate", plan_file, "--concurrency", 4, "--requests", 12)
    assert res.returncode == 0, res.stderr
    assert "from 4 clients" in res.stdout and "12 completed" in res.stdout
    res = run_cli("simulate", plan_file, "--concurrency", 4, "--rate", 2)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "not several" in res.stderr


def test_sglang_runs_prompts_in_batches_of_their_own_first():
    """SGLang without --enable-mixed-chunk: a step is prompts alone whenever one is ready, else decodes alone;
    vLLM mixes them."""
    n, isl, osl = 6, 256, 8
    for engine, mixed in (("sglang", False), ("vllm", True)):
        p = _problem(engine, isl, osl)
        c = _config(budget=2 * isl)  # two prompts a step
        reqs = RequestTable([0.0] * n, isl, osl)
        s = ReplicaScheduler(p, c.replicas[0], 10_000 * p.block, c.max_num_seqs, c.max_num_batched_tokens, reqs)
        s.waiting = deque(range(n))
        kinds = []
        now = 0.0
        while (b := s.schedule()) is not None:
            kinds.append((b.prefill > 0, b.decode > 0))
            s.submit(b, now)
            now = s.inflight[0].finish
            s.complete(now)
        assert all(x == osl for x in reqs.generated)
        if mixed:
            assert (True, True) in kinds  # a prompt beside the first ones' decodes
        else:
            assert (True, True) not in kinds
            assert kinds[:3] == [(True, False)] * 3  # all six prompts, two a step, before any decode
