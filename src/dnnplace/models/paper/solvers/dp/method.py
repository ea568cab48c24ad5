"""The DP as a placement method: its parameters, and the run's context handed to the portfolio."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dnnplace.core.solver import RunContext, Solver, SolverOutput, param
from dnnplace.models.paper.solvers.dp.policy import DPOptions, DPPolicy
from dnnplace.models.paper.workload import Workload


@dataclass
class DPSolver(Solver):
    """Max-load-optimal contiguous split over the ideal lattice (certified bound when it must relax)."""

    name = "dp"
    objectives = ("throughput",)
    summary = "optimal contiguous split (dynamic program over ideals)"
    #: the portfolio's budgets and thresholds (not a parameter: one policy for every run of the method)
    policy: ClassVar[DPPolicy] = DPPolicy()

    max_ideals: int = param(200_000, "ideals the exact DP may enumerate before it relaxes", minimum=1,
                            maximum=10**9)
    gap: float = param(0.01, "relative gap to prove when the DP must relax", minimum=0, maximum=1)
    contract_layers: bool = param(False, "fuse nodes sharing a layerId")
    linearize: bool = param(False, "chain the graph along a topological order (as PipeDream)")

    def warm_up(self) -> None:
        from dnnplace.models.paper.solvers.dp.kernel import warm_up

        warm_up()

    def options(self, run: RunContext) -> DPOptions:
        """What the portfolio reads: the parameters, the run's cost-model switch and progress, the policy."""
        return DPOptions(**self.get_params(), overlap_comm=run.overlap_comm, progress=run.progress,
                         policy=self.policy)

    def solve(self, workload: Workload, run: RunContext) -> SolverOutput:
        from dnnplace.models.paper.solvers.dp.portfolio import solve_dp

        return solve_dp(workload, self.options(run), time_limit=run.time_limit)
