"""Malformed or careless input files: clean errors, never internal ones (and a fuzz over every command)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from hostile import (
    BAD_SPLITS,
    COMMANDS,
    GOOD,
    PAPER_BASES,
    PIPER_BASES,
    SPLIT,
    clean_error,
    contents,
    invoke,
    plan_with,
    snapshot,
    write,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize("case", sorted(BAD_SPLITS))
@pytest.mark.parametrize("command", ["evaluate", "report", "simulate"])
def test_malformed_split_files_are_refused(case, command, tmp_path):
    text, needle = BAD_SPLITS[case]
    w = write(tmp_path / "w.json", GOOD)
    s = write(tmp_path / "s.json", text)
    extra = ["-o", tmp_path / "r.html"] if command == "report" else []
    clean_error(*invoke(command, w, s, *extra), needle)


def test_split_metadata_infinity_and_null_still_reports(tmp_path):
    w = write(tmp_path / "w.json", GOOD)
    s = write(tmp_path / "s.json", json.dumps({**SPLIT, "gap": math.inf, "bound": None, "runtime_s": None}))
    code, _, err = invoke("report", w, s, "-o", tmp_path / "r.html")
    assert code == 0, err


def test_unreadable_inputs_are_refused(tmp_path):
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe{")
    clean_error(*invoke("info", tmp_path / "bin.json"), "not UTF-8")
    clean_error(*invoke("info", write(tmp_path / "d.json", "1" * 5000)), "not valid JSON")
    clean_error(*invoke("info", write(tmp_path / "n.json", "[" * 100_000)), "not valid JSON")


@pytest.mark.parametrize("command", sorted(COMMANDS))
@settings(max_examples=int(os.environ.get("DNNPLACE_FUZZ_EXAMPLES", "25")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_every_command_input(command, data):
    bases = PIPER_BASES if command.startswith("piper") else PAPER_BASES
    which = data.draw(st.sampled_from(["w", "s"] if "{s}" in COMMANDS[command] else ["w"]), label="file")
    (wdoc, wpaths), (sdoc, spaths) = bases
    blob = data.draw(contents(wdoc if which == "w" else sdoc, wpaths if which == "w" else spaths),
                     label="content")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        paths = {"w": d / "w.json", "s": d / "s.json", "out": d / "out.file"}
        write(paths["w"], wdoc)
        write(paths["s"], sdoc)
        paths[which].write_bytes(blob)
        before = snapshot(d)
        code, out, err = invoke(*(a.format(**paths) for a in COMMANDS[command]))
        assert code in (0, 2), (code, out, err)
        assert len(err.strip().splitlines()) <= 1, err
        assert "Traceback" not in out + err and "internal error" not in err
        after = snapshot(d)
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
        assert changed <= {str(paths["out"])}, changed
        if code == 2:
            assert not changed


def test_plan_instance_block_is_not_trusted(piper):
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


def test_plan_with_no_stages_is_nodes_unplaced(piper):
    toy, plan = piper
    empty = plan_with(plan, ["stages"], [])
    for command in ("evaluate", "simulate"):
        clean_error(*invoke(command, toy, empty), "nodes unplaced")
