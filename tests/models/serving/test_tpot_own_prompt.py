"""A running sequence's TPOT leaves out its own prompt: its decode steps carry the other sequences' prompts only.

Why: the evaluator's mean step carries the prompt tokens of every request (the throughput is right), but a
request is prefilled before it decodes; one sequence alone decodes in steps of its own.  A 100,000-token prompt
on one llama.cpp slot made the mean step 133 ms where the simulation's TPOT is 23 ms."""

from __future__ import annotations

import pytest

from dnnplace.models.serving.cost import Iteration
from dnnplace.models.serving.evaluation import cached_times, evaluate
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.simulator import simulate
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage


def _one(gpu: str, layers: int) -> Replica:
    return Replica((Stage(gpu, 0, (0,), layers),))


def test_one_sequence_decodes_in_steps_of_its_own(llama8b):
    p = problem(llama8b, gpus="1xrtx-3090", engine="llama.cpp", precision="q4_0", isl=100000, osl=1000,
                concurrency=1)
    cfg = ServingConfig((_one("rtx-3090", 32),), 1, 512)
    ev = evaluate(p, cfg)
    lt = cached_times(p, "rtx-3090", 1, Iteration(1.0, p.workload.held, 0.0, 100000), None, "nvlink")
    assert ev.replicas[0].tpot_s == pytest.approx(float(lt.per_layer.sum()) + lt.head, rel=1e-9)  # decode only
    sim = simulate(p, cfg, concurrency=1, requests=2, time_limit=60)
    assert ev.tpot_ms == pytest.approx(sim.tpot_ms["mean"], rel=0.05)


@pytest.mark.parametrize("conc", [4, 16])
def test_more_sequences_carry_more_of_the_others_prompts(llama8b, conc):
    p = problem(llama8b, gpus="1xh100", engine="vllm", isl=8000, osl=200, concurrency=conc)
    cfg = ServingConfig((_one("h100", 32),), conc, 8192)
    ev = evaluate(p, cfg)
    sim = simulate(p, cfg, concurrency=conc, requests=4 * conc, time_limit=60)
    # within the evaluator's band of the simulation, and never the mean step's full prompt share
    assert ev.tpot_ms == pytest.approx(sim.tpot_ms["mean"], rel=ev.error_band)
    assert ev.replicas[0].tpot_s < max(ev.replicas[0].stage_s) * (1 - 1e-6)
