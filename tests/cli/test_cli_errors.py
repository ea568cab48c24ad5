"""Every kind of bad input: exit code 2, one line naming the culprit, no traceback, nothing written."""

from __future__ import annotations

import copy
import json

import pytest
from cli_runner import Result, run_cli
from conftest import throughput_path

GOOD = {
    "maxSizePerFPGA": 10.0, "maxFPGAs": 2, "maxCPUs": 1,
    "nodes": [
        {"id": 1, "fpgaLatency": 1.0, "cpuLatency": 5.0, "supportedOnFpga": 1, "isBackwardNode": 0, "size": 1.0},
        {"id": 2, "fpgaLatency": 2.0, "cpuLatency": 6.0, "supportedOnFpga": 1, "isBackwardNode": 0, "size": 1.0},
        {"id": 3, "fpgaLatency": 2.0, "cpuLatency": 6.0, "supportedOnFpga": 1, "isBackwardNode": 0, "size": 1.0},
    ],
    "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5}, {"sourceId": 2, "destId": 3, "cost": 0.5}],
}


def cli(*args: str, cwd=None) -> Result:
    return run_cli(*args, cwd=cwd)


def mutate(fn):
    doc = copy.deepcopy(GOOD)
    fn(doc)
    return doc


def _set(path, value):
    def f(doc):
        obj = doc
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value
    return f


def _node(**fields):
    def f(doc):
        doc["nodes"].append({"id": 9, "fpgaLatency": 1.0, "cpuLatency": 1.0, "supportedOnFpga": 1,
                             "isBackwardNode": 0, **fields})
    return f


BAD_WORKLOADS = {
    "top level not an object": ([1, 2], "top level"),
    "missing field": (mutate(lambda d: d.pop("maxFPGAs")), "maxFPGAs"),
    "mistyped field": (mutate(_set(["nodes", 0, "fpgaLatency"], "fast")), "fpgaLatency"),
    "mistyped flag": (mutate(_set(["nodes", 1, "supportedOnFpga"], 2)), "supportedOnFpga"),
    "nodes not a list": (mutate(_set(["nodes"], {"a": 1})), "'nodes' must be a list"),
    "node not an object": (mutate(lambda d: d["nodes"].append(7)), "nodes[3]"),
    "duplicate node id": (mutate(_set(["nodes", 2, "id"], 1)), "duplicate node id"),
    "edge to unknown node": (mutate(lambda d: d["edges"].append({"sourceId": 3, "destId": 42, "cost": 0})),
                             "unknown node id 42"),
    "self-loop": (mutate(lambda d: d["edges"].append({"sourceId": 3, "destId": 3, "cost": 0})), "self-loop"),
    "cycle": (mutate(lambda d: d["edges"].append({"sourceId": 3, "destId": 1, "cost": 1.0})),
              "cycle: 1 -> 2 -> 3 -> 1"),
    "different out-edge costs": (mutate(lambda d: d["edges"].append({"sourceId": 1, "destId": 3, "cost": 0.7})),
                                 "node 1: out-edges have different costs"),
    "negative time": (mutate(_set(["nodes", 1, "cpuLatency"], -1.0)), "'cpuLatency' is negative"),
    "negative cost": (mutate(_set(["edges", 0, "cost"], -0.5)), "'cost' is negative"),
    "negative device count": (mutate(_set(["maxCPUs"], -1)), "'maxCPUs' is negative"),
    "backward to forward edge": (mutate(_set(["nodes", 0, "isBackwardNode"], 1)),
                                 "edge 1->2 goes from a backward node to a forward node"),
    "unsupported without CPU": (mutate(lambda d: (_set(["maxCPUs"], 0)(d),
                                                  _set(["nodes", 2, "supportedOnFpga"], 0)(d))),
                                "node 3 is not supported on accelerators and maxCPUs is 0"),
    "node larger than memory without CPU": (mutate(lambda d: (_set(["maxCPUs"], 0)(d),
                                                              _set(["nodes", 1, "size"], 99.0)(d))),
                                            "node 2 needs 99 bytes"),
    "colour class larger than memory": (mutate(lambda d: (_set(["maxCPUs"], 0)(d), _set(["maxSizePerFPGA"], 1.5)(d),
                                                          _set(["nodes", 0, "colorClass"], 4)(d),
                                                          _set(["nodes", 2, "colorClass"], 4)(d))),
                                        "colour class 4 needs 2 bytes"),
    "no devices": (mutate(lambda d: (_set(["maxCPUs"], 0)(d), _set(["maxFPGAs"], 0)(d))), "no devices"),
}


def _check_one_line(proc, needle: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert needle in lines[0], lines[0]


@pytest.mark.parametrize("case", sorted(BAD_WORKLOADS))
def test_bad_workload(case, tmp_path):
    doc, needle = BAD_WORKLOADS[case]
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "split.json"
    proc = cli("solve", str(path), "-o", str(out))
    _check_one_line(proc, needle)
    assert not out.exists()


@pytest.mark.parametrize("text,needle", [
    ("{not json", "not valid JSON"),
    ('{"maxFPGAs": NaN}', "is NaN"),
    ('{"maxSizePerFPGA": Infinity, "maxFPGAs": 1, "maxCPUs": 1, "nodes": [], "edges": []}', "infinite"),
])
def test_bad_json_text(text, needle, tmp_path):
    path = tmp_path / "w.json"
    doc = text
    if "NaN" in text:
        doc = json.dumps(GOOD).replace('"fpgaLatency": 2.0', '"fpgaLatency": NaN', 1)
    path.write_text(doc)
    _check_one_line(cli("solve", str(path)), needle)


def test_missing_and_directory_files(tmp_path):
    _check_one_line(cli("solve", str(tmp_path / "nope.json")), "no such file")
    _check_one_line(cli("solve", str(tmp_path)), "is a directory")


def test_bad_split_files(tmp_path):
    w = tmp_path / "w.json"
    w.write_text(json.dumps(GOOD))
    s = tmp_path / "s.json"
    s.write_text(json.dumps({"fpgas": [{"nodes": [1, 2, 3, 77]}], "cpus": []}))
    _check_one_line(cli("evaluate", str(w), str(s)), "node id 77")
    s.write_text(json.dumps({"fpgas": [{"nodes": ["a"]}]}))
    _check_one_line(cli("evaluate", str(w), str(s)), "is not an integer")
    s.write_text(json.dumps([1]))
    _check_one_line(cli("evaluate", str(w), str(s)), "top level")


def test_method_that_cannot_optimise_the_objective(tmp_path):
    w = tmp_path / "w.json"
    w.write_text(json.dumps(GOOD))
    _check_one_line(cli("solve", str(w), "--method", "greedy"), "does not optimise 'throughput'")
    _check_one_line(cli("solve", str(w), "--method", "dp", "--objective", "latency"), "does not optimise 'latency'")


def test_too_many_ideals_gives_a_certified_answer_not_a_refusal():
    # a lattice over the budget is relaxed: a split, its proven lower bound and the gap, never a refusal
    proc = cli("solve", str(throughput_path("LayerGraphs/inceptionv3_inference")), "--max-ideals", "1000", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] in ("bounded", "optimal")
    assert 0 < doc["bound"] <= doc["maxLoad"] + 1e-9
    assert doc["gap"] == pytest.approx((doc["maxLoad"] - doc["bound"]) / doc["maxLoad"])


def test_no_contiguous_split_fits(tmp_path):
    # sizes 1, 2, 1 with 2 bytes per accelerator: {1},{2},{3} needs three accelerators
    doc = mutate(lambda d: (_set(["maxCPUs"], 0)(d), _set(["maxSizePerFPGA"], 2.0)(d),
                            _set(["nodes", 1, "size"], 2.0)(d)))
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    _check_one_line(cli("solve", str(path)), "no contiguous split fits")


def test_unwritable_output(tmp_path):
    w = tmp_path / "w.json"
    w.write_text(json.dumps(GOOD))
    _check_one_line(cli("solve", str(w), "-o", str(tmp_path / "missing" / "s.json")), "cannot write")


def test_good_run_and_json_output(tmp_path):
    w = tmp_path / "w.json"
    w.write_text(json.dumps(GOOD))
    out = tmp_path / "s.json"
    proc = cli("solve", str(w), "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc == json.loads(out.read_text())
    for key in ("maxLoad", "fpgas", "cpus", "method", "objective", "runtime_s"):
        assert key in doc
    proc = cli("evaluate", str(w), str(out), "--json")
    ev = json.loads(proc.stdout)
    for key in ("maxLoad", "latency", "feasible", "violations", "devices"):
        assert key in ev
    assert ev["maxLoad"] == doc["maxLoad"] and ev["feasible"]
    proc = cli("evaluate", str(w), str(out))
    assert proc.returncode == 0 and "max-load" in proc.stdout


@pytest.mark.parametrize("cmd", [[], ["solve"], ["evaluate"], ["methods"], ["info"]])
def test_help_is_useful(cmd):
    proc = cli(*cmd, "--help")
    assert proc.returncode == 0 and "Usage" in proc.stdout


@pytest.mark.timing
def test_dp_time_limit_is_honoured():
    # the best split found so far, its bound and status time_limit: never a crash, never a silent hang
    proc = cli("solve", str(throughput_path("LayerGraphs/inceptionv3_training")), "--time-limit", "0.2",
               "--max-ideals", "5000000", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "time_limit" and doc["bound"] <= doc["maxLoad"]


def test_ip_names_the_binding_constraint_family(tmp_path):
    # sizes 1, 2, 1 with 2 bytes per accelerator: only {1,3},{2} fits, and {1,3} is not contiguous
    doc = mutate(lambda d: (_set(["maxCPUs"], 0)(d), _set(["maxSizePerFPGA"], 2.0)(d),
                            _set(["nodes", 1, "size"], 2.0)(d)))
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    _check_one_line(cli("solve", str(path), "--method", "ip", "--time-limit", "20"),
                    "memory (maxSizePerFPGA) constraints are binding")
    proc = cli("solve", str(path), "--method", "ip-noncontig", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["feasible"]


def test_compare_formats(tmp_path):
    w = throughput_path("LayerGraphs/bert24_inference")
    proc = cli("compare", str(w), str(throughput_path("LayerGraphs/resnet50_inference")), "--methods",
               "dp,single,expert", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("workload,method") and len(lines) == 1 + 2 * 3
    proc = cli("compare", str(w), "--methods", "dp,pipedream", "--format", "json")
    rows = json.loads(proc.stdout)
    assert {r["method"] for r in rows} == {"dp", "pipedream"} and all(r["ratio"] >= 1 for r in rows)
    proc = cli("compare", str(w), "--methods", "dp,nonsense")
    _check_one_line(proc, "unknown method 'nonsense'")


def test_contract_layers_and_linearize_are_upper_bounds():
    w = throughput_path("OperatorGraphs/bert_l-3_inference")
    exact = json.loads(cli("solve", str(w), "--json").stdout)["maxLoad"]
    for flag in ("--linearize",):
        value = json.loads(cli("solve", str(w), flag, "--json").stdout)["maxLoad"]
        assert value >= exact - 1e-9
    w12 = throughput_path("OperatorGraphs/bert_l-12_inference")  # has layerId
    exact12 = json.loads(cli("solve", str(w12), "--json").stdout)["maxLoad"]
    fused = json.loads(cli("solve", str(w12), "--contract-layers", "--json").stdout)["maxLoad"]
    assert fused >= exact12 - 1e-9
