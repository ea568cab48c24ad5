"""One N-axis resolver for every measured table: exact hits, multilinear brackets, bounded extrapolation.

A table is a set of measured points on a rectilinear lattice with holes (collection skips shapes that
run out of memory or time, so sub-grids are ragged).  A query

1. equal to a measured point gets that point's value verbatim (``measured``);
2. inside the lattice gets the blend of the 2^d corners that bracket it, one axis at a time, a hole on a
   side that carries weight making the answer a hole (``interpolated``).  Per axis the rule follows what the
   kernel's cost scales with (docs/kernels.md, chosen per family by leave-one-out, benchmarks/kernels_loo.py):
   ``lin`` blends latency linearly (latency ~ affine: batch, heads, GEMM m/n/k, message bytes); ``sqrt``
   blends square roots of latency (prefill attention's sequence length: latency ~ (a + b seq)^2, the
   quadratic causal term plus the linear projection-free part); ``pchip-sqrt`` is the same square-root
   values through a monotone cubic (Fritsch-Carlson PCHIP) whose slopes also see the next measured point
   on either side, so the curvature of the seq^2 term between two sparse points is followed.  Every rule
   returns a corner exactly at t = 0 / 1 and stays within the range of its two bracketing corners, so the
   interpolation is monotone along an axis where the data are;
3. outside the lattice (or where every bracketing corner is a hole) is answered at the nearest measured
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
    (``lin``, ``sqrt`` or ``pchip-sqrt``, see :func:`blend`)."""

    axes: list[np.ndarray]
    values: np.ndarray
    scale: tuple[str, ...]
    _tree: tuple[Any, np.ndarray] | None = field(default=None, repr=False)

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
            xc = np.clip(x, ax[0], ax[-1])
            clamped |= xc != x
            at.append(xc)
            if len(ax) == 1:
                lo.append(np.zeros(n, dtype=int))
                w_hi.append(np.zeros(n))
                continue
            i = np.clip(np.searchsorted(ax, xc, side="right") - 1, 0, len(ax) - 2)
            a, b = ax[i], ax[i + 1]
            t = (xc - a) / (b - a)
            lo.append(i)
            w_hi.append(np.clip(t, 0.0, 1.0))
        # the 2^d bracketing corners (and, on a ``pchip-sqrt`` axis, the next point outside each), then blended
        # one axis at a time, square-root axes first
        d = len(self.axes)
        corners = np.empty((2,) * d + (n,))
        outer = np.full((2,) * d + (n,), np.nan)
        cubic = [j for j in range(d) if self.scale[j] == "pchip-sqrt" and len(self.axes[j]) > 2]
        for corner in itertools.product((0, 1), repeat=d):
            idx = tuple(lo[j] + (c if len(self.axes[j]) > 1 else 0) for j, c in enumerate(corner))
            corners[corner] = self.values[idx]
            for j in cubic:  # one such axis at most (asserted below): its outer points
                o = lo[j] - 1 if corner[j] == 0 else lo[j] + 2
                inside = (o >= 0) & (o < len(self.axes[j]))
                oidx = list(idx)
                oidx[j] = np.clip(o, 0, len(self.axes[j]) - 1)
                outer[corner] = np.where(inside, self.values[tuple(oidx)], np.nan)
        if len(cubic) > 1:
            raise ValueError("one pchip-sqrt axis per grid")
        order = sorted(range(d), key=lambda j: (self.scale[j] != "pchip-sqrt", self.scale[j] == "lin"))
        v, vo = corners, outer
        exact = np.ones(n, dtype=bool)
        for done, j in enumerate(order):
            axis = j - sum(1 for k in order[:done] if k < j)
            a, b = np.take(v, 0, axis=axis), np.take(v, 1, axis=axis)
            if j in cubic:
                ax = self.axes[j]
                i = lo[j]
                xo_lo = np.where(i >= 1, ax[np.maximum(i - 1, 0)], np.nan)
                xo_hi = np.where(i + 2 < len(ax), ax[np.minimum(i + 2, len(ax) - 1)], np.nan)
                v = blend(a, b, w_hi[j], "pchip-sqrt", np.take(vo, 0, axis=axis), np.take(vo, 1, axis=axis),
                          (xo_lo, ax[i], ax[i + 1], xo_hi))
            else:
                v = blend(a, b, w_hi[j], self.scale[j])
            vo = np.take(vo, 0, axis=axis)  # outer points matter only on the (first-blended) cubic axis
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


def blend(a: np.ndarray, b: np.ndarray, t: np.ndarray, scale: str, a_out: np.ndarray | None = None,
          b_out: np.ndarray | None = None, x: tuple[np.ndarray, ...] | None = None) -> np.ndarray:
    """The value a fraction ``t`` of the way from corner ``a`` to ``b`` by the axis rule ``scale``.

    ``lin``: (1 - t) a + t b; ``sqrt``: the same of square roots, squared; ``pchip-sqrt``: a monotone cubic
    Hermite through the square roots, its end slopes the Fritsch-Carlson weighted harmonic mean of the
    secants on either side (``a_out`` / ``b_out`` at coordinates ``x = (x_a_out, x_a, x_b, x_b_out)``; a
    missing outer point, or a hole there, gives the bracket's own secant).  Exactly a at t = 0 and b at
    t = 1, and clipped into [min(a, b), max(a, b)] (float safety: the cubic never leaves it).  A hole on a
    side that carries weight gives NaN (a hole), so the query is answered by the nearest measured point at
    that point's efficiency (:meth:`Grid.lookup`, extrapolated).  Why not the other side's value: the tables'
    holes are where a shape grew too large to measure, so the finite side is the smaller shape and its time
    alone (decode attention at batch 256 answering batch 479) beats the memory roofline."""
    t = np.broadcast_to(t, a.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        if scale == "lin":
            mix = (1.0 - t) * a + t * b
        elif scale == "sqrt" or a_out is None or b_out is None or x is None:
            mix = ((1.0 - t) * np.sqrt(a) + t * np.sqrt(b)) ** 2
        else:
            mix = _pchip(np.sqrt(a_out), np.sqrt(a), np.sqrt(b), np.sqrt(b_out), x, t) ** 2
        mix = np.clip(mix, np.minimum(a, b), np.maximum(a, b))
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
