"""Structural checks of a workload and cheap infeasibility detection.

Field-level checks live with the file parser; these are the graph-level ones
that any front end (paper JSON, PyTorch profiler, Python API) must pass.
"""

from __future__ import annotations

import numpy as np

from dnnplace.errors import InfeasibleError, InputError
from dnnplace.models.paper.workload import Workload


def validate_structure(w: Workload, source: str = "workload") -> None:
    """Reject cycles, backward-to-forward edges and malformed shared groups, naming the culprit."""
    sh = w.shared
    if sh.nodes.size and (sh.nodes.min() < 0 or sh.nodes.max() >= w.n):
        raise InputError(f"{source}: a shared parameter group names a node index outside 0..{w.n - 1}")
    if (np.diff(sh.ptr) == 0).any():
        g = int(np.flatnonzero(np.diff(sh.ptr) == 0)[0])
        raise InputError(f"{source}: shared parameter group {sh.names[g]!r} is used by no node")
    bad = np.flatnonzero(w.backward[w.edge_src] & ~w.backward[w.edge_dst])
    if bad.size:
        j = int(bad[0])
        raise InputError(
            f"{source}: edge {w.node_ids[w.edge_src[j]]}->{w.node_ids[w.edge_dst[j]]}"
            " goes from a backward node to a forward node"
        )
    if len(w.topological_order) != w.n:
        raise InputError(f"{source}: the graph has a cycle: {_one_cycle(w)}")


def _one_cycle(w: Workload) -> str:
    import networkx as nx

    g = nx.DiGraph()
    g.add_edges_from(zip(w.edge_src.tolist(), w.edge_dst.tolist(), strict=False))
    cycle = nx.find_cycle(g)
    ids = [int(w.node_ids[u]) for u, _ in cycle] + [int(w.node_ids[cycle[0][0]])]
    return " -> ".join(map(str, ids))


def check_feasibility(w: Workload, source: str = "workload") -> None:
    """Raise :class:`InfeasibleError` when no split at all can exist.

    With at least one CPU everything fits on it, so only budgets without CPUs
    can be infeasible; the checks are the cheap, certain ones.
    """
    k, l, mem = w.max_accelerators, w.max_cpus, w.memory
    if k < 0 or l < 0:
        raise InputError(f"{source}: negative device count (maxFPGAs={k}, maxCPUs={l})")
    if k == 0 and l == 0:
        raise InfeasibleError(f"{source}: no devices: maxFPGAs and maxCPUs are both 0")
    if l > 0:
        return
    unsupported = np.flatnonzero(~w.supported)
    if unsupported.size:
        raise InfeasibleError(
            f"{source}: {w.label(int(unsupported[0]))} is not supported on accelerators and maxCPUs is 0"
        )
    node_memory = w.node_memory  # a node's own bytes and those of the shared groups it uses
    too_big = np.flatnonzero(node_memory > mem)
    if too_big.size:
        i = int(too_big[0])
        raise InfeasibleError(
            f"{source}: {w.label(i)} needs {node_memory[i]:.6g} bytes, more than maxSizePerFPGA"
            f" = {mem:.6g}, and maxCPUs is 0"
        )
    class_size = w.class_memory
    over = np.flatnonzero(class_size > mem)
    if over.size:
        c = int(over[0])
        raise InfeasibleError(
            f"{source}: colour class {w.color[w.class_of == c][0]} needs {class_size[c]:.6g} bytes on one device,"
            f" more than maxSizePerFPGA = {mem:.6g}, and maxCPUs is 0"
        )
    total = float(w.size.sum() + w.shared.size.sum())  # every shared group is held at least once
    if total > k * mem:
        raise InfeasibleError(
            f"{source}: the nodes need {total:.6g} bytes but {k} accelerators hold only"
            f" {k * mem:.6g} and maxCPUs is 0"
        )
    own = np.bincount(w.class_of, weights=w.size, minlength=w.n_classes)  # shared groups are not additive
    if w.n_classes > 0 and k > 0 and _min_bins(np.sort(own)[::-1], mem) > k:
        raise InfeasibleError(
            f"{source}: the colour classes cannot be packed into {k} accelerators of"
            f" {mem:.6g} bytes and maxCPUs is 0"
        )


def _min_bins(sizes: np.ndarray, cap: float) -> int:
    """A lower bound on bins: items larger than half the capacity need one each."""
    return int(np.count_nonzero(sizes > cap / 2))
