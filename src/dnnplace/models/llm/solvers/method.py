"""The LLM training planner as a registered method: ``dnnplace methods`` lists it, ``dnnplace.solve`` runs it.

Its parameters pin knobs of the configuration (``None``: searched), so ``plan --fix
tp=4,pp=4`` and ``dnnplace.solve(problem, tp=4, pp=4)`` are the same request.  They are
generated from the pinnable fields of :class:`~dnnplace.models.llm.config.ParallelConfig`
(their help lines, kinds and limits), so a new knob needs no line here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from dnnplace.core.limits import LLM_LIMITS
from dnnplace.core.solver import RunContext, Solver, SolverOutput, param
from dnnplace.models.llm.config import pin_fields
from dnnplace.models.llm.spec import LLMProblem

_TYPES: dict[str, Any] = {"count": int | None, "switch": bool | None, "choice": str | None, "level": int | None}


def _pin_param(f: dataclasses.Field) -> tuple[str, Any, Any]:
    kind, doc = f.metadata["kind"], f.metadata["doc"]
    if kind == "count":
        lo, hi = LLM_LIMITS[f.name]
        return f.name, _TYPES[kind], param(None, doc, minimum=lo, maximum=hi)
    if kind == "level":  # whole numbers: their range (the levels are consecutive)
        levels = f.metadata["choices"]
        assert tuple(levels) == tuple(range(min(levels), max(levels) + 1))
        return f.name, _TYPES[kind], param(None, doc, minimum=min(levels), maximum=max(levels))
    return f.name, _TYPES[kind], param(None, doc, choices=f.metadata["choices"] or None)


# The pins as a dataclass of their own: LLMSearch's parameters, in the order ParallelConfig declares them.
_Pins = dataclasses.make_dataclass("_Pins", [_pin_param(f) for f in pin_fields()])


@dataclass
class LLMSearch(Solver, _Pins):  # type: ignore[misc,valid-type]
    """Exhaustive branch and bound over Megatron's configurations (solvers/llm/search.py)."""

    name: ClassVar[str] = "llm-search"
    objectives: ClassVar[tuple[str, ...]] = ("throughput",)
    summary: ClassVar[str] = ("LLM training: the fastest TP x PP x VP x CP x DP, micro-batch, recomputation and"
                              " layer split that fits (branch and bound, proven)")
    model: ClassVar[str] = "llm"
    runner_ups: int = param(0, "also find this many fastest other configurations (stats['runner_ups'])",
                            minimum=0, maximum=20)

    def pins(self) -> dict[str, object]:
        """The knobs this request fixes."""
        return {k: v for k, v in self.get_params().items() if v is not None and k != "runner_ups"}

    def solve(self, workload: LLMProblem, run: RunContext) -> SolverOutput:
        from dnnplace.models.llm.solvers.search import search_with_runner_ups

        plan, others = search_with_runner_ups(workload, self.pins(), time_limit=run.time_limit,
                                              progress=run.progress, count=self.runner_ups)
        stats: dict[str, Any] = {"exhaustive": plan.exhaustive, "search_runtime_s": plan.runtime_s}
        if self.runner_ups:
            stats["runner_ups"] = others
        return SolverOutput(plan=plan, status=plan.status, bound=plan.bound, stats=stats)
