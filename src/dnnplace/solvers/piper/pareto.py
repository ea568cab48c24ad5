"""The Piper DP's tables as Pareto points, and the one update of them.

``F[I, k, s]`` (PIPER-SPEC 4.5) is kept per tail ``I`` as its Pareto points only: a state
strictly better than with one device fewer and than with one less of ``s``.  While the
walk below ``I`` runs, ``I``'s states live in a dense box ``Fb`` over the window of ``(k, s)``
worth updating (:func:`pareto_update`); :func:`close_box` then closes it and stores its points.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dnnplace.solvers.piper.bundles import Points
from dnnplace.solvers.piper.knapsack import INF
from dnnplace.solvers.piper.stage import cover_bounds, ext_lazy

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


@njit(cache=True)
def pareto_update(Fb, pts, J2, td, d, win, ycap, lazy, base_c, m_it, cap_all, lim, scr):
    """Update the box ``Fb`` of tail ``I`` with the stage ``I - J2`` on ``d`` replicas of ``t`` devices (``td``).

    For each point ``(k - td, s0, g)`` of ``J2``: ``F[I, k, s0 + d] <= max(g, R[y])`` with ``y`` the
    micro-batches in flight, ``ceil((s0 + d) / d)``.  The points of a row are in increasing ``s0``
    (decreasing ``g``) and ``R`` is non-decreasing, so a row's scan stops once ``R[y] >= g``
    (PIPER-SPEC 4.5, "Why this is exact"); ``R`` is INF past ``ycap``.

    ``R`` is the stage table ``scr.r``, or with ``lazy`` (a proportional static stage,
    :func:`~.stage.table_static`) ``base_c + ext[y] / d``, each exact cover computed only
    where its bounds (:func:`~.stage.cover_bounds`) cannot settle the update.
    """
    row_ptr, kmin, pts_s, pts_v = pts.row_ptr, pts.kmin, pts.pts_s, pts.pts_v
    k_lo, k_hi, s_lo, s_hi = win.k_lo, win.k_hi, win.s_lo, win.s_hi
    memory, tau = lim.memory, lim.tau
    r, ext, agg = scr.r, scr.ext, scr.agg
    off = ext.shape[0] // 3
    for k in range(max(td + kmin[J2], k_lo), k_hi + 1):
        kk = k - td
        for q in range(row_ptr[J2, kk], row_ptr[J2, kk + 1]):
            s0 = pts_s[q]
            s1 = s0 + d
            if s1 > s_hi:
                break
            if s1 < s_lo:
                continue
            g = pts_v[q]
            y = (s1 + d - 1) // d
            if y > ycap:
                break
            if lazy:
                need = agg[3] * y + agg[4] - memory
                if need <= 0.0:
                    rv = base_c
                else:
                    ex = ext[y]
                    if ex < 0.0:
                        # bounds first: the exact cover only where they cannot settle the update
                        if ext[off + y] < 0.0:
                            cover_bounds(y, m_it, need, cap_all, s_hi + 1, scr)
                        lo = ext[off + y]
                        if lo >= INF:
                            ycap = y - 1
                            break
                        rv_lo = base_c + lo / d
                        if rv_lo > tau:
                            ycap = y - 1
                            break
                        if base_c + ext[2 * off + y] / d <= g:
                            # R[y] <= g: the new value is g itself
                            if g < Fb[k, s1]:
                                Fb[k, s1] = g
                            continue
                        if rv_lo >= Fb[k, s1]:
                            # no improvement here; stop where R[y] >= g as the exact scan would
                            if rv_lo >= g:
                                break
                            continue
                        ex = ext_lazy(y, need, m_it, cap_all, s_hi + 1, scr)
                    rv = base_c + ex / d if ex < INF else INF
                    if rv > tau:
                        ycap = y - 1  # R is non-decreasing: INF from here on
                        break
            else:
                rv = r[y]
            val = g if g > rv else rv
            if val < Fb[k, s1]:
                Fb[k, s1] = val
            if rv >= g:
                break
