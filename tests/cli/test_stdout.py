"""What reaches stdout: errors on a full or closed stream, plain line ends, no Infinity in JSON."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from hostile import GOOD, clean_error, cli, invoke, write


@pytest.mark.parametrize("args", [["methods"], ["solve", "{w}", "--json"], ["solve", "{w}"], ["info", "{w}"]])
def test_stdout_on_dev_full_is_one_line_exit_2(paper, args):
    w, _ = paper
    with open("/dev/full", "w") as full:
        r = cli(*(a.format(w=w) for a in args), stdout=full, stderr=subprocess.PIPE)
    clean_error(r.returncode, "", r.stderr, "cannot write to standard output (No space left on device)")


def test_ascii_stdout_with_non_ascii_paths(tmp_path):
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


@pytest.mark.parametrize("args", [["solve", "{w}", "--json"], ["evaluate", "{w}", "{s}", "--json"],
                                  ["simulate", "{w}", "{s}", "--json"], ["info", "{w}"], ["methods"],
                                  ["compare", "{w}", "--methods", "dp,single"], ["solve", "{w}"]])
def test_columns_0_still_prints(paper, args):
    w, s = paper
    r = cli(*(a.format(w=w, s=s) for a in args), env={"COLUMNS": "0"})
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
    if "--json" in args:
        json.loads(r.stdout)


@pytest.mark.parametrize("args", [["solve", "{w}", "--json"], ["solve", "{w}"], ["evaluate", "{w}", "{s}"],
                                  ["methods"], ["compare", "{w}", "--methods", "single"]])
def test_closed_stdout_is_an_error(paper, args):
    w, s = paper
    r = cli(*(a.format(w=w, s=s) for a in args), stdout=None, stderr=subprocess.PIPE,
            preexec_fn=lambda: os.close(1))
    clean_error(r.returncode, "", r.stderr, "standard output")


def test_closed_stdout_is_fine_when_nothing_is_printed(paper, tmp_path):
    w, _ = paper
    r = cli("solve", w, "-q", "-o", tmp_path / "o.json", stdout=None, stderr=subprocess.PIPE,
            preexec_fn=lambda: os.close(1))
    assert r.returncode == 0 and r.stderr == "" and (tmp_path / "o.json").exists()


def test_compare_csv_on_stdout_has_plain_line_ends(paper, tmp_path):
    w, _ = paper
    code, out, err = invoke("compare", w, "--methods", "dp,single", "--format", "csv")
    assert code == 0, err
    assert "\\x0d" not in out and "\r" not in out
    lines = out.strip().split("\n")
    assert lines[0].startswith("workload,method,") and len(lines) == 3
    code, _, err = invoke("compare", w, "--methods", "dp,single", "--format", "csv", "-o", tmp_path / "t.csv")
    assert code == 0 and (tmp_path / "t.csv").read_bytes().count(b"\r\n") == 3


def test_no_infinity_in_json(tmp_path):
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
