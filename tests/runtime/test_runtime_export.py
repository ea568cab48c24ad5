"""`export --to torch-pipelining` writes a torchrun script that trains the split with Schedule1F1B;
its losses equal `dnnplace run --training` on the same split."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow  # spawns worker processes or profiles real models

pytest.importorskip("torch")

LINK = ["--link-latency-ms", "0.5", "--link-bandwidth", "7.5e8"]
TORCHRUN = Path(sys.executable).parent / "torchrun"


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _run(*cmd: str) -> subprocess.CompletedProcess:
    from test_training import run_group

    res = run_group(list(cmd), 400, cwd=ROOT, env=_env())
    assert res.returncode == 0, res.stderr[-3000:]
    return res


@pytest.fixture(scope="module")
def mlp_workload(tmp_path_factory):
    w = tmp_path_factory.mktemp("export") / "mlp.json"
    _run(sys.executable, "-m", "dnnplace", "profile", "examples/mlp_skip.py:build", "-o", str(w), "--repeats", "1",
         *LINK)
    return w


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed next to this Python")
def test_exported_script_trains_like_dnnplace_run(mlp_workload, tmp_path):
    split = tmp_path / "split.json"
    # stage 1 starts at module fc2; the skip value h0 and h1 both flow from stage 0 to stage 1: a chain
    split.write_text(json.dumps({"fpgas": [{"nodes": [0, 1, 2, 3, 4]}, {"nodes": [5, 6, 7, 8, 9, 10, 11]}]}))
    script = tmp_path / "train_pp.py"
    _run(sys.executable, "-m", "dnnplace", "export", str(split), "-w", str(mlp_workload), "--to",
         "torch-pipelining", "-o", str(script))
    text = script.read_text()
    assert "Schedule1F1B" in text and "'fc2'" in text
    pp = _run(str(TORCHRUN), "--standalone", "--nproc-per-node", "2", str(script), "--schedule", "1f1b",
              "--microbatches", "4", "--steps", "2", "--json")
    pp_losses = json.loads(pp.stdout.strip().splitlines()[-1])["losses"]
    ours = json.loads(_run(sys.executable, "-m", "dnnplace", "run", "examples/mlp_skip.py:build", str(split), "-w",
                           str(mlp_workload), "--training", "--schedule", "1f1b", "-n", "4", "--steps", "2",
                           "--json").stdout)
    assert ours["params_match"] and ours["loss_match"]
    assert len(pp_losses) == len(ours["losses"]) == 2
    for a, b in zip(pp_losses, ours["losses"]):
        assert abs(a - b) <= 1e-5 * abs(b)


def test_export_refuses_a_split_that_skips_a_stage(mlp_workload, tmp_path):
    split = tmp_path / "split.json"
    # h0 (node 1) on stage 0 feeds the add of node 9 on stage 2
    split.write_text(json.dumps({"fpgas": [{"nodes": [0, 1]}, {"nodes": [2, 3, 4, 5, 6]},
                                           {"nodes": [7, 8, 9, 10, 11]}]}))
    res = subprocess.run([sys.executable, "-m", "dnnplace", "export", str(split), "-w", str(mlp_workload), "--to",
                          "torch-pipelining"], capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=120)
    assert res.returncode == 2 and "chain" in res.stderr and len(res.stderr.strip().splitlines()) == 1
