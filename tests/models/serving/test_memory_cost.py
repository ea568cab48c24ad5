"""Memory per engine and the steady-state cost: first/last stages carry the embedding and head, the KV
cache is the engine's minimum, every prediction names its kernel sources and an error band."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dnnplace.models.serving.catalogue import VLLM_2024
from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage


def _pipe(gpu, parts, tp=1):
    return Replica(tuple(Stage(gpu, 0, tuple(range(i * tp, (i + 1) * tp)), n) for i, n in enumerate(parts)))


def test_vllm_puts_the_embedding_first_and_the_head_last(llama70b):
    p = problem(llama70b, gpus="4xh100", precision="fp8", isl=128, osl=128)
    ev = evaluate(p, ServingConfig((_pipe("h100", [20, 20, 20, 20]),), 256, 8192))
    w = [m.weights for m in ev.replicas[0].memory]
    assert w[0] > w[1] and w[3] > w[1] and w[1] == pytest.approx(w[2])
    kv = [m.kv_tokens for m in ev.replicas[0].memory]
    assert ev.replicas[0].kv_tokens == pytest.approx(min(kv), abs=p.block)  # the minimum over workers


def test_sglang_gives_every_rank_the_worlds_smallest_free_memory(llama70b):
    p = problem(llama70b, gpus="2xh100", precision="fp8", engine="sglang", isl=128, osl=128)
    v = problem(llama70b, gpus="2xh100", precision="fp8", engine="vllm", isl=128, osl=128)
    r = _pipe("h100", [50, 30])
    assert evaluate(p, ServingConfig((r,), 256, 8192)).replicas[0].kv_tokens < \
        evaluate(v, ServingConfig((r,), 256, 8192)).replicas[0].kv_tokens


def test_a_prediction_names_its_sources_and_band(llama70b):
    p = problem(llama70b, gpus="2xh100", precision="fp8", engine="trtllm", isl=128, osl=128)
    ev = evaluate(p, ServingConfig((_pipe("h100", [80], tp=2),), 2048, 8192))
    assert ev.fits and ev.output_tokens_per_s > 0
    assert sum(ev.sources.values()) > 0 and 0 < ev.error_band < 0.5
    d = ev.to_dict()
    assert d["kv_cache_tokens"][0] > 0 and d["memory_gib"][0][0]["weights"] > 30


def test_a_model_that_does_not_fit_says_why(llama70b):
    p = problem(llama70b, gpus="1xt4", precision="bf16", isl=128, osl=128)
    ev = evaluate(p, ServingConfig((_pipe("t4", [80]),), 256, 8192))
    assert not ev.fits and "stage 1 (t4)" in ev.why and ev.output_tokens_per_s == 0


def _pr6920(llama70b):
    return replace(problem(llama70b, gpus="8xl4", precision="fp8", isl=512, osl=128), engine=VLLM_2024,
                   max_model_len=8192)


@pytest.mark.xfail(strict=True, reason="vLLM v0.5.3 sized each worker's blocks as 0.9 x total - (init free - free "
                   "after profile_run) (worker.py::determine_num_available_blocks); the two published counts "
                   "(1,476 even, 3,078 for 7/11x6/7) solve to 0.79 GiB per layer (FP8 weights), +1.96 GiB on the "
                   "last stage (the BF16 LM head) and ~9.1 GiB per L4 (22.05 GiB as CUDA reports it) outside "
                   "weights and KV, where the model has 1.7 GiB of profile-run activations: the other ~7.4 GiB has "
                   "no sourced explanation yet.  Read with 16-bit weights instead (online FP8 loads FP16 first: "
                   "vLLM #4387), the counts leave 0.29 GiB for the profile run: that does not fit either")
def test_vllm_pr_6920_even_split_blocks_within_15_percent(llama70b):
    ev = evaluate(_pr6920(llama70b), ServingConfig((_pipe("l4", [10] * 8),), 256, 8192))
    assert abs(ev.replicas[0].kv_tokens / 16 - 1476) <= 0.15 * 1476


def test_vllm_pr_6920_the_planner_split_beats_the_even_split(llama70b):
    from dnnplace.models.serving.search import search

    p = _pr6920(llama70b)
    even = evaluate(p, ServingConfig((_pipe("l4", [10] * 8),), 256, 8192))
    plan = search(p, tp=1, pp=8, max_num_seqs=256, max_num_batched_tokens=8192)
    ev = evaluate(p, plan.config)
    assert ev.replicas[0].kv_tokens >= even.replicas[0].kv_tokens
    assert ev.output_tokens_per_s >= even.output_tokens_per_s
    assert min(plan.config.replicas[0].partition()) >= 1


def test_sglang_derives_its_default_fraction_per_gpu_and_launch(llama70b):
    from dnnplace.models.serving.catalogue import sglang_mem_fraction
    from dnnplace.models.serving.memory import stage_memory

    # srt/server_args.py::_handle_gpu_memory_settings by hand: H100 (81,559 MiB), TP 1: chunk 8192, graphs 256:
    # 512 + 8192 x 1.5 + 256 x 2 + 1/8 GiB = 13,440 MiB; TP 8: 512 + 12,288 + 512 x 2 + 1,024 = 14,848 MiB
    assert sglang_mem_fraction(81559, 1, 1) == round((81559 - 13440) / 81559, 3) == 0.835
    assert sglang_mem_fraction(81559, 8, 1) == round((81559 - 14848) / 81559, 3) == 0.818
    # a 16 GB T4: chunk 2048, graphs 8: 512 + 3072 + 16 + 128 = 3728 MiB; no 10 GiB floor below 60 GiB
    assert sglang_mem_fraction(15360, 1, 1) == round((15360 - 3728) / 15360, 3)
    p = problem(llama70b, gpus="8xh100", precision="fp8", engine="sglang", isl=128, osl=128)
    one, eight = (stage_memory(p, "h100", 1, 0, 10, True, False, 256, 8192, pp) for pp in (1, 8))
    assert one.budget > eight.budget  # the launch's size moves the fraction: pp = 1 is the bound's optimistic value
    given = replace(p, memory_fraction=0.9)
    assert stage_memory(given, "h100", 1, 0, 10, True, False, 256, 8192, 8).budget == pytest.approx(
        0.9 * one.budget / 0.835)  # a fraction given is the fraction used
