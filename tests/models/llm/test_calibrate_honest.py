"""--calibrate scales what it says it scales and refuses a step faster than the peak allows (issue 45, W9, W16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_cli
from llm_helpers import EXAMPLES

import dnnplace
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.solvers.calibrate import largest_scale, scaled_problem
from dnnplace.models.llm.spec import ParallelConfig


def test_w9_every_compute_efficiency_is_scaled() -> None:
    pr = dnnplace.load_llm(EXAMPLES / "llama3.1-8b.json", gpus=8, seq_len=8192, global_batch=128, precision="fp8")
    dev = pr.device
    assert dev.gemm_fractions and dev.attention is not None  # the figures the cost model reads on an H100
    half = scaled_problem(pr, 0.5).device
    for fmt in ("bf16", "fp8"):
        assert half.gemm_fraction_for(fmt) == pytest.approx(0.5 * dev.gemm_fraction_for(fmt))
    for key, row in dev.attention.rates.items():
        assert {n: 0.5 * r for n, r in row.items()} == pytest.approx(half.attention.rates[key])
    # a compute-bound step (pp 1, tp 1: no communication but DP's) takes about twice as long
    c = ParallelConfig(1, 1, 1, 1, 8, 1, "none", False, True, (32,), zero=1)
    before = evaluate(pr, c).time_breakdown["compute"]
    after = evaluate(scaled_problem(pr, 0.5), c).time_breakdown["compute"]
    assert after > 1.8 * before
    # the cap keeps every scaled efficiency at or below its peak
    top = scaled_problem(pr, largest_scale(pr)).device
    assert max(top.gemm_fraction_for(f) for f in ("bf16", "fp8")) <= 1.0 + 1e-12
    assert max(r for row in top.attention.rates.values() for r in row.values()) <= top.peak("bf16") * (1 + 1e-12)


@pytest.mark.parametrize("step", [1e-300, 0.5])
def test_w16_a_step_faster_than_the_peak_is_refused(step: float, tmp_path: Path) -> None:
    f = tmp_path / "measured.json"
    f.write_text(json.dumps({"runs": [{"config": {"tp": 8, "pp": 4, "cp": 1, "vp": 5, "mbs": 1,
                                                  "recompute": "none", "zero": 1}, "step_time_s": step}]}))
    res = run_cli("plan", str(EXAMPLES / "llama3.1-70b.json"), "--gpus", "64", "--seq-len", "8192",
                  "--global-batch", "128", "--calibrate", str(f))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    line = res.stderr.strip()
    assert "\n" not in line and line.startswith("error: --calibrate: runs[0].step_time_s") and "peak" in line
