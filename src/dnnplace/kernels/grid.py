"""One N-axis resolver for every measured table: exact hits, per-axis bracket blends, bounded extrapolation.

A table is a set of measured points on a rectilinear lattice with holes (collection skips shapes that
run out of memory or time, so sub-grids are ragged).  A query

1. equal to a measured point gets that point's value verbatim (``measured``);
2. inside the lattice gets the blend of the 2^d corners that bracket it, one axis at a time, a hole on a
   side that carries weight making the answer a hole (``interpolated``).  Per axis the rule follows what the
   kernel's cost scales with (docs/kernels.md; benchmarks/kernels_loo.py measures each):
   ``lin`` blends latency linearly (latency ~ affine: batch, heads, GEMM m/n/k, message bytes); ``sqrt``
   blends square roots of latency (latency ~ (a + b x)^2); ``curve-sqrt`` (prefill attention's sequence
   length: a constant, a linear and the causal seq^2 term) blends square roots by a fraction warped along
   the lattice's own curve shape: between two measured lengths, the median over every measured row of the
   lattice of where a monotone cubic (Fritsch-Carlson PCHIP) through that row's square roots, seeing the
   next measured point on either side, sits.  One warp per interval, shared by all rows, so every rule is
   a fixed blend of its two corners with non-negative weights: exact at measured points, within the range
   of its corners, and monotone along every axis where the data are;
3. outside the lattice (or where a bracketing corner that carries weight is a hole) is answered at the nearest measured
   place (the clamped query, or the nearest point) and reported with that place, so the caller can hold
   its efficiency and scale by the speed-of-light ratio (``extrapolated``).

Everything is vectorised over queries; the lattice is a dense numpy array with NaN holes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dnnplace.kernels.sources import EXTRAPOLATED, INTERPOLATED, MEASURED

__all__ = ["Grid", "Lookup", "blend"]


@dataclass(frozen=True)
class Lookup:
    """Values at the answering place, that place's coordinates per axis, and the source code per query."""

    values: np.ndarray
    at: list[np.ndarray]
    code: np.ndarray


@dataclass
class Grid:
    """Measured values on a rectilinear lattice (``axes``) with NaN holes; ``scale[j]`` is the axis's blend rule
    (``lin``, ``sqrt`` or ``curve-sqrt``, see :func:`blend` and :meth:`warp`)."""

    axes: list[np.ndarray]
    values: np.ndarray
    scale: tuple[str, ...]
    _tree: tuple[Any, np.ndarray] | None = field(default=None, repr=False)
    _warps: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    @classmethod
    def from_points(cls, coords: list[np.ndarray], values: np.ndarray, scale: tuple[str, ...] | None = None) -> Grid:
        """A lattice from scattered points (duplicates of one point averaged)."""
        axes = [np.unique(np.asarray(c, dtype=float)) for c in coords]
        idx = tuple(np.searchsorted(ax, np.asarray(c, dtype=float)) for ax, c in zip(axes, coords))
        shape = tuple(len(a) for a in axes)
        total = np.zeros(shape)
        count = np.zeros(shape)
        np.add.at(total, idx, np.asarray(values, dtype=float))
        np.add.at(count, idx, 1.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            grid = np.where(count > 0, total / np.maximum(count, 1.0), np.nan)
        return cls(axes, grid, scale or ("lin",) * len(axes))

    @property
    def points(self) -> int:
        return int(np.isfinite(self.values).sum())

    def lookup(self, query: list[np.ndarray]) -> Lookup:
        """Resolve queries (one array per axis, broadcast together)."""
        full = np.broadcast_arrays(*[np.asarray(x, dtype=float) for x in query])
        shape = full[0].shape
        q = [x.ravel() for x in full]
        n = q[0].size
        lo, w_hi, clamped = [], [], np.zeros(n, dtype=bool)
        at = []
        for ax, x in zip(self.axes, q):
            # np.minimum/np.maximum, not np.clip: the same values, without clip's ~30 us of dispatch per call
            xc = np.minimum(np.maximum(x, ax[0]), ax[-1])
            clamped |= xc != x
            at.append(xc)
            if len(ax) == 1:
                lo.append(np.zeros(n, dtype=int))
                w_hi.append(np.zeros(n))
                continue
            i = np.minimum(np.maximum(np.searchsorted(ax, xc, side="right") - 1, 0), len(ax) - 2)
            a, b = ax[i], ax[i + 1]
            t = (xc - a) / (b - a)
            lo.append(i)
            w_hi.append(np.minimum(np.maximum(t, 0.0), 1.0))
        # the 2^d bracketing corners, then blended one axis at a time (square-root axes first)
        d = len(self.axes)
        corners = np.empty((2,) * d + (n,))
        for corner in itertools.product((0, 1), repeat=d):
            idx = tuple(lo[j] + (c if len(self.axes[j]) > 1 else 0) for j, c in enumerate(corner))
            corners[corner] = self.values[idx]
        order = sorted(range(d), key=lambda j: self.scale[j] == "lin")
        v = corners
        exact = np.ones(n, dtype=bool)
        for done, j in enumerate(order):
            axis = j - sum(1 for k in order[:done] if k < j)
            a, b = np.take(v, 0, axis=axis), np.take(v, 1, axis=axis)
            if self.scale[j] == "curve-sqrt" and len(self.axes[j]) > 1:
                v = blend(a, b, self.warp(j, lo[j], w_hi[j]), "sqrt")
            else:
                v = blend(a, b, w_hi[j], self.scale[j])
            exact &= (w_hi[j] == 0.0) | (w_hi[j] == 1.0)
        out = v
        exact &= np.isfinite(out)
        code = np.where(exact & ~clamped, MEASURED, np.where(clamped, EXTRAPOLATED, INTERPOLATED)).astype(np.int8)
        holes = ~np.isfinite(out)
        if holes.any():
            near_v, near_at = self._nearest([x[holes] for x in at])
            out[holes] = near_v
            for j in range(len(at)):
                at[j] = at[j].copy()
                at[j][holes] = near_at[j]
            code[holes] = EXTRAPOLATED
        return Lookup(out.reshape(shape), [a.reshape(shape) for a in at], code.reshape(shape))

    def warp(self, j: int, interval: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The shared curve fraction (0 at the interval's lower point, 1 at its upper) at fraction ``t`` of
        the interval ``interval`` (index of its lower point) along axis ``j``: the tabulated median warp
        (:meth:`_warp_table`), linear between its samples, so monotone in ``t``."""
        if j not in self._warps:
            self._warps[j] = self._warp_table(j)
        tab = self._warps[j]
        pos = np.minimum(np.maximum(t, 0.0), 1.0) * (tab.shape[1] - 1)
        s0 = np.minimum(pos.astype(int), tab.shape[1] - 2)
        f = pos - s0
        return tab[interval, s0] * (1.0 - f) + tab[interval, s0 + 1] * f

    def _warp_table(self, j: int, samples: int = 33) -> np.ndarray:
        """Per interval of axis ``j``, the median over the lattice's rows (every combination of the other
        axes with both interval ends measured and different) of a monotone cubic's fraction of the way
        between the two ends' square roots, at ``samples`` evenly spaced fractions.  Each row's fraction
        rises from 0 to 1 (the cubic is monotone), so their median does too; an interval no row measured
        keeps the plain fraction (the ``sqrt`` blend)."""
        ax = self.axes[j]
        y = np.sqrt(np.moveaxis(self.values, j, -1).reshape(-1, len(ax)))
        ts = np.linspace(0.0, 1.0, samples)
        tab = np.tile(ts, (max(len(ax) - 1, 1), 1))
        nan = np.full(y.shape[0], np.nan)
        for k in range(len(ax) - 1):
            ya, yb = y[:, k], y[:, k + 1]
            ya_out = y[:, k - 1] if k >= 1 else nan
            yb_out = y[:, k + 2] if k + 2 < len(ax) else nan
            xs = tuple(np.asarray(ax[i] if 0 <= i < len(ax) else np.nan) for i in (k - 1, k, k + 1, k + 2))
            ok = np.isfinite(ya) & np.isfinite(yb) & (np.abs(yb - ya) > 1e-9 * np.maximum(ya, yb))
            if not ok.any():
                continue
            with np.errstate(invalid="ignore", divide="ignore"):
                cubic = _pchip(ya_out[ok, None], ya[ok, None], yb[ok, None], yb_out[ok, None],
                               xs, ts[None, :])
                frac = np.clip((cubic - ya[ok, None]) / (yb - ya)[ok, None], 0.0, 1.0)
            tab[k] = np.median(frac, axis=0)
            tab[k, 0], tab[k, -1] = 0.0, 1.0
        return tab

    def _nearest(self, query: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """The measured point nearest each query, in log coordinates (octaves along every axis)."""
        from scipy.spatial import cKDTree  # lazily: only ragged gaps need it

        if self._tree is None:
            idx = np.argwhere(np.isfinite(self.values))
            pts = np.stack([np.log2(np.maximum(self.axes[j][idx[:, j]], 1e-9)) for j in range(idx.shape[1])], 1)
            self._tree = (cKDTree(pts), idx)
        tree, idx = self._tree
        qp = np.stack([np.log2(np.maximum(x, 1e-9)) for x in query], 1)
        _, k = tree.query(qp)
        node = idx[k]
        vals = self.values[tuple(node.T)]
        return vals, [self.axes[j][node[:, j]] for j in range(node.shape[1])]


def blend(a: np.ndarray, b: np.ndarray, t: np.ndarray, scale: str) -> np.ndarray:
    """The value a fraction ``t`` of the way from corner ``a`` to ``b``: ``lin`` (1 - t) a + t b, ``sqrt`` the
    same of square roots, squared (``curve-sqrt`` axes pass their warped fraction with ``sqrt``).  Exactly
    a at t = 0 and b at t = 1, non-decreasing in both corners.  A hole on a side that carries weight gives
    NaN (a hole), so the query is answered by the nearest measured point at that point's efficiency
    (:meth:`Grid.lookup`, extrapolated).  Why not the other side's value: the tables' holes are where a
    shape grew too large to measure, so the finite side is the smaller shape and its time alone (decode
    attention at batch 256 answering batch 479) beats the memory roofline."""
    t = np.broadcast_to(t, a.shape)
    with np.errstate(invalid="ignore"):
        mix = (1.0 - t) * a + t * b if scale == "lin" else ((1.0 - t) * np.sqrt(a) + t * np.sqrt(b)) ** 2
    fa, fb = np.isfinite(a), np.isfinite(b)
    out = np.where(t == 0.0, a, np.where(t == 1.0, b, mix))
    return np.where(fa & fb, out, np.where(fa & (t == 0.0), a, np.where(fb & (t == 1.0), b, np.nan)))


def _pchip(ya_out: np.ndarray, ya: np.ndarray, yb: np.ndarray, yb_out: np.ndarray, x: tuple[np.ndarray, ...],
           t: np.ndarray) -> np.ndarray:
    """Fritsch-Carlson monotone cubic between (x_a, ya) and (x_b, yb) at fraction t: its slopes never change
    the sign of the data's secants and stay within three of them, which keeps it monotone where the four
    points are (Fritsch & Carlson 1980; Brodlie's weights, as scipy's PchipInterpolator)."""
    xao, xa, xb, xbo = x
    h = xb - xa
    d = (yb - ya) / h
    sa = _slope((ya - ya_out) / (xa - xao), d, xa - xao, h)
    sb = _slope((yb_out - yb) / (xbo - xb), d, xbo - xb, h)
    t2, t3 = t * t, t * t * t
    return ((2 * t3 - 3 * t2 + 1) * ya + (t3 - 2 * t2 + t) * h * sa + (-2 * t3 + 3 * t2) * yb
            + (t3 - t2) * h * sb)


def _slope(d_out: np.ndarray, d: np.ndarray, h_out: np.ndarray, h: np.ndarray) -> np.ndarray:
    """A node's slope from its outer secant ``d_out`` (width ``h_out``) and the bracket's ``d`` (width ``h``):
    zero at a local extremum, else the weighted harmonic mean; the bracket's secant without an outer point."""
    w1, w2 = 2 * h + h_out, h + 2 * h_out
    with np.errstate(invalid="ignore", divide="ignore"):
        harm = (w1 + w2) / (w1 / d_out + w2 / d)
    s = np.where(d_out * d > 0, harm, 0.0)
    return np.where(np.isfinite(d_out), s, d)
