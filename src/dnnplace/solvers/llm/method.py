"""The LLM training planner as a registered method: ``dnnplace methods`` lists it, ``dnnplace.solve`` runs it.

Its parameters pin knobs of the configuration (``None``: searched), so ``plan --fix
tp=4,pp=4`` and ``dnnplace.solve(problem, tp=4, pp=4)`` are the same request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dnnplace.model.llm import RECOMPUTE, LLMProblem
from dnnplace.solvers.base import RunContext, Solver, SolverOutput, param

_MAX = 1_000_000


@dataclass
class LLMSearch(Solver):
    """Exhaustive branch and bound over Megatron's configurations (solvers/llm/search.py)."""

    name: ClassVar[str] = "llm-search"
    objectives: ClassVar[tuple[str, ...]] = ("throughput",)
    summary: ClassVar[str] = ("LLM training: the fastest TP x PP x VP x CP x DP, micro-batch, recomputation and"
                              " layer split that fits (branch and bound, proven)")
    model: ClassVar[str] = "llm"

    tp: int | None = param(None, "pin the tensor-parallel size", minimum=1, maximum=_MAX)
    pp: int | None = param(None, "pin the pipeline-parallel size", minimum=1, maximum=_MAX)
    vp: int | None = param(None, "pin the virtual-pipeline (interleaving) size", minimum=1, maximum=_MAX)
    cp: int | None = param(None, "pin the context-parallel size", minimum=1, maximum=_MAX)
    dp: int | None = param(None, "pin the data-parallel size", minimum=1, maximum=_MAX)
    mbs: int | None = param(None, "pin the micro-batch size", minimum=1, maximum=_MAX)
    recompute: str | None = param(None, "pin activation recomputation", choices=RECOMPUTE)
    distributed_optimizer: bool | None = param(None, "pin the distributed optimizer (optimizer states over DP)")

    def pins(self) -> dict[str, object]:
        """The knobs this request fixes."""
        return {k: v for k, v in self.get_params().items() if v is not None}

    def solve(self, workload: LLMProblem, run: RunContext) -> SolverOutput:
        from dnnplace.solvers.llm.search import search

        plan = search(workload, self.pins(), time_limit=run.time_limit, progress=run.progress)
        return SolverOutput(plan=plan, status=plan.status, bound=plan.bound,
                            stats={"exhaustive": plan.exhaustive, "search_runtime_s": plan.runtime_s})
