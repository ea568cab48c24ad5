"""The fluid bound: a cap no split of the whole graph stays within, proven on a relaxation's lattice."""

from __future__ import annotations

import numpy as np

from dnnplace.models.paper.solvers.dp.exact import DPResult, run_dp
from dnnplace.models.paper.solvers.dp.ideals import IdealLattice
from dnnplace.models.paper.solvers.dp.incumbent import Incumbent, split_of
from dnnplace.models.paper.solvers.dp.policy import DPOptions
from dnnplace.models.paper.solvers.dp.relax import Relaxed, UnitAnchors, follow_roots
from dnnplace.models.paper.solvers.prepare import Prepared


def fluid_certifies(rel: Relaxed, lattice: IdealLattice, cap: float, overlap: bool,
                    deadline: float | None, anchored: UnitAnchors | None = None) -> bool:
    """Is ``cap`` a proven lower bound: does *no* split of the whole graph keep every load within it?

    The relaxation forgets where most left-out compute runs; yet in any split
    of the whole graph with every load at most ``cap``, each device's relaxed
    load plus the left-out compute it runs is at most ``cap``, and a left-out
    unit runs on a piece no earlier than those of its remaining units before
    it and no later than those of its remaining units after it
    (:func:`relax.anchors`).  So along the chain of pieces, the left-out
    compute placed up to an ideal is at most the spare capacity so far, at
    most the compute that may run within the ideal, and at least the compute
    that must (a unit with a remaining unit after it inside).  The kernel
    finds, per ideal, the most that can be placed (more placed never hurts
    the pieces to come); if no chain of at most ``k`` pieces (an unused
    accelerator holds ``cap`` of left-out work) places it all, no split
    exists.  Without anchors this is the sum test: relaxed loads summing to at
    most ``k * cap - W``.  Read-outs of a scan cut between two pieces must run
    on one of the two, not on a light device elsewhere.  Only for
    budgets without CPU cores and without overlapped communication (a CPU
    would absorb left-out work at another speed; overlapped loads do not add
    up).
    """
    return _fluid_chain(rel, lattice, cap, overlap, deadline, anchored) is None


def _fluid_chain(rel: Relaxed, lattice: IdealLattice, cap: float, overlap: bool, deadline: float | None,
                 anchored: UnitAnchors | None) -> DPResult | None:
    """:func:`fluid_certifies`' test: ``None`` if ``cap`` is certified, else a relaxed chain within it."""
    p = rel.prepared
    w = p.workload
    if w.max_cpus > 0 or overlap:
        return DPResult(np.inf, np.full(p.n_units, -1, dtype=np.int64), 0, 0, 0)  # certifies nothing
    work = rel.fluid_work()
    result = run_dp(p, lattice, w, ub=np.inf, deadline=deadline, piece_cap=cap, anchored=anchored,
                    left_out_work=work)
    if not result.value <= -work + 1e-9 * (cap + work):  # not all left-out work placed (or no chain at all)
        return None
    return result



def fluid_bound(p: Prepared, rel: Relaxed, lattice: IdealLattice, best: Incumbent, options: DPOptions,
                 deadline: float | None, anchored: UnitAnchors | None = None) -> None:
    """Raise ``best.bound`` by :func:`fluid_certifies`: first at the target gap, then by bisection.

    The relaxed chain within the least cap not certified is put back as a split
    too (left-out units following :func:`follow_roots`): its cuts are priced
    with the left-out work in place, unlike the relaxed optimum's.
    """
    if not np.isfinite(best.value):
        return
    target = best.value * (1 - options.gap) + best.deficit  # caps on the folded units (see Incumbent.prove)
    if target <= best.bound + best.deficit:
        return
    small = lattice.n_ideals <= options.policy.fluid_small
    within = _fluid_chain(rel, lattice, target, options.overlap_comm, deadline, anchored)
    lo, hi = best.bound + best.deficit, target  # hi is not certified
    if within is None:
        if not small:
            best.prove(target)
            return
        # a spine's tests take milliseconds: the bound it proves, not just the target (the gap it reports)
        lo, hi = target, best.value + best.deficit
    for _ in range(options.policy.fluid_steps_small if small else options.policy.fluid_steps):
        mid = 0.5 * (lo + hi)
        if mid <= lo * (1 + 1e-6):
            break
        chain = _fluid_chain(rel, lattice, mid, options.overlap_comm, deadline, anchored)
        if chain is None:
            lo = mid
        else:
            hi, within = mid, chain
    best.prove(lo)
    if within is not None and np.isfinite(within.value) and within.chain:
        best.offer(split_of(p, within, rel, follow=follow_roots(p, rel.dropped)))

