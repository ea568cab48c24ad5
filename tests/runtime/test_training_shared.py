"""Parameters held by several stages (tied embedding / head, a module called on two stages) train exactly:
their gradients are summed across the holding stages before each step, so every copy equals the unsplit model's."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # spawns worker processes or profiles real models

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from shared_models import TWICE  # noqa: E402

from dnnplace.models.paper.split import Split  # noqa: E402

TIED_LM = str(ROOT / "examples/tied_lm.py:build")



def _ranges(*bounds: int) -> Split:
    return Split.of([list(range(a, b)) for a, b in zip(bounds, bounds[1:])])


def _plan(spec: str, split: Split):
    from dnnplace.frontends.torch_model.capture import capture
    from dnnplace.frontends.torch_model.loader import load_factory
    from dnnplace.runtime.stages import build_stages

    loaded = load_factory(spec)
    return build_stages(capture(loaded.model, loaded.args, quiet=True), split)


def test_shared_parameters_found_by_tensor():
    from dnnplace.runtime.train import shared_parameters

    # tied_lm op-level groups: 0 embedding (the tied weight), 1-10 two blocks, 11 final norm, 12 head (the tied weight)
    plan = _plan(TIED_LM, _ranges(0, 6, 13))
    assert shared_parameters(plan.modules) == [((0, 1), [{0: "head.weight", 1: "head.weight"}])]
    assert shared_parameters(_plan(TIED_LM, _ranges(0, 13)).modules) == []  # one stage: nothing to sum


@pytest.mark.parametrize(("schedule", "optimizer"), [("1f1b", "sgd"), ("gpipe", "adam")])
def test_tied_lm_trains_exactly(schedule, optimizer):
    """Embedding on stage 0, head on stage 1: one weight, two holders."""
    from dnnplace.runtime.launch import run_training

    res = run_training(TIED_LM, _ranges(0, 6, 13), schedule=schedule, microbatches=4, steps=2,
                       optimizer=optimizer, lr=0.05 if optimizer == "sgd" else 0.01, timeout_s=300)
    assert res["shared_parameters"] == [{"name": "head.weight", "stages": [0, 1]}]
    assert res["loss_match"], (res["losses"], res["reference_losses"])
    assert res["params_match"] and res["max_param_rel_diff"] < 1e-5, (res["max_param_rel_diff"], res["params_missing"])


def test_module_called_on_two_stages_and_overlapping_holders(tmp_path, monkeypatch):
    """Three stages: the block is held by stages 0 and 1, the tied weight by stages 0 and 2 (two groups, stage 1
    outside one of them); Adam under 1F1B."""
    from dnnplace.runtime.launch import run_training
    from dnnplace.runtime.train import shared_parameters

    (tmp_path / "twice.py").write_text(TWICE)
    monkeypatch.chdir(tmp_path)
    split = _ranges(0, 2, 6, 8)
    groups = shared_parameters(_plan("twice.py:build", split).modules)
    assert [ranks for ranks, _ in groups] == [(0, 1), (0, 2)]
    res = run_training("twice.py:build", split, schedule="1f1b", microbatches=4, steps=2, optimizer="adam",
                       lr=0.05, timeout_s=300)
    assert sorted((s["name"], tuple(s["stages"])) for s in res["shared_parameters"]) == [
        ("block.bias", (0, 1)), ("block.weight", (0, 1)), ("head.weight", (0, 2))]
    assert res["loss_match"], (res["losses"], res["reference_losses"])
    assert res["params_match"] and res["max_param_rel_diff"] < 1e-5, (res["max_param_rel_diff"], res["params_missing"])


def test_forward_run_of_tied_model():
    from dnnplace.runtime.launch import run_pipeline

    res = run_pipeline(TIED_LM, _ranges(0, 6, 13), microbatches=4, warmup=1, timeout_s=300)
    assert res["outputs_match"] and len(res["stages"]) == 2
