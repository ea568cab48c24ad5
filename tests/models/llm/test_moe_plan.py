"""MoE end to end: load_llm reads the MoE families, the evaluator and the search price them, the plan file and the
Megatron export carry the expert-parallel knobs; the search against brute force on a small space."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from cli_runner import run_cli

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.plan_file import read_llm_plan
from dnnplace.models.llm.solvers import search
from dnnplace.models.llm.spec import LLMPlan, ParallelConfig

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TINY = {"model_type": "qwen3_moe", "hidden_size": 512, "intermediate_size": 1024, "moe_intermediate_size": 256,
        "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64,
        "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 4096, "mlp_only_layers": [0]}


def _cli(args: list[str], code: int):  # noqa: ANN202
    res = run_cli(*args)
    assert res.returncode == code, (res.returncode, res.stderr)
    return res


def tiny(tmp_path: Path, **change: object) -> Path:
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**TINY, **change}))
    return p


def test_qwen3_published_layout_priced_and_round_tripped(tmp_path: Path) -> None:
    pr = dnnplace.load_llm(FIXTURES / "qwen3-30b-a3b.json", gpus=16, seq_len=4096, global_batch=1024)
    assert pr.moe is not None and pr.moe.moe.num_experts == 128
    cfg = ParallelConfig(1, 1, 1, 1, 16, 1, "none", False, True, (48,), ep=16, dispatcher="flex")
    est = evaluate(pr, cfg)
    assert est.fits and est.time_breakdown["ep_comm_exposed"] > 0
    # the flex dispatcher crosses the NICs less than alltoall does
    assert evaluate(pr, ParallelConfig(1, 1, 1, 1, 16, 1, "none", False, True, (48,), ep=16)).step_time_s \
        > est.step_time_s
    plan = LLMPlan(pr, cfg, est, "fixed", est.step_time_s, 0.0, False, 0.0)
    doc = plan.to_dict()
    assert doc["moe"]["num_experts"] == 128 and doc["config"]["ep"] == 16 and doc["config"]["dispatcher"] == "flex"
    back = read_llm_plan(json.loads(json.dumps(doc)))
    assert back.problem.moe == pr.moe and back.config == cfg
    assert evaluate(back.problem, back.config).step_time_s == est.step_time_s


def test_megatron_export_carries_the_expert_knobs(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    _cli(["plan", str(FIXTURES / "qwen3-30b-a3b.json"), "--gpus", "16", "--seq-len", "4096", "--global-batch",
             "1024", "--fix", "tp=1,pp=1,vp=1,cp=1,mbs=1,recompute=selective,recompute_modules=moe_act+layernorm,"
             "ep=16,etp=1,dispatcher=flex,a2a_overlap=false,distributed_optimizer=true", "-o", str(out)], 0)
    text = _cli(["export", str(out), "--to", "megatron"], 0).stdout
    for flag in ("--num-experts 128", "--expert-model-parallel-size 16", "--expert-tensor-parallel-size 1",
                 "--moe-token-dispatcher-type flex", "--moe-grouped-gemm", "--recompute-granularity selective",
                 "--recompute-modules moe_act layernorm"):
        assert flag in text, flag
    assert "--recompute-activations" not in text
    res = _cli(["export", str(out), "--to", "deepspeed"], 2)
    assert "mixture of experts" in res.stderr and res.stderr.count("\n") == 1


def test_hostile_moe_configs_exit_2_in_one_line(tmp_path: Path) -> None:
    base = ["--gpus", "8", "--seq-len", "512", "--global-batch", "16"]
    res = _cli(["plan", str(tiny(tmp_path, num_experts_per_tok=9)), *base], 2)
    assert "num_experts_per_tok" in res.stderr and res.stderr.count("\n") == 1
    res = _cli(["plan", str(tiny(tmp_path)), *base, "--fix", "ep=3"], 2)
    assert "rule" in res.stderr and res.stderr.count("\n") == 1
    res = _cli(["plan", str(tiny(tmp_path, num_experts=None)), *base], 2)
    assert "num_experts" in res.stderr and res.stderr.count("\n") == 1
    res = _cli(["plan", str(tiny(tmp_path, linear_num_value_heads=8)), *base], 2)
    assert "linear_num_value_heads" in res.stderr and res.stderr.count("\n") == 1


def test_search_equals_brute_force_on_a_small_moe_space(tmp_path: Path) -> None:
    pr = dnnplace.load_llm(tiny(tmp_path), gpus=8, seq_len=512, global_batch=16, gpus_per_node=4)
    fixed = {"recompute": "none", "mbs": 1, "vp": 1, "cp": 1, "distributed_optimizer": True}
    plan = search(pr, fixed)
    best = float("inf")
    for tp, pp, ep, etp, disp, a2a in itertools.product((1, 2, 4, 8), (1, 2), (1, 2, 4, 8), (1, 2, 4), (
            "alltoall", "allgather", "flex"), (False, True)):
        dp = 8 // (tp * pp) if 8 % (tp * pp) == 0 else 0
        if not dp:
            continue
        for split in ([(4,)] if pp == 1 else [(f, 4 - f) for f in range(1, 4)]):
            cfg = ParallelConfig(tp, pp, 1, 1, dp, 1, "none", tp > 1, True, split, ep=ep, etp=etp, dispatcher=disp,
                                 a2a_overlap=a2a)
            try:
                est = evaluate(pr, cfg)
            except DnnplaceError:
                continue
            if est.fits:
                best = min(best, est.step_time_s)
    assert plan.estimate.step_time_s == pytest.approx(best, rel=1e-9)
    assert plan.status == "optimal"


def test_deepseek_export_places_the_mtp_layer_on_the_last_stage() -> None:
    from dnnplace.models.llm.exporters.megatron import render

    pr = dnnplace.load_llm(FIXTURES / "deepseek-v3.json", gpus=1024, seq_len=4096, global_batch=8192)
    cfg = ParallelConfig(1, 8, 2, 1, 128, 1, "selective", False, True, (4,) * 15 + (1,), ep=64,
                         recompute_modules="mla_up_proj+mlp+moe")
    est = evaluate(pr, cfg)
    text = render(LLMPlan(pr, cfg, est, "fixed", est.step_time_s, 0.0, False, 0.0))
    assert "Etttt|" + "tttt|" * 14 + "tmL" in text  # Megatron-Bridge's DeepSeek-V3 layout for pp 8 x vp 2
    assert "--mtp-num-layers 1" in text and "--multi-latent-attention" in text
    assert "--recompute-modules mla_up_proj mlp moe" in text


def test_a_too_large_moe_space_is_refused_in_one_line_and_a_pinned_one_searched() -> None:
    pr = dnnplace.load_llm(FIXTURES / "deepseek-v3.json", gpus=1024, seq_len=4096, global_batch=8192)
    with pytest.raises(DnnplaceError, match=r"pin some knobs") as err:
        search(pr, {})
    assert "\n" not in str(err.value)
    pins = {"tp": 1, "pp": 8, "vp": 2, "cp": 1, "mbs": 1, "ep": 64, "etp": 1, "dispatcher": "alltoall",
            "a2a_overlap": False}
    plan = search(pr, pins, time_limit=60)
    assert plan.estimate.fits and plan.status == "optimal" and plan.config.recompute == "selective"
