"""The dense cost terms from published kernel measurements, each against a hand-computed value.

Per-format MAMF fractions (Bekman's table), the SM margin of TP comm overlap (NeMo's userbuffers
configs), CP-chunked attention (cuDNN's sdpa tables) and B200's HGX HBM bandwidth.
"""

from __future__ import annotations

import numpy as np
import pytest

from dnnplace.core.catalogue import CATALOGUE, TRAINING_STACK
from dnnplace.kernels import roofline
from dnnplace.models.llm.evaluation import flops
from dnnplace.models.llm.evaluation.flops import tp_overlap_sms

H100, B200, GB200 = CATALOGUE["h100"], CATALOGUE["b200"], CATALOGUE["gb200"]


def A(*x: float) -> np.ndarray:
    return np.array(x, dtype=float)


@pytest.mark.parametrize(("dev", "fmt", "measured", "theory"), [
    ("h100", "bf16", 794.5, 989), ("h100", "fp8", 1402.6, 1979), ("h200", "fp8", 1453.4, 1979),
    ("b200", "bf16", 1745.0, 2250), ("b200", "fp8", 3432.5, 4500), ("gb200", "bf16", 1822.0, 2500),
    ("gb200", "fp8", 3615.6, 5000), ("b300", "fp8", 3353.3, 4500), ("a100", "bf16", 271.2, 312)])
def test_mamf_fraction_per_device_and_format(dev: str, fmt: str, measured: float, theory: float) -> None:
    assert CATALOGUE[dev].gemm_fraction_for(fmt) == pytest.approx(measured / theory)


def test_fp4_has_no_mamf_row_and_takes_fp8_s() -> None:
    assert B200.gemm_fraction_for("fp4") == B200.gemm_fraction_for("fp8")


def test_an_fp8_gemm_runs_at_its_own_fraction() -> None:
    # 8192 x 8192: 64 x 32 = 2048 tiles of 128 x 256 over 132 SMs, 15.5 waves (the last one partly empty)
    m = n = k = A(8192.0)
    waves = 2048 / 132
    fill = waves / 16
    t = roofline.gemm_time(m, n, k, H100, 1979e12)[0]
    compute = 2 * 8192 ** 3 / (1979e12 * 1402.6 / 1979 * fill)
    epilogue = 2.0 * 8192 * 8192 / (3.35e12 * 0.85)
    assert t == pytest.approx(compute + epilogue)
    assert roofline.gemm_format(H100, 1979e12) == "fp8" and roofline.gemm_format(H100, 1.0) == "bf16"


def test_an_sm_margin_scales_the_peak_and_recounts_the_waves() -> None:
    # 4096 x 4096: 32 x 16 = 512 tiles; on 132 SMs 3.88 waves (fill 3.88 / 4), on 116 SMs 4.41 (fill 4.41 / 5)
    full = float(roofline.gemm_efficiency(A(4096.0), A(4096.0), H100)[0])
    cut = float(roofline.gemm_efficiency(A(4096.0), A(4096.0), H100, sms=116.0)[0])
    f = 794.5 / 989
    assert full == pytest.approx(f * (512 / 132) / 4)
    assert cut == pytest.approx(f * (512 / 116) / 5 * 116 / 132)


def test_forward_sms_apply_to_the_forward_gemm_only() -> None:
    shapes = [(A(4096.0), A(8192.0), A(2048.0))]
    fwd, bwd = flops.fwd_bwd_gemm_times(shapes, H100, 989e12, [A(108.0)])
    ref_f, ref_b = flops.fwd_bwd_gemm_times(shapes, H100, 989e12)
    assert fwd[0][0] == pytest.approx(roofline.gemm_time(*shapes[0], H100, 989e12, sms=108.0)[0])
    assert fwd[0][0] > ref_f[0][0] and bwd[0][0] == ref_b[0][0]


def test_tp_overlap_margins_follow_nemo_s_configs() -> None:
    on, off = np.array([True]), np.array([False])
    sms = tp_overlap_sms(H100, "hopper", on)
    got = sms("bf16")
    assert got[0] is None and got[2] is None
    assert float(got[1][0]) == 132 - 24 and float(got[3][0]) == 132 - 16  # proj_fprop 24, fc2_fprop 16
    assert float(tp_overlap_sms(H100, "hopper", off)("bf16")[1][0]) == 132  # no overlap: every SM
    fp8 = tp_overlap_sms(B200, "blackwell", on)("fp8")  # ring exchange, num_sm=1, set_sm_margin=True
    assert float(fp8[1][0]) == 147 and float(fp8[3][0]) == 147
    assert TRAINING_STACK.sm_margin("ampere", "bf16") == (0, 0)
    assert "userbuffers" in TRAINING_STACK.sources["tp_overlap_sm_margin"]


def test_b200_hbm_is_the_hgx_figure_gb200_the_nvl72_one() -> None:
    assert B200.hbm_bandwidth == 7.7e12 and "7.7 TB/s" in B200.sources["hbm_bandwidth"]
    assert GB200.hbm_bandwidth == 8e12


def test_attention_time_of_a_cp2_layer() -> None:
    # Llama 3.1 8B-like layer: 4096 local tokens of an 8k sequence under CP 2, 32 heads of 128, TP 1.
    from dnnplace.models.llm.spec import TransformerArch

    arch = TransformerArch("l8", "llama", 32, 4096, 14336, 32, 8, 128, 128256)
    f, b = flops.attention_times(arch, A(4096.0), 8192, A(1.0), H100, A(2.0))
    work = 4.0 * 4096 * (8192 / 2) * 4096  # queries x mean causal keys x q width, QK^T + AV
    rate_f = 2 * 591 * 633 / (591 + 633) * 1e12
    rate_b = 2 * 474 * 504 / (474 + 504) * 1e12
    assert f[0] == pytest.approx(work / rate_f) and b[0] == pytest.approx(2.5 * work / rate_b)


def test_the_margins_reach_the_layer_cost_only_with_tp_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    # Llama 3.1 70B, TP4 with SP, CP2: the layer's forward compute rises by exactly what the proj and fc2
    # GEMMs lose on 108 and 116 SMs; with TP 1 (no overlap) nothing changes.
    from llm_helpers import llama, problem, uniform

    from dnnplace.models.llm.evaluation.step import Candidates, stage_costs

    arch, pr = llama("70b"), problem(llama("70b"), 64, 128)
    c = Candidates.of([uniform(arch, 64, 4, 4, 2, 5)])
    with_margin = stage_costs(pr, c).layer["compute"][0][0]
    monkeypatch.setitem(TRAINING_STACK.tp_overlap_sm_margin, ("hopper", "bf16"), (0, 0))
    without = stage_costs(pr, c).layer["compute"][0][0]
    tokens, h, f = A(8192 / 2), A(8192.0), A(28672.0)
    proj = [tokens, h, A(8192 / 4)]
    fc2 = [tokens, h, f / 4]
    extra = sum(roofline.gemm_time(*g, H100, 989e12, sms=s)[0] - roofline.gemm_time(*g, H100, 989e12)[0]
                for g, s in ((proj, 108.0), (fc2, 116.0)))
    assert extra > 0 and with_margin - without == pytest.approx(extra, rel=1e-9)
    one = Candidates.of([uniform(arch, 64, 1, 8, 2, 1)])
    monkeypatch.setitem(TRAINING_STACK.tp_overlap_sm_margin, ("hopper", "bf16"), (24, 16))
    a = stage_costs(pr, one).layer["compute"][0][0]
    monkeypatch.setitem(TRAINING_STACK.tp_overlap_sm_margin, ("hopper", "bf16"), (0, 0))
    assert stage_costs(pr, one).layer["compute"][0][0] == a
