"""The contiguous layer split over an ordered list of heterogeneous stages, exactly.

Why a DP: the paper's idea for a chain -- with the stage order fixed, the best split of layers
``[0, n)`` into contiguous, non-empty stage ranges minimising the largest stage cost is
``f[s][j] = min_i max(f[s-1][i], C[s][i][j])``, exact in O(S n^2).  ``C`` is +inf where a range does
not fit its stage.  Here ``C`` is never built: a stage's cost of a range is a difference of prefix sums plus
a constant, and whether the range fits one inequality of prefix differences, so the compiled recursion reads
the prefixes in place.  The tests hold it against brute force and against the recursion on built matrices
(``tests/models/serving/test_dp.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

__all__ = ["Split", "split_prefix_dp"]


@dataclass(frozen=True)
class Split:
    """The optimal split: layers per stage (each >= 1), its value (the largest stage cost, or their sum), and status
    (``optimal``, or ``infeasible`` when no split fits); the DP is exact, so bound == value, gap 0."""

    layers: tuple[int, ...]
    value: float
    status: str
    bound: float
    gap: float


@njit(cache=True)
def _prefix_dp(prefix: np.ndarray, fixed: np.ndarray, rows: np.ndarray, free0: np.ndarray, wpre: np.ndarray,
               slope: float, kpre: np.ndarray, need: float,
               total: bool) -> tuple[float, np.ndarray]:  # pragma: no cover
    """The recursion (module docstring) over costs given by prefix sums, ties broken at the first index (as
    ``argmin`` breaks them).  Stage ``s`` reads row ``r = rows[s]`` of every array (stages alike share one):
    running layers ``[i, j)`` it costs ``prefix[r, j] - prefix[r, i] + fixed[r]`` where it fits:
    ``free0[r] - slope * (wpre[r, j] - wpre[r, i]) >= need * (kpre[r, j] - kpre[r, i])``."""
    S = rows.shape[0]
    n1 = prefix.shape[1]
    n = n1 - 1
    f = np.full(n1, np.inf)
    r = rows[0]
    for j in range(1, n1):
        if free0[r] - slope * (wpre[r, j] - wpre[r, 0]) >= need * (kpre[r, j] - kpre[r, 0]):
            f[j] = prefix[r, j] - prefix[r, 0] + fixed[r]
    choice = np.zeros((S, n1), np.int64)
    g = np.empty(n1)
    for s in range(1, S):
        r = rows[s]
        for j in range(n1):
            # the ranges [i, j) that fit are i in [lo, j): the room shrinks and the need grows as i falls,
            # and rounding keeps both monotone, so the scan stops at the first that does not fit; every
            # other i costs +inf and can neither win nor move the first-index tie (argmin's)
            lo = j
            while lo > 0 and free0[r] - slope * (wpre[r, j] - wpre[r, lo - 1]) >= \
                    need * (kpre[r, j] - kpre[r, lo - 1]):
                lo -= 1
            best = np.inf
            arg = 0
            for i in range(lo, j):
                c = prefix[r, j] - prefix[r, i] + fixed[r]
                if total:
                    v = f[i] + c
                else:
                    v = f[i] if f[i] > c else c
                if v < best:
                    best = v
                    arg = i
            g[j] = best
            choice[s, j] = arg
        f[:] = g
    cuts = np.zeros(S + 1, np.int64)
    cuts[S] = n
    j = n
    for s in range(S - 1, 0, -1):
        j = choice[s, j]
        cuts[s] = j
    return f[n], cuts


def split_prefix_dp(prefix: np.ndarray, fixed: np.ndarray, free0: np.ndarray, wpre: np.ndarray, slope: float,
                    kpre: np.ndarray, need: float, rows: np.ndarray | None = None, total: bool = False) -> Split:
    """The smallest largest stage cost over contiguous splits, where each stage's cost of layers ``[i, j)`` is a
    prefix difference plus a constant and whether they fit its memory one inequality of prefix differences
    (the serving search's case: time ``prefix`` and ``fixed``; KV room ``free0 - slope * (wpre[j] - wpre[i])``
    against ``need * (kpre[j] - kpre[i])``).  Each array has one row per kind of stage (``prefix``, ``wpre``,
    ``kpre``: ``(U, n + 1)``; ``fixed``, ``free0``: ``(U,)``), and ``rows`` (int64, ``(S,)``) says which row
    each stage reads (default: row ``s`` for stage ``s``), so stages alike pass one copy; ``wpre`` and ``kpre``
    nondecreasing, ``slope`` and ``need`` >= 0 (weights and KV take room, never give it).

    Why: the search runs this DP thousands of times per fleet; built as matrices, each run spent more time
    filling ``(n + 1)^2`` costs per stage than solving.  Compiled, it reads the prefixes in place; the tests
    hold it to brute force, and to the recursion on built matrices entry by entry (value and split).

    ``total``: the smallest *sum* of the stage costs instead (``f[s][j] = min_i f[s-1][i] + C[s][i][j]``): a
    replica whose engine runs each step through its stages in turn (llama.cpp's layer split, a Hugging Face
    device_map) takes the sum of its stages' times per step, not the slowest one's."""
    if rows is None:
        rows = np.arange(prefix.shape[0], dtype=np.int64)
    S, n1 = len(rows), prefix.shape[1]
    if S == 0 or n1 - 1 < S:
        return Split((), float("inf"), "infeasible", float("inf"), 0.0)
    value, cuts = _prefix_dp(prefix, fixed, rows, free0, wpre, float(slope), kpre, float(need), bool(total))
    if not np.isfinite(value):
        return Split((), float("inf"), "infeasible", float("inf"), 0.0)
    layers = tuple(int(b - a) for a, b in zip(cuts[:-1], cuts[1:]))
    return Split(layers, float(value), "optimal", float(value), 0.0)
