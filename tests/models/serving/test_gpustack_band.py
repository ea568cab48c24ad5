"""vLLM on an MXFP4 mixture of experts before Blackwell carries the band GPUStack's published GPT-OSS runs show,
recomputed here from the rows ``benchmarks/serving_gpustack.py`` prices (so the catalogue's figure cannot drift)."""

from __future__ import annotations

import json

import pytest

from dnnplace.models.serving.bands import band_note
from dnnplace.models.serving.catalogue import VLLM_MXFP4_BAND
from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage


@pytest.fixture(scope="module")
def gpt_oss_config(benchmark_module):
    bench = benchmark_module("serving_gpustack")
    configs = bench._config_dir()
    if configs is None:
        pytest.skip("aiconfigurator-core (its model configs) is not installed")
    return bench, configs


def test_the_band_is_the_largest_miss_of_the_published_gpt_oss_runs(gpt_oss_config):
    bench, configs = gpt_oss_config
    rows = [r for r in json.loads(bench.ROWS.read_text())["rows"] if "gpt-oss" in r["model"]]
    misses = []
    for r in rows:
        priced = bench.price(r, configs)
        if "total" in priced:
            misses.append(abs(r["total_token_throughput"] / priced["total"] - 1.0))
    assert len(misses) >= 10
    assert round(max(misses), 2) == VLLM_MXFP4_BAND


@pytest.mark.parametrize("gpu, wide", [("h100", True), ("b200", False)])
def test_a_vllm_gpt_oss_plan_says_it_before_blackwell_only(gpt_oss_config, gpu, wide):
    _, configs = gpt_oss_config
    p = problem(configs / "openai--gpt-oss-20b_config.json", gpus=f"1x{gpu}", isl=1024, osl=256)
    ev = evaluate(p, ServingConfig((Replica((Stage(gpu, 0, (0,), p.model.num_layers),)),), 256, 8192))
    assert ev.fits
    assert (ev.error_band == pytest.approx(VLLM_MXFP4_BAND)) == wide
    assert ("MXFP4" in band_note(p)) == wide
