"""Attention shape factors: the published FA3 length table and the causal diagonal tiles."""

from __future__ import annotations

import numpy as np
import pytest

from dnnplace.models.llm.evaluation.attention_shape import FA3_BY_SEQ, causal_tile_factor, length_factor


def test_length_factor_at_the_measured_lengths() -> None:
    assert float(length_factor(np.array(8192.0))) == 1.0
    assert float(length_factor(np.array(2048.0))) == pytest.approx(565.544 / 614.234)
    assert float(length_factor(np.array(100.0))) == pytest.approx(FA3_BY_SEQ[512] / 614.234)  # clamped
    mid = float(length_factor(np.array(2048.0 * 2 ** 0.5)))  # halfway in log2 between 2k and 4k
    assert mid == pytest.approx((565.544 + 590.233) / 2 / 614.234)


def test_length_factor_is_monotone() -> None:
    x = length_factor(np.geomspace(256, 65536, 50))
    assert np.all(np.diff(x) >= 0)


def test_causal_tile_factor() -> None:
    assert float(causal_tile_factor(np.array(2048.0))) == 16 / 17  # 16 tiles of 128: 136 computed, 128 useful
    assert float(causal_tile_factor(np.array(100.0))) == 0.5  # one tile: computed whole for half the work
    assert float(causal_tile_factor(np.array(2048.0), tile=64)) == 32 / 33
