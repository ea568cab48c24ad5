"""Engines that run a step through their stages in turn (llama.cpp's layer split, a Hugging Face device_map) are
priced so: a step costs the sum of the stages' times, not the slowest one's, and the simulation keeps one
micro-batch in flight; a pipelined engine with fewer sequences than stages keeps only that many in flight.

Why: llama.cpp's pipeline parallelism overlaps the ubatches of one ``llama_decode`` (ggml-org/llama.cpp PR
#6017) and a decode step is one ubatch; accelerate's hooks carry one forward from device to device.  Priced as
a pipeline, one Hugging Face request on two GPUs was said to make twice the tokens its own TPOT allows."""

from __future__ import annotations

import pytest

from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.simulator import simulate
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage


def _pipe(gpu: str, parts: list[int]) -> Replica:
    return Replica(tuple(Stage(gpu, 0, (i,), n) for i, n in enumerate(parts)))


@pytest.mark.parametrize("engine, precision, seqs", [("hf", "bf16", 1), ("llama.cpp", "q4_k_m", 4),
                                                     ("llama.cpp", "q4_k_m", 32)])
def test_a_step_through_the_stages_in_turn_costs_their_sum(llama8b, engine, precision, seqs):
    p = problem(llama8b, gpus="2xl40s", engine=engine, precision=precision, isl=512, osl=128)
    one = evaluate(p, ServingConfig((_pipe("l40s", [32]),), seqs, 512), at_load=False).replicas[0]
    two = evaluate(p, ServingConfig((_pipe("l40s", [16, 16]),), seqs, 512), at_load=False).replicas[0]
    assert two.concurrency == one.concurrency == seqs
    # every running sequence makes one token a step, and a step runs every stage in turn: no more than seqs
    # tokens per sum of stage times (a sequence's own TPOT leaves out its own prompt: at most that step)
    assert two.tokens_per_s <= seqs / sum(two.stage_s) * (1 + 1e-9)
    assert two.tpot_s <= sum(two.stage_s) * (1 + 1e-9)
    # the same GPUs, the same layers, run in turn: no faster than one GPU holding them all
    assert two.tokens_per_s <= one.tokens_per_s * 1.01


def test_the_simulation_keeps_one_step_in_flight_where_the_stages_run_in_turn(llama8b):
    p = problem(llama8b, gpus="2xl40s", engine="llama.cpp", precision="q4_k_m", isl=512, osl=128)
    cfg = ServingConfig((_pipe("l40s", [16, 16]),), 16, 512)
    ev = evaluate(p, cfg, at_load=False)
    sim = simulate(p, cfg, offline=True, requests=160, time_limit=60)
    # the offline simulation against the evaluator's steady state: within its band (roofline), and far from the
    # pipelined rate the evaluator gave before (about 1.8x this on two stages)
    assert sim.output_tokens_per_s == pytest.approx(ev.output_tokens_per_s, rel=0.2)
    assert max(sim.micro_batches_in_flight) == 1


def test_a_pipeline_with_fewer_sequences_than_stages_keeps_only_those_in_flight(llama8b):
    p = problem(llama8b, gpus="4xl40s", engine="vllm", isl=512, osl=128)
    r = _pipe("l40s", [8, 8, 8, 8])
    for seqs in (1, 2, 4, 8):
        ev = evaluate(p, ServingConfig((r,), seqs, 512), at_load=False).replicas[0]
        assert ev.concurrency == seqs
        # a sequence makes one token per trip through the pipeline: seqs per sum of stage times at most
        assert ev.tokens_per_s <= seqs / sum(ev.stage_s) * (1 + 1e-9)


def test_one_sequence_decodes_no_faster_on_more_stages(llama8b):
    # llama.cpp PR #19922's baseline: one sequence's tg falls from 2 to 4 to 6 GPUs (-sm layer), as stages run in turn
    p = problem(llama8b, gpus="8xl40s", engine="llama.cpp", precision="q4_0", isl=128, osl=512)
    rates = []
    for n in (1, 2, 4, 8):
        r = _pipe("l40s", [32 // n] * n)
        rates.append(evaluate(p, ServingConfig((r,), 1, 512), at_load=False).output_tokens_per_s)
    assert all(b <= a * (1 + 1e-9) for a, b in zip(rates, rates[1:]))
