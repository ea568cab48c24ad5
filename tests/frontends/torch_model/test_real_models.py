"""Real model families from Hugging Face ``transformers`` (tiny random configs) through profile, info and solve."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow  # spawns worker processes or profiles real models

pytest.importorskip("torch")
pytest.importorskip("transformers")

ZOO = "examples/hf_transformers.py"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dnnplace", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)


def profile(tmp_path: Path, factory: str, *extra: str) -> dict:
    out = tmp_path / f"{factory}.json"
    proc = cli("profile", f"{ZOO}:{factory}", "--device", "a100", "-k", "4", "--repeats", "1", "-o", str(out),
               *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("factory", ["gpt2_tiny", "bert_tiny"])
@pytest.mark.parametrize("training", [False, True])
def test_op_level_transformer_is_solved_to_proven_optimality(tmp_path, factory, training):
    doc = profile(tmp_path, factory, *(["--training"] if training else []))
    fwd = [n for n in doc["nodes"] if not n["isBackwardNode"]]
    views = [n for n in fwd if n["metadataOnly"]]
    assert views and all(n["fpgaLatency"] == 0.0 for n in views)  # a view launches no kernel
    assert all(n["fpgaLatency"] > 0 for n in fwd if not n["metadataOnly"])
    proc = cli("solve", str(tmp_path / f"{factory}.json"), "--json")
    assert proc.returncode == 0, proc.stderr
    sol = json.loads(proc.stdout)
    assert sol["status"] == "optimal" and sol["gap"] == 0.0 and sol["bound"] == pytest.approx(sol["maxLoad"])
    assert sol["runtime_s"] < 30


def test_keyword_inputs_are_traced(tmp_path):
    # T5's decoder inputs are a keyword argument: the factory returns (model, args, kwargs)
    doc = profile(tmp_path, "t5_tiny")
    modules = {n.get("module", "") for n in doc["nodes"]}
    assert any(m.startswith("decoder") for m in modules) and any(m.startswith("encoder") for m in modules)
    # an encoder-decoder's lattice is wide (the decoder's prologue runs beside the whole encoder): a small
    # ideal budget keeps this test quick and exercises the relaxation's certified answer
    proc = cli("solve", str(tmp_path / "t5_tiny.json"), "--json", "--max-ideals", "3000")
    assert proc.returncode == 0, proc.stderr
    sol = json.loads(proc.stdout)
    assert sol["bound"] <= sol["maxLoad"] and sol["status"] in ("optimal", "bounded")


def test_info_counts_ideals_at_every_reduction(tmp_path):
    profile(tmp_path, "gpt2_tiny")
    proc = cli("info", str(tmp_path / "gpt2_tiny.json"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for step in ("raw graph:", "reference reductions:", "exact reductions:", "solve (dp): exact DP over"):
        assert any(line.startswith(step) for line in lines), (step, proc.stdout)


def test_a_kv_cache_in_the_output_gets_a_one_line_hint(tmp_path):
    proc = cli("profile", f"{ZOO}:gpt2_cached", "--device", "a100", "-o", str(tmp_path / "w.json"))
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "use_cache=False" in err[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "w.json").exists()


def test_llama_constants_and_views_leave_the_workload(tmp_path):
    # the rotary tables, the causal mask and the position ids depend on no input: computed once, not nodes;
    # the per-layer views of the rotary tables are recomputed by their readers: not nodes either
    doc = profile(tmp_path, "llama_tiny")
    meta = doc["dnnplace"]
    fx = {f for n in doc["nodes"] for f in n["fxNodes"]}
    assert {"cos", "sin"} <= set(meta["constants"]) and not fx & set(meta["constants"])
    assert meta["replicatedViews"] and not fx & set(meta["replicatedViews"])
    assert all(n["id"] == i for i, n in enumerate(doc["nodes"]))  # ids stay 0..n-1 (the runtime indexes by id)
    proc = cli("solve", str(tmp_path / "llama_tiny.json"), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "optimal"
