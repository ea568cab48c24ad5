"""Weights, KV caches and start-up verdicts the engines logged for published runs, predicted with the engine's
rules of the run's time (tests/data/serving/engine_logs.json; benchmarks/serving_memory.py prints the table).

Why a test as well as a benchmark: a plan's "fits" and its KV cache are claims a user acts on; a change to the
memory rules that moves any of these logged runs out of 15 % -- or turns a refused start into "fits" -- is a
regression, whatever its other merits."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "serving_memory", Path(__file__).resolve().parents[3] / "benchmarks" / "serving_memory.py")
assert _SPEC is not None and _SPEC.loader is not None
serving_memory = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(serving_memory)

#: the logged run the memory rules do not yet explain (said in benchmarks/results/serving_memory.md)
KNOWN_MISS = {"vllm#21348 Qwen3-235B-A22B-FP8 (vLLM)"}
ROWS = serving_memory.rows()


@pytest.mark.parametrize("row", [r for r in ROWS if r["quantity"] != "starts" and r["id"] not in KNOWN_MISS],
                         ids=lambda r: r["id"])
def test_a_logged_size_is_predicted_within_15_percent(row):
    assert abs(serving_memory.predict(row) / row["value"] - 1) <= serving_memory.TARGET


@pytest.mark.parametrize("row", [r for r in ROWS if r["quantity"] == "starts"], ids=lambda r: r["id"])
def test_a_logged_start_up_verdict_is_the_engines(row):
    assert bool(serving_memory.predict(row)) is bool(row["value"])


@pytest.mark.xfail(strict=True, reason="vLLM V1 on an MoE model at TP 4 reserves more than the sampler's pass and the "
                   "routed experts' intermediates priced here (NCCL buffers, its MoE profile): +36 % KV tokens")
@pytest.mark.parametrize("row", [r for r in ROWS if r["id"] in KNOWN_MISS], ids=lambda r: r["id"])
def test_the_known_miss_stays_said(row):
    assert abs(serving_memory.predict(row) / row["value"] - 1) <= serving_memory.TARGET
