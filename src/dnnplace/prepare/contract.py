"""Preparation: from a workload to the forward *unit* DAG the DP and IPs work on.

SPEC "Contiguity and ideals": colour classes are contracted (forward and
backward parts separately), a colour class with only backward nodes gets an
artificial forward node wired as the mirror image of its backward edges,
strongly connected components of the forward graph are fused, and zero-cost
forward leaves are merged into their only neighbour.  Optionally nodes sharing
a ``layerId`` are fused first and the result is linearised.

A *unit* is one forward vertex together with its colour class's backward
nodes: a contiguous split of units is a split of the original graph in which
every colour class stays together.  Communication is *not* contracted: it is
described per original node by :class:`CommSources` so that costs stay exact.
Shared parameter groups are not contracted either: :class:`UnitShared` says
which groups each unit uses, so a piece of units holds each group once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import networkx as nx
import numpy as np

from dnnplace.model.workload import Workload
from dnnplace.prepare.unionfind import UnionFind
from dnnplace.utils.graph import class_index, distinct_pairs, topological_order, topological_order_of_edges

ZERO = 1e-6  # the reference's threshold for "costs nothing"


@dataclass(frozen=True)
class CommSources:
    """Original producers of cut-able outputs, merged by (home unit, target units).

    A source crosses a set ``S`` of units when its home is in ``S`` and some
    target is not, or its home is not and some target is.

    A relaxation's *sliced* source (``slice_cost`` finite, see
    :func:`_comm_sources_via`) reaches each target through its own chain of
    left-out nodes: ``S`` then pays at least ``min(trunk_cost, m *
    slice_cost)`` for the ``m`` targets on the other side of its boundary
    (Mamba's discretised tensors, one ``select`` per scan step); ``cost`` is
    that charge for ``m = 1``, which is all a reader ignoring the slices
    charges.
    """

    home: np.ndarray  # int64 (s,)
    cost: np.ndarray  # float64 (s,)
    target_ptr: np.ndarray  # int64 (s+1,) CSR into target_idx
    target_idx: np.ndarray  # int64
    slice_cost: np.ndarray | None = None  # float64 (s,): per target's own chain; inf for a plain source
    trunk_cost: np.ndarray | None = None  # float64 (s,): of the part the chains share


@dataclass(frozen=True)
class UnitShared:
    """The shared parameter groups each unit uses (CSR), and each group's bytes.

    A set of units holds ``size[g]`` once for every group ``g`` used by at
    least one of its units (SPEC "Shared parameters").
    """

    ptr: np.ndarray  # int64 (units+1,)
    group: np.ndarray  # int64 group indices; unit u uses group[ptr[u]:ptr[u+1]]
    size: np.ndarray  # float64 (groups,)

    @staticmethod
    def of(w: Workload, unit_of: np.ndarray, n_units: int) -> UnitShared:
        """From a node -> unit map (unit -1: a node left out of the problem)."""
        ptr, group = w.shared.by_label(unit_of, n_units)
        return UnitShared(ptr, group, w.shared.size)

    @property
    def uses(self) -> np.ndarray:
        """Per unit: does it use any shared group?"""
        return np.diff(self.ptr) > 0

    def unit_bytes(self) -> np.ndarray:
        """Per unit: the bytes of the groups it uses (a device holding it alone keeps them)."""
        n = self.ptr.size - 1
        return np.bincount(np.repeat(np.arange(n), np.diff(self.ptr)), weights=self.size[self.group], minlength=n)

    def kept(self, kept: np.ndarray) -> UnitShared:
        """The same groups for a subset of the units, renumbered in the order of ``kept``."""
        counts = np.diff(self.ptr)[kept]
        ptr = np.zeros(kept.size + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        parts = [self.group[self.ptr[u]: self.ptr[u + 1]] for u in kept.tolist()]
        group = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return UnitShared(ptr, group.astype(np.int64), self.size)


@dataclass(frozen=True)
class Prepared:
    """The forward unit DAG with per-unit costs and exact communication sources."""

    workload: Workload
    unit_of: np.ndarray  # node index -> unit
    acc_time: np.ndarray  # per unit, forward + backward nodes
    cpu_time: np.ndarray
    size: np.ndarray
    supported: np.ndarray
    edge_src: np.ndarray  # unit DAG edges (deduplicated, acyclic)
    edge_dst: np.ndarray
    comm: CommSources
    shared: UnitShared
    #: how much the optimum of these units may exceed the workload's (folds that may raise a load, see
    #: :func:`merge_free_units`): a bound proven on them minus this is a bound on the workload
    deficit: float = 0.0

    @property
    def n_units(self) -> int:
        return int(self.acc_time.shape[0])

    @staticmethod
    def of(w: Workload, unit_of: np.ndarray, src: np.ndarray, dst: np.ndarray) -> Prepared:
        """Units from a node -> unit map and the unit edges: per-unit sums and the exact transfer sources."""
        n = int(unit_of.max()) + 1 if unit_of.size else 0
        return Prepared(
            workload=w,
            unit_of=unit_of.astype(np.int64),
            acc_time=np.bincount(unit_of, weights=w.acc_time, minlength=n),
            cpu_time=np.bincount(unit_of, weights=w.cpu_time, minlength=n),
            size=np.bincount(unit_of, weights=w.size, minlength=n),
            supported=np.bincount(unit_of, weights=~w.supported, minlength=n) == 0,
            edge_src=np.asarray(src, dtype=np.int64),
            edge_dst=np.asarray(dst, dtype=np.int64),
            comm=comm_sources(w, unit_of),
            shared=UnitShared.of(w, unit_of, n),
        )

    def members(self) -> list[np.ndarray]:
        """Node indices of every unit."""
        order = np.argsort(self.unit_of, kind="stable")
        bounds = np.searchsorted(self.unit_of[order], np.arange(self.n_units + 1))
        return [order[bounds[u]: bounds[u + 1]] for u in range(self.n_units)]


def prepare(
    w: Workload,
    *,
    contract_layers: bool = False,
    linearize: bool = False,
    merge_trivial: bool = True,
    extra_groups: np.ndarray | None = None,
) -> Prepared:
    """Contract ``w`` into units (see module docstring).

    ``extra_groups`` (one label per node) fuses further nodes, as the PipeDream
    emulation does with biconnected components.
    """
    group0 = w.class_of
    uf = UnionFind(w.n_classes)
    if contract_layers:
        _union_by_label(uf, group0, w.layer)
    if extra_groups is not None:
        _union_by_label(uf, group0, extra_groups)
    fwd = ~w.backward
    group = _groups(uf, group0)
    orphan = np.ones(uf_size(uf), dtype=bool)
    orphan[group[fwd]] = False
    # mirror edges for backward-only classes: backward edge ub->vb gives F(vb)->F(ub)
    both_bwd = w.backward[w.edge_src] & w.backward[w.edge_dst]
    mb = np.flatnonzero(both_bwd & (orphan[group[w.edge_src]] | orphan[group[w.edge_dst]]))
    mirror = (w.edge_dst[mb], w.edge_src[mb])  # node index pairs
    true_fw = np.flatnonzero(fwd[w.edge_src] & fwd[w.edge_dst])
    true_edges = (w.edge_src[true_fw], w.edge_dst[true_fw])

    # fuse strongly connected components of the contracted forward graph (there are none when it is
    # acyclic, which a topological order shows in linear time: networkx only for a graph with a cycle)
    ga = np.concatenate([group[true_edges[0]], group[mirror[0]]])
    gb = np.concatenate([group[true_edges[1]], group[mirror[1]]])
    keep = ga != gb
    if topological_order_of_edges(uf_size(uf), ga[keep], gb[keep]).size < uf_size(uf):
        g = nx.DiGraph()
        g.add_nodes_from(np.unique(group).tolist())
        for a, b in (true_edges, mirror):
            ga, gb = group[a], group[b]
            keep = ga != gb
            g.add_edges_from(zip(ga[keep].tolist(), gb[keep].tolist(), strict=False))
        for comp in nx.strongly_connected_components(g):
            if len(comp) > 1:
                it = iter(comp)
                first = next(it)
                for other in it:
                    uf.union(first, other)
        group = _groups(uf, group0)

    if merge_trivial:
        _merge_zero_leaves(w, uf, group0, true_edges, mirror)
        group = _groups(uf, group0)

    # compact group ids to units
    unit_of = class_index(group)[0]
    es, ed = [], []
    for a, b in (true_edges, mirror):
        ua, ub = unit_of[a], unit_of[b]
        keep = ua != ub
        es.append(ua[keep])
        ed.append(ub[keep])
    src = np.concatenate(es) if es else np.zeros(0, np.int64)
    dst = np.concatenate(ed) if ed else np.zeros(0, np.int64)
    if src.size:
        src, dst = distinct_pairs(int(unit_of.max()) + 1, src, dst)
    prepared = Prepared.of(w, unit_of, src, dst)
    return linearized(prepared) if linearize else prepared


def linearized(p: Prepared) -> Prepared:
    """The same units with chain edges added along one topological order."""
    src, dst = _linearize(p.n_units, p.edge_src, p.edge_dst, p.unit_of)
    return replace(p, edge_src=src, edge_dst=dst)


def uf_size(uf: UnionFind) -> int:
    return len(uf.parent)


def _groups(uf: UnionFind, group0: np.ndarray) -> np.ndarray:
    """Every class's group: the root ``uf.find`` returns, found for all at once by pointer jumping."""
    roots = np.asarray(uf.parent, dtype=np.int64)
    while True:
        up = roots[roots]
        if np.array_equal(up, roots):
            return roots[group0]
        roots = up


def _union_by_label(uf: UnionFind, group0: np.ndarray, label: np.ndarray) -> None:
    first: dict[int, int] = {}
    for g, lab in zip(group0.tolist(), label.tolist(), strict=False):
        if lab in first:
            uf.union(first[lab], g)
        else:
            first[lab] = g


def _merge_zero_leaves(w: Workload, uf: UnionFind, group0: np.ndarray,
                       true_edges: tuple[np.ndarray, np.ndarray],
                       mirror: tuple[np.ndarray, np.ndarray]) -> None:
    """Merge every forward vertex that costs nothing and has one edge into its neighbour.

    Mirrors the reference: the vertex's forward time is zero on both device
    kinds, its colour class has no backward work, it touches no backward node,
    and it has exactly one contracted forward edge (true and artificial edges
    counted separately, as the reference keeps both lists).  Unlike the
    reference, a leaf that stores something stays where memory can bind
    (:func:`memory_binds`): fused to its neighbour it could leave no device
    able to hold the pair, and the optimum would rise.
    """
    group = _groups(uf, group0)
    fwd = ~w.backward
    n_groups = uf_size(uf)
    fw_cpu = np.bincount(group, weights=w.cpu_time * fwd, minlength=n_groups)
    fw_acc = np.bincount(group, weights=w.acc_time * fwd, minlength=n_groups)
    bw_sum = np.bincount(group, weights=(w.cpu_time + w.acc_time) * w.backward, minlength=n_groups)
    touches_bwd = np.zeros(n_groups, dtype=bool)
    fb = fwd[w.edge_src] & w.backward[w.edge_dst]
    touches_bwd[group[w.edge_src[fb]]] = True
    shares = np.zeros(n_groups, dtype=bool)  # uses a shared parameter group: it has memory, so it is not free
    if memory_binds(w):  # ... unless no memory limit can ever bind
        shares[group[w.shared.nodes]] = True
    if not ((fw_cpu < ZERO) & (fw_acc < ZERO) & (bw_sum < ZERO) & ~touches_bwd & ~shares).any():
        return  # nothing costs nothing: no merge can start (and merges only start there)
    neighbours: dict[int, list[int]] = {}
    for a, b in (true_edges, mirror):
        ga, gb = group[a], group[b]
        keep = ga != gb
        for x, y in set(zip(ga[keep].tolist(), gb[keep].tolist(), strict=False)):
            neighbours.setdefault(x, []).append(y)
            neighbours.setdefault(y, []).append(x)
    live = set(np.unique(group[fwd]).tolist()) | set(neighbours)

    # a leaf that stores something may not join its neighbour where memory binds: the pair might not fit
    stored = np.bincount(group, weights=w.size, minlength=n_groups) if memory_binds(w) else np.zeros(n_groups)

    def zero(x: int) -> bool:
        return (fw_cpu[x] < ZERO and fw_acc[x] < ZERO and bw_sum[x] < ZERO and not touches_bwd[x]
                and stored[x] == 0 and not shares[x])

    work = [x for x in sorted(live) if zero(x) and len(neighbours.get(x, ())) == 1]
    while work:
        x = work.pop()
        nb = neighbours.get(x, [])
        if x not in live or len(nb) != 1 or not zero(x):
            continue
        m = nb[0]
        root = uf.union(x, m)
        other = x if root == m else m
        # the merged vertex is `root`; fold `other`'s data into it
        nbm = [y for y in neighbours.get(m, []) if y != x]
        neighbours.pop(x, None)
        neighbours.pop(m, None)
        neighbours[root] = nbm
        for y in nbm:
            neighbours[y] = [root if z == m else z for z in neighbours[y]]
        fw_cpu[root] = fw_cpu[x] + fw_cpu[m]
        fw_acc[root] = fw_acc[x] + fw_acc[m]
        bw_sum[root] = bw_sum[x] + bw_sum[m]
        stored[root] = stored[x] + stored[m]
        touches_bwd[root] = touches_bwd[x] or touches_bwd[m]
        shares[root] = shares[x] or shares[m]
        live.discard(other)
        live.add(root)
        if zero(root) and len(nbm) == 1:
            work.append(root)


def _linearize(n_units: int, src: np.ndarray, dst: np.ndarray, unit_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Add chain edges along one topological order (as PipeDream's planner assumes).

    The order is Kahn's algorithm with a stack (depth-first flavour, like the
    reference), sources taken by their first original node.
    """
    first_node = np.full(n_units, np.iinfo(np.int64).max)
    np.minimum.at(first_node, unit_of, np.arange(unit_of.size))
    succ: list[list[int]] = [[] for _ in range(n_units)]
    for a, b in zip(src.tolist(), dst.tolist(), strict=False):
        succ[a].append(b)
    # the stack pops the last pushed: push sources and successors latest-first-node first
    later_first = [sorted(x, key=lambda u: -first_node[u]) for x in succ]
    chain = topological_order(n_units, later_first, sorted(range(n_units), key=lambda u: -first_node[u]))
    s = np.concatenate([src, chain[:-1]])
    d = np.concatenate([dst, chain[1:]])
    pairs = np.unique(np.stack([s, d], axis=1), axis=0)
    return pairs[:, 0], pairs[:, 1]


def comm_sources(w: Workload, unit_of: np.ndarray, mask: np.ndarray | None = None,
                 via: np.ndarray | None = None) -> CommSources:
    """Group original producers by (home unit, set of other units they feed).

    ``mask`` restricts the producers considered (e.g. forward nodes only).
    ``via`` (per node: the one input a left-out node, unit -1, passes on to
    its successors, -1 for none) widens each producer's targets through such
    nodes, at the cheapest cost along the way (:func:`_comm_sources_via`).
    """
    c = w.comm_cost
    keep = (c > 0) & (unit_of >= 0)  # unit -1: a node left out of the problem (a relaxation)
    if mask is not None:
        keep &= mask
    if via is not None:
        return _comm_sources_via(w, unit_of, keep, via)
    return _comm_sources_direct(w, unit_of, keep)


def _sources_of(merged: dict[tuple[int, tuple[int, ...]], float],
                sliced: list[tuple[int, tuple[int, ...], float, float]] | None = None) -> CommSources:
    """CSR :class:`CommSources` of costs keyed by (home unit, sorted target units), in key order; then the
    ``sliced`` sources (home, targets, slice cost, trunk cost), each on its own."""
    sliced = sliced or []
    keys = sorted(merged)
    ptr = np.zeros(len(keys) + len(sliced) + 1, dtype=np.int64)
    idx: list[int] = []
    for i, (_, targets) in enumerate(keys):
        idx.extend(targets)
        ptr[i + 1] = len(idx)
    for i, (_, targets, _, _) in enumerate(sliced, start=len(keys)):
        idx.extend(targets)
        ptr[i + 1] = len(idx)
    plain = np.full(len(keys), np.inf)
    return CommSources(
        home=np.array([k[0] for k in keys] + [e[0] for e in sliced], dtype=np.int64),
        cost=np.array([merged[k] for k in keys] + [min(e[2], e[3]) for e in sliced], dtype=np.float64),
        target_ptr=ptr,
        target_idx=np.array(idx, dtype=np.int64),
        slice_cost=np.concatenate([plain, np.array([e[2] for e in sliced], dtype=np.float64)]),
        trunk_cost=np.concatenate([plain, np.array([e[3] for e in sliced], dtype=np.float64)]),
    )


def _comm_sources_via(w: Workload, unit_of: np.ndarray, keep: np.ndarray, via: np.ndarray) -> CommSources:
    """:func:`comm_sources` where a left-out node ``x`` with ``via[x] = q`` passes ``q``'s output on.

    Producer ``u`` then counts as feeding the kept units reached through
    chains of such nodes, at the cost ``min(c_u, c_x)`` over the nodes ``x``
    on those chains.  This is a relaxation: if a set ``S`` of units splits
    the producer's widened target set, it splits the closed neighbourhood
    (node and consumers) of ``u`` or of one ``x`` on a chain (these overlap
    along the chain), and each ``x`` belongs to one chain only, so the true
    load of ``S`` pays at least that minimum once.  Inputs of a left-out
    node other than ``via`` simply stop feeding it (fewer targets, a
    relaxation too).

    Where the chains from ``u`` share a trunk (``u``, then left-out nodes
    passing it on one to the next) and then part into branches that each
    reach exactly one kept unit of their own, the source is *sliced*
    (:class:`CommSources`): ``S`` with ``m`` targets across its boundary pays
    for a trunk node crossing (at least the trunk's cheapest) or for ``m``
    distinct branch nodes crossing (each at least the cheapest branch's
    cost), as the branches share no node; a target fed by the trunk itself
    costs at least the trunk's cheapest, so counting it as a branch keeps
    the charge a lower bound.
    """
    c = w.comm_cost
    uo = unit_of.tolist()
    succ = w.successors
    vi = via.tolist()
    memo: dict[int, tuple[set[int], float]] = {}

    def onward(x: int) -> tuple[set[int], float]:
        """Kept units that ``x``'s output reaches (directly or passed on), and the cheapest passing node's cost."""
        targets: set[int] = set()
        cheapest = np.inf
        for y in succ[x].tolist():
            if uo[y] >= 0:
                targets.add(uo[y])
            elif vi[y] == x:
                more, m = passed(y)
                if more:
                    targets |= more
                    cheapest = min(cheapest, m)
        return targets, cheapest

    def passed(x: int) -> tuple[set[int], float]:
        """What left-out ``x`` passes its input on to, at the cheapest cost on the way (its own included)."""
        if x not in memo:
            targets, cheapest = onward(x)
            memo[x] = (targets, min(cheapest, float(c[x])) if targets else np.inf)
        return memo[x]

    def branches(u: int) -> tuple[float, float] | None:
        """(slice cost, trunk cost) if ``u``'s chains part into branches with a kept unit each, else ``None``."""
        x, trunk = u, float(c[u])
        while True:  # kept consumers of the trunk pay for it (at least its cheapest node) whatever m is
            passing = [y for y in succ[x].tolist() if vi[y] == x and passed(y)[0]]
            if len(passing) != 1:
                break
            x = passing[0]
            trunk = min(trunk, float(c[x]))
        if len(passing) < 2:
            return None
        seen: set[int] = set()
        for y in passing:
            reached = passed(y)[0]
            if len(reached) != 1 or reached & seen:
                return None
            seen |= reached
        return min(passed(y)[1] for y in passing), trunk

    merged: dict[tuple[int, tuple[int, ...]], float] = {}
    sliced: list[tuple[int, tuple[int, ...], float, float]] = []
    for u in np.flatnonzero(keep).tolist():
        home = uo[u]
        targets, cheapest = onward(u)
        cost = min(float(c[u]), cheapest)
        targets -= {home, -1}
        if targets and cost > 0:
            key = (home, tuple(sorted(targets)))
            parts = branches(u) if len(targets) > 1 else None
            if parts is not None and parts[0] < parts[1]:
                sliced.append((home, key[1], parts[0], parts[1]))
            else:
                merged[key] = merged.get(key, 0.0) + cost
    return _sources_of(merged, sliced)


def _comm_sources_direct(w: Workload, unit_of: np.ndarray, keep: np.ndarray) -> CommSources:
    """:func:`comm_sources` without nodes passing inputs on, by arrays: the producers that feed one other unit
    (nearly all) are grouped by sorting, the few that feed several by a dictionary, in the same order
    (home unit, then the target tuple) and with the same sums (in producer order) as the loop of
    :func:`_comm_sources_via`."""
    c = w.comm_cost
    span = max(w.n, int(unit_of.max(initial=0)) + 1, 1)
    sel = keep[w.edge_src]
    u, t = w.edge_src[sel], unit_of[w.edge_dst[sel]]
    ok = (t != unit_of[u]) & (t >= 0)
    u, t = distinct_pairs(span, u[ok], t[ok])  # by producer, then target
    single = np.bincount(u, minlength=w.n)[u] == 1
    # producers with one target: (home, target) keys, summed in producer order
    su, st = u[single], t[single]
    key = unit_of[su] * span + st
    by_key = np.argsort(key, kind="stable")
    first = np.r_[True, key[by_key][1:] != key[by_key][:-1]] if key.size else np.zeros(0, dtype=bool)
    group = np.empty(key.size, dtype=np.int64)
    group[by_key] = np.cumsum(first) - 1
    s_keys = key[by_key][first]
    s_cost = np.bincount(group, weights=c[su], minlength=s_keys.size)
    # producers with several targets
    merged: dict[tuple[int, tuple[int, ...]], float] = {}
    mu, mt = u[~single], t[~single]
    starts = np.flatnonzero(np.r_[True, mu[1:] != mu[:-1]]).tolist() if mu.size else []
    for a, b in zip(starts, [*starts[1:], mu.size], strict=False):
        k = (int(unit_of[mu[a]]), tuple(mt[a:b].tolist()))
        merged[k] = merged.get(k, 0.0) + float(c[mu[a]])
    m_keys = sorted(merged)
    # one order for both kinds: home, first target, one target before several, then the tuples
    home = np.r_[s_keys // span, np.array([k[0] for k in m_keys], dtype=np.int64)].astype(np.int64)
    lead = np.r_[s_keys % span, np.array([k[1][0] for k in m_keys], dtype=np.int64)].astype(np.int64)
    multi = np.r_[np.zeros(s_keys.size, dtype=np.int64), np.ones(len(m_keys), dtype=np.int64)]
    rank = np.r_[np.zeros(s_keys.size, dtype=np.int64), np.arange(len(m_keys), dtype=np.int64)]
    order = np.lexsort((rank, multi, lead, home))
    cost = np.r_[s_cost, np.array([merged[k] for k in m_keys], dtype=np.float64)][order]
    lengths = np.r_[np.ones(s_keys.size, dtype=np.int64),
                    np.array([len(k[1]) for k in m_keys], dtype=np.int64)][order]
    ptr = np.zeros(order.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    idx = np.zeros(int(ptr[-1]), dtype=np.int64)
    pos = np.empty(order.size, dtype=np.int64)
    pos[order] = np.arange(order.size)
    idx[ptr[pos[: s_keys.size]]] = s_keys % span
    for j, k in enumerate(m_keys):
        at = int(ptr[pos[s_keys.size + j]])
        idx[at: at + len(k[1])] = k[1]
    return CommSources(home=home[order], cost=cost.astype(np.float64), target_ptr=ptr, target_idx=idx)


def memory_binds(w: Workload) -> bool:
    """Can an accelerator's memory limit ever bind?  Not when the whole workload fits on one.

    Then a unit's size changes nothing any split is judged by, so a unit that
    only stores something (a norm's weight read by a metadata check) counts as
    free in the exact reductions.
    """
    return bool(float(w.size.sum()) + float(w.shared.size.sum()) > float(w.memory))


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
    still does not rise, and B loses the compute too.  Gemma's ``1 + weight``
    in every norm (a weight vector, no predecessor) costs less than sending
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
