"""``--time-limit`` bounds the whole solve (building the IP included); ``inf`` means no limit."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hostile import DATA, GNMT, invoke

import dnnplace
from dnnplace.errors import DnnplaceError


@pytest.mark.timing
def test_time_limit_bounds_a_piper_solve(tmp_path):
    gnmt = Path(dnnplace.__file__).parent / "data" / "piper" / "inputs" / "gnmt.json"
    code, out, err = invoke("solve", gnmt, "-k", "8", "--memory", str(1.2 * 2**30), "--time-limit", "0.3",
                            "-o", tmp_path / "plan.json", "-q")
    if code == 2:  # stopped before any plan: one line, nothing written
        assert "time limit" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "plan.json").exists()
        return
    assert code == 0, err
    doc = json.loads((tmp_path / "plan.json").read_text())
    # the solve takes over a second here: 0.3 s stops it with the best plan so far
    assert doc["status"] == "time_limit" and doc["bound"] < doc["timePerSample"] and doc["gap"] > 0


def test_time_limit_covers_building_the_latency_ip():

    big = DATA / "paper" / "latency-inputs" / "OperatorGraphs" / "bert_l-12_inference.json"
    t0 = time.perf_counter()
    code, out, err = invoke("solve", big, "-m", "ip-latency", "--objective", "latency",
                            "--subgraphs-per-accelerator", "64", "--time-limit", "3", "--json")
    took = time.perf_counter() - t0
    assert code == 0, err
    assert json.loads(out)["status"] == "time_limit"
    assert took < 3 + 10, took  # reading, the warm start's evaluation, HiGHS winding down


def test_deadline_while_building_returns_the_warm_start(monkeypatch):
    from dnnplace.models.paper.solvers.ip import builder

    w = dnnplace.load(GNMT)

    def late(self) -> None:  # as if the deadline passed while the model was being built
        raise builder.BuildTimeout("the time limit ran out while building the IP model; raise --time-limit")

    monkeypatch.setattr(builder.MipBuilder, "_tick", late)
    for method, objective in (("ip", "throughput"), ("ip-noncontig", "throughput"), ("ip-latency", "latency")):
        sol = dnnplace.solve(w, method, objective=objective, time_limit=30)
        assert sol.status == "time_limit" and sol.evaluation.feasible, method


def test_builder_checks_the_clock():

    from dnnplace.models.paper.solvers.ip.builder import MipBuilder

    m = MipBuilder(deadline=time.perf_counter() - 1)
    with pytest.raises(DnnplaceError, match="time limit ran out while building"):
        for _ in range(5000):
            m.row([0], [1.0], hi=1.0)


def test_time_limit_inf_means_no_limit(paper):
    w, _ = paper
    code, out, err = invoke("solve", w, "-m", "ip", "--time-limit", "inf", "--json")
    assert code == 0 and json.loads(out)["status"] == "optimal", err
    code, out, err = invoke("compare", w, "--methods", "ip,single", "--time-limit", "inf", "--format", "json")
    assert code == 0 and json.loads(out)[0]["status"] == "optimal", err
