"""Which model an instance belongs to, and each model's reader, writer, evaluator, simulator and report.

One table (:data:`MODELS`) binds every planned model to its pieces, so that
:func:`dnnplace.solve`, :func:`dnnplace.evaluate`, :func:`dnnplace.simulate`,
:func:`dnnplace.write_report` and the CLI dispatch on the instance's type and
never on a file's format.  Adding a model is one :class:`PlannedModel` entry (and,
for the command line, one entry in each of :mod:`dnnplace.cli.render`'s tables).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.spec import LLMPlan, LLMProblem
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload
from dnnplace.models.piper.spec import PiperInstance, PiperPlan

#: An instance of a model dnnplace plans: the paper's workload, Piper's, or an LLM training problem.
Instance = Workload | PiperInstance | LLMProblem


def _frozen(**options: Any) -> Mapping[str, Any]:
    return field(default_factory=lambda: MappingProxyType(dict(options)))


def _no_overlap(inst: Any, overlap_comm: bool) -> Any:
    refuse("overlap_comm", overlap_comm, False, "paper")
    return inst


def _no_budget(inst: Any, **budget: Any) -> Any:
    if any(v is not None for v in budget.values()):
        raise DnnplaceError("an LLM training problem takes its GPUs and batch from load_llm (--gpus,"
                            " --global-batch), not budget overrides")
    return inst


def _in_meta(plan: Any, meta: dict[str, Any]) -> Any:
    """A plan that keeps what was proven in its ``meta`` dict (a Piper plan) records it there."""
    plan.meta.update(meta)
    return plan


@dataclass(frozen=True)
class Proof:
    """What was proven about a plan, read the same way for every model (:func:`proof_of`).

    ``status`` is one of :data:`dnnplace.core.solver.STATUSES` (None: a plan file that records none);
    ``bound`` is the proven bound on the objective (None: nothing proven), ``gap`` the relative gap of
    the plan's value to it, ``runtime_s`` how long the solve took.  Each model keeps these its own way
    (a split's immutable ``meta``, a Piper plan's ``meta`` dict, an LLM plan's fields); its registry
    entry's ``proof_of`` is the one reader.
    """

    status: str | None
    bound: float | None
    gap: float | None
    runtime_s: float | None


def _meta_proof(plan: Any) -> Proof:
    meta = getattr(plan, "meta", None) or {}
    return Proof(meta.get("status"), meta.get("bound"), meta.get("gap"), meta.get("runtime_s"))


def _fields_proof(plan: Any) -> Proof:
    return Proof(plan.status, plan.bound, plan.gap, plan.runtime_s)


@dataclass(frozen=True)
class PlannedModel:
    """A model dnnplace plans: its instance type, default method, and what judges and shows its plans."""

    name: str  # the value of Solver.model
    instance_type: type
    plan_type: type
    default_method: str
    describe: str  # how errors name its instances
    evaluate: Callable[..., Any]  # (instance, plan, **options) -> evaluation
    simulate: Callable[..., Any]  # (instance, plan, **options) -> simulation
    write_report: Callable[..., Any]  # (instance, plan, path, **options) -> Path
    plan_document: Callable[[Any, Any, Any], dict[str, Any]]  # (instance, plan, evaluation) -> plan file
    read_plan: Callable[[Any, Any, str], tuple[Any, Any]]  # (instance, decoded JSON, source) -> (instance, plan)
    plan_notes: Callable[..., list[str]] = lambda inst, plan, **options: []  # what the plan records but is not used
    plan_noun: str = "plan"  # what messages call its plans ("split" in the paper's model)
    #: (instance, accelerators=, cpus=, memory=, bandwidth=, batch=) -> the instance under that budget
    with_budget: Callable[..., Any] = lambda inst, **budget: _no_budget(inst, **budget)
    # solve's steps that differ by model (dnnplace.api.planning.solve runs them in this order):
    for_objective: Callable[[Any, str, bool], Any] = lambda inst, objective, overlap_comm: _no_overlap(inst,
                                                                                                   overlap_comm)
    check_solvable: Callable[[Any], None] = lambda inst: None  # inside the timed part, before the method runs
    judge_solution: Callable[[Any, Any, bool], Any] | None = None  # (inst, plan, overlap_comm); None: evaluate
    with_proof: Callable[[Any, dict[str, Any]], Any] = lambda plan, meta: _in_meta(plan, meta)
    with_runtime: Callable[[Any, float], Any] = lambda plan, runtime_s: _in_meta(plan, {"runtime_s": runtime_s})
    proof_of: Callable[[Any], Proof] = _meta_proof  # what with_proof recorded, read back
    #: What ``simulate`` / ``write_report`` use for an option the caller leaves at None: each model its own
    #: (an LLM plan brings its schedule and micro-batches, so it has none).
    simulate_defaults: Mapping[str, Any] = _frozen()
    report_defaults: Mapping[str, Any] = _frozen()
    #: Options of ``dnnplace.load`` that apply to this model's files (refused by name for the others).
    load_options: frozenset[str] = frozenset()
    #: Budget overrides a plan of this model is judged under (``evaluate/simulate/report -k ...``).
    judge_overrides: frozenset[str] = frozenset()


def _paper_evaluate(w: Workload, split: Any, *, overlap_comm: bool = False, source: str = "split") -> Any:
    from dnnplace.models.paper.evaluation import evaluate

    return evaluate(w, split, overlap_comm=overlap_comm, source=source)


def _paper_simulate(w: Workload, split: Any, **options: Any) -> Any:
    from dnnplace.models.paper.simulation import simulate

    _need_microbatches(options.get("microbatches"))
    return simulate(w, split, **options)


def _need_microbatches(microbatches: Any) -> None:
    """Only an LLM plan brings its own number of micro-batches."""
    if microbatches is None:
        raise DnnplaceError("microbatches must be a whole number >= 1, got None")


def _paper_report(w: Workload, split: Any, path: Any, **options: Any) -> Any:
    from dnnplace.models.paper.report import write_report

    return write_report(w, split, path, **options)


def _paper_document(w: Workload, split: Any, ev: Any) -> dict[str, Any]:
    from dnnplace.models.paper.paper_json import split_to_dict

    return split_to_dict(split, ev)


def _paper_read(w: Workload, doc: Any, source: str) -> tuple[Workload, Any]:
    from dnnplace.models.paper.paper_json import parse_split

    return w, parse_split(doc, source=source)


def _paper_notes(w: Workload, split: Any, *, overlap_comm: bool = False) -> list[str]:
    meta = getattr(split, "meta", None) or {}
    if meta.get("overlapComm") is True and not overlap_comm:
        return ["the split records overlapComm: true; judged without overlap (add --overlap-comm to use it)"]
    return []


def _paper_for_objective(w: Workload, objective: str, overlap_comm: bool) -> Workload:
    """The latency model has as many CPU cores as it needs: maxCPUs does not bind."""
    return w.with_budget(cpus=max(w.max_cpus, w.n)) if objective == "latency" else w


def _paper_budget(w: Workload, *, accelerators: int | None, cpus: int | None, memory: float | None,
                  bandwidth: float | None, batch: int | None) -> Workload:
    refuse("bandwidth", bandwidth, None, "piper")
    refuse("batch", batch, None, "piper")
    return w.with_budget(accelerators, cpus, memory)


def _piper_budget(inst: PiperInstance, *, accelerators: int | None, cpus: int | None, memory: float | None,
                  bandwidth: float | None, batch: int | None) -> PiperInstance:
    refuse("cpus", cpus, None, "paper")
    return inst.with_overrides(devices=accelerators, memory=memory, bandwidth=bandwidth, batch=batch)


def _paper_check(w: Workload) -> None:
    from dnnplace.models.paper.validate import check_feasibility

    check_feasibility(w)


def _paper_judge(w: Workload, split: Any, overlap_comm: bool) -> Any:
    from dnnplace.models.paper.evaluation import evaluate

    return evaluate(w, split, overlap_comm=overlap_comm, complete=False)


def _piper_evaluate(inst: PiperInstance, plan: Any, *, overlap_comm: bool = False, source: str = "plan") -> Any:
    from dnnplace.models.piper.evaluation import evaluate_piper

    refuse("overlap_comm", overlap_comm, False, "paper")
    return evaluate_piper(inst, plan)


def _piper_simulate(inst: PiperInstance, plan: Any, *, schedule: str = "1f1b", microbatches: int = 64,
                    overlap_comm: bool = False) -> Any:
    from dnnplace.models.piper.simulation import simulate_piper

    refuse("schedule", schedule, "1f1b", "paper")
    refuse("overlap_comm", overlap_comm, False, "paper")
    _need_microbatches(microbatches)
    return simulate_piper(inst, plan, microbatches=microbatches)


def _piper_report(inst: PiperInstance, plan: Any, path: Any, *, title: str | None = None,
                  inputs: Any = (), **options: Any) -> Any:
    from dnnplace.models.piper.report import write_piper_report

    for name, value in options.items():
        refuse(name, value, _REPORT_DEFAULTS.get(name), "paper")
    return write_piper_report(inst, plan, path, title=title, inputs=inputs)


_REPORT_DEFAULTS: dict[str, Any] = {"microbatches": 8, "schedule": "1f1b", "overlap_comm": False}


def _piper_document(inst: PiperInstance, plan: Any, ev: Any) -> dict[str, Any]:
    from dnnplace.models.piper.piper_json import plan_to_dict

    return plan_to_dict(inst, plan, ev)


# What a Piper plan's "instance" block records: (key, PiperInstance attribute, the command-line flag)
_RECORDED = (("maxDevices", "max_devices", "-k"), ("maxMemoryPerDevice", "memory", "--memory"),
             ("bandwidth", "bandwidth", "--bandwidth"), ("mbsInBatch", "batch", "--batch"))


def _piper_read(inst: PiperInstance, doc: Any, source: str) -> tuple[PiperInstance, Any]:
    """A Piper plan is judged under the workload file's K, M, BW, N (and the command line's overrides).

    The plan's ``instance`` block records what it was made for: it is checked (one-line errors) and
    compared by :func:`_piper_notes`, never trusted.  Only ``bertLayers`` is taken from it when the
    workload was not built as BERT-L already: it names the graph the plan's nodes belong to.
    """
    from dnnplace.errors import InputError
    from dnnplace.models.piper.piper_json import bert_l, plan_from_dict
    from dnnplace.utils.text import show_value

    params = doc.get("instance", {}) if isinstance(doc, dict) else {}
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InputError(f"{source}: 'instance' must be an object, got {show_value(params)}")
    for key, _, _ in _RECORDED:
        val = params.get(key)
        if val is None:
            continue
        whole = key in ("maxDevices", "mbsInBatch")
        if isinstance(val, bool) or not isinstance(val, (int, float)) or (whole and not isinstance(val, int)):
            raise InputError(f"{source}: instance.{key} must be {'a whole number' if whole else 'a number'},"
                             f" got {show_value(val)}")
    layers = params.get("bertLayers")
    if inst.bert_layers is None and layers is not None:
        if isinstance(layers, bool) or not isinstance(layers, int):
            raise InputError(f"{source}: instance.bertLayers must be a whole number, got {show_value(layers)}")
        inst = bert_l(inst, layers)
    return inst, plan_from_dict(inst, doc, source=source)


def _piper_notes(inst: PiperInstance, plan: Any, **options: Any) -> list[str]:
    """One line when the plan records parameters other than those it is judged under."""
    recorded = plan.meta.get("instance") if isinstance(getattr(plan, "meta", None), dict) else None
    if not isinstance(recorded, dict):
        return []
    diffs = []
    for key, attr, flag in _RECORDED:
        val = recorded.get(key)
        used = getattr(inst, attr)
        if val is not None and float(val) != float(used):
            diffs.append(f"{key} {float(val):g} (used: {float(used):g}, {flag})")
    if not diffs:
        return []
    return ["the plan was made for other parameters; judged under the workload's and the command line's: "
            + ", ".join(diffs)]


def _llm_evaluate(problem: LLMProblem, plan: LLMPlan, *, overlap_comm: bool = False, source: str = "plan") -> Any:
    from dnnplace.models.llm.evaluation import evaluate

    refuse("overlap_comm", overlap_comm, False, "paper")
    return evaluate(problem, plan.config)


def _llm_simulate(problem: LLMProblem, plan: LLMPlan, *, schedule: str = "1f1b", microbatches: int | None = None,
                  overlap_comm: bool = False) -> Any:
    from dataclasses import replace

    from dnnplace.models.llm.simulation import simulate_llm

    refuse("schedule", schedule, "1f1b", "paper")  # the plan's vp decides: 1F1B or interleaved 1F1B
    refuse("microbatches", microbatches, None, "paper")  # the plan's global batch decides
    refuse("overlap_comm", overlap_comm, False, "paper")
    return simulate_llm(replace(plan, problem=problem))


def _llm_report(problem: LLMProblem, plan: LLMPlan, path: Any, *, title: str | None = None, inputs: Any = (),
                **options: Any) -> Any:
    from dataclasses import replace

    from dnnplace.models.llm.report import write_llm_report

    for name, value in options.items():
        refuse(name, value, _REPORT_DEFAULTS.get(name), "paper")
    return write_llm_report(replace(plan, problem=problem), path, title=title, inputs=inputs)


def _llm_document(problem: LLMProblem, plan: LLMPlan, ev: Any) -> dict[str, Any]:
    from dataclasses import replace

    return replace(plan, problem=problem, estimate=ev).to_dict()


def _llm_notes(problem: LLMProblem, plan: LLMPlan, **options: Any) -> list[str]:
    """An LLM plan is judged under the problem its file records: nothing to note."""
    return []


def _llm_with_runtime(plan: LLMPlan, runtime_s: float) -> LLMPlan:
    from dataclasses import replace

    return replace(plan, runtime_s=runtime_s)


def _llm_read(problem: LLMProblem, doc: Any, source: str) -> tuple[LLMProblem, LLMPlan]:
    """An LLM plan file carries its model, cluster and job: it is judged under those."""
    from dnnplace.models.llm.plan_file import read_llm_plan

    plan = read_llm_plan(doc, source)
    return plan.problem, plan


MODELS: dict[str, PlannedModel] = {
    "paper": PlannedModel("paper", Workload, Split, "dp", "a workload in the paper's format", _paper_evaluate,
                          _paper_simulate, _paper_report, _paper_document, _paper_read, _paper_notes,
                          plan_noun="split", with_budget=_paper_budget, for_objective=_paper_for_objective,
                          check_solvable=_paper_check,
                          judge_solution=_paper_judge, with_proof=lambda split, meta: split.with_meta(**meta),
                          with_runtime=lambda split, runtime_s: split.with_meta(runtime_s=round(runtime_s, 6)),
                          simulate_defaults=MappingProxyType({"schedule": "1f1b", "microbatches": 64}),
                          report_defaults=MappingProxyType({"schedule": "1f1b", "microbatches": 8})),
    "piper": PlannedModel("piper", PiperInstance, PiperPlan, "piper", "a Piper workload", _piper_evaluate,
                          _piper_simulate, _piper_report, _piper_document, _piper_read, _piper_notes,
                          with_budget=_piper_budget, simulate_defaults=MappingProxyType({"microbatches": 64}),
                          load_options=frozenset({"bert_layers"}),
                          judge_overrides=frozenset({"accelerators", "memory", "bandwidth", "batch"})),
    "llm": PlannedModel("llm", LLMProblem, LLMPlan, "llm-search", "an LLM training problem", _llm_evaluate,
                        _llm_simulate, _llm_report, _llm_document, _llm_read, _llm_notes,
                        # the plan records its own status, bound and gap; the solve's runtime is the one shown
                        with_proof=lambda plan, meta: _llm_with_runtime(plan, meta["runtime_s"]),
                        with_runtime=_llm_with_runtime, proof_of=_fields_proof),
}


def _model_by(obj: Any, kind: str, what: str) -> PlannedModel:
    """The model whose ``kind`` type (``instance_type`` or ``plan_type``) ``obj`` is (a clear error if none)."""
    for m in MODELS.values():
        if isinstance(obj, getattr(m, kind)):
            return m
    known = ", ".join(getattr(m, kind).__name__ for m in MODELS.values())
    raise DnnplaceError(f"expected {what} of a planned model ({known}), got {type(obj).__name__}")


def model_of(instance: Any) -> PlannedModel:
    """The model ``instance`` belongs to (a clear error for anything else)."""
    return _model_by(instance, "instance_type", "an instance")


def paper_instance(instance: Any, what: str) -> Workload:
    """``instance`` when it is a workload in the paper's format; a clear error for anything else."""
    if isinstance(instance, Workload):
        return instance
    if isinstance(instance, PiperInstance):
        raise DnnplaceError(f"{what} takes a workload in the paper's format, not a Piper workload")
    raise DnnplaceError(f"{what} expects a Workload (load one with dnnplace.load), got {type(instance).__name__}")


def check_plan(instance: Any, plan: Any) -> PlannedModel:
    """The model of ``instance``, checking that ``plan`` is one of its plans (a split, a Piper plan, an LLM plan)."""
    m = model_of(instance)
    if not isinstance(plan, m.plan_type):
        raise DnnplaceError(f"expected a {m.plan_type.__name__} for {m.describe} (read one with"
                            f" dnnplace.load_plan), got {type(plan).__name__}")
    return m


def model_of_plan(plan: Any) -> PlannedModel:
    """The model whose plans ``plan`` is one of (a clear error for anything else)."""
    return _model_by(plan, "plan_type", "a plan")


def proof_of(plan: Any) -> Proof:
    """What ``plan`` records as proven (status, bound, gap, runtime), whichever model it belongs to."""
    return model_of_plan(plan).proof_of(plan)


def refuse(option: str, value: Any, default: Any, only_for: str) -> None:
    """An option another model uses, given for this one: an error, never silently ignored."""
    if value is not None and value != default:
        raise DnnplaceError(f"{option.replace('_', '-')} applies to {MODELS[only_for].describe} only")


def check_declared(m: PlannedModel, table: str, options: Mapping[str, Any],
                   name: Callable[[str], str] = lambda option: option) -> None:
    """Refuse by declaration: an option given (not None) that ``m`` does not list in ``table``.

    Each model declares the options of a step that apply to it (:attr:`PlannedModel.load_options`,
    :attr:`PlannedModel.judge_overrides`); the error names the option (as ``name`` shows it: the CLI
    passes its flag names) and the model that declares it, never silently ignoring it.
    """
    for option, value in options.items():
        if value is None or option in getattr(m, table):
            continue
        owners = [o.describe for o in MODELS.values() if option in getattr(o, table)]
        where = f"{' or '.join(owners)} only" if owners else f"no {m.describe}"
        raise DnnplaceError(f"{name(option).replace('_', '-')} applies to {where}")
