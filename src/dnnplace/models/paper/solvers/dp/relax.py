"""Certified answers when the exact lattice is too large: leave cheap parallel units out, then put them back.

Real operator graphs (a transformer's causal mask, position ids, rotary
tables, an encoder-decoder's decoder prologue) contain cheap chains that run
beside long stretches of the graph; their interleavings multiply the ideals.

*Leaving a unit out* is a relaxation: the unit is removed from the order while
the precedence between the remaining units is kept (edges through it are
rewired), its compute, memory and outgoing transfers are dropped, and it stops
counting as a receiver of anyone's output.  Every contiguous split of the
whole graph restricted to the remaining units is a contiguous split of the
relaxed graph whose every device load is no larger, so the relaxed optimum
(found exactly by the DP on a lattice that is never larger, usually far
smaller) is a **lower bound** on the true optimum.

*Putting them back* turns the relaxed optimum into a real split -- each
left-out unit joins the stage of its last predecessor, or, for a unit with no
predecessor, the stage of its first successor -- whose value the evaluator
computes exactly: an **upper bound**.  A unit that costs nothing, stores
nothing and sends and receives nothing is left out exactly (both bounds meet).

Two refinements keep the bound close where the left-out units carry real
work and transfers (a state-space scan's read-outs): a left-out unit *passes an input on*
to its successors at the cheaper of the two transfer costs
(:func:`passed_inputs`), and a piece that holds a remaining unit before a
left-out one and another after it is charged the left-out unit's compute,
since a contiguous piece holds everything between (:func:`anchors`).  Where
many left-out nodes pass on one input, a remaining reader of a left-out unit
can be charged its compute instead: its device runs the unit or receives its
output (:func:`receivers`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dnnplace.models.paper.solvers.prepare import Prepared, comm_sources, memory_binds


@dataclass(frozen=True)
class Relaxed:
    """The relaxed unit DAG and how its units map back to the full one."""

    prepared: Prepared  # remaining units only, renumbered 0..m-1
    kept: np.ndarray  # full unit index of every remaining unit
    dropped: np.ndarray  # bool per full unit
    moved: np.ndarray  # float per full unit: compute charged to a remaining reader (:func:`receivers`)

    def left_out_compute(self, p: Prepared) -> np.ndarray:
        """Per unit of ``p`` (the full units), the accelerator compute the fluid test still places (0 if kept)."""
        return np.where(self.dropped, p.acc_time, 0.0) - self.moved

    def fluid_work(self) -> float:
        """All the accelerator compute the fluid test places: the left-out nodes' less what readers were charged."""
        p = self.prepared
        return float(p.workload.acc_time[p.unit_of < 0].sum()) - float(self.moved.sum())


def unit_adjacency(p: Prepared) -> tuple[list[list[int]], list[list[int]]]:
    """Successor and predecessor lists of the unit DAG."""
    succ: list[list[int]] = [[] for _ in range(p.n_units)]
    pred: list[list[int]] = [[] for _ in range(p.n_units)]
    for a, b in zip(p.edge_src.tolist(), p.edge_dst.tolist(), strict=False):
        succ[a].append(b)
        pred[b].append(a)
    return succ, pred


def unit_topological_order(p: Prepared) -> list[int]:
    """Units in a topological order, the smallest ready index first."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(range(p.n_units))
    g.add_edges_from(zip(p.edge_src.tolist(), p.edge_dst.tolist(), strict=False))
    return [int(u) for u in nx.lexicographical_topological_sort(g)]


def incomparable_counts(p: Prepared) -> np.ndarray:
    """For every unit, how many units are neither its ancestors nor its descendants.

    A unit parallel to many others multiplies the ideals; these are the
    units worth leaving out first.
    """
    anc, desc = _closure(p)
    n = p.n_units
    return np.array([n - 1 - anc[u].bit_count() - desc[u].bit_count() for u in range(n)], dtype=np.int64)


def surely_more_ideals(p: Prepared, budget: int) -> bool:
    """Has ``p``'s unit DAG certainly more than ``budget`` ideals?  (Then enumerating them is wasted work.)

    Take chains ``C_1..C_m`` such that units of different chains are
    incomparable: every choice of one prefix per chain generates a different
    ideal (its down-closure meets each chain in exactly the chosen prefix), so
    there are at least ``prod(|C_i| + 1)`` ideals -- ``2 ** a`` for an
    antichain of ``a`` units.  Greedy chains (an antichain of the most
    parallel units, then every other unit joined to the one chain whose
    members it is all comparable to, if it is incomparable to every other
    chain) cost a fraction of an enumeration that fails at the budget.
    """
    n = p.n_units
    if n == 0:
        return False
    anc, desc = _closure(p)
    related = [anc[u] | desc[u] | (1 << u) for u in range(n)]
    order = sorted(range(n), key=lambda u: related[u].bit_count())
    heads: list[int] = []
    chosen = 0
    for u in order:
        if not related[u] & chosen:
            chosen |= 1 << u
            heads.append(u)
    chains = [1 << u for u in heads]  # members of each chain
    common = [related[u] for u in heads]  # units comparable to every member
    union = chosen
    for v in order:
        bit = 1 << v
        if union & bit:
            continue
        hits = [i for i, c in enumerate(chains) if related[v] & c]
        if len(hits) == 1 and common[hits[0]] & bit:
            i = hits[0]
            chains[i] |= bit
            common[i] &= related[v]
            union |= bit
    count = 1
    for c in chains:
        count *= c.bit_count() + 1
        if count > budget:
            return True
    return False


def _closure(p: Prepared) -> tuple[list[int], list[int]]:
    """Ancestor and descendant bitsets of every unit."""
    succ, pred = unit_adjacency(p)
    order = unit_topological_order(p)
    anc = [0] * p.n_units
    desc = [0] * p.n_units
    for u in order:
        m = 0
        for v in pred[u]:
            m |= anc[v] | (1 << v)
        anc[u] = m
    for u in reversed(order):
        m = 0
        for v in succ[u]:
            m |= desc[v] | (1 << v)
        desc[u] = m
    return anc, desc


def inert_units(p: Prepared) -> np.ndarray:
    """Units that can be left out *exactly*: no compute, no memory (shared groups included), no transfer in or out.

    ``cpu_time`` counts only when the budget has CPU cores, ``size`` only when
    memory can bind (:func:`~dnnplace.models.paper.solvers.prepare.memory_binds`): an
    isolated check that only holds a weight (an ``_assert_tensor_metadata``
    beside every norm) runs beside the whole graph
    and would double the ideals each.
    """
    w = p.workload
    cpu = p.cpu_time if w.max_cpus > 0 else np.zeros(p.n_units)
    touched = np.zeros(p.n_units, dtype=bool)
    src = p.comm
    touched[src.home] = True
    touched[src.target_idx] = True
    binds = memory_binds(w)
    no_memory = ((p.size == 0) & ~p.shared.uses) | (not binds)
    return (p.acc_time == 0) & (cpu == 0) & no_memory & p.supported & ~touched


def view_units(p: Prepared) -> np.ndarray:
    """Units that are one free operator re-describing its only input (a view), forward only.

    Such a unit ``x`` with predecessor ``q`` can be left out while ``q``'s
    output is counted as feeding ``x``'s successors directly (``pass_on`` of
    :func:`relax`): in any split, a device holding a successor of ``x`` but not
    ``x`` receives ``x``'s output, which costs at least ``q``'s (the condition
    checked here), and a device holding ``x`` but not ``q`` receives ``q``'s
    output -- so no device's load rises in the relaxation, which is exactly
    the model in which views are recomputed wherever they are needed.
    Backward units are excluded: there several gradients would stand in for
    one.
    """
    w = p.workload
    members = p.members()
    cpu = p.cpu_time if w.max_cpus > 0 else np.zeros(p.n_units)
    free = (p.acc_time == 0) & (cpu == 0) & (p.size == 0) & ~p.shared.uses & p.supported
    out = np.zeros(p.n_units, dtype=bool)
    c = w.comm_cost
    for u in np.flatnonzero(free).tolist():
        if members[u].size != 1:
            continue
        x = int(members[u][0])
        preds = w.predecessors[x]
        if w.backward[x] or preds.size != 1 or w.backward[preds[0]]:
            continue
        out[u] = c[x] >= c[int(preds[0])] * (1 - 1e-12)
    return out


PASS_ON_RATIO = 0.7  # a left-out node passes an input on only if its own output costs at least this share of it


def passed_inputs(p: Prepared, drop: np.ndarray, ratio: float = PASS_ON_RATIO) -> np.ndarray:
    """Per node of a left-out unit, the input it passes on in the relaxation (-1: none; see :func:`relax`).

    The input ``q`` with the dearest ``min(c_q, c_x)`` is chosen, if that is
    at least ``ratio * c_q``: passing ``q`` on lowers ``q``'s cost to that
    minimum for all its consumers, which would forget most of a large
    tensor's transfers for one small read-out of it.
    """
    w = p.workload
    c = w.comm_cost
    left_out = np.asarray(drop, dtype=bool)[p.unit_of]
    via = np.full(w.n, -1, dtype=np.int64)
    for x in np.flatnonzero(left_out).tolist():
        best, best_key = -1, (0.0, False)
        for q in w.predecessors[x].tolist():
            m = min(float(c[q]), float(c[x]))
            # on a tie, an input a remaining unit produces: one left out may already stand for other tensors
            # (a select_backward's forward select, passing on the sliced tensor, instead of its step's gradient)
            key = (round(m, 12), not left_out[q])
            if key > best_key and m > 0 and m >= ratio * float(c[q]):
                best, best_key = q, key
        via[x] = best
    return via


RECEIVER_FANOUT = 2  # receivers: an input passed on by at least this many left-out nodes


def receivers(p: Prepared, drop: np.ndarray, via: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Left-out units whose compute is charged to a remaining reader of theirs: (via, moved, extra), per unit.

    A remaining unit ``r`` reading the output ``o`` of a node ``b`` of a
    left-out unit ``x`` runs on a device that either holds ``x`` (its compute
    ``t_x``) or receives ``o`` (``c_o``); so ``min(t_x, c_o)`` can be charged
    to ``r`` whatever the split, and the fluid test places only the rest of
    ``t_x``, provided ``b`` passes nothing on (else its pass-on charge and this
    one would both stand for receiving ``o``).  Worth it where ``b`` passed on
    an input that many left-out nodes pass on: such a source is charged once
    per piece however many outputs it stands for (a training scan's per-step
    read-outs each turn the stacked output's gradient into a gradient of
    their step; cut from their steps, every one of those crosses).  One
    reader per left-out unit (two on one device would count its compute
    twice).  Only without overlapped communication: ``t_x`` is compute, ``c_o``
    a transfer.
    """
    w = p.workload
    c = w.comm_cost
    via = via.copy()
    passers = np.bincount(via[via >= 0], minlength=w.n)
    moved = np.zeros(p.n_units)
    extra = np.zeros(p.n_units)
    uo = p.unit_of
    members = p.members()
    for x in np.flatnonzero(drop & (p.acc_time > 0)).tolist():
        best: tuple[float, int, int] | None = None
        for b in members[x].tolist():
            if via[b] < 0 or passers[via[b]] < RECEIVER_FANOUT or c[b] <= 0:
                continue
            readers = [int(uo[s]) for s in w.successors[b].tolist() if uo[s] >= 0 and not drop[uo[s]]]
            if readers and (best is None or c[b] > best[0]):
                best = (float(c[b]), b, readers[0])
        if best is not None:
            cost, b, r = best
            via[b] = -1
            moved[x] = min(float(p.acc_time[x]), cost)
            extra[r] += moved[x]
    return via, moved, extra


def relax(p: Prepared, drop: np.ndarray, pass_on: bool = False, receive: bool = False) -> Relaxed:
    """Leave the units marked in ``drop`` out of ``p`` (see the module docstring).

    With ``pass_on`` every left-out node passes one input on to its
    successors in the relaxed transfer costs (:func:`passed_inputs`), at the
    cheaper of the two costs -- a view (:func:`view_units`) its base's, and a
    left-out read-out still the transfer its input would need (a scan's
    per-step ``h_t @ C_t``).  With ``receive`` (and ``pass_on``) some left-out
    compute is charged to remaining readers instead (:func:`receivers`).
    """
    drop = np.asarray(drop, dtype=bool)
    via = passed_inputs(p, drop) if pass_on else None
    moved = extra = np.zeros(p.n_units)
    if via is not None and receive:
        via, moved, extra = receivers(p, drop, via)
    kept = np.flatnonzero(~drop)
    new_index = np.full(p.n_units, -1, dtype=np.int64)
    new_index[kept] = np.arange(kept.size)
    succ, _ = unit_adjacency(p)
    edges: set[tuple[int, int]] = set()
    reach: dict[int, set[int]] = {}  # dropped unit -> kept units reachable through dropped ones

    def kept_successors(u: int) -> set[int]:
        if u in reach:
            return reach[u]
        out: set[int] = set()
        stack = [u]
        seen = {u}
        while stack:
            x = stack.pop()
            for y in succ[x]:
                if not drop[y]:
                    out.add(y)
                elif y not in seen:
                    if y in reach:
                        out |= reach[y]
                    else:
                        seen.add(y)
                        stack.append(y)
        reach[u] = out
        return out

    for a in kept.tolist():
        for b in succ[a]:
            targets = kept_successors(b) if drop[b] else {b}
            for t in targets:
                edges.add((int(new_index[a]), int(new_index[t])))
    pairs = np.array(sorted(edges), dtype=np.int64).reshape(-1, 2)
    unit_of = new_index[p.unit_of]
    relaxed = Prepared(
        workload=p.workload,
        unit_of=unit_of,
        acc_time=p.acc_time[kept] + extra[kept],
        cpu_time=p.cpu_time[kept],
        size=p.size[kept],
        supported=p.supported[kept],
        edge_src=pairs[:, 0].copy(),
        edge_dst=pairs[:, 1].copy(),
        comm=comm_sources(p.workload, unit_of, via=via),
        shared=p.shared.kept(kept),  # a left-out unit's groups are forgotten with its memory (a relaxation)
    )
    return Relaxed(relaxed, kept, drop, moved)


@dataclass(frozen=True)
class UnitAnchors:
    """Left-out units that lie between remaining ones, in the relaxed units' numbering (see :func:`anchors`)."""

    ptr: np.ndarray  # int64 (m+1,): CSR over remaining units
    item: np.ndarray  # int64: the left-out unit, numbered 0..t-1
    side: np.ndarray  # int8: 0 if the remaining unit comes before it, 1 if after
    weight: np.ndarray  # float64 (t,): its accelerator compute
    n_before: np.ndarray  # int64 (t,): how many remaining units come before it (0: it may run on the first piece)


def anchors(p: Prepared, rel: Relaxed) -> UnitAnchors:
    """For every left-out unit with compute, the remaining units nearest before and after it.

    A contiguous piece holding a remaining unit before a left-out unit ``x``
    (an ancestor reached through left-out units only) and one after it holds
    ``x`` too, since it holds every path between them; so its compute can be
    charged to that piece while the relaxation stays a lower bound.  Without
    this, left-out compute is fluid and the bound forgets where it must run
    (a scan's read-outs ``h_t @ C_t``: a large share of the work, between the
    scan step and the stack of its layer).  Units with remaining units on one side
    only (or none) are items too: the fluid test keeps each item between the
    pieces of its nearest units (:func:`~dnnplace.models.paper.solvers.dp.fluid.fluid_certifies`).
    """
    succ, pred = unit_adjacency(p)
    new_index = np.full(p.n_units, -1, dtype=np.int64)
    new_index[rel.kept] = np.arange(rel.kept.size)
    dropped = rel.dropped

    def frontier(u: int, nbrs: list[list[int]]) -> set[int]:
        out: set[int] = set()
        seen = {u}
        stack = [u]
        while stack:
            for y in nbrs[stack.pop()]:
                if y in seen:
                    continue
                seen.add(y)
                if dropped[y]:
                    stack.append(y)
                else:
                    out.add(int(new_index[y]))
        return out

    rows: list[list[tuple[int, int]]] = [[] for _ in range(rel.kept.size)]
    weight: list[float] = []
    n_before: list[int] = []
    work = rel.left_out_compute(p)
    for u in np.flatnonzero(dropped & (work > 0)).tolist():
        before, after = frontier(u, pred), frontier(u, succ)
        t = len(weight)
        weight.append(float(work[u]))
        n_before.append(len(before))
        for a in before:
            rows[a].append((t, 0))
        for b in after:
            rows[b].append((t, 1))
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=ptr[1:])
    flat = [e for r in rows for e in r]
    return UnitAnchors(ptr=ptr, item=np.array([e[0] for e in flat], dtype=np.int64),
                       side=np.array([e[1] for e in flat], dtype=np.int8), weight=np.array(weight, dtype=np.float64),
                       n_before=np.array(n_before, dtype=np.int64))


def spine(p: Prepared) -> np.ndarray:
    """The units of a longest path of the unit DAG (most units), as a mask.

    Keeping only these gives a relaxation whose lattice is a chain, whatever
    the width of the graph; with the fluid test's windows
    (:func:`anchors`) it still prices a cut through a scan, whose steps are
    the longest path of a state-space layer.
    """
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(range(p.n_units))
    g.add_edges_from(zip(p.edge_src.tolist(), p.edge_dst.tolist(), strict=True))
    out = np.zeros(p.n_units, dtype=bool)
    out[nx.dag_longest_path(g)] = True
    return out


GATHER_INPUTS = 8  # gathering_units: a node with at least this many inputs


def gathering_units(p: Prepared) -> np.ndarray:
    """Units holding a node that reads many tensors (at least :data:`GATHER_INPUTS`), as a mask.

    Left out, such a node passes one input on and forgets the rest, so the
    tensors it gathers cross a cut for free; kept beside the spine, each
    crosses on its own.  A training scan's per-step gradients of a sliced
    tensor all flow into the gradient of that tensor: cut a scan in the
    middle, and the steps on the far side send one each.
    """
    w = p.workload
    indeg = np.array([q.size for q in w.predecessors], dtype=np.int64)
    out = np.zeros(p.n_units, dtype=bool)
    units = p.unit_of[indeg >= GATHER_INPUTS]
    out[units[units >= 0]] = True
    return out


def follow_roots(p: Prepared, drop: np.ndarray) -> np.ndarray:
    """Per unit, the unit whose stage a left-out unit takes when put back by :func:`reinsert` (``-1``: its own rule).

    A free left-out unit (a slice, a view) goes with its earliest successor, so
    that a tensor sliced per scan step crosses once rather than once per
    slice; any other goes with its latest predecessor outside its own group
    (a read-out ``h_t @ C_t`` with its step ``h_t``, not with ``C``, whose
    slice joined the read-out).  Resolved through chains of left-out units;
    a unit that reaches no remaining one keeps ``-1``.
    """
    succ, pred = unit_adjacency(p)
    order = unit_topological_order(p)
    rank = np.empty(p.n_units, dtype=np.int64)
    rank[order] = np.arange(len(order))
    label = np.arange(p.n_units, dtype=np.int64)
    free = p.acc_time == 0

    def find(x: int) -> int:
        while label[x] != x:
            x = int(label[x])
        return x

    for u in reversed(order):
        if drop[u] and free[u] and succ[u]:
            label[u] = find(min(succ[u], key=lambda v: rank[v]))
    for u in order:
        if drop[u] and not (free[u] and succ[u]):
            outside = [v for v in pred[u] if find(v) != find(u)]
            if outside:
                label[u] = find(max(outside, key=lambda v: rank[v]))
            elif succ[u]:
                label[u] = find(min(succ[u], key=lambda v: rank[v]))
    root = np.array([find(u) for u in range(p.n_units)], dtype=np.int64)
    return np.where(drop[root], -1, root)


def reinsert(p: Prepared, rel: Relaxed, kept_position: np.ndarray, n_positions: int,
             lazy: np.ndarray | None = None, follow: np.ndarray | None = None) -> np.ndarray:
    """Chain position (stage index in pipeline order) of every full unit.

    Remaining units keep the position the relaxed split gave them; a left-out
    unit joins its last predecessor's stage, or, without predecessors or when
    marked ``lazy``, its first successor's (the first stage if it has
    neither).  Precedence holds because the relaxed order kept every path
    through left-out units.  ``follow`` (:func:`follow_roots`) puts left-out
    units with the remaining unit named instead; the split may then not be a
    pipeline, which the evaluator checks.
    """
    succ, pred = unit_adjacency(p)
    order = unit_topological_order(p)
    pos = np.full(p.n_units, -1, dtype=np.int64)
    pos[rel.kept] = kept_position
    if follow is not None:
        led = rel.dropped & (follow >= 0)
        pos[led] = pos[follow[led]]
    first_after = np.full(p.n_units, n_positions - 1, dtype=np.int64)
    for u in reversed(order):
        if pos[u] >= 0:
            first_after[u] = pos[u]
        elif succ[u]:
            first_after[u] = min(int(first_after[v]) for v in succ[u])
    for u in order:
        if rel.dropped[u] and pos[u] < 0:
            after = max(int(pos[v]) for v in pred[u]) if pred[u] else 0
            if not pred[u] or (lazy is not None and lazy[u]):
                pos[u] = max(after, int(first_after[u]))
            else:
                pos[u] = after
    return pos


def restriction_groups(p: Prepared, drop: np.ndarray, lazy: bool = False) -> np.ndarray:
    """Per node, a label that fuses every left-out unit with one remaining neighbour.

    Fusing is a *restriction* (fewer splits, each one real), so the optimum of
    the fused graph is an upper bound.  A unit with predecessors joins the
    latest of them in topological order, a unit without joins its earliest
    successor; neither can close a cycle (no other path joins a unit to its
    latest predecessor or its earliest successor), and the fused lattice is
    never larger than the relaxed one.  ``lazy`` mirrors it: a unit with
    successors joins the earliest of them, a sink its latest predecessor --
    the better restriction for branches that float from a shared prologue to
    the layer that reads them (relative-position branches).
    """
    succ, pred = unit_adjacency(p)
    order = unit_topological_order(p)
    rank = np.empty(p.n_units, dtype=np.int64)
    rank[order] = np.arange(len(order))
    label = np.arange(p.n_units, dtype=np.int64)
    first, second = (succ, pred) if lazy else (pred, succ)
    along = list(reversed(order)) if lazy else order
    for u in along:  # units with a neighbour on the first side: that side is settled before them
        if drop[u] and first[u]:
            label[u] = label[(min if lazy else max)(first[u], key=lambda v: rank[v])]
    for u in reversed(along):  # the rest, from the other end
        if drop[u] and not first[u] and second[u]:
            label[u] = label[(max if lazy else min)(second[u], key=lambda v: rank[v])]
    return label[p.unit_of]
