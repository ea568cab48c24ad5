"""One N-axis resolver for every measured table: exact hits, multilinear brackets, bounded extrapolation.

A table is a set of measured points on a rectilinear lattice with holes (collection skips shapes that
run out of memory or time, so sub-grids are ragged).  A query

1. equal to a measured point gets that point's value verbatim (``measured``);
2. inside the lattice gets the multilinear blend of the 2^d corners that bracket it, holes dropped and
   the weights renormalised (``interpolated``); monotone where the data are, because a blend never leaves
   the range of its corners.  Per axis, the blend runs in a coordinate chosen by the physics of the axis:
   ``lin`` (latency ~ linear: batch, heads, GEMM m/n/k, message bytes) or ``sq`` (latency ~ square:
   prefill attention's sequence length), so a kernel whose cost is a product of such terms is
   reproduced exactly between nodes;
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
    """Measured values on a rectilinear lattice (``axes``) with NaN holes; ``scale[j]`` is ``lin`` or ``sq``."""

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

    def _coord(self, j: int, x: np.ndarray) -> np.ndarray:
        return x * x if self.scale[j] == "sq" else x

    def lookup(self, query: list[np.ndarray]) -> Lookup:
        """Resolve queries (one array per axis, broadcast together)."""
        full = np.broadcast_arrays(*[np.asarray(x, dtype=float) for x in query])
        shape = full[0].shape
        q = [x.ravel() for x in full]
        n = q[0].size
        lo, w_hi, clamped = [], [], np.zeros(n, dtype=bool)
        at = []
        for j, (ax, x) in enumerate(zip(self.axes, q)):
            xc = np.clip(x, ax[0], ax[-1])
            clamped |= xc != x
            at.append(xc)
            if len(ax) == 1:
                lo.append(np.zeros(n, dtype=int))
                w_hi.append(np.zeros(n))
                continue
            i = np.clip(np.searchsorted(ax, xc, side="right") - 1, 0, len(ax) - 2)
            a, b = self._coord(j, ax[i]), self._coord(j, ax[i + 1])
            t = (self._coord(j, xc) - a) / (b - a)
            lo.append(i)
            w_hi.append(np.clip(t, 0.0, 1.0))
        total = np.zeros(n)
        weight = np.zeros(n)
        exact = np.zeros(n, dtype=bool)
        for corner in itertools.product((0, 1), repeat=len(self.axes)):
            w = np.ones(n)
            idx = []
            for j, c in enumerate(corner):
                if len(self.axes[j]) == 1:
                    if c:
                        w = np.zeros(n)
                    idx.append(lo[j])
                    continue
                w = w * (w_hi[j] if c else 1.0 - w_hi[j])
                idx.append(lo[j] + c)
            v = self.values[tuple(idx)]
            ok = np.isfinite(v) & (w > 0)
            total += np.where(ok, w * np.where(ok, v, 0.0), 0.0)
            weight += np.where(ok, w, 0.0)
            exact |= ok & (w == 1.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(weight > 0, total / np.where(weight > 0, weight, 1.0), np.nan)
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
