"""The batch limit as the engines default it and as the search chooses it.

vLLM's default ``max_num_seqs`` is keyed on the GPU it starts on (engine/arg_utils.py::get_batch_defaults:
1024 on a GPU of at least 70 GiB that is not an A100, else 256); the search moves the limit from that default
while the throughput rises, since the limit costs memory (vLLM's start-up sampling pass holds about ten FP32
logits rows per sequence) as well as allowing sequences in flight."""

from __future__ import annotations

import dataclasses
import json

from dnnplace.models.serving.catalogue import VLLM_2024, vllm_default_max_num_seqs
from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.load import fleet_defaults, problem
from dnnplace.models.serving.plan_file import plan_document, read_serving_plan
from dnnplace.models.serving.search import search
from dnnplace.models.serving.spec import ServingConfig

GIB = 2**30


def test_vllm_default_limit_follows_the_gpu_it_starts_on():
    assert vllm_default_max_num_seqs([("h100", 79.6 * GIB)]) == 1024
    assert vllm_default_max_num_seqs([("h200", 140.4 * GIB)]) == 1024
    assert vllm_default_max_num_seqs([("a100", 80.0 * GIB)]) == 256  # vLLM PR #17885: not on A100s
    assert vllm_default_max_num_seqs([("l40s", 45.0 * GIB)]) == 256
    assert vllm_default_max_num_seqs([("h100", 79.6 * GIB), ("l40s", 45.0 * GIB)]) == 256  # one value per plan


def test_the_problem_carries_the_fleets_default(llama8b):
    assert problem(llama8b, gpus="1xh100").engine.max_num_seqs == 1024
    assert problem(llama8b, gpus="1xa100-80g").engine.max_num_seqs == 256
    assert problem(llama8b, gpus="1xh100+1xl40s").engine.max_num_seqs == 256
    h100 = problem(llama8b, gpus="1xh100")
    assert fleet_defaults(VLLM_2024, h100.fleet).max_num_seqs == 256  # vLLM of 2024: 256 on every GPU
    assert problem(llama8b, gpus="1xh100", engine="sglang").engine.max_num_seqs == \
        problem(llama8b, gpus="1xl40s", engine="sglang").engine.max_num_seqs


def test_the_search_moves_the_limit_only_while_it_gains(llama8b):
    p = problem(llama8b, gpus="1xl40s", isl=128, osl=128)
    plan = search(p, time_limit=30)
    tried = plan.meta["max_num_seqs_searched"]
    assert len(tried) >= 2 and p.engine.max_num_seqs in tried
    assert plan.config.max_num_seqs == max(tried, key=tried.get)
    chosen = evaluate(p, plan.config).output_tokens_per_s
    default = evaluate(p, ServingConfig(plan.config.replicas, p.engine.max_num_seqs,
                                        plan.config.max_num_batched_tokens)).output_tokens_per_s
    assert chosen >= default
    assert abs(tried[plan.config.max_num_seqs] - chosen) <= 1e-3 * chosen


def test_a_pinned_limit_is_kept_and_not_searched(llama8b):
    p = problem(llama8b, gpus="1xl40s", isl=128, osl=128)
    plan = search(p, time_limit=30, max_num_seqs=64)
    assert plan.config.max_num_seqs == 64 and "max_num_seqs_searched" not in plan.meta


def test_hf_keeps_its_one_request(llama8b):
    p = problem(llama8b, gpus="1xl40s", engine="hf", isl=128, osl=128)
    plan = search(p, time_limit=30)
    assert plan.config.max_num_seqs == 1 and "max_num_seqs_searched" not in plan.meta


def test_llama_cpp_searches_its_slots_within_llama_max_seq(llama8b):
    # -np is llama.cpp's batch limit: the 4 slots of its default leave most of an L40S idle on short requests;
    # the search doubles it while it gains, never past LLAMA_MAX_SEQ (256), every slot holding one request
    p = problem(llama8b, gpus="1xl40s", engine="llama.cpp", isl=128, osl=128)
    plan = search(p, time_limit=30)
    tried = plan.meta["max_num_seqs_searched"]
    assert 4 in tried and max(tried) <= 256 and plan.config.max_num_seqs > 4
    assert tried[plan.config.max_num_seqs] > 2 * tried[4]
    ev = evaluate(p, plan.config)
    assert ev.fits and ev.replicas[0].concurrency == plan.config.max_num_seqs


def test_the_plan_file_keeps_what_was_tried(llama8b):
    p = problem(llama8b, gpus="1xl40s", isl=128, osl=128)
    plan = search(p, time_limit=30)
    doc = json.loads(json.dumps(plan_document(p, plan, evaluate(p, plan.config), baselines=[])))
    _, again = read_serving_plan(doc, "plan.json")
    assert again.meta["max_num_seqs_searched"] == plan.meta["max_num_seqs_searched"]


def test_a_fleet_above_eight_gpus_steps_both_ways_from_the_default(llama8b):
    """Above one node of 8 GPUs (the 10 s class) the limit is also tried the way its default plan does not point:
    near-tied deployments at the default can point different ways (search._PROBE_BOTH_WAYS_ABOVE)."""
    p = problem(llama8b, gpus="8xl4;2xl4", isl=512, osl=128)
    tried = search(p, time_limit=30).meta["max_num_seqs_searched"]
    default = p.engine.max_num_seqs
    assert min(tried) < default < max(tried)


def test_llama_cpp_says_the_context_one_slot_serves_and_keeps_a_pinned_one(llama8b):
    from dnnplace.models.serving.exporters import export

    # unpinned: the plan's context is one slot's cells (-c split over -np), which is what the export launches
    p = problem(llama8b, gpus="1xrtx-4090", engine="llama.cpp", precision="q4_k_m", isl=1024, osl=256)
    plan = search(p, time_limit=30)
    ev = evaluate(p, plan.config)
    doc = plan_document(p, plan, ev, baselines=[])
    np_ = plan.config.max_num_seqs
    cmd = export(p, plan, "llama.cpp")
    c = int(cmd.split(" -c ")[1].split()[0])
    assert doc["prediction"]["max_model_len"] == c // np_ >= 1280 and f"-np {np_}" in cmd
    # pinned: every slot holds the pinned context, so the search stops where the slots no longer would
    q = problem(llama8b, gpus="1xrtx-4090", engine="llama.cpp", precision="q4_k_m", isl=1024, osl=256,
                max_model_len=32768)
    plan = search(q, time_limit=30)
    ev = evaluate(q, plan.config)
    assert ev.fits and ev.replicas[0].max_model_len == 32768
    assert ev.replicas[0].kv_tokens // plan.config.max_num_seqs >= 32768
    over = evaluate(q, dataclasses.replace(plan.config, max_num_seqs=plan.config.max_num_seqs * 2))
    assert not over.fits and "--max-model-len 32768" in over.why and "max_num_seqs=" in over.why
