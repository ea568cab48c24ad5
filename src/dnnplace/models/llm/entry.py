"""The LLM training planner as the registry sees it: one :class:`~dnnplace.core.protocol.PlannedModel`.

An LLM plan brings its own schedule (1F1B or interleaved, from its vp) and micro-batches (from the
global batch), and records its own status, bound and gap: its option tables are nearly empty.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dnnplace.core.protocol import Flag, PlannedModel, Proof, options
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.load import PROBLEM_OPTIONS, is_config_path, is_hf_config
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
    from dnnplace.models.llm.plan_doc import plan_document

    return plan_document(replace(plan, problem=problem, estimate=ev))


def _read(doc: Any, source: str, **problem: Any) -> tuple[LLMProblem, LLMPlan | None]:
    """A config.json (a folder, ``file.py:fn``) on the cluster ``problem`` gives; or an LLM plan file, which
    carries its model, cluster and job and is judged under those."""
    from dnnplace.models.llm.load import problem as build

    if doc is None or is_hf_config(doc):
        return build(source if doc is None else None, doc=doc, where=source, **problem), None
    if problem:
        raise DnnplaceError(f"{source}: an LLM plan file carries its cluster and job; "
                            f"{next(iter(problem)).replace('_', '-')} applies to a config.json only")
    from dnnplace.models.llm.plan_file import read_llm_plan

    plan = read_llm_plan(doc, source)
    return plan.problem, plan


def _reads(doc: Any) -> bool:
    return is_hf_config(doc) or (isinstance(doc, dict) and doc.get("format") == FORMAT)


def _read_plan(problem: LLMProblem, doc: Any, source: str) -> tuple[LLMProblem, LLMPlan]:
    from dnnplace.models.llm.plan_file import read_llm_plan

    plan = read_llm_plan(doc, source)
    return plan.problem, plan


def _with_runtime(plan: LLMPlan, runtime_s: float) -> LLMPlan:
    return replace(plan, runtime_s=runtime_s)


ENTRY = PlannedModel(
    "llm", LLMProblem, LLMPlan, "llm-search", "an LLM training problem", _evaluate, _simulate, _report, _document,
    _read_plan, read=_read, reads=_reads, evaluation_document=lambda problem, ev: ev.prediction_dict(),
    reads_path=is_config_path, load_flags=tuple(Flag(*o) for o in PROBLEM_OPTIONS),
    # the plan records its own status, bound and gap; the solve's runtime is the one shown
    with_proof=lambda plan, meta: _with_runtime(plan, meta["runtime_s"]), with_runtime=_with_runtime,
    proof_of=lambda plan: Proof(plan.status, plan.bound, plan.gap, plan.runtime_s),
    simulate_options=options(schedule={"1f1b"}),  # the plan's vp decides: 1F1B or interleaved 1F1B
    report_options=options(schedule={"1f1b"}, microbatches={8}))
