"""In-place writes (``out[:, :8] = ...``, ``w /= ...``) become dependencies of the workload, and splits stay right.

torch.export keeps in-place operators; their readers consume the mutated
base, so the traced edges missed the writer -> reader dependency (DeepSeek-V3's
attention did not depend on its rotary keys, no MoE layer's output on its
experts).  ``capture`` functionalizes such graphs; a split that puts the
writes and their readers on different stages computes what the model does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # spawns worker processes or profiles real models

pytest.importorskip("torch")

from cli_runner import run_cli  # noqa: E402

from dnnplace.models.paper.split import Split  # noqa: E402

MODEL = """
import torch
from torch import nn


class Writes(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 8)
        self.c = nn.Linear(16, 8)
        self.d = nn.Linear(16, 16)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        out = h.new_empty(h.shape[0], 16)
        out[:, :8] = self.b(h)  # copy_ into a slice of a fresh tensor
        out[:, 8:] = torch.sigmoid(self.c(h))
        w, _ = torch.topk(h, 8, dim=-1)
        w /= w.sum(-1, keepdim=True) + 4.0  # div_ (as MoE routers normalise their top-k weights)
        return self.d(out)[:, :8] * w


def build():
    return Writes(), (torch.randn(4, 16),)
"""


def _profiled(tmp_path: Path, training: bool) -> tuple[Path, dict]:
    (tmp_path / "writes.py").write_text(MODEL)
    w = tmp_path / "w.json"
    res = run_cli("profile", "writes.py:build", "--device", "a100", "-k", "3", "-o", w,
                  *(["--training"] if training else []), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    return w, json.loads(w.read_text())


def test_every_write_reaches_its_readers(tmp_path):
    import networkx as nx

    _, doc = _profiled(tmp_path, False)
    fwd = [n for n in doc["nodes"] if not n["isBackwardNode"]]
    fx = [f for n in fwd for f in n["fxNodes"]]
    assert not [f for f in fx if f.endswith("_") or "_." in f]  # no in-place operator left (copy_, div_)
    g = nx.DiGraph((e["sourceId"], e["destId"]) for e in doc["edges"])
    g.add_nodes_from(n["id"] for n in fwd)
    by_fx = {n["fxNodes"][0]: n["id"] for n in fwd}
    last = by_fx["mul"]  # d(out) * w: the model's output
    for writer in ("linear_1", "sigmoid", "topk"):  # b(h), sigmoid(c(h)), the weights normalised in place
        assert nx.has_path(g, by_fx[writer], last), writer


@pytest.mark.parametrize("training", [False, True])
def test_a_split_between_writes_and_readers_computes_the_model(tmp_path, monkeypatch, training):
    import dnnplace
    from dnnplace.runtime.launch import run_pipeline, run_training

    path, doc = _profiled(tmp_path, training)
    ids = [n["id"] for n in doc["nodes"] if not n["isBackwardNode"]]
    third = max(1, len(ids) // 3)
    split = Split.of([ids[:third], ids[third:2 * third], ids[2 * third:]])
    w = dnnplace.load_workload(path)
    monkeypatch.chdir(tmp_path)
    if training:
        res = run_training("writes.py:build", split, workload=w, microbatches=2, steps=2, optimizer="sgd", lr=0.05,
                           timeout_s=300)
        assert res["loss_match"] and res["params_match"], res
    else:
        res = run_pipeline("writes.py:build", split, workload=w, microbatches=2, warmup=1, timeout_s=300)
        assert res["outputs_match"], res
