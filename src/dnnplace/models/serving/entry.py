"""The serving planner as the registry sees it: one :class:`~dnnplace.core.protocol.PlannedModel`.

A serving plan records its own status, bound (on output tokens/s) and gap; ``solve`` minimises seconds
per output token, so its proof is turned back into tokens/s here.  ``simulate`` takes a request rate
(the plan's workload's, when none is given); the report draws the plan with its runner-ups and baselines.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from dnnplace.core.protocol import PlannedModel, Proof, options
from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.evaluation import ServingEvaluation
from dnnplace.models.serving.spec import FORMAT, ServingPlan, ServingProblem

__all__ = ["ENTRY", "Judged"]


class Judged(ServingEvaluation):
    """A serving evaluation as ``solve`` and ``dnnplace.evaluate`` give every model's: ``value(objective)`` to
    minimise (seconds per output token at the batch limits, the inverse of ``capacity_tokens_per_s``: under a
    rate too, where what is served is the demand) and ``feasible``; everything else is the evaluation itself."""

    def value(self, objective: str = "throughput") -> float:  # type: ignore[override]
        tok = self.capacity_tokens_per_s
        return 1.0 / tok if tok > 0 else math.inf

    @property
    def feasible(self) -> bool:
        return self.fits


def _judge(problem: ServingProblem, plan: ServingPlan, overlap_comm: bool = False) -> Judged:
    from dnnplace.models.serving.evaluation import evaluate

    ev = evaluate(problem, plan.config)
    return Judged(**{f.name: getattr(ev, f.name) for f in dataclasses.fields(ev)})


def _evaluate(problem: ServingProblem, plan: ServingPlan, **_: Any) -> ServingEvaluation:
    return _judge(problem, plan)


def _simulate(problem: ServingProblem, plan: ServingPlan, *, rate: float | None = None, requests: int | None = None,
              offline: bool | None = None, concurrency: int | None = None, **_: Any) -> Any:
    """Requests from a Poisson rate, closed-loop clients or all at once; one of them, the workload's if none."""
    from dnnplace.models.serving.simulator import simulate

    n = 2000 if requests is None else requests
    given = [name for name, v in (("--rate", rate), ("--offline", offline), ("--concurrency", concurrency)) if v]
    if len(given) > 1:
        raise DnnplaceError(f"give one of {' / '.join(given)}, not several")
    if offline:
        return simulate(problem, plan.config, offline=True, requests=n)
    wl = problem.workload
    if concurrency is None and rate is None and wl.rate is None:
        concurrency = wl.concurrency
    if concurrency is not None:
        return simulate(problem, plan.config, concurrency=concurrency, requests=n)
    rate = rate if rate is not None else wl.rate
    if rate is None:
        raise DnnplaceError("simulating a serving plan needs a load: give --rate R (requests/s), --concurrency C "
                            "or --offline")
    return simulate(problem, plan.config, rate=rate, requests=n)


def _report(problem: ServingProblem, plan: ServingPlan, path: Any, **_: Any) -> Path:
    from dnnplace.models.serving.baselines import plan_baselines
    from dnnplace.models.serving.evaluation import evaluate
    from dnnplace.models.serving.report import write_report

    ups = [(c, evaluate(problem, c)) for c in plan.meta.get("runner_ups", [])]
    return write_report(problem, plan, evaluate(problem, plan.config), Path(path), runner_ups=ups,
                        baselines=plan_baselines(problem, plan))


def _document(problem: ServingProblem, plan: ServingPlan, ev: Any) -> dict[str, Any]:
    from dnnplace.models.serving.plan_file import plan_document

    return plan_document(problem, plan, ev)


def _reads(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("format") == FORMAT


def _read(doc: Any, source: str, **given: Any) -> tuple[ServingProblem, ServingPlan]:
    from dnnplace.models.serving.plan_file import read_serving_plan

    if given:
        raise DnnplaceError(f"{source}: a serving plan file carries its model, fleet and workload; "
                            f"{next(iter(given)).replace('_', '-')} does not apply to it")
    return read_serving_plan(doc, source)


def _read_plan(problem: ServingProblem, doc: Any, source: str) -> tuple[ServingProblem, ServingPlan]:
    from dnnplace.models.serving.plan_file import read_serving_plan

    return read_serving_plan(doc, source)


def _with_proof(plan: ServingPlan, meta: dict[str, Any]) -> ServingPlan:
    """solve's proof as the plan keeps it: the bound on tokens/s, and solve's own (seconds per output token)
    as it was, so :func:`_proof_of` reads back exactly what ``solve`` returned."""
    bound = meta.get("bound")
    return replace(plan, status=meta["status"], bound=None if not bound else 1.0 / bound, gap=meta.get("gap"),
                   runtime_s=meta["runtime_s"], meta={**plan.meta, "seconds_per_token_bound": bound})


def _proof_of(plan: ServingPlan) -> Proof:
    """The proof on solve's objective (seconds per output token, minimised) for every model's readers."""
    if "seconds_per_token_bound" in plan.meta:
        bound = plan.meta["seconds_per_token_bound"]
    else:
        bound = None if not plan.bound else 1.0 / plan.bound
    return Proof(plan.status, bound, plan.gap, plan.runtime_s)


ENTRY = PlannedModel(
    "serving", ServingProblem, ServingPlan, "serving-search", "a serving problem", _evaluate, _simulate, _report,
    _document, _read_plan, read=_read, reads=_reads, evaluation_document=lambda problem, ev: ev.to_dict(),
    judge_solution=_judge, with_proof=_with_proof,
    with_runtime=lambda plan, runtime_s: replace(plan, runtime_s=runtime_s),
    proof_of=_proof_of,
    simulate_options=options(rate=None, requests=None, offline=None, concurrency=None))
