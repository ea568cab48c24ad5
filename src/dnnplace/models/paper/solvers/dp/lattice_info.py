"""How large the DP's lattice is at each step of preparation, and which path ``solve`` will take."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dnnplace.errors import TooManyIdealsError
from dnnplace.models.paper.solvers.dp.ideals import enumerate_ideals
from dnnplace.models.paper.solvers.dp.relax import inert_units, relax
from dnnplace.models.paper.solvers.prepare import Prepared, merge_free_units, prepare
from dnnplace.models.paper.workload import Workload
from dnnplace.utils.graph import distinct_edges, topological_order_of_edges


@dataclass(frozen=True)
class LatticeStep:
    """One preparation step: its name, unit count and ideal count (None: more than ``cap``)."""

    step: str
    units: int
    ideals: int | None


SMALL = 5000  # unit DAGs up to this size are counted by the DP's own enumeration


def count_ideals(p: Prepared, cap: int) -> int | None:
    """The number of ideals of ``p``'s unit DAG, or None when it exceeds ``cap``.

    Counting needs no lattice: a large DAG is cut into its series blocks (every unit of one block
    precedes every unit of the next), whose ideal counts add up, and only the blocks are
    enumerated -- linear in a chain, where storing every ideal (a set of units) would be quadratic.
    """
    if p.n_units <= SMALL:
        try:
            return enumerate_ideals(p, cap + 1).n_ideals
        except TooManyIdealsError:
            return None
    return count_ideals_series(p.n_units, p.edge_src, p.edge_dst, cap)


def count_ideals_series(n: int, src: Sequence[int] | np.ndarray, dst: Sequence[int] | np.ndarray,
                        cap: int) -> int | None:
    """Ideals of the DAG on ``n`` units with edges ``src -> dst`` (None: more than ``cap``).

    A series cut splits a topological order into a prefix A and a suffix B with one maximal unit
    ``m`` in A, one minimal unit ``b`` in B and an edge m -> b: then every unit of A precedes every
    unit of B, an ideal is an ideal of A or all of A plus a non-empty ideal of B, and
    I(G) = I(A) + I(B) - 1.  The cuts are found by one compiled scan (linear); blocks of one unit
    add one ideal each, larger blocks are enumerated (bit masks), each within the cap.
    """
    from dnnplace.models.paper.solvers.dp.series_kernel import series_cuts

    if n == 0:
        return 1
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    sptr, sidx = distinct_edges(n, src, dst)
    pptr, pidx = distinct_edges(n, dst, src)
    order = topological_order_of_edges(n, src, dst)
    cuts = series_cuts(order, sptr, sidx, pptr, pidx)
    sizes = np.diff(cuts)
    total = 1 + int(np.count_nonzero(sizes == 1))  # the empty ideal, and one per single-unit block
    if total > cap:
        return None
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    for lo in cuts[:-1][sizes > 1].tolist():
        hi = int(cuts[np.searchsorted(cuts, lo) + 1])
        block = _block_ideals(order[lo:hi].tolist(), pos, lo, pptr, pidx, cap)
        if block is None:
            return None
        total += block - 1  # each block adds its non-empty ideals (on top of all blocks before it)
        if total > cap:
            return None
    return total


def _block_ideals(units: list[int], pos: np.ndarray, lo: int, pptr: np.ndarray, pidx: np.ndarray,
                  cap: int) -> int | None:
    """Ideals of the sub-DAG on ``units`` (a contiguous run of the topological order), or None past ``cap``."""
    k = len(units)
    need = [0] * k  # bit mask of each unit's predecessors inside the block
    for j, v in enumerate(units):
        for u in pidx[pptr[v]: pptr[v + 1]].tolist():
            if pos[u] >= lo:
                need[j] |= 1 << (int(pos[u]) - lo)
    seen = {0}
    frontier = [0]
    while frontier:
        nxt = []
        for ideal in frontier:
            for j in range(k):
                bit = 1 << j
                if not ideal & bit and need[j] & ideal == need[j]:
                    grown = ideal | bit
                    if grown not in seen:
                        seen.add(grown)
                        nxt.append(grown)
                        if len(seen) > cap:
                            return None
        frontier = nxt
    return len(seen)


def lattice_steps(w: Workload, cap: int = 1_000_000) -> list[LatticeStep]:
    """Ideal counts of the raw graph (colour classes contracted), after the reference's reductions
    (SCC fusion, zero-cost leaves) and after dnnplace's exact reductions (free and cheap units folded, inert
    units left out)."""
    raw = prepare(w, merge_trivial=False)
    ref = prepare(w)
    merged = merge_free_units(ref, compute_slack=True)  # as the default solve (no overlapped communication)
    inert = inert_units(merged)
    final = relax(merged, inert).prepared if inert.any() else merged
    return [
        LatticeStep("raw graph", raw.n_units, count_ideals(raw, cap)),
        LatticeStep("reference reductions", ref.n_units, count_ideals(ref, cap)),
        LatticeStep("exact reductions", final.n_units, count_ideals(final, cap)),
    ]


def default_path(steps: list[LatticeStep], max_ideals: int) -> str:
    """What ``dnnplace solve`` does with this lattice under ``--max-ideals``."""
    last = steps[-1].ideals
    if last is not None and last <= max_ideals:
        return f"exact DP over {last:,} ideals (proven optimum)"
    return (f"more than {max_ideals:,} ideals: relaxations that leave out cheap parallel units give a lower"
            " bound, the units put back give a split; status/bound/gap say what was proven")
