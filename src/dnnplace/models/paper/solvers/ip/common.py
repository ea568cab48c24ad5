"""Shared pieces of the integer programs: colour-class groups, contiguity rows, warm starts."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dnnplace.models.paper.solvers.ip.builder import MipBuilder
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload

WARM_START_SECONDS = 30.0  # the most the DP's warm start may take of an IP's time (it only seeds HiGHS)
WARM_START_IDEALS = 60_000  # the warm start's ideal budget: a quick exact DP or a relaxed split, not a long one


@dataclass(frozen=True)
class Groups:
    """Colour classes: the IPs decide per class, since a class never splits."""

    of_node: np.ndarray  # node index -> class index
    count: int
    acc_fw: np.ndarray
    acc_bw: np.ndarray
    cpu_fw: np.ndarray
    cpu_bw: np.ndarray
    size: np.ndarray  # own bytes of each class (shared groups not included)
    unsupported: np.ndarray  # bool
    fw_edges: np.ndarray  # (e, 2) node pairs of forward edges between different classes
    fw_nodes: np.ndarray  # indices of forward nodes
    memory: np.ndarray  # bytes one accelerator needs for the class alone: own bytes and the groups it uses
    shared_ptr: np.ndarray  # the shared parameter groups each class uses (CSR)
    shared_group: np.ndarray

    @staticmethod
    def of(w: Workload) -> Groups:
        cls, g = w.class_of, w.n_classes
        fw = ~w.backward

        def total(x: np.ndarray) -> np.ndarray:
            return np.bincount(cls, weights=x, minlength=g)

        both_fw = fw[w.edge_src] & fw[w.edge_dst]
        pairs = np.stack([w.edge_src[both_fw], w.edge_dst[both_fw]], axis=1)
        pairs = np.unique(pairs, axis=0) if pairs.size else np.zeros((0, 2), np.int64)
        sh_ptr, sh_group = w.shared.by_label(cls, g)
        return Groups(cls, g, total(w.acc_time * fw), total(w.acc_time * ~fw), total(w.cpu_time * fw),
                      total(w.cpu_time * ~fw), total(w.size), total(~w.supported) > 0, pairs,
                      np.flatnonzero(fw), w.class_memory, sh_ptr, sh_group)


def add_memory(m: MipBuilder, cols: np.ndarray, groups: Groups, w: Workload) -> None:
    """One accelerator's memory knapsack over its assignment columns ``cols`` (classes x slots).

    Shared parameter group ``q`` is held when any class using it is in any
    slot: ``y[q] >= x[c, j]``; ``y`` can stay continuous, since it only
    appears with a positive weight in this row (SPEC "Shared parameters").
    """
    cols = cols.reshape(groups.count, -1)
    sh = w.shared
    idx = [cols.ravel()]
    val = [np.repeat(groups.size, cols.shape[1])]
    if sh.count:
        y = m.add_vars(sh.count, 0.0, 1.0)
        for c in range(groups.count):
            for q in groups.shared_group[groups.shared_ptr[c]: groups.shared_ptr[c + 1]].tolist():
                for x in cols[c].tolist():
                    m.row([y[q], x], [1.0, -1.0], lo=0.0)
        idx.append(y)
        val.append(sh.size)
    m.row(np.concatenate(idx), np.concatenate(val), hi=w.memory)


def add_contiguity(m: MipBuilder, x: np.ndarray, groups: Groups) -> None:
    """SPEC's z-constraints on the forward *nodes*: once a path leaves the set it cannot come back.

    ``x`` holds the assignment columns of one device (one per class).  ``z``
    is per node, not per class: contracting classes could invent cycles that
    the node graph does not have.
    """
    cls = groups.of_node
    z = np.full(cls.size, -1, dtype=np.int64)
    z[groups.fw_nodes] = m.add_vars(groups.fw_nodes.size, 0.0, 1.0)
    for v in groups.fw_nodes.tolist():
        m.row([z[v], x[cls[v]]], [1.0, -1.0], lo=0.0)  # z >= x
    for u, v in groups.fw_edges.tolist():
        m.row([z[v], z[u]], [1.0, -1.0], hi=0.0)  # z[v] <= z[u]
        if cls[u] != cls[v]:
            m.row([z[v], x[cls[v]], x[cls[u]]], [1.0, -1.0, 1.0], hi=1.0)  # z[v] <= x[v] - x[u] + 1


def break_symmetry(m: MipBuilder, x: np.ndarray, devices: range, groups: Groups) -> None:
    """Identical devices: class g may only use the first g+1 of them (relabelling is free)."""
    for j, d in enumerate(devices):
        for g in range(min(j, groups.count)):
            m.fix(x[g, d], 0.0)


def class_devices(groups: Groups, w: Workload, split: Split, n_acc_cols: int) -> np.ndarray | None:
    """Device column per class of a split, relabelled to respect :func:`break_symmetry`.

    Accelerators map to columns ``0..n_acc_cols-1``, CPU cores to the columns after them.
    """
    index_of = w.index_of
    dev_of_class = np.full(groups.count, -1, dtype=np.int64)
    lists = list(split.accelerators) + list(split.cpus)
    n_acc = len(split.accelerators)
    for d, ids in enumerate(lists):
        for nid in ids:
            dev_of_class[groups.of_node[index_of[int(nid)]]] = d
    if (dev_of_class < 0).any():
        return None

    def relabel(lo: int, hi: int, base: int) -> None:
        firsts = sorted({d: int(np.flatnonzero(dev_of_class == d).min())
                         for d in range(lo, hi) if (dev_of_class == d).any()}.items(), key=lambda t: t[1])
        mapping = {d: base + j for j, (d, _) in enumerate(firsts)}
        for g in range(groups.count):
            if lo <= dev_of_class[g] < hi:
                dev_of_class[g] = mapping[int(dev_of_class[g])]

    relabel(0, n_acc, 0)
    relabel(n_acc, len(lists), n_acc_cols)
    return dev_of_class


def warm_start_dp(w: Workload, deadline: float | None = None) -> Split | None:
    """The DP's optimal contiguous split, when the lattice is small enough to get it quickly (and by ``deadline``).

    It calls the DP's portfolio directly (never back through the method registry): the IPs sit above the DP.
    """
    import time

    from dnnplace.errors import DnnplaceError
    from dnnplace.models.paper.solvers.dp.portfolio import DPOptions, solve_dp_by

    now = time.perf_counter()
    until = now + WARM_START_SECONDS if deadline is None else min(now + WARM_START_SECONDS, deadline)
    if until <= now:
        return None
    try:
        return solve_dp_by(w, DPOptions(max_ideals=WARM_START_IDEALS), until).plan
    except DnnplaceError:
        return None
