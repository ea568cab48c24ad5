"""PipeDream's planner, as the paper emulates it.

PipeDream partitions a *chain* of layers.  To apply it to a DAG the paper
(i) contracts each biconnected component of the forward graph, fusing the
tails of its edges, so that branching blocks (residual blocks, multi-branch
cells) become single stages-to-be; (ii) linearises the result along one
topological order; (iii) runs the optimal DP on that chain.  The value depends
on the linearisation order, so it need not equal the paper's figure to the
digit; it is always a feasible contiguous split, never better than the DP.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from dnnplace.model.workload import Workload
from dnnplace.prepare.unionfind import UnionFind
from dnnplace.solvers.base import SolveOptions, SolverOutput


def biconnected_groups(w: Workload) -> np.ndarray:
    """A label per node: nodes whose colour classes a biconnected component fuses share one."""
    _, cls = np.unique(w.color, return_inverse=True)
    fwd = ~w.backward
    both = fwd[w.edge_src] & fwd[w.edge_dst]
    a, b = cls[w.edge_src[both]], cls[w.edge_dst[both]]
    keep = a != b
    directed = set(zip(a[keep].tolist(), b[keep].tolist()))
    g = nx.Graph()
    g.add_edges_from(directed)
    uf = UnionFind(int(cls.max()) + 1)
    for comp in nx.biconnected_component_edges(g):
        tails = [u if (u, v) in directed else v for u, v in comp]
        for t in tails[1:]:
            uf.union(tails[0], t)
    return np.array([uf.find(c) for c in cls.tolist()], dtype=np.int64)


class PipeDream:
    name = "pipedream"
    objectives = ("throughput",)
    summary = "PipeDream's planner: biconnected contraction + linearised DP"

    def solve(self, workload: Workload, options: SolveOptions) -> SolverOutput:
        from dataclasses import replace

        from dnnplace.solvers.dp.solver import solve_dp

        out = solve_dp(workload, replace(options, linearize=True), extra_groups=biconnected_groups(workload))
        return SolverOutput(split=out.split, status="heuristic", stats=out.stats)
