"""The one small interface every placement method implements.

A solver is a dataclass whose fields are *its own* parameters (scikit-learn's
estimator convention): :meth:`Solver.get_params` lists them,
:meth:`Solver.set_params` changes them, and a parameter the method does not
take is an error that names the ones it does.  What every run has regardless of
the method (the objective, a time limit, the cost-model switch, a progress
callback) travels separately in a :class:`RunContext`.

A solver plans one *model* (``Solver.model``: ``"paper"`` for the paper's
workloads, ``"piper"`` for Piper's): it turns an instance of that model into a
:class:`SolverOutput` (a plan -- a :class:`~dnnplace.Split` or a Piper plan --
plus what it proved: status, bound).  It never computes the plan's cost itself:
the caller (:func:`dnnplace.solve`) asks that model's evaluator, so every method
is judged by the same cost model.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dnnplace.errors import DnnplaceError

__all__ = ["INTERRUPT_GRACE_S", "OBJECTIVES", "STATUSES", "ProgressFn", "RunContext", "Solver", "SolverOutput",
           "expired", "param"]

ProgressFn = Callable[[float, float, str], None]  # (done, total, description)

#: What a method can optimise: max-load (pipeline throughput), single-sample latency, max FW + max BW.
OBJECTIVES = ("throughput", "latency", "fw+bw")
#: What a solver may claim about its split.
STATUSES = ("optimal", "bounded", "feasible", "time_limit", "heuristic")


#: Seconds a solve interrupted by Ctrl-C gives a solver thread (HiGHS) to wind down before it re-raises: HiGHS
#: answers a cancel only between its steps, and one presolve step can take seconds, while the user asked to stop now.
INTERRUPT_GRACE_S = 0.3


def expired(deadline: float | None) -> bool:
    """Has ``deadline`` (``time.perf_counter()`` seconds; None: never) passed?  The one clock an algorithm reads."""
    return deadline is not None and time.perf_counter() > deadline


@dataclass(frozen=True)
class RunContext:
    """What every run has, whatever the method: objective, time limit, cost-model switch, progress."""

    objective: str = "throughput"
    time_limit: float | None = None  # seconds; None: no limit
    overlap_comm: bool = False  # accelerator load = max(compute, communication)
    progress: ProgressFn | None = None


@dataclass(frozen=True)
class SolverOutput:
    """A solver's answer before evaluation."""

    plan: Any  # a Split (paper model) or a PiperPlan (Piper's model)
    status: str = "optimal"  # one of STATUSES
    bound: float | None = None  # proven lower bound on the objective, if any
    stats: dict[str, Any] = field(default_factory=dict)


def param(default: Any, doc: str, *, minimum: float | None = None, maximum: float | None = None,
          choices: tuple[str, ...] | None = None) -> Any:
    """Declare a solver parameter once: its default, one line of help, and its range.

    The CLI's flag (``--max-ideals`` for ``max_ideals``; ``--no-X`` for a switch that is on by
    default), ``dnnplace methods`` and the checks of :meth:`Solver.set_params` all come from this.
    """
    return field(default=default, metadata={"doc": doc, "minimum": minimum, "maximum": maximum, "choices": choices})


_KINDS: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}


@dataclass
class Solver:
    """Base class of the placement methods; subclasses are dataclasses of their parameters.

    Subclasses set the class attributes ``name`` (the registry key),
    ``objectives``, ``summary`` and ``model`` (``"paper"`` by default), declare each parameter with :func:`param`,
    and implement :meth:`solve`.
    """

    name: ClassVar[str] = ""
    objectives: ClassVar[tuple[str, ...]] = ()
    summary: ClassVar[str] = ""
    model: ClassVar[str] = "paper"  # the model whose instances it plans: "paper" or "piper"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            self._check(f, getattr(self, f.name))

    # ------------------------------------------------------------ parameters
    @classmethod
    def param_names(cls) -> tuple[str, ...]:
        """The parameters this method takes."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def param_fields(cls) -> tuple[dataclasses.Field, ...]:
        """The parameters' declarations (type, default, doc, range), for generated interfaces."""
        return dataclasses.fields(cls)

    @classmethod
    def param_docs(cls) -> dict[str, str]:
        """One line of help per parameter (what ``dnnplace methods`` shows)."""
        return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(cls)}

    @classmethod
    def check_names(cls, names: Any) -> None:
        """Refuse parameter names this method does not take, naming the ones it does."""
        unknown = sorted(set(names) - set(cls.param_names()))
        if unknown:
            valid = ", ".join(cls.param_names()) or "none"
            raise DnnplaceError(f"method '{cls.name}' does not take {', '.join(unknown)}; its parameters: {valid}")

    def get_params(self) -> dict[str, Any]:
        """The method's parameters and their current values."""
        return {name: getattr(self, name) for name in self.param_names()}

    def set_params(self, **params: Any) -> Solver:
        """Change parameters (checked by name and type); returns ``self``."""
        self.check_names(params)
        fields = {f.name: f for f in dataclasses.fields(self)}
        for name, value in params.items():
            self._check(fields[name], value)
            setattr(self, name, value)
        return self

    def _check(self, f: dataclasses.Field, value: Any) -> None:
        kind = str(f.type).replace(" ", "")
        optional = kind.endswith("|None")
        kind = kind.removesuffix("|None")
        if value is None and optional:
            return
        allowed = _KINDS.get(kind)
        if allowed is not None and (not isinstance(value, allowed) or (kind != "bool" and isinstance(value, bool))):
            raise DnnplaceError(f"method '{self.name}': {f.name} must be {kind}, got {value!r}")
        choices = f.metadata.get("choices")
        if choices is not None and value not in choices:
            raise DnnplaceError(f"method '{self.name}': {f.name} must be one of {', '.join(choices)}, got {value!r}")
        if kind in ("int", "float") and not math.isfinite(value):
            raise DnnplaceError(f"method '{self.name}': {f.name} must be finite, got {value!r}")
        lo = f.metadata.get("minimum")
        if lo is not None and value < lo:
            raise DnnplaceError(f"method '{self.name}': {f.name} must be at least {lo}, got {value!r}")
        hi = f.metadata.get("maximum")
        if hi is not None and value > hi:
            raise DnnplaceError(f"method '{self.name}': {f.name} must be at most {hi}, got {value!r}")

    # ---------------------------------------------------------------- solving
    def warm_up(self) -> None:
        """Load compiled code before the clock starts (start-up cost, not solving time)."""

    def solve(self, workload: Any, run: RunContext) -> SolverOutput:
        """Plan ``workload`` (an instance of :attr:`model`); the caller checks the objective and evaluates."""
        raise NotImplementedError
