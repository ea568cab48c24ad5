"""The grid's axis rules on synthetic lattices (no tables needed): exact at measured points, exact for the
cost shape each rule is chosen for, and monotone along every axis where the data are -- including the
``curve-sqrt`` sequence axis, whose warp is shared by all rows so a cubic cannot reorder two rows."""

from __future__ import annotations

import numpy as np

from dnnplace.kernels.grid import Grid
from dnnplace.kernels.sources import MEASURED

SEQ = np.array([1.0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096])
BATCH = np.array([1.0, 2, 4, 8])


def _attention_like(rng: np.random.Generator) -> np.ndarray:
    """(batch, seq) latencies rising in both: overhead + per-row linear and quadratic terms, rows differing."""
    a = rng.uniform(5e-6, 2e-5, size=(len(BATCH), 1))
    b = rng.uniform(1e-9, 1e-8, size=(len(BATCH), 1)) * BATCH[:, None]
    c = rng.uniform(1e-12, 1e-11, size=(len(BATCH), 1)) * BATCH[:, None]
    v = a + b * SEQ + c * SEQ**2
    return np.maximum.accumulate(v, axis=0)  # rising in batch too


def _rising(v: np.ndarray) -> bool:
    """Non-decreasing up to rounding (a blend of two equal corners may land one ulp below them)."""
    return bool(np.all(np.diff(v) >= -1e-12 * v[1:]))


def test_curve_sqrt_is_exact_at_points_and_for_squares_of_lines() -> None:
    vals = (2e-3 + 1e-5 * SEQ[None, :]) ** 2 * BATCH[:, None]
    g = Grid([BATCH, SEQ], vals, ("lin", "curve-sqrt"))
    b, s = np.meshgrid(BATCH, SEQ, indexing="ij")
    look = g.lookup([b, s])
    assert np.array_equal(look.values, vals) and np.all(look.code == MEASURED)
    q = np.linspace(1.0, 4096.0, 301)
    got = g.lookup([np.full_like(q, 4.0), q]).values
    np.testing.assert_allclose(got, (2e-3 + 1e-5 * q) ** 2 * 4.0, rtol=1e-9)


def test_curve_sqrt_is_monotone_along_every_axis_where_the_data_are() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        vals = _attention_like(rng)
        g = Grid([BATCH, SEQ], vals, ("lin", "curve-sqrt"))
        q = np.geomspace(1.0, 4096.0, 400)
        for bq in (1.0, 1.5, 3.0, 8.0):
            assert _rising(g.lookup([np.full_like(q, bq), q]).values)
        bq = np.linspace(1.0, 8.0, 200)
        for sq in (3.0, 20.0, 300.0, 1500.0, 3000.0):
            assert _rising(g.lookup([bq, np.full_like(bq, sq)]).values)


def test_a_hole_is_answered_by_a_measured_point() -> None:
    vals = np.outer(BATCH, SEQ) * 1e-6
    vals[3, -1] = np.nan
    g = Grid([BATCH, SEQ], vals, ("lin", "curve-sqrt"))
    look = g.lookup([np.array([8.0]), np.array([3000.0])])
    assert np.isfinite(look.values).all() and look.code[0] != MEASURED
