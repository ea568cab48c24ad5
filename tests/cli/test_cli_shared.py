"""The CLI names the devices holding copies of shared parameters (solve, evaluate, the split file, report)."""

from __future__ import annotations

import json

from cli_runner import run_cli

from dnnplace.models.paper.paper_json import workload_from_records, workload_to_dict


def _workload(tmp_path):
    nodes = [{"id": i, "fpgaLatency": 1.0, "cpuLatency": 10.0, "size": 1.0} for i in range(4)]
    w = workload_from_records(nodes, [(i, i + 1, 0.1) for i in range(3)], accelerators=2, cpus=0, memory=8.0,
                              shared=[{"name": "tied.weight", "size": 5.0, "nodes": [0, 3]}])
    path = tmp_path / "w.json"
    path.write_text(json.dumps(workload_to_dict(w)))
    return path


def test_solve_evaluate_and_report_name_the_copies(tmp_path):
    path = _workload(tmp_path)
    plan = tmp_path / "plan.json"
    res = run_cli("solve", path, "-m", "dp", "-o", plan)
    assert res.returncode == 0, res.stderr
    assert "shared parameters: 1 group(s), 2 copies" in res.stdout and "tied.weight" in res.stdout
    doc = json.loads(plan.read_text())
    assert [f.get("sharedParameters") for f in doc["fpgas"]] == [["tied.weight"], ["tied.weight"]]
    res = run_cli("evaluate", path, plan, "--json")
    out = json.loads(res.stdout)
    assert out["sharedParameters"] == [{"name": "tied.weight", "devices": ["acc0", "acc1"]}]
    assert [d["memory"] for d in out["devices"]] == [7.0, 7.0]  # 2 own + 5 shared on each
    report = tmp_path / "r.html"
    assert run_cli("report", path, plan, "-o", report).returncode == 0
    assert "shared parameter copies" in report.read_text()


def test_a_group_naming_an_unknown_node_is_one_line(tmp_path):
    path = _workload(tmp_path)
    doc = json.loads(path.read_text())
    doc["sharedParameters"][0]["nodes"] = [0, 99]
    path.write_text(json.dumps(doc))
    res = run_cli("info", path)
    assert res.returncode == 2
    assert "sharedParameters[0]: unknown node id 99" in res.stderr and "Traceback" not in res.stderr
