"""Decode attention and the element-wise kernels at the shapes where aiconfigurator-core prices them higher
(Llama 3.3 70B FP8, TP2 on H100, ~246 sequences at ~1k cached tokens): ours stays between the measured
points that bracket the query, and the element-wise bytes are aiconfigurator's own."""

from __future__ import annotations

import numpy as np
import pytest

from dnnplace.kernels import kernel_costs
from dnnplace.kernels.measured import family
from dnnplace.kernels.tables import data_root
from dnnplace.models.serving.cost import TABLE_CONTENTS

needs_tables = pytest.mark.skipif(data_root() is None, reason="aiconfigurator-core's measured tables not installed")


@needs_tables
def test_decode_attention_between_measured_batches() -> None:
    """The h100 TRT-LLM generation-attention table measured b=128 and b=256 at 1,024 cached tokens (b=256
    stops there: a ragged hole above).  A batch between them must price between them; aiconfigurator-core's
    engine gives b=246 more than its own measured b=256 there (0.102 vs 0.099 ms), which is the larger part
    of its 9.8 vs our 8.6 ms of decode attention per step on the TP2 rows."""
    fam = family("h100_sxm", "decode_attention", "trtllm")
    assert fam is not None
    kc = kernel_costs("h100", "trtllm")
    t = kc.decode_attention([128, 246, 256], [1024, 1024, 1024], [32] * 3, [4] * 3, 128, "fp8").seconds
    assert t[0] < t[1] <= t[2] * (1 + 1e-9)


def test_table_contents_name_their_collector() -> None:
    """RoPE / KV-cache write and the FP8 activation quantize are inside the measured rows: said, with where."""
    assert "RoPE" in TABLE_CONTENTS["decode_attention"] and "collect_attn.py" in TABLE_CONTENTS["decode_attention"]
    assert "quantize" in TABLE_CONTENTS["gemm"] and "collect_gemm.py" in TABLE_CONTENTS["gemm"]


def test_elementwise_bytes_match_aiconfigurator_ops() -> None:
    """add_norm (2h in, 2h out) twice and act_gate (2I/tp in, I/tp out), 2 bytes each, per token."""
    from dnnplace.models.serving import cost

    class M:
        hidden, ffn, experts, top_k, expert_ffn, shared_ffn = 8192, 28672, 0, 0, 0, 0

    kc = kernel_costs("h100")
    bw = kc.spec.hbm_bandwidth * float(kc.spec.hbm_fraction or 1.0)
    tokens = np.array([261.0])
    want = tokens * (2 * (2 * 8192 + 2 * 8192) * 2 + (2 * 28672 / 2 + 28672 / 2) * 2) / bw
    got = cost._elementwise(M(), kc, 2, tokens)  # noqa: SLF001 - the rule under test
    assert np.allclose(got, want)
