"""The one protocol every planned model implements: what binds its instance to its plan, judge and report.

A model is a package under :mod:`dnnplace.models` whose ``entry`` module defines one
:class:`PlannedModel`; :data:`dnnplace.api.models.MODELS` lists them, one line each.  Everything
generic (``solve``, ``evaluate``, ``simulate``, ``write_report``, the CLI) dispatches on the
instance's type through that table and never on a file's format.

Options are refused *by declaration*: each entry lists, per step, the options that apply to it
and, where only some values do, which (:data:`Options`).  An option given that the model does not
declare is an error naming the option and the models that take it, never silently ignored
(networkx's ``not_implemented_for`` is the model: the refusal is data, not code in each function).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from dnnplace.errors import DnnplaceError

#: option -> the values that apply (None: any value).  An option absent from the table does not apply.
Options = Mapping[str, frozenset[Any] | None]


def options(**allowed: Any) -> Options:
    """An immutable option table: ``options(schedule={"1f1b"}, microbatches=None)``."""
    return MappingProxyType({k: None if v is None else frozenset(v) for k, v in allowed.items()})


def allows(table: Options | frozenset[str], option: str, value: Any) -> bool:
    """Does ``table`` declare ``option`` (with ``value`` among its values where it lists them)?"""
    if option not in table:
        return False
    if not isinstance(table, Mapping):
        return True
    values = table[option]
    return values is None or value in values


@dataclass(frozen=True)
class Proof:
    """What was proven about a plan, read the same way for every model (:func:`dnnplace.api.proof_of`).

    ``status`` is one of :data:`dnnplace.core.solver.STATUSES` (None: a plan file that records none);
    ``bound`` is the proven bound on the objective (None: nothing proven), ``gap`` the relative gap of
    the plan's value to it, ``runtime_s`` how long the solve took.  Each model keeps these its own way
    (a split's immutable ``meta``, a Piper plan's ``meta`` dict, an LLM plan's fields); its entry's
    ``proof_of`` is the one reader.
    """

    status: str | None
    bound: float | None
    gap: float | None
    runtime_s: float | None


def meta_proof(plan: Any) -> Proof:
    """The proof a plan keeps in its ``meta`` mapping (a split, a Piper plan)."""
    meta = getattr(plan, "meta", None) or {}
    return Proof(meta.get("status"), meta.get("bound"), meta.get("gap"), meta.get("runtime_s"))


def in_meta(plan: Any, meta: dict[str, Any]) -> Any:
    """A plan that keeps what was proven in its ``meta`` dict (a Piper plan) records it there."""
    plan.meta.update(meta)
    return plan


def no_budget(inst: Any, **budget: Any) -> Any:
    """A model whose instance has no budget overrides: any given is an error."""
    if any(v is not None for v in budget.values()):
        raise DnnplaceError("this model's instance takes no budget overrides")
    return inst


def need_microbatches(microbatches: Any) -> None:
    """Only a plan that brings its own number of micro-batches may leave it unset."""
    if microbatches is None:
        raise DnnplaceError("microbatches must be a whole number >= 1, got None")


def _frozen(**values: Any) -> Mapping[str, Any]:
    return field(default_factory=lambda: MappingProxyType(dict(values)))


@dataclass(frozen=True)
class Flag:
    """An option of a model's loader, declared once: ``dnnplace.load`` takes it, ``solve`` gets ``--name``."""

    name: str
    kind: type  # int, float or str
    help: str


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
    #: (instance, evaluation) -> the evaluation as one JSON object (``evaluate --json``; the CLI's default view)
    evaluation_document: Callable[[Any, Any], dict[str, Any]] = lambda inst, ev: ev.to_dict()
    #: (decoded JSON, source, **load options) -> (instance, the plan the file carries or None)
    read: Callable[..., tuple[Any, Any]] | None = None
    #: Is a decoded JSON document one of this model's files?  None: the format of files no other model claims.
    reads: Callable[[Any], bool] | None = None
    #: Is a path text an input of this model that is not one JSON file (a folder, ``file.py:fn``)?
    reads_path: Callable[[str], bool] | None = None
    #: (instance, accelerators=, cpus=, memory=, bandwidth=, batch=) -> the instance under that budget
    with_budget: Callable[..., Any] = no_budget
    # solve's steps that differ by model (dnnplace.api.planning.solve runs them in this order):
    for_objective: Callable[[Any, str], Any] = lambda inst, objective: inst
    check_solvable: Callable[[Any], None] = lambda inst: None  # inside the timed part, before the method runs
    judge_solution: Callable[[Any, Any, bool], Any] | None = None  # (inst, plan, overlap_comm); None: evaluate
    with_proof: Callable[[Any, dict[str, Any]], Any] = in_meta
    with_runtime: Callable[[Any, float], Any] = lambda plan, runtime_s: in_meta(plan, {"runtime_s": runtime_s})
    proof_of: Callable[[Any], Proof] = meta_proof  # what with_proof recorded, read back
    #: What ``simulate`` / ``write_report`` use for an option the caller leaves at None: each model its own
    #: (an LLM plan brings its schedule and micro-batches, so it has none).
    simulate_defaults: Mapping[str, Any] = _frozen()
    report_defaults: Mapping[str, Any] = _frozen()
    # The options each step takes (refused by name for the others; :func:`dnnplace.api.models.check_declared`):
    solve_options: Options = field(default_factory=lambda: options())  # solve's, beyond the method's own
    evaluate_options: Options = field(default_factory=lambda: options())
    simulate_options: Options = field(default_factory=lambda: options())
    report_options: Options = field(default_factory=lambda: options())
    budget_options: frozenset[str] = frozenset()  # with_budget's overrides
    load_flags: tuple[Flag, ...] = ()  # ``dnnplace.load``'s options for this model's files
    judge_overrides: frozenset[str] = frozenset()  # overrides a plan is judged under (``evaluate -k ...``)

    @property
    def load_options(self) -> frozenset[str]:
        """The names of :attr:`load_flags` (refusal by declaration reads this table)."""
        return frozenset(f.name for f in self.load_flags)
