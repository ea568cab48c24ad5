"""Under a closed loop of C clients the deployment runs C sequences in all, split over its replicas as the
engine's router splits them, and a client that finds no free slot waits for one (its TTFT says so)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.simulator import simulate
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage

ROOT = Path(__file__).resolve().parents[3]
M8B = ROOT / "examples" / "serving" / "llama3.1-8b.json"


def _two(max_num_seqs: int = 256) -> ServingConfig:
    return ServingConfig(tuple(Replica((Stage(g, 0, (i,), 32),)) for i, g in enumerate(("h100", "l40s"))),
                         max_num_seqs, 8192)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_clients_are_split_over_the_replicas_not_given_to_each(engine):
    p = problem(M8B, gpus="1xh100+1xl40s", isl=1024, osl=256, concurrency=16, engine=engine)
    ev = evaluate(p, _two())
    assert sum(ev.running) == pytest.approx(16.0, rel=1e-3)
    assert ev.output_tokens_per_s < ev.capacity_tokens_per_s  # each replica alone at 16 is the search's bound
    if engine == "vllm":  # least-loaded: as many in flight on each
        assert ev.running[0] == pytest.approx(ev.running[1])
    else:  # round robin: the same request rate on each, so the slower L40S holds more clients
        assert ev.running[1] > ev.running[0]
    sim = simulate(p, _two(), concurrency=16, requests=160)
    assert ev.output_tokens_per_s == pytest.approx(sim.steady_output_tokens_per_s, rel=0.25)


@pytest.mark.parametrize("engine", ["vllm", "trtllm", "sglang"])
def test_clients_beyond_the_batch_limit_wait_for_a_slot(engine):
    p = problem(M8B, gpus="1xh100", isl=1024, osl=256, concurrency=64, engine=engine)
    cfg = ServingConfig((Replica((Stage("h100", 0, (0,), 32),)),), 16, 8192)
    ev = evaluate(p, cfg)
    assert ev.running == (16.0,)
    alone = evaluate(problem(M8B, gpus="1xh100", isl=1024, osl=256, concurrency=16, engine=engine), cfg)
    assert ev.tpot_ms == pytest.approx(alone.tpot_ms)
    # 48 clients wait behind 16 running: (64 - 16) / 16 = 3 request lifetimes each, by Little's law
    assert ev.ttft_ms == pytest.approx(alone.ttft_ms + 3 * (alone.ttft_ms + 255 * alone.tpot_ms))
    sim = simulate(p, cfg, concurrency=64, requests=640)
    assert ev.ttft_ms == pytest.approx(sim.ttft_ms["mean"], rel=0.1)
