"""The paper's model as the registry sees it: one :class:`~dnnplace.core.protocol.PlannedModel`.

Heavy modules (the evaluator, the simulator, the report) are imported when a step runs, so that
``import dnnplace`` stays light.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from dnnplace.core.protocol import PlannedModel, need_microbatches, options
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload


def _evaluate(w: Workload, split: Any, *, overlap_comm: bool = False, source: str = "split") -> Any:
    from dnnplace.models.paper.evaluation import evaluate

    return evaluate(w, split, overlap_comm=overlap_comm, source=source)


def _simulate(w: Workload, split: Any, **opts: Any) -> Any:
    from dnnplace.models.paper.simulation import simulate

    need_microbatches(opts.get("microbatches"))
    return simulate(w, split, **opts)


def _report(w: Workload, split: Any, path: Any, **opts: Any) -> Any:
    from dnnplace.models.paper.report import write_report

    return write_report(w, split, path, **opts)


def _document(w: Workload, split: Any, ev: Any) -> dict[str, Any]:
    from dnnplace.models.paper.paper_json import split_to_dict

    return split_to_dict(split, ev)


def _read_plan(w: Workload, doc: Any, source: str) -> tuple[Workload, Any]:
    from dnnplace.models.paper.paper_json import parse_split

    return w, parse_split(doc, source=source)


def _read(doc: Any, source: str, **_: Any) -> tuple[Workload, None]:
    from dnnplace.models.paper.paper_json import parse_workload

    return parse_workload(doc, source=source), None


def _notes(w: Workload, split: Any, *, overlap_comm: bool = False) -> list[str]:
    meta = getattr(split, "meta", None) or {}
    if meta.get("overlapComm") is True and not overlap_comm:
        return ["the split records overlapComm: true; judged without overlap (add --overlap-comm to use it)"]
    return []


def _for_objective(w: Workload, objective: str) -> Workload:
    """The latency model has as many CPU cores as it needs: maxCPUs does not bind."""
    return w.with_budget(cpus=max(w.max_cpus, w.n)) if objective == "latency" else w


def _budget(w: Workload, *, accelerators: int | None = None, cpus: int | None = None, memory: float | None = None,
            **_: Any) -> Workload:
    return w.with_budget(accelerators, cpus, memory)


def _check(w: Workload) -> None:
    from dnnplace.models.paper.validate import check_feasibility

    check_feasibility(w)


def _judge(w: Workload, split: Any, overlap_comm: bool) -> Any:
    from dnnplace.models.paper.evaluation import evaluate

    return evaluate(w, split, overlap_comm=overlap_comm, complete=False)


ENTRY = PlannedModel(
    "paper", Workload, Split, "dp", "a workload in the paper's format", _evaluate, _simulate, _report, _document,
    _read_plan, _notes, plan_noun="split", read=_read, with_budget=_budget, for_objective=_for_objective,
    check_solvable=_check, judge_solution=_judge, with_proof=lambda split, meta: split.with_meta(**meta),
    with_runtime=lambda split, runtime_s: split.with_meta(runtime_s=round(runtime_s, 6)),
    simulate_defaults=MappingProxyType({"schedule": "1f1b", "microbatches": 64}),
    report_defaults=MappingProxyType({"schedule": "1f1b", "microbatches": 8}),
    solve_options=options(overlap_comm=None), evaluate_options=options(overlap_comm=None),
    simulate_options=options(schedule=None, microbatches=None, overlap_comm=None),
    report_options=options(schedule=None, microbatches=None, overlap_comm=None),
    budget_options=frozenset({"accelerators", "cpus", "memory"}))
