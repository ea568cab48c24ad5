"""Reading and writing the paper's JSON: defaults, bool styles, lossless round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import LATENCY, THROUGHPUT, latency_path, throughput_path

import dnnplace
from dnnplace.frontends.paper_json import parse_workload, workload_to_dict


@pytest.mark.parametrize("key", THROUGHPUT + [f"latency:{k}" for k in LATENCY])
def test_round_trip_is_lossless(key, tmp_path):
    path = latency_path(key[8:]) if key.startswith("latency:") else throughput_path(key)
    original = json.loads(path.read_text())
    w = dnnplace.load_workload(path)
    out = tmp_path / "w.json"
    dnnplace.save_workload(w, out)
    assert json.loads(out.read_text()) == original
    w2 = dnnplace.load_workload(out)
    for field in ("node_ids", "acc_time", "cpu_time", "supported", "size", "backward", "color",
                  "edge_src", "edge_dst", "edge_cost"):
        assert np.array_equal(getattr(w, field), getattr(w2, field)), field


def _doc(**top):
    doc = {
        "maxSizePerFPGA": 10.0, "maxFPGAs": 2, "maxCPUs": 1,
        "nodes": [
            {"id": 1, "fpgaLatency": 1.0, "cpuLatency": 5.0, "supportedOnFpga": True, "isBackwardNode": False},
            {"id": 2, "fpgaLatency": 2.0, "cpuLatency": 6.0, "supportedOnFpga": 1, "isBackwardNode": 0,
             "colorClass": 7, "size": 3.0, "layerId": 4, "name": "conv", "custom": [1, 2]},
        ],
        "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5, "size": 12.0}],
    }
    doc.update(top)
    return doc


def test_optional_fields_default_and_survive():
    doc = _doc()
    w = parse_workload(doc)
    assert w.size.tolist() == [0.0, 3.0]
    assert w.color[0] != w.color[1]  # a fresh class for the node without one
    assert w.names == (None, "conv")
    back = workload_to_dict(w)
    assert "colorClass" not in back["nodes"][0] and "size" not in back["nodes"][0]
    assert back["nodes"][1]["custom"] == [1, 2] and back["edges"][0]["size"] == 12.0
    assert back["nodes"][1]["layerId"] == 4


def test_bool_styles_are_kept():
    doc = _doc()
    for node in doc["nodes"]:
        node["supportedOnFpga"] = True
        node["isBackwardNode"] = False
    assert workload_to_dict(parse_workload(doc))["nodes"][0]["supportedOnFpga"] is True
    for node in doc["nodes"]:
        node["supportedOnFpga"] = 1
        node["isBackwardNode"] = 0
    assert workload_to_dict(parse_workload(doc))["nodes"][0]["supportedOnFpga"] == 1


def test_python_construction_and_budget_override():
    w = dnnplace.workload_from_records(
        [{"id": 0, "fpgaLatency": 1.0, "cpuLatency": 4.0}, {"id": 1, "fpgaLatency": 2.0, "cpuLatency": 1.0}],
        [(0, 1, 0.25)], accelerators=2, cpus=1)
    assert w.comm_cost.tolist() == [0.25, 0.0]
    w2 = w.with_budget(accelerators=1, cpus=0, memory=5.0)
    assert (w2.max_accelerators, w2.max_cpus, w2.memory) == (1, 0, 5.0)
    assert w.max_accelerators == 2  # immutable original
    sol = dnnplace.solve(w, "dp")
    assert sol.value == pytest.approx(1.25)  # node 1 on the CPU (1.0); node 0 on an accelerator pays 1 + 0.25
