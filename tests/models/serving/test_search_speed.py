"""The search's speed work changes no answer: batched pricing equals one-at-a-time pricing, entry by entry."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from dnnplace.models.serving.cost import Iteration, layer_times, layer_times_batch
from dnnplace.models.serving.evaluation import iteration
from dnnplace.models.serving.load import problem

ROOT = Path(__file__).resolve().parents[3]
PUBLISHED = ROOT / "src" / "dnnplace" / "models" / "llm" / "published"


def _windowed(tmp: Path) -> Path:
    """gpt-oss-120b's shape (sliding-window layers, MoE) without its MXFP4 weights, which the serving loader
    does not take."""
    d = json.loads((PUBLISHED / "gpt-oss-120b.json").read_text())
    d.pop("quantization_config", None)
    out = tmp / "gpt-oss-bf16.json"
    out.write_text(json.dumps(d))
    return out


@pytest.mark.parametrize("model", ["llama", "moe", "windowed"])
def test_batched_layer_times_equal_one_at_a_time(model, llama70b, tmp_path):
    path = {"llama": llama70b, "moe": PUBLISHED / "deepseek-v3.json", "windowed": None}[model] or _windowed(tmp_path)
    p = problem(path, gpus="8xh100", precision="fp8", isl=1024, osl=256, max_model_len=8192)
    rng = np.random.default_rng(0)
    its = [iteration(p, float(b), 8192) for b in rng.integers(1, 2000, 12)]
    its += [Iteration(0.0, 0.0, 1024.0, 1024), Iteration(4.0, 900.0, 0.0, 1024), Iteration(3.5, 700.0, 513.7, 1024)]
    for gpu, fw, tp, link in (("h100", "vllm", 1, "nvlink"), ("a100", "trtllm", 4, "nvlink"),
                              ("rtx-3060", None, 2, "pcie"), ("l40s", "sglang", 8, "pcie")):
        batch = layer_times_batch(p.model, gpu, tp, its, fw, link, "fp8")
        for it, b in zip(its, batch):
            one = layer_times(p.model, gpu, tp, it, fw, link, "fp8")
            assert np.array_equal(one.per_layer, b.per_layer) and one.head == b.head, (gpu, tp, it)
            assert one.sources == b.sources
    assert layer_times_batch(p.model, "h100", 1, [], "vllm") == []


# -- the per-GPU bound (models/serving/bound.py) ----------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import tests.models.serving.test_search_brute as brute  # noqa: E402
from dnnplace.models.serving.bound import per_gpu_bound  # noqa: E402
from dnnplace.models.serving.evaluation import evaluate  # noqa: E402
from dnnplace.models.serving.search import search  # noqa: E402


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(brute.fleets, st.sampled_from((4096, 8192)), st.integers(2, 5), st.sampled_from(((512, 128), (2048, 256))),
       st.sampled_from(("vllm", "trtllm", "sglang")), st.sampled_from((None, 3, 40)), st.sampled_from(("bf16", "fp8")))
def test_per_gpu_bound_holds_every_deployment_brute_force_finds(fleet, hidden, layers, lengths, engine, conc, kv):
    spec = brute.fleet_spec(fleet, engine)
    isl, osl = lengths
    p = problem(brute._model(hidden, layers), gpus=spec, isl=isl, osl=osl, max_model_len=4096, engine=engine,
                concurrency=conc, kv_dtype=kv)
    brute.KEEP.append(p)
    want = brute.brute_force(p)
    got = per_gpu_bound(p, p.engine.max_num_seqs, p.engine.max_num_batched_tokens, (1, 2, 4, 8))
    assert got >= want * (1 - 1e-9), (spec, engine, got, want)


def test_a_fleet_too_large_for_the_partition_dp_still_reports_bound_and_gap():
    p = problem(brute._model(4096, 4), gpus="8xl4;8xl4;8xa10g;8xa10g;8xt4", isl=512, osl=128, max_model_len=4096)
    brute.KEEP.append(p)
    plan = search(p, time_limit=60)
    value = evaluate(p, plan.config).output_tokens_per_s
    assert plan.meta["complete"] is False and "inside nodes" in plan.meta["note"]
    assert plan.bound is not None and plan.gap is not None and plan.bound >= value > 0
    assert 0 <= plan.gap < 0.5 and math.isclose(plan.gap, (plan.bound - value) / plan.bound)
