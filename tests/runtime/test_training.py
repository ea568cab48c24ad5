"""`dnnplace run --training`: pipelined training of a split equals single-process training of the unsplit model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # spawns worker processes or profiles real models

torch = pytest.importorskip("torch")


from conftest import ROOT  # noqa: E402

from dnnplace.models.paper.split import Split  # noqa: E402


def _ranges(*bounds: int) -> Split:
    """Contiguous runs of op-level groups: bounds (0, a, b, n) -> [0, a), [a, b), [b, n)."""
    return Split.of([list(range(a, b)) for a, b in zip(bounds, bounds[1:])])


# example, split (op-level group ids as traced), schedule
CASES = [
    # h0 (group 1) feeds a stage-1 add and a stage-2 add: one value, two later stages
    ("mlp_skip", (0, 2, 7, 12), "1f1b"),
    ("mlp_skip", (0, 5, 12), "gpipe"),
    ("transformer_encoder", (0, 36, 73), "1f1b"),
    ("transformer_encoder", (0, 28, 51, 73), "gpipe"),
    # relu_2 (group 9) feeds layer2's conv (stage 1) and its projection shortcut (stage 2)
    ("residual_cnn", (0, 10, 15, 30), "1f1b"),
    ("residual_cnn", (0, 13, 30), "gpipe"),
]


@pytest.mark.parametrize(("example", "bounds", "schedule"), CASES, ids=[f"{e}-{len(b) - 1}st-{s}" for e, b, s in CASES])
def test_training_matches_unsplit(example, bounds, schedule, monkeypatch):
    from dnnplace.runtime.launch import run_training

    monkeypatch.chdir(ROOT)
    res = run_training(f"examples/{example}.py:build", _ranges(*bounds), schedule=schedule, microbatches=4,
                       steps=2, optimizer="sgd", lr=0.05, timeout_s=300)
    assert len(res["stages"]) == len(bounds) - 1
    assert res["loss_match"], (res["losses"], res["reference_losses"])
    assert res["params_match"], res["max_param_rel_diff"]
    assert res["max_param_rel_diff"] <= 1e-5
    assert len(res["losses"]) == 2
    assert all(s["measured_peak_activation_bytes"] > 0 for s in res["stages"])


def test_value_feeding_two_later_stages_gets_summed_gradient():
    from dnnplace.frontends.torch_model.capture import capture
    from dnnplace.frontends.torch_model.loader import load_factory
    from dnnplace.runtime.stages import build_stages

    loaded = load_factory(str(ROOT / "examples/mlp_skip.py:build"))
    plan = build_stages(capture(loaded.model, loaded.args, quiet=True), _ranges(0, 2, 7, 12))
    assert any(len(cs) >= 2 and plan.producer[v] == 0 for v, cs in plan.consumers.items())


def test_adam_and_custom_loss(tmp_path, monkeypatch):
    """A factory's 4th element is the loss; Adam steps match too."""
    from dnnplace.runtime.launch import run_training

    (tmp_path / "m.py").write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "def build():\n"
        "    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))\n"
        "    return model, (torch.randn(8, 16),), {}, lambda out: (out - 1.0).abs().mean()\n")
    monkeypatch.chdir(tmp_path)
    res = run_training("m.py:build", _ranges(0, 2, 5), schedule="1f1b", microbatches=3, steps=3,
                       optimizer="adam", lr=1e-3, timeout_s=300)
    assert res["loss_match"] and res["params_match"], res
    assert res["losses"][0] > 0.5  # the custom loss, not the default mean square


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@pytest.mark.skipif(shutil.which("torchrun") is None and not (Path(sys.executable).parent / "torchrun").exists(),
                    reason="torchrun is not installed")
def test_training_under_torchrun(tmp_path):
    """The same runtime runs as ranks of torchrun (env:// rendezvous); rank 0 prints the result."""
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"fpgas": [{"nodes": list(range(0, 2))}, {"nodes": list(range(2, 7))},
                                           {"nodes": list(range(7, 12))}], "cpus": []}))
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [str(torchrun) if torchrun.exists() else "torchrun", "--standalone", "--nproc-per-node", "3",
           "-m", "dnnplace", "run", "examples/mlp_skip.py:build", str(split),
           "--training", "-n", "4", "--steps", "2", "--json"]
    res = run_group(cmd, 300, cwd=ROOT, env=_env())
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    assert doc["params_match"] and doc["loss_match"]
    assert len(doc["stages"]) == 3


def run_group(cmd: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    """Run in a new session; on timeout kill the whole process group (torchrun's ranks too)."""
    import signal

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"timed out after {timeout} s: {err[-2000:]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
