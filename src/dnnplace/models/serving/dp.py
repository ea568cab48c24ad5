"""The contiguous layer split over an ordered list of heterogeneous stages, exactly.

Why a DP: the paper's idea for a chain -- with the stage order fixed, the best split of layers
``[0, n)`` into contiguous, non-empty stage ranges minimising the largest stage cost is
``f[s][j] = min_i max(f[s-1][i], C[s][i][j])``, exact in O(S n^2).  The same recursion maximises
the smallest KV headroom (costs negated).  ``C`` is +inf where a range does not fit its stage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Split", "range_costs", "split_dp"]


@dataclass(frozen=True)
class Split:
    """The optimal split: layers per stage (each >= 1), its value (the largest stage cost), and status
    (``optimal``, or ``infeasible`` when no split fits); the DP is exact, so bound == value, gap 0."""

    layers: tuple[int, ...]
    value: float
    status: str
    bound: float
    gap: float


def range_costs(prefix: np.ndarray, fixed: float, ok: np.ndarray | None = None) -> np.ndarray:
    """``C[i][j] = prefix[j] - prefix[i] + fixed`` for ``i < j`` (+inf elsewhere and where ``ok`` is False)."""
    c = prefix[None, :] - prefix[:, None] + fixed
    n1 = len(prefix)
    c[np.tril_indices(n1)] = np.inf
    if ok is not None:
        c[~ok] = np.inf
    return c


def split_dp(costs: list[np.ndarray]) -> Split:
    """Minimise the largest stage cost: ``costs[s][i][j]`` is stage ``s`` running layers ``[i, j)``."""
    S = len(costs)
    n = costs[0].shape[0] - 1
    if S == 0 or n < S:
        return Split((), float("inf"), "infeasible", float("inf"), 0.0)
    f = costs[0][0].copy()  # f[j]: best over stage 0 holding [0, j)
    choice = np.zeros((S, n + 1), dtype=np.int64)
    for s in range(1, S):
        cand = np.maximum(f[:, None], costs[s])  # [i, j]
        choice[s] = np.argmin(cand, axis=0)
        f = cand[choice[s], np.arange(n + 1)]
    value = float(f[n])
    if not np.isfinite(value):
        return Split((), float("inf"), "infeasible", float("inf"), 0.0)
    cuts = [n]
    j = n
    for s in range(S - 1, 0, -1):
        j = int(choice[s][j])
        cuts.append(j)
    cuts.append(0)
    cuts.reverse()
    layers = tuple(int(b - a) for a, b in zip(cuts, cuts[1:]))
    return Split(layers, value, "optimal", value, 0.0)
