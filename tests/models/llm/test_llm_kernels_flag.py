"""``dnnplace plan --kernels measured``: the measured tables price the plan, the plan file says so, a reader
re-prices it the same way, and no catalogue-measured error band is claimed for it."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import run_cli

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "examples" / "llm" / "llama3.1-8b.json"
ARGS = ("--gpus", 8, "--seq-len", 4096, "--global-batch", 32, "--fix", "tp=2,pp=1,cp=1,mbs=1,recompute=none")


def test_measured_kernels_are_kept_in_the_plan_file_and_read_back(tmp_path):
    out = tmp_path / "p.json"
    res = run_cli("plan", MODEL, *ARGS, "--kernels", "measured", "-o", out)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["cluster"]["kernels"] == "measured"
    assert doc["error_band"]["low"] is None and "catalogue pricing" in doc["error_band"]["evidence"]
    assert "no error band with --kernels measured" in res.stdout
    again = run_cli("evaluate", out, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["step_time_s"] == doc["prediction"]["step_time_s"]
    plain = run_cli("plan", MODEL, *ARGS, "--json")
    assert "kernels" not in json.loads(plain.stdout)["cluster"]
    assert json.loads(plain.stdout)["prediction"]["step_time_s"] != doc["prediction"]["step_time_s"]


def test_an_unknown_kernel_source_is_one_line(tmp_path):
    res = run_cli("plan", MODEL, *ARGS, "--kernels", "guess", "-o", tmp_path / "p.json")
    assert res.returncode == 2 and "--kernels" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "p.json").exists()
