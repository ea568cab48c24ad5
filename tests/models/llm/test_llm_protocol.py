"""The LLM planner through the one protocol: load_llm, solve, evaluate, simulate, report, export, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_cli
from conftest import ROOT

import dnnplace
from dnnplace.errors import DnnplaceError

CONFIG = ROOT / "examples" / "llm" / "llama3.1-70b.json"
ARGS = ["--gpus", "64", "--seq-len", "8192", "--global-batch", "128"]


def test_solve_evaluate_simulate_on_the_api():
    pr = dnnplace.load_llm(CONFIG, gpus=64, seq_len=8192, global_batch=128)
    sol = dnnplace.solve(pr, tp=4, pp=4, cp=2, vp=5, mbs=1, recompute="none")
    assert sol.method == "llm-search" and sol.value == pytest.approx(sol.plan.estimate.step_time_s)
    ev = dnnplace.evaluate(pr, sol.plan)
    assert ev.fits and ev.step_time_s == pytest.approx(sol.value, rel=1e-12)
    sim = dnnplace.simulate(pr, sol.plan, microbatches=None)
    # equal chunks: the schedule simulated task by task agrees with the closed form within 1 %
    assert sim.step_time_s == pytest.approx(sol.value, rel=0.01)
    with pytest.raises(DnnplaceError, match="schedule applies to"):
        dnnplace.simulate(pr, sol.plan, schedule="gpipe", microbatches=None)
    with pytest.raises(DnnplaceError, match="plans an LLM training problem"):
        dnnplace.solve(dnnplace.load(dnnplace.example_path("gnmt_training")), "llm-search")


def test_the_cli_round_trip(tmp_path: Path):
    plan, report, trace = tmp_path / "plan.json", tmp_path / "plan.html", tmp_path / "trace.json"
    # zero 3 (FSDP), which every exporter below writes (torchtitan has no ZeRO-1/2)
    res = run_cli("plan", CONFIG, *ARGS, "--fix", "tp=4,pp=4,cp=2,vp=5,mbs=1,zero=3", "-o", plan, "--report",
                  report)
    assert res.returncode == 0, res.stderr
    doc = json.loads(plan.read_text())
    assert doc["format"] == "dnnplace.llm-plan" and doc["config"]["dp"] == 2
    assert report.read_text().startswith("<!DOCTYPE html>") and "Pipeline timeline" in report.read_text()
    res = run_cli("simulate", plan, "--json", "--trace", trace)
    assert res.returncode == 0, res.stderr
    sim = json.loads(res.stdout)
    assert sim["microbatches"] == 64 and sim["pp"] == 4 and sim["vp"] == 5
    assert len(json.loads(trace.read_text())["traceEvents"]) == 2 * 4 * 5 * 64
    res = run_cli("evaluate", plan, "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["step_time_s"] == pytest.approx(
        doc["prediction"]["step_time_s"], rel=1e-12)
    # torchtitan names the model it builds: read back without Llama 3.1's RoPE base, the file is another model.
    from dnnplace.models.llm.plan_file import read_llm_plan

    base_kept = read_llm_plan(doc).problem.arch.rope_theta == 500000.0
    for target in ("megatron", "torchtitan"):
        res = run_cli("export", plan, "--to", target)
        if target == "torchtitan" and not base_kept:
            assert res.returncode == 2 and "has no such model" in res.stderr
            continue
        assert res.returncode == 0 and res.stdout, (target, res.stderr)
    res = run_cli("export", plan, "--to", "deepspeed")  # its pipeline engine has no interleaving: refused
    assert res.returncode == 2 and "vp=5" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = run_cli("simulate", plan, "-k", "8")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    res = run_cli("evaluate", dnnplace.example_path("gnmt_training"))
    assert res.returncode == 2 and "name the plan" in res.stderr


@pytest.mark.parametrize("kw,key", [({"gpus": 10**12}, "gpus"), ({"global_batch": 2**40}, "global_batch"),
                                    ({"seq_len": 0}, "seq_len"), ({"gpus_per_node": 2**11}, "gpus_per_node"),
                                    ({"precision": "fp4"}, "precision")])
def test_load_llm_checks_the_input_limits_at_once(kw: dict, key: str) -> None:
    """The limits are the problem's own: load_llm refuses before any search, in one line naming the field."""
    args = {"gpus": 64, "seq_len": 8192, "global_batch": 128, **kw}
    with pytest.raises(DnnplaceError, match=key) as info:
        dnnplace.load_llm(CONFIG, **args)
    assert "\n" not in str(info.value)


def test_load_reads_a_config_json_with_its_cluster_like_load_llm() -> None:
    """dnnplace.load takes an LLM config.json too (the cluster as options); another model's option is refused."""
    pr = dnnplace.load(CONFIG, gpus=64, seq_len=8192, global_batch=128)
    assert pr == dnnplace.load_llm(CONFIG, gpus=64, seq_len=8192, global_batch=128)
    with pytest.raises(DnnplaceError, match="needs seq_len, global_batch"):
        dnnplace.load(CONFIG, gpus=64)
    with pytest.raises(DnnplaceError, match="bert-layers applies to a Piper workload only"):
        dnnplace.load(CONFIG, gpus=64, seq_len=8192, global_batch=128, bert_layers=3)
    with pytest.raises(DnnplaceError, match="gpus applies to an LLM training problem only"):
        dnnplace.load(dnnplace.example_path("gnmt_training"), gpus=8)


def test_solve_plans_a_config_json_as_plan_does(tmp_path: Path) -> None:
    """`solve CONFIG --gpus ...` (generated flags) and its alias `plan CONFIG --fix ...` write the same plan."""
    pins = ["--tp", "4", "--pp", "4", "--cp", "2", "--vp", "5", "--mbs", "1", "--recompute", "none"]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    res = run_cli("solve", CONFIG, *ARGS, *pins, "-o", a)
    assert res.returncode == 0, res.stderr
    assert "error band" in res.stdout
    res = run_cli("plan", CONFIG, *ARGS, "--fix", "tp=4,pp=4,cp=2,vp=5,mbs=1,recompute=none", "-o", b)
    assert res.returncode == 0, res.stderr
    da, db = json.loads(a.read_text()), json.loads(b.read_text())
    assert da["config"] == db["config"] and da["prediction"] == db["prediction"]
    res = run_cli("solve", dnnplace.example_path("gnmt_training"), "--gpus", "8")
    assert res.returncode == 2 and "--gpus applies to an LLM training problem only" in res.stderr
