"""Which model an instance belongs to: the one table of planned models, and refusal by declaration.

Each model is a package under :mod:`dnnplace.models` whose ``entry`` module defines its
:class:`~dnnplace.core.protocol.PlannedModel`.  :data:`MODELS` lists them, one line each:
:func:`dnnplace.solve`, :func:`dnnplace.evaluate`, :func:`dnnplace.simulate`,
:func:`dnnplace.write_report`, :func:`dnnplace.load` and the CLI dispatch on the instance's type
(or, for a file, on the first entry that ``reads`` it) through this table and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dnnplace.core.protocol import PlannedModel, Proof, allows
from dnnplace.errors import DnnplaceError, OptionError
from dnnplace.models.llm.entry import ENTRY as LLM
from dnnplace.models.llm.spec import LLMProblem
from dnnplace.models.paper.entry import ENTRY as PAPER
from dnnplace.models.paper.workload import Workload
from dnnplace.models.piper.entry import ENTRY as PIPER
from dnnplace.models.piper.spec import PiperInstance
from dnnplace.models.serving.entry import ENTRY as SERVING
from dnnplace.models.serving.spec import ServingProblem

__all__ = ["MODELS", "Instance", "PlannedModel", "Proof", "check_declared", "check_plan", "model_of",
           "model_of_file", "model_of_path", "model_of_plan", "paper_instance", "proof_of"]

#: An instance of a model dnnplace plans: the paper's workload, Piper's, an LLM training or serving problem.
Instance = Workload | PiperInstance | LLMProblem | ServingProblem

#: Every planned model, one line each (the order is the order errors list them in).
MODELS: dict[str, PlannedModel] = {m.name: m for m in (PAPER, PIPER, LLM, SERVING)}


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


def model_of_file(doc: Any) -> PlannedModel:
    """The model whose files a decoded JSON document is: the first that claims it, else the fallback format."""
    for m in MODELS.values():
        if m.reads is not None and m.reads(doc):
            return m
    return next(m for m in MODELS.values() if m.reads is None)


def model_of_path(text: str) -> PlannedModel | None:
    """The model whose inputs ``text`` names when it is not one JSON file (a folder, ``file.py:fn``); else None."""
    return next((m for m in MODELS.values() if m.reads_path is not None and m.reads_path(text)), None)


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


def check_declared(m: PlannedModel, table: str, given: Mapping[str, Any],
                   name: Callable[[str], str] | None = None) -> None:
    """Refuse by declaration: an option given (not None) that ``m`` does not declare in ``table``.

    Each model declares the options of each step that apply to it (and, where only some values
    do, which); the error names the option (as ``name`` shows it: the CLI passes its flag names)
    and the models that take it, never silently ignoring it.  The error is an
    :class:`~dnnplace.errors.OptionError`, which the CLI words with its flag names (``name``, if given,
    words it here instead).
    """
    for option, value in given.items():
        if value is None or allows(getattr(m, table), option, value):
            continue
        owners = [o.describe for o in MODELS.values() if allows(getattr(o, table), option, value)]
        where = f"{' or '.join(owners)} only" if owners else f"no {m.describe}"
        if name is None:
            raise OptionError(option, where)
        raise DnnplaceError(f"{name(option).replace('_', '-')} applies to {where}")
