"""Rules of the source tree that a review would otherwise have to catch by eye.

Each test reads ``src/`` as text, so that what it forbids cannot come back in a later change.
"""

from __future__ import annotations

import re
from pathlib import Path

import dnnplace

PACKAGE = Path(dnnplace.__file__).resolve().parent
LIMIT = 600  # lines; a longer file is two things that want names of their own


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_source_file_is_over_the_limit_but_numba_kernels():
    # numba kernels stay whole: splitting one costs a compiled call boundary inside a hot loop
    long = [f"{p.relative_to(PACKAGE)}: {n} lines" for p in _sources() if "kernel" not in p.name
            and (n := len(p.read_text().splitlines())) > LIMIT]
    assert not long, long


MODEL_TYPES = ("Workload", "PiperInstance", "LLMProblem", "Split", "PiperPlan", "LLMPlan")
_ISINSTANCE = re.compile(r"isinstance\([^)]*\b(" + "|".join(MODEL_TYPES) + r")\b")
_REFUSE = re.compile(r"(?<![\w.])refuse\(")


def _front_lines() -> list[tuple[str, int, str]]:
    """Every line of api/ and cli/ but the registry's, which alone may look at a model's type."""
    out = []
    for folder in ("api", "cli"):
        for p in sorted((PACKAGE / folder).rglob("*.py")):
            if p.relative_to(PACKAGE).as_posix() == "api/models.py":
                continue
            out += [(p.relative_to(PACKAGE).as_posix(), i, line)
                    for i, line in enumerate(p.read_text().splitlines(), 1)]
    return out


def test_no_isinstance_on_a_model_type_outside_the_registry():
    # dispatch goes through api/models.py (model_of, check_plan); a type test elsewhere is a second table
    hits = [f"{f}:{i}: {line.strip()}" for f, i, line in _front_lines() if _ISINSTANCE.search(line)]
    assert not hits, hits


def test_no_hand_written_refusal_outside_the_registry():
    # an option another model uses is refused by declaration (PlannedModel's option tables, check_declared)
    hits = [f"{f}:{i}: {line.strip()}" for f, i, line in _front_lines() if _REFUSE.search(line)]
    assert not hits, hits


def test_every_model_package_has_its_entry_in_the_one_table():
    # adding a model is one package under models/ (with entry.py) plus one line in api/models.MODELS
    import importlib

    from dnnplace.api.models import MODELS

    packages = sorted(p.name for p in (PACKAGE / "models").iterdir() if (p / "__init__.py").exists())
    assert packages == sorted(MODELS)
    for name in packages:
        assert importlib.import_module(f"dnnplace.models.{name}.entry").ENTRY is MODELS[name]


def test_a_model_without_its_own_screen_view_is_shown_from_its_entry(monkeypatch):
    # the CLI's per-model views are refinements: a model without one prints its entry's documents
    from io import StringIO

    from rich.console import Console

    from dnnplace.cli import render

    pr = dnnplace.load_llm(PACKAGE.parents[1] / "examples" / "llm" / "llama3.1-8b.json", gpus=8, seq_len=4096,
                           global_batch=32)
    sol = dnnplace.solve(pr, tp=1, pp=2, cp=1, mbs=1, recompute="none")
    monkeypatch.setattr(render, "_PLAN", {})
    monkeypatch.setattr(render, "_SIMULATION", {})
    buf = StringIO()
    con = Console(file=buf, width=200)
    render.print_plan(con, pr, sol.evaluation, "plan")
    render.print_simulation(con, pr, dnnplace.simulate(pr, sol.plan), "sim", "1f1b")
    text = buf.getvalue()
    assert "step_time_s:" in text and "sim: 1f1b" in text
