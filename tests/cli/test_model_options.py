"""Options of one model: used where they apply, refused by name where they do not."""

from __future__ import annotations

import json

import pytest
from hostile import PIPER_FLAGS, PIPER_USED, TOY, _piper_args, clean_error, invoke


def test_overrides_apply_to_simulate_and_report(piper, tmp_path):
    toy, plan = piper
    code, out, err = invoke("simulate", toy, plan, "--memory", "50", "--json")
    assert code == 0 and json.loads(out)["time_per_sample"] is None, err
    code, out, err = invoke("report", toy, plan, "-k", "2", "-o", tmp_path / "r.html")
    assert code == 0 and "maxDevices 1 (used: 2" in err, err
    code, out, err = invoke("evaluate", toy, plan)
    assert code == 0 and err == ""  # same parameters: no note


@pytest.mark.parametrize("flag,value", [("-k", "2"), ("--memory", "5"), ("--bandwidth", "3"), ("--batch", "2")])
@pytest.mark.parametrize("command", ["evaluate", "simulate", "report"])
def test_piper_overrides_are_refused_for_paper_workloads(paper, tmp_path, command, flag, value):
    w, s = paper
    extra = ["-o", tmp_path / "r.html"] if command == "report" else []
    clean_error(*invoke(command, w, s, flag, value, *extra), "applies to a Piper workload only")
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("command,flags,needle", [(c, f, n) for c, cases in PIPER_FLAGS.items() for f, n in cases])
def test_piper_flags_that_do_not_apply_are_refused(piper, tmp_path, command, flags, needle):
    toy, plan = piper
    out = tmp_path / "out.file"
    extra = ["-o", tmp_path / "r.html"] if command == "report" else []
    clean_error(*invoke(*_piper_args(command, toy, plan), *[f.format(t=out) for f in flags], *extra), needle)
    assert not out.exists() and not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("command,flags", [(c, f) for c, cases in PIPER_USED.items() for f in cases])
def test_piper_flags_that_apply_are_used(piper, tmp_path, command, flags):
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


def test_split_recording_overlap_comm_is_noted(paper, tmp_path):
    w, _ = paper
    s = tmp_path / "ov.json"
    code, _, err = invoke("solve", w, "--overlap-comm", "-o", s, "-q")
    assert code == 0 and json.loads(s.read_text())["overlapComm"] is True, err
    for command in ("evaluate", "simulate"):
        code, out, err = invoke(command, w, s)
        assert code == 0 and "overlapComm: true; judged without overlap" in err, err
        code, out, err = invoke(command, w, s, "--overlap-comm")
        assert code == 0 and err == "", err


@pytest.mark.parametrize("args", [["info", "{p}"], ["compare", "{p}", "--methods", "single"],
                                  ["export", "{s}", "-w", "{p}"]])
def test_piper_file_given_to_a_paper_only_command(paper, args):
    _, s = paper
    line = clean_error(*invoke(*(a.format(p=TOY, s=s) for a in args)), "a Piper workload")
    assert "maxSizePerFPGA" not in line
