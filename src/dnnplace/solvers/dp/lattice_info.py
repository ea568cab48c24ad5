"""How large the DP's lattice is at each step of preparation, and which path ``solve`` will take."""

from __future__ import annotations

from dataclasses import dataclass

from dnnplace.errors import TooManyIdealsError
from dnnplace.model.workload import Workload
from dnnplace.prepare.contract import Prepared, merge_free_units, prepare
from dnnplace.solvers.dp.ideals import enumerate_ideals
from dnnplace.solvers.dp.relax import inert_units, relax


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
    return count_ideals_series(p.n_units, p.edge_src.tolist(), p.edge_dst.tolist(), cap)


def count_ideals_series(n: int, src: list[int], dst: list[int], cap: int) -> int | None:
    """Ideals of the DAG on ``n`` units with edges ``src -> dst`` (None: more than ``cap``).

    A series cut splits a topological order into a prefix A and a suffix B with one maximal unit
    ``m`` in A, one minimal unit ``b`` in B and an edge m -> b: then every unit of A precedes every
    unit of B, an ideal is an ideal of A or all of A plus a non-empty ideal of B, and
    I(G) = I(A) + I(B) - 1.  Blocks between cuts are enumerated (bit masks), each within the cap.
    """
    succ: list[list[int]] = [[] for _ in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(src, dst, strict=True):
        succ[a].append(b)
        pred[b].append(a)
    indeg = [len(x) for x in pred]
    order = [v for v in range(n) if indeg[v] == 0]
    for v in order:  # Kahn's algorithm; the list grows while it is read
        for x in succ[v]:
            indeg[x] -= 1
            if indeg[x] == 0:
                order.append(x)
    pos = [0] * n
    for i, v in enumerate(order):
        pos[v] = i
    # maxima of each prefix order[:i], minima of each suffix order[i:]
    unique_max = [-1] * (n + 1)  # the prefix's only maximal unit, or -1
    maxima: set[int] = set()
    later_succ = [0] * n  # successors inside the prefix
    for i, v in enumerate(order):
        maxima.add(v)
        for u in pred[v]:
            if later_succ[u] == 0:
                maxima.discard(u)
            later_succ[u] += 1
        unique_max[i + 1] = next(iter(maxima)) if len(maxima) == 1 else -1
    unique_min = [-1] * (n + 1)
    minima: set[int] = set()
    earlier_pred = [0] * n
    for i in range(n - 1, -1, -1):
        v = order[i]
        minima.add(v)
        for x in succ[v]:
            if earlier_pred[x] == 0:
                minima.discard(x)
            earlier_pred[x] += 1
        unique_min[i] = next(iter(minima)) if len(minima) == 1 else -1
    cuts = [0]
    for i in range(1, n):
        m, b = unique_max[i], unique_min[i]
        if m >= 0 and b >= 0 and b in succ[m]:
            cuts.append(i)
    cuts.append(n)
    total = 1  # the empty ideal
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        block = _block_ideals(order[lo:hi], pos, lo, pred, cap)
        if block is None:
            return None
        total += block - 1  # each block adds its non-empty ideals (on top of all blocks before it)
        if total > cap:
            return None
    return total


def _block_ideals(units: list[int], pos: list[int], lo: int, pred: list[list[int]], cap: int) -> int | None:
    """Ideals of the sub-DAG on ``units`` (a contiguous run of the topological order), or None past ``cap``."""
    k = len(units)
    if k == 1:
        return 2
    need = [0] * k  # bit mask of each unit's predecessors inside the block
    for j, v in enumerate(units):
        for u in pred[v]:
            if pos[u] >= lo:
                need[j] |= 1 << (pos[u] - lo)
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
    (SCC fusion, zero-cost leaves) and after dnnplace's exact reductions (free units folded, inert
    units left out)."""
    raw = prepare(w, merge_trivial=False)
    ref = prepare(w)
    merged = merge_free_units(ref)
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
