"""The compiled core of the Piper planner (numba, cached on disk).

Ideals here are *tails* of the pipeline (closed under successors), found by the
shared :func:`~dnnplace.solvers.dp.ideals.enumerate_ideals` on the reversed
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
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dnnplace.solvers.piper.knapsack import INF, min_cover, min_cover_sorted

S_BIG = 1 << 40


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
def _recompute_e(v, in_s, in_ptr, in_edge, out_ptr, out_edge, esrc, edst, ecost, fwe, bwe, e_s, n_t):
    for ti in range(n_t):
        for lo in range(2):
            tot = 0.0
            for q in range(in_ptr[v], in_ptr[v + 1]):
                e = in_edge[q]
                if in_s[esrc[e]] == 0:
                    tot += 2.0 * (ecost[e] + fwe[e, ti, lo])
            for q in range(out_ptr[v], out_ptr[v + 1]):
                e = out_edge[q]
                if in_s[edst[e]] == 0:
                    tot += 2.0 * (ecost[e] + bwe[e, ti, lo])
            e_s[v, ti, lo] = tot


@njit(cache=True)
def _toggle(x, adding, in_s, in_ptr, in_edge, out_ptr, out_edge, esrc, edst, ecost, fwe, bwe, e_s, n_t):
    in_s[x] = 1 if adding else 0
    if adding:
        _recompute_e(x, in_s, in_ptr, in_edge, out_ptr, out_edge, esrc, edst, ecost, fwe, bwe, e_s, n_t)
    for q in range(in_ptr[x], in_ptr[x + 1]):
        u = esrc[in_edge[q]]
        if in_s[u] == 1:
            _recompute_e(u, in_s, in_ptr, in_edge, out_ptr, out_edge, esrc, edst, ecost, fwe, bwe, e_s, n_t)


@njit(cache=True)
def stage_table(xs, n_s, ti, d, y_top, e_s, nopt, pp, ww, aa, bb, big_n, bw, memory, tau, r_out,
                it_c, it_da, it_db, kc, ks, w1, w2, w3, w4, y_from=1):
    """Fill ``r_out[1..y_top]`` with the exact best stage time; return the last finite ``y`` (0: none).

    The stage is ``xs[:n_s]`` on ``d`` replicas of width ``t`` (index ``ti``).  Values above
    ``tau`` count as INF; the table is non-decreasing, so it is INF past the returned ``y``.
    """
    base_c = 0.0
    base_a = 0.0
    base_b = 0.0
    m = 0
    for q in range(n_s):
        v = xs[q]
        best_l = -1
        best_c = 0.0
        for lo in range(nopt[v, ti]):
            w = ww[v, ti, lo]
            c = (e_s[v, ti, lo] / d + 4.0 * (d - 1) * w / (d * big_n)) / bw + pp[v, ti, lo] / d
            if d == 1:
                c = e_s[v, ti, lo] / bw + pp[v, ti, lo]
            if best_l < 0 or c < best_c or (c == best_c and (aa[v, ti, lo] < aa[v, ti, best_l] or (
                    aa[v, ti, lo] == aa[v, ti, best_l] and bb[v, ti, lo] < bb[v, ti, best_l]))):
                best_l = lo
                best_c = c
        base_c += best_c
        base_a += aa[v, ti, best_l]
        base_b += bb[v, ti, best_l]
        if nopt[v, ti] == 2:
            o = 1 - best_l
            da = aa[v, ti, best_l] - aa[v, ti, o]
            db = bb[v, ti, best_l] - bb[v, ti, o]
            if da > 0.0 or db > 0.0:
                w = ww[v, ti, o]
                c = (e_s[v, ti, o] / d + 4.0 * (d - 1) * w / (d * big_n)) / bw + pp[v, ti, o] / d
                if d == 1:
                    c = e_s[v, ti, o] / bw + pp[v, ti, o]
                it_c[m] = c - best_c
                it_da[m] = da
                it_db[m] = db
                m += 1
    if base_c > tau:
        return 0
    last = 0.0
    for y in range(y_from, y_top + 1):
        mem = base_a * y + base_b
        if mem <= memory:
            r_out[y] = base_c
            last = base_c
            continue
        need = mem - memory
        k = 0
        tot = 0.0
        for i in range(m):
            s = it_da[i] * y + it_db[i]
            if s > 0.0:
                kc[k] = it_c[i]
                ks[k] = s
                tot += s
                k += 1
        if tot < need:
            return y - 1
        extra = min_cover(kc, ks, k, need, tau - base_c, w1, w2, w3, w4)
        if extra >= INF:
            return y - 1
        val = base_c + extra
        if val > tau:
            return y - 1
        if val < last:
            val = last  # exact values never decrease in y; guard against rounding
        r_out[y] = val
        last = val
    return y_top


@njit(cache=True)
def gather_static(xs, n_s, ti, e_s, fast, nopt, pp, ww, aa, bb, agg, it_de, it_dp, it_dw, it_da, it_db):
    """Sums of the stage at each node's fixed fastest option, and the memory-saving switches.

    Only for stages whose nodes all have a fastest option independent of the stage
    and of ``d`` (``fast >= 0``).  ``agg`` = (edge bytes, compute, weights, a, b).
    Returns the number of switches.
    """
    e_f = 0.0
    p_f = 0.0
    w_f = 0.0
    a_f = 0.0
    b_f = 0.0
    m = 0
    for q in range(n_s):
        v = xs[q]
        f = fast[v, ti]
        e_f += e_s[v, ti, f]
        p_f += pp[v, ti, f]
        w_f += ww[v, ti, f]
        a_f += aa[v, ti, f]
        b_f += bb[v, ti, f]
        if nopt[v, ti] == 2:
            o = 1 - f
            da = aa[v, ti, f] - aa[v, ti, o]
            db = bb[v, ti, f] - bb[v, ti, o]
            if da > 0.0 or db > 0.0:
                it_de[m] = e_s[v, ti, o] - e_s[v, ti, f]
                it_dp[m] = pp[v, ti, o] - pp[v, ti, f]
                it_dw[m] = ww[v, ti, o] - ww[v, ti, f]
                it_da[m] = da
                it_db[m] = db
                m += 1
    agg[0] = e_f
    agg[1] = p_f
    agg[2] = w_f
    agg[3] = a_f
    agg[4] = b_f
    # proportional: every switch costs extra compute only, so its cost scales as 1/d and one
    # exact cover per y serves every d
    prop = 1.0
    for i in range(m):
        if it_de[i] != 0.0 or it_dw[i] != 0.0:
            prop = 0.0
            break
    agg[5] = prop
    return m


@njit(cache=True, inline="always")
def _ratio_sort(order, ratio, m):
    """Insertion sort of ``order[:m]`` by ``ratio``; cheap because ``order`` persists between
    calls for one stage (across ``y`` and ``d``), so it is nearly sorted already."""
    for i in range(1, m):
        oi = order[i]
        ri = ratio[oi]
        j = i - 1
        while j >= 0 and ratio[order[j]] > ri:
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = oi


@njit(cache=True)
def _ext_cover(y, m, need, cap, it_dp, it_da, it_db, kc, ks, ratio, order, cum_s, cum_c, w1, w2, w3, w4, lower):
    """Exact extra compute (at d = 1) of the cheapest memory-saving switches at ``y``; INF above ``cap``.

    ``order`` persists between calls for one stage, so the ratio sort is nearly sorted already.
    """
    tot = 0.0
    for i in range(m):
        sv = it_da[i] * y + it_db[i]
        ratio[i] = it_dp[i] / sv if sv > 0.0 else np.inf
        if sv > 0.0:
            tot += sv
    if tot < need:
        return INF
    _ratio_sort(order, ratio, m)
    k = 0
    for q in range(m):
        i = order[q]
        sv = it_da[i] * y + it_db[i]
        if sv <= 0.0:
            break
        c = it_dp[i]
        kc[k] = c if c > 0.0 else 0.0
        ks[k] = sv
        k += 1
    return min_cover_sorted(kc, ks, k, need, cap, cum_s, cum_c, w1, w2, w3, w4, lower)


@njit(cache=True)
def _ext_lazy(y, need, m, cap, it_dp, it_da, it_db, kc, ks, ratio, order, cum_s, cum_c, w1, w2, w3, w4, ext, y_lim):
    """``ext[y]`` (see :func:`_ext_cover`) computed on demand and stored; ``ext < 0`` marks unknown.

    Exact covers never decrease in ``y``; the nearest known value below is a lower bound
    (a greedy cover that meets it is optimal), and the stored value is kept between its
    known neighbours so that rounding cannot make the table decrease.  ``ext[:y_lim + 1]``
    is initialised (by :func:`_prop_setup`).
    """
    lower = 0.0
    for yy in range(y - 1, 0, -1):
        if ext[yy] >= 0.0:
            lower = ext[yy]
            break
    val = _ext_cover(y, m, need, cap, it_dp, it_da, it_db, kc, ks, ratio, order, cum_s, cum_c,
                     w1, w2, w3, w4, lower)
    if val < lower:
        val = lower
    for yy in range(y + 1, y_lim + 1):
        if ext[yy] >= 0.0:
            if ext[yy] < val:
                val = ext[yy]
            break
    ext[y] = val
    return val


@njit(cache=True)
def _cover_bounds(y, m, need, cap, it_dp, it_da, it_db, ratio, order, ext, y_lim):
    """Store bounds on ``ext[y]`` (see :func:`_ext_lazy`) in ``ext[off + y]`` (lower) and
    ``ext[2 off + y]`` (upper), ``off = len(ext) // 3``: the fractional (LP) cover and the
    greedy cover in ratio order, tightened by the exact values known at other ``y`` (exact
    covers never decrease in ``y``).  Where they meet, the exact value is stored too.
    No cover (or none within ``cap``) stores INF everywhere.  ``ext[:y_lim + 1]`` is initialised.
    """
    off = ext.shape[0] // 3
    tot = 0.0
    for i in range(m):
        sv = it_da[i] * y + it_db[i]
        ratio[i] = it_dp[i] / sv if sv > 0.0 else np.inf
        if sv > 0.0:
            tot += sv
    if tot < need:
        ext[y] = INF
        ext[off + y] = INF
        ext[2 * off + y] = INF
        return
    _ratio_sort(order, ratio, m)
    got = 0.0
    cst = 0.0
    lo = INF
    hi = INF
    for q in range(m):
        i = order[q]
        sv = it_da[i] * y + it_db[i]
        if sv <= 0.0:
            break
        c = it_dp[i]
        if c < 0.0:
            c = 0.0
        if got + sv >= need:
            lo = cst + c * ((need - got) / sv)
            hi = cst + c
            break
        got += sv
        cst += c
    if hi >= INF:  # rounding of the sums: leave it to the exact cover
        lo = 0.0
    lo = lo * (1.0 - 1e-12)
    for yy in range(y - 1, 0, -1):
        if ext[yy] >= 0.0:
            if ext[yy] > lo:
                lo = ext[yy]
            break
    for yy in range(y + 1, y_lim + 1):
        if ext[yy] >= 0.0:
            if ext[yy] < hi:
                hi = ext[yy]
            break
    if lo > cap:
        ext[y] = INF
        ext[off + y] = INF
        ext[2 * off + y] = INF
        return
    ext[off + y] = lo
    ext[2 * off + y] = hi


@njit(cache=True)
def table_static(agg, m, d, y_top, big_n, bw, memory, tau, r_out, it_de, it_dp, it_dw, it_da, it_db,
                 kc, ks, w1, w2, w3, w4, it_cd, ratio, order, cum_s, cum_c, ext, cap_all, y_from=1):
    """:func:`stage_table` from :func:`gather_static`'s sums: O(1) per ``y`` while memory is slack.

    Where memory binds, the switches are kept in ratio order across ``y`` (insertion sort of
    an almost sorted list) and handed to the exact cover already sorted.
    """
    if d == 1:
        base_c = agg[0] / bw + agg[1]
    else:
        base_c = (agg[0] / d + 4.0 * (d - 1) * agg[2] / (d * big_n)) / bw + agg[1] / d
    if base_c > tau:
        return 0
    base_a = agg[3]
    base_b = agg[4]
    last = 0.0
    prepared = False
    for y in range(y_from, y_top + 1):
        mem = base_a * y + base_b
        if mem <= memory:
            r_out[y] = base_c
            last = base_c
            continue
        need = mem - memory
        if agg[5] > 0.0:
            if ext[y] < 0.0:
                lower = ext[y - 1] if y > 1 and ext[y - 1] >= 0.0 else 0.0  # exact covers grow with y
                ext[y] = _ext_cover(y, m, need, cap_all, it_dp, it_da, it_db, kc, ks, ratio, order, cum_s, cum_c,
                                    w1, w2, w3, w4, lower)
            if ext[y] >= INF:
                return y - 1
            val = base_c + ext[y] / d
            if val > tau:
                return y - 1
            if val < last:
                val = last
            r_out[y] = val
            last = val
            continue
        if not prepared:
            for i in range(m):
                if d == 1:
                    c = it_de[i] / bw + it_dp[i]
                else:
                    c = (it_de[i] / d + 4.0 * (d - 1) * it_dw[i] / (d * big_n)) / bw + it_dp[i] / d
                it_cd[i] = c if c > 0.0 else 0.0
                order[i] = i
            prepared = True
        for i in range(m):
            sv = it_da[i] * y + it_db[i]
            ratio[i] = it_cd[i] / sv if sv > 0.0 else np.inf
        _ratio_sort(order, ratio, m)
        k = 0
        tot = 0.0
        for q in range(m):
            i = order[q]
            sv = it_da[i] * y + it_db[i]
            if sv <= 0.0:
                break
            kc[k] = it_cd[i]
            ks[k] = sv
            tot += sv
            k += 1
        if tot < need:
            return y - 1
        extra = min_cover_sorted(kc, ks, k, need, tau - base_c, cum_s, cum_c, w1, w2, w3, w4)
        if extra >= INF:
            return y - 1
        val = base_c + extra
        if val > tau:
            return y - 1
        if val < last:
            val = last
        r_out[y] = val
        last = val
    return y_top


@njit(cache=True)
def _new_scratch(n):
    return (np.empty(n + 1), np.empty(n + 1), np.empty(n + 1), np.empty(n + 1), np.empty(n + 1),
            np.empty(4096), np.empty(4096), np.empty(4096), np.empty(4096), np.empty(n + 1), np.empty(n + 1),
            np.empty(8), np.empty(n + 1), np.empty(n + 1), np.empty(n + 1, dtype=np.int64), np.empty(n + 2),
            np.empty(n + 2))




@njit(cache=True)
def _close(Fb, I, K, k_lo, k_hi, s_lo, s_hi, row_ptr, pts_s, pts_v, npts, kmin, s_span):
    """Monotone closure of the box ``Fb[k_lo:k_hi + 1, s_lo:s_hi + 1]`` (tail ``I``; no plan of it within
    ``tau`` has fewer devices or a smaller sum of d), then store its Pareto points.

    A point is a state strictly better than with one device fewer and than with one less
    of s; every other state is matched by one of them (the closure carries it over), so
    only the points are kept: the DP tables never exist in full.  Returns the point
    arrays (grown when needed) and their new count.
    """
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
    return pts_s, pts_v, npts


@njit(cache=True, inline="always")
def query(J, k, s, K, row_ptr, pts_s, pts_v):
    """``F[J, k, s]``: the best value over the points of ``J`` with at most ``k`` devices and ``s``."""
    best = INF
    kk = k if k < K else K
    for r in range(kk + 1):
        for p in range(row_ptr[J, r], row_ptr[J, r + 1]):
            if pts_s[p] > s:
                break
            if pts_v[p] < best:
                best = pts_v[p]
    return best


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
def _prop_setup(agg, m, ti, t, divs, dmax_t, d_lo, kmin_j, k_hi, s_hi, big_n, bw, tau, ext, order):
    """Reset the per-y cover cache of a stage; return the largest extra compute any viable d can afford."""
    off = ext.shape[0] // 3
    for y in range(s_hi + 2):
        ext[y] = -1.0
        ext[off + y] = -1.0
    for i in range(m):
        order[i] = i
    if tau >= INF:
        return INF
    cap = 0.0
    for di in range(divs.shape[0]):
        d = divs[di]
        if d > dmax_t[ti] or t * d + kmin_j > k_hi:
            break
        if d < d_lo * (1.0 - 1e-9):
            continue
        if d == 1:
            base_c = agg[0] / bw + agg[1]
        else:
            base_c = (agg[0] / d + 4.0 * (d - 1) * agg[2] / (d * big_n)) / bw + agg[1] / d
        c = d * (tau - base_c)
        if c > cap:
            cap = c
    return cap * (1.0 + 1e-12)


@njit(cache=True)
def _tables_for_t(xs, sp, ti, d, y_top, e_s, fast, nopt, pp, ww, aa, bb, big_n, bw, memory, tau, r, static, m_it,
                  agg, it_c, it_dp, it_dw, it_da, it_db, kc, ks, w1, w2, w3, w4, it_cd, ratio, order, cum_s, cum_c,
                  ext, cap_all, y_from):
    if static:
        return table_static(agg, m_it, d, y_top, big_n, bw, memory, tau, r, it_c, it_dp, it_dw, it_da, it_db,
                            kc, ks, w1, w2, w3, w4, it_cd, ratio, order, cum_s, cum_c, ext, cap_all, y_from)
    return stage_table(xs, sp, ti, d, y_top, e_s, nopt, pp, ww, aa, bb, big_n, bw, memory, tau, r,
                       it_c, it_da, it_db, kc, ks, w1, w2, w3, w4, y_from)


@njit(cache=True)
def _eval_pair(I, J2, xs, sp, in_s, e_s, in_ptr, in_edge, out_ptr, out_edge, esrc, edst, ecost, fwe, bwe,
               nopt, pp, ww, aa, bb, fast, tvals, divs, dmax_t, miss_sum, nonstatic_sum, pmin_sum,
               big_n, bw, memory, tau, k_lo, k_hi, s_lo, s_hi, kmin, row_ptr, pts_s, pts_v, Fb, r, ext,
               it_c, it_da, it_db, kc, ks, w1, w2, w3, w4, it_dp, it_dw, agg, it_cd, ratio, order, cum_s, cum_c,
               s_span):
    """All (t, d) stage tables of the stage ``xs[:sp] = I - J2`` and their DP updates into ``Fb``."""
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
            for q in range(sp):
                _recompute_e(xs[q], in_s, in_ptr, in_edge, out_ptr, out_edge, esrc, edst, ecost, fwe,
                             bwe, e_s, n_t)
            fresh = True
        static = nonstatic_sum[I, ti] == nonstatic_sum[J2, ti]
        m_it = 0
        cap_all = 0.0
        prop = False
        if static:
            m_it = gather_static(xs, sp, ti, e_s, fast, nopt, pp, ww, aa, bb, agg,
                                 it_c, it_dp, it_dw, it_da, it_db)
            if agg[5] > 0.0:
                prop = True
                cap_all = _prop_setup(agg, m_it, ti, t, divs, dmax_t, d_lo, kmin[J2], k_hi, s_hi, big_n,
                                      bw, tau, ext, order)
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
                        need = agg[3] * y + agg[4] - memory
                        if need <= 0.0:
                            rv = base_c
                        else:
                            ex = ext[y]
                            if ex < 0.0:
                                # bounds first: the exact cover only where they cannot settle the update
                                if ext[off + y] < 0.0:
                                    _cover_bounds(y, m_it, need, cap_all, it_dp, it_da, it_db, ratio, order, ext,
                                                  s_hi + 1)
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
                                ex = _ext_lazy(y, need, m_it, cap_all, it_dp, it_da, it_db, kc, ks, ratio, order,
                                               cum_s, cum_c, w1, w2, w3, w4, ext, s_hi + 1)
                            rv = base_c + ex / d if ex < INF else INF
                            if rv > tau:
                                ycap = y - 1  # R is non-decreasing: INF from here on
                                break
                        val = g if g > rv else rv
                        if val < Fb[k, s1]:
                            Fb[k, s1] = val
                        if rv >= g:
                            break
                continue
            ycap = _tables_for_t(xs, sp, ti, d, y_top, e_s, fast, nopt, pp, ww, aa, bb, big_n, bw,
                                 memory, tau, r, static, m_it, agg, it_c, it_dp, it_dw, it_da, it_db,
                                 kc, ks, w1, w2, w3, w4, it_cd, ratio, order, cum_s, cum_c,
                                 ext, cap_all, y_from)
            if ycap == 0:
                continue
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
                    rv = r[y]
                    val = g if g > rv else rv
                    if val < Fb[k, s1]:
                        Fb[k, s1] = val
                    if rv >= g:
                        break
    return tables


@njit(cache=True, nogil=True)
def run_dp(down_ptr, down_ideal, down_unit,
           in_ptr, in_edge, out_ptr, out_edge, esrc, edst, ecost, fwe, bwe,
           nopt, pp, ww, aa, bb, fast, tvals, divs, dmax_t,
           miss_sum, nonstatic_sum, pmin_sum, mmin_sum, wp_sum,
           K, big_n, bw, memory, tau, S, mmin2_sum, row_ptr, kmin, ctl):
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
    in_s = np.zeros(n, dtype=np.int8)
    e_s = np.zeros((n, n_t, 2))
    stamp = np.full(n_i, -1, dtype=np.int64)
    stack_j = np.empty(n + 2, dtype=np.int64)
    stack_e = np.empty(n + 2, dtype=np.int64)
    xs = np.empty(n + 2, dtype=np.int64)
    it_c, it_da, it_db, kc, ks, w1, w2, w3, w4, it_dp, it_dw, agg, it_cd, ratio, order, cum_s, cum_c = _new_scratch(n)
    r = np.empty(S + 2)
    ext = np.empty(3 * (S + 2))  # per y: exact cover, then its lower and upper bound (see _cover_bounds)
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
        for k in range(k_lo, k_hi + 1):
            for s in range(s_lo, s_hi + 1):
                Fb[k, s] = INF
        stamp[I] = I
        sp = 0
        stack_j[0] = I
        stack_e[0] = down_ptr[I]
        while sp >= 0:
            J = stack_j[sp]
            e = stack_e[sp]
            if e < down_ptr[J + 1]:
                stack_e[sp] = e + 1
                J2 = down_ideal[e]
                if stamp[J2] == I:
                    continue
                stamp[J2] = I
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
                sp += 1
                stack_j[sp] = J2
                stack_e[sp] = down_ptr[J2]
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
                tables += _eval_pair(I, J2, xs, sp, in_s, e_s, in_ptr, in_edge, out_ptr, out_edge, esrc, edst, ecost,
                                     fwe, bwe, nopt, pp, ww, aa, bb, fast, tvals, divs, dmax_t, miss_sum,
                                     nonstatic_sum, pmin_sum, big_n, bw, memory, tau, k_lo, k_hi, s_lo, s_hi, kmin,
                                     row_ptr, pts_s, pts_v, Fb, r, ext, it_c, it_da, it_db, kc, ks, w1, w2, w3, w4,
                                     it_dp, it_dw, agg, it_cd, ratio, order, cum_s, cum_c, s_span)
            else:
                sp -= 1
                if sp >= 0:
                    in_s[xs[sp]] = 0
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
            tables += _eval_pair(I, 0, xs, sp, in_s, e_s, in_ptr, in_edge, out_ptr, out_edge, esrc, edst, ecost,
                                 fwe, bwe, nopt, pp, ww, aa, bb, fast, tvals, divs, dmax_t, miss_sum,
                                 nonstatic_sum, pmin_sum, big_n, bw, memory, tau, k_lo, k_hi, s_lo, s_hi, kmin,
                                 row_ptr, pts_s, pts_v, Fb, r, ext, it_c, it_da, it_db, kc, ks, w1, w2, w3, w4, it_dp,
                                 it_dw, agg, it_cd, ratio, order, cum_s, cum_c, s_span)
            for q in range(sp):
                in_s[xs[q]] = 0
        pts_s, pts_v, npts = _close(Fb, I, K, k_lo, k_hi, s_lo, s_hi, row_ptr, pts_s, pts_v, npts, kmin, s_span)
    return pairs, tables, pts_s, pts_v, npts


@njit(cache=True)
def find_step(cur, ck, cs, target,
              down_ptr, down_ideal, down_unit,
              in_ptr, in_edge, out_ptr, out_edge, esrc, edst, ecost, fwe, bwe,
              nopt, pp, ww, aa, bb, fast, tvals, divs, dmax_t,
              miss_sum, nonstatic_sum, pmin_sum, mmin_sum, wp_sum,
              K, big_n, bw, memory, tau, S, mmin2_sum, row_ptr, pts_s, pts_v, kmin, out_nodes):
    """A first stage of ``cur`` for a plan of value <= ``target`` on <= ``ck`` devices, sum of d <= ``cs``.

    Returns (J, t index, d, s used by the stage and the rest, number of stage nodes in
    ``out_nodes``), or J = -1 if none (which the DP rules out).
    """
    n = in_ptr.shape[0] - 1
    n_i = down_ptr.shape[0] - 1
    n_t = tvals.shape[0]
    n_d = divs.shape[0]
    in_s = np.zeros(n, dtype=np.int8)
    e_s = np.zeros((n, n_t, 2))
    stamp = np.full(n_i, -1, dtype=np.int64)
    stack_j = np.empty(n + 2, dtype=np.int64)
    stack_e = np.empty(n + 2, dtype=np.int64)
    xs = np.empty(n + 2, dtype=np.int64)
    it_c, it_da, it_db, kc, ks, w1, w2, w3, w4, it_dp, it_dw, agg, it_cd, ratio, order, cum_s, cum_c = _new_scratch(n)
    r = np.empty(S + 2)
    ext = np.empty(3 * (S + 2))  # per y: exact cover, then its lower and upper bound (see _cover_bounds)
    lim = target * (1.0 + 1e-12)
    stamp[cur] = cur
    sp = 0
    stack_j[0] = cur
    stack_e[0] = down_ptr[cur]
    while sp >= 0:
        J = stack_j[sp]
        e = stack_e[sp]
        if e < down_ptr[J + 1]:
            stack_e[sp] = e + 1
            J2 = down_ideal[e]
            if stamp[J2] == cur:
                continue
            stamp[J2] = cur
            if not _s_feasible_any(cur, J2, n_t, miss_sum, pmin_sum, mmin_sum, dmax_t, memory, tau):
                continue
            x = down_unit[e]
            in_s[x] = 1
            xs[sp] = x
            sp += 1
            stack_j[sp] = J2
            stack_e[sp] = down_ptr[J2]
            if kmin[J2] + tvals[0] > ck:
                continue  # no devices left for the rest
            for q in range(sp):
                _recompute_e(xs[q], in_s, in_ptr, in_edge, out_ptr, out_edge, esrc, edst, ecost, fwe, bwe, e_s, n_t)
            for ti in range(n_t):
                if miss_sum[cur, ti] != miss_sum[J2, ti]:
                    continue
                t = tvals[ti]
                static = nonstatic_sum[cur, ti] == nonstatic_sum[J2, ti]
                m_it = 0
                cap_all = 0.0
                if static:
                    m_it = gather_static(xs, sp, ti, e_s, fast, nopt, pp, ww, aa, bb, agg,
                                         it_c, it_dp, it_dw, it_da, it_db)
                    if agg[5] > 0.0:
                        cap_all = _prop_setup(agg, m_it, ti, t, divs, dmax_t, 0.0, 0, ck, cs, big_n, bw, tau, ext,
                                              order)
                for di in range(n_d):
                    d = divs[di]
                    if d > dmax_t[ti] or t * d > ck or d > cs:
                        break
                    y_top = (cs + d - 1) // d
                    ycap = _tables_for_t(xs, sp, ti, d, y_top, e_s, fast, nopt, pp, ww, aa, bb, big_n, bw,
                                         memory, tau, r, static, m_it, agg, it_c, it_dp, it_dw, it_da, it_db,
                                         kc, ks, w1, w2, w3, w4, it_cd, ratio, order, cum_s, cum_c,
                                         ext, cap_all, 1)
                    ystar = 0
                    for y in range(1, ycap + 1):
                        if r[y] <= lim:
                            ystar = y
                        else:
                            break
                    if ystar == 0:
                        continue
                    s1 = d * ystar
                    if s1 > cs:
                        s1 = cs
                    if query(J2, ck - t * d, s1 - d, K, row_ptr, pts_s, pts_v) <= lim:
                        for q in range(sp):
                            out_nodes[q] = xs[q]
                        return J2, ti, d, s1, sp
        else:
            sp -= 1
            if sp >= 0:
                in_s[xs[sp]] = 0
    return -1, -1, -1, -1, 0
