"""The exact reduction of free units: fold a unit that computes nothing into its only neighbour."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from dnnplace.models.paper.solvers.prepare.comm import comm_sources
from dnnplace.models.paper.solvers.prepare.units import Prepared, memory_binds
from dnnplace.utils.graph import class_index


def merge_free_units(p: Prepared, *, compute_slack: bool = False, allowance: float = 0.0) -> Prepared:
    """Exact reduction: fold units that compute nothing into their only neighbour on one side.

    A unit ``x`` with zero accelerator time (and zero CPU time, unless the
    budget has no CPU), zero size and no shared parameter group (both only where memory can bind) and no
    unsupported node is moved to the
    device of its only predecessor ``q`` (or only successor ``s``) when the
    transfers that may *start* crossing there cost no more than those that
    certainly *stop*.  Moving ``x`` from device B to the neighbour's device A
    changes only A's and B's loads, and for both the accounting is the same:

    * certainly stop: sources homed at the neighbour that feed ``x`` alone,
      and sources of ``x`` that feed the neighbour alone;
    * may start: sources feeding ``x`` from elsewhere (towards a successor:
      unless they also feed it), and the other sources of ``x``.

    So every contiguous split can be rewritten with ``x`` beside that
    neighbour without raising any device's load: the optimum is unchanged
    while the lattice shrinks.  This folds views, reshapes and other
    metadata-only operators (free on a GPU) into their producers, forward and
    backward alike, and the reference's zero-cost leaves too.  Where memory
    cannot bind (:func:`memory_binds`) a unit's size does not count.

    ``compute_slack`` (only for budgets without CPU cores and without
    overlapped communication, where a load is compute plus transfers): a unit
    that *does* compute also folds when the transfers that certainly stop
    outweigh those that may start by at least its compute -- A's load then
    still does not rise, and B loses the compute too.  The ``1 + weight`` of
    an RMS norm (a weight vector, no predecessor) costs less than sending
    its output, so it joins the norm instead of floating beside the graph.

    ``allowance`` (with ``compute_slack``): folds whose balance falls short by
    ``d > 0`` are applied too while the shortfalls sum to at most the
    allowance.  Each raises no load by more than its ``d`` in the rewritten
    optimal split, so the folded optimum exceeds the true one by at most the
    sum, recorded as :attr:`Prepared.deficit` (a training graph's ``1 + weight``
    with its backward costs 2.5 us more than the transfer it saves).
    """
    w = p.workload
    unit_of = p.unit_of.copy()
    cpu_matters = w.max_cpus > 0
    sizes_matter = memory_binds(w)
    slack = compute_slack and not cpu_matters
    left = allowance if slack else 0.0
    deficit = p.deficit
    if not slack and not ((p.acc_time == 0) & ((p.cpu_time == 0) | (not cpu_matters))
                          & ((p.size == 0) | (not sizes_matter)) & p.supported).any():
        return p  # no unit is free: nothing to fold (the loop below would find the same)
    while True:
        n = int(unit_of.max()) + 1
        src = comm_sources(w, unit_of)
        edges = _unit_edges(p, unit_of)
        preds: list[set[int]] = [set() for _ in range(n)]
        succs: list[set[int]] = [set() for _ in range(n)]
        for a, b in edges:
            preds[b].add(a)
            succs[a].add(b)
        acc = np.bincount(unit_of, weights=w.acc_time, minlength=n)
        cpu = np.bincount(unit_of, weights=w.cpu_time, minlength=n) if cpu_matters else np.zeros(n)
        size = np.bincount(unit_of, weights=w.size, minlength=n)
        unsup = np.bincount(unit_of, weights=~w.supported, minlength=n)
        shares = np.zeros(n, dtype=bool)
        if sizes_matter:
            shares[unit_of[w.shared.nodes]] = True
        home = src.home.tolist()
        cost = src.cost.tolist()
        targets = [frozenset(src.target_idx[src.target_ptr[s]: src.target_ptr[s + 1]].tolist())
                   for s in range(len(home))]
        feeding: list[list[int]] = [[] for _ in range(n)]
        homed: list[list[int]] = [[] for _ in range(n)]
        for s, ts in enumerate(targets):
            homed[home[s]].append(s)
            for t in ts:
                feeding[t].append(s)

        table = (feeding, homed, home, targets, cost)
        # a unit using a shared parameter group is not free where memory binds (its copy is memory on its device)
        free = (slack | ((acc == 0) & (cpu == 0))) & ((size == 0) | (not sizes_matter)) & (unsup == 0) & ~shares
        # one pass applies every merge whose inputs no earlier merge of the pass has touched
        into = np.arange(n)
        dirty: set[int] = set()
        for x in np.flatnonzero(free).tolist():
            if x in dirty:
                continue
            nb = -1
            margin = float(acc[x])
            short = np.inf
            if len(preds[x]) == 1:
                short = _balance(x, next(iter(preds[x])), False, table, margin)
                if short <= left:
                    nb = next(iter(preds[x]))
            if nb < 0 and len(succs[x]) == 1:
                short = _balance(x, next(iter(succs[x])), True, table, margin)
                if short <= left:
                    nb = next(iter(succs[x]))
            if nb < 0 or nb in dirty:
                continue
            if short > 0:
                left -= short
                deficit += short
            into[x] = nb
            for u in (x, nb):
                dirty.add(u)
                dirty.update(preds[u])
                dirty.update(succs[u])
                for src_id in homed[u] + feeding[u]:
                    dirty.add(home[src_id])
                    dirty.update(targets[src_id])
        if not dirty:
            break
        unit_of = class_index(into[unit_of])[0]
    if int(unit_of.max()) + 1 == p.n_units:
        return p
    edges = _unit_edges(p, unit_of)
    out = Prepared.of(w, unit_of, np.array([a for a, _ in edges], dtype=np.int64),
                      np.array([b for _, b in edges], dtype=np.int64))
    return replace(out, deficit=deficit) if deficit > 0 else out


def _balance(x: int, nb: int, towards_successor: bool, table: tuple, margin: float = 0.0) -> float:
    """How far the transfers that certainly stop fall short of those that may start plus ``margin`` (``x`` joining
    ``nb``): at most 0 means the fold raises no load."""
    feeding, homed, home, targets, cost = table
    stop = start = 0.0
    for s in feeding[x]:
        if home[s] == nb and targets[s] == {x}:
            stop += cost[s]
        elif home[s] != nb and not (towards_successor and nb in targets[s]):
            start += cost[s]
    for s in homed[x]:
        if targets[s] == {nb}:
            stop += cost[s]
        else:
            start += cost[s]
    return start + margin - stop


def _unit_edges(p: Prepared, unit_of: np.ndarray) -> list[tuple[int, int]]:
    """``p``'s unit edges re-labelled by a coarser ``unit_of``."""
    relabel = np.zeros(p.n_units, dtype=np.int64)
    relabel[p.unit_of] = unit_of
    out = {(int(relabel[a]), int(relabel[b])) for a, b in zip(p.edge_src.tolist(), p.edge_dst.tolist(), strict=False)}
    return sorted((a, b) for a, b in out if a != b)
