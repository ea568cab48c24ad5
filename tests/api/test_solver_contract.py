"""Every registered method keeps the solver contract on the same small workloads.

A feasible split whose reported value is the evaluator's; a bound, when given,
below the value; its own parameters accepted, unknown ones refused by name; and
the registry, the CLI and ``dnnplace.methods`` agree on the list.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import dnnplace
from dnnplace.api.methods import METHODS, ROUTES, Solver, get_solver_class, make_solver, methods_for, resolve_method
from dnnplace.cli.app import app
from dnnplace.errors import DnnplaceError


def _workloads() -> list[dnnplace.Workload]:
    """A chain, a diamond with a skip, and a training graph: small enough for every method."""
    rec = dnnplace.workload_from_records
    chain = rec([{"id": i, "fpgaLatency": 1.0 + i, "cpuLatency": 3.0 + i, "size": 1.0} for i in range(5)],
                [(i, i + 1, 0.5) for i in range(4)], accelerators=2, cpus=1, memory=10.0)
    diamond = rec([{"id": i, "fpgaLatency": t, "cpuLatency": 2 * t, "size": 1.0}
                   for i, t in enumerate([1.0, 2.0, 3.0, 1.5, 2.5])],
                  [(0, 1, 0.2), (0, 2, 0.2), (1, 3, 0.3), (2, 3, 0.1), (3, 4, 0.4), (0, 4, 0.2)],
                  accelerators=3, cpus=1, memory=10.0)
    fw = [{"id": i, "fpgaLatency": 1.0 + i, "cpuLatency": 4.0, "size": 1.0, "colorClass": i} for i in range(3)]
    bw = [{"id": 3 + i, "fpgaLatency": 2.0, "cpuLatency": 8.0, "size": 0.0, "colorClass": i,
           "isBackwardNode": True} for i in range(3)]
    training = rec(fw + bw, [(0, 1, 0.5), (1, 2, 0.5), (2, 5, 0.5), (5, 4, 0.5), (4, 3, 0.5)],
                   accelerators=2, cpus=1, memory=10.0)
    return [chain, diamond, training]


WORKLOADS = _workloads()


PAPER_METHODS = list(methods_for("paper"))


@pytest.mark.parametrize("name", PAPER_METHODS)
@pytest.mark.parametrize("index", range(len(WORKLOADS)))
def test_every_method_keeps_the_contract(name, index):
    w = WORKLOADS[index]
    cls = get_solver_class(name)
    assert issubclass(cls, Solver) and cls.name == name and cls.summary and cls.objectives
    for objective in cls.objectives:
        sol = dnnplace.solve(w, name, objective=objective, time_limit=30.0)
        ev = dnnplace.evaluate(w, sol.split)
        placed = sorted(v for dev in sol.split.accelerators + sol.split.cpus for v in dev)
        assert placed == sorted(int(v) for v in w.node_ids)
        assert sol.value == pytest.approx(ev.value(objective), rel=1e-12, abs=1e-12)
        assert sol.split.meta["objectiveValue"] == sol.value and sol.split.meta["method"] == name
        if sol.status != "heuristic":
            assert sol.evaluation.feasible
        if sol.bound is not None:
            assert sol.bound <= sol.value * (1 + 1e-9) + 1e-12
        if sol.status == "optimal" and sol.gap is not None:  # issue 22 item 5: every method
            assert sol.gap <= 1e-9, (name, sol.gap)


@pytest.mark.parametrize("name", list(METHODS))
def test_parameters_are_declared_validated_and_round_trip(name):
    cls = get_solver_class(name)
    solver = cls()
    params = solver.get_params()
    assert tuple(params) == cls.param_names() and set(cls.param_docs()) == set(params)
    assert all(cls.param_docs().values())
    assert solver.set_params(**params) is solver and solver.get_params() == params
    with pytest.raises(DnnplaceError, match=f"method '{name}' does not take bogus; its parameters: "):
        make_solver(name, bogus=1)
    with pytest.raises(DnnplaceError, match="does not take bogus"):
        dnnplace.solve(WORKLOADS[0], name, objective=cls.objectives[0], bogus=1)


def test_parameter_values_are_checked():
    with pytest.raises(DnnplaceError, match="max_ideals must be at least 1"):
        make_solver("dp", max_ideals=0)
    with pytest.raises(DnnplaceError, match="gap must be float"):
        make_solver("dp", gap="small")
    with pytest.raises(DnnplaceError, match="restarts must be int"):
        make_solver("local-search", restarts=2.5)
    with pytest.raises(DnnplaceError, match="linearize must be bool"):
        make_solver("dp").set_params(linearize=1)
    assert make_solver("ip", threads=None).threads is None


def test_a_configured_instance_can_be_passed():
    w = WORKLOADS[1]
    exact = dnnplace.solve(w, make_solver("dp", gap=0.0))
    assert exact.status == "optimal" and exact.method == "dp"
    assert dnnplace.solve(w, make_solver("dp"), max_ideals=10_000).value == exact.value


def test_routes_and_unknown_names():
    assert resolve_method("ip", "latency") == "ip-latency" and ("ip", "latency") in ROUTES
    with pytest.raises(DnnplaceError, match="unknown method 'nope'; choose one of: dp, ip"):
        get_solver_class("nope")
    with pytest.raises(DnnplaceError, match="does not optimise 'latency'"):
        dnnplace.solve(WORKLOADS[0], "dp", objective="latency")
    with pytest.raises(DnnplaceError, match="unknown objective"):
        dnnplace.solve(WORKLOADS[0], "dp", objective="speed")


def test_the_cli_lists_exactly_the_registry():
    out = CliRunner().invoke(app, ["methods"]).output
    for name in METHODS:
        assert name in out
    assert list(dnnplace.methods()) == list(METHODS)


def test_the_cli_refuses_a_flag_the_method_does_not_take(tmp_path):
    from dnnplace.models.paper.paper_json import save_workload

    path = tmp_path / "w.json"
    save_workload(WORKLOADS[0], path)
    res = CliRunner().invoke(app, ["solve", str(path), "--method", "local-search", "--max-ideals", "10"])
    assert res.exit_code == 2
    assert "--method local-search does not take --max-ideals; it takes: --seed, --restarts" in res.output
    res = CliRunner().invoke(app, ["solve", str(path), "--method", "local-search", "--restarts", "2", "--json"])
    assert res.exit_code == 0, res.output


def test_every_model_has_methods_and_the_piper_method_keeps_the_contract():
    from dnnplace.api.models import MODELS

    for name, model in MODELS.items():
        assert methods_for(name) and model.default_method in methods_for(name)
    inst = dnnplace.load(dnnplace.example_path("toy_a_knapsack"))
    sol = dnnplace.solve(inst, time_limit=30.0)
    ev = dnnplace.evaluate(inst, sol.plan)
    assert sol.method == "piper" and sol.status == "optimal" and sol.value == ev.tps == 5.0
    assert sol.bound == sol.value and sol.gap == 0.0 and sol.plan.meta["objectiveValue"] == sol.value
    with pytest.raises(DnnplaceError, match="plans a workload in the paper's format, not a Piper workload"):
        dnnplace.solve(inst, "dp")
    with pytest.raises(DnnplaceError, match="plans a Piper workload"):
        dnnplace.solve(WORKLOADS[0], "piper")
    with pytest.raises(DnnplaceError, match="not a split"):
        _ = sol.split


def test_each_parameter_is_one_generated_flag():
    from dnnplace.cli.options import solver_flags

    flags = solver_flags()
    text = " ".join(CliRunner().invoke(app, ["solve", "--help"], env={"COLUMNS": "200"}).output.split())
    for name, cls in dnnplace.methods().items():
        for p in cls.param_names():
            assert flags[p].flag in text, (name, p)
    assert flags["contiguous_cpus"].flag == "--no-contiguous-cpus" and flags["max_ideals"].flag == "--max-ideals"
