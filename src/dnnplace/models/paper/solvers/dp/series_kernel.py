"""The linear scan behind :func:`.lattice_info.count_ideals_series` (numba, cached on disk)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def series_cuts(order: np.ndarray, sptr: np.ndarray, sidx: np.ndarray, pptr: np.ndarray,
                pidx: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """Positions ``i`` of the topological ``order`` where the prefix has one maximal unit ``m``, the
    suffix one minimal unit ``b`` and ``m -> b`` is an edge (CSR successors sorted), with 0 and n.

    The prefix's maximal units are counted, and their sum kept: with one left, the sum is that unit.
    """
    n = order.size
    unique_max = np.full(n + 1, -1, np.int64)
    later = np.zeros(n, np.int64)  # successors of a unit inside the prefix
    count = 0
    total = 0
    for i in range(n):
        v = order[i]
        count += 1
        total += v
        for e in range(pptr[v], pptr[v + 1]):
            u = pidx[e]
            if later[u] == 0:
                count -= 1
                total -= u
            later[u] += 1
        if count == 1:
            unique_max[i + 1] = total
    unique_min = np.full(n + 1, -1, np.int64)
    earlier = np.zeros(n, np.int64)
    count = 0
    total = 0
    for i in range(n - 1, -1, -1):
        v = order[i]
        count += 1
        total += v
        for e in range(sptr[v], sptr[v + 1]):
            x = sidx[e]
            if earlier[x] == 0:
                count -= 1
                total -= x
            earlier[x] += 1
        if count == 1:
            unique_min[i] = total
    cuts = np.empty(n + 1, np.int64)
    k = 0
    cuts[k] = 0
    k += 1
    for i in range(1, n):
        m = unique_max[i]
        b = unique_min[i]
        if m >= 0 and b >= 0:
            lo = sptr[m]
            hi = sptr[m + 1]
            j = lo + np.searchsorted(sidx[lo:hi], b)
            if j < hi and sidx[j] == b:
                cuts[k] = i
                k += 1
    cuts[k] = n
    return cuts[: k + 1]
