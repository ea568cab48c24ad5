"""The serving planner as a registered method: ``dnnplace methods`` lists it, ``dnnplace.solve`` runs it.

Its parameters pin the deployment (``None``: searched), so ``serve --fix tp=2,pp=2,layers=40+40`` and
``dnnplace.solve(problem, tp=2, pp=2, layers="40+40")`` are the same request.  The objective handed to
``solve`` is seconds per output token (solve minimises; its bound is the inverse of the search's upper
bound on tokens/s), so the gap is the serving search's own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from dnnplace.core.solver import RunContext, Solver, SolverOutput, param
from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.spec import ServingProblem

#: The share of ``--time-limit`` the deployment search may use; the baselines' searches get the rest.
SEARCH_SHARE = 0.75

__all__ = ["ServingSearch", "check_expert_parallel", "check_pins", "parse_layers"]


def parse_layers(text: str) -> list[int]:
    """``"40+40"`` -> [40, 40] (each stage's layers, in stage order; every stage at least one)."""
    parts = text.split("+")
    if not all(x.strip().isdigit() for x in parts) or any(int(x) < 1 for x in parts) or len(parts) > 1024:
        raise DnnplaceError(f"--fix layers={text[:60]}: give each stage's layers as whole numbers >= 1 joined"
                            " by '+', e.g. layers=40+40")
    return [int(x) for x in parts]


def check_pins(p: ServingProblem, tp: int | None, pp: int | None, pp_flag: str = "") -> None:
    """Refuse TP / PP pins the engine or the fleet cannot honour, naming why (never "fits on no deployment"
    for a deployment that cannot even be laid out: that verdict is about memory)."""
    from dnnplace.models.serving.evaluation import tp_refusal

    t = tp or 1
    pp_flag = pp_flag or f"pp={pp}"
    if tp is not None and (why := tp_refusal(p, tp)):
        raise DnnplaceError(f"--fix tp={tp}: {why}")
    groups = [len(gpus) for node in p.fleet.nodes for gpus in node.kinds().values()]
    if tp is not None and max(groups, default=0) < tp:
        raise DnnplaceError(f"--fix tp={tp}: a TP group is {tp} GPUs of one type in one node; {p.fleet.spec()} "
                            f"has at most {max(groups, default=0)}")
    if pp is not None and pp > p.model.num_layers:
        raise DnnplaceError(f"--fix {pp_flag}: {p.model.name} has only {p.model.num_layers} layers")
    units = sum(n // t for n in groups)
    if pp is not None and pp > units:
        raise DnnplaceError(f"--fix {pp_flag}: {pp} stages of {t} GPU(s) each need {pp * t} GPUs; "
                            f"{p.fleet.spec()} holds {units} such stage(s)")


def check_expert_parallel(p: ServingProblem, on: bool | None, tp: int | None) -> None:
    """Refuse an expert-parallelism pin that means nothing or cannot run, naming why
    (:func:`~dnnplace.models.serving.evaluation.expert_parallel_refusal`, a pinned TP included)."""
    from dnnplace.models.serving.evaluation import expert_parallel_refusal

    if on and (why := expert_parallel_refusal(p, () if tp is None else (tp,))):
        raise DnnplaceError(f"--fix {'' if tp is None else f'tp={tp},'}expert_parallel=on: {why}")


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
    expert_parallel: bool | None = param(None, "pin expert parallelism (routed experts whole over each TP group)"
                                               " on or off; None: searched on MoE models")
    within_nodes: bool = param(False, "keep every replica inside one node (what every exporter writes; a"
                                      " replica across nodes is written for vLLM only, as its multi-node launch)")
    disaggregate: bool = param(False, "also price the best prefill/decode disaggregated deployment beside the plan"
                                      " (models/serving/disaggregation.py)")

    def pins(self) -> dict[str, Any]:
        """The knobs this request fixes: every one given, expert_parallel off included; within_nodes only when on
        (off is the default, no pin), disaggregate never (a what-if priced beside the plan, not a layout)."""
        return {k: v for k, v in self.get_params().items()
                if v is not None and k != "disaggregate" and not (k == "within_nodes" and v is False)}

    def _without_pp(self, p: ServingProblem, plan: Any, pp: int | None) -> Any:
        """Under a rate, the deployments ``meet_slo`` tries when every searched one falls behind or misses in the
        simulation: the best without pipeline stages and its runner-ups (a search policy).

        Why: the search ranks by capacity with the evaluator's even micro-batches; under a trickle of arrivals
        the engines' PP micro-batches are uneven (a prompt rides whole in one, whose trip through every stage
        sets the cycle), so PP deployments can fall behind well below that capacity in the simulation, while
        TP-only ones, which the search ranked lower, keep up.  None when PP is pinned, no rate is given or the
        plan has no PP stage."""
        if p.workload.rate is None or pp is not None or not any(r.pp > 1 for r in plan.config.replicas):
            return None

        def more(seconds: float) -> list[Any]:
            from dnnplace.models.serving.search import search

            found = search(p, time_limit=max(seconds, 0.1), tp=self.tp, pp=1, max_num_seqs=self.max_num_seqs,
                           max_num_batched_tokens=self.max_num_batched_tokens, within_nodes=self.within_nodes,
                           expert_parallel=self.expert_parallel)
            return [found.config, *found.meta.get("runner_ups", [])] if found.config.replicas else []

        return more

    def _no_worse_than_baselines(self, p: ServingProblem, plan: Any) -> Any:
        """The plan, or the baseline deployment that serves more than it (and meets the SLOs), with the baselines
        priced once and kept with the plan for its document.

        Why: under SLOs the search ranks deployments by their rate and the plan is the fastest searched one
        that meets them (a heuristic), and a search cut by the time limit stops where it is; either can end
        below a baseline -- the best one-kind deployment, or the plan's own replicas under the engine's split --
        and a plan that loses to what it is compared with is a wrong answer.  Never where the user pinned the
        layout or the limits (a pin is kept, not traded), nor under a rate (the plan's verdict there is the
        simulation's, the baselines' the evaluator's)."""
        from dnnplace.models.serving.baselines import adopt_better, baselines

        found = baselines(p, plan)
        if not self.pins() and p.workload.rate is None:
            plan, found = adopt_better(p, plan, found)
        return replace(plan, meta={**plan.meta, "baselines": (plan.config, found)})

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
        check_pins(workload, self.tp, pp, f"pp={self.pp}" if self.pp is not None else f"layers={self.layers}")
        check_expert_parallel(workload, self.expert_parallel, self.tp)
        mns, mbt = self.max_num_seqs, self.max_num_batched_tokens
        if workload.engine.tokens_cover_seqs and mns is not None and mbt is not None and mns > mbt:
            raise DnnplaceError(f"--fix max_num_seqs={mns} is more than max_num_batched_tokens={mbt}: "
                                f"{workload.engine.name} refuses it at start-up")
        limit = 30.0 if run.time_limit is None else run.time_limit
        if run.progress is not None:
            run.progress(0, 1, "searching deployments")
        started = time.monotonic()
        # one --time-limit for the whole command: the search may take SEARCH_SHARE of it, and the baselines'
        # own searches (best one-kind subset) what is left, so the two together stay within it
        if self.disaggregate:
            from dnnplace.models.serving.disaggregation import check_engine

            check_engine(workload)
        plan = search(workload, time_limit=SEARCH_SHARE * limit, tp=self.tp, pp=pp, max_num_seqs=self.max_num_seqs,
                      max_num_batched_tokens=self.max_num_batched_tokens, progress=run.progress,
                      within_nodes=self.within_nodes, expert_parallel=self.expert_parallel)
        if run.progress is not None:
            run.progress(1, 1, "searching deployments")
        if not plan.config.replicas and plan.meta.get("complete") is False:  # stopped, not proven: no verdict
            raise DnnplaceError(f"no deployment found within --time-limit {limit:g} s: the search stopped before "
                                "any fitting deployment, so whether one fits is not known; give more time")
        if not plan.config.replicas:
            raise unfit(workload, self.pins())
        if layers is not None:
            plan = apply_layers(workload, plan, layers)
        # a latency SLO under a load is checked by simulation: half of what is left, the baselines the rest
        plan, _ = meet_slo(workload, plan, time_limit=max(limit - (time.monotonic() - started), 0.05 * limit) / 2,
                           more=self._without_pp(workload, plan, pp), pinned_seqs=self.max_num_seqs is not None)
        if self.disaggregate:  # beside the plan, from half of what is left (the baselines get the rest)
            from dnnplace.models.serving.disaggregation import best_disaggregated

            try:
                found: Any = best_disaggregated(workload, max(limit - (time.monotonic() - started), 0.05 * limit) / 2)
            except DnnplaceError as exc:  # no disaggregated deployment: the plan stands and says why
                found = str(exc)
            plan = replace(plan, meta={**plan.meta, "disaggregated": found})
        left = max(limit - (time.monotonic() - started), 0.05 * limit)
        plan = replace(plan, meta={**plan.meta, "time_limit": left})  # what the baselines' searches may use
        plan = self._no_worse_than_baselines(workload, plan)
        bound = None if not plan.bound else 1.0 / plan.bound
        status = {"infeasible": "feasible"}.get(plan.status, plan.status)
        return SolverOutput(plan=plan, status=status, bound=bound,
                            stats={"complete": plan.meta.get("complete"), "search_runtime_s": plan.runtime_s,
                                   "runner_ups": plan.meta.get("runner_ups", [])})
