"""Every pin is kept in the plan's configuration or refused in one line naming it (issue 45, W7, W8, W15; issue
44), through the same code for --fix, --compare, --calibrate and plan files."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_runner import run_cli
from llm_helpers import EXAMPLES

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.config import pin_fields
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.plan_file import read_llm_plan
from dnnplace.models.llm.published import CONFIGS
from dnnplace.models.llm.solvers.search import search
from dnnplace.models.llm.spec import LLMPlan, ParallelConfig

LLAMA8B = EXAMPLES / "llama3.1-8b.json"
QWEN3 = CONFIGS / "qwen3-30b-a3b.json"
DENSE_PINS = ("ep=2", "etp=2", "dispatcher=flex", "a2a_overlap=true", "recompute_modules=core_attn",
              "routing=power-law-1.2")


@pytest.mark.parametrize("pin", DENSE_PINS)
@pytest.mark.parametrize("flag", ["--fix", "--compare"])
def test_w7_expert_pins_on_a_dense_model_are_refused(flag: str, pin: str) -> None:
    res = run_cli("plan", str(LLAMA8B), "--gpus", "8", "--seq-len", "8192", "--global-batch", "128",
                  flag, f"tp=4,recompute=selective,{pin}")
    assert res.returncode == 2, res.stdout
    line = res.stderr.strip()
    assert "\n" not in line and "Traceback" not in res.stderr
    assert line.startswith(f"error: {flag}: {pin.split('=')[0]}=") and "llama3.1-8b" in line
    assert "dense" in line


@pytest.mark.parametrize("pin", DENSE_PINS)
def test_w7_calibrate_and_plan_files_refuse_the_same_pins(pin: str, tmp_path: Path) -> None:
    m = tmp_path / "measured.json"
    key, value = pin.split("=")
    typed: object = {"true": True}.get(value, int(value) if value.isdigit() else value)
    m.write_text(json.dumps({"runs": [{"config": {"tp": 4, "recompute": "selective", key: typed},
                                       "step_time_s": 9.0}]}))
    res = run_cli("plan", str(LLAMA8B), "--gpus", "8", "--seq-len", "8192", "--global-batch", "128",
                  "--calibrate", str(m))
    assert res.returncode == 2 and "\n" not in res.stderr.strip()
    assert "--calibrate" in res.stderr and f"{key}=" in res.stderr and "dense_no_expert_knobs" in res.stderr
    pr = dnnplace.load_llm(LLAMA8B, gpus=8, seq_len=8192, global_batch=128)
    plan = search(pr, {"tp": 4})
    doc = plan.to_dict()
    doc["config"][key] = typed
    with pytest.raises(DnnplaceError, match="dense_no_expert_knobs"):
        read_llm_plan(doc)


@pytest.mark.parametrize(("modules", "said"), [("core_attn", "is what its recompute=selective runs"),
                                               ("mlp+layernorm", "recomputing layernorm+mlp of a dense layer is not "
                                                                 "priced")])
def test_dense_layer_modules_are_refused_for_what_they_are(modules: str, said: str) -> None:
    """Megatron recomputes core_attn, layernorm and mlp of dense layers too: the refusal says the planner's
    selective recompute is core_attn and the others are not priced, not that the model has no experts."""
    res = run_cli("plan", str(LLAMA8B), "--gpus", "8", "--seq-len", "8192", "--global-batch", "128",
                  "--fix", f"tp=4,recompute=selective,recompute_modules={modules}")
    assert res.returncode == 2
    line = res.stderr.strip()
    assert "\n" not in line and said in line and "no experts" not in line


def test_issue44_recompute_modules_without_selective_names_both() -> None:
    res = run_cli("plan", str(QWEN3), "--gpus", "16", "--seq-len", "4096", "--global-batch", "1024",
                  "--fix", "tp=1,recompute_modules=moe_act+layernorm")
    assert res.returncode == 2
    line = res.stderr.strip()
    assert "\n" not in line and "recompute_modules=moe_act+layernorm" in line and "recompute=selective" in line
    pr = dnnplace.load_llm(QWEN3, gpus=16, seq_len=4096, global_batch=1024)
    with pytest.raises(DnnplaceError, match="recompute_modules=moe_act.* got recompute=full"):
        search(pr, {"recompute": "full", "recompute_modules": "moe_act"})


# ------------------------------------------------------------ every pair of knobs: kept or refused

#: A value of each pinnable knob other than its default (what a hostile user pins).
PIN_VALUES: dict[str, object] = {"tp": 2, "pp": 2, "vp": 2, "cp": 2, "dp": 2, "mbs": 2, "recompute": "selective",
                                 "distributed_optimizer": False, "ep": 2, "etp": 2, "dispatcher": "allgather",
                                 "recompute_modules": "moe_act", "a2a_overlap": True, "zero": 0,
                                 "grad_dtype": "bf16", "offload_layers": 1, "cuda_graphs": "attn",
                                 "routing": "power-law-1.01"}
TINY_MOE = {"model_type": "qwen3_moe", "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 128,
            "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32,
            "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 4096}
TINY_DENSE = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
              "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 4096,
              "max_position_embeddings": 4096}


def test_pin_values_cover_every_pinnable_knob() -> None:
    assert set(PIN_VALUES) == {f.name for f in pin_fields()}


@pytest.fixture(scope="module")
def tiny_problems(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dnnplace.LLMProblem]:
    out = {}
    for name, doc in (("dense", TINY_DENSE), ("moe", TINY_MOE)):
        p = tmp_path_factory.mktemp(name) / "config.json"
        p.write_text(json.dumps(doc))
        out[name] = dnnplace.load_llm(p, gpus=8, seq_len=1024, global_batch=16)
    return out


@pytest.mark.parametrize("model", ["dense", "moe"])
@pytest.mark.parametrize("a,b", list(itertools.combinations(PIN_VALUES, 2)))
def test_every_pin_pair_is_kept_or_refused(model: str, a: str, b: str,
                                           tiny_problems: dict[str, dnnplace.LLMProblem]) -> None:
    pins = {a: PIN_VALUES[a], b: PIN_VALUES[b]}
    try:
        plan = search(tiny_problems[model], pins)
    except DnnplaceError as exc:
        assert "\n" not in str(exc)
        return
    for k, v in pins.items():
        assert getattr(plan.config, k) == v, (k, v, plan.config)


# ------------------------------------------------------------ --compare beside the plan (W8) and JSON knobs (W15)


def test_w8_a_compared_configuration_that_does_not_fit_is_reported_beside_the_plan() -> None:
    res = run_cli("plan", str(EXAMPLES / "llama3.1-70b.json"), "--gpus", "64", "--seq-len", "8192",
                  "--global-batch", "128", "--runner-ups", "0", "--json",
                  "--compare", "tp=1,pp=1,cp=1,recompute=none,zero=0,offload_layers=0")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["prediction"]["fits"] and doc["compared"]["fits"] is False
    assert doc["compared"]["config"]["tp"] == 1 and doc["compared"]["config"]["zero"] == 0


def test_compare_without_pins_is_refused() -> None:
    res = run_cli("plan", str(LLAMA8B), "--gpus", "8", "--seq-len", "8192", "--global-batch", "128",
                  "--compare", "")
    assert res.returncode == 2 and res.stderr.strip().startswith("error: --compare:")


def test_compare_failures_name_compare() -> None:
    res = run_cli("plan", str(LLAMA8B), "--gpus", "8", "--seq-len", "8192", "--global-batch", "128",
                  "--compare", "tp=3,pp=2")
    assert res.returncode == 2 and res.stderr.strip().startswith("error: --compare tp=3,pp=2:")
    res = run_cli("plan", str(LLAMA8B), "--gpus", "8", "--seq-len", "8192", "--global-batch", "128",
                  "--compare", "tp=8,pp=8")  # refused with the pins, before any search
    assert res.returncode == 2 and res.stderr.strip().startswith("error: --compare: tp=8, pp=8:")


def test_w15_runner_ups_and_compared_carry_every_knob_and_repin() -> None:
    res = run_cli("plan", str(QWEN3), "--gpus", "16", "--seq-len", "4096", "--global-batch", "1024", "--json",
                  "--runner-ups", "3", "--compare", "tp=1,pp=1,ep=16,recompute=selective,"
                  "recompute_modules=moe_act,a2a_overlap=true")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    knobs = {f.name for f in pin_fields()}
    pr = dnnplace.load_llm(QWEN3, gpus=16, seq_len=4096, global_batch=1024)
    for entry in [*doc["runner_ups"], doc["compared"]]:
        assert set(entry["config"]) == knobs
        again = search(pr, entry["config"])  # re-pinned exactly
        assert evaluate(pr, again.config).step_time_s == pytest.approx(entry["step_time_s"])
    assert doc["compared"]["config"]["recompute_modules"] == "moe_act" and doc["compared"]["config"]["a2a_overlap"]


def test_plan_file_expert_knob_on_dense_is_one_rule() -> None:
    pr = dnnplace.load_llm(LLAMA8B, gpus=8, seq_len=8192, global_batch=128)
    c = ParallelConfig(1, 1, 1, 1, 8, 1, "none", False, True, (32,))
    est = evaluate(pr, c)
    doc = LLMPlan(pr, replace(c, dispatcher="allgather"), est, "fixed", 1.0, 0.0, False, 0.0).to_dict()
    with pytest.raises(DnnplaceError, match=r"dispatcher.*\(rule dense_no_expert_knobs\)$"):
        read_llm_plan(doc)


@pytest.mark.parametrize("other", [k for k in PIN_VALUES if k not in ("recompute", "recompute_modules")])
def test_every_knob_beside_pinned_recompute_modules_is_kept_or_refused(
        other: str, tiny_problems: dict[str, dnnplace.LLMProblem]) -> None:
    pins = {"recompute": "selective", "recompute_modules": "moe_act", other: PIN_VALUES[other]}
    try:
        plan = search(tiny_problems["moe"], pins)
    except DnnplaceError as exc:
        assert "\n" not in str(exc)
        return
    for k, v in pins.items():
        assert getattr(plan.config, k) == v, (k, v, plan.config)
