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

from dataclasses import replace

import networkx as nx
import numpy as np

from dnnplace.models.paper.solvers.prepare.comm import ZERO
from dnnplace.models.paper.solvers.prepare.unionfind import UnionFind
from dnnplace.models.paper.solvers.prepare.units import Prepared, memory_binds
from dnnplace.models.paper.workload import Workload
from dnnplace.utils.graph import class_index, distinct_pairs, topological_order, topological_order_of_edges


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

