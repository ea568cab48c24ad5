"""Validation once at the public API: a bad argument is one DnnplaceError naming it, before any work."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_cli

import dnnplace
from dnnplace.errors import DnnplaceError, ParamError
from dnnplace.utils import params as P

GOOD = {
    "maxSizePerFPGA": 10.0, "maxFPGAs": 2, "maxCPUs": 1,
    "nodes": [{"id": i, "name": n, "fpgaLatency": 1.0 + i, "cpuLatency": 5.0, "supportedOnFpga": 1,
               "isBackwardNode": 0, "size": 1.0} for i, n in ((1, "a"), (2, "b"), (3, "c"))],
    "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5}, {"sourceId": 2, "destId": 3, "cost": 0.5}],
}
LLAMA = Path(__file__).resolve().parents[2] / "examples" / "llm" / "llama3.1-8b.json"


@pytest.fixture
def workload(tmp_path):
    import json

    p = tmp_path / "w.json"
    p.write_text(json.dumps(GOOD))
    return dnnplace.load(p)


# ------------------------------------------------------------------ the vocabulary
def test_each_constraint_accepts_and_normalises():
    assert P.real(0).check("x", np.float32(2.5)) == 2.5 and type(P.real(0).check("x", 2)) is float
    assert P.integer(1, 3).check("x", np.int64(2)) == 2 and type(P.integer(1, 3).check("x", np.int64(2))) is int
    assert P.seconds().check("t", math.inf) is None and P.seconds().check("t", None) is None
    assert P.seconds().check("t", 5) == 5.0
    assert P.boolean().check("b", np.bool_(True)) is True
    assert P.choice("a", "b").check("c", "b") == "b"
    assert P.path_like().check("p", Path("x")) == Path("x")
    assert P.optional(P.integer()).check("x", None) is None
    assert P.any_of(P.integer(), P.text()).check("x", "s") == "s"
    assert P.paths().check("inputs", (p for p in ["a", None, Path("b")])) == ("a", None, Path("b"))


@pytest.mark.parametrize("constraint,value", [
    (P.real(), math.nan), (P.real(), math.inf), (P.real(), "1"), (P.real(), True), (P.real(0, 1), 2.0),
    (P.real(0, lo_open=True), 0.0), (P.integer(), 2.0), (P.integer(), True), (P.integer(1), 0),
    (P.seconds(), math.nan), (P.seconds(), -1), (P.seconds(), 0), (P.seconds(), "5"), (P.seconds(), -math.inf),
    (P.seconds(), 1e12), (P.seconds(), True), (P.boolean(), 1), (P.boolean(), "yes"), (P.choice("a"), "b"),
    (P.choice("a"), None), (P.text(), ""), (P.text(3), "abcd"), (P.text(), 5), (P.path_like(), {"a": 1}),
    (P.path_like(), b"x"), (P.path_like(), ""), (P.path_like(), "a\0b"), (P.function(), 5),
    (P.optional(P.integer()), "x"),
])
def test_each_constraint_refuses_with_the_parameter_named(constraint, value):
    with pytest.raises(ParamError, match=r"^f: p must be .*, got ") as exc:
        constraint.check("p", value, where="f")
    assert exc.value.param == "p" and "\n" not in str(exc.value)
    assert exc.value.worded("--p").startswith("--p must be ")


def test_a_huge_or_hostile_value_is_shown_short():
    with pytest.raises(ParamError) as exc:
        P.integer(0, 10).check("n", 10**400)
    assert "digits" in str(exc.value) and len(str(exc.value)) < 200
    with pytest.raises(ParamError) as exc:
        P.text(3).check("name", "x" * 10_000 + "\x1b[31m")
    assert len(str(exc.value)) < 200


def test_the_decorator_checks_what_was_passed_and_refuses_wrong_calls():
    calls = []

    @P.validate_params(n=P.integer(1), t=P.seconds())
    def f(n: int = 3, *, t: float | None = None) -> tuple:
        calls.append((n, t))
        return n, t

    assert f() == (3, None) and f(np.int64(2), t=math.inf) == (2, None)
    with pytest.raises(ParamError, match="f: n must be a whole number >= 1, got 0"):
        f(0)
    with pytest.raises(DnnplaceError, match="f: got an unexpected keyword argument 'm'"):
        f(m=1)
    assert len(calls) == 2 and f.__param_constraints__.keys() == {"n", "t"}
    with pytest.raises(TypeError):
        P.validate_params(nope=P.integer())(f.__wrapped__)


# ------------------------------------------------------------------ the public API
@pytest.mark.parametrize("time_limit", [math.nan, -1, 0, "5", -math.inf, 1e300, True, [5]])
def test_solve_refuses_a_bad_time_limit_before_any_work(workload, time_limit, monkeypatch):
    import dnnplace.api.planning as solve_module

    def no_work(*a, **k):
        raise AssertionError("the method was built before the arguments were checked")

    monkeypatch.setattr(solve_module, "make_solver", no_work)
    with pytest.raises(ParamError, match=r"^solve: time_limit must be a number of seconds > 0") as exc:
        dnnplace.solve(workload, time_limit=time_limit)
    assert exc.value.param == "time_limit"


def test_solve_takes_inf_and_none_as_no_limit(workload):
    assert dnnplace.solve(workload, time_limit=math.inf).status == "optimal"
    assert dnnplace.solve(workload, time_limit=None).status == "optimal"


@pytest.mark.parametrize("call,param", [
    (lambda w: dnnplace.solve(w, progress=5), "progress"),
    (lambda w: dnnplace.solve(w, overlap_comm="yes"), "overlap_comm"),
    (lambda w: dnnplace.solve(w, method=5), "method"),
    (lambda w: dnnplace.load({"nodes": []}), "path"),
    (lambda w: dnnplace.load(None), "path"),
    (lambda w: dnnplace.load_workload(3), "path"),
    (lambda w: dnnplace.load_plan(w, {"fpgas": []}), "path"),
    (lambda w: dnnplace.save_plan(w, dnnplace.solve(w).plan, {"x": 1}), "path"),
    (lambda w: dnnplace.save_plan(w, dnnplace.solve(w).plan, "p.json", inputs=5), "inputs"),
    (lambda w: dnnplace.save_plan(w, dnnplace.solve(w).plan, "p.json", inputs="w.json"), "inputs"),
    (lambda w: dnnplace.save_workload(w, "x.json", inputs=[{"a": 1}]), "inputs"),
    (lambda w: dnnplace.with_budget(w, accelerators=2.5), "accelerators"),
    (lambda w: dnnplace.with_budget(w, memory=math.nan), "memory"),
    (lambda w: dnnplace.with_budget(w, cpus=-1), "cpus"),
    (lambda w: dnnplace.simulate(w, dnnplace.solve(w).plan, microbatches=0), "microbatches"),
    (lambda w: dnnplace.simulate(w, dnnplace.solve(w).plan, schedule="zigzag"), "schedule"),
    (lambda w: dnnplace.write_report(w, dnnplace.solve(w).plan, {"a": 1}), "path"),
    (lambda w: dnnplace.info(w, max_ideals=0), "max_ideals"),
    (lambda w: dnnplace.load_llm(LLAMA, gpus=8, seq_len=4096, global_batch=8, device=None), "device"),
    (lambda w: dnnplace.load_llm(LLAMA, gpus=8.0, seq_len=4096, global_batch=8), "gpus"),
    (lambda w: dnnplace.load_llm(LLAMA, gpus=8, seq_len=4096, global_batch=8, precision="fp3"), "precision"),
    (lambda w: dnnplace.load_llm({"hidden_size": 1}, gpus=8, seq_len=4096, global_batch=8), "model"),
    (lambda w: dnnplace.export_llm_plan({"a": 1}, "megatron"), "path"),
    (lambda w: dnnplace.run("m.py:f", {"fpgas": []}), "split"),
    (lambda w: dnnplace.profile("m.py:f", device=None), "device"),
    (lambda w: dnnplace.profile(5), "model"),
    (lambda w: dnnplace.profile("m.py:f", kwargs=[1]), "kwargs"),
    (lambda w: dnnplace.profile("m.py:f", repeats=10**12), "repeats"),
])
def test_every_public_function_names_its_bad_argument(workload, call, param):
    with pytest.raises(ParamError) as exc:
        call(workload)
    assert exc.value.param == param


def test_the_cli_words_the_same_rule_with_its_flags(tmp_path):
    import json

    (tmp_path / "w.json").write_text(json.dumps(GOOD))
    for command in (["solve", "w.json"], ["compare", "w.json"]):
        res = run_cli(*command, "--time-limit", "nan", cwd=tmp_path)
        assert res.returncode == 2 and res.stderr.startswith("error: --time-limit must be a number of seconds > 0")
    res = run_cli("info", "w.json", "--max-ideals", "0", cwd=tmp_path)  # the API's rule, not the parser's
    assert res.returncode == 2 and "error: --max-ideals must be a whole number >= 1" in res.stderr


def test_every_public_function_declares_its_arguments():
    import inspect

    import dnnplace.api

    undeclared = []
    for name in dnnplace.api.__all__:
        fn = getattr(dnnplace.api, name)
        if not inspect.isfunction(fn) or name in ("methods",):
            continue
        declared = getattr(fn, "__param_constraints__", None)
        if declared is None:
            undeclared.append(name)
    # these take only instances and plans, which their model's registry entry checks
    assert set(undeclared) <= {"default_method", "plan_document"}, undeclared
