"""Reading and writing the paper's JSON: defaults, bool styles, lossless round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import LATENCY, THROUGHPUT, latency_path, throughput_path

import dnnplace
from dnnplace.models.paper.paper_json import parse_workload, workload_to_dict


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


# ------------------------------------------------------------ the vectorised reader (issue 22 item 3)
def _per_node(obj):
    """The workload as the per-node readers alone build it."""
    from unittest import mock

    from dnnplace.models.paper import paper_json

    with mock.patch.object(paper_json, "_parse_nodes_fast", lambda raw: None), \
            mock.patch.object(paper_json, "_parse_edges_fast", lambda raw, ids: None):
        return parse_workload(obj)


def _assert_same(a, b):
    for field in ("node_ids", "acc_time", "cpu_time", "supported", "size", "backward", "color", "layer",
                  "edge_src", "edge_dst", "edge_cost"):
        x, y = getattr(a, field), getattr(b, field)
        assert x.dtype == y.dtype and np.array_equal(x, y), field
    assert a.names == b.names
    for key, y in b.extras.items():
        x = a.extras[key]
        assert np.array_equal(x, y) if isinstance(y, np.ndarray) else x == y, key
    assert workload_to_dict(a) == workload_to_dict(b)


@pytest.mark.parametrize("key", THROUGHPUT + [f"latency:{k}" for k in LATENCY])
def test_vectorised_reader_equals_the_per_node_reader(key):
    from dnnplace.models.paper import paper_json

    path = latency_path(key[8:]) if key.startswith("latency:") else throughput_path(key)
    obj = json.loads(path.read_text())
    assert paper_json._parse_nodes_fast(obj["nodes"]) is not None  # the paper's files take the fast path
    assert paper_json._parse_edges_fast(obj["edges"], parse_workload(obj).node_ids) is not None
    _assert_same(parse_workload(obj), _per_node(obj))


@pytest.mark.parametrize("change", [
    lambda d: d["nodes"][1].update(id=2.0),  # an integral float id
    lambda d: d["nodes"][0].update(fpgaLatency=2**80),  # a huge integer
    lambda d: d["nodes"][0].update(supportedOnFpga=1.0, name=None),
    lambda d: d["nodes"][0].update(size=0, colorClass=7),
    lambda d: d["edges"][0].update(cost=1e-9, extra={"k": 1}),
    lambda d: d["edges"].append({"sourceId": 1, "destId": 2, "cost": 0.5}),  # a duplicate edge
    lambda d: d.update(edges=[]),
])
def test_vectorised_reader_on_unusual_but_valid_input(change):
    doc = _doc()
    change(doc)
    _assert_same(parse_workload(doc), _per_node(doc))
