"""Graph helpers every layer shares: topological order, colour classes, the DAG of devices.

Each concept is written once here and called everywhere: the workload's order and
classes (:mod:`dnnplace.models.paper.workload`), the latency evaluator, Piper's reader,
and the simulator / runtime / export, which all order the devices of a split.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import networkx as nx
import numpy as np

from dnnplace.errors import DnnplaceError

__all__ = ["CYCLE_MESSAGE", "class_index", "order_devices", "stage_depths", "topological_order",
           "distinct_edges", "distinct_pairs", "sorted_distinct", "topological_order_of_edges"]

#: What a split whose devices feed each other in a cycle is told (it cannot run as a pipeline).
CYCLE_MESSAGE = "the split's devices depend on each other in a cycle; it cannot be pipelined"


def topological_order(n: int, successors: Sequence[Iterable[int]],
                      seed_order: Iterable[int] | None = None) -> np.ndarray:
    """Kahn's algorithm over ``successors`` (one iterable per node, duplicates allowed).

    Returns a topological order of the nodes it could order: fewer than ``n``
    exactly when the graph has a cycle, whose nodes are the ones left out (so a
    reader can name one).  Linear time; a stack, so chains stay together: the
    sources are pushed in ``seed_order`` (default: by index), so the last one
    pushed comes first, and a node's successors in the order they are listed.

    >>> topological_order(3, [[2], [0], []]).tolist()
    [1, 0, 2]
    >>> len(topological_order(2, [[1], [0]]))  # a cycle: nothing can start
    0
    """
    indeg = np.zeros(n, dtype=np.int64)
    for succ in successors:
        for w in succ:
            indeg[w] += 1
    stack = [int(v) for v in (range(n) if seed_order is None else seed_order) if indeg[v] == 0]
    order: list[int] = []
    while stack:
        v = stack.pop()
        order.append(v)
        for w in successors[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(int(w))
    return np.asarray(order, dtype=np.int64)


#: Graphs with more nodes than this are ordered by the compiled loop (numba's import costs more below it).
COMPILED_FROM = 50_000


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of integers by sorting (numpy 2's hash-based ``unique`` is far slower on millions of them)."""
    out = np.sort(np.asarray(values))
    return out[np.r_[True, out[1:] != out[:-1]]] if out.size else out


def distinct_pairs(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct edges ``src -> dst`` among ``n`` nodes, sorted by (source, destination)."""
    keys = sorted_distinct(np.asarray(src, dtype=np.int64) * max(n, 1) + np.asarray(dst, dtype=np.int64))
    return keys // max(n, 1), keys % max(n, 1)


def distinct_edges(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct edges sorted by (source, destination): CSR pointers per source and the destinations."""
    heads, tails = distinct_pairs(n, src, dst)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(heads, minlength=n), out=ptr[1:])
    return ptr, tails


def topological_order_of_edges(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """:func:`topological_order` of the graph with edges ``src -> dst`` (node indices, duplicates allowed),
    each node's successors in increasing order -- the same order, compiled for a large graph."""
    ptr, idx = distinct_edges(n, src, dst)
    if n <= COMPILED_FROM:
        return topological_order(n, [idx[ptr[v]: ptr[v + 1]].tolist() for v in range(n)])
    from dnnplace.utils._graph_kernels import kahn_stack

    return kahn_stack(n, ptr, idx)


def class_index(labels: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense class numbers ``0..count-1`` for arbitrary labels (colour classes), and the count.

    Classes are numbered by increasing label, so the numbering is deterministic.

    >>> idx, count = class_index(np.array([7, -1, 7, 3]))
    >>> idx.tolist(), count
    ([2, 0, 2, 1], 3)
    """
    uniq, inverse = np.unique(labels, return_inverse=True)
    return inverse.astype(np.int64).reshape(-1), int(uniq.size)


def _device_graph(n_devices: int, deps: Iterable[tuple[int, int]]) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(range(n_devices))
    g.add_edges_from((a, b) for a, b in deps if a != b)
    return g


def order_devices(n_devices: int, deps: Iterable[tuple[int, int]]) -> list[int]:
    """The devices (or stages) of a split in an order where every ``(a, b)`` dependency goes forward.

    Raises :class:`~dnnplace.errors.DnnplaceError` when the devices feed each other in a cycle.

    >>> order_devices(3, [(2, 0), (0, 1)])
    [2, 0, 1]
    """
    try:
        return [int(v) for v in nx.lexicographical_topological_sort(_device_graph(n_devices, deps))]
    except nx.NetworkXUnfeasible:
        raise DnnplaceError(CYCLE_MESSAGE) from None


def stage_depths(n_devices: int, deps: Iterable[tuple[int, int]]) -> np.ndarray:
    """Longest chain of devices before each device (its position in the pipeline).

    >>> stage_depths(3, [(0, 1), (1, 2), (0, 2)]).tolist()
    [0, 1, 2]
    """
    g = _device_graph(n_devices, deps)
    depth = np.zeros(n_devices, dtype=np.int64)
    for v in order_devices(n_devices, g.edges):
        for s in g.successors(v):
            depth[s] = max(depth[s], depth[v] + 1)
    return depth
