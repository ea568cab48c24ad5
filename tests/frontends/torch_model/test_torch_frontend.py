"""PyTorch front end and runtime: profile -> solve -> run on real models (CPU, gloo)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT

import dnnplace

pytestmark = pytest.mark.slow  # spawns worker processes or profiles real models

torch = pytest.importorskip("torch")  # the [torch] extra; `make test` installs it

EXAMPLES = ["residual_cnn", "transformer_encoder", "mlp_skip"]
LINK = ["--link-latency-ms", "0.5", "--link-bandwidth", "7.5e8"]  # measured once by the benchmark


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "dnnplace", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(proc.stderr[-2000:])
    return proc


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = {}
    d = tmp_path_factory.mktemp("profiles")
    for ex in EXAMPLES:
        w = d / f"{ex}.json"
        cli("profile", f"examples/{ex}.py:build", "-o", str(w), "--repeats", "3", *LINK)
        out[ex] = w
    return out


@pytest.mark.parametrize("example", EXAMPLES)
def test_profile_solve_run(example, profiled, tmp_path):
    w = dnnplace.load_workload(profiled[example])
    meta = w.extras["top_extra"]["dnnplace"]
    assert meta["timeUnit"] == "ms" and meta["trace"] == "export"
    assert (w.cpu_time > 0).any() and w.comm_cost.max() > 0
    split = tmp_path / "split.json"
    cli("solve", str(profiled[example]), "-o", str(split), "-q")
    res = json.loads(cli("run", f"examples/{example}.py:build", str(split), "-w", str(profiled[example]),
                         "-n", "4", "--json").stdout)
    assert res["outputs_match"] is True
    assert res["measured_time_per_sample"] > 0 and res["predicted_max_load"] > 0
    assert len(res["stages"]) == len(json.loads(split.read_text())["fpgas"])


def test_stage_dag_with_a_skip_across_a_stage(profiled, tmp_path):
    # mlp_skip: h0 (node 1) feeds add_1 (node 9) on the third stage, skipping the second
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"fpgas": [{"nodes": [0, 1, 2]}, {"nodes": [3, 4, 5, 6]},
                                           {"nodes": [7, 8, 9, 10, 11]}], "cpus": []}))
    res = json.loads(cli("run", "examples/mlp_skip.py:build", str(split), "-w", str(profiled["mlp_skip"]),
                         "-n", "3", "--json").stdout)
    assert res["outputs_match"] is True and len(res["stages"]) == 3


def test_run_without_workload_uses_operator_ids(tmp_path):
    from dnnplace.frontends.torch_model.capture import capture
    from dnnplace.frontends.torch_model.loader import load_factory
    from dnnplace.runtime.launch import run_pipeline

    model, inputs = load_factory("examples/mlp_skip.py:build")
    n = len(capture(model, inputs).groups)
    split = dnnplace.Split.of([list(range(n // 2)), list(range(n // 2, n))])
    res = run_pipeline("examples/mlp_skip.py:build", split, microbatches=2)
    assert res["outputs_match"] and res["predicted_max_load"] is None


def test_training_profile_colocates_backward_nodes(tmp_path):
    w_path = tmp_path / "train.json"
    cli("profile", "examples/mlp_skip.py:build", "-o", str(w_path), "--training", "--repeats", "2", *LINK)
    w = dnnplace.load_workload(w_path)
    assert w.is_training and int(w.backward.sum()) == int((~w.backward).sum())
    fwd_classes = set(w.color[~w.backward].tolist())
    assert set(w.color[w.backward].tolist()) == fwd_classes  # every backward node shares its forward's class
    assert (w.cpu_time[w.backward] > 0).sum() >= 5  # linear layers have real backward work
    sol = dnnplace.solve(w, "dp")
    assert sol.evaluation.feasible  # colocation holds
    for c in fwd_classes:
        devices = {int(d) for d in sol.evaluation.assignment.device[w.color == c]}
        assert len(devices) == 1


def test_catalogue_device_estimates_and_override(tmp_path):
    devices = tmp_path / "dev.json"
    devices.write_text(json.dumps({"slowgpu": {"peak_flops": 1e12, "mem_bw": 1e11, "memory": 8e9, "link_bw": 1e9}}))
    a100 = tmp_path / "a100.json"
    slow = tmp_path / "slow.json"
    cli("profile", "examples/mlp_skip.py:build", "-o", str(a100), "--device", "a100", "--repeats", "2")
    cli("profile", "examples/mlp_skip.py:build", "-o", str(slow), "--device", "slowgpu", "--devices-file",
        str(devices), "--repeats", "2")
    wa, ws = dnnplace.load_workload(a100), dnnplace.load_workload(slow)
    assert wa.acc_time.sum() < ws.acc_time.sum()
    assert np.all(wa.acc_time > 0) and wa.memory == 80e9 and ws.memory == 8e9
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"x": {"peak_flops": -1}}))
    proc = cli("profile", "examples/mlp_skip.py:build", "-o", str(tmp_path / "o.json"), "--device", "x",
               "--devices-file", str(bad), check=False)
    assert proc.returncode == 2 and "peak_flops" in proc.stderr


def test_export_formats(profiled, tmp_path):
    split = tmp_path / "split.json"
    cli("solve", str(profiled["residual_cnn"]), "-o", str(split), "-q")
    stages = json.loads(cli("export", str(split), "-w", str(profiled["residual_cnn"]), "--to", "stages").stdout)
    assert len(stages["stages"]) >= 1 and all(s["fxNodes"] for s in stages["stages"])
    pp = json.loads(cli("export", str(split), "-w", str(profiled["residual_cnn"]), "--to",
                        "torch-pipelining", "--json").stdout)
    assert pp["num_stages"] == len(stages["stages"])
    assert all(v == "BEGINNING" for v in pp["split_spec"].values())


BAD_MODEL = """
import torch
class Weird(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:   # data-dependent control flow defeats both tracers
            return x * 2
        return x - 1
def build():
    return Weird(), (torch.randn(4),)
"""


def _one_line_error(proc, needle):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert needle in lines[0], lines[0]


def test_bad_inputs_give_one_line_errors(profiled, tmp_path):
    _one_line_error(cli("profile", "examples/nope.py:build", "-o", str(tmp_path / "o.json"), check=False),
                    "no such file")
    _one_line_error(cli("profile", "examples/mlp_skip.py:nothing", "-o", str(tmp_path / "o.json"), check=False),
                    "has no function 'nothing'")
    _one_line_error(cli("profile", "examples/mlp_skip.py", "-o", str(tmp_path / "o.json"), check=False),
                    "MODULE:FACTORY")
    bad = tmp_path / "weird.py"
    bad.write_text(BAD_MODEL)
    _one_line_error(cli("profile", f"{bad}:build", "-o", str(tmp_path / "o.json"), check=False),
                    "cannot trace the model")
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"fpgas": [{"nodes": [0, 1, 999]}]}))
    _one_line_error(cli("run", "examples/mlp_skip.py:build", str(split), "-w", str(profiled["mlp_skip"]),
                        check=False), "999")
    split.write_text(json.dumps({"fpgas": [{"nodes": [0, 1]}]}))
    _one_line_error(cli("run", "examples/mlp_skip.py:build", str(split), check=False), "not placed")
