"""Attention kernel shapes: cuDNN's measured rates by mask and length, and the CP ring's kernels."""

from __future__ import annotations

import numpy as np
import pytest

from dnnplace.core.catalogue import CATALOGUE
from dnnplace.models.llm.evaluation.attention_shape import cp_attention_rates, table_rate

H100, B200, A100 = CATALOGUE["h100"], CATALOGUE["b200"], CATALOGUE["a100"]
T = 1e12


def test_table_rate_at_between_and_beyond_the_measured_lengths() -> None:
    table = H100.attention
    assert table is not None
    assert float(table_rate(table, "causal", "fwd", 8192)) == 644 * T  # H200 llama3.1 csv, top_left 8192
    assert float(table_rate(table, "full", "bwd", 2048)) == 504 * T  # no_mask 2048 backward
    mid = float(table_rate(table, "causal", "fwd", 2048 * 2 ** 0.5))  # halfway in log2 between 2k and 4k
    assert mid == pytest.approx((484 + 591) / 2 * T)
    assert float(table_rate(table, "causal", "fwd", 1000)) == 484 * T  # clamped below
    assert float(table_rate(table, "causal", "bwd", 65536)) == 581 * T  # clamped above


def test_a_table_without_unmasked_rows_prices_them_causal() -> None:
    assert B200.attention is not None
    assert float(table_rate(B200.attention, "full", "fwd", 2048)) == pytest.approx(907.547 * T)


def test_no_cp_is_one_causal_kernel_over_the_sequence() -> None:
    f, b = cp_attention_rates(H100, 8192, 1.0)
    assert float(f) == pytest.approx(644 * T) and float(b) == pytest.approx(541 * T)


def test_cp2_is_half_causal_at_seq_over_cp_and_half_unmasked_at_half_that() -> None:
    # 8k over CP 2: the diagonal step is causal at 4096 (591 / 474), the other unmasked at 2048 (633 / 504);
    # equal work each: the harmonic mean of the two rates.
    f, b = cp_attention_rates(H100, 8192, np.array([2.0]))
    assert float(f[0]) == pytest.approx(2 * 591 * 633 / (591 + 633) * T)
    assert float(b[0]) == pytest.approx(2 * 474 * 504 / (474 + 504) * T)


def test_cp4_weights_the_unmasked_steps_three_to_one() -> None:
    # 16k over CP 4: causal at 4096 for 1/4 of the work, unmasked at 2048 for 3/4
    f, _ = cp_attention_rates(H100, 16384, np.array([4.0]))
    assert float(f[0]) == pytest.approx(1 / (0.25 / 591 + 0.75 / 633) * T)


def test_a_device_without_a_table_uses_its_fractions() -> None:
    f, b = cp_attention_rates(A100, 8192, np.array([1.0, 2.0]))
    assert np.allclose(f, 312e12 * 0.70) and np.allclose(b, 312e12 * 0.55)
