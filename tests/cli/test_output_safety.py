"""What the CLI writes: only through the safe writer -- fresh private temp files, no links
followed, only regular files replaced, never an input, a complete file under concurrent writers.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from hostile import SRC, clean_error, cli, invoke, snapshot, write

from dnnplace.utils.files import write_text_atomic


def test_a_planted_temp_symlink_is_not_followed(tmp_path, files):
    w, _ = files
    victim = write(tmp_path / "victim.txt", "precious\n")
    for name in (".out.json.tmp", "out.json.tmp", ".out.json.swp", "out.json~"):
        os.symlink(victim, tmp_path / name)
    before = snapshot(tmp_path)
    code, out, err = invoke("solve", w, "-o", tmp_path / "out.json", "-q")
    assert code == 0, err
    assert victim.read_text() == "precious\n"
    assert json.loads((tmp_path / "out.json").read_text())["maxLoad"] == 3.5
    after = snapshot(tmp_path)
    assert set(after) - set(before) == {str(tmp_path / "out.json")}  # no temp file left behind
    assert all(after[k] == before[k] for k in before)


def test_the_temp_file_has_a_fresh_private_name(tmp_path, monkeypatch):
    made = []
    real = tempfile.mkstemp

    def spy(*a, **kw):
        fd, name = real(*a, **kw)
        made.append(name)
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", spy)
    write_text_atomic(tmp_path / "o.txt", "one")
    write_text_atomic(tmp_path / "o.txt", "two")
    assert len(set(made)) == 2 and all(Path(n).parent == tmp_path for n in made)
    assert (tmp_path / "o.txt").read_text() == "two" and sorted(os.listdir(tmp_path)) == ["o.txt"]


@pytest.mark.parametrize("kind", ["symlink", "dangling symlink", "directory", "fifo", "dev/null"])
def test_an_output_that_is_not_a_regular_file_is_refused(kind, tmp_path, files):
    w, _ = files
    target = tmp_path / "out.json"
    victim = write(tmp_path / "victim.txt", "precious\n")
    if kind == "symlink":
        os.symlink(victim, target)
    elif kind == "dangling symlink":
        os.symlink(tmp_path / "nowhere", target)
    elif kind == "directory":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target = Path(os.devnull)
    before = os.lstat(target)
    line = clean_error(*invoke("solve", w, "-o", target, "-q"), "not a regular file")
    assert {"symlink": "symbolic link", "dangling symlink": "symbolic link", "directory": "directory",
            "fifo": "FIFO", "dev/null": "character device"}[kind] in line
    after = os.lstat(target)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "nowhere").exists()


def test_every_writer_refuses_a_symlink(tmp_path, files):
    w, s = files
    victim = write(tmp_path / "victim.txt", "precious\n")
    link = tmp_path / "link"
    os.symlink(victim, link)
    for args in (["solve", w, "-o", link], ["solve", w, "--report", link], ["simulate", w, s, "--trace", link],
                 ["report", w, s, "-o", link], ["export", s, "-w", w, "-o", link],
                 ["compare", w, "--methods", "single", "-o", link]):
        clean_error(*invoke(*args), "symbolic link")
        assert victim.read_text() == "precious\n" and link.is_symlink()


@pytest.mark.timing
def test_concurrent_writers_each_end_with_a_complete_file(tmp_path):
    target = tmp_path / "out.json"
    payloads = [json.dumps({"writer": i, "pad": "x" * (200_000 + i)}) for i in range(6)]
    errors: list[BaseException] = []
    seen: list[str] = []
    stop = threading.Event()

    def writer(i: int) -> None:
        try:
            for _ in range(15):
                write_text_atomic(target, payloads[i])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def reader() -> None:
        while not stop.is_set():
            try:
                seen.append(target.read_text())
            except FileNotFoundError:
                pass

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(len(payloads))]
    r = threading.Thread(target=reader)
    r.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    r.join()
    assert not errors
    assert target.read_text() in payloads
    assert all(text in payloads for text in seen)  # never a torn file
    assert os.listdir(tmp_path) == ["out.json"]


@pytest.mark.timing
def test_concurrent_solves_to_one_output(tmp_path, files):
    w, _ = files
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs = [subprocess.Popen([sys.executable, "-m", "dnnplace", "solve", str(w), "-o", str(out), "-q",
                               "--method", m], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for m in ("single", "local-search", "single", "local-search")]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs), results
    assert json.loads(out.read_text())["fpgas"]
    assert sorted(os.listdir(tmp_path)) == ["out.json", "s.json", "w.json"]


def test_an_output_equal_to_an_input_is_refused(tmp_path, files):
    w, s = files
    os.link(w, tmp_path / "hard.json")
    os.symlink(w, tmp_path / "soft.json")
    (tmp_path / "sub").mkdir()
    before = snapshot(tmp_path)
    cases = [
        ["solve", w, "-o", w],
        ["solve", w, "-o", tmp_path / "sub" / ".." / "w.json"],
        ["solve", w, "-o", tmp_path / "hard.json"],
        ["solve", tmp_path / "soft.json", "-o", w],
        ["solve", w, "--report", w],
        ["solve", w, "-o", tmp_path / "new.json", "--report", tmp_path / "new.json"],
        ["report", w, s, "-o", s],
        ["report", w, s, "-o", w],
        ["simulate", w, s, "--trace", s],
        ["export", s, "-w", w, "-o", w],
        ["compare", w, "--methods", "single", "-o", w],
    ]
    for args in cases:
        clean_error(*invoke(*args))
        assert snapshot(tmp_path) == before, args


def test_a_directory_at_the_old_temp_path_is_no_obstacle(tmp_path, files):
    w, _ = files
    (tmp_path / ".out.json.tmp").mkdir()
    code, _, err = invoke("solve", w, "-o", tmp_path / "out.json", "-q")
    assert code == 0, err
    assert json.loads((tmp_path / "out.json").read_text())["maxLoad"] == 3.5
    assert (tmp_path / ".out.json.tmp").is_dir()


def test_replacing_a_file_keeps_its_permissions(tmp_path):
    target = write(tmp_path / "o.txt", "old")
    os.chmod(target, 0o640)
    write_text_atomic(target, "new")
    assert target.read_text() == "new" and stat.S_IMODE(os.stat(target).st_mode) == 0o640
    fresh = tmp_path / "fresh.txt"
    write_text_atomic(fresh, "x")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o666 & ~mask


def test_piper_solve_output_is_the_workload(piper):
    toy, _ = piper
    before = toy.read_bytes()
    clean_error(*invoke("solve", toy, "-o", toy), "refusing to overwrite it")
    clean_error(*invoke("solve", toy, "--report", toy), "refusing to overwrite it")
    assert toy.read_bytes() == before


def test_piper_report_output_is_the_plan(piper):
    toy, plan = piper
    before = plan.read_bytes()
    clean_error(*invoke("report", toy, plan, "-o", plan), "refusing to overwrite it")
    clean_error(*invoke("report", toy, plan, "-o", toy), "refusing to overwrite it")
    assert plan.read_bytes() == before


def test_piper_outputs_never_follow_a_link(piper, tmp_path):
    toy, plan = piper
    target = write(tmp_path / "target.txt", "precious")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    clean_error(*invoke("report", toy, plan, "-o", link), "is a symbolic link")
    clean_error(*invoke("solve", toy, "-o", link), "is a symbolic link")
    clean_error(*invoke("solve", toy, "-o", tmp_path / "p.json", "--report", link), "is a symbolic link")
    assert target.read_text() == "precious" and link.is_symlink()


def test_piper_output_fifo_does_not_hang(piper, tmp_path):
    toy, plan = piper
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # a subprocess with a timeout: opening a FIFO for writing would block forever
    r = cli("report", toy, plan, "-o", fifo, timeout=60)
    clean_error(r.returncode, r.stdout, r.stderr, "is a FIFO")
    r = cli("solve", toy, "-o", fifo, timeout=60)
    clean_error(r.returncode, r.stdout, r.stderr, "is a FIFO")


def test_full_disk_keeps_the_old_piper_report_and_plan(piper, tmp_path, monkeypatch):
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
