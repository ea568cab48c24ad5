"""The roofline's skinny-GEMM rule (small-row tiles, split K over idle SMs) against hand-computed values, and the
shapes it leaves alone."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from dnnplace.core.catalogue import CATALOGUE, GEMM_K_BLOCK, GEMM_MIN_TILE_M
from dnnplace.kernels import roofline as rl

A100 = CATALOGUE["a100"]
A = np.array


def test_a_decode_gemm_by_hand() -> None:
    # 16 x 4096 x 4096 BF16 on an A100 (108 SMs, 128x256 tiles, MAMF 271.2/312, HBM 2.0 TB/s x 0.85): a 16-row
    # tile, 16 output tiles (<= 54 = half the SMs), so K splits floor(108 / 16) = 6 ways: one wave of 96 / 108
    m, n, k = 16.0, 4096.0, 4096.0
    eff = A100.gemm_fraction_for("bf16") * 1.0 * (16 * 6 / 108)
    compute = 2 * m * n * k / (312e12 * eff)
    hbm = 2.0e12 * 0.85
    operands = 2 * (m * k + k * n) / hbm
    expected = max(compute, operands) + 2 * m * n / hbm
    got = rl.gemm_time(A([m]), A([n]), A([k]), A100, 312e12)[0]
    assert got == pytest.approx(expected, rel=1e-12)
    assert operands > compute  # bound by its weights, as the measured table says (26.6 us)


def test_split_k_counts_idle_sms_and_k_blocks() -> None:
    assert rl.split_k(A([16.0]), 4096.0, 1.0, 108)[0] == 6
    assert rl.split_k(A([16.0]), 2 * GEMM_K_BLOCK, 1.0, 108)[0] == 2  # no more slices than K has blocks
    assert rl.split_k(A([60.0]), 4096.0, 1.0, 108)[0] == 1  # over half the SMs: one wave as it is
    assert rl.split_k(A([16.0]), 4096.0, 8.0, 108)[0] == 1  # a grouped GEMM does not split


def test_small_row_tiles_only_for_a_single_gemm_priced_with_k() -> None:
    tm, _ = rl.gemm_tile(A([1.0, 16.0, 17.0, 100.0, 5000.0]), A100, 1.0, 4096.0)
    assert list(tm) == [GEMM_MIN_TILE_M, 16.0, 32.0, 128.0, 128.0]
    assert float(rl.gemm_tile(A([8.0]), A100, 4.0, 4096.0)[0][0]) == 128.0
    assert float(rl.gemm_tile(A([8.0]), A100)[0]) == 128.0


@given(st.integers(1024, 65536), st.integers(1024, 32768), st.integers(1024, 32768))
def test_training_sized_gemms_are_priced_as_before(m: int, n: int, k: int) -> None:
    """Where the output has more tiles than half the SMs and at least a full tile of rows, the rule is a no-op:
    the training planner's GEMMs keep their price."""
    tm, tn = A100.gemm_tile
    tiles = np.ceil(m / tm) * np.ceil(n / tn)
    assume(tiles > A100.sm_count // 2)
    new = rl.gemm_time(A([float(m)]), A([float(n)]), A([float(k)]), A100, 312e12)[0]
    eff = A100.gemm_fraction_for("bf16") * (m * n / (tiles * tm * tn)) * ((tiles / 108) / np.ceil(tiles / 108))
    hbm = 2.0e12 * 0.85
    old = max(2.0 * m * n * k / (312e12 * eff), 2 * (m * k + k * n) / hbm) + 2 * m * n / hbm
    assert new == pytest.approx(old, rel=1e-12)


def test_a_decode_moe_without_a_table_reads_only_the_experts_its_tokens_pick() -> None:
    """One token picks top-k of the experts: only those read their weights (balanced routing, as the tables
    measure it); the roofline used to read every local expert's, 16x too many at top-8 of 128."""
    from dnnplace.kernels.costs import kernel_costs

    kc = kernel_costs("l4")
    hidden, inter, topk, experts = 2048, 768, 8, 128
    got = kc.moe([1.0], hidden, inter, topk, experts).seconds[0]
    d, peak = kc.spec, rl.dtype_peak(kc.spec, "bf16")
    one = A([1.0])
    by_hand = (rl.gemm_time(one, A([2.0 * inter]), A([float(hidden)]), d, peak, groups=8.0)
               + rl.gemm_time(one, A([float(hidden)]), A([float(inter)]), d, peak, groups=8.0))[0]
    assert got == pytest.approx(by_hand, rel=1e-12)
    # many tokens: every expert is picked, as before
    t = A([4096.0])
    rows = 4096 * topk / experts
    every = (rl.gemm_time(t * 0 + rows, A([2.0 * inter]), A([float(hidden)]), d, peak, groups=float(experts))
             + rl.gemm_time(t * 0 + rows, A([float(hidden)]), A([float(inter)]), d, peak, groups=float(experts)))[0]
    assert kc.moe(t, hidden, inter, topk, experts).seconds[0] == pytest.approx(every, rel=1e-9)
