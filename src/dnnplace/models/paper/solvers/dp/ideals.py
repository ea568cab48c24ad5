"""The lattice of ideals (down-closed sets) of the forward unit DAG.

Ideals are Python integers used as bitsets, found breadth-first from the empty
set, so ids grow with ideal size and every sub-ideal of ``I`` has a smaller id
than ``I``.  The lattice is kept as its *cover* relation only (``J = I - {x}``
for a maximal ``x``), in CSR arrays; all ideal pairs are never stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dnnplace.errors import TooManyIdealsError
from dnnplace.models.paper.solvers.prepare import Prepared


@dataclass(frozen=True)
class IdealLattice:
    """Ideals as bitsets plus the downward covers and per-ideal prefix sums."""

    masks: list[int]
    down_ptr: np.ndarray  # int64 (n_ideals+1,)
    down_ideal: np.ndarray  # int64: the sub-ideal J = I - {x}
    down_unit: np.ndarray  # int64: the removed unit x
    acc_sum: np.ndarray  # float64: sum of unit costs inside each ideal
    cpu_sum: np.ndarray
    size_sum: np.ndarray
    unsupported_sum: np.ndarray  # int64

    @property
    def n_ideals(self) -> int:
        return len(self.masks)

    @property
    def full(self) -> int:
        """Id of the ideal holding every unit (the last one found)."""
        return len(self.masks) - 1


def enumerate_ideals(
    p: Prepared,
    budget: int = 200_000,
    on_progress: Callable[[int], None] | None = None,
) -> IdealLattice:
    """Enumerate all ideals of ``p``'s unit DAG, or raise past ``budget``."""
    n = p.n_units
    pred_mask = [0] * n
    succ: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(p.edge_src.tolist(), p.edge_dst.tolist(), strict=False):
        pred_mask[b] |= 1 << a
        succ[a].append(b)
    acc, cpu, size = p.acc_time.tolist(), p.cpu_time.tolist(), p.size.tolist()
    unsup = (~p.supported).astype(np.int64).tolist()

    masks = [0]
    index = {0: 0}
    addable = [sum(1 << v for v in range(n) if pred_mask[v] == 0)]
    acc_sum, cpu_sum, size_sum, un_sum = [0.0], [0.0], [0.0], [0]
    cover_from: list[int] = []  # the bigger ideal
    cover_to: list[int] = []
    cover_unit: list[int] = []
    i = 0
    while i < len(masks):
        cur = masks[i]
        add = addable[i]
        rest = add
        while rest:
            low = rest & -rest
            rest ^= low
            v = low.bit_length() - 1
            nxt = cur | low
            j = index.get(nxt)
            if j is None:
                j = len(masks)
                if j >= budget:
                    raise TooManyIdealsError(
                        f"the graph has more than {budget:,} ideals ({n} units after preparation);"
                        " try --contract-layers or --linearize, or raise --max-ideals"
                    )
                index[nxt] = j
                masks.append(nxt)
                a = add ^ low
                for x in succ[v]:
                    pm = pred_mask[x]
                    if pm & nxt == pm:
                        a |= 1 << x
                addable.append(a)
                acc_sum.append(acc_sum[i] + acc[v])
                cpu_sum.append(cpu_sum[i] + cpu[v])
                size_sum.append(size_sum[i] + size[v])
                un_sum.append(un_sum[i] + unsup[v])
                if on_progress is not None and j % 4096 == 0:
                    on_progress(j)
            cover_from.append(j)
            cover_to.append(i)
            cover_unit.append(v)
        i += 1
    frm = np.asarray(cover_from, dtype=np.int64)
    order = np.argsort(frm, kind="stable")
    ptr = np.zeros(len(masks) + 1, dtype=np.int64)
    np.cumsum(np.bincount(frm, minlength=len(masks)), out=ptr[1:])
    return IdealLattice(
        masks=masks,
        down_ptr=ptr,
        down_ideal=np.asarray(cover_to, dtype=np.int64)[order],
        down_unit=np.asarray(cover_unit, dtype=np.int64)[order],
        acc_sum=np.asarray(acc_sum),
        cpu_sum=np.asarray(cpu_sum),
        size_sum=np.asarray(size_sum),
        unsupported_sum=np.asarray(un_sum, dtype=np.int64),
    )
