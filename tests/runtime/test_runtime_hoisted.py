"""Constants and replicated views (left out of the workload by `profile`) run correctly when the model is split.

A constant (computed from ``arange`` alone) is evaluated once and handed to the
stages that read it as a buffer; a view read on two stages is recomputed on
both from its base.  Forward outputs and training (losses, parameters) must
equal the unsplit model's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # spawns worker processes or profiles real models

pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402

from dnnplace.models.paper.split import Split  # noqa: E402

MODEL = """
import torch
from torch import nn


class Hoist(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(8, 8)
        self.c = nn.Linear(12, 8)

    def forward(self, x):
        table = torch.cos(torch.arange(16, dtype=x.dtype)) * 0.5 + 1.0  # a constant: no input, no parameter
        h = torch.tanh(self.a(x * table))
        v = h.view(4, 4, 8)  # a view read by two later operators
        p = torch.tanh(v).sum(-1)
        q = self.b(v.mean(1))
        return self.c(torch.cat([p, q], -1))


def build():
    return Hoist(), (torch.randn(4, 16),)
"""


def _cli(*args: str, cwd: Path) -> str:
    env_path = str(ROOT / "src")
    proc = subprocess.run([sys.executable, "-m", "dnnplace", *args], capture_output=True, text=True, cwd=cwd,
                          env={**__import__("os").environ, "PYTHONPATH": env_path}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _profiled(tmp_path: Path, training: bool) -> tuple[Path, dict]:
    (tmp_path / "hoist.py").write_text(MODEL)
    w = tmp_path / "w.json"
    _cli("profile", "hoist.py:build", "--device", "a100", "-k", "3", "--repeats", "1", "-o", str(w),
         *(["--training"] if training else []), cwd=tmp_path)
    return w, json.loads(w.read_text())


def _split_between_view_readers(doc: dict) -> Split:
    """Three stages: up to the view's base | the tanh reading the view | the rest (mean reads the view too)."""
    fwd = [n for n in doc["nodes"] if not n["isBackwardNode"]]
    first_tanh = next(n["id"] for n in fwd if n["fxNodes"][0] == "tanh_1")
    ids = [n["id"] for n in fwd]
    cut1, cut2 = ids.index(first_tanh), ids.index(first_tanh) + 2
    return Split.of([ids[:cut1], ids[cut1:cut2], ids[cut2:]])


@pytest.mark.parametrize("training", [False, True])
def test_constants_and_views_are_left_out_of_the_workload_and_rebuilt_by_the_runtime(tmp_path, monkeypatch,
                                                                                    training):
    import dnnplace
    from dnnplace.runtime.launch import run_pipeline, run_training

    path, doc = _profiled(tmp_path, training)
    meta = doc["dnnplace"]
    names = {f for n in doc["nodes"] for f in n.get("fxNodes", [])}
    assert {"arange", "cos"} <= set(meta["constants"]) and not names & set(meta["constants"])
    assert "view" in meta["replicatedViews"] and "view" not in names
    # the view's readers read its base directly
    by_fx = {n["fxNodes"][0]: n["id"] for n in doc["nodes"] if not n["isBackwardNode"]}
    edges = {(e["sourceId"], e["destId"]) for e in doc["edges"]}
    assert (by_fx["tanh"], by_fx["tanh_1"]) in edges and (by_fx["tanh"], by_fx["mean"]) in edges
    split = _split_between_view_readers(doc)
    w = dnnplace.load_workload(path)
    monkeypatch.chdir(tmp_path)
    if training:
        res = run_training("hoist.py:build", split, workload=w, microbatches=4, steps=2, optimizer="sgd", lr=0.05,
                           timeout_s=300)
        assert res["loss_match"] and res["params_match"], res
    else:
        res = run_pipeline("hoist.py:build", split, workload=w, microbatches=4, warmup=1, timeout_s=300)
        assert res["outputs_match"], res
    assert len(res["stages"]) == 3


def test_a_view_read_on_two_stages_is_recomputed_on_both(tmp_path):
    from dnnplace.frontends.torch_model.capture import capture
    from dnnplace.frontends.torch_model.loader import load_factory
    from dnnplace.runtime.stages import build_stages

    path, doc = _profiled(tmp_path, False)
    (tmp_path / "hoist.py").write_text(MODEL)
    loaded = load_factory(str(tmp_path / "hoist.py:build"))
    ids = [n["fxNodes"] for n in doc["nodes"]]
    plan = build_stages(capture(loaded.model, loaded.args, quiet=True), _split_between_view_readers(doc), ids)
    views = [[n.name for n in m.graph.nodes if n.name == "view"] for m in plan.modules]
    assert views[1] == ["view"] and views[2] == ["view"]  # recomputed where read, never sent
    assert "view" not in plan.producer and "tanh" in plan.consumers
    consts = [[n.target for n in m.graph.nodes if n.op == "get_attr" and "constant" in str(n.target)]
              for m in plan.modules]
    assert any(consts[0]) and not any(consts[1]) and not any(consts[2])
