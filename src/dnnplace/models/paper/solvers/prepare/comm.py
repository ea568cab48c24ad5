"""Transfers between units, kept per original producer so that every cut is priced exactly.

A :class:`CommSources` groups the producers of cut-able outputs by their home unit and the
set of units they feed; relaxations build sliced sources (a producer reaching each target
through its own chain of left-out nodes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dnnplace.models.paper.workload import Workload
from dnnplace.utils.graph import distinct_pairs

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
    (a scan's discretised tensors, one ``select`` per step); ``cost`` is
    that charge for ``m = 1``, which is all a reader ignoring the slices
    charges.
    """

    home: np.ndarray  # int64 (s,)
    cost: np.ndarray  # float64 (s,)
    target_ptr: np.ndarray  # int64 (s+1,) CSR into target_idx
    target_idx: np.ndarray  # int64
    slice_cost: np.ndarray | None = None  # float64 (s,): per target's own chain; inf for a plain source
    trunk_cost: np.ndarray | None = None  # float64 (s,): of the part the chains share



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

