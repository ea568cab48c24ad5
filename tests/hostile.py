"""Shared inputs and checks of the CLI tests on hostile and careless input (imported by name)."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT
from hypothesis import strategies as st
from typer.testing import CliRunner

import dnnplace
from dnnplace.cli.app import app

"""Hostile and careless input (issue 13): safe writes, literal text, range checks, clean errors, Ctrl-C.

Each test names the item of the issue it reproduces.  Most run the CLI in
process (typer's CliRunner); the ones that need a real process (signals,
concurrent writers, terminal bytes) run ``python -m dnnplace``.
"""


GOOD = {
    "maxSizePerFPGA": 10.0, "maxFPGAs": 2, "maxCPUs": 1,
    "nodes": [
        {"id": 1, "name": "a", "fpgaLatency": 1.0, "cpuLatency": 5.0, "supportedOnFpga": 1, "isBackwardNode": 0,
         "size": 1.0},
        {"id": 2, "name": "b", "fpgaLatency": 2.0, "cpuLatency": 6.0, "supportedOnFpga": 1, "isBackwardNode": 0,
         "size": 1.0},
        {"id": 3, "name": "c", "fpgaLatency": 2.0, "cpuLatency": 6.0, "supportedOnFpga": 1, "isBackwardNode": 0,
         "size": 1.0},
    ],
    "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5}, {"sourceId": 2, "destId": 3, "cost": 0.5}],
}


SPLIT = {"maxLoad": 3.5, "fpgas": [{"load": 3.5, "nodes": [1, 2]}, {"load": 2.5, "nodes": [3]}], "cpus": [],
         "method": "dp", "objective": "throughput", "status": "optimal", "runtime_s": 0.1, "bound": 3.5, "gap": 0.0}


SRC = str(Path(dnnplace.__file__).resolve().parents[1])


def invoke(*args: object) -> tuple[int, str, str]:
    """Run the CLI in this process: (exit code, stdout, stderr); a leaked exception fails the test."""
    result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args}: leaked {result.exception!r}") from result.exception
    return result.exit_code, result.stdout, result.stderr


def clean_error(code: int, stdout: str, stderr: str, needle: str = "") -> str:
    """Exit 2, exactly one line on stderr (containing ``needle``), no traceback."""
    assert code == 2, (code, stdout, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stdout + stderr and "internal error" not in stderr
    assert needle in lines[0], lines[0]
    return lines[0]


def write(path: Path, doc: object) -> Path:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def snapshot(folder: Path) -> dict[str, tuple[int, bytes | str]]:
    """Every entry under ``folder`` (not following links): kind and content."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st_ = os.lstat(p)
        if stat.S_ISLNK(st_.st_mode):
            out[str(p)] = (st_.st_mode, os.readlink(p))
        elif stat.S_ISREG(st_.st_mode):
            out[str(p)] = (st_.st_mode, p.read_bytes())
        else:
            out[str(p)] = (stat.S_IFMT(st_.st_mode), b"")
    return out


RUNTIME_ROOT = ROOT


TINY = """
import torch
from torch import nn


def build():
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8)), (torch.randn(32, 64),)
"""


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(RUNTIME_ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("GLOO_SOCKET_IFNAME", None)
    return env


def _dnnplace(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dnnplace", *args], capture_output=True, text=True, cwd=cwd,
                          env=_env(), timeout=300)


def _group(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry))
    return out


def _listening(pids: list[int]) -> list[str]:
    """Local addresses of the TCP sockets these processes listen on (hex as in /proc/net/tcp*)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:  # 0A: LISTEN
                out.append(parts[1].split(":")[0])
    return out


LOOPBACK = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1


def _huge(value: float) -> dict:
    """All-CPU max-load 5 exists; the accelerator times and the transfer costs are ``value``."""
    doc = copy.deepcopy(GOOD)
    for nd, cpu in zip(doc["nodes"], (1.0, 2.0, 2.0), strict=True):
        nd["fpgaLatency"], nd["cpuLatency"] = value, cpu
    for e in doc["edges"]:
        e["cost"] = value
    return doc


NASTY = "\x1b]0;pwned\x07\x1b[31mred\x9b2J\u202eevil\r\n"


needs_dot = pytest.mark.skipif(not __import__("shutil").which("dot"), reason="Graphviz dot not installed")


LABELS = ["x\\", "\\N\\G\\L", 'a"b', "&amp;", "<b>&", 'q\\"', "\\\\", "\\E\\T\\H\\n\\l\\r", "é中", "\x1b[31m"]


def _with(path: list, value: object) -> dict:
    doc = copy.deepcopy(GOOD)
    obj = doc
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value
    return doc


BAD_NUMBERS = {
    "id 2**70": (_with(["nodes", 0, "id"], 2**70),
                 "'id' is 1180591620717411303424, outside the limit of 9,007,199,254,740,992"),
    "id 1e20": (_with(["nodes", 0, "id"], 1e20), "'id' is 100000000000000000000, outside the limit"),
    "edge id 2**64": (_with(["edges", 0, "sourceId"], 2**64), "'sourceId'"),
    "colorClass 2**63": (_with(["nodes", 0, "colorClass"], 2**63), "'colorClass'"),
    "layerId -2**70": (_with(["nodes", 0, "layerId"], -(2**70)), "'layerId'"),
    "maxFPGAs 1e30": (_with(["maxFPGAs"], 1e30), "'maxFPGAs'"),
    "maxCPUs 10**7": (_with(["maxCPUs"], 10**7), "'maxCPUs' is 10000000, outside the limit of 1,000,000"),
    "size 1e300": (_with(["nodes", 1, "size"], 1e300), "'size' is 1e+300, larger than the limit"),
    "cost 1e200": (_with(["edges", 1, "cost"], 1e200), "'cost' is 1e+200"),
    "name 5000 chars": (_with(["nodes", 1, "name"], "n" * 5000), "'name' has 5,000 characters"),
}


BAD_SPLITS = {
    "node id 1e400": ('{"fpgas": [{"nodes": [1, 2, 1e400]}], "cpus": []}', "node id Infinity is not an integer"),
    "node id NaN": ('{"fpgas": [{"nodes": [NaN]}], "cpus": []}', "node id NaN is not an integer"),
    "node id 2**80": (json.dumps({"fpgas": [{"nodes": [2**80]}]}), "outside the limit"),
    "gap text": (json.dumps({**SPLIT, "gap": "abc"}), "'gap' must be a number"),
    "bound list": (json.dumps({**SPLIT, "bound": [1]}), "'bound' must be a number"),
    "runtime_s 3 MB": (json.dumps({**SPLIT, "runtime_s": "9" * 3_000_000}), "'runtime_s' must be a number"),
    "method 3 MB": (json.dumps({**SPLIT, "method": "m" * 3_000_000}), "'method' has 3,000,000 characters"),
}


def _interrupt(args: list, after: float, tmp_path: Path) -> None:
    out = write(tmp_path / "out.json", {"old": True})
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # SIGINT back to its default in the child: a shell's background job (`make test-all &`) starts with it
    # ignored, and Python then keeps ignoring it, as a user's `nohup` asks
    proc = subprocess.Popen([sys.executable, "-m", "dnnplace", "solve", *map(str, args), "-o", str(out), "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: lines.extend((time.perf_counter(), ln) for ln in proc.stderr))
    reader.start()
    time.sleep(after)
    if proc.poll() is not None:
        reader.join()
        pytest.skip("the solve finished before the signal")
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    exited = time.perf_counter() - sent
    reader.join()
    assert proc.returncode == 130, lines
    assert [ln.strip() for _, ln in lines] == ["interrupted"]
    answered = lines[0][0] - sent
    assert answered < 2.0, answered  # "within a second", with slack for a loaded CI machine
    assert exited < 10.0, exited  # the interpreter's own exit is not the solver's
    assert json.loads(out.read_text()) == {"old": True}
    assert sorted(os.listdir(tmp_path)) == ["out.json"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


WORKLOAD_PATHS = ([["maxSizePerFPGA"], ["maxFPGAs"], ["maxCPUs"], ["nodes"], ["edges"]]
                  + [["nodes", i, k] for i in range(3) for k in ("id", "name", "fpgaLatency", "cpuLatency", "size",
                                                                  "supportedOnFpga", "isBackwardNode",
                                                                  "colorClass", "layerId")]
                  + [["nodes", 1]] + [["edges", j, k] for j in range(2) for k in ("sourceId", "destId", "cost")])


SPLIT_PATHS = ([["fpgas"], ["cpus"], ["fpgas", 0], ["fpgas", 0, "nodes"], ["fpgas", 0, "nodes", 1],
                ["fpgas", 1, "nodes", 0], ["gap"], ["bound"], ["runtime_s"], ["method"], ["status"], ["maxLoad"]])


@st.composite
def contents(draw, base: dict, paths: list) -> bytes:
    """Random bytes, a random JSON value, or the valid document with some fields replaced or deleted."""
    how = draw(st.sampled_from(["bytes", "json", "mutate", "mutate", "mutate"]))
    if how == "bytes":
        return draw(st.binary(max_size=200))
    if how == "json":
        return json.dumps(draw(JSON)).encode()
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        obj = doc
        try:
            for key in path[:-1]:
                obj = obj[key]
            if draw(st.booleans()) and isinstance(obj, dict):
                obj.pop(path[-1], None)
            else:
                obj[path[-1]] = draw(JSON)
        except (KeyError, IndexError, TypeError):
            pass
    return json.dumps(doc).encode()


PIPER_TOY = json.loads((Path(dnnplace.__file__).parent / "data" / "piper" / "toys" / "toy_a_knapsack.json")
                       .read_text())


PIPER_PLAN = {"format": "dnnplace-piper-plan", "timePerSample": 5.0, "status": "optimal", "bound": 5.0, "gap": 0.0,
              "stages": [{"nodes": [0, 1, 2], "dataParallelDegree": 1, "tensorParallelDegree": 1,
                          "tmpcs": {"0": "vanilla", "1": "activation recomp", "2": "vanilla"}}],
              "instance": {"maxDevices": 1, "maxMemoryPerDevice": 109.0, "bandwidth": 1.0, "mbsInBatch": 1,
                           "nodes": 3}}


PIPER_PATHS = ([["maxDevices"], ["maxMemoryPerDevice"], ["bandwidth"], ["mbsInBatch"], ["nodes"], ["edges"],
                ["nodes", 1], ["nodes", 0, "id"], ["nodes", 1, "TMPCs"], ["nodes", 1, "TMPCs", "1"],
                ["nodes", 1, "TMPCs", "1", 0], ["edges", 0]]
               + [["nodes", 1, "TMPCs", "1", 0, k] for k in ("id", "timePerSample", "parameterSize",
                                                             "memoryUsageA", "memoryUsageB", "syncTimeFw",
                                                             "syncTimeBw")])


PIPER_PLAN_PATHS = ([["stages"], ["stages", 0], ["stages", 0, "nodes"], ["stages", 0, "nodes", 1],
                     ["stages", 0, "dataParallelDegree"], ["stages", 0, "tensorParallelDegree"],
                     ["stages", 0, "tmpcs"], ["stages", 0, "tmpcs", "1"], ["instance"]]
                    + [["instance", k] for k in ("maxDevices", "maxMemoryPerDevice", "bandwidth", "mbsInBatch",
                                                 "bertLayers")])


# the bases a command's inputs are mutated from: (workload, plan)
PAPER_BASES = ((GOOD, WORKLOAD_PATHS), (SPLIT, SPLIT_PATHS))


PIPER_BASES = ((PIPER_TOY, PIPER_PATHS), (PIPER_PLAN, PIPER_PLAN_PATHS))


COMMANDS = {
    "piper-solve": ["solve", "{w}", "-o", "{out}", "-q"],
    "piper-solve-overrides": ["solve", "{w}", "-o", "{out}", "-k", "2", "--memory", "200", "--batch", "2", "-q"],
    "piper-evaluate": ["evaluate", "{w}", "{s}", "--json"],
    "piper-evaluate-overrides": ["evaluate", "{w}", "{s}", "-k", "2", "--memory", "50"],
    "piper-simulate": ["simulate", "{w}", "{s}", "-n", "4", "--json"],
    "piper-report": ["report", "{w}", "{s}", "-o", "{out}"],
    "export-pipelining": ["export", "{s}", "-w", "{w}", "--to", "torch-pipelining", "--json", "-o", "{out}"],
    "export-script": ["export", "{s}", "-w", "{w}", "--to", "torch-pipelining", "--model", "m.py:f", "-o", "{out}"],
    "evaluate": ["evaluate", "{w}", "{s}"],
    "solve": ["solve", "{w}", "-o", "{out}", "-q"],
    "solve-ip": ["solve", "{w}", "-o", "{out}", "-q", "--method", "ip", "--time-limit", "5"],
    "simulate": ["simulate", "{w}", "{s}", "-n", "4", "--trace", "{out}"],
    "report": ["report", "{w}", "{s}", "-o", "{out}", "-n", "3"],
    "info": ["info", "{w}"],
    "compare": ["compare", "{w}", "--methods", "dp,single", "-o", "{out}"],
    "export": ["export", "{s}", "-w", "{w}", "-o", "{out}"],
}


"""Hostile and careless input, round 2 (issue 22): each test names the item it reproduces.

Most run the CLI in process (tests/cli_runner.py); the ones whose subject is the process itself
(stdout on /dev/full, a closed stdout, signals, the encoding of the streams) run ``python -m dnnplace``.
"""


DATA = Path(dnnplace.__file__).parent / "data"


TOY = DATA / "piper" / "toys" / "toy_a_knapsack.json"


BARE_SPLIT = {"maxLoad": 3.5, "fpgas": [{"load": 3.5, "nodes": [1, 2]}, {"load": 2.5, "nodes": [3]}], "cpus": []}


def cli(*args: object, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """``python -m dnnplace`` in a subprocess."""
    full = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    if "stdout" not in kw and "stderr" not in kw:
        kw.setdefault("capture_output", True)
    kw.setdefault("timeout", 300)
    return subprocess.run([sys.executable, "-m", "dnnplace", *map(str, args)], text=True, env=full, **kw)


def plan_with(plan: Path, path: list, value: object, name: str = "p2.json") -> Path:
    doc = json.loads(plan.read_text())
    obj = doc
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value
    return write(plan.with_name(name), doc)


GNMT = DATA / "paper" / "throughput-inputs" / "LayerGraphs" / "gnmt_training.json"


TIME_RULE = "--time-limit must be a number of seconds > 0 and <= 1e+09"  # one rule for every --time-limit: solve's


HOSTILE_SPECS = [
    'm.py:f"""\nimport os; os.system("touch /tmp/pwned")\n"""',
    "m.py:f'''\nraise SystemExit(3)\n'''",
    "m.py:f\\\"\\\"\\\" + __import__('os').getcwd() + \"\"\"",
    'a"b\'c\nd\re\x00f\\\\:g',
    "\u202e\u2028m.py:f# }{0}{spec}",
]


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


def write_tmp_workload() -> Path:

    return write(Path(tempfile.mkdtemp()) / "w.json", GOOD)


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


BAD_INSTANCES = [None, Path("w.json"), "w.json", 3, {}]


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


@contextlib.contextmanager
def deadline(seconds: int = 5) -> Iterator[None]:
    """Fail instead of hanging: a command or reader that blocks on a FIFO is the bug under test."""
    def fire(*_: object) -> None:
        raise TimeoutError("blocked")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
