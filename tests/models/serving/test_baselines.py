"""Baselines: each engine's default split as its source computes it, priced by the plan's evaluator."""

from __future__ import annotations

import pytest

from dnnplace.models.serving.baselines import (
    NAMES,
    accelerate_balanced_layers,
    baselines,
    engine_default_split,
    llama_cpp_layers,
)
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.search import search
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, Stage


@pytest.mark.parametrize("layers,stages,rule,want", [
    (80, 3, "middle", [27, 27, 26]), (61, 8, "middle", [7, 7, 8, 8, 8, 8, 8, 7]), (94, 4, "middle", [23, 24, 24, 23]),
    (80, 8, "middle", [10] * 8),  # vLLM PR #6920's even split on 8 x L4
    (61, 8, "last", [7, 7, 7, 8, 8, 8, 8, 8]), (80, 3, "last", [26, 27, 27]),
    (61, 8, "first", [8, 8, 8, 8, 8, 7, 7, 7]), (80, 3, "first", [27, 27, 26]),
])
def test_engine_default_splits_match_the_engines_rules(layers, stages, rule, want):
    # vLLM get_pp_indices / SGLang get_pp_indices / TensorRT-LLM torch.tensor_split (ENGINES.md examples)
    assert engine_default_split(layers, stages, rule) == want


@pytest.mark.parametrize("layers,shares,want", [
    (32, [3, 1], [25, 7]),  # + the output slot on GPU 1: 8 slots
    (80, [24, 24, 12], [33, 32, 15]),  # + output: 16 slots on GPU 2
    (32, [1, 0, 1], [17, 0, 15]),
    (80, [1, 1], [41, 39]),  # 81 slots: il/81 < 0.5 for il <= 40
])
def test_llama_cpp_slots_follow_load_tensors(layers, shares, want):
    assert llama_cpp_layers(layers, shares) == want


def test_accelerate_balanced_is_even_by_bytes_and_reserves_gpu0(llama70b):
    p = problem(llama70b, gpus="4xa100", precision="bf16", isl=512, osl=128)
    free = [80 * 2**30] * 4
    counts, cpu = accelerate_balanced_layers(p, free)
    assert cpu == "" and sum(counts) == 80
    m = p.model
    total = m.embed_bytes + float(m.weight_bytes.sum()) + m.hidden * 2 + m.head_bytes
    per_gpu = total // 4 + int(1.25 * float(m.weight_bytes[0]))
    # GPU 0 holds the embedding and keeps the largest module's room free; the others fill to per_gpu
    assert counts[0] == int((per_gpu - max(m.embed_bytes, m.head_bytes) - m.embed_bytes) // m.weight_bytes[0])
    assert counts[1] == counts[2] == int(per_gpu // m.weight_bytes[0])
    assert counts[0] < counts[1]


def test_accelerate_offloads_when_the_small_gpu_cannot_take_its_even_share(llama70b):
    p = problem(llama70b, gpus="1xrtx-4090+1xrtx-3090+1xrtx-3060", engine="llama.cpp", precision="q4_k_m",
                isl=512, osl=128, max_model_len=4096)
    plan = search(p, time_limit=20)
    acc = {b.name: b for b in baselines(p, plan)}["accelerate-balanced"]
    assert acc.gain is None and "CPU" in acc.why


def test_every_baseline_is_reported_and_the_optimal_plan_gains_at_least_one(llama70b):
    p = problem(llama70b, gpus="2xa100+2xl40s", precision="fp8", isl=1024, osl=256, max_model_len=8192)
    plan = search(p, time_limit=30)
    out = baselines(p, plan)
    assert [b.name for b in out] == list(NAMES)
    for b in out:
        d = b.to_dict()
        assert d["name"] == b.name and isinstance(d["why"], str) and d["why"]
        if b.gain is not None:
            # the plan is optimal up to its own gap: no baseline beats it by more than that
            assert b.gain >= (1 - plan.gap) * (1 - 1e-9), (b.name, b.gain, plan.gap)
    even = out[0]
    assert even.config is not None
    assert [r.partition() for r in even.config.replicas] == \
        [engine_default_split(80, r.pp, "middle") for r in plan.config.replicas]


def test_a_baseline_that_does_not_fit_names_the_stage_and_its_shortfall(llama70b):
    # a plan with an uneven split on 2 x L4 that the even split cannot hold
    p = problem(llama70b, gpus="1xh100+1xl4", precision="fp8", isl=512, osl=128, max_model_len=4096)
    plan = ServingPlan(ServingConfig((Replica((Stage("h100", 0, (0,), 62), Stage("l4", 0, (1,), 18))),), 256, 8192))
    even = baselines(p, plan, time_limit=10)[0]
    assert even.name == "engine-even" and even.gain is None
    assert "stage 2" in even.why and "l4" in even.why and "GiB short" in even.why
    assert even.to_dict()["fits"] is False


def test_best_homogeneous_uses_one_kind_and_an_infeasible_plan_never_crashes(llama70b):
    p = problem(llama70b, gpus="1xt4", precision="bf16", isl=128, osl=128)
    plan = search(p, time_limit=5)
    out = baselines(p, plan, time_limit=5)
    assert all(b.gain is None for b in out)
    p2 = problem(llama70b, gpus="2xa100+2xl40s", precision="fp8", isl=512, osl=128, max_model_len=4096)
    best = baselines(p2, search(p2, time_limit=20), time_limit=20)[3]
    assert best.config is not None and len({s.gpu for r in best.config.replicas for s in r.stages}) == 1


def test_best_homogeneous_meets_each_kind_at_its_own_batch_limit(llama8b):
    """A plan whose max_num_seqs was searched is held against each GPU kind at that kind's own best limit,
    searched from the engine's default for those GPUs (vLLM: 1,024 on an H100, 256 where an A100 is in the
    fleet); a pinned limit stays pinned."""
    p = problem(llama8b, gpus="1xh100;1xa100-80g", isl=128, osl=128)
    assert p.engine.max_num_seqs == 256
    plan = search(p, time_limit=30)
    assert plan.meta.get("max_num_seqs_searched")
    homo = baselines(p, plan)[3]
    assert homo.name == "best-homogeneous" and homo.config is not None
    assert "h100" in homo.why and homo.config.max_num_seqs >= 1024  # the H100 alone starts at vLLM's 1,024
    pinned = search(p, time_limit=30, max_num_seqs=64)
    assert baselines(p, pinned)[3].config.max_num_seqs == 64
