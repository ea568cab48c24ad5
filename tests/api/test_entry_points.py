"""The entry points stay readable and cheap: a re-export namespace, lazy imports, files of bounded size."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dnnplace

SRC = Path(dnnplace.__file__).resolve().parents[1]
HEAVY = ("networkx", "numba", "highspy", "torch")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, env={"PYTHONPATH": str(SRC), "PATH": ""}, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_import_dnnplace_loads_nothing_heavy():
    loaded = _modules_after("import dnnplace")
    assert not {m.split(".")[0] for m in loaded} & {*HEAVY, "numpy", "rich", "typer"}
    assert {m for m in loaded if m.startswith("dnnplace")} <= {"dnnplace", "dnnplace.errors"}


def test_a_public_name_loads_on_first_use_and_every_listed_name_resolves():
    loaded = _modules_after("import dnnplace; dnnplace.solve; dnnplace.load_llm; dnnplace.Workload")
    assert "dnnplace.api" in loaded and not {m.split(".")[0] for m in loaded} & {"torch", "numba"}
    for name in dnnplace.__all__:
        assert getattr(dnnplace, name) is not None, name
    assert set(dnnplace.__all__) <= set(dir(dnnplace))


def test_an_unknown_name_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        dnnplace.nope  # noqa: B018


def test_api_namespace_is_short_and_only_re_exports():
    init = (SRC / "dnnplace" / "api" / "__init__.py").read_text()
    assert len(init.splitlines()) < 80
    assert "def " not in init and "class " not in init


def test_no_entry_point_file_is_over_600_lines():
    for folder in ("api", "cli"):
        for path in (SRC / "dnnplace" / folder).glob("*.py"):
            assert len(path.read_text().splitlines()) <= 600, path


def test_the_docstrings_and_help_name_every_model():
    from cli_runner import run_cli

    import dnnplace.api

    for text in (dnnplace.__doc__, dnnplace.api.__doc__, run_cli("--help").stdout):
        flat = " ".join(text.split())
        assert "Piper" in flat and "LLM" in flat and "NeurIPS 2020" in flat, flat[:200]
