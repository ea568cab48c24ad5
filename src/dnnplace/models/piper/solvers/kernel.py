"""The compiled core of the Piper planner (numba, cached on disk).

Ideals here are *tails* of the pipeline (closed under successors), found by the
shared :func:`~dnnplace.models.paper.solvers.dp.ideals.enumerate_ideals` on the reversed
graph, so every cover ``J = I - {x}`` removes a node ``x`` whose predecessors
are all outside ``J``: ``x`` joins the front stage ``S = I - J``.

For each ideal ``I`` (in id order: sub-ideals first) a depth-first walk down the
cover relation visits every sub-ideal ``J`` once, growing ``S`` one node at a
time.  Per-node boundary bytes ``e[v, t, option]`` are kept up to date as nodes
enter and leave ``S`` (only ``x`` and its predecessors in ``S`` change), so no
pair is ever stored.  The walk stops descending once ``S`` cannot fit in memory
for any ``t`` (even with every node at its smallest footprint and one
micro-batch in flight) or is slower than the bound ``tau`` for every ``t`` even
at the largest data-parallel degree: both only get worse as ``S`` grows.

Per pair and ``(t, d)`` the stage table ``R[y]`` (best stage time with ``y``
micro-batches in flight) is exact (:func:`~.knapsack.min_cover`), hence
non-decreasing in ``y``; values above ``tau`` are cut to INF, which keeps it
non-decreasing.  The DP state ``F[I, k, s]`` is the best bottleneck time of the
tail ``I`` on at most ``k`` devices with at most ``s`` as the sum of its
data-parallel degrees (PIPER-SPEC 4.5).  With a non-decreasing table the update
only needs the points where ``F[J, k - t d, .]`` drops, scanned until the stage
table dominates; this is exact (PIPER-SPEC 4.5, "Why this is exact").

Layout: this module is the DP driver (the walk over tails, which stages get tables,
reconstruction); :mod:`.stage` evaluates one stage, :mod:`.pareto` holds the tables as
Pareto points, :mod:`.bundles` names the arguments.  The one update of a tail's states
from a stage table is in :func:`_eval_pair`, for both kinds of table.  The walk
(start, next unseen cover, descend) is :mod:`dnnplace.models.paper.solvers.lattice_walk`, shared with
the paper's DP (:mod:`dnnplace.models.paper.solvers.dp.kernel`).
"""


from __future__ import annotations

import numpy as np
from numba import njit

from dnnplace.models.paper.solvers import lattice_walk as walk
from dnnplace.models.piper.solvers.bundles import Points, Window, new_scratch, new_stage
from dnnplace.models.piper.solvers.knapsack import INF
from dnnplace.models.piper.solvers.pareto import S_BIG, close_box, query
from dnnplace.models.piper.solvers.stage import (
    cover_bounds,
    ext_lazy,
    gather_static,
    prop_setup,
    stage_edges,
    tables_for_t,
)

__all__ = ["S_BIG", "dev_lb", "find_step", "ideal_sums", "query", "run_dp"]


@njit(cache=True)
def ideal_sums(down_ptr, down_ideal, down_unit, nodeval):
    """``out[I] = sum of nodeval[v] over v in I`` (per column), via one cover per ideal."""
    n_i = down_ptr.shape[0] - 1
    out = np.zeros((n_i, nodeval.shape[1]), dtype=nodeval.dtype)
    for i in range(1, n_i):
        e = down_ptr[i]
        j = down_ideal[e]
        x = down_unit[e]
        for c in range(nodeval.shape[1]):
            out[i, c] = out[j, c] + nodeval[x, c]
    return out


@njit(cache=True, inline="always")
def dev_lb(x, tau):
    """A lower bound on the devices (or data-parallel sum) that ``x`` device-seconds need within ``tau``."""
    if tau >= INF or x <= 0.0:
        return 0
    q = x / tau
    return int(np.ceil(q * (1.0 - 1e-9) - 1e-9))


@njit(cache=True, inline="always")
def _s_feasible_any(I, J, n_t, miss_sum, pmin_sum, mmin_sum, dmax_t, memory, tau):
    """Can the stage ``I - J`` meet memory and ``tau`` for some ``t`` (monotone in the stage)?"""
    for ti in range(n_t):
        if dmax_t[ti] == 0 or miss_sum[I, ti] != miss_sum[J, ti]:
            continue
        mm = mmin_sum[I, ti] - mmin_sum[J, ti]
        if mm > memory * (1.0 + 1e-9):
            continue
        pm = pmin_sum[I, ti] - pmin_sum[J, ti]
        if pm / dmax_t[ti] > tau * (1.0 + 1e-9) + 1e-300:
            continue
        return True
    return False


@njit(cache=True)
def _eval_pair(I, J2, sp, stg, graph, opts, tails, lim, win, pts, s_span, Fb, scr):
    """All (t, d) stage tables of the stage ``stg.xs[:sp] = I - J2`` and their DP updates into ``Fb``."""
    tvals, divs, dmax_t = opts.tvals, opts.divs, opts.dmax_t
    miss_sum, nonstatic_sum, pmin_sum = tails.miss_sum, tails.nonstatic_sum, tails.pmin_sum
    big_n, bw, tau = lim.big_n, lim.bw, lim.tau
    k_hi, s_hi = win.k_hi, win.s_hi
    row_ptr, kmin, pts_s, pts_v = pts.row_ptr, pts.kmin, pts.pts_s, pts.pts_v
    k_lo, s_lo, memory = win.k_lo, win.s_lo, lim.memory
    agg, r, ext = scr.agg, scr.r, scr.ext
    off = ext.shape[0] // 3
    n_t = tvals.shape[0]
    n_d = divs.shape[0]
    if kmin[J2] > k_hi:
        return 0  # the rest cannot be planned within the window
    tables = 0
    fresh = False
    for ti in range(n_t):
        if miss_sum[I, ti] != miss_sum[J2, ti]:
            continue
        t = tvals[ti]
        if t + kmin[J2] > k_hi:
            break
        d_lo = (pmin_sum[I, ti] - pmin_sum[J2, ti]) / tau if tau < INF else 0.0
        if d_lo > dmax_t[ti] * (1.0 + 1e-9):
            continue
        viable = False
        for di in range(n_d):
            d = divs[di]
            if d > dmax_t[ti] or t * d + kmin[J2] > k_hi:
                break
            if d >= d_lo * (1.0 - 1e-9):
                viable = True
                break
        if not viable:
            continue
        if not fresh:
            stage_edges(stg, sp, graph, n_t)
            fresh = True
        static = nonstatic_sum[I, ti] == nonstatic_sum[J2, ti]
        m_it = 0
        cap_all = 0.0
        prop = False
        if static:
            m_it = gather_static(stg, sp, ti, opts, scr)
            if agg[5] > 0.0:
                prop = True
                cap_all = prop_setup(m_it, ti, t, d_lo, kmin[J2], k_hi, s_hi, opts, lim, scr)
        for di in range(n_d):
            d = divs[di]
            if d > dmax_t[ti]:
                break
            if d < d_lo * (1.0 - 1e-9):
                continue
            td = t * d
            if td + kmin[J2] > k_hi:
                break
            # only the y that the points of J2 can ask for: 1 + ceil(s0 / d) over their s0
            y_top = (s_hi + d - 1) // d
            y_hi = 1 + (s_span[J2, 1] + d - 1) // d
            if y_hi < y_top:
                y_top = y_hi
            y_from = 1 + (s_span[J2, 0] + d - 1) // d
            if y_from > y_top:
                continue
            tables += 1
            base_c = 0.0
            if prop:
                # the table R[y] = base + ext[y] / d is never built: each R[y] the update asks
                # for is computed then (its exact cover once per stage and y, for every d)
                if d == 1:
                    base_c = agg[0] / bw + agg[1]
                else:
                    base_c = (agg[0] / d + 4.0 * (d - 1) * agg[2] / (d * big_n)) / bw + agg[1] / d
                if base_c > tau:
                    continue
                ycap = y_top
            else:
                ycap = tables_for_t(stg, sp, ti, d, y_top, y_from, static, m_it, cap_all, opts, lim, scr)
                if ycap == 0:
                    continue
            # The one update of the box from the points (k - td, s0, g) of J2: F[I, k, s0 + d] <= max(g, R[y]),
            # y = ceil((s0 + d) / d) micro-batches in flight.  A row's points come in increasing s0 (decreasing g)
            # and R is non-decreasing, so its scan stops once R[y] >= g (PIPER-SPEC 4.5, "Why this is exact");
            # R is INF past ycap.  R is the table scr.r, or for a proportional stage base_c + ext[y] / d, each
            # exact cover computed only where its bounds (stage.cover_bounds) cannot settle the update.
            # (Written here, not as a function: the call, with the scratch bundle, was measurably slower;
            # see docs/dev/solver_policy.md.)
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
                    if prop:
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
    return tables


@njit(cache=True, nogil=True)
def run_dp(tails, g, opts, lim, row_ptr, kmin, ctl):
    """Run the DP; return (pairs visited, stage tables built, point s, point values, point count).

    It runs without the GIL, in a thread of its caller, and talks to it through
    ``ctl``: it writes the tail it is at to ``ctl[1]`` (progress), and when
    ``ctl[0]`` is set (Ctrl-C, a deadline) it stops before the next tail and
    sets ``ctl[2]`` (the tables are then incomplete).

    The points of ideal ``I`` and ``k`` devices are ``[row_ptr[I, k], row_ptr[I, k + 1])``.

    ``wp_sum[I]`` = (device-seconds, least compute) of the tail ``I``: the front
    ``V - I`` needs at least ``dev_lb`` of them devices (and data-parallel sum) to
    stay within ``tau``, which bounds the ``(k, s)`` window worth updating.
    """
    down_ptr, down_ideal, down_unit = tails.down_ptr, tails.down_ideal, tails.down_unit
    miss_sum, pmin_sum, mmin_sum = tails.miss_sum, tails.pmin_sum, tails.mmin_sum
    mmin2_sum, wp_sum = tails.mmin2_sum, tails.wp_sum
    tvals, divs, dmax_t = opts.tvals, opts.divs, opts.dmax_t
    K, memory, tau, S = lim.K, lim.memory, lim.tau, lim.S
    in_ptr = g.in_ptr
    n = in_ptr.shape[0] - 1
    n_i = down_ptr.shape[0] - 1
    n_t = tvals.shape[0]
    full = n_i - 1
    pts_s = np.empty(max(1024, 16 * n_i), dtype=np.int32)
    pts_v = np.empty(max(1024, 16 * n_i))
    pts_s[0] = 0  # the empty tail: value 0 with no devices
    pts_v[0] = 0.0
    npts = 1
    row_ptr[0, 0] = 0
    for k in range(1, K + 2):
        row_ptr[0, k] = 1
    kmin[0] = 0
    Fb = np.empty((K + 1, S + 1))
    s_span = np.zeros((n_i, 2), dtype=np.int64)  # least and largest s over each tail's points
    stg = new_stage(n, n_t)
    xs, in_s = stg.xs, stg.in_s
    stamp = np.full(n_i, -1, dtype=np.int64)
    stack_j = np.empty(n + 2, dtype=np.int64)
    stack_e = np.empty(n + 2, dtype=np.int64)
    scr = new_scratch(n, S)
    pts = Points(row_ptr, kmin, pts_s, pts_v)
    pairs = 0
    tables = 0
    for I in range(1, n_i):
        ctl[1] = I
        if ctl[0] != 0:
            ctl[2] = 1
            break
        k_front = dev_lb(wp_sum[full, 0] - wp_sum[I, 0], tau)
        s_front = dev_lb(wp_sum[full, 1] - wp_sum[I, 1], tau)
        k_hi = K - k_front
        s_hi = S - s_front
        k_lo = max(1, dev_lb(wp_sum[I, 0], tau))
        s_lo = max(1, dev_lb(wp_sum[I, 1], tau))
        if k_hi < k_lo or s_hi < s_lo:
            kmin[I] = K + 1
            for k in range(K + 2):
                row_ptr[I, k] = npts
            s_span[I, 0] = S_BIG
            continue
        win = Window(k_lo, k_hi, s_lo, s_hi)
        for k in range(k_lo, k_hi + 1):
            for s in range(s_lo, s_hi + 1):
                Fb[k, s] = INF
        sp = walk.start(I, stamp, stack_j, stack_e, down_ptr)
        while sp >= 0:
            e = walk.next_cover(sp, I, stamp, stack_j, stack_e, down_ptr, down_ideal)
            if e < 0:
                sp -= 1
                if sp >= 0:
                    in_s[xs[sp]] = 0
            else:
                J2 = down_ideal[e]
                # with later stages (J2 not empty) at least 2 micro-batches are in flight: if even that
                # does not fit, only the single stage I (J = empty, y = 1) is left, handled after the walk
                if J2 != 0:
                    if not _s_feasible_any(I, J2, n_t, miss_sum, pmin_sum, mmin2_sum, dmax_t, memory, tau):
                        continue
                elif not _s_feasible_any(I, J2, n_t, miss_sum, pmin_sum, mmin_sum, dmax_t, memory, tau):
                    continue
                if dev_lb(wp_sum[I, 0] - wp_sum[J2, 0], tau) > k_hi:
                    continue
                if dev_lb(wp_sum[I, 1] - wp_sum[J2, 1], tau) > s_hi:
                    continue
                x = down_unit[e]
                in_s[x] = 1
                xs[sp] = x
                sp = walk.descend(sp, J2, stack_j, stack_e, down_ptr)
                pairs += 1
                if kmin[J2] > k_hi:
                    continue  # the rest cannot be planned within the window
                # is some (t, d) worth a table?  (checked here, not in the call: calls cost)
                viable = False
                for ti in range(n_t):
                    if miss_sum[I, ti] != miss_sum[J2, ti]:
                        continue
                    t = tvals[ti]
                    if t + kmin[J2] > k_hi:
                        break
                    d_lo = (pmin_sum[I, ti] - pmin_sum[J2, ti]) / tau if tau < INF else 0.0
                    for di in range(divs.shape[0]):
                        d = divs[di]
                        if d > dmax_t[ti] or t * d + kmin[J2] > k_hi:
                            break
                        if d >= d_lo * (1.0 - 1e-9):
                            viable = True
                            break
                    if viable:
                        break
                if not viable:
                    continue
                tables += _eval_pair(I, J2, sp, stg, g, opts, tails, lim, win, pts, s_span, Fb, scr)
        if stamp[0] != I and _s_feasible_any(I, 0, n_t, miss_sum, pmin_sum, mmin_sum, dmax_t, memory, tau):
            # the one-stage plan of I: its nodes along one chain of covers down to the empty tail
            sp = 0
            J = I
            while J != 0:
                x = down_unit[down_ptr[J]]
                xs[sp] = x
                in_s[x] = 1
                sp += 1
                J = down_ideal[down_ptr[J]]
            pairs += 1
            tables += _eval_pair(I, 0, sp, stg, g, opts, tails, lim, win, pts, s_span, Fb, scr)
            for q in range(sp):
                in_s[xs[q]] = 0
        pts, npts = close_box(Fb, I, K, win, pts, npts, s_span)
    return pairs, tables, pts.pts_s, pts.pts_v, npts


@njit(cache=True)
def find_step(cur, ck, cs, target, tails, g, opts, lim, pts, out_nodes):
    """A first stage of ``cur`` for a plan of value <= ``target`` on <= ``ck`` devices, sum of d <= ``cs``.

    Returns (J, t index, d, s used by the stage and the rest, number of stage nodes in
    ``out_nodes``), or J = -1 if none (which the DP rules out).
    """
    down_ptr, down_ideal, down_unit = tails.down_ptr, tails.down_ideal, tails.down_unit
    miss_sum, nonstatic_sum, pmin_sum, mmin_sum = tails.miss_sum, tails.nonstatic_sum, tails.pmin_sum, tails.mmin_sum
    tvals, divs, dmax_t = opts.tvals, opts.divs, opts.dmax_t
    K, memory, tau, S = lim.K, lim.memory, lim.tau, lim.S
    in_ptr, kmin = g.in_ptr, pts.kmin
    n = in_ptr.shape[0] - 1
    n_i = down_ptr.shape[0] - 1
    n_t = tvals.shape[0]
    n_d = divs.shape[0]
    stg = new_stage(n, n_t)
    xs, in_s = stg.xs, stg.in_s
    stamp = np.full(n_i, -1, dtype=np.int64)
    stack_j = np.empty(n + 2, dtype=np.int64)
    stack_e = np.empty(n + 2, dtype=np.int64)
    scr = new_scratch(n, S)
    r, agg = scr.r, scr.agg
    goal = target * (1.0 + 1e-12)
    sp = walk.start(cur, stamp, stack_j, stack_e, down_ptr)
    while sp >= 0:
        e = walk.next_cover(sp, cur, stamp, stack_j, stack_e, down_ptr, down_ideal)
        if e < 0:
            sp -= 1
            if sp >= 0:
                in_s[xs[sp]] = 0
        else:
            J2 = down_ideal[e]
            if not _s_feasible_any(cur, J2, n_t, miss_sum, pmin_sum, mmin_sum, dmax_t, memory, tau):
                continue
            x = down_unit[e]
            in_s[x] = 1
            xs[sp] = x
            sp = walk.descend(sp, J2, stack_j, stack_e, down_ptr)
            if kmin[J2] + tvals[0] > ck:
                continue  # no devices left for the rest
            stage_edges(stg, sp, g, n_t)
            for ti in range(n_t):
                if miss_sum[cur, ti] != miss_sum[J2, ti]:
                    continue
                t = tvals[ti]
                static = nonstatic_sum[cur, ti] == nonstatic_sum[J2, ti]
                m_it = 0
                cap_all = 0.0
                if static:
                    m_it = gather_static(stg, sp, ti, opts, scr)
                    if agg[5] > 0.0:
                        cap_all = prop_setup(m_it, ti, t, 0.0, 0, ck, cs, opts, lim, scr)
                for di in range(n_d):
                    d = divs[di]
                    if d > dmax_t[ti] or t * d > ck or d > cs:
                        break
                    y_top = (cs + d - 1) // d
                    ycap = tables_for_t(stg, sp, ti, d, y_top, 1, static, m_it, cap_all, opts, lim, scr)
                    ystar = 0
                    for y in range(1, ycap + 1):
                        if r[y] <= goal:
                            ystar = y
                        else:
                            break
                    if ystar == 0:
                        continue
                    s1 = d * ystar
                    if s1 > cs:
                        s1 = cs
                    if query(J2, ck - t * d, s1 - d, K, pts) <= goal:
                        for q in range(sp):
                            out_nodes[q] = xs[q]
                        return J2, ti, d, s1, sp
    return -1, -1, -1, -1, 0
