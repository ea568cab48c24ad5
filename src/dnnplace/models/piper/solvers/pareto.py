"""The Piper DP's tables as Pareto points, and the one update of them.

``F[I, k, s]`` (PIPER-SPEC 4.5) is kept per tail ``I`` as its Pareto points only: a state
strictly better than with one device fewer and than with one less of ``s``.  While the
walk below ``I`` runs, ``I``'s states live in a dense box ``Fb`` over the window of ``(k, s)``
worth updating (the update is in :func:`~dnnplace.models.piper.solvers.kernel._eval_pair`); :func:`close_box`
then closes it and stores its points.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dnnplace.models.piper.solvers.bundles import Points
from dnnplace.models.piper.solvers.knapsack import INF

S_BIG = 1 << 40  # s_span of a tail with no points: above every s


@njit(cache=True)
def close_box(Fb, I, K, win, pts, npts, s_span):
    """Monotone closure of the box ``Fb[k_lo:k_hi + 1, s_lo:s_hi + 1]`` (tail ``I``; no plan of it within
    ``tau`` has fewer devices or a smaller sum of d), then store its Pareto points.

    A point is a state strictly better than with one device fewer and than with one less
    of s; every other state is matched by one of them (the closure carries it over), so
    only the points are kept: the DP tables never exist in full.  Returns the points
    (their arrays grown when needed) and their new count.
    """
    k_lo, k_hi, s_lo, s_hi = win.k_lo, win.k_hi, win.s_lo, win.s_hi
    row_ptr, kmin, pts_s, pts_v = pts.row_ptr, pts.kmin, pts.pts_s, pts.pts_v
    for k in range(k_lo, k_hi + 1):
        for s in range(s_lo, s_hi + 1):
            v = Fb[k, s]
            if k > k_lo and Fb[k - 1, s] < v:
                v = Fb[k - 1, s]
            if s > s_lo and Fb[k, s - 1] < v:
                v = Fb[k, s - 1]
            Fb[k, s] = v
    need = npts + (k_hi + 1) * (s_hi + 1)
    if need > pts_s.shape[0]:
        cap = max(2 * pts_s.shape[0], need)
        ns = np.empty(cap, dtype=np.int32)
        nv = np.empty(cap)
        ns[:npts] = pts_s[:npts]
        nv[:npts] = pts_v[:npts]
        pts_s = ns
        pts_v = nv
    kmin[I] = K + 1
    s_span[I, 0] = S_BIG
    s_span[I, 1] = 0
    for k in range(K + 1):
        row_ptr[I, k] = npts
        if k > k_hi or k < k_lo:
            continue
        for s in range(s_lo, s_hi + 1):
            v = Fb[k, s]
            if v >= INF:
                continue
            if s > s_lo and not v < Fb[k, s - 1]:
                continue
            if k > k_lo and not v < Fb[k - 1, s]:
                continue
            pts_s[npts] = s
            pts_v[npts] = v
            npts += 1
            if s < s_span[I, 0]:
                s_span[I, 0] = s
            if s > s_span[I, 1]:
                s_span[I, 1] = s
        if kmin[I] > K and npts > row_ptr[I, k]:
            kmin[I] = k
    row_ptr[I, K + 1] = npts
    return Points(row_ptr, kmin, pts_s, pts_v), npts


@njit(cache=True)
def query(J, k, s, K, pts):
    """``F[J, k, s]``: the best value over the points of ``J`` with at most ``k`` devices and ``s``."""
    row_ptr, pts_s, pts_v = pts.row_ptr, pts.pts_s, pts.pts_v
    best = INF
    kk = k if k < K else K
    for r in range(kk + 1):
        for p in range(row_ptr[J, r], row_ptr[J, r + 1]):
            if pts_s[p] > s:
                break
            if pts_v[p] < best:
                best = pts_v[p]
    return best
