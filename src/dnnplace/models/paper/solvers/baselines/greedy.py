"""The paper's greedy latency packer.

Colour classes, and the cycles their contraction creates, become inseparable
blocks; blocks are taken in a topological order and packed onto accelerators
up to their memory, one accelerator after another; whatever is left (and any
block too large for one accelerator) runs on CPUs.  Every accelerator gets a
consecutive run of a topological order, so its set is contiguous.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from dnnplace.core.solver import RunContext, Solver, SolverOutput
from dnnplace.models.paper.solvers.baselines.std_order import unordered_map_order
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload
from dnnplace.utils.graph import topological_order


def inseparable_blocks(w: Workload) -> list[np.ndarray]:
    """Blocks of node indices in the reference's topological order.

    Colour classes on a common cycle are fused (union-find in the order the
    reference's C++ visits them); blocks are then ordered by Kahn's algorithm
    with a stack, seeded in the iteration order of the C++ ``unordered_map``
    of blocks and relaxed along edges in file order, so the published greedy
    latencies are reproduced exactly.
    """
    colour = w.color.tolist()
    class_order = unordered_map_order(colour)
    g = nx.DiGraph()
    g.add_nodes_from(class_order)
    g.add_edges_from((colour[u], colour[v]) for u, v in zip(w.edge_src.tolist(), w.edge_dst.tolist()))
    scc_of = {}
    for i, comp in enumerate(nx.strongly_connected_components(g)):
        for c in comp:
            scc_of[c] = i
    parent = {c: c for c in class_order}

    def find(c: int) -> int:
        while parent[c] != c:
            c = parent[c]
        return c

    for i in class_order:
        for j in class_order:
            if i != j and scc_of[i] == scc_of[j]:
                parent[find(i)] = find(j)
    root = [find(c) for c in colour]
    members: dict[int, list[int]] = {}
    for v, r in enumerate(root):
        members.setdefault(r, []).append(v)
    blocks = list(members)
    number = {r: i for i, r in enumerate(blocks)}
    outgoing: list[list[int]] = [[] for _ in blocks]
    for u, v in zip(w.edge_src.tolist(), w.edge_dst.tolist()):
        if root[u] != root[v]:
            outgoing[number[root[u]]].append(number[root[v]])
    order = topological_order(len(blocks), outgoing, [number[r] for r in unordered_map_order(root)])
    return [np.array(members[blocks[i]], dtype=np.int64) for i in order.tolist()]


@dataclass
class GreedyLatency(Solver):
    """Fill accelerators with blocks in topological order; the rest on CPUs."""

    name = "greedy"
    objectives = ("latency",)
    summary = "the paper's greedy latency packer (blocks in topological order)"

    def solve(self, workload: Workload, run: RunContext) -> SolverOutput:
        return SolverOutput(plan=greedy_split(workload), status="heuristic")


def greedy_split(w: Workload) -> Split:
    blocks = inseparable_blocks(w)
    sizes = [float(w.size[b].sum()) for b in blocks]
    movable = [bool(w.supported[b].all()) for b in blocks]
    device = np.full(w.n, -1, dtype=np.int64)
    cpu = w.max_accelerators  # one CPU column: CPUs are unlimited in the latency model
    n_acc = 0
    i = 0
    while i < len(blocks):
        if sizes[i] > w.memory or not movable[i] or n_acc == w.max_accelerators:
            device[blocks[i]] = cpu
            i += 1
            continue
        used = 0.0
        while i < len(blocks) and movable[i] and used + sizes[i] <= w.memory:
            used += sizes[i]
            device[blocks[i]] = n_acc
            i += 1
        n_acc += 1
    return Split.from_assignment(w.node_ids, device, w.max_accelerators, 1)
