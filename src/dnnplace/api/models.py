"""Which model an instance belongs to, and each model's reader, writer, evaluator, simulator and report.

One table (:data:`MODELS`) binds every planned model to its pieces, so that
:func:`dnnplace.solve`, :func:`dnnplace.evaluate`, :func:`dnnplace.simulate`,
:func:`dnnplace.write_report` and the CLI dispatch on the instance's type and
never on a file's format.  Adding a model is one :class:`PlannedModel` entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.model.llm import LLMPlan, LLMProblem
from dnnplace.model.piper import PiperInstance
from dnnplace.model.workload import Workload


@dataclass(frozen=True)
class PlannedModel:
    """A model dnnplace plans: its instance type, default method, and what judges and shows its plans."""

    name: str  # the value of Solver.model
    instance_type: type
    default_method: str
    describe: str  # how errors name its instances
    evaluate: Callable[..., Any]  # (instance, plan, **options) -> evaluation
    simulate: Callable[..., Any]  # (instance, plan, **options) -> simulation
    write_report: Callable[..., Any]  # (instance, plan, path, **options) -> Path
    plan_document: Callable[[Any, Any, Any], dict[str, Any]]  # (instance, plan, evaluation) -> plan file
    read_plan: Callable[[Any, Any, str], tuple[Any, Any]]  # (instance, decoded JSON, source) -> (instance, plan)


def _paper_evaluate(w: Workload, split: Any, *, overlap_comm: bool = False, source: str = "split") -> Any:
    from dnnplace.evaluation import evaluate

    return evaluate(w, split, overlap_comm=overlap_comm, source=source)


def _paper_simulate(w: Workload, split: Any, **options: Any) -> Any:
    from dnnplace.simulation.pipeline import simulate

    return simulate(w, split, **options)


def _paper_report(w: Workload, split: Any, path: Any, **options: Any) -> Any:
    from dnnplace.report.html import write_report

    return write_report(w, split, path, **options)


def _paper_document(w: Workload, split: Any, ev: Any) -> dict[str, Any]:
    from dnnplace.frontends.paper_json import split_to_dict

    return split_to_dict(split, ev)


def _paper_read(w: Workload, doc: Any, source: str) -> tuple[Workload, Any]:
    from dnnplace.frontends.paper_json import parse_split

    return w, parse_split(doc, source=source)


def _piper_evaluate(inst: PiperInstance, plan: Any, *, overlap_comm: bool = False, source: str = "plan") -> Any:
    from dnnplace.evaluation.piper import evaluate_piper

    refuse("overlap_comm", overlap_comm, False, "paper")
    return evaluate_piper(inst, plan)


def _piper_simulate(inst: PiperInstance, plan: Any, *, schedule: str = "1f1b", microbatches: int = 64,
                    overlap_comm: bool = False) -> Any:
    from dnnplace.simulation.piper import simulate_piper

    refuse("schedule", schedule, "1f1b", "paper")
    refuse("overlap_comm", overlap_comm, False, "paper")
    return simulate_piper(inst, plan, microbatches=microbatches)


def _piper_report(inst: PiperInstance, plan: Any, path: Any, *, title: str | None = None,
                  inputs: Any = (), **options: Any) -> Any:
    from dnnplace.report.piper_html import write_piper_report

    for name, value in options.items():
        refuse(name, value, _REPORT_DEFAULTS.get(name), "paper")
    return write_piper_report(inst, plan, path, title=title, inputs=inputs)


_REPORT_DEFAULTS: dict[str, Any] = {"microbatches": 8, "schedule": "1f1b", "overlap_comm": False}


def _piper_document(inst: PiperInstance, plan: Any, ev: Any) -> dict[str, Any]:
    from dnnplace.frontends.piper_json import plan_to_dict

    return plan_to_dict(inst, plan, ev)


def _piper_read(inst: PiperInstance, doc: Any, source: str) -> tuple[PiperInstance, Any]:
    """A Piper plan records the K, M, BW, N (and BERT-L) it was made for: judge it under those."""
    from dnnplace.frontends.piper_json import bert_l, plan_from_dict

    params = doc.get("instance", {}) if isinstance(doc, dict) else {}
    if not isinstance(params, dict):
        params = {}
    layers = params.get("bertLayers")
    if inst.bert_layers is None and isinstance(layers, int) and not isinstance(layers, bool):
        inst = bert_l(inst, layers)
    plan = plan_from_dict(inst, doc, source=source)
    if params:
        inst = inst.with_overrides(devices=params.get("maxDevices"), memory=params.get("maxMemoryPerDevice"),
                                   bandwidth=params.get("bandwidth"), batch=params.get("mbsInBatch"))
    return inst, plan


def _llm_evaluate(problem: LLMProblem, plan: LLMPlan, *, overlap_comm: bool = False, source: str = "plan") -> Any:
    from dnnplace.evaluation.llm import evaluate

    refuse("overlap_comm", overlap_comm, False, "paper")
    return evaluate(problem, plan.config)


def _llm_simulate(problem: LLMProblem, plan: LLMPlan, *, schedule: str = "1f1b", microbatches: int | None = None,
                  overlap_comm: bool = False) -> Any:
    from dataclasses import replace

    from dnnplace.simulation.llm import simulate_llm

    refuse("schedule", schedule, "1f1b", "paper")  # the plan's vp decides: 1F1B or interleaved 1F1B
    refuse("microbatches", microbatches, None, "paper")  # the plan's global batch decides
    refuse("overlap_comm", overlap_comm, False, "paper")
    return simulate_llm(replace(plan, problem=problem))


def _llm_report(problem: LLMProblem, plan: LLMPlan, path: Any, *, title: str | None = None, inputs: Any = (),
                **options: Any) -> Any:
    from dataclasses import replace

    from dnnplace.report.llm_html import write_llm_report

    for name, value in options.items():
        refuse(name, value, _REPORT_DEFAULTS.get(name), "paper")
    return write_llm_report(replace(plan, problem=problem), path, title=title, inputs=inputs)


def _llm_document(problem: LLMProblem, plan: LLMPlan, ev: Any) -> dict[str, Any]:
    from dataclasses import replace

    return replace(plan, problem=problem, estimate=ev).to_dict()


def _llm_read(problem: LLMProblem, doc: Any, source: str) -> tuple[LLMProblem, LLMPlan]:
    """An LLM plan file carries its model, cluster and job: it is judged under those."""
    from dnnplace.frontends.llm_plan import read_llm_plan

    plan = read_llm_plan(doc, source)
    return plan.problem, plan


MODELS: dict[str, PlannedModel] = {
    "paper": PlannedModel("paper", Workload, "dp", "a workload in the paper's format", _paper_evaluate,
                          _paper_simulate, _paper_report, _paper_document, _paper_read),
    "piper": PlannedModel("piper", PiperInstance, "piper", "a Piper workload", _piper_evaluate, _piper_simulate,
                          _piper_report, _piper_document, _piper_read),
    "llm": PlannedModel("llm", LLMProblem, "llm-search", "an LLM training problem", _llm_evaluate, _llm_simulate,
                        _llm_report, _llm_document, _llm_read),
}


def model_of(instance: Any) -> PlannedModel:
    """The model ``instance`` belongs to (a clear error for anything else)."""
    for m in MODELS.values():
        if isinstance(instance, m.instance_type):
            return m
    known = ", ".join(m.instance_type.__name__ for m in MODELS.values())
    raise DnnplaceError(f"expected an instance of a planned model ({known}), got {type(instance).__name__}")


def refuse(option: str, value: Any, default: Any, only_for: str) -> None:
    """An option another model uses, given for this one: an error, never silently ignored."""
    if value is not None and value != default:
        raise DnnplaceError(f"{option.replace('_', '-')} applies to {MODELS[only_for].describe} only")
