"""Expert parallelism in the serving decision space (issue 43, item 2: "EP for MoE within a stage"): priced by
the measured MoE tables at (moe_tp 1, ep tp), searched beside the engines' default expert sharding, pinned or
refused, written by every exporter that takes it and read back from plan files."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from cli_runner import run_cli

from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.published import CONFIGS
from dnnplace.models.serving.cost import Iteration, engine_kernels, layer_times
from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.exporters import export
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.method import check_expert_parallel
from dnnplace.models.serving.plan_file import plan_document, read_serving_plan
from dnnplace.models.serving.search import expert_parallel_applies, search
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, Stage, with_expert_parallel

QWEN3_MOE = CONFIGS / "qwen3-30b-a3b.json"
LLAMA8B = CONFIGS.parent.parent.parent.parent.parent / "examples" / "serving" / "llama3.1-8b.json"


def _tp8(ep: bool) -> ServingConfig:
    return ServingConfig((Replica((Stage("h100", 0, tuple(range(8)), 48),)),), 256, 8192, ep)


def test_an_moe_layer_is_priced_with_its_experts_whole_over_the_group():
    """The routed experts' time is the measured table's at moe_tp 1 and ep = TP; the rest of the layer as
    before (attention, the all-reduce: each GPU still sums the experts' outputs over the group)."""
    p = problem(QWEN3_MOE, gpus="8xh100", isl=1024, osl=256)
    it = Iteration(64.0, 1500.0, 0.0, 1024)
    off = layer_times(p.model, "h100", 8, it, "vllm")
    on = layer_times(with_expert_parallel(p, True).model, "h100", 8, it, "vllm")
    kc = engine_kernels("h100", "vllm")
    m = p.model
    sharded = kc.moe(np.array([64.0]), m.hidden, m.expert_ffn, m.top_k, m.experts, 8, 1, m.weight_dtype)
    whole = kc.moe(np.array([64.0]), m.hidden, m.expert_ffn, m.top_k, m.experts, 1, 8, m.weight_dtype)
    moe = np.asarray(m.moe, dtype=bool)
    assert np.allclose(on.per_layer[moe] - off.per_layer[moe], whole.seconds[0] - sharded.seconds[0])
    assert on.head == off.head


def test_search_tries_both_and_keeps_the_better_with_a_bound_over_both():
    p = problem(QWEN3_MOE, gpus="8xh100", isl=1024, osl=256)
    assert expert_parallel_applies(p)
    plan = search(p, tp=8, time_limit=20)
    tried = plan.meta["expert_parallel_searched"]
    assert set(tried) == {"off", "on"} and min(tried.values()) > 0
    value = evaluate(p, plan.config, at_load=False).capacity_tokens_per_s
    assert value == pytest.approx(max(tried.values()), rel=1e-6)
    assert plan.config.expert_parallel == (tried["on"] > tried["off"])
    assert plan.bound is not None and plan.bound >= max(tried.values()) * (1 - 1e-9)
    for ep in (False, True):  # a pin is kept, and only that setting is searched
        pinned = search(p, tp=8, time_limit=20, expert_parallel=ep)
        assert pinned.config.expert_parallel is ep and "expert_parallel_searched" not in pinned.meta
        got = evaluate(p, pinned.config, at_load=False).capacity_tokens_per_s
        assert got == pytest.approx(tried["on" if ep else "off"], rel=1e-6)


def test_no_choice_where_there_are_no_experts_or_no_tp_group():
    assert not expert_parallel_applies(problem(QWEN3_MOE, gpus="1xh100+1xa100", isl=1024, osl=256))
    assert not expert_parallel_applies(problem(QWEN3_MOE, gpus="2xrtx-4090", engine="llama.cpp",
                                               precision="q4_k_m", isl=512, osl=128))


def test_pins_that_mean_nothing_or_cannot_run_are_refused(tmp_path):
    dense = problem(LLAMA8B, gpus="8xh100")
    with pytest.raises(DnnplaceError, match="no routed experts"):
        check_expert_parallel(dense, True, None)
    cpp = problem(QWEN3_MOE, gpus="2xrtx-4090", engine="llama.cpp", precision="q4_k_m", isl=512, osl=128)
    with pytest.raises(DnnplaceError, match="whole layers"):
        check_expert_parallel(cpp, True, None)
    odd = json.loads(QWEN3_MOE.read_text())
    odd["num_experts"], odd["num_experts_per_tok"] = 6, 2  # 6 experts over a TP group of 4
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(odd))
    with pytest.raises(DnnplaceError, match="does not divide .* 6 routed experts"):
        check_expert_parallel(problem(cfg, gpus="4xh100"), True, 4)
    res = run_cli("serve", str(LLAMA8B), "--gpus", "2xh100", "--fix", "tp=2,ep=on")
    assert res.returncode == 2 and "no routed experts" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = run_cli("serve", str(LLAMA8B), "--gpus", "2xh100", "--fix", "ep=maybe")
    assert res.returncode == 2 and "on or off" in res.stderr


def test_every_engine_that_takes_it_is_told(tmp_path):
    p = problem(QWEN3_MOE, gpus="8xh100", isl=1024, osl=256)
    plan = ServingPlan(_tp8(True))
    vllm = export(p, plan, "vllm")
    assert "--enable-expert-parallel" in vllm and vllm.split("--port")[0].count("--enable-expert-parallel") == 1
    assert "--ep-size 8" in export(p, plan, "sglang")
    opts = json.loads(export(p, plan, "trtllm"))[0]["llm_api_options"]
    assert (opts["moe_expert_parallel_size"], opts["moe_tensor_parallel_size"]) == (8, 1)
    off = ServingPlan(_tp8(False))
    assert "expert-parallel" not in export(p, off, "vllm") and "--ep-size" not in export(p, off, "sglang")
    assert "moe_expert_parallel_size" not in json.loads(export(p, off, "trtllm"))[0]["llm_api_options"]


def test_plan_files_carry_it_and_old_files_read_as_priced_then():
    p = problem(QWEN3_MOE, gpus="8xh100", isl=1024, osl=256)
    plan = ServingPlan(_tp8(True))
    doc = json.loads(json.dumps(plan_document(p, plan, evaluate(p, plan.config))))
    assert doc["config"]["expert_parallel"] is True
    q, back = read_serving_plan(doc, "plan.json")
    assert back.config.expert_parallel is True
    assert evaluate(q, back.config).output_tokens_per_s == pytest.approx(
        evaluate(p, plan.config).output_tokens_per_s)
    old = dict(doc, config={k: v for k, v in doc["config"].items() if k != "expert_parallel"})
    assert read_serving_plan(old, "old.json")[1].config.expert_parallel is False
    dense = problem(LLAMA8B, gpus="8xh100")
    dplan = ServingPlan(dataclasses.replace(_tp8(False), replicas=(Replica((Stage("h100", 0, tuple(range(8)), 32),)),)))
    ddoc = json.loads(json.dumps(plan_document(dense, dplan, evaluate(dense, dplan.config))))
    ddoc["config"]["expert_parallel"] = True
    with pytest.raises(DnnplaceError, match="no routed experts"):
        read_serving_plan(ddoc, "dense.json")
