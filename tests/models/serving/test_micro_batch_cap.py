"""TensorRT-LLM caps each pipeline micro-batch at max_batch_size; vLLM caps all of them together.

Read in the engines: TensorRT-LLM's ``_torch/pyexecutor/py_executor.py::_executor_loop_pp`` schedules each of
its ``pp`` micro-batches with ``_schedule()`` over the requests not in flight, up to ``max_batch_size`` each
(trtllm-bench's tuning splits its batch over PP for that reason); vLLM's ``max_num_seqs`` caps
``scheduler.running`` across its micro-batches.  Priced as vLLM's, TensorRT-LLM's PP4 and PP8 ran a quarter and
an eighth of their batch and came out 37-79 % slow on its published RTX PRO 6000 rows
(benchmarks/results/serving.md)."""

from __future__ import annotations

from dnnplace.models.serving.evaluation import evaluate, seq_cap
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.scheduler import ReplicaScheduler, RequestTable
from dnnplace.models.serving.simulator import simulate
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage


def _pipe(p, pp):
    n = p.model.num_layers
    return Replica(tuple(Stage("h100", 0, (i,), n // pp + (i < n % pp)) for i in range(pp)))


def test_tensorrt_llm_runs_max_num_seqs_per_micro_batch_and_vllm_in_all(llama8b):
    t = problem(llama8b, gpus="4xh100", engine="trtllm", isl=128, osl=128)
    v = problem(llama8b, gpus="4xh100", engine="vllm", isl=128, osl=128)
    assert seq_cap(t, 4, 64) == 256 and seq_cap(v, 4, 64) == 64 and seq_cap(t, 1, 64) == 64
    rt = evaluate(t, ServingConfig((_pipe(t, 4),), 64, 8192)).replicas[0]
    rv = evaluate(v, ServingConfig((_pipe(v, 4),), 64, 8192)).replicas[0]
    assert rt.concurrency == 256 and rv.concurrency == 64  # the KV cache holds far more than either


def test_the_simulated_tensorrt_llm_schedulers_fill_every_micro_batch(llama8b):
    t = problem(llama8b, gpus="4xh100", engine="trtllm", isl=128, osl=128)
    r = _pipe(t, 4)
    reqs = RequestTable([0.0] * 100, 128, 128)
    s = ReplicaScheduler(t, r, 1e6, 16, 8192, reqs)
    s.waiting.extend(range(100))
    s.pump(0.0)
    assert len(s.inflight) == 4 and all(len(b.entries) == 16 for b in s.inflight)  # 16 each, 64 running
    assert len(s.running) == 64 and len({e[0] for b in s.inflight for e in b.entries}) == 64
    run = simulate(t, ServingConfig((r,), 16, 8192), offline=True, requests=200, time_limit=60.0)
    assert run.completed == 200
