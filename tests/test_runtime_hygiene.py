"""Runtime hygiene (issue #13, items 5 and 11): workers die with `dnnplace run`, listen on loopback only;
a factory that calls sys.exit is a one-line error with exit code 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent

TINY = """
import torch
from torch import nn


def build():
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8)), (torch.randn(32, 64),)
"""


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")
def test_killing_run_leaves_no_workers_and_workers_listen_on_loopback(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    (tmp_path / "split.json").write_text('{"fpgas": [{"nodes": [0, 1]}, {"nodes": [2]}], "cpus": []}')
    proc = subprocess.Popen([sys.executable, "-m", "dnnplace", "run", "tiny.py:build", "split.json", "--training",
                             "-n", "64", "--steps", "100000"], cwd=tmp_path, env=_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        listening: list[str] = []
        while time.monotonic() < deadline:
            workers = [p for p in _group(proc.pid) if p != proc.pid]
            listening = _listening(workers)
            if len(workers) >= 3 and len(listening) >= 2:  # two stages and the resource tracker; gloo is up
                break
            assert proc.poll() is None, "dnnplace run ended early"
            time.sleep(0.2)
        else:
            pytest.fail(f"the workers did not start: {_group(proc.pid)}")
        assert listening and all(a in LOOPBACK for a in listening), listening
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 20
        while _group(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _group(proc.pid) == [], "workers outlived the killed `dnnplace run`"
    finally:
        for pid in _group(proc.pid):  # only this test's own process group
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("body", ["sys.exit(0)", "sys.exit()", "raise SystemExit(3)"])
@pytest.mark.parametrize("command", ["profile", "run"])
def test_factory_calling_sys_exit_is_an_error(tmp_path, body, command):
    (tmp_path / "bad.py").write_text(f"import sys\n\n\ndef build():\n    {body}\n")
    (tmp_path / "split.json").write_text('{"fpgas": [{"nodes": [0]}], "cpus": []}')
    args = ["-o", "w.json"] if command == "profile" else ["split.json"]
    res = _dnnplace(command, "bad.py:build", *args, cwd=tmp_path)
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "sys.exit" in lines[0], res.stderr
    assert not (tmp_path / "w.json").exists()


def test_sys_exit_at_import_is_an_error(tmp_path):
    (tmp_path / "bad.py").write_text("import sys\nsys.exit(0)\n")
    res = _dnnplace("profile", "bad.py:build", "-o", "w.json", cwd=tmp_path)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
