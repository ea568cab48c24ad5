"""MoE end to end: load_llm reads the MoE families, the evaluator and the search price them, the plan file and the
Megatron export carry the expert-parallel knobs; the search against brute force on a small space."""

from __future__ import annotations

import importlib
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_cli

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.plan_file import read_llm_plan
from dnnplace.models.llm.published import CONFIGS
from dnnplace.models.llm.solvers import search
from dnnplace.models.llm.spec import LLMPlan, ParallelConfig

FIXTURES = CONFIGS
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
    assert "recompute=selective" in res.stderr and res.stderr.count("\n") == 1  # DeepSpeed: whole layers only


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


def test_a_pinned_deepseek_space_is_searched_to_optimality() -> None:
    pr = dnnplace.load_llm(FIXTURES / "deepseek-v3.json", gpus=1024, seq_len=4096, global_batch=8192)
    pins = {"tp": 1, "pp": 8, "vp": 2, "cp": 1, "mbs": 1, "ep": 64, "etp": 1, "dispatcher": "alltoall",
            "a2a_overlap": False}
    plan = search(pr, pins, time_limit=60)
    assert plan.estimate.fits and plan.status == "optimal" and plan.config.recompute == "selective"


def test_a_space_past_the_base_limit_keeps_a_proven_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_BASES only the bases of the smallest relaxed bounds are expanded: the plan is then either the
    whole space's optimum (status optimal) or comes with a bound no larger than that optimum."""
    moe_mod = importlib.import_module("dnnplace.models.llm.solvers.moe_search")
    pr = dnnplace.load_llm(tiny(tmp_path), gpus=8, seq_len=512, global_batch=16, gpus_per_node=4)
    fixed = {"mbs": 1, "cp": 1, "distributed_optimizer": True}
    whole = search(pr, fixed)
    assert whole.status == "optimal"
    for children in (1, 40, 400):
        monkeypatch.setattr(moe_mod, "MOE_MAX_BASES", 1)
        monkeypatch.setattr(moe_mod, "MOE_CHILDREN", children)
        part = search(pr, fixed)
        assert part.estimate.fits
        assert part.bound <= whole.estimate.step_time_s * (1 + 1e-9)
        assert part.estimate.step_time_s >= whole.estimate.step_time_s * (1 - 1e-9)
        if part.status == "optimal":
            assert part.estimate.step_time_s == pytest.approx(whole.estimate.step_time_s, rel=1e-9)


def test_relaxed_bounds_lie_below_every_expansion(tmp_path: Path) -> None:
    """The relaxation's bound (fastest dispatcher, overlap where allowed, no modules) under the bound of every
    (dispatcher, overlap, recompute modules) child, and the memory bound under every child's peak memory."""
    mod = importlib.import_module("dnnplace.models.llm.solvers.search")
    moe_mod = importlib.import_module("dnnplace.models.llm.solvers.moe_search")
    from dnnplace.models.llm.evaluation.moe_step import moe_memory_lower_bound
    from dnnplace.models.llm.evaluation.step import moe_peak_memory
    from dnnplace.models.llm.moe_knobs import MODULE_SETS

    pr = dnnplace.load_llm(tiny(tmp_path), gpus=8, seq_len=512, global_batch=16, gpus_per_node=4)
    cols = mod.base_columns(pr, {"mbs": 1, "cp": 1})
    n = len(cols["tp"])
    rows = np.arange(n)
    lb_child = mod.lower_bounds(pr, cols, rows)[1]
    bases = {k: v for k, v in cols.items() if k not in ("dispatcher", "a2a_overlap", "recompute_modules")}
    assert (mod.lower_bounds(pr, moe_mod._relaxed(bases), rows)[1] <= lb_child * (1 + 1e-12)).all()
    union = 1
    for name in moe_mod.SEARCHED_MODULE_SETS:
        union |= MODULE_SETS.index(name)
    for k in range(0, n, max(1, n // 40)):
        pp, vp = int(cols["pp"][k]), int(cols["vp"][k])
        split = mod.splits(pr.arch.num_layers, pp, vp).astype(float)
        peak = moe_peak_memory(pr, mod.as_candidates(cols, np.full(len(split), k), split))
        bound = moe_memory_lower_bound(pr, mod.as_candidates(cols, np.array([k]), np.zeros((1, 1))), union)
        assert (bound[0] <= peak * (1 + 1e-12)).all()


@pytest.mark.slow
def test_deepseek_v3_free_search_on_1024_h100() -> None:
    """The free search of DeepSeek-V3 on 1,024 H100s fits and is no slower than the published layout."""
    pr = dnnplace.load_llm(FIXTURES / "deepseek-v3.json", gpus=1024, seq_len=4096, global_batch=8192)
    published = ParallelConfig(1, 8, 2, 1, 128, 1, "selective", False, True, (4,) * 15 + (1,), ep=64,
                               dispatcher="flex", recompute_modules="mla_up_proj+mlp+moe")
    plan = search(pr, {}, time_limit=120)
    assert plan.estimate.fits and plan.bound <= plan.estimate.step_time_s
    assert plan.estimate.step_time_s <= evaluate(pr, published).step_time_s


def test_layer_mix_bound_and_memory_without_the_schedule() -> None:
    """DeepSeek-V3: any n layers cost at least (n - min(n, 3)) sparse + min(n, 3) cheaper ones, all 61 exactly
    3 dense + 58 sparse; the memory the search filters with equals the evaluator's."""
    from dnnplace.models.llm.evaluation.step import Candidates, moe_peak_memory, stage_costs

    pr = dnnplace.load_llm(FIXTURES / "deepseek-v3.json", gpus=1024, seq_len=4096, global_batch=8192)
    cfg = ParallelConfig(1, 8, 2, 1, 128, 1, "selective", False, True, (4,) * 15 + (1,), ep=64,
                         dispatcher="flex", recompute_modules="mla_up_proj+mlp+moe")
    c = Candidates.of([cfg])
    costs = stage_costs(pr, c)
    dense = sum(f + b for f, b in costs.layer.values())[0]
    sparse = sum(f + b for f, b in costs.moe_layer.values())[0]
    assert costs.layers_work(np.array([61.0]))[0] == pytest.approx(3 * dense + 58 * sparse)
    assert costs.layers_work(np.array([2.0]))[0] == pytest.approx(2 * min(dense, sparse))
    assert costs.layers_work(np.array([5.0]))[0] == pytest.approx(2 * sparse + 3 * min(dense, sparse))
    assert moe_peak_memory(pr, c)[0] == pytest.approx(evaluate(pr, cfg).memory_per_gpu_bytes, rel=1e-12)


def test_deepseek_v3_h100_layouts_order_as_measured() -> None:
    """dgxc 25.05 ran DeepSeek-V3 on 1,024 H100s at TP2 PP16 EP64 alltoall, mla_up_proj (52.04 s; NeMo 25.04's
    split 3 / 4 x 14 / 2), 25.08 at TP1 PP8 VP2 EP64 flex, mla_up_proj+mlp+moe (36.189 s): more than 10 % apart,
    so the prediction must order them the same way."""
    pr = dnnplace.load_llm(FIXTURES / "deepseek-v3.json", gpus=1024, seq_len=4096, global_batch=8192)
    old = ParallelConfig(2, 16, 1, 1, 32, 1, "selective", True, True, (3,) + (4,) * 14 + (2,), ep=64,
                         dispatcher="alltoall", recompute_modules="mla_up_proj")
    new = ParallelConfig(1, 8, 2, 1, 128, 1, "selective", False, True, (4,) * 15 + (1,), ep=64,
                         dispatcher="flex", recompute_modules="mla_up_proj+mlp+moe")
    t_old, t_new = evaluate(pr, old), evaluate(pr, new)
    assert t_old.fits and t_new.fits
    assert t_old.step_time_s > 1.10 * t_new.step_time_s


def test_no_fitting_plan_among_the_expanded_bases_is_one_line(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """When none of the expanded bases' configurations fits, the search says the rest were bounded, not
    searched, and asks for pins -- one line, no traceback."""
    mod = importlib.import_module("dnnplace.models.llm.solvers.search")
    moe_mod = importlib.import_module("dnnplace.models.llm.solvers.moe_search")
    pr = dnnplace.load_llm(tiny(tmp_path), gpus=8, seq_len=512, global_batch=16, gpus_per_node=4)
    monkeypatch.setattr(moe_mod, "MOE_MAX_BASES", 1)
    monkeypatch.setattr(moe_mod, "MOE_CHILDREN", 1)
    monkeypatch.setattr(mod, "_moe_fitting", lambda problem, cols, own, layers: np.zeros(len(own), dtype=bool))
    with pytest.raises(DnnplaceError, match="not expanded: pin some knobs") as err:
        search(pr, {"mbs": 1, "cp": 1})
    assert "\n" not in str(err.value)


def test_cli_exports_an_moe_plan_to_torchtitan_and_deepspeed(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    _cli(["plan", str(FIXTURES / "qwen3-30b-a3b.json"), "--gpus", "16", "--seq-len", "4096", "--global-batch",
          "1024", "--fix", "tp=4,pp=1,vp=1,cp=4,mbs=1,recompute=full,ep=16,etp=1,dispatcher=alltoall,"
          "a2a_overlap=false,distributed_optimizer=false", "-o", str(out)], 0)
    text = _cli(["export", str(out), "--to", "torchtitan"], 0).stdout
    for line in ('flavor = "30B-A3B"', "expert_parallel_degree = 16", "expert_tensor_parallel_degree = 1",
                 'expert_parallel_comm_backend = "standard"'):
        assert line in text, line
    # DeepSpeed has no context parallelism but shards with ZeRO: the published layout (EP16 over ZeRO-1)
    _cli(["plan", str(FIXTURES / "qwen3-30b-a3b.json"), "--gpus", "16", "--seq-len", "4096", "--global-batch",
          "1024", "--fix", "tp=1,pp=1,vp=1,cp=1,mbs=1,recompute=none,ep=16,etp=1,dispatcher=alltoall,"
          "a2a_overlap=false,distributed_optimizer=true", "-o", str(out)], 0)
    doc = json.loads(_cli(["export", str(out), "--to", "deepspeed"], 0).stdout)
    assert doc["moe"]["layer_args"]["ep_size"] == 16 and doc["moe"]["layer_args"]["k"] == 8


def test_moe_runner_up_lines_tell_the_configurations_apart() -> None:
    """Runner-ups differ in some knob (each is another configuration with its best split): the printed line
    names every expert knob, the overlap and the recompute modules among them, so no two read the same."""
    from dnnplace.cli.plan_cmd import runner_up_lines
    from dnnplace.models.llm.solvers.search import search_with_runner_ups

    pr = dnnplace.load_llm(FIXTURES / "qwen3-30b-a3b.json", gpus=16, seq_len=4096, global_batch=1024)
    plan, others = search_with_runner_ups(pr, count=6)
    lines = [ln.split(": ")[0] for ln in runner_up_lines(pr, plan.estimate.step_time_s, others)[1:-1]]
    assert len(lines) == len(others) == 6 and len(set(lines)) == len(lines), lines
    assert all("a2a_overlap=" in ln and "recompute_modules=" in ln for ln in lines)
