"""Ctrl-C while the CLI is still starting (#33 item 20): one line, exit 130, no traceback.

The signal is delivered from inside the import system, just as the named module starts loading,
so it lands where a user's early Ctrl-C lands: in the imports before any command's own guard.
Both entry points are covered: the console script (``from dnnplace.cli.app import main``) and
``python -m dnnplace``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import dnnplace

SRC = str(Path(dnnplace.__file__).resolve().parents[1])

HOOK = """
import os, signal, sys
class _Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == {target!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, _Interrupt())
sys.argv = ["dnnplace", "methods"]
"""
CONSOLE_SCRIPT = "from dnnplace.cli.app import main\nsys.exit(main())\n"  # what pip's `dnnplace` script runs
MODULE = "import runpy\nrunpy.run_module('dnnplace', run_name='__main__', alter_sys=True)\n"


TARGETS = ["typer", "rich.console", "numpy", "dnnplace.cli.app", "dnnplace.cli.solve_cmd", "dnnplace.api.methods",
           "dnnplace.cli.plan_cmd"]


@pytest.mark.parametrize("entry,target", [(CONSOLE_SCRIPT, t) for t in TARGETS]
                         + [(MODULE, t) for t in ["dnnplace.cli", *TARGETS]])
def test_ctrl_c_while_importing_is_one_line_and_130(entry, target):
    proc = subprocess.run([sys.executable, "-c", HOOK.format(target=target) + entry], capture_output=True,
                          text=True, env={"PYTHONPATH": SRC, "PATH": ""}, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 130 and proc.stderr.strip() == "interrupted", (proc.returncode, proc.stderr)
    assert proc.stdout == ""


def test_without_the_signal_the_same_start_up_runs_the_command():
    code = HOOK.format(target="no.such.module") + CONSOLE_SCRIPT
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": SRC, "PATH": "", "COLUMNS": "200"}, timeout=120)
    assert proc.returncode == 0 and "llm-search" in proc.stdout, proc.stderr
