"""Exact per-stage TMPC choice: a 0/1 min-cost covering knapsack.

Every node of a stage starts at its cheapest option (``base``); switching node
``i`` to its other option saves ``sav_i`` bytes for an extra ``cost_i`` seconds.
When the base choice is over the memory by ``need`` bytes, the cheapest set of
switches with ``sum(sav) >= need`` is found *exactly* by a Pareto-frontier DP
over the items in ratio order (cost, saved pairs; dominated pairs dropped),
pruned by the fractional (LP) bound of the remaining items and by the best
cover found so far (initially the greedy one, i.e. Piper's heuristic).

Piper itself uses only the greedy (PIPER-SPEC 4.4), which is not exact
(toy A: 13 instead of 5).  The exact value is monotone in ``y`` (the number of
micro-batches in flight) because memory only grows with ``y``; the DP relies
on that, and it holds by construction here.
"""

from __future__ import annotations

import numpy as np
from numba import njit

INF = 1e30


@njit(cache=True, inline="always")
def _lp_bound(i, r, cum_s, cum_c, cost, sav, m):
    """Fractional min cost to save ``r`` more bytes with items ``i..m-1`` (ratio order); INF if impossible."""
    total = cum_s[m] - cum_s[i]
    if total < r:
        if total < r * (1.0 - 1e-12):
            return INF
        return 0.0  # within the rounding of the prefix sums: maybe coverable, so no bound
    # smallest j >= i with cum_s[j+1] - cum_s[i] >= r
    lo = i
    hi = m - 1
    base_s = cum_s[i]
    while lo < hi:
        mid = (lo + hi) // 2
        if cum_s[mid + 1] - base_s >= r:
            hi = mid
        else:
            lo = mid + 1
    j = lo
    got = cum_s[j] - base_s
    c = cum_c[j] - cum_c[i]
    if sav[j] > 0.0:
        c += cost[j] * ((r - got) / sav[j])
    return c


@njit(cache=True)
def min_cover(cost, sav, m, need, cap, work_c, work_s, work_c2, work_s2):
    """Exact min of ``sum(cost[X])`` over ``X`` with ``sum(sav[X]) >= need``, if it is ``<= cap``.

    ``cost`` and ``sav`` hold ``m`` items (``sav > 0``, ``cost >= 0``), reordered in place by
    ratio.  Returns ``INF`` when no cover costs at most ``cap`` (or none exists).  The
    ``work_*`` buffers are scratch space of any size (they are grown when needed).
    """
    if need <= 0.0:
        return 0.0
    # sort by cost / sav ascending (insertion sort: m is small)
    for i in range(1, m):
        ci = cost[i]
        si = sav[i]
        j = i - 1
        while j >= 0 and cost[j] * si > ci * sav[j]:
            cost[j + 1] = cost[j]
            sav[j + 1] = sav[j]
            j -= 1
        cost[j + 1] = ci
        sav[j + 1] = si
    cum_s = np.empty(m + 1)
    cum_c = np.empty(m + 1)
    return min_cover_sorted(cost, sav, m, need, cap, cum_s, cum_c, work_c, work_s, work_c2, work_s2)


@njit(cache=True)
def min_cover_sorted(cost, sav, m, need, cap, cum_s, cum_c, work_c, work_s, work_c2, work_s2, lower=0.0):
    """:func:`min_cover` for items already in ratio order; ``cum_*`` are scratch of size ``m + 1``.

    ``lower`` is a known lower bound on the optimum (e.g. the optimum at one micro-batch fewer
    in flight): a greedy cover that reaches it is optimal.
    """
    if need <= 0.0:
        return 0.0
    cum_s[0] = 0.0
    cum_c[0] = 0.0
    for i in range(m):
        cum_s[i + 1] = cum_s[i] + sav[i]
        cum_c[i + 1] = cum_c[i] + cost[i]
    if cum_s[m] < need:
        return INF
    # greedy cover in ratio order (Piper's heuristic): an upper bound
    got = 0.0
    g = 0.0
    for i in range(m):
        got += sav[i]
        g += cost[i]
        if got >= need:
            break
    best = INF
    if g <= cap:
        best = g
    if best < INF and best <= lower * (1.0 + 1e-12):
        return best
    limit = best if best < INF else cap  # covers must cost <= limit
    lp0 = _lp_bound(0, need, cum_s, cum_c, cost, sav, m)
    if lp0 > limit or (best < INF and lp0 >= best):
        return best if best <= cap else INF
    # Reduction (Dantzig bound around the break item b, ratio r*): dropping a taken item i < b
    # costs at least r* * sav_i - cost_i more, adding an item j > b at least cost_j - r* * sav_j;
    # items for which that already reaches the best cover are fixed in or out.
    b = 0
    while cum_s[b + 1] < need:
        b += 1
    rstar = cost[b] / sav[b]
    fixed_c = 0.0
    fixed_s = 0.0
    mf = 0
    for i in range(m):
        if i != b:
            bound = lp0 - cost[i] + rstar * sav[i] if i < b else lp0 + cost[i] - rstar * sav[i]
            if bound > limit or (best < INF and bound >= best):
                if i < b:
                    fixed_c += cost[i]
                    fixed_s += sav[i]
                continue
        cost[mf] = cost[i]
        sav[mf] = sav[i]
        mf += 1
    m = mf
    need -= fixed_s
    cap -= fixed_c
    limit -= fixed_c
    if best < INF:
        best -= fixed_c
    for i in range(m):
        cum_s[i + 1] = cum_s[i] + sav[i]
        cum_c[i + 1] = cum_c[i] + cost[i]
    # Pareto DP: frontier of (cost, saved) with cost ascending and saved strictly ascending
    fc = work_c
    fs = work_s
    nc = work_c2
    ns = work_s2
    fc[0] = 0.0
    fs[0] = 0.0
    nf = 1
    for i in range(m):
        ci = cost[i]
        si = sav[i]
        if nf * 2 + 2 > nc.shape[0]:
            cap2 = nf * 4 + 16
            nc = np.empty(cap2)
            ns = np.empty(cap2)
            t1 = np.empty(cap2)
            t2 = np.empty(cap2)
            t1[:nf] = fc[:nf]
            t2[:nf] = fs[:nf]
            fc = t1
            fs = t2
        # merge "skip i" (fc, fs) and "take i" (fc + ci, fs + si), both sorted by cost
        a = 0
        b = 0
        nn = 0
        max_s = -1.0
        while a < nf or b < nf:
            if b >= nf or (a < nf and fc[a] <= fc[b] + ci):
                c = fc[a]
                s = fs[a]
                a += 1
            else:
                c = fc[b] + ci
                s = fs[b] + si
                b += 1
                if s >= need:
                    if c < best:
                        best = c
                        if best < limit:
                            limit = best
                    continue
            if s <= max_s:
                continue  # dominated: costs no less and saves no more
            if c > limit:
                continue
            lb = _lp_bound(i + 1, need - s, cum_s, cum_c, cost, sav, m)
            if c + lb > limit or (best < INF and c + lb >= best):
                continue
            max_s = s
            nc[nn] = c
            ns[nn] = s
            nn += 1
        tc = fc
        ts = fs
        fc = nc
        fs = ns
        nc = tc
        ns = ts
        nf = nn
        if nf == 0:
            break
    if best <= cap:
        return best + fixed_c
    return INF


def min_cover_choice(cost: list[float], sav: list[float], need: float) -> tuple[float, list[int]] | None:
    """Exact minimum-cost cover with the chosen item indices (plain Python; for plans, not the DP)."""
    if need <= 0:
        return 0.0, []
    m = len(cost)
    if sum(sav) < need:
        return None
    order = sorted(range(m), key=lambda i: (cost[i] / sav[i], i))
    # frontier entries: (cost, saved, chosen mask)
    front: list[tuple[float, float, int]] = [(0.0, 0.0, 0)]
    best: tuple[float, int] | None = None
    suffix = [0.0] * (m + 1)
    for k in range(m - 1, -1, -1):
        suffix[k] = suffix[k + 1] + sav[order[k]]
    for k, i in enumerate(order):
        cand = front + [(c + cost[i], s + sav[i], msk | (1 << i)) for c, s, msk in front]
        cand.sort(key=lambda e: (e[0], -e[1]))
        nxt = []
        max_s = -1.0
        for c, s, msk in cand:
            if s >= need:
                if best is None or c < best[0]:
                    best = (c, msk)
                continue
            if s <= max_s or s + suffix[k + 1] < need or (best is not None and c >= best[0]):
                continue
            max_s = s
            nxt.append((c, s, msk))
        front = nxt
    if best is None:
        return None
    return best[0], [i for i in range(m) if best[1] >> i & 1]
