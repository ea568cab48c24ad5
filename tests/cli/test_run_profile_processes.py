"""``run`` and ``profile`` as processes: workers end with the command and listen on loopback only;
a factory that exits is an error, not a success.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from hostile import LOOPBACK, TINY, _dnnplace, _env, _group, _listening


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")
def test_killing_run_leaves_no_workers_and_workers_listen_on_loopback(tmp_path):
    pytest.importorskip("torch")
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


@pytest.mark.slow
@pytest.mark.parametrize("body", ["sys.exit(0)", "sys.exit()", "raise SystemExit(3)"])
@pytest.mark.parametrize("command", ["profile", "run"])
def test_factory_calling_sys_exit_is_an_error(tmp_path, body, command):
    pytest.importorskip("torch")
    (tmp_path / "bad.py").write_text(f"import sys\n\n\ndef build():\n    {body}\n")
    (tmp_path / "split.json").write_text('{"fpgas": [{"nodes": [0]}], "cpus": []}')
    args = ["-o", "w.json"] if command == "profile" else ["split.json"]
    res = _dnnplace(command, "bad.py:build", *args, cwd=tmp_path)
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "sys.exit" in lines[0], res.stderr
    assert not (tmp_path / "w.json").exists()


@pytest.mark.slow
def test_sys_exit_at_import_is_an_error(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "bad.py").write_text("import sys\nsys.exit(0)\n")
    res = _dnnplace("profile", "bad.py:build", "-o", "w.json", cwd=tmp_path)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
