"""Placement methods behind one interface, and the one table that names them.

Adding a method is one new module with a :class:`~dnnplace.core.solver.Solver`
subclass plus one line in :data:`METHODS`.  The table maps each name to
``"module:Class"`` so that listing methods imports nothing heavy (HiGHS, numba,
networkx load only when a method is used); the CLI, ``compare`` and
:func:`dnnplace.solve` all read it.
"""

from __future__ import annotations

import importlib
from typing import Any

from dnnplace.core.solver import OBJECTIVES, RunContext, Solver, SolverOutput
from dnnplace.errors import DnnplaceError

__all__ = ["METHODS", "OBJECTIVES", "RunContext", "Solver", "SolverOutput", "get_solver_class", "make_solver",
           "methods", "methods_for", "resolve_method"]

#: Method name -> ``"module:Class"``, in display order.
METHODS: dict[str, str] = {
    "dp": "dnnplace.models.paper.solvers.dp_ip:DPThenIP",
    "ip": "dnnplace.models.paper.solvers.ip.throughput:ContiguousIP",
    "ip-noncontig": "dnnplace.models.paper.solvers.ip.throughput:NonContiguousIP",
    "ip-latency": "dnnplace.models.paper.solvers.ip.latency:LatencyIP",
    "single": "dnnplace.models.paper.solvers.baselines.single:SingleAccelerator",
    "local-search": "dnnplace.models.paper.solvers.baselines.local_search:LocalSearch",
    "pipedream": "dnnplace.models.paper.solvers.baselines.pipedream:PipeDream",
    "scotch": "dnnplace.models.paper.solvers.baselines.partitioners:Scotch",
    "metis": "dnnplace.models.paper.solvers.baselines.partitioners:Metis",
    "greedy": "dnnplace.models.paper.solvers.baselines.greedy:GreedyLatency",
    "piper": "dnnplace.models.piper.solvers.method:PiperPlanner",
    "llm-search": "dnnplace.models.llm.solvers.method:LLMSearch",
    "serving-search": "dnnplace.models.serving.method:ServingSearch",
}

#: ``(method, objective)`` pairs answered by another method: the paper's "IP" for latency is its latency IP.
ROUTES: dict[tuple[str, str], str] = {("ip", "latency"): "ip-latency"}


def get_solver_class(name: str) -> type[Solver]:
    """The class registered under ``name`` (an unknown name is an error listing the known ones)."""
    target = METHODS.get(name)
    if target is None:
        raise DnnplaceError(f"unknown method '{name}'; choose one of: {', '.join(METHODS)}")
    module, _, cls = target.partition(":")
    found = getattr(importlib.import_module(module), cls)
    assert issubclass(found, Solver) and found.name == name, target
    return found


def methods() -> dict[str, type[Solver]]:
    """Every registered method, name -> class, in display order."""
    return {name: get_solver_class(name) for name in METHODS}


def resolve_method(name: str, objective: str) -> str:
    """The method that answers ``name`` for ``objective`` (see :data:`ROUTES`), checked against both tables."""
    if objective not in OBJECTIVES:
        raise DnnplaceError(f"unknown objective '{objective}'; choose one of: {', '.join(OBJECTIVES)}")
    routed = ROUTES.get((name, objective), name)
    cls = get_solver_class(routed)
    if objective not in cls.objectives:
        supported = sorted(set(cls.objectives) | {obj for (m, obj) in ROUTES if m == name})
        raise DnnplaceError(f"method '{name}' does not optimise '{objective}'; it supports: {', '.join(supported)}")
    return routed


def methods_for(model: str) -> dict[str, type[Solver]]:
    """The methods that plan instances of ``model`` (``"paper"``, ``"piper"`` or ``"llm"``), in display order."""
    return {name: cls for name, cls in methods().items() if cls.model == model}


def make_solver(name: str, **params: Any) -> Solver:
    """An instance of method ``name`` with ``params`` (unknown names are an error naming the valid ones)."""
    cls = get_solver_class(name)
    cls.check_names(params)
    return cls(**params)
