"""Compiled loops of :mod:`dnnplace.utils.graph` for graphs of millions of nodes (numba, cached on disk)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def kahn_stack(n: int, ptr: np.ndarray, idx: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """:func:`dnnplace.utils.graph.topological_order` over CSR successors (sources seeded by index)."""
    indeg = np.zeros(n, np.int64)
    for e in range(idx.size):
        indeg[idx[e]] += 1
    stack = np.empty(n, np.int64)
    top = 0
    for v in range(n):
        if indeg[v] == 0:
            stack[top] = v
            top += 1
    order = np.empty(n, np.int64)
    k = 0
    while top > 0:
        top -= 1
        v = stack[top]
        order[k] = v
        k += 1
        for e in range(ptr[v], ptr[v + 1]):
            x = idx[e]
            indeg[x] -= 1
            if indeg[x] == 0:
                stack[top] = x
                top += 1
    return order[:k]
