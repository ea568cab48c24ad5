"""PipeDream's planner, as the paper emulates it.

PipeDream partitions a *chain* of layers.  To apply it to a DAG the paper
(i) contracts each biconnected component of the forward graph (without the
out-edges of input layers that do no work, which PipeDream's profiles lack),
fusing the tails of its edges, so that branching blocks (residual blocks, multi-branch
cells) become single stages-to-be; (ii) linearises the result along one
topological order; (iii) runs the optimal DP on that chain.  The value depends
on the linearisation order, so it need not equal the paper's figure to the
digit; it is always a feasible contiguous split, never better than the DP.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from dnnplace.core.solver import RunContext, Solver, SolverOutput, param
from dnnplace.models.paper.solvers.prepare.unionfind import UnionFind
from dnnplace.models.paper.workload import Workload


def biconnected_groups(w: Workload) -> np.ndarray:
    """A label per node: nodes whose colour classes a biconnected component fuses share one.

    As in the paper's emulation, the graph is the colour-class contraction
    with forward and backward parts as separate vertices; each biconnected
    component fuses the classes of the tails of its edges.
    """
    cls = w.class_of
    # PipeDream's profiles carry no input layers that do no work: their fan-out
    # does not tie blocks together, so their out-edges are left out here
    has_pred = np.zeros(w.n, dtype=bool)
    has_pred[w.edge_dst] = True
    idle = (w.acc_time == 0) & (w.cpu_time == 0) & ~has_pred
    vertex = 2 * cls + w.backward
    keep = ~idle[w.edge_src] & (vertex[w.edge_src] != vertex[w.edge_dst])
    directed = set(zip(vertex[w.edge_src[keep]].tolist(), vertex[w.edge_dst[keep]].tolist()))
    g = nx.Graph()
    g.add_edges_from(directed)
    uf = UnionFind(int(cls.max()) + 1)
    for comp in nx.biconnected_component_edges(g):
        tails = [(u if (u, v) in directed else v) // 2 for u, v in comp]
        for t in tails[1:]:
            uf.union(tails[0], t)
    return np.array([uf.find(c) for c in cls.tolist()], dtype=np.int64)


@dataclass
class PipeDream(Solver):
    """The paper's emulation of PipeDream: the optimal DP on a linearised, component-fused graph."""

    name = "pipedream"
    objectives = ("throughput",)
    summary = "PipeDream's planner: biconnected contraction + linearised DP"

    contract_layers: bool = param(False, "fuse nodes sharing a layerId")

    def warm_up(self) -> None:
        from dnnplace.models.paper.solvers.dp.kernel import warm_up

        warm_up()

    def solve(self, workload: Workload, run: RunContext) -> SolverOutput:
        from dnnplace.models.paper.solvers.dp.portfolio import DPOptions, solve_dp

        options = DPOptions(contract_layers=self.contract_layers, linearize=True, overlap_comm=run.overlap_comm,
                            progress=run.progress)
        out = solve_dp(workload, options, time_limit=run.time_limit, extra_groups=biconnected_groups(workload))
        return SolverOutput(plan=out.plan, status="heuristic", stats=out.stats)
