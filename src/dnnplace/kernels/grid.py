"""One N-axis resolver for every measured table: exact hits, multilinear brackets, bounded extrapolation.

A table is a set of measured points on a rectilinear lattice with holes (collection skips shapes that
run out of memory or time, so sub-grids are ragged).  A query

1. equal to a measured point gets that point's value verbatim (``measured``);
2. inside the lattice gets the multilinear blend of the 2^d corners that bracket it, one axis at a time,
   a hole dropped and its side's weight given to the other (``interpolated``); monotone where the data
   are, because a blend never leaves the range of its corners.  Per axis the blend runs on ``lin`` values
   (latency ~ linear: batch, heads, GEMM m/n/k, message bytes) or on their square roots (``sqrt``: prefill
   attention's sequence length, where latency ~ seq^2), the two chosen by leave-one-out
   (benchmarks/kernels_loo.py);
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

__all__ = ["Grid", "Lookup"]


@dataclass(frozen=True)
class Lookup:
    """Values at the answering place, that place's coordinates per axis, and the source code per query."""

    values: np.ndarray
    at: list[np.ndarray]
    code: np.ndarray


@dataclass
class Grid:
    """Measured values on a rectilinear lattice (``axes``) with NaN holes; ``scale[j]`` is ``lin`` or ``sqrt``."""

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
        # the 2^d bracketing corners, then blended one axis at a time (sqrt-value axes first)
        corners = np.empty((2,) * len(self.axes) + (n,))
        for corner in itertools.product((0, 1), repeat=len(self.axes)):
            idx = tuple(lo[j] + (c if len(self.axes[j]) > 1 else 0) for j, c in enumerate(corner))
            corners[corner] = self.values[idx]
        order = sorted(range(len(self.axes)), key=lambda j: self.scale[j] != "sqrt")
        v = corners
        exact = np.ones(n, dtype=bool)
        for done, j in enumerate(order):
            axis = j - sum(1 for k in order[:done] if k < j)
            a, b = np.take(v, 0, axis=axis), np.take(v, 1, axis=axis)
            v = _blend(a, b, w_hi[j], self.scale[j] == "sqrt")
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


def _blend(a: np.ndarray, b: np.ndarray, t: np.ndarray, sqrt: bool) -> np.ndarray:
    """(1 - t) a + t b (of square roots, squared, on a ``sqrt`` axis); exactly a at t = 0 and b at t = 1; a hole
    on a side that carries weight gives NaN (a hole), so the query is answered by the nearest measured point
    at that point's efficiency (:meth:`Grid.lookup`, extrapolated).  Why not the other side's value: the
    tables' holes are where a shape grew too large to measure, so the finite side is the smaller shape and
    its time alone (decode attention at batch 256 answering batch 479) beats the memory roofline."""
    t = np.broadcast_to(t, a.shape)
    with np.errstate(invalid="ignore"):
        mix = ((1.0 - t) * np.sqrt(a) + t * np.sqrt(b)) ** 2 if sqrt else (1.0 - t) * a + t * b
    fa, fb = np.isfinite(a), np.isfinite(b)
    out = np.where(t == 0.0, a, np.where(t == 1.0, b, mix))
    return np.where(fa & fb, out, np.where(fa & (t == 0.0), a, np.where(fb & (t == 1.0), b, np.nan)))
