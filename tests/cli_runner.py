"""Run the ``dnnplace`` command in this process (no interpreter start-up), for tests of what it prints.

Tests whose subject is the entry point itself, signals, concurrency or the environment of a fresh
process keep using ``python -m dnnplace`` in a subprocess.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from dnnplace.cli.app import app


@dataclass
class Result:
    """What ``subprocess.run(..., capture_output=True, text=True)`` would have returned."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: object, cwd: str | Path | None = None) -> Result:
    """``dnnplace ARGS`` in this process; an exception that escapes the CLI fails the test."""
    with contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext():
        res = CliRunner().invoke(app, [os.fspath(a) if isinstance(a, Path) else str(a) for a in args],
                                 catch_exceptions=True)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise AssertionError(f"dnnplace {args}: leaked {res.exception!r}") from res.exception
    return Result(res.exit_code, res.stdout, res.stderr)
