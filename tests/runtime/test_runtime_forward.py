"""Forward `run`: no sink rank (the last stage collects outputs, also ones made on earlier stages); without
a workload the split's own maxLoad is the prediction."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # spawns worker processes or profiles real models

pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402

from dnnplace.models.paper.split import Split  # noqa: E402

TWO_OUTPUTS = """
import torch
from torch import nn


class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 8)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        return h, self.b(h)


def build():
    return Two(), (torch.randn(4, 16),)
"""


def test_output_made_on_an_earlier_stage_reaches_the_last(tmp_path, monkeypatch):
    from dnnplace.runtime.launch import run_pipeline

    (tmp_path / "two.py").write_text(TWO_OUTPUTS)
    monkeypatch.chdir(tmp_path)
    # groups: linear a, tanh | linear b; tanh's output h is a model output made on stage 0
    res = run_pipeline("two.py:build", Split.of([[0, 1], [2]]), microbatches=4, warmup=1, timeout_s=300)
    assert res["outputs_match"] and len(res["stages"]) == 2
    assert res["predicted_max_load"] is None


def test_run_without_workload_predicts_the_splits_max_load(tmp_path):
    (tmp_path / "two.py").write_text(TWO_OUTPUTS)
    (tmp_path / "split.json").write_text(json.dumps({"maxLoad": 2.5, "fpgas": [{"nodes": [0, 1]}, {"nodes": [2]}]}))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    res = subprocess.run([sys.executable, "-m", "dnnplace", "run", "two.py:build", "split.json", "-n", "4", "--json"],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["outputs_match"] and doc["predicted_max_load"] == 2.5 and doc["prediction_source"] == "split"
