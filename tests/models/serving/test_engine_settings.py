"""The engines' own settings the serving model follows: trtllm-bench's batch limits, an FP8 cache read as
FP8 by attention, TensorRT-LLM reserving a request's whole length, and the kernel tables' holes."""

from __future__ import annotations

import pytest

from dnnplace.kernels import kernel_costs
from dnnplace.models.serving.catalogue import ENGINES, trtllm_bench_limits
from dnnplace.models.serving.cost import Iteration, layer_times
from dnnplace.models.serving.evaluation import steady_batch
from dnnplace.models.serving.load import problem


def test_trtllm_bench_limits_follow_its_heuristic():
    # 8B FP8 with an FP8 cache on one 80 GiB GPU at 128/2048: ~489 requests fit -> rounded up to 512;
    # tokens 512 * (1 + 128/2048) = 544 -> the 2048 floor (tensorrt_llm/bench/build/tuning.py)
    bs, tok = trtllm_bench_limits(8.03e9, "fp8", "fp8", 32, 8, 128, 79.65, 1, 1, 128, 2048)
    assert (bs, tok) == (512, 2048)
    # a BF16 cache holds half the requests
    bs16, _ = trtllm_bench_limits(8.03e9, "fp8", "bf16", 32, 8, 128, 79.65, 1, 1, 128, 2048)
    assert bs16 == 256
    # the batch is capped at 4096 over PP, and without chunked prefill the tokens hold one whole prompt
    bs, tok = trtllm_bench_limits(1e9, "fp8", "fp8", 16, 8, 64, 79.65, 1, 2, 20000, 10)
    assert bs <= 2048 and tok >= 20000 + bs


def test_an_fp8_cache_makes_decode_attention_read_half_the_bytes(llama70b):
    p16 = problem(llama70b, gpus="2xh100", precision="fp8", engine="trtllm", isl=1000, osl=1000)
    it = Iteration(64.0, 1500.0, 0.0, 1000)
    a = layer_times(p16.model, "h100", 2, it, "trtllm", kv_dtype="bf16")
    b = layer_times(p16.model, "h100", 2, it, "trtllm", kv_dtype="fp8")
    assert b.per_layer[0] < a.per_layer[0]


def test_trtllm_reserves_the_whole_request_and_vllm_the_mean(llama70b):
    t = problem(llama70b, gpus="2xh100", precision="fp8", engine="trtllm", isl=1000, osl=1000)
    v = problem(llama70b, gpus="2xh100", precision="fp8", engine="vllm", isl=1000, osl=1000)
    assert ENGINES["trtllm"].capacity_policy == "reserve"
    kv = 200_000.0
    assert steady_batch(t, kv, 10_000) == kv // 2016  # ceil(2000 / 32) blocks of 32
    assert steady_batch(v, kv, 10_000) == kv // 1536  # 1000 + 500 in blocks of 64


def test_a_hole_in_a_table_is_not_answered_by_the_smaller_neighbour():
    # decode attention at batch 479 x 1152 cached tokens lies between measured batch 256 and a hole at 512:
    # it must not be priced faster than the GPU's memory can stream the cache
    kc = kernel_costs("h100", "trtllm")
    d = kc.decode_attention([479], [1152], [32], [8], 128, "fp8", 0)
    bytes_read = 479 * 1152 * 2 * 8 * 128 * 1.0
    assert bytes_read / float(d.seconds[0]) <= kc.spec.hbm_bandwidth * 1.001
    assert d.sources() == ["extrapolated"]


@pytest.mark.parametrize("engine", ["trtllm"])
def test_graphs_captured_after_the_cache_do_not_shrink_it(llama70b, engine):
    from dnnplace.models.serving.memory import stage_memory

    p = problem(llama70b, gpus="2xh100", precision="fp8", engine=engine, isl=128, osl=128)
    m = stage_memory(p, "h100", 2, 0, 80, True, True, 512, 8192)
    assert m.kv_free == pytest.approx(m.budget - m.weights - m.activations)


def test_a_layer_pays_its_norms_and_activation_at_hbm_speed(llama70b):
    from dnnplace.kernels import kernel_costs as kcs

    p = problem(llama70b, gpus="2xh100", precision="fp8", engine="trtllm", isl=1000, osl=1000)
    m = p.model
    it = Iteration(512.0, 1500.0, 0.0, 1000)
    t = layer_times(m, "h100", 2, it, "trtllm", kv_dtype="fp8").per_layer[0]
    spec = kcs("h100", "trtllm").spec
    floor = 512 * (16 * m.hidden + 6 * m.ffn / 2) / (spec.hbm_bandwidth * spec.hbm_fraction)
    assert t > floor > 0


def test_sglang_prices_a_mixed_replica_at_the_one_fraction_it_exports(llama8b):
    """SGLang sizes --mem-fraction-static once per launch from the smallest GPU nvidia-smi lists
    (``get_nvgpu_memory_capacity``: the minimum); the export writes that fraction, and every stage of a replica
    of mixed cards is priced at it (an L40S launch: 0.851 on the H100 stage too, not the H100's own 0.835)."""
    import re

    from dnnplace.core.catalogue import device_spec
    from dnnplace.models.serving.evaluation import evaluate
    from dnnplace.models.serving.exporters import export
    from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, Stage

    p = problem(llama8b, gpus="1xh100+1xl40s", engine="sglang", isl=128, osl=128)
    cfg = ServingConfig((Replica((Stage("h100", 0, (0,), 16), Stage("l40s", 0, (1,), 16))),), 64, 8192)
    text = export(p, ServingPlan(cfg, "feasible", None, None, 0.0, {}), "sglang")
    frac = float(re.search(r"--mem-fraction-static (\S+)", text).group(1))
    mems = evaluate(p, cfg).replicas[0].memory
    for m in mems:
        assert m.budget / device_spec(m.gpu).usable_memory_bytes == pytest.approx(frac, abs=5e-4)
    assert frac == pytest.approx(p.fraction_for(device_spec("l40s").usable_memory_bytes, 1, 2), abs=5e-4)
    assert frac != pytest.approx(p.fraction_for(device_spec("h100").usable_memory_bytes, 1, 2), abs=5e-3)


def test_tensorrt_llm_runs_prefill_attention_in_fp8_where_its_attention_op_does(llama8b, monkeypatch):
    """thop/attentionOp.cpp: mFP8ContextFMHA = is_fp8_out || is_fp4_out || (FP8 KV && paged context FMHA): an
    FP8 or NVFP4 checkpoint, or an FP8 cache, runs the FP8 kernel; vLLM's prefill stays at 16 bits here.  On an
    RTX PRO 6000 the measured FP8 kernel takes about half the 16-bit one's time at long prompts."""
    from dnnplace.models.serving import cost
    from dnnplace.models.serving.catalogue import context_fmha_dtype

    assert context_fmha_dtype("trtllm", "fp8", "bf16", True) == "fp8"
    assert context_fmha_dtype("trtllm", "fp4", "fp8", True) == "fp8"
    assert context_fmha_dtype("trtllm", "bf16", "fp8", True) == "fp8"
    assert context_fmha_dtype("trtllm", "fp8", "bf16", False) == "bf16"  # attention kept at 16 bits
    assert context_fmha_dtype("trtllm", "bf16", "bf16", True) == "bf16"
    assert context_fmha_dtype("vllm", "fp8", "fp8", True) == "bf16"
    it = Iteration(decode=0.0, kv_len=0.0, prefill=16384.0, isl=16384)
    p = problem(llama8b, gpus="1xrtx-pro-6000", engine="trtllm", precision="fp4", kv_dtype="fp8", isl=16384, osl=16)
    kc = kernel_costs("rtx-pro-6000", "trtllm")
    fast = kc.context_attention(1, 16384, 32, 8, 128, "fp8", "fp8").seconds[()]
    slow = kc.context_attention(1, 16384, 32, 8, 128, "bf16", "fp8").seconds[()]
    t8 = cost.layer_times(p.model, "rtx-pro-6000", 1, it, "trtllm", "nvlink", "fp8").per_layer[0]
    monkeypatch.setattr(cost, "context_fmha_dtype", lambda *a: "bf16")
    t16 = cost.layer_times(p.model, "rtx-pro-6000", 1, it, "trtllm", "nvlink", "fp8").per_layer[0]
    assert fast < 0.7 * slow and t16 - t8 == pytest.approx(slow - fast, rel=1e-6)
