"""The small public Python API; the CLI is a thin layer over it.

    import dnnplace
    w = dnnplace.load_workload("bert24_inference.json")
    sol = dnnplace.solve(w, method="dp")
    print(sol.evaluation.max_load, sol.split.accelerators)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dnnplace.errors import DnnplaceError
from dnnplace.evaluate import Evaluation, evaluate
from dnnplace.model.split import Split
from dnnplace.model.validate import check_feasibility
from dnnplace.model.workload import Workload
from dnnplace.solvers.base import OBJECTIVES, SolveOptions, registry


@dataclass(frozen=True)
class Solution:
    """A solved placement: the split (with metadata) and the evaluator's verdict."""

    split: Split
    evaluation: Evaluation
    method: str
    objective: str
    value: float  # the evaluator's value of the objective for this split
    status: str
    bound: float | None
    gap: float | None
    runtime_s: float
    stats: dict[str, Any] = field(default_factory=dict)


def objective_value(ev: Evaluation, objective: str) -> float:
    """The evaluator's number for an objective."""
    if objective == "latency":
        return ev.latency
    if objective == "fw+bw":
        return ev.fw_plus_bw
    return ev.max_load


def solve(
    workload: Workload,
    method: str = "dp",
    *,
    objective: str = "throughput",
    started: float | None = None,
    **options: Any,
) -> Solution:
    """Place ``workload`` with ``method``; the split is re-checked by the evaluator.

    ``started`` is a ``time.perf_counter()`` stamp taken before the workload was
    read, so that ``runtime_s`` covers reading, preparation and solving.
    """
    t0 = time.perf_counter() if started is None else started
    methods = registry()
    if method not in methods:
        raise DnnplaceError(f"unknown method '{method}'; choose one of: {', '.join(methods)}")
    if objective not in OBJECTIVES:
        raise DnnplaceError(f"unknown objective '{objective}'; choose one of: {', '.join(OBJECTIVES)}")
    solver = methods[method]
    if objective not in solver.objectives:
        raise DnnplaceError(
            f"method '{method}' does not optimise '{objective}'; it supports: {', '.join(solver.objectives)}"
        )
    if objective == "latency":
        # the latency model has as many CPU cores as it needs; maxCPUs does not bind
        workload = workload.with_budget(cpus=max(workload.max_cpus, workload.n))
    check_feasibility(workload)
    opts = SolveOptions(objective=objective, **options)
    out = solver.solve(workload, opts)
    ev = evaluate(workload, out.split, overlap_comm=opts.overlap_comm, complete=False)
    value = objective_value(ev, objective)
    bound = out.bound
    if bound is not None and out.status == "optimal":
        bound = min(bound, value)  # the evaluator's exact sum is the optimum's value
    gap = None
    if bound is not None and np.isfinite(value) and value > 0:
        gap = max(0.0, (value - bound) / value)
    runtime = time.perf_counter() - t0
    meta: dict[str, Any] = {
        "method": method,
        "objective": objective,
        "objectiveValue": value,
        "status": out.status,
        "feasible": ev.feasible,
        "runtime_s": round(runtime, 6),
    }
    if objective == "latency":
        meta["totalLatency"] = value
    if bound is not None:
        meta["bound"] = bound
        meta["gap"] = gap
    if opts.overlap_comm:
        meta["overlapComm"] = True
    split = out.split.with_meta(**meta)
    return Solution(split, ev, method, objective, value, out.status, bound, gap, runtime, dict(out.stats))
