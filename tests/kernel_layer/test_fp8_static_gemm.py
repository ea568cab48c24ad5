"""FP8 GEMMs of checkpoints with static input scales: the measured FP8 row less the measured activation-scale
computation (and less the static quantisation where the engine fuses it into the op before), never below the
GEMM's speed of light; the FP8 price as it stands where a table is missing."""

from __future__ import annotations

import numpy as np
import pytest

from dnnplace.kernels import kernel_costs
from dnnplace.kernels import roofline as rl
from dnnplace.kernels.measured import family
from dnnplace.kernels.tables import data_root, read_columns

pytestmark = pytest.mark.skipif(data_root() is None, reason="aiconfigurator-core is a pinned dependency")


def _measured(system: str, framework: str, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    fam = family(system, name, framework)
    assert fam is not None
    cols = read_columns(fam.table[4], ("kernel_source", "quant_dtype", "m", "k", "latency"))
    keep = (cols["quant_dtype"] == "fp8") & (cols["kernel_source"] == dict(fam.sources)["fp8"])
    return cols["m"][keep].astype(float), cols["k"][keep].astype(float), cols["latency"][keep] * 1e-3


@pytest.mark.parametrize("device,system,framework", [("b200", "b200_sxm", "trtllm"), ("h100", "h100_sxm", "trtllm"),
                                                     ("h200", "h200_sxm", "vllm")])
def test_static_is_the_fp8_row_less_the_measured_overheads(device: str, system: str, framework: str) -> None:
    kc = kernel_costs(device, framework)
    m, k, scale = _measured(system, framework, "fp8_compute_scale")
    qm, qk, quant = _measured(system, framework, "fp8_scale_matrix")
    assert len(m) >= 100 and len(qm) >= 100
    at = {(a, b): v for a, b, v in zip(qm.tolist(), qk.tolist(), quant.tolist())}
    both = [i for i in range(len(m)) if (m[i], k[i]) in at]
    assert len(both) >= 100
    i = np.array(both)
    m, k, scale = m[i], k[i], scale[i]
    quant = np.array([at[(a, b)] for a, b in zip(m.tolist(), k.tolist())])
    n = np.full(m.shape, 4096.0)
    fp8 = kc.gemm(m, n, k, "fp8")
    sol = rl.sol_gemm(m, n, k, kc.spec, "fp8")
    plain = kc.gemm_fp8_static(m, n, k, False)
    fused = kc.gemm_fp8_static(m, n, k, True)
    np.testing.assert_allclose(plain.seconds, np.maximum(fp8.seconds - scale, sol), rtol=1e-12)
    np.testing.assert_allclose(fused.seconds, np.maximum(fp8.seconds - scale - quant, sol), rtol=1e-12)
    assert np.all(fused.seconds <= plain.seconds) and np.all(plain.seconds <= fp8.seconds)
    assert "measured" not in plain.sources()  # derived from three tables, measured by none whole


def test_the_overhead_is_about_constant_at_decode_sizes_on_trtllm() -> None:
    """What it is for: TensorRT-LLM's dynamic-FP8 rows carry ~8 us of scale computation per GEMM, which a
    ModelOpt checkpoint's decode step never runs (issue 43's TPOT rows: ~3 ms a step too slow over 80 layers)."""
    kc = kernel_costs("b200", "trtllm")
    m, n, k = np.array([1.0, 4.0, 16.0]), np.full(3, 1280.0), np.full(3, 8192.0)
    saved = kc.gemm(m, n, k, "fp8").seconds - kc.gemm_fp8_static(m, n, k, False).seconds
    assert np.all((saved > 5e-6) & (saved < 12e-6))


def test_without_the_tables_the_fp8_price_stands() -> None:
    for kc in (kernel_costs("a100", "trtllm"), kernel_costs("l4", "vllm"),
               kernel_costs("h100", "trtllm", measured=False)):
        m, n, k = np.array([4.0, 512.0]), np.full(2, 4096.0), np.full(2, 4096.0)
        a, b = kc.gemm(m, n, k, "fp8"), kc.gemm_fp8_static(m, n, k, True)
        assert a.seconds.tolist() == b.seconds.tolist() and a.sources() == b.sources()
