"""An MXFP4 checkpoint's experts (GPT-OSS) are priced from the tables' MXFP4 rows, with the activation format the
engine runs on the GPU (catalogue.mxfp4_moe_kernel): MXFP8 for TensorRT-LLM and SGLang on Blackwell, BF16 elsewhere.
Before, they were looked up as NVFP4, which has no GPT-OSS shapes, and fell to the roofline everywhere."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dnnplace.kernels.tables import data_root
from dnnplace.models.serving.catalogue import mxfp4_moe_kernel
from dnnplace.models.serving.cost import Iteration, engine_kernels, layer_times
from dnnplace.models.serving.load import problem

PUBLISHED = Path(__file__).resolve().parents[3] / "src" / "dnnplace" / "models" / "llm" / "published"
GPT_OSS = PUBLISHED / "gpt-oss-120b.json"


def test_the_kernel_follows_the_engine_and_the_gpu():
    assert mxfp4_moe_kernel("trtllm", "b200") == "w4a8_mxfp4_mxfp8"
    assert mxfp4_moe_kernel("trtllm", "h200") == "w4a16_mxfp4"
    assert mxfp4_moe_kernel("vllm", "b200") == "w4a16_mxfp4"
    assert mxfp4_moe_kernel("sglang", "gb200") == "w4a8_mxfp4_mxfp8"
    assert mxfp4_moe_kernel("sglang", "h100") == "w4a16_mxfp4"
    assert mxfp4_moe_kernel("sglang", "rtx-pro-6000") == "w4a16_mxfp4"  # SM120: Marlin, as its table measures


@pytest.mark.skipif(data_root() is None, reason="aiconfigurator-core is a pinned dependency")
@pytest.mark.parametrize("gpu,engine,tp", [("b200", "vllm", 1), ("b200", "vllm", 8), ("b200", "trtllm", 1),
                                           ("h200", "vllm", 2)])
def test_gpt_oss_experts_are_priced_from_the_measured_mxfp4_rows(gpu, engine, tp):
    p = problem(GPT_OSS, gpus=f"8x{gpu}", engine=engine, precision="fp4")
    m = p.model
    assert m.moe_dtype == "mxfp4"
    kc = engine_kernels(gpu, engine)
    t = np.array([64.0])
    own = kc.moe(t, m.hidden, m.expert_ffn, m.top_k, m.experts, tp, 1, mxfp4_moe_kernel(engine, gpu))
    assert set(own.sources()) <= {"measured", "interpolated"}
    # the layer's MoE share is that kernel's: the rest of the layer is the same whichever the experts run
    it = Iteration(64.0, 0.0, 0.0, 1)
    whole = layer_times(m, gpu, tp, it, engine).per_layer
    nvfp4 = kc.moe(t, m.hidden, m.expert_ffn, m.top_k, m.experts, tp, 1, "fp4")
    as_nvfp4 = layer_times(replace(m, moe_dtype=""), gpu, tp, it, engine).per_layer
    moe = np.asarray(m.moe, dtype=bool)
    assert np.allclose(whole[moe] - as_nvfp4[moe], own.seconds[0] - nvfp4.seconds[0])
