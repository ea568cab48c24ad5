"""Piper's exact planner as a registered method (``dnnplace solve PIPER.json``, ``dnnplace methods``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dnnplace.core.solver import RunContext, Solver, SolverOutput, param
from dnnplace.models.piper.spec import PiperInstance


@dataclass
class PiperPlanner(Solver):
    """The optimum of Piper's model: stages x data x tensor parallelism x a TMPC per layer."""

    name: ClassVar[str] = "piper"
    objectives: ClassVar[tuple[str, ...]] = ("throughput",)
    summary: ClassVar[str] = ("Piper's model: exact optimum over stages x data x tensor parallelism x TMPCs"
                              " (recomputation)")
    model: ClassVar[str] = "piper"

    max_ideals: int = param(2_000_000, "tails (node sets closed under successors) the exact DP may enumerate",
                            minimum=1, maximum=10**9)

    def warm_up(self) -> None:
        from dnnplace.models.piper.solvers.solver import warm_up

        warm_up()

    def solve(self, workload: PiperInstance, run: RunContext) -> SolverOutput:
        from dnnplace.models.piper.solvers.solver import solve_piper

        res = solve_piper(workload, max_ideals=self.max_ideals, time_limit=run.time_limit, progress=run.progress)
        return SolverOutput(plan=res.plan, status=res.status, bound=res.bound, stats=dict(res.stats))
