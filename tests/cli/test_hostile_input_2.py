"""Hostile and careless input, round 2 (issue 22): each test names the item it reproduces.

Most run the CLI in process (tests/cli_runner.py); the ones whose subject is the process itself
(stdout on /dev/full, a closed stdout, signals, the encoding of the streams) run ``python -m dnnplace``.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import run_cli

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.frontends import paper_json

DATA = Path(dnnplace.__file__).parent / "data"
TOY = DATA / "piper" / "toys" / "toy_a_knapsack.json"
SRC = str(Path(dnnplace.__file__).resolve().parents[1])

from test_hostile_input import GOOD, clean_error, write  # noqa: E402  (round 1's workload and checks)

SPLIT = {"maxLoad": 3.5, "fpgas": [{"load": 3.5, "nodes": [1, 2]}, {"load": 2.5, "nodes": [3]}], "cpus": []}


def invoke(*args: object) -> tuple[int, str, str]:
    r = run_cli(*args)
    return r.returncode, r.stdout, r.stderr


def cli(*args: object, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """``python -m dnnplace`` in a subprocess."""
    full = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    if "stdout" not in kw and "stderr" not in kw:
        kw.setdefault("capture_output", True)
    kw.setdefault("timeout", 300)
    return subprocess.run([sys.executable, "-m", "dnnplace", *map(str, args)], text=True, env=full, **kw)


@pytest.fixture
def piper(tmp_path) -> tuple[Path, Path]:
    """A copy of the Piper toy and its solved plan."""
    toy = tmp_path / "toy.json"
    toy.write_bytes(TOY.read_bytes())
    plan = tmp_path / "plan.json"
    code, out, err = invoke("solve", toy, "-o", plan, "-q")
    assert code == 0, err
    return toy, plan


@pytest.fixture
def paper(tmp_path) -> tuple[Path, Path]:
    return write(tmp_path / "w.json", GOOD), write(tmp_path / "s.json", SPLIT)


def plan_with(plan: Path, path: list, value: object, name: str = "p2.json") -> Path:
    doc = json.loads(plan.read_text())
    obj = doc
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value
    return write(plan.with_name(name), doc)


# ------------------------------------------------------------------ item 6: a plan's own instance block
def test_6_plan_instance_block_is_not_trusted(piper):
    toy, plan = piper
    # the plan fits 109 bytes per device; under 50 it does not, whatever the plan claims
    liar = plan_with(plan, ["instance", "maxMemoryPerDevice"], 1e12)
    code, out, err = invoke("evaluate", toy, liar, "--memory", "50", "--json")
    assert code == 0, err
    assert json.loads(out)["feasible"] is False
    notes = err.strip().splitlines()
    assert len(notes) == 1 and notes[0].startswith("note:"), err
    assert "maxMemoryPerDevice 1e+12 (used: 50" in notes[0]
    # the same without the override: judged under the workload file's 109
    code, out, err = invoke("evaluate", toy, liar, "--json")
    assert code == 0 and json.loads(out)["feasible"] is True and "used: 109" in err


def test_6_overrides_apply_to_simulate_and_report(piper, tmp_path):
    toy, plan = piper
    code, out, err = invoke("simulate", toy, plan, "--memory", "50", "--json")
    assert code == 0 and json.loads(out)["time_per_sample"] is None, err
    code, out, err = invoke("report", toy, plan, "-k", "2", "-o", tmp_path / "r.html")
    assert code == 0 and "maxDevices 1 (used: 2" in err, err
    code, out, err = invoke("evaluate", toy, plan)
    assert code == 0 and err == ""  # same parameters: no note


@pytest.mark.parametrize("flag,value", [("-k", "2"), ("--memory", "5"), ("--bandwidth", "3"), ("--batch", "2")])
@pytest.mark.parametrize("command", ["evaluate", "simulate", "report"])
def test_6_piper_overrides_are_refused_for_paper_workloads(paper, tmp_path, command, flag, value):
    w, s = paper
    extra = ["-o", tmp_path / "r.html"] if command == "report" else []
    clean_error(*invoke(command, w, s, flag, value, *extra), "applies to a Piper workload only")
    assert not (tmp_path / "r.html").exists()


def test_6_plan_with_no_stages_is_nodes_unplaced(piper):
    toy, plan = piper
    empty = plan_with(plan, ["stages"], [])
    for command in ("evaluate", "simulate"):
        clean_error(*invoke(command, toy, empty), "nodes unplaced")


# ------------------------------------------------------------------ item 8: internal errors on Piper numbers
@pytest.mark.parametrize("value", ["abc", [1, 2], {}, True, 1.5])
def test_8_plan_max_devices_of_the_wrong_type(piper, value):
    toy, plan = piper
    clean_error(*invoke("evaluate", toy, plan_with(plan, ["instance", "maxDevices"], value)),
                "instance.maxDevices must be a whole number")


@pytest.mark.parametrize("value", [2**60, 2**63, 1e300, 10**400], ids=["2^60", "2^63", "1e300", "10^400"])
def test_8_piper_batch_out_of_range(tmp_path, value):
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
def test_8_piper_overrides_out_of_range(args, needle):
    clean_error(*invoke("solve", TOY, *args), needle)


def test_8_local_search_seed_minimum(paper):
    w, _ = paper
    clean_error(*invoke("solve", w, "-m", "local-search", "--seed", "-1"), "seed must be at least 0")
    with pytest.raises(DnnplaceError, match="seed must be at least 0"):
        dnnplace.solve(dnnplace.load(w), "local-search", seed=-1)


# ------------------------------------------------------------------ item 7: Workload.with_budget validates
@pytest.mark.parametrize("memory", [float("nan"), -5.0, "2", float("inf"), 1e101])
def test_7_with_budget_memory(memory):
    w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    with pytest.raises(DnnplaceError):
        w.with_budget(None, None, memory)


@pytest.mark.parametrize("count", ["2", 2.7, True, 10**9, -1, float("nan")])
def test_7_with_budget_counts(count):
    w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    with pytest.raises(DnnplaceError):
        w.with_budget(count, None, None)
    with pytest.raises(DnnplaceError):
        w.with_budget(None, count, None)
    with pytest.raises(DnnplaceError):
        dnnplace.with_budget(w, accelerators=count)


# ------------------------------------------------------------------ item 1: the Piper paths use the safe writer
def test_1_piper_solve_output_is_the_workload(piper):
    toy, _ = piper
    before = toy.read_bytes()
    clean_error(*invoke("solve", toy, "-o", toy), "refusing to overwrite it")
    clean_error(*invoke("solve", toy, "--report", toy), "refusing to overwrite it")
    assert toy.read_bytes() == before


def test_1_piper_report_output_is_the_plan(piper):
    toy, plan = piper
    before = plan.read_bytes()
    clean_error(*invoke("report", toy, plan, "-o", plan), "refusing to overwrite it")
    clean_error(*invoke("report", toy, plan, "-o", toy), "refusing to overwrite it")
    assert plan.read_bytes() == before


def test_1_piper_outputs_never_follow_a_link(piper, tmp_path):
    toy, plan = piper
    target = write(tmp_path / "target.txt", "precious")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    clean_error(*invoke("report", toy, plan, "-o", link), "is a symbolic link")
    clean_error(*invoke("solve", toy, "-o", link), "is a symbolic link")
    clean_error(*invoke("solve", toy, "-o", tmp_path / "p.json", "--report", link), "is a symbolic link")
    assert target.read_text() == "precious" and link.is_symlink()


def test_1_piper_output_fifo_does_not_hang(piper, tmp_path):
    toy, plan = piper
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # a subprocess with a timeout: opening a FIFO for writing would block forever
    r = cli("report", toy, plan, "-o", fifo, timeout=60)
    clean_error(r.returncode, r.stdout, r.stderr, "is a FIFO")
    r = cli("solve", toy, "-o", fifo, timeout=60)
    clean_error(r.returncode, r.stdout, r.stderr, "is a FIFO")


def test_1_full_disk_keeps_the_old_piper_report_and_plan(piper, tmp_path, monkeypatch):
    toy, plan = piper
    report = write(tmp_path / "r.html", "old report")
    old_plan = plan.read_bytes()
    real_write = os.write

    def full(fd: int, data) -> int:
        if fd > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    clean_error(*invoke("report", toy, plan, "-o", report), "No space left on device")
    clean_error(*invoke("solve", toy, "-o", plan, "-q"), "No space left on device")
    monkeypatch.undo()
    assert report.read_text() == "old report" and plan.read_bytes() == old_plan
    assert sorted(os.listdir(tmp_path)) == ["plan.json", "r.html", "toy.json"]


# ------------------------------------------------------------------ item 8: the streams themselves
@pytest.mark.parametrize("args", [["methods"], ["solve", "{w}", "--json"], ["solve", "{w}"], ["info", "{w}"]])
def test_8_stdout_on_dev_full_is_one_line_exit_2(paper, args):
    w, _ = paper
    with open("/dev/full", "w") as full:
        r = cli(*(a.format(w=w) for a in args), stdout=full, stderr=subprocess.PIPE)
    clean_error(r.returncode, "", r.stderr, "cannot write to standard output (No space left on device)")


def test_8_ascii_stdout_with_non_ascii_paths(tmp_path):
    folder = tmp_path / "é中"
    folder.mkdir()
    w = write(folder / "wé.json", GOOD)
    env = {"PYTHONIOENCODING": "ascii"}
    r = cli("solve", w, "-o", folder / "sé.json", env=env)
    assert r.returncode == 0 and "\\xe9" in r.stdout and "internal error" not in r.stderr, r.stderr
    r = cli("compare", w, "--methods", "single", env=env)
    assert r.returncode == 0 and "\\xe9" in r.stdout, r.stderr
    r = cli("evaluate", w, folder / "sé.json", "--json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["feasible"] is True, r.stderr
    r = cli("solve", folder / "missé.json", env=env)
    clean_error(r.returncode, r.stdout, r.stderr, "no such file")


# ------------------------------------------------------------------ item 9: output silently lost
@pytest.mark.parametrize("args", [["solve", "{w}", "--json"], ["evaluate", "{w}", "{s}", "--json"],
                                  ["simulate", "{w}", "{s}", "--json"], ["info", "{w}"], ["methods"],
                                  ["compare", "{w}", "--methods", "dp,single"], ["solve", "{w}"]])
def test_9_columns_0_still_prints(paper, args):
    w, s = paper
    r = cli(*(a.format(w=w, s=s) for a in args), env={"COLUMNS": "0"})
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
    if "--json" in args:
        json.loads(r.stdout)


@pytest.mark.parametrize("args", [["solve", "{w}", "--json"], ["solve", "{w}"], ["evaluate", "{w}", "{s}"],
                                  ["methods"], ["compare", "{w}", "--methods", "single"]])
def test_9_closed_stdout_is_an_error(paper, args):
    w, s = paper
    r = cli(*(a.format(w=w, s=s) for a in args), stdout=None, stderr=subprocess.PIPE,
            preexec_fn=lambda: os.close(1))
    clean_error(r.returncode, "", r.stderr, "standard output")


def test_9_closed_stdout_is_fine_when_nothing_is_printed(paper, tmp_path):
    w, _ = paper
    r = cli("solve", w, "-q", "-o", tmp_path / "o.json", stdout=None, stderr=subprocess.PIPE,
            preexec_fn=lambda: os.close(1))
    assert r.returncode == 0 and r.stderr == "" and (tmp_path / "o.json").exists()


# ------------------------------------------------------------------ item 10: compare --format csv on stdout
def test_10_compare_csv_on_stdout_has_plain_line_ends(paper, tmp_path):
    w, _ = paper
    code, out, err = invoke("compare", w, "--methods", "dp,single", "--format", "csv")
    assert code == 0, err
    assert "\\x0d" not in out and "\r" not in out
    lines = out.strip().split("\n")
    assert lines[0].startswith("workload,method,") and len(lines) == 3
    code, _, err = invoke("compare", w, "--methods", "dp,single", "--format", "csv", "-o", tmp_path / "t.csv")
    assert code == 0 and (tmp_path / "t.csv").read_bytes().count(b"\r\n") == 3


# ------------------------------------------------------------------ item 5: "optimal" only with a zero gap
GNMT = DATA / "paper" / "throughput-inputs" / "LayerGraphs" / "gnmt_training.json"


@pytest.mark.slow
@pytest.mark.parametrize("args", [["-m", "ip", "--gap", "0.5"], ["-m", "ip-noncontig", "--gap", "0.3"],
                                  ["-m", "ip-noncontig"], ["-m", "ip", "--gap", "0"], ["--gap", "0.5"]])
def test_5_optimal_only_with_a_zero_gap(args):
    code, out, err = invoke("solve", GNMT, *args, "--time-limit", "20", "--json")
    assert code == 0, err
    doc = json.loads(out)
    gap = doc.get("gap")
    if doc["status"] == "optimal":
        assert gap is None or gap <= 1e-9, doc
    elif gap is not None and gap > 1e-9:
        assert doc["status"] in ("bounded", "time_limit"), doc
    code, out, err = invoke("solve", GNMT, *args, "--time-limit", "20")
    title = out.splitlines()[0]
    assert ("optimal" not in title) or ("gap 0.00 %" in title), title


def test_5_api_ip_with_a_gap_says_bounded():
    w = dnnplace.load(GNMT)
    sol = dnnplace.solve(w, "ip", gap=0.5, time_limit=20)
    assert sol.gap is not None
    assert (sol.status == "optimal") == (sol.gap <= 1e-9), (sol.status, sol.gap)
    assert sol.split.meta["status"] == sol.status


# ------------------------------------------------------------------ item 4: deadlines and upper bounds
TIME_RULE = "--time-limit must be a number of seconds > 0 and <= 1e+09"  # one rule for every --time-limit: solve's


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
def test_4_numeric_options_have_upper_bounds(paper, tmp_path, args, needle):
    w, s = paper
    clean_error(*invoke(*(a.format(w=w, s=s, r=tmp_path / "r.html") for a in args)), needle)
    assert not (tmp_path / "r.html").exists()


def test_4_time_limit_covers_building_the_latency_ip():
    import time

    big = DATA / "paper" / "latency-inputs" / "OperatorGraphs" / "bert_l-12_inference.json"
    t0 = time.perf_counter()
    code, out, err = invoke("solve", big, "-m", "ip-latency", "--objective", "latency",
                            "--subgraphs-per-accelerator", "64", "--time-limit", "3", "--json")
    took = time.perf_counter() - t0
    assert code == 0, err
    assert json.loads(out)["status"] == "time_limit"
    assert took < 3 + 10, took  # reading, the warm start's evaluation, HiGHS winding down


def test_4_deadline_while_building_returns_the_warm_start(monkeypatch):
    from dnnplace.solvers.ip import builder

    w = dnnplace.load(GNMT)

    def late(self) -> None:  # as if the deadline passed while the model was being built
        raise builder.BuildTimeout("the time limit ran out while building the IP model; raise --time-limit")

    monkeypatch.setattr(builder.MipBuilder, "_tick", late)
    for method, objective in (("ip", "throughput"), ("ip-noncontig", "throughput"), ("ip-latency", "latency")):
        sol = dnnplace.solve(w, method, objective=objective, time_limit=30)
        assert sol.status == "time_limit" and sol.evaluation.feasible, method


def test_4_builder_checks_the_clock():
    import time

    from dnnplace.solvers.ip.builder import MipBuilder

    m = MipBuilder(deadline=time.perf_counter() - 1)
    with pytest.raises(DnnplaceError, match="time limit ran out while building"):
        for _ in range(5000):
            m.row([0], [1.0], hi=1.0)


# ------------------------------------------------------------------ item 13: --time-limit inf is "no limit" everywhere
def test_13_time_limit_inf_means_no_limit(paper):
    w, _ = paper
    code, out, err = invoke("solve", w, "-m", "ip", "--time-limit", "inf", "--json")
    assert code == 0 and json.loads(out)["status"] == "optimal", err
    code, out, err = invoke("compare", w, "--methods", "ip,single", "--time-limit", "inf", "--format", "json")
    assert code == 0 and json.loads(out)[0]["status"] == "optimal", err


# ------------------------------------------------------------------ item 2: export --to torch-pipelining injection
HOSTILE_SPECS = [
    'm.py:f"""\nimport os; os.system("touch /tmp/pwned")\n"""',
    "m.py:f'''\nraise SystemExit(3)\n'''",
    "m.py:f\\\"\\\"\\\" + __import__('os').getcwd() + \"\"\"",
    'a"b\'c\nd\re\x00f\\\\:g',
    "\u202e\u2028m.py:f# }{0}{spec}",
]


@pytest.fixture
def fake_chain(monkeypatch):
    """The export's checks of the profiled model pass (they need torch); the script template is real."""
    from dnnplace.runtime import export

    monkeypatch.setattr(export, "_stages", lambda w, s: [])
    monkeypatch.setattr(export, "_chain_problem", lambda w, s, st: None)
    monkeypatch.setattr(export, "export_pipelining",
                        lambda w, s: {"notes": [], "split_spec": {"fc2": "BEGINNING"}, "num_stages": 2})


def _spec_constant(text: str) -> object:
    import ast

    tree = ast.parse(text)  # parses: nothing was spliced into the code
    found = [node.value for node in tree.body if isinstance(node, ast.Assign)
             and [getattr(t, "id", None) for t in node.targets] == ["SPEC"]]
    assert len(found) == 1
    assert isinstance(found[0], ast.Constant) and isinstance(found[0].value, str)
    # no statement other than the template's own: imports, the constants, functions and the main guard
    assert {type(node).__name__ for node in tree.body} <= {"Expr", "Import", "ImportFrom", "Assign",
                                                           "FunctionDef", "If"}
    return found[0].value


@pytest.mark.parametrize("spec", HOSTILE_SPECS)
def test_2_model_spec_cannot_execute_in_the_script(fake_chain, spec):
    from dnnplace.runtime.export import pipelining_script

    w = dnnplace.load(write_tmp_workload())
    text = pipelining_script(w, paper_json.parse_split(SPLIT), spec)
    assert _spec_constant(text) == spec
    docstring = text.split('"""')[1]
    assert spec not in docstring and "pwned" not in docstring


@pytest.mark.parametrize("spec", HOSTILE_SPECS[:3])
def test_2_export_cli_with_a_hostile_model(fake_chain, paper, tmp_path, spec):
    w, s = paper
    out = tmp_path / "train.py"
    code, _, err = invoke("export", s, "-w", w, "--to", "torch-pipelining", "--model", spec, "-o", out)
    assert code == 0, err
    assert _spec_constant(out.read_text()) == spec


def write_tmp_workload() -> Path:
    import tempfile

    return write(Path(tempfile.mkdtemp()) / "w.json", GOOD)


# ------------------------------------------------------------------ item 11: every flag on a Piper input
PIPER_FLAGS = {
    "solve": [(["--objective", "latency"], "does not optimise"), (["--objective", "fw+bw"], "does not optimise"),
              (["-l", "2"], "cpus applies to"), (["--overlap-comm"], "overlap-comm applies to"),
              (["--gap", "0.1"], "does not take --gap"), (["--threads", "2"], "does not take --threads"),
              (["--contract-layers"], "does not take"), (["--linearize"], "does not take"),
              (["--no-contiguous-cpus"], "does not take"), (["--subgraphs-per-accelerator", "2"], "does not take"),
              (["--seed", "1"], "does not take"), (["--restarts", "2"], "does not take"),
              (["-m", "dp"], "plans a workload in the paper's format"), (["--memory", "inf"], "finite"),
              (["--bandwidth", "inf"], "finite"), (["--memory", "nan"], "finite"), (["--bert-layers", "40"],
                                                                                  "bert32a100")],
    "evaluate": [(["--overlap-comm"], "overlap-comm applies to")],
    "simulate": [(["--schedule", "gpipe"], "schedule applies to"), (["--overlap-comm"], "overlap-comm applies to"),
                 (["--trace", "{t}"], "--trace applies to"), (["--memory", "inf"], "finite")],
    "report": [(["-n", "3"], "microbatches applies to"), (["--schedule", "gpipe"], "schedule applies to"),
               (["--bandwidth", "inf"], "finite")],
}
PIPER_USED = {
    "solve": [["--max-ideals", "5"], ["-k", "2"], ["--memory", "200"], ["--bandwidth", "2"], ["--batch", "2"],
              ["--time-limit", "10"], ["--json"], ["-q"], ["--report", "{t}"], ["-m", "piper"]],
    "evaluate": [["--json"], ["-k", "2"], ["--memory", "200"], ["--bandwidth", "2"], ["--batch", "1"]],
    "simulate": [["--json"], ["-n", "3"], ["-k", "2"], ["--memory", "200"], ["--bandwidth", "2"], ["--batch", "1"]],
    "report": [["-o", "{t}"], ["-k", "2"], ["--memory", "200"], ["--bandwidth", "2"], ["--batch", "1"]],
}


def _piper_args(command: str, toy: Path, plan: Path) -> list:
    return [command, toy] if command == "solve" else [command, toy, plan]


@pytest.mark.parametrize("command,flags,needle", [(c, f, n) for c, cases in PIPER_FLAGS.items() for f, n in cases])
def test_11_piper_flags_that_do_not_apply_are_refused(piper, tmp_path, command, flags, needle):
    toy, plan = piper
    out = tmp_path / "out.file"
    extra = ["-o", tmp_path / "r.html"] if command == "report" else []
    clean_error(*invoke(*_piper_args(command, toy, plan), *[f.format(t=out) for f in flags], *extra), needle)
    assert not out.exists() and not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("command,flags", [(c, f) for c, cases in PIPER_USED.items() for f in cases])
def test_11_piper_flags_that_apply_are_used(piper, tmp_path, command, flags):
    toy, plan = piper
    out = tmp_path / "out.file"
    extra = ["-o", tmp_path / "r.html"] if command == "report" and "-o" not in flags else []
    code, stdout, err = invoke(*_piper_args(command, toy, plan), *[f.format(t=out) for f in flags], *extra)
    assert code == 0, err
    if "{t}" in flags:
        assert out.exists()
    if command == "solve" and flags[0] in ("-k", "--memory", "--bandwidth", "--batch"):
        code, stdout, err = invoke("solve", toy, *flags, "--json")
        key = {"-k": "maxDevices", "--memory": "maxMemoryPerDevice", "--bandwidth": "bandwidth",
               "--batch": "mbsInBatch"}[flags[0]]
        assert json.loads(stdout)["instance"][key] == float(flags[1])


def test_11_no_infinity_in_json(tmp_path):
    doc = json.loads(json.dumps(GOOD))
    for node in doc["nodes"]:
        node["fpgaLatency"] = node["cpuLatency"] = 0.0
    for edge in doc["edges"]:
        edge["cost"] = 0.0
    w = write(tmp_path / "zero.json", doc)
    s = tmp_path / "s.json"
    code, out, err = invoke("solve", w, "-o", s, "--json")
    assert code == 0, err
    assert "Infinity" not in out and "NaN" not in out and "Infinity" not in s.read_text()
    code, out, err = invoke("simulate", w, s, "--json")
    assert code == 0, err
    assert "Infinity" not in out and json.loads(out)["throughput"] is None
    code, out, err = invoke("evaluate", w, s, "--json")
    assert code == 0 and "Infinity" not in out, err


# ------------------------------------------------------------------ item 13: smaller ones
def test_13_split_recording_overlap_comm_is_noted(paper, tmp_path):
    w, _ = paper
    s = tmp_path / "ov.json"
    code, _, err = invoke("solve", w, "--overlap-comm", "-o", s, "-q")
    assert code == 0 and json.loads(s.read_text())["overlapComm"] is True, err
    for command in ("evaluate", "simulate"):
        code, out, err = invoke(command, w, s)
        assert code == 0 and "overlapComm: true; judged without overlap" in err, err
        code, out, err = invoke(command, w, s, "--overlap-comm")
        assert code == 0 and err == "", err


@pytest.mark.parametrize("options", [{"microbatches": 0}, {"microbatches": -3}, {"microbatches": 2.5},
                                     {"microbatches": True}, {"schedule": "x"}, {"schedule": 5}])
def test_13_write_report_and_simulate_validate(tmp_path, options):
    w = dnnplace.load(write(tmp_path / "w.json", GOOD))
    split = paper_json.parse_split(SPLIT)
    with pytest.raises(DnnplaceError):
        dnnplace.write_report(w, split, tmp_path / "r.html", **options)
    with pytest.raises(DnnplaceError):
        dnnplace.simulate(w, split, **options)
    assert not (tmp_path / "r.html").exists()


BAD_INSTANCES = [None, Path("w.json"), "w.json", 3, {}]


@pytest.mark.parametrize("bad", BAD_INSTANCES, ids=repr)
def test_13_api_wants_an_instance(tmp_path, bad):
    w = dnnplace.load(write(tmp_path / "w.json", GOOD))
    split = paper_json.parse_split(SPLIT)
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


def test_13_node_twice_on_one_device_is_refused(paper, tmp_path):
    w, _ = paper
    s = write(tmp_path / "dup.json", {"fpgas": [{"nodes": [1, 1, 2]}, {"nodes": [3]}], "cpus": []})
    for command in ("evaluate", "simulate"):
        clean_error(*invoke(command, w, s), "fpgas[0]: node id 1 is listed twice on this device")


@pytest.mark.parametrize("args", [["info", "{p}"], ["compare", "{p}", "--methods", "single"],
                                  ["export", "{s}", "-w", "{p}"]])
def test_13_piper_file_given_to_a_paper_only_command(paper, args):
    _, s = paper
    line = clean_error(*invoke(*(a.format(p=TOY, s=s) for a in args)), "a Piper workload")
    assert "maxSizePerFPGA" not in line


# ------------------------------------------------------------------ item 12: SIGTERM / SIGHUP behave as SIGINT
def _signal_solve(tmp_path: Path, sig: int, args: list, after: float) -> None:
    import signal
    import time

    out = write(tmp_path / "out.json", {"old": True})
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # the signal back to its default in the child: under nohup (or a job control that ignores it) the child
    # inherits SIG_IGN for SIGHUP, and dnnplace rightly keeps ignoring it, as nohup asks
    proc = subprocess.Popen([sys.executable, "-m", "dnnplace", "solve", *map(str, args), "-o", str(out), "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    time.sleep(after)
    if proc.poll() is not None:
        pytest.skip("the solve finished before the signal")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert len(err.strip().splitlines()) == 1 and "terminated" in err, err
    assert json.loads(out.read_text()) == {"old": True}
    assert sorted(os.listdir(tmp_path)) == ["out.json"]


@pytest.mark.timing
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_12_sigterm_and_sighup_stop_a_dp_solve_cleanly(tmp_path, signame):
    import signal

    big = DATA / "paper" / "throughput-inputs" / "LayerGraphs" / "inceptionv3_training.json"
    # --time-limit 60: the signal lands in the exact DP (the default budget stops it after 2.6 s for the IP)
    _signal_solve(tmp_path, getattr(signal, signame), [big, "--max-ideals", "5000000", "--time-limit", "60"], 4.0)


@pytest.mark.timing
def test_12_sigterm_stops_an_ip_solve(tmp_path):
    import signal

    big = DATA / "paper" / "throughput-inputs" / "OperatorGraphs" / "bert_L-12_training.json"
    _signal_solve(tmp_path, signal.SIGTERM, [big, "--method", "ip", "--time-limit", "120"], 6.0)


def test_12_sigterm_while_writing_removes_the_temporary_file(tmp_path, monkeypatch):
    import signal

    from dnnplace.cli import console as cli_app
    from dnnplace.utils import files

    w = write(tmp_path / "w.json", GOOD)
    s = write(tmp_path / "s.json", SPLIT)
    real_write = os.write

    def slow(fd: int, data) -> int:  # the signal arrives in the middle of writing the trace
        if fd > 2:
            cli_app._terminate(signal.SIGTERM, None)
        return real_write(fd, data)

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    monkeypatch.setattr(files.os, "write", slow)
    try:
        code, out, err = invoke("simulate", w, s, "--trace", tmp_path / "t.json")
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        cli_app._TERMINATED_BY[0] = 0
    assert code == 128 + signal.SIGTERM and err.strip() == "terminated (SIGTERM)", (code, err)
    assert sorted(os.listdir(tmp_path)) == ["s.json", "w.json"]


@pytest.mark.slow
@pytest.mark.skipif(not (Path(SRC).parent / "examples" / "mlp_skip.py").exists(), reason="needs the examples")
def test_12_sigterm_during_run_leaves_no_temp_dir(tmp_path):
    import signal
    import time

    pytest.importorskip("torch")
    root = Path(SRC).parent
    tmp = tmp_path / "tmp"  # this run's own temporary folder: other runs on the machine use theirs
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "TMPDIR": str(tmp)}
    w = tmp_path / "w.json"
    r = subprocess.run([sys.executable, "-m", "dnnplace", "profile", "examples/mlp_skip.py:build", "-o", str(w),
                        "--device", "a100", "--repeats", "1"], cwd=root, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    split = tmp_path / "s.json"
    assert subprocess.run([sys.executable, "-m", "dnnplace", "solve", str(w), "-o", str(split), "-q"], env=env,
                          timeout=300).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "dnnplace", "run", "examples/mlp_skip.py:build", str(split),
                             "-w", str(w), "--training", "--steps", "100000", "-n", "64"], cwd=root, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(tmp.glob("dnnplace-run-*")):
        time.sleep(0.2)
    time.sleep(2.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "leaked semaphore" not in err and "Traceback" not in err, err
    assert list(tmp.glob("dnnplace-run-*")) == [], sorted(os.listdir(tmp))


# ------------------------------------------------------------------ item 3: info on a long chain
def test_3_series_count_matches_brute_force():
    import random

    from dnnplace.solvers.dp.lattice_info import count_ideals_series

    rng = random.Random(1)
    for _ in range(500):
        n = rng.randint(1, 8)
        edges = sorted({tuple(sorted(rng.sample(range(n), 2))) for _ in range(rng.randint(0, 2 * n))} if n > 1
                       else set())
        if rng.random() < 0.3:
            edges = sorted(set(edges) | {(i, i + 1) for i in range(n - 1)})
        brute = sum(all(not mask >> b & 1 or mask >> a & 1 for a, b in edges) for mask in range(1 << n))
        got = count_ideals_series(n, [a for a, _ in edges], [b for _, b in edges], 10**9)
        assert got == brute, (n, edges)


def write_chain(path: Path, n: int) -> Path:
    """A chain of ``n`` nodes as a user writes it compactly: the required fields only, no whitespace."""
    node = '{{"id":{},"fpgaLatency":1,"cpuLatency":2,"supportedOnFpga":1,"isBackwardNode":0}}'
    edge = '{{"sourceId":{},"destId":{},"cost":0.5}}'
    with open(path, "w", encoding="ascii") as fh:
        fh.write('{"maxSizePerFPGA":1e9,"maxFPGAs":4,"maxCPUs":1,"nodes":[')
        fh.write(",".join(map(node.format, range(n))))
        fh.write('],"edges":[')
        fh.write(",".join(edge.format(i, i + 1) for i in range(n - 1)))
        fh.write("]}")
    return path


def test_3_info_on_a_60k_chain(tmp_path):
    """Large enough for the compiled loops and the series count (over 50,000 units), fast enough for every run."""
    code, out, err = invoke("info", write_chain(tmp_path / "chain.json", 60_000))
    assert code == 0, err
    assert out.count("60000 units, 60,001 ideals") == 3, out


@pytest.mark.slow
def test_3_info_on_a_2m_chain(tmp_path):
    """The issue's case: 2 M nodes (under the 256 MiB input cap) in at most 60 s of CPU and 2 GiB."""
    from dnnplace.utils.files import MAX_FILE_BYTES

    path = write_chain(tmp_path / "chain.json", 2_000_000)
    assert path.stat().st_size <= MAX_FILE_BYTES
    # a parent of its own, so that its children's usage is this command's alone
    meter = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]);"
             " u = resource.getrusage(resource.RUSAGE_CHILDREN);"
             " print('usage', u.ru_utime + u.ru_stime, u.ru_maxrss); sys.exit(r.returncode)")
    r = subprocess.run([sys.executable, "-c", meter, sys.executable, "-m", "dnnplace", "info", str(path)],
                       text=True, capture_output=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("2000000 units, more than 1,000,000 ideals") == 3, r.stdout
    cpu_s, rss_kib = map(float, r.stdout.split("usage ")[-1].split())
    assert cpu_s <= 60 and rss_kib <= 2 * 2**20, (cpu_s, rss_kib)
