"""Lower bounds (and splits) from relaxations of a lattice too large for the exact DP.

A relaxation leaves units out (:func:`~dnnplace.models.paper.solvers.dp.relax.relax`) until
its lattice fits the ideal budget; its optimum is a lower bound and, with the
units put back, a split.  These are pure algorithms over the portfolio's
incumbent: each takes an absolute ``deadline`` (the hard stop, which raises
:class:`~dnnplace.errors.SolverTimeout`) and ``refine_until`` (when optional
narrowing stops), and reads no clock beyond checking them.
"""

from __future__ import annotations

import numpy as np

from dnnplace.core.solver import expired
from dnnplace.errors import SolverTimeout, TooManyIdealsError
from dnnplace.models.paper.solvers.dp.coarse import parallel_first, restricted_split
from dnnplace.models.paper.solvers.dp.exact import run_dp
from dnnplace.models.paper.solvers.dp.fluid import fluid_bound
from dnnplace.models.paper.solvers.dp.ideals import enumerate_ideals
from dnnplace.models.paper.solvers.dp.incumbent import Incumbent, split_of
from dnnplace.models.paper.solvers.dp.policy import DPOptions
from dnnplace.models.paper.solvers.dp.relax import (
    anchors,
    gathering_units,
    inert_units,
    relax,
    spine,
    surely_more_ideals,
    view_units,
)
from dnnplace.models.paper.solvers.prepare import Prepared

#: A prepared graph's views, its views and inert units together, and its :func:`parallel_first` order.
Parts = tuple[np.ndarray, np.ndarray, np.ndarray]


def relaxation_parts(p: Prepared, inert: np.ndarray) -> Parts:
    """What the relaxations of ``p`` leave out first (views and inert units) and in what order the rest."""
    views = view_units(p) & ~inert
    base = inert | views
    return views, base, parallel_first(p, base)


def relaxation_search(p: Prepared, parts: Parts, best: Incumbent, options: DPOptions, deadline: float | None,
                      stats: dict, refine_until: float, tried: int = 0) -> None:
    """Relaxations that fit the ideal budget, from a count of left-out units that doubles until one fits.

    Units are left out in order of how many units they run beside per unit
    of cost they carry (so views and other free units parallel to much of the
    graph go first); the count doubles until the lattice fits, then each
    fitting relaxation is solved exactly, and the search narrows between the
    largest count that did not fit and the smallest that did while the gap
    is above ``options.gap`` and until ``refine_until`` (once some bound is proven).

    Left-out units pass an input on (``relax(pass_on=True)``) and a piece is
    charged the compute of the left-out units it must hold (:func:`anchors`):
    where per-step read-outs are a large share of the work and all parallel
    to a scan, this takes the bound to the optimum itself.
    ``tried``: relaxations solved before this search (the spine's).
    """
    views, base, candidates = parts
    too_few, enough = -1, None
    k = 0  # then: views and inert units alone (a nearly exact relaxation)
    if not views.any() and candidates.size:
        too_few, k = 0, min(8, candidates.size)  # inert units alone: the lattice solve_dp already found too large
    while True:
        if expired(deadline):
            raise SolverTimeout("dp: time limit reached while relaxing")
        if enough is not None and expired(refine_until):
            break
        drop = base.copy()
        drop[candidates[:k]] = True
        if not solve_relaxation(p, drop, views, best, options, deadline, refine_until, stats):
            too_few = k
        else:
            enough = k
            tried += 1
            if best.gap() <= options.gap:
                break
        if enough is None:
            if k == candidates.size:
                break
            k = min(max(8, 2 * k), candidates.size)
        else:
            nxt = (too_few + enough) // 2
            if nxt <= too_few or nxt >= enough:
                break
            k = nxt
    stats["relaxations"] = tried


def spine_relaxation(q: Prepared, best: Incumbent, options: DPOptions, deadline: float | None,
                     refine_until: float, stats: dict, parts: Parts | None = None) -> bool:
    """Everything parallel to a longest path of ``q`` left out (a chain lattice: a cut through a scan).

    First with the gathering units kept too (:func:`relax.gathering_units`) and left-out compute charged to
    its readers (:func:`relax.receivers`), if that lattice has at most ``policy.spine_ideals`` ideals: in a
    training scan cut in the middle, every step on the far side sends its gradients of the sliced tensors
    to their gathering nodes, and each read-out's gradient to its step.
    Then, unless that closed the gap, the plain spine (neither form bounds better everywhere).

    ``parts``: ``q``'s :func:`relaxation_parts`, when the caller has them.  Does some relaxation fit?
    """
    if parts is None:
        parts = relaxation_parts(q, inert_units(q))
    views, base, candidates = parts
    drop = base.copy()
    drop[candidates[~spine(q)[candidates]]] = True
    if drop.sum() == base.sum():
        return False
    gather = drop & ~base & gathering_units(q)
    saved, best.deficit = best.deficit, q.deficit  # bounds proven on q lose q's deficit alone
    try:
        gathered = bool(gather.any()) and not options.overlap_comm and solve_relaxation(
            q, drop & ~gather, views, best, options, deadline, refine_until, stats,
            max_ideals=options.policy.spine_ideals, receive=True)
        if gathered and best.gap() <= options.gap:
            return True
        return solve_relaxation(q, drop, views, best, options, deadline, refine_until, stats) or gathered
    finally:
        best.deficit = saved


def solve_relaxation(p: Prepared, drop: np.ndarray, views: np.ndarray, best: Incumbent, options: DPOptions,
                     deadline: float | None, refine_until: float, stats: dict, max_ideals: int | None = None,
                     receive: bool = False) -> bool:
    """One relaxation: its bound and splits offered to ``best``; does its lattice fit?

    ``max_ideals``: a smaller budget than ``options.max_ideals`` for this one; ``receive``: see
    :func:`relax.receivers` (neither form of the relaxation bounds better than the other everywhere).
    """
    rel = relax(p, drop, pass_on=True, receive=receive)  # views pass their input on (passed_inputs)
    lattice = None
    budget = options.max_ideals if max_ideals is None else min(max_ideals, options.max_ideals)
    if rel.prepared.n_units and not surely_more_ideals(rel.prepared, budget):
        try:
            lattice = enumerate_ideals(rel.prepared, budget)
        except TooManyIdealsError:
            lattice = None
    if lattice is None:
        return not rel.prepared.n_units
    anchored = anchors(p, rel)
    result = run_dp(rel.prepared, lattice, p.workload, overlap=options.overlap_comm, ub=best.cutoff(),
                    deadline=deadline, progress=options.progress, anchored=anchored)
    stats.update(relaxed_units_left_out=int(drop.sum()), ideals=lattice.n_ideals, pairs_examined=result.pairs)
    if np.isfinite(result.value):
        best.prove(result.value)
        best.offer(split_of(p, result, rel))
        if views.any():
            best.offer(split_of(p, result, rel, lazy=views))
    soft = refine_until if deadline is None else min(deadline, refine_until)
    try:  # optional improvements: bounded by the refinement time
        if best.gap() > options.gap:
            restricted_split(p, drop, best, options, soft, budget=max(4096, 4 * lattice.n_ideals))
        if best.gap() > options.gap:
            fluid_bound(p, rel, lattice, best, options, soft, anchored)
    except SolverTimeout:
        if expired(deadline):
            raise
    return True
