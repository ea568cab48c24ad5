"""Everything on one accelerator: the paper's baseline for speed-ups.

As in the paper, the memory limit is ignored when placing; the evaluator
still reports a memory (or support) violation if there is one.
"""

from __future__ import annotations

from dataclasses import dataclass

from dnnplace.core.solver import RunContext, Solver, SolverOutput
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload


@dataclass
class SingleAccelerator(Solver):
    """Everything on accelerator 0: the reference every speed-up is measured against."""

    name = "single"
    objectives = ("throughput", "latency", "fw+bw")
    summary = "everything on one accelerator (memory ignored, as in the paper)"

    def solve(self, workload: Workload, run: RunContext) -> SolverOutput:
        return SolverOutput(plan=Split.of([list(map(int, workload.node_ids))]), status="heuristic")
