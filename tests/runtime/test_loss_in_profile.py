"""The loss is in the training profile (issue 22 item 15): the last stage computes it every microbatch."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # spawns worker processes or profiles real models

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402


def test_training_profile_times_the_loss(monkeypatch):
    import dnnplace

    monkeypatch.chdir(ROOT)
    w = dnnplace.profile("examples/mlp_skip.py:build", training=True, device="host", repeats=3)
    meta = w.extras["top_extra"]["dnnplace"]
    fwd_ms, bwd_ms = meta["lossMs"]
    assert fwd_ms > 0 and bwd_ms > 0
    last = max(i for i in range(w.n) if not w.backward[i])  # the last forward group carries it
    assert w.cpu_time[last] >= fwd_ms
    # inference profiles and catalogue devices time no loss
    assert "lossMs" not in dnnplace.profile("examples/mlp_skip.py:build", device="host", repeats=3).extras[
        "top_extra"]["dnnplace"]
    assert "lossMs" not in dnnplace.profile("examples/mlp_skip.py:build", training=True, device="a100").extras[
        "top_extra"]["dnnplace"]
