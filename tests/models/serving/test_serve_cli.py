"""``dnnplace serve`` end to end: the plan file, read back by evaluate / export / load_plan, pins kept, and every
bad input one line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_cli

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.exporters import EXPORTERS
from dnnplace.models.serving.spec import FORMAT

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "examples" / "serving" / "llama3.1-8b.json"
M70 = ROOT / "examples" / "llm" / "llama3.1-70b.json"
FLEET = "1xa100-80g+1xl40s"


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("serve") / "plan.json"
    res = run_cli("serve", MODEL, "--gpus", FLEET, "--isl", 512, "--osl", 128, "-o", out)
    assert res.returncode == 0, res.stderr
    assert "replica" in res.stdout and "proof:" in res.stdout and "error band" in res.stdout
    return out


def test_the_plan_file_has_every_field_the_issue_names(plan_file):
    doc = json.loads(plan_file.read_text())
    assert doc["format"] == FORMAT
    pred = doc["prediction"]
    for k in ("output_tokens_per_s", "requests_per_s", "ttft_ms", "tpot_ms", "kv_cache_tokens", "max_concurrency",
              "max_model_len", "fits", "meets_slo", "saturated", "memory_gib"):
        assert k in pred, k
    assert pred["fits"] and pred["output_tokens_per_s"] > 0
    for k in ("status", "bound", "gap", "runtime_s", "error_band", "sources", "runner_ups", "baselines"):
        assert k in doc, k
    assert doc["bound"] >= pred["output_tokens_per_s"] * (1 - 1e-9)
    used = set()
    for r in doc["config"]["replicas"]:
        assert {"tp", "pp", "stages"} <= set(r) and sum(s["layers"] for s in r["stages"]) == 32
        for s in r["stages"]:
            assert {"gpu", "node", "gpus", "layers"} <= set(s)
            for g in s["gpus"]:
                assert (s["node"], g) not in used  # each physical GPU in one stage only
                used.add((s["node"], g))
    assert doc["model"]["config"]["num_hidden_layers"] == 32 and doc["fleet"]["gpus"] == "1xa100+1xl40s"
    assert len(doc["runner_ups"]) <= 5
    seen = [json.dumps(u["config"], sort_keys=True) for u in doc["runner_ups"]]
    assert len(set(seen)) == len(seen) and json.dumps(doc["config"], sort_keys=True) not in seen


def test_evaluate_and_load_plan_read_it_back(plan_file):
    res = run_cli("evaluate", plan_file, "--json")
    assert res.returncode == 0, res.stderr
    again = json.loads(res.stdout)
    doc = json.loads(plan_file.read_text())
    assert again["output_tokens_per_s"] == pytest.approx(doc["prediction"]["output_tokens_per_s"], rel=1e-9)
    from dnnplace.api import load_with_plan

    inst, plan = load_with_plan(plan_file)
    assert plan.config.replicas and dnnplace.evaluate(inst, plan).fits


@pytest.mark.parametrize("to", list(EXPORTERS))
def test_every_engine_export_reads_the_plan(plan_file, to, tmp_path):
    doc = json.loads(plan_file.read_text())
    tp1 = all(r["tp"] == 1 for r in doc["config"]["replicas"])
    out = tmp_path / "x.out"
    res = run_cli("export", plan_file, "--to", to, "-o", out)
    if to in ("llama.cpp", "hf") and not tp1:
        assert res.returncode == 2 and not out.exists()
        return
    # a vLLM plan's many sequences split llama.cpp's cache, or pass its LLAMA_MAX_SEQ
    if to == "llama.cpp" and ("slots" in res.stderr or "at most" in res.stderr):
        assert res.returncode == 2 and not out.exists() and "max_num_seqs=" in res.stderr
        return
    assert res.returncode == 0, res.stderr
    # a plan priced for vLLM exported to another engine says its figures are vLLM's, on stderr (the file is clean)
    assert ("priced for vllm" in res.stderr) == (to != "vllm") and "priced for" not in out.read_text()
    text = out.read_text()
    if to == "vllm":
        for r in doc["config"]["replicas"]:
            part = ",".join(str(s["layers"]) for s in r["stages"])
            assert f"VLLM_PP_LAYER_PARTITION={part}" in text


def test_fix_prices_the_given_deployment_and_keeps_every_pin(tmp_path):
    out = tmp_path / "p.json"
    res = run_cli("serve", M70, "--gpus", "2xa100-80g+2xl40s", "--fix", "tp=1,pp=4,layers=15+15+25+25",
                  "--time-limit", 20, "-o", out)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    for r in doc["config"]["replicas"]:
        assert r["tp"] == 1 and r["pp"] == 4 and [s["layers"] for s in r["stages"]] == [15, 15, 25, 25]
    assert doc["prediction"]["fits"]


@pytest.mark.parametrize("args,culprit", [
    (["--gpus", "2xh1000"], "h1000"),
    (["--gpus", "0xl40s"], "0xl40s"),
    (["--gpus", "-1xl40s"], "-1xl40s"),
    (["--gpus", "1xh100", "--precision", "fp3"], "fp3"),
    (["--gpus", "1xh100", "--kv-dtype", "int2"], "int2"),
    (["--gpus", "1xh100", "--max-model-len", "200000"], "200000"),
    (["--gpus", "1xh100", "--isl", "0"], "--isl"),
    (["--gpus", "1xh100", "--ttft-ms", "1"], "the best reached is TTFT"),
    (["--gpus", "1xh100", "--fix", "tp=1,foo=2"], "foo"),
    (["--gpus", "1xh100", "--fix", "tp=1,tp=2"], "twice"),
    (["--gpus", "1xh100", "--fix", "layers=10+10"], "sums to 20"),
    (["--gpus", "1xh100", "--fix", "pp=2,layers=32"], "pp=2"),
])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, args, culprit):
    out = tmp_path / "p.json"
    res = run_cli("serve", MODEL, *args, "-o", out)
    assert res.returncode == 2, res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and culprit in lines[0], res.stderr
    assert not out.exists()


def test_a_fleet_file_with_a_typo_is_one_line(tmp_path):
    f = tmp_path / "f.toml"
    f.write_text('[[node]]\ngpu = "2xh100"\n')
    res = run_cli("serve", MODEL, "--fleet", f, "-o", tmp_path / "p.json")
    assert res.returncode == 2 and "did you mean 'gpus'" in res.stderr and not (tmp_path / "p.json").exists()


def test_a_model_that_fits_nowhere_names_the_smallest_fleet(tmp_path):
    res = run_cli("serve", M70, "--gpus", "2xl40s", "-o", tmp_path / "p.json")
    assert res.returncode == 2 and not (tmp_path / "p.json").exists()
    assert "needs at least 4 x l40s" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_a_plan_file_with_a_bad_field_is_one_line(plan_file, tmp_path):
    doc = json.loads(plan_file.read_text())
    doc["config"]["replicas"][0]["stages"][0]["layers"] += 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    res = run_cli("export", bad, "--to", "vllm")
    assert res.returncode == 2 and "sum to 33" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    doc = json.loads(plan_file.read_text())
    doc["config"]["replicas"][0]["stages"][0]["gpu"] = "h100"
    bad.write_text(json.dumps(doc))
    res = run_cli("evaluate", bad)
    assert res.returncode == 2 and "no 'h100' GPU" in res.stderr


def test_simulate_needs_a_rate_and_other_models_refuse_one(plan_file):
    res = run_cli("simulate", plan_file)
    assert res.returncode == 2 and "--rate" in res.stderr
    with pytest.raises(DnnplaceError, match="rate"):
        w = dnnplace.load(dnnplace.example_path("toy_a_knapsack"))
        dnnplace.simulate(w, dnnplace.solve(w).plan, rate=1.0)


def test_runner_ups_are_distinct_and_on_distinct_gpus():
    pr = dnnplace.load_serving(M70, gpus="2xa100-80g+2xl40s")
    sol = dnnplace.solve(pr, time_limit=20)
    ups = sol.plan.meta["runner_ups"]
    assert 1 <= len(ups) <= 5 and sol.plan.config not in ups
    for c in [sol.plan.config, *ups]:
        gpus = [(s.node, g) for r in c.replicas for s in r.stages for g in s.gpus]
        assert len(gpus) == len(set(gpus))


def test_a_gain_inside_the_error_band_is_not_called_a_win(plan_file):
    """Baselines are priced by the plan's own model: a gain below its error band is said to be unproven."""
    doc = json.loads(plan_file.read_text())
    assert doc["baselines"]
    for b in doc["baselines"]:
        if b["gain"] is None:
            assert b["beyond_band"] is None
        else:
            assert b["beyond_band"] == (b["gain"] - 1 > doc["error_band"])


def test_simulate_prints_latency_distributions(plan_file):
    res = run_cli("simulate", plan_file, "--rate", 2)
    assert res.returncode == 0, res.stderr
    assert "TTFT ms mean / p50 / p90 / p99" in res.stdout and "TPOT ms" in res.stdout and "1f1b" not in res.stdout
