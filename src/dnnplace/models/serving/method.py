"""The serving planner as a registered method: ``dnnplace methods`` lists it, ``dnnplace.solve`` runs it.

Its parameters pin the deployment (``None``: searched), so ``serve --fix tp=2,pp=2,layers=40+40`` and
``dnnplace.solve(problem, tp=2, pp=2, layers="40+40")`` are the same request.  The objective handed to
``solve`` is seconds per output token (solve minimises; its bound is the inverse of the search's upper
bound on tokens/s), so the gap is the serving search's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from dnnplace.core.solver import RunContext, Solver, SolverOutput, param
from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.spec import ServingProblem

__all__ = ["ServingSearch", "parse_layers"]


def parse_layers(text: str) -> list[int]:
    """``"40+40"`` -> [40, 40] (each stage's layers, in stage order; every stage at least one)."""
    parts = text.split("+")
    if not all(x.strip().isdigit() for x in parts) or any(int(x) < 1 for x in parts) or len(parts) > 1024:
        raise DnnplaceError(f"--fix layers={text[:60]}: give each stage's layers as whole numbers >= 1 joined"
                            " by '+', e.g. layers=40+40")
    return [int(x) for x in parts]


@dataclass
class ServingSearch(Solver):
    """Replicas, stage orders, TP and batch limits, each split by the exact DP (models/serving/search.py)."""

    name: ClassVar[str] = "serving-search"
    objectives: ClassVar[tuple[str, ...]] = ("throughput",)
    summary: ClassVar[str] = ("LLM serving: replicas, pipeline stages of mixed GPUs, TP and the layer split with the"
                              " most output tokens/s that fits (exact DP per stage order, bounded)")
    model: ClassVar[str] = "serving"
    tp: int | None = param(None, "pin the TP size of every replica", minimum=1, maximum=64)
    pp: int | None = param(None, "pin the pipeline stages of every replica", minimum=1, maximum=1024)
    layers: str | None = param(None, "pin each stage's layers, in stage order, e.g. '40+40'")
    max_num_seqs: int | None = param(None, "pin the engine's max_num_seqs", minimum=1, maximum=1 << 20)
    max_num_batched_tokens: int | None = param(None, "pin the engine's max_num_batched_tokens", minimum=1,
                                               maximum=1 << 24)
    within_nodes: bool = param(False, "keep every replica inside one node (what every exporter here writes;"
                                      " a replica across nodes needs a multi-node launch dnnplace does not write)")

    def pins(self) -> dict[str, Any]:
        """The knobs this request fixes."""
        return {k: v for k, v in self.get_params().items() if v is not None and v is not False}

    def solve(self, workload: ServingProblem, run: RunContext) -> SolverOutput:
        from dnnplace.models.serving.search import search
        from dnnplace.models.serving.verdicts import apply_layers, meet_slo, unfit

        layers = parse_layers(self.layers) if self.layers is not None else None
        pp = self.pp
        if layers is not None:
            if pp is not None and pp != len(layers):
                raise DnnplaceError(f"--fix pp={pp} but layers={self.layers} gives {len(layers)} stages")
            pp = len(layers)
            if sum(layers) != workload.model.num_layers:
                raise DnnplaceError(f"--fix layers={self.layers} sums to {sum(layers)}; {workload.model.name} has"
                                    f" {workload.model.num_layers} layers")
        limit = 30.0 if run.time_limit is None else run.time_limit
        if run.progress is not None:
            run.progress(0, 1, "searching deployments")
        plan = search(workload, time_limit=limit, tp=self.tp, pp=pp, max_num_seqs=self.max_num_seqs,
                      max_num_batched_tokens=self.max_num_batched_tokens, within_nodes=self.within_nodes)
        if run.progress is not None:
            run.progress(1, 1, "searching deployments")
        if not plan.config.replicas:
            raise unfit(workload, self.pins())
        if layers is not None:
            plan = apply_layers(workload, plan, layers)
        plan, _ = meet_slo(workload, plan)
        bound = None if not plan.bound else 1.0 / plan.bound
        status = {"infeasible": "feasible"}.get(plan.status, plan.status)
        return SolverOutput(plan=plan, status=status, bound=bound,
                            stats={"complete": plan.meta.get("complete"), "search_runtime_s": plan.runtime_s,
                                   "runner_ups": plan.meta.get("runner_ups", [])})
