"""The LLM training planner as the registry sees it: one :class:`~dnnplace.core.protocol.PlannedModel`.

An LLM plan brings its own schedule (1F1B or interleaved, from its vp) and micro-batches (from the
global batch), and records its own status, bound and gap: its option tables are nearly empty.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dnnplace.core.protocol import PlannedModel, Proof, options
from dnnplace.models.llm.spec import FORMAT, LLMPlan, LLMProblem


def _evaluate(problem: LLMProblem, plan: LLMPlan, **_: Any) -> Any:
    from dnnplace.models.llm.evaluation import evaluate

    return evaluate(problem, plan.config)


def _simulate(problem: LLMProblem, plan: LLMPlan, **_: Any) -> Any:
    from dnnplace.models.llm.simulation import simulate_llm

    return simulate_llm(replace(plan, problem=problem))


def _report(problem: LLMProblem, plan: LLMPlan, path: Any, *, title: str | None = None, inputs: Any = (),
            **_: Any) -> Any:
    from dnnplace.models.llm.report import write_llm_report

    return write_llm_report(replace(plan, problem=problem), path, title=title, inputs=inputs)


def _document(problem: LLMProblem, plan: LLMPlan, ev: Any) -> dict[str, Any]:
    return replace(plan, problem=problem, estimate=ev).to_dict()


def _read(doc: Any, source: str, **_: Any) -> tuple[LLMProblem, LLMPlan]:
    """An LLM plan file carries its model, cluster and job: it is judged under those."""
    from dnnplace.models.llm.plan_file import read_llm_plan

    plan = read_llm_plan(doc, source)
    return plan.problem, plan


def _read_plan(problem: LLMProblem, doc: Any, source: str) -> tuple[LLMProblem, LLMPlan]:
    return _read(doc, source)


def _with_runtime(plan: LLMPlan, runtime_s: float) -> LLMPlan:
    return replace(plan, runtime_s=runtime_s)


ENTRY = PlannedModel(
    "llm", LLMProblem, LLMPlan, "llm-search", "an LLM training problem", _evaluate, _simulate, _report, _document,
    _read_plan, read=_read, reads=lambda doc: isinstance(doc, dict) and doc.get("format") == FORMAT,
    # the plan records its own status, bound and gap; the solve's runtime is the one shown
    with_proof=lambda plan, meta: _with_runtime(plan, meta["runtime_s"]), with_runtime=_with_runtime,
    proof_of=lambda plan: Proof(plan.status, plan.bound, plan.gap, plan.runtime_s),
    simulate_options=options(schedule={"1f1b"}),  # the plan's vp decides: 1F1B or interleaved 1F1B
    report_options=options(schedule={"1f1b"}, microbatches={8}))
