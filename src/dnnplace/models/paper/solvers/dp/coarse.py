"""Coarser lattices: restrictions of the unit DAG (units fused) whose optima are real splits.

They bound the optimum from above: a block chain for graphs too large for ideals, a coarse lattice
before a large exact DP (a tighter pruning bound), and the restriction beside each relaxation.
Each takes an absolute ``deadline`` and offers its split to the portfolio's incumbent.
"""

from __future__ import annotations

import numpy as np

from dnnplace.errors import InfeasibleError, TooManyIdealsError
from dnnplace.models.paper.solvers.dp.exact import run_dp
from dnnplace.models.paper.solvers.dp.ideals import IdealLattice, enumerate_ideals
from dnnplace.models.paper.solvers.dp.incumbent import Incumbent, infeasible_message, split_of
from dnnplace.models.paper.solvers.dp.policy import DPOptions
from dnnplace.models.paper.solvers.dp.relax import (
    Relaxed,
    incomparable_counts,
    inert_units,
    relax,
    restriction_groups,
    surely_more_ideals,
    unit_topological_order,
)
from dnnplace.models.paper.solvers.prepare import Prepared, merge_free_units, prepare


def exact_lattice(p: Prepared, options: DPOptions) -> tuple[np.ndarray, Relaxed | None, IdealLattice | None]:
    """Inert units, ``p`` without them, and its lattice if it fits ``max_ideals`` (else None)."""
    inert = inert_units(p)
    base = relax(p, inert) if inert.any() else None
    q = base.prepared if base is not None else p
    try:
        lattice = None if surely_more_ideals(q, options.max_ideals) else enumerate_ideals(q, options.max_ideals)
    except TooManyIdealsError:
        lattice = None
    return inert, base, lattice



def coarse_chain(p: Prepared, best: Incumbent, options: DPOptions, deadline: float | None, stats: dict) -> None:
    """Huge graphs: consecutive runs of one topological order fused into blocks, the block chain solved.

    Fusing is a restriction, so the split is real; the bound is the trivial
    one.  This keeps a graph of 100,000 units to seconds instead of an
    enumeration that cannot finish.
    """
    order = unit_topological_order(p)
    block = np.empty(p.n_units, dtype=np.int64)
    block[order] = np.arange(len(order)) * options.policy.large_units // (2 * len(order))
    fused = merge_free_units(prepare(p.workload, linearize=True, extra_groups=block[p.unit_of]))
    result = run_dp(fused, enumerate_ideals(fused, fused.n_units + 2), p.workload, overlap=options.overlap_comm,
                    deadline=deadline, progress=options.progress)
    stats.update(coarse_blocks=fused.n_units, pairs_examined=result.pairs)
    if np.isfinite(result.value):
        best.offer(split_of(fused, result, None))
    if best.split is None:
        raise InfeasibleError(infeasible_message(p.workload) + f" (or the {p.n_units:,}-unit graph needs a finer"
                              " search than its block chain)")



def parallel_first(p: Prepared, exclude: np.ndarray) -> np.ndarray:
    """Units parallel to others, most parallel per unit of cost first (the ones that multiply the ideals)."""
    inc = incomparable_counts(p)
    mass = p.acc_time + np.bincount(p.comm.home, weights=p.comm.cost, minlength=p.n_units)
    scale = max(float(mass.max(initial=0.0)), 1e-300)
    score = inc / (mass / scale + 1e-3)
    candidates = np.flatnonzero(~exclude & (inc > 0) & p.supported)
    return candidates[np.argsort(-score[candidates], kind="stable")]


def coarse_upper_bound(p: Prepared, n_ideals: int, best: Incumbent, options: DPOptions,
                        deadline: float | None, stats: dict) -> None:
    """Before a large exact DP: the optimum of a coarser lattice, a real split that tightens its pruning.

    The most parallel units are fused to a neighbour (:func:`_restricted_split`,
    a restriction), more of them until the fused lattice has at most a tenth
    of the ideals.  The exact DP's work grows with its upper bound, so a
    split at or near the optimum pays for itself many times over.
    """
    inert = inert_units(p)
    candidates = parallel_first(p, inert)
    k = min(8, candidates.size)
    while k > 0:
        drop = inert.copy()
        drop[candidates[:k]] = True
        labels = fusing_labels(p, drop)
        fused = merge_free_units(prepare(p.workload, contract_layers=options.contract_layers,
                                         linearize=options.linearize, extra_groups=labels),
                                 compute_slack=not options.overlap_comm)
        try:
            lattice = enumerate_ideals(fused, max(64, n_ideals // 10))
        except TooManyIdealsError:
            k = 0 if k == candidates.size else min(2 * k, candidates.size)
            continue
        result = run_dp(fused, lattice, p.workload, overlap=options.overlap_comm, ub=best.cutoff(),
                        deadline=deadline)
        if np.isfinite(result.value):
            best.offer(split_of(fused, result, None))
        stats.update(coarse_units_fused=k, coarse_ideals=lattice.n_ideals, coarse_value=float(result.value))
        return


def fusing_labels(p: Prepared, drop: np.ndarray) -> np.ndarray:
    """:func:`restriction_groups`, with left-out units that have no neighbour at all joined to one other unit.

    Such units are inert (they cost nothing: see :func:`inert_units`); left alone
    each would double the fused lattice.
    """
    isolated = np.ones(p.n_units, dtype=bool)
    isolated[p.edge_src] = False
    isolated[p.edge_dst] = False
    labels = restriction_groups(p, drop)
    alone = (drop & isolated)[p.unit_of]
    if alone.any() and (~alone).any():
        labels[alone] = labels[np.flatnonzero(~alone)[0]]
    return labels


def restricted_split(p: Prepared, drop: np.ndarray, best: Incumbent, options: DPOptions,
                      deadline: float | None, budget: int | None = None) -> None:
    """Offer the optimum of the graph with the left-out units fused to a neighbour (a real split).

    ``budget`` caps the fused lattice (a restriction is only worth a DP about
    as large as the relaxation's).
    """
    fused = merge_free_units(prepare(p.workload, contract_layers=options.contract_layers,
                                     linearize=options.linearize, extra_groups=fusing_labels(p, drop)),
                             compute_slack=not options.overlap_comm)
    try:
        lattice = enumerate_ideals(fused, options.max_ideals if budget is None else min(budget, options.max_ideals))
    except TooManyIdealsError:
        return
    result = run_dp(fused, lattice, p.workload, overlap=options.overlap_comm, ub=best.cutoff(), deadline=deadline)
    if np.isfinite(result.value):
        best.offer(split_of(fused, result, None))

