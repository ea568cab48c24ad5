"""The MoE tables keep the kernel the engine ran per layout: vLLM 0.24's block-FP8 fused MoE was collected with
FlashInfer CUTLASS under expert parallelism and Triton under tensor parallelism (disjoint layouts), so a TP layout
is priced from its measured Triton rows, not from the roofline; and where one version's table lacks a layout an
older version measured, the older rows price it."""

from __future__ import annotations

import numpy as np
import pytest

from dnnplace.kernels import kernel_costs
from dnnplace.kernels.measured import family
from dnnplace.kernels.tables import data_root

pytestmark = pytest.mark.skipif(data_root() is None, reason="aiconfigurator-core is a pinned dependency")

QWEN3_235B = (4096, 1536, 8, 128)  # hidden, expert FFN, top-k, experts


@pytest.mark.parametrize("tp,ep", [(2, 1), (4, 1), (1, 2), (1, 8)])
def test_block_fp8_moe_is_measured_under_tp_and_under_ep(tp, ep):
    kc = kernel_costs("h200", framework="vllm")
    p = kc.moe(np.array([1.0, 64.0, 1024.0]), *QWEN3_235B, tp, ep, "fp8_block")
    assert set(p.sources()) <= {"measured", "interpolated"}  # not the roofline


def test_each_layout_names_the_kernel_source_it_kept():
    fam = family("h200_sxm", "moe", "vllm")
    assert fam is not None
    tp = fam.by_key[("fp8_block", "balanced", *QWEN3_235B, 2, 1)]
    ep = fam.by_key[("fp8_block", "balanced", *QWEN3_235B, 1, 2)]
    assert "triton" in tp and "flashinfer" in ep
    assert ("fp8_block", tp) in fam.sources and ("fp8_block", ep) in fam.sources
