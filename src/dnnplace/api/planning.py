"""Planning: the registered methods and :func:`solve`, which runs one and has its plan re-checked.

Whatever the method, the plan is judged by its model's evaluator and what the method proved (its
bound) is turned into one status and gap here, so every method reports the same way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dnnplace.api.methods import RunContext, Solver, make_solver, resolve_method
from dnnplace.api.methods import methods as _methods
from dnnplace.api.models import MODELS, Instance, Proof, check_declared, model_of, model_of_plan
from dnnplace.core.solver import ProgressFn
from dnnplace.errors import DnnplaceError
from dnnplace.models.paper.split import Split
from dnnplace.utils.params import (
    any_of,
    boolean,
    function,
    instance_of,
    optional,
    real,
    seconds,
    text,
    validate_params,
)

__all__ = ["OPTIMAL_GAP", "SOLVER_TOLERANCE", "Solution", "default_method", "methods", "solve", "with_runtime"]

OPTIMAL_GAP = 1e-9  # a solution is "optimal" only when its relative gap to the proven bound is at most this
SOLVER_TOLERANCE = 1e-6  # a solver's own "gap zero" differs from the evaluator's exact sums by at most this


@dataclass(frozen=True)
class Solution:
    """A solved instance: the plan (with its metadata) and the evaluator's verdict on it.

    ``plan`` is a :class:`~dnnplace.Split` for the paper's model, a Piper plan for Piper's
    (``split`` is its name in the paper's model).  ``value`` is the evaluator's value of the
    objective; ``status`` says what was proven (``optimal``, ``bounded``: within ``gap`` of
    the proven ``bound``, ``time_limit``, ``feasible``, ``heuristic``).
    """

    plan: Any
    evaluation: Any  # an Evaluation, or a PiperEvaluation
    method: str
    objective: str
    value: float
    status: str
    bound: float | None
    gap: float | None
    runtime_s: float
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def proof(self) -> Proof:
        """What was proven, typed and the same for every model (the plan carries it too: :func:`proof_of`)."""
        return Proof(self.status, self.bound, self.gap, self.runtime_s)

    @property
    def split(self) -> Split:
        """The plan of a paper workload: which accelerator or CPU core runs each node."""
        if model_of_plan(self.plan).name != "paper":
            raise DnnplaceError(f"this solution holds a {type(self.plan).__name__}, not a split; use .plan")
        return self.plan


def methods() -> dict[str, type[Solver]]:
    """The registered placement methods, name -> solver class.

    Each class carries ``objectives``, a one-line ``summary`` and its own
    parameters (:meth:`~dnnplace.api.methods.Solver.param_names`).

    Examples
    --------
    >>> import dnnplace
    >>> list(dnnplace.methods())[:3]
    ['dp', 'ip', 'ip-noncontig']
    >>> dnnplace.methods()["local-search"].param_names()
    ('seed', 'restarts')
    """
    return _methods()


@validate_params(method=optional(any_of(text(100), instance_of(Solver, what="a Solver"))),
                 time_limit=seconds(), overlap_comm=boolean(),
                 progress=optional(function()))
def solve(
    workload: Instance,
    method: str | Solver | None = None,
    *,
    objective: str = "throughput",
    time_limit: float | None = None,
    overlap_comm: bool = False,
    progress: ProgressFn | None = None,
    **params: Any,
) -> Solution:
    """Plan ``workload`` with a method; the plan is re-checked by its model's evaluator.

    Parameters
    ----------
    workload : Workload or PiperInstance
    method : str or Solver, optional
        A name from :func:`methods` (one that plans this model) or a configured solver
        instance; by default ``dp`` for the paper's workloads, ``piper`` for Piper's.
    objective : {"throughput", "latency", "fw+bw"}
        Max-load (pipeline throughput), single-sample latency, or max forward + max backward load.
    time_limit : float, optional
        Seconds (> 0; ``None`` or ``inf``: no limit); the best split found so far is returned with
        ``status`` ``time_limit``.
    overlap_comm : bool, default False
        Accelerator load = max(compute, communication) instead of their sum.
    progress : callable, optional
        ``progress(done, total, description)``, called now and then.
    **params
        The method's own parameters (e.g. ``max_ideals`` and ``gap`` for ``dp``);
        one it does not take is an error naming those it does.

    Returns
    -------
    Solution

    Examples
    --------
    >>> import dnnplace
    >>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    >>> sol = dnnplace.solve(w)
    >>> sol.status, round(sol.value, 3), len(sol.split.accelerators)
    ('optimal', 107.004, 6)
    >>> dnnplace.solve(w, "local-search", max_ideals=10)
    Traceback (most recent call last):
    ...
    dnnplace.errors.DnnplaceError: method 'local-search' does not take max_ideals; its parameters: seed, restarts
    >>> dnnplace.solve(dnnplace.load(dnnplace.example_path("toy_a_knapsack"))).value
    5.0
    """
    model = model_of(workload)
    if method is None:
        method = model.default_method
    if isinstance(method, Solver):
        if resolve_method(method.name, objective) != method.name:
            raise DnnplaceError(f"method '{method.name}' does not optimise '{objective}'")
        method.check_names(params)
        solver = type(method)(**{**method.get_params(), **params})
    else:
        name = resolve_method(method, objective)
        solver = make_solver(name, **params)  # unknown parameters: an error naming the valid ones
    if solver.model != model.name:
        others = ", ".join(n for n, c in _methods().items() if c.model == model.name)
        raise DnnplaceError(f"method '{solver.name}' plans {MODELS[solver.model].describe}, not"
                            f" {model.describe}; methods for it: {others}")
    check_declared(model, "solve_options", {"overlap_comm": overlap_comm or None})
    workload = model.for_objective(workload, objective)
    solver.warm_up()  # loading compiled code is start-up cost, not solving time
    t0 = time.perf_counter()
    model.check_solvable(workload)
    out = solver.solve(workload, RunContext(objective=objective, time_limit=time_limit, overlap_comm=overlap_comm,
                                            progress=progress))
    if model.judge_solution is not None:
        ev = model.judge_solution(workload, out.plan, overlap_comm)
    else:
        ev = model.evaluate(workload, out.plan)
    value = ev.value(objective)
    bound = out.bound
    if bound is not None and not np.isfinite(bound):
        bound = None  # e.g. HiGHS stopped before its root LP: nothing was proven
    if bound is not None and out.status == "optimal":
        bound = min(bound, value)  # the evaluator's exact sum is the optimum's value
        if np.isfinite(value) and value - bound <= SOLVER_TOLERANCE * max(abs(value), 1.0):
            # the solver proved a zero gap on its own numbers (HiGHS's feasibility tolerance is 1e-6
            # absolute): the evaluator's exact value is the optimum
            bound = value
    gap = None
    if bound is not None and np.isfinite(value) and value > 0:
        gap = max(0.0, (value - bound) / value)
    status = out.status
    if status == "optimal" and gap is not None and gap > OPTIMAL_GAP:
        status = "bounded"  # "optimal" within a tolerance is not optimal: say what was proven
    runtime = time.perf_counter() - t0
    meta: dict[str, Any] = {"method": solver.name if isinstance(method, Solver) else method,
                            "objective": objective, "objectiveValue": value, "status": status,
                            "feasible": ev.feasible, "runtime_s": round(runtime, 6)}
    if objective == "latency":
        meta["totalLatency"] = value
    if bound is not None:
        meta["bound"] = bound
        meta["gap"] = gap
    if overlap_comm:
        meta["overlapComm"] = True
    plan = model.with_proof(out.plan, meta)
    return Solution(plan, ev, meta["method"], objective, value, status, bound, gap, runtime, dict(out.stats))


def default_method(instance: Instance) -> str:
    """The method ``solve`` uses for ``instance`` when none is named (``dp``, or ``piper`` for Piper's model)."""
    return model_of(instance).default_method


@validate_params(runtime_s=real(0))
def with_runtime(solution: Solution, runtime_s: float) -> Solution:
    """The solution with its ``runtime_s`` (and the plan's) replaced: a command counts its reading time too."""
    from dataclasses import replace

    plan = model_of_plan(solution.plan).with_runtime(solution.plan, runtime_s)
    return replace(solution, plan=plan, runtime_s=runtime_s)


