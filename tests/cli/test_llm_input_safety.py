"""Hostile input to the LLM commands, round 3 (issue 33): each test names the item it reproduces."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_runner import run_cli
from hostile import clean_error, deadline

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "llm"
LLAMA8 = EXAMPLES / "llama3.1-8b.json"
BASE = ["--gpus", "8", "--seq-len", "4096", "--global-batch", "32"]
FIX = ["--fix", "tp=1,pp=1,cp=1,vp=1,mbs=1,recompute=none"]



def refused(*args: object, needle: str = "") -> str:
    r = run_cli(*args)
    line = clean_error(r.returncode, r.stdout, r.stderr, needle)
    assert len(line) < 300, line
    return line


def test_plan_with_a_5000_character_config_path_is_one_line(tmp_path: Path) -> None:
    line = refused("plan", str(tmp_path / ("a" * 5000)), *BASE)
    assert "too long" in line.lower()


def test_plan_with_a_long_name_inside_a_folder_is_one_line(tmp_path: Path) -> None:
    refused("plan", str(tmp_path / ("d" * 300) / "config.json"), *BASE)


@pytest.mark.parametrize("cmd", [["evaluate"], ["simulate"], ["report"], ["export", "--to", "megatron"]])
def test_a_fifo_plan_file_is_refused_not_waited_on(tmp_path: Path, cmd: list[str]) -> None:
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    extra = ["-o", str(tmp_path / "r.html")] if cmd == ["report"] else []
    with deadline(20):
        refused(cmd[0], str(fifo), *cmd[1:], *extra, needle="FIFO")


@pytest.mark.parametrize("cmd", ["evaluate", "simulate"])
def test_a_device_or_a_long_name_as_plan_file_is_one_line(tmp_path: Path, cmd: str) -> None:
    with deadline(20):
        refused(cmd, "/dev/zero", needle="character device")
    refused(cmd, str(tmp_path / ("p" * 5000)))


@pytest.mark.parametrize("value", ["-1", "0", "nan", "1e300"])
def test_plan_time_limit_follows_solves_one_rule(value: str) -> None:
    line = refused("plan", str(LLAMA8), *BASE, *FIX, "--time-limit", value, needle="--time-limit")
    assert "inf or none: no limit" in line  # the API's own wording (utils/params.seconds), not plan's own


def test_plan_time_limit_inf_means_no_limit(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    r = run_cli("plan", str(LLAMA8), *BASE, *FIX, "--time-limit", "inf", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["config"]["tp"] == 1


@pytest.mark.parametrize("body", ["raise ValueError('x' * 5000)", "import sys; sys.exit('bye' * 2000)",
                                  "raise RuntimeError('\\x1b[2J' * 500)"])
def test_a_factorys_long_message_stays_one_short_line(tmp_path: Path, body: str) -> None:
    """The guard kept 300 characters of the factory's own message: a 450-character line."""
    factory = tmp_path / "fac.py"
    factory.write_text(f"def f():\n    {body}\n")
    line = refused("plan", f"{factory}:f", *BASE, needle="fac.py:f")
    assert "\x1b" not in line


@pytest.mark.parametrize("fn", ["f", "g" * 3000])
def test_a_long_factory_path_is_named_once_in_a_short_line(tmp_path: Path, fn: str) -> None:
    """The factory's path was written twice (200 characters each) beside the reason: 550-character lines."""
    factory = tmp_path / ("x" * 200 + ".py")
    factory.write_text("def f(:\n")
    refused("plan", f"{factory}:{fn}", *BASE)
