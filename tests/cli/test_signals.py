"""Ctrl-C, SIGTERM and SIGHUP stop a solve cleanly: exit code, no traceback, no temp files left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import throughput_path
from hostile import BARE_SPLIT, DATA, GOOD, SRC, _interrupt, _signal_solve, invoke, write

import dnnplace


@pytest.mark.timing
def test_ctrl_c_stops_an_ip_solve(tmp_path):
    # the root LP of this IP alone takes many seconds; HiGHS polls for cancellation only between phases
    _interrupt([throughput_path("OperatorGraphs/bert_L-12_training"), "--method", "ip", "--time-limit", "120"],
               6.0, tmp_path)


@pytest.mark.timing
def test_ctrl_c_stops_a_dp_solve(tmp_path):
    _interrupt([throughput_path("LayerGraphs/inceptionv3_training"), "--max-ideals", "5000000"], 4.0, tmp_path)


@pytest.mark.timing
def test_ctrl_c_stops_a_piper_solve(tmp_path):
    # Piper's DP runs in one kernel call, in a thread of its own: Ctrl-C asks it to stop between tails.
    # 0.8 GiB makes the solve take ~10 s on this machine (1.2 GiB: ~2 s, so the signal could meet its exit)
    gnmt = Path(dnnplace.__file__).parent / "data" / "piper" / "inputs" / "gnmt.json"
    _interrupt([gnmt, "-k", "8", "--memory", str(0.8 * 2**30)], 2.0, tmp_path)


@pytest.mark.timing
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_stop_a_dp_solve_cleanly(tmp_path, signame):

    big = DATA / "paper" / "throughput-inputs" / "LayerGraphs" / "inceptionv3_training.json"
    # --time-limit 60: the signal lands in the exact DP (the default budget stops it after 2.6 s for the IP)
    _signal_solve(tmp_path, getattr(signal, signame), [big, "--max-ideals", "5000000", "--time-limit", "60"], 4.0)


@pytest.mark.timing
def test_sigterm_stops_an_ip_solve(tmp_path):

    big = DATA / "paper" / "throughput-inputs" / "OperatorGraphs" / "bert_L-12_training.json"
    _signal_solve(tmp_path, signal.SIGTERM, [big, "--method", "ip", "--time-limit", "120"], 6.0)


def test_sigterm_while_writing_removes_the_temporary_file(tmp_path, monkeypatch):

    from dnnplace.cli import console as cli_app
    from dnnplace.utils import files

    w = write(tmp_path / "w.json", GOOD)
    s = write(tmp_path / "s.json", BARE_SPLIT)
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
def test_sigterm_during_run_leaves_no_temp_dir(tmp_path):

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
