"""The error band: recomputed from the held-in rows, and when it cannot order two predictions."""

from __future__ import annotations

import dataclasses

import pytest
from llm_helpers import llama

from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.evaluation.band import (
    CHECKED,
    HELD_IN,
    MOE_PUBLISHED,
    PUBLISHED,
    ErrorBand,
    band_for,
    held_in_band,
    kind_of,
)
from dnnplace.models.llm.published import config_path


def test_held_in_architectures_are_the_example_configs() -> None:
    for size, arch in (("8b", HELD_IN[0].arch), ("70b", HELD_IN[-1].arch)):
        assert dataclasses.replace(llama(size), source="") == arch


def test_band_is_the_range_of_the_held_in_errors() -> None:
    band = held_in_band()
    errors = [evaluate(r.problem(), r.config()).step_time_s / r.measured_s - 1 for r in HELD_IN]
    assert band.rows == len(HELD_IN) == 11
    assert (band.low, band.high) == (min(errors), max(errors))


def test_measured_range_hand_computed() -> None:
    band = ErrorBand(-0.2, -0.1, 3)
    lo, hi = band.measured_range(9.0)
    assert lo == pytest.approx(10.0) and hi == pytest.approx(11.25)


def test_indistinguishable_threshold() -> None:
    # ratio threshold (1 + high) / (1 + low) = 0.9 / 0.8 = 1.125
    band = ErrorBand(-0.2, -0.1, 3)
    assert band.indistinguishable(10.0, 11.2)
    assert band.indistinguishable(11.2, 10.0)
    assert not band.indistinguishable(10.0, 11.3)
    assert not ErrorBand(-0.1, -0.1, 1).indistinguishable(10.0, 10.01)  # a pure bias orders nothing wrong


def test_band_covers_only_its_evidence() -> None:
    assert ErrorBand.covers("bf16", "h100")
    assert not ErrorBand.covers("fp8", "h100")
    assert not ErrorBand.covers("bf16", "b200")
    assert "11 published BF16 H100 runs" in held_in_band().text()


def test_plan_prints_the_band_and_the_comparison() -> None:
    from cli_runner import run_cli
    from llm_helpers import EXAMPLES

    base = ["plan", EXAMPLES / "llama3.1-8b.json", "--gpus", "8", "--seq-len", "8192", "--global-batch", "128"]
    r = run_cli(*base, "--compare", "tp=1,pp=1,cp=2,mbs=1,recompute=none")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "a measured step of" in text and "compared configuration:" in text
    r = run_cli(*base, "--precision", "fp8")
    assert r.returncode == 0 and "published FP8 H100 runs, not built on" in " ".join(r.stdout.split())
    r = run_cli(*base, "--device", "a100")
    assert r.returncode == 0 and "no measured error band for bf16 on a100" in " ".join(r.stdout.split())


def test_a_mixture_of_experts_plan_gets_the_moe_rows_band() -> None:
    """No held-in row exercises dispatch or grouped GEMMs: an MoE plan gets the band of the published MoE runs,
    recomputed from the cost model on each (none fitted), and says how wide it is."""

    from cli_runner import run_cli

    assert not ErrorBand.covers("bf16", "h100", moe=True)
    errors = [r.error() for r in MOE_PUBLISHED]
    band = band_for("bf16", "h100", moe=True)
    assert band is not None and band is band_for("fp8", "gb200", moe=True)
    assert (band.low, band.high, band.rows) == (min(errors), max(errors), len(MOE_PUBLISHED))
    assert band_for("bf16", "a100", moe=True) is None
    config = config_path("qwen3-30b-a3b")
    r = run_cli("plan", config, "--gpus", "16", "--seq-len", "4096", "--global-batch", "1024",
                "--fix", "tp=1,pp=1,vp=1,cp=1,mbs=1,ep=16,etp=1,dispatcher=flex")
    text = " ".join(r.stdout.split())
    assert r.returncode == 0, r.stderr
    assert "published mixture-of-experts runs" in text and "a measured step of" in text


def test_each_kind_has_its_own_rows_band() -> None:
    """FP8 Hopper and Blackwell runs get the band of the published runs of their kind (none fitted)."""
    assert kind_of("fp8", "h100") == kind_of("fp8-cs", "h200") == "fp8-hopper"
    assert kind_of("bf16", "gb200") == kind_of("mxfp8", "b200") == "blackwell"
    assert kind_of("bf16", "a100") is None and kind_of("bf16", "h100", moe=True) == "moe"
    assert band_for("bf16", "a100") is None
    for kind, prec, dev in (("fp8-hopper", "fp8", "h100"), ("blackwell", "bf16", "gb200")):
        rows = [r for r in CHECKED if kind_of(r.precision, r.problem().device.name) == kind]
        errors = [evaluate(r.problem(), r.config()).step_time_s / r.measured_s - 1 for r in rows]
        band = band_for(prec, dev)
        assert band is not None and band.rows == len(rows) >= 2
        assert (band.low, band.high) == (min(errors), max(errors)) and "not built on" in band.text()
    assert len(PUBLISHED) == len(HELD_IN) + len(CHECKED)


def test_plan_json_carries_band_runner_ups_and_reads_back(tmp_path) -> None:
    """The plan document says what its prediction is worth; `evaluate` reads it back (the claims dropped)."""
    import json

    from cli_runner import run_cli
    from llm_helpers import EXAMPLES

    out = tmp_path / "plan.json"
    r = run_cli("plan", EXAMPLES / "llama3.1-8b.json", "--gpus", "8", "--seq-len", "8192", "--global-batch", "128",
                "--json", "-o", out, "--runner-ups", "2", "--compare", "tp=2,pp=1,cp=1,mbs=1")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    band, t = doc["error_band"], doc["prediction"]["step_time_s"]
    assert band["kind"] == "bf16-hopper" and band["rows"] == 11
    assert band["measured_low_s"] == pytest.approx(t / (1 + band["high"]))
    assert band["measured_high_s"] == pytest.approx(t / (1 + band["low"]))
    assert len(doc["runner_ups"]) == 2 and all(u["step_time_s"] >= t and u["fits"] for u in doc["runner_ups"])
    assert doc["compared"]["config"]["tp"] == 2 and isinstance(doc["compared"]["within_band"], bool)
    assert json.loads(out.read_text()) == doc
    r = run_cli("evaluate", out)
    assert r.returncode == 0, r.stderr
    doc["runner_ups"] = {"not": "a list"}
    out.write_text(json.dumps(doc))
    r = run_cli("evaluate", out)
    assert r.returncode == 2 and "runner_ups: expected a JSON array" in r.stderr and "Traceback" not in r.stderr


def test_moe_plan_json_carries_the_moe_band_and_runner_ups() -> None:
    import json

    from cli_runner import run_cli

    config = config_path("qwen3-30b-a3b")
    r = run_cli("plan", config, "--gpus", "16", "--seq-len", "4096", "--global-batch", "1024", "--json",
                "--runner-ups", "0", "--fix", "tp=1,pp=1,vp=1,cp=1,mbs=1,ep=16,etp=1,dispatcher=flex")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    band, t = doc["error_band"], doc["prediction"]["step_time_s"]
    assert band["kind"] == "moe" and band["rows"] == len(MOE_PUBLISHED)
    assert band["low"] <= band["high"] and band["measured_high_s"] == pytest.approx(t / (1 + band["low"]))
