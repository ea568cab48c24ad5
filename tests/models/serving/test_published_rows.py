"""benchmarks/published_rows.py: a published row in words is read as it was run, and a row it cannot read is
refused with the reason -- never priced as some other model, GPU or load (the benchmark is run, unchanged, on
published rows the project has not seen)."""

from __future__ import annotations

from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def rows(benchmark_module) -> ModuleType:
    return benchmark_module("published_rows")


def _row(**kw: object) -> dict:
    base: dict = {"engine": "vLLM", "engine_version": "0.10", "model": "Llama 3.1 8B", "precision": "BF16",
                  "gpu": "A100 80GB", "num_gpus": 1, "tp": 1, "pp": 1, "isl": 512, "osl": 128,
                  "load": {"type": "request rate", "request_rate": 4, "num_requests": 50},
                  "metric": "Mean TTFT (ms)", "value": 50.0, "unit": "ms", "id": 1}
    base.update(kw)
    return base


@pytest.mark.parametrize(("text", "gpu"), [
    ("H100 80GB HBM3", "h100"), ("H100 SXM 80GB (DGX H100)", "h100"), ("8 x L4", "l4"), ("NVIDIA L40S", "l40s"),
    ("A100-SXM4-40GB", "a100-40g"), ("A100 80GB", "a100"), ("GB200 NVL72", "gb200"), ("B200", "b200"),
    ("RTX PRO 6000 Blackwell Server", "rtx-pro-6000"), ("GeForce RTX 4090", "rtx-4090"), ("H100 NVL", None),
    ("not stated", None)])
def test_gpu_names(rows: ModuleType, text: str, gpu: str | None) -> None:
    assert rows.gpu_of(text) == gpu


@pytest.mark.parametrize(("text", "stem"), [
    ("LLaMA v3.1 70B", "llama3-70b"), ("Llama 3.3 70B", "llama3-70b"), ("meta-llama/Llama-3.1-8B-Instruct",
                                                                        "llama3.1-8b"),
    ("Qwen3-32B", "Qwen--Qwen3-32B_config"), ("Qwen/Qwen3-32B-FP8", "Qwen--Qwen3-32B-FP8_config"),
    ("Qwen3-235B-A22B-FP8", "Qwen--Qwen3-235B-A22B-FP8_config"),
    ("Mixtral-8x7B-AWQ", "mistralai--Mixtral-8x7B-v0.1_config"),
    ("Mixtral 8x7B", "mistralai--Mixtral-8x7B-v0.1_config"), ("openai/gpt-oss-20b", "openai--gpt-oss-20b_config")])
def test_model_names(rows: ModuleType, text: str, stem: str) -> None:
    path = rows.model_of(text)
    assert path is not None and path.stem == stem


@pytest.mark.parametrize("text", ["Llama 2 70B", "Mistral 7B", "Llama 3.2 3B", ""])
def test_a_model_without_a_config_is_not_guessed(rows: ModuleType, text: str) -> None:
    assert rows.model_of(text) is None


def test_a_rate_row_is_read_as_it_ran(rows: ModuleType) -> None:
    r = rows.read_row(_row())
    assert not isinstance(r, str)
    assert (r.engine, r.gpu, r.load, r.load_value, r.requests, r.quantity, r.stat, r.scale) == (
        "vllm", "a100", "rate", 4.0, 50, "ttft_ms", "mean", 1.0)


def test_units_and_statistics(rows: ModuleType) -> None:
    assert rows.quantity_of("Median TPOT (ms)", "ms") == ("tpot_ms", "p50", 1.0)
    assert rows.quantity_of("Mean TTFT", "s") == ("ttft_ms", "mean", 1e3)
    assert rows.quantity_of("P99 ITL (ms)", "ms") == ("itl_ms", "p99", 1.0)
    r = rows.read_row(_row(tp=2, num_gpus=2, metric="Output throughput per GPU", unit="tokens/s/GPU",
                           load={"type": "offline, infinite request rate", "num_requests": 100}))
    assert not isinstance(r, str) and (r.quantity, r.scale, r.load) == ("output_tokens_per_s", 2.0, "offline")


@pytest.mark.parametrize(("kw", "why"), [
    ({"engine": "TGI"}, "engine"), ({"gpu": "not stated"}, "GPU"), ({"model": "Mistral 7B"}, "config.json"),
    ({"isl": None}, "ISL/OSL"), ({"num_gpus": 8}, "data-parallel"),
    ({"pp": "not printed"}, "PP"), ({"tp": 0}, "TP"), ({"isl": -5}, "ISL/OSL"), ({"value": 0}, "value"),
    ({"value": None}, "value"), ({"measured": False}, "not a measurement"),
    ({"load": {"type": "request rate", "request_rate": "fast"}}, "load"),
    ({"load": {"type": "max concurrency", "concurrency": -3}}, "load"),
    ({"load": {"type": "offline", "num_requests": "many"}}, "load"), ({"load": {"type": "batch"}}, "load"),
    ({"metric": "E2E time", "unit": "s"}, "metric")])
def test_an_unreadable_row_says_why(rows: ModuleType, kw: dict, why: str) -> None:
    r = rows.read_row(_row(**kw))
    assert isinstance(r, str) and why in r


def test_a_row_that_is_not_an_object_says_so(rows: ModuleType) -> None:
    assert "not a JSON object" in rows.read_row(["a", "list"])


def test_a_rate_row_is_priced_by_the_simulator(rows: ModuleType) -> None:
    r = rows.read_row(_row(isl=256, osl=32, load={"type": "request rate", "request_rate": 2, "num_requests": 20}))
    assert not isinstance(r, str)
    ttft = rows.price(r, time_limit=30.0)
    assert 0.0 < ttft < 1e4
