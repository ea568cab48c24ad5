"""Stage evaluation for the Piper kernel: the exact stage table ``R[y]`` of one stage and ``(t, d)``.

``R[y]`` is the best time of the stage with ``y`` micro-batches in flight, each node at
one of its (at most two) TMPCs; where memory binds, the cheapest set of memory-saving
switches is an exact cover (:mod:`~dnnplace.models.piper.solvers.knapsack`).  Two ways to it:

* :func:`stage_table` -- any stage: the fastest option per node depends on ``d``.
* :func:`gather_static` + :func:`table_static` -- stages whose nodes each have one option
  fastest for every stage and ``d``: sums once per stage, then O(1) per ``y`` while memory
  is slack.  When every switch costs compute only (*proportional*), one cover per ``y``
  serves every ``d`` and is computed lazily by the DP update
  (:func:`~dnnplace.models.piper.solvers.kernel._eval_pair`, with :func:`ext_lazy` and
  :func:`cover_bounds`).

Every function takes the bundles of :mod:`~dnnplace.models.piper.solvers.bundles` and unpacks the
fields it uses once, at its top (see there why).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dnnplace.models.piper.solvers.knapsack import INF, min_cover, min_cover_sorted


@njit(cache=True)
def stage_edges(stg, n_s, g, n_t):
    """Boundary bytes ``e_s[v, t, option]`` of every node ``v`` of the stage ``xs[:n_s]`` (``in_s`` marks it).

    Recomputed per stage only when some ``(t, d)`` needs a table: the walk passes most stages
    without one, so keeping them up to date node by node cost more.
    """
    xs, in_s, e_s = stg.xs, stg.in_s, stg.e_s
    in_ptr, in_edge, out_ptr, out_edge = g.in_ptr, g.in_edge, g.out_ptr, g.out_edge
    esrc, edst, ecost, fwe, bwe = g.esrc, g.edst, g.ecost, g.fwe, g.bwe
    for q in range(n_s):
        v = xs[q]
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
def stage_table(stg, n_s, ti, d, y_top, y_from, opts, lim, scr):
    """Fill ``r_out[1..y_top]`` with the exact best stage time; return the last finite ``y`` (0: none).

    The stage is ``stg.xs[:n_s]`` on ``d`` replicas of width ``t`` (index ``ti``).  Values above
    ``tau`` count as INF; the table is non-decreasing, so it is INF past the returned ``y``.
    """
    xs, e_s = stg.xs, stg.e_s
    nopt, pp, ww, aa, bb = opts.nopt, opts.pp, opts.ww, opts.aa, opts.bb
    big_n, bw, memory, tau = lim.big_n, lim.bw, lim.memory, lim.tau
    r_out, it_c, it_da, it_db, kc, ks = scr.r, scr.it_c, scr.it_da, scr.it_db, scr.kc, scr.ks
    w1, w2, w3, w4 = scr.w1, scr.w2, scr.w3, scr.w4
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
def gather_static(stg, n_s, ti, opts, scr):
    """Sums of the stage at each node's fixed fastest option, and the memory-saving switches.

    Only for stages whose nodes all have a fastest option independent of the stage
    and of ``d`` (``fast >= 0``).  ``agg`` = (edge bytes, compute, weights, a, b).
    Returns the number of switches.
    """
    xs, e_s = stg.xs, stg.e_s
    fast, nopt, pp, ww, aa, bb = opts.fast, opts.nopt, opts.pp, opts.ww, opts.aa, opts.bb
    agg, it_dp, it_dw, it_da, it_db = scr.agg, scr.it_dp, scr.it_dw, scr.it_da, scr.it_db
    it_de = scr.it_c  # the stage table's per-switch compute, here its edge bytes
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
def _ext_cover(y, m, need, cap, lower, scr):
    """Exact extra compute (at d = 1) of the cheapest memory-saving switches at ``y``; INF above ``cap``.

    ``order`` persists between calls for one stage, so the ratio sort is nearly sorted already.
    """
    it_dp, it_da, it_db, kc, ks = scr.it_dp, scr.it_da, scr.it_db, scr.kc, scr.ks
    ratio, order, cum_s, cum_c = scr.ratio, scr.order, scr.cum_s, scr.cum_c
    w1, w2, w3, w4 = scr.w1, scr.w2, scr.w3, scr.w4
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
def ext_lazy(y, need, m, cap, y_lim, scr):
    """``ext[y]`` (see :func:`_ext_cover`) computed on demand and stored; ``ext < 0`` marks unknown.

    Exact covers never decrease in ``y``; the nearest known value below is a lower bound
    (a greedy cover that meets it is optimal), and the stored value is kept between its
    known neighbours so that rounding cannot make the table decrease.  ``ext[:y_lim + 1]``
    is initialised (by :func:`prop_setup`).
    """
    ext = scr.ext
    lower = 0.0
    for yy in range(y - 1, 0, -1):
        if ext[yy] >= 0.0:
            lower = ext[yy]
            break
    val = _ext_cover(y, m, need, cap, lower, scr)
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
def cover_bounds(y, m, need, cap, y_lim, scr):
    """Store bounds on ``ext[y]`` (see :func:`ext_lazy`) in ``ext[off + y]`` (lower) and
    ``ext[2 off + y]`` (upper), ``off = len(ext) // 3``: the fractional (LP) cover and the
    greedy cover in ratio order, tightened by the exact values known at other ``y`` (exact
    covers never decrease in ``y``).  Where they meet, the exact value is stored too.
    No cover (or none within ``cap``) stores INF everywhere.  ``ext[:y_lim + 1]`` is initialised.
    """
    it_dp, it_da, it_db, ratio, order, ext = scr.it_dp, scr.it_da, scr.it_db, scr.ratio, scr.order, scr.ext
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
def table_static(m, d, y_top, y_from, cap_all, lim, scr):
    """:func:`stage_table` from :func:`gather_static`'s sums (in ``scr.agg``): O(1) per ``y`` while memory is slack.

    Where memory binds, the switches are kept in ratio order across ``y`` (insertion sort of
    an almost sorted list) and handed to the exact cover already sorted.
    """
    big_n, bw, memory, tau = lim.big_n, lim.bw, lim.memory, lim.tau
    agg, r_out, ext, it_dp, it_dw = scr.agg, scr.r, scr.ext, scr.it_dp, scr.it_dw
    it_da, it_db, it_cd, ratio, order = scr.it_da, scr.it_db, scr.it_cd, scr.ratio, scr.order
    kc, ks, cum_s, cum_c, w1, w2, w3, w4 = scr.kc, scr.ks, scr.cum_s, scr.cum_c, scr.w1, scr.w2, scr.w3, scr.w4
    it_de = scr.it_c  # filled by gather_static
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
                ext[y] = _ext_cover(y, m, need, cap_all, lower, scr)
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
def prop_setup(m, ti, t, d_lo, kmin_j, k_hi, s_hi, opts, lim, scr):
    """Reset the per-y cover cache of a stage; return the largest extra compute any viable d can afford."""
    divs, dmax_t = opts.divs, opts.dmax_t
    big_n, bw, tau = lim.big_n, lim.bw, lim.tau
    agg, ext, order = scr.agg, scr.ext, scr.order
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
def tables_for_t(stg, n_s, ti, d, y_top, y_from, static, m_it, cap_all, opts, lim, scr):
    """The stage table ``scr.r[y_from..]`` of one ``(t, d)``; return its last finite ``y`` (0: none)."""
    if static:
        return table_static(m_it, d, y_top, y_from, cap_all, lim, scr)
    return stage_table(stg, n_s, ti, d, y_top, y_from, opts, lim, scr)
