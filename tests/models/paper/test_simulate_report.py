"""Pipeline simulator, Chrome trace, and the HTML report (opened in headless Chromium)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from browser import dom_of, screenshot
from conftest import ROOT, THROUGHPUT, throughput_path

import dnnplace
from dnnplace.models.paper.simulation import simulate

DNNPLACE = [sys.executable, "-m", "dnnplace"]
DOCS = ROOT / "docs"


@pytest.mark.parametrize("key", [k for k in THROUGHPUT if "inception" not in k])
def test_time_per_sample_approaches_max_load(key):
    w = dnnplace.load_workload(throughput_path(key))
    sol = dnnplace.solve(w, "dp")
    sim = simulate(w, sol.split, schedule="1f1b", microbatches=256)
    assert sim.time_per_sample == pytest.approx(sol.value, rel=0.01)
    # including fill and drain, the time per sample falls towards the max-load as N grows
    spans = [simulate(w, sol.split, microbatches=n).makespan / n for n in (4, 16, 64)]
    assert spans[0] >= spans[1] >= spans[2] >= sol.value * (1 - 1e-9)
    if w.is_training:  # a flush per minibatch is never faster than 1F1B
        assert simulate(w, sol.split, schedule="gpipe", microbatches=64).time_per_sample >= sol.value - 1e-9


def test_trace_event_format(tmp_path):
    w = dnnplace.load_workload(throughput_path("LayerGraphs/gnmt_training"))
    sol = dnnplace.solve(w, "dp")
    trace = simulate(w, sol.split, microbatches=6).chrome_trace()
    json.dumps(trace)  # serialisable
    events = trace["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in spans} >= {"forward", "backward", "communication"}
    last_end: dict[tuple[int, int], float] = {}
    for e in events:
        assert {"ph", "pid", "tid", "name"} <= e.keys()
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0
            key = (e["pid"], e["tid"])
            assert e["ts"] >= last_end.get(key, 0.0) - 1e-6  # monotone, non-overlapping per track
            last_end[key] = e["ts"] + e["dur"]
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {d.name for d in sol.evaluation.devices if d.nodes}


def test_simulate_cli_json(tmp_path):
    w = throughput_path("LayerGraphs/bert24_training")
    split = tmp_path / "s.json"
    subprocess.run([*DNNPLACE, "solve", str(w), "-o", str(split), "-q"], check=True)
    trace = tmp_path / "t.json"
    proc = subprocess.run([*DNNPLACE, "simulate", str(w), str(split), "--schedule", "gpipe", "-n", "8",
                           "--trace", str(trace), "--json"], capture_output=True, text=True, check=True)
    doc = json.loads(proc.stdout)
    assert {"time_per_sample", "bubble_fraction", "devices"} <= doc.keys()
    assert 0 <= doc["bubble_fraction"] < 1
    assert json.loads(trace.read_text())["traceEvents"]


def test_cyclic_device_graph_is_a_clear_error(tmp_path):
    nodes = [{"id": i, "fpgaLatency": 1.0, "cpuLatency": 1.0} for i in range(1, 5)]
    w = dnnplace.workload_from_records(nodes, [(1, 2, 0.0), (3, 4, 0.0), (2, 3, 0.0)], accelerators=2, cpus=0)
    with pytest.raises(dnnplace.DnnplaceError, match="cycle"):
        simulate(w, dnnplace.Split.of([[1, 3], [2, 4]]))


def test_report_renders_in_headless_chromium(tmp_path):
    key = "LayerGraphs/resnet50_training"
    w = dnnplace.load_workload(throughput_path(key))
    split = tmp_path / "s.json"
    report = tmp_path / "report.html"
    subprocess.run([*DNNPLACE, "solve", str(throughput_path(key)), "-o", str(split), "-q", "--report",
                    str(report)], check=True)
    text = report.read_text()
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        'xmlns:xlink="http://www.w3.org/1999/xlink"', "").replace("http://www.w3.org/", "")
    dom = dom_of(report, tmp_path)
    assert 'class="graph"' in dom and 'class="timeline"' in dom and 'class="chart"' in dom
    assert dom.count("<rect") > 50
    shot = screenshot(report, tmp_path, 1280, 1700, 1000)
    if os.environ.get("DNNPLACE_UPDATE_SCREENSHOT"):  # the README's picture, refreshed only when asked
        shutil.copy(shot, DOCS / "report_screenshot.png")
    assert w.n > 0


def test_report_without_graphviz_says_so(monkeypatch, tmp_path):
    import dnnplace.models.paper.report as rep

    monkeypatch.setattr(rep.shutil, "which", lambda name: None)
    w = dnnplace.load_workload(throughput_path("LayerGraphs/bert24_inference"))
    sol = dnnplace.solve(w, "dp")
    out = rep.write_report(w, sol.split, tmp_path / "r.html")
    text = out.read_text()
    assert "graph-missing" in text and "graphviz" in text.lower() and 'class="timeline"' in text
