"""The run says when the machine was loaded (issue 22 item 15): other tenants, steal, stages per core."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # spawns worker processes or profiles real models

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402

from dnnplace.runtime.machine import cpu_counters, machine_load  # noqa: E402


def test_counters_tick():
    a = cpu_counters()
    assert a is not None and a[1] > 0 and a[2] >= 0


def test_quiet_and_loaded(monkeypatch):
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    # 10 s timed; the two stages used 2 cores, the launcher 0.01, the machine 2.05 in all: quiet
    quiet = machine_load((0.0, 0.0, 0.0), (10.0, 20.5, 0.0), 20.0, 0.1, stages=2)
    assert not quiet["loaded"] and quiet["other_cores"] == pytest.approx(0.04) and "quiet" in quiet["note"]
    # the machine did 4.9 cores of work: 2.8 of other tenants', more than the 2 cores the stages leave free
    busy = machine_load((0.0, 0.0, 0.0), (10.0, 49.0, 0.0), 20.0, 0.1, stages=2)
    assert busy["loaded"] and busy["other_cores"] == pytest.approx(2.89)
    assert "other processes used 2.89 cores" in busy["note"] and "bottleneck" in busy["note"]
    # steal
    stolen = machine_load((0.0, 0.0, 0.0), (10.0, 20.5, 4.0), 20.0, 0.1, stages=2)
    assert stolen["loaded"] and "steal" in stolen["note"]
    # more stages than cores
    crowded = machine_load((0.0, 0.0, 0.0), (10.0, 40.0, 0.0), 40.0, 0.0, stages=5)
    assert crowded["loaded"] and "5 stage processes share 4 cores" in crowded["note"]
    # no counters: said so
    none = machine_load(None, None, 0.0, 0.0, stages=2)
    assert not none["loaded"] and "not readable" in none["note"]


def test_a_training_run_reports_the_machine(monkeypatch):
    from dnnplace.models.paper.split import Split
    from dnnplace.runtime.launch import run_training

    monkeypatch.chdir(ROOT)
    res = run_training("examples/mlp_skip.py:build", Split.of([list(range(0, 5)), list(range(5, 12))]),
                       microbatches=4, steps=2, timeout_s=300)
    m = res["machine"]
    assert m["stages"] == 2 and m["timed_s"] > 0 and m["stages_cores"] > 0
    assert isinstance(m["loaded"], bool) and m["note"]
    assert all(0 < s["measured_compute_cpu_ms"] <= s["measured_cpu_ms"] * 1.05 for s in res["stages"])


def test_a_forward_run_reports_the_machine(monkeypatch):
    from dnnplace.models.paper.split import Split
    from dnnplace.runtime.launch import run_pipeline

    monkeypatch.chdir(ROOT)
    res = run_pipeline("examples/mlp_skip.py:build", Split.of([list(range(0, 5)), list(range(5, 12))]),
                       microbatches=4, timeout_s=300)
    assert res["outputs_match"]
    m = res["machine"]
    assert m["stages"] == 2 and m["timed_s"] > 0 and isinstance(m["loaded"], bool) and m["note"]
