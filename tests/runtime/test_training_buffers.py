"""Buffers that training moves (BatchNorm's running statistics) end as the unsplit model's.

The launcher runs the model and its stages a few times before training (shapes, which values carry
gradients, bytes kept for backward); in training mode each of those runs moved the running statistics,
so the stages and the reference started from different buffers.  The run now restores them and reports
``buffers_match`` next to ``params_match``.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # spawns worker processes or profiles real models

torch = pytest.importorskip("torch")

from dnnplace.models.paper.split import Split  # noqa: E402

BN_NET = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.bn1 = nn.BatchNorm1d(32)
        self.b = nn.Linear(32, 32)
        self.bn2 = nn.BatchNorm1d(32)
        self.c = nn.Linear(32, 4)

    def forward(self, x):
        h = torch.relu(self.bn1(self.a(x)))
        h = torch.relu(self.bn2(self.b(h)))
        return self.c(h)


def build():
    torch.manual_seed(0)
    return Net().train(), (torch.randn(8, 16),)


def build_twice():
    torch.manual_seed(0)
    net = Net().train()
    net.bn2 = net.bn1  # one BatchNorm, called at two depths
    return net, (torch.randn(8, 16),)
"""


def _two_stages(spec: str):
    """(workload, split): two stages of about equal node count, each with one of the two BatchNorm calls."""
    import dnnplace

    w = dnnplace.profile(spec, device="a100", repeats=1, training=True)
    fwd = [int(w.node_ids[i]) for i in range(w.n) if not w.backward[i]]
    bwd = [int(w.node_ids[i]) for i in range(w.n) if w.backward[i]]
    h = len(fwd) // 2
    return w, Split.of([fwd[:h] + bwd[:h], fwd[h:] + bwd[h:]])


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_running_statistics_match_unsplit_training(tmp_path, monkeypatch, schedule):
    from dnnplace.runtime.launch import run_training

    (tmp_path / "bn_net.py").write_text(BN_NET)
    monkeypatch.chdir(tmp_path)
    w, split = _two_stages("bn_net.py:build")
    res = run_training("bn_net.py:build", split, workload=w, schedule=schedule, microbatches=4, steps=2,
                       timeout_s=300)
    assert res["params_match"] and res["loss_match"]
    assert res["buffers_match"], (res["max_buffer_rel_diff"], res["buffers_missing"])
    assert res["max_buffer_rel_diff"] < 1e-5


def test_batchnorm_called_on_two_stages_is_reported_not_hidden(tmp_path, monkeypatch):
    """One BatchNorm used on two stages updates two copies of its statistics: the run says they differ
    (each stage's copy sees only its own calls), while parameters and losses still match."""
    from dnnplace.runtime.launch import run_training

    (tmp_path / "bn_net.py").write_text(BN_NET)
    monkeypatch.chdir(tmp_path)
    w, split = _two_stages("bn_net.py:build_twice")
    res = run_training("bn_net.py:build_twice", split, workload=w, microbatches=4, steps=2, timeout_s=300)
    assert res["params_match"] and res["loss_match"]
    assert not res["buffers_match"]
