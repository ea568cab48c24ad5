"""Numbers out of range -- in files, options and API arguments -- are refused with one clean line."""

from __future__ import annotations

import json
import os
import time

import pytest
from hostile import (
    BAD_INSTANCES,
    BAD_NUMBERS,
    BARE_SPLIT,
    GOOD,
    TIME_RULE,
    TOY,
    _huge,
    _with,
    clean_error,
    cli,
    invoke,
    plan_with,
    write,
)

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.models.paper import paper_json


def test_values_near_float_max_are_refused_at_load(tmp_path):
    w = write(tmp_path / "w.json", _huge(1e308))
    line = clean_error(*invoke("solve", w), "larger than the limit 1e+100")
    assert "fpgaLatency" in line and "node 1" in line
    doc = _huge(1.0)
    doc["maxSizePerFPGA"] = 1e101
    clean_error(*invoke("info", write(tmp_path / "m.json", doc)), "'maxSizePerFPGA' is 1e+101")
    text = json.dumps(GOOD).replace('"cpuLatency": 5.0', '"cpuLatency": 1' + "0" * 400, 1)
    clean_error(*invoke("solve", write(tmp_path / "i.json", text)), "'cpuLatency' is an integer of 401 digits, larger")


def test_values_at_the_limit_are_solved_correctly(tmp_path):
    w = write(tmp_path / "w.json", _huge(1e100))
    proc = cli("solve", w, "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no numpy overflow warnings
    doc = json.loads(proc.stdout)
    assert doc["maxLoad"] == 5.0 and doc["fpgas"] == [] and doc["feasible"]


@pytest.mark.parametrize("case", sorted(BAD_NUMBERS))
def test_out_of_range_workload_fields_are_refused(case, tmp_path):
    doc, needle = BAD_NUMBERS[case]
    clean_error(*invoke("solve", write(tmp_path / "w.json", doc), "-o", tmp_path / "o.json"), needle)
    assert not (tmp_path / "o.json").exists()


def test_simulate_microbatches_bounded_by_memory(files):
    w, s = files
    t0 = time.perf_counter()
    clean_error(*invoke("simulate", w, s, "-n", "10000000"), "use --microbatches 500,000 or fewer")
    assert time.perf_counter() - t0 < 10


@pytest.mark.parametrize("args,needle", [
    (["--memory", "1e300"], "<= 1e+100"),
    (["--memory", "inf"], "--memory must be a finite number"),
    (["-k", str(10**30)], "--accelerators"),
    (["-l", str(10**7)], "--cpus"),
])
def test_out_of_range_options_are_refused(args, needle, files):
    w, _ = files
    clean_error(*invoke("solve", w, *args), needle)


def test_device_budget_far_above_the_node_count(files, tmp_path):
    doc = _with(["maxFPGAs"], 1_000_000)
    doc["maxCPUs"] = 1_000_000
    code, out, err = invoke("solve", write(tmp_path / "k.json", doc), "--json")
    # one node per accelerator: {a} 1 + 0.5, {b} 2 + 0.5 + 0.5, {c} 2 + 0.5
    assert code == 0 and json.loads(out)["maxLoad"] == 3.0, err


def test_trace_and_timeline_sizes_are_bounded(files, tmp_path, monkeypatch):
    import dnnplace.models.paper.simulation as pipeline

    monkeypatch.setattr(pipeline, "MAX_TRACE_TASKS", 100)  # as if 200,000 were exceeded
    w, s = files
    clean_error(*invoke("simulate", w, s, "-n", "51", "--trace", tmp_path / "t.json"),
                "a trace of 102 tasks is more than the limit of 100; use --microbatches 50 or fewer with --trace")
    clean_error(*invoke("report", w, s, "-n", "5000", "-o", tmp_path / "r.html"), "at most 1,000 microbatches")
    assert sorted(os.listdir(tmp_path)) == ["s.json", "w.json"]


@pytest.mark.parametrize("value", ["abc", [1, 2], {}, True, 1.5])
def test_a_plan_max_devices_of_the_wrong_type_is_refused(piper, value):
    toy, plan = piper
    clean_error(*invoke("evaluate", toy, plan_with(plan, ["instance", "maxDevices"], value)),
                "instance.maxDevices must be a whole number")


@pytest.mark.parametrize("value", [2**60, 2**63, 1e300, 10**400], ids=["2^60", "2^63", "1e300", "10^400"])
def test_a_piper_batch_out_of_range_is_refused(tmp_path, value):
    doc = json.loads(TOY.read_text())
    doc["mbsInBatch"] = value
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    clean_error(*invoke("solve", path), "mbsInBatch")


@pytest.mark.parametrize("args,needle", [
    (["--batch", str(2**60)], "--batch must be a whole number"),  # the flag given, not the file's field
    (["--batch", str(2**63)], "--batch must be a whole number"),
    (["--bandwidth", "1e300"], "--bandwidth must be a finite number"),
])
def test_piper_overrides_out_of_range_are_refused(args, needle):
    clean_error(*invoke("solve", TOY, *args), needle)


def test_the_local_search_seed_has_a_minimum(paper):
    w, _ = paper
    clean_error(*invoke("solve", w, "-m", "local-search", "--seed", "-1"), "seed must be at least 0")
    with pytest.raises(DnnplaceError, match="seed must be at least 0"):
        dnnplace.solve(dnnplace.load(w), "local-search", seed=-1)


@pytest.mark.parametrize("memory", [float("nan"), -5.0, "2", float("inf"), 1e101])
def test_with_budget_refuses_a_bad_memory(memory):
    w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    with pytest.raises(DnnplaceError):
        w.with_budget(None, None, memory)


@pytest.mark.parametrize("count", ["2", 2.7, True, 10**9, -1, float("nan")])
def test_with_budget_refuses_bad_counts(count):
    w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    with pytest.raises(DnnplaceError):
        w.with_budget(count, None, None)
    with pytest.raises(DnnplaceError):
        w.with_budget(None, count, None)
    with pytest.raises(DnnplaceError):
        dnnplace.with_budget(w, accelerators=count)


@pytest.mark.parametrize("args,needle", [
    (["solve", "{w}", "--time-limit", "nan"], TIME_RULE),
    (["solve", "{w}", "--time-limit", "-1"], TIME_RULE),
    (["solve", "{w}", "--time-limit", "0"], TIME_RULE),
    (["solve", "{w}", "--time-limit", "1e300"], TIME_RULE),
    (["compare", "{w}", "--time-limit", "nan"], TIME_RULE),
    (["compare", "{w}", "--time-limit", "1e12"], TIME_RULE),
    (["reproduce", "--time-limit", "nan", "-o", "{r}"], TIME_RULE),
    (["reproduce", "--latency-time-limit", "-1", "-o", "{r}"], "--latency-time-limit must be a number of seconds"),
    (["solve", "{w}", "-m", "ip", "--threads", "100000"], "threads must be at most 256"),
    (["solve", "{w}", "-m", "ip-latency", "--objective", "latency", "--subgraphs-per-accelerator", "1000"],
     "at most 64"),
    (["solve", "{w}", "-m", "local-search", "--restarts", str(10**12)], "restarts must be at most"),
    (["solve", "{w}", "-k", str(10**12)], "--accelerators"),
    (["solve", "{w}", "--cpus", str(10**12)], "--cpus"),
    (["solve", str(TOY), "--batch", str(10**12)], "--batch must be a whole number"),
    (["solve", str(TOY), "--bert-layers", str(10**12)], "--bert-layers"),
    (["simulate", "{w}", "{s}", "-n", str(10**12)], "microbatches"),
    (["report", "{w}", "{s}", "-n", str(10**12), "-o", "{r}"], "microbatches"),
    (["run", "nomodule:f", "{s}", "-n", str(10**12)], "--microbatches must be a whole number >= 1 and <= 100,000"),
    (["run", "nomodule:f", "{s}", "--steps", str(10**12)], "--steps must be a whole number >= 1 and <= 1,000,000,"),
    (["profile", "nomodule:f", "-o", "{r}", "--repeats", str(10**12)], "--repeats must be a whole"),
    (["profile", "nomodule:f", "-o", "{r}", "-k", str(10**12)], "--accelerators"),
    (["info", "{w}", "--max-ideals", str(10**22)], "--max-ideals must be a whole"),
])
def test_numeric_options_have_upper_bounds(paper, tmp_path, args, needle):
    w, s = paper
    clean_error(*invoke(*(a.format(w=w, s=s, r=tmp_path / "r.html") for a in args)), needle)
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("options", [{"microbatches": 0}, {"microbatches": -3}, {"microbatches": 2.5},
                                     {"microbatches": True}, {"schedule": "x"}, {"schedule": 5}])
def test_write_report_and_simulate_validate(tmp_path, options):
    w = dnnplace.load(write(tmp_path / "w.json", GOOD))
    split = paper_json.parse_split(BARE_SPLIT)
    with pytest.raises(DnnplaceError):
        dnnplace.write_report(w, split, tmp_path / "r.html", **options)
    with pytest.raises(DnnplaceError):
        dnnplace.simulate(w, split, **options)
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("bad", BAD_INSTANCES, ids=repr)
def test_api_wants_an_instance(tmp_path, bad):
    w = dnnplace.load(write(tmp_path / "w.json", GOOD))
    split = paper_json.parse_split(BARE_SPLIT)
    calls = [
        lambda: dnnplace.with_budget(bad, accelerators=1), lambda: dnnplace.info(bad),
        lambda: dnnplace.export(bad, split), lambda: dnnplace.evaluate(bad, split),
        lambda: dnnplace.simulate(bad, split), lambda: dnnplace.solve(bad),
        lambda: dnnplace.write_report(bad, split, tmp_path / "r.html"),
        lambda: dnnplace.save_plan(bad, split, tmp_path / "p.json"), lambda: dnnplace.api.plan_document(bad, split),
        lambda: dnnplace.api.default_method(bad), lambda: dnnplace.load_plan(bad, tmp_path / "w.json"),
        lambda: dnnplace.api.piper_document(bad), lambda: dnnplace.save_workload(bad, tmp_path / "x.json"),
        lambda: dnnplace.api.plan_notes(bad, split),
        # and a plan where a plan is expected
        lambda: dnnplace.evaluate(w, bad), lambda: dnnplace.simulate(w, bad),
        lambda: dnnplace.write_report(w, bad, tmp_path / "r.html"), lambda: dnnplace.save_plan(w, bad, tmp_path / "p"),
        lambda: dnnplace.save_split(bad, tmp_path / "x.json"), lambda: dnnplace.export(w, bad),
    ]
    for call in calls:
        with pytest.raises(DnnplaceError):
            call()
    assert sorted(os.listdir(tmp_path)) == ["w.json"]


def test_node_twice_on_one_device_is_refused(paper, tmp_path):
    w, _ = paper
    s = write(tmp_path / "dup.json", {"fpgas": [{"nodes": [1, 1, 2]}, {"nodes": [3]}], "cpus": []})
    for command in ("evaluate", "simulate"):
        clean_error(*invoke(command, w, s), "fpgas[0]: node id 1 is listed twice on this device")
