"""Shared fixtures: the bundled paper data and small helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dnnplace

ROOT = Path(__file__).resolve().parents[1]  # the repository (examples/, docs/, benchmarks/)
EXAMPLES = ROOT / "examples"
PAPER = Path(dnnplace.__file__).parent / "data" / "paper"
REFERENCE = json.loads((PAPER / "reference.json").read_text())
THROUGHPUT = sorted(p.relative_to(PAPER / "throughput-inputs").with_suffix("").as_posix()
                    for p in (PAPER / "throughput-inputs").glob("*/*.json"))
LATENCY = sorted(p.relative_to(PAPER / "latency-inputs").with_suffix("").as_posix()
                 for p in (PAPER / "latency-inputs").glob("*/*.json"))


def example_module(file: str):
    """``examples/FILE.py`` imported as a module of its own (the examples are not a package on the path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"dnnplace_test_example_{file}", EXAMPLES / f"{file}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def throughput_path(key: str) -> Path:
    return PAPER / "throughput-inputs" / f"{key}.json"


def latency_path(key: str) -> Path:
    return PAPER / "latency-inputs" / f"{key}.json"


def expert_path(model: str, mode: str) -> Path:
    own = PAPER / "human-experts" / f"{model}_{mode}_expert.json"
    return own if own.exists() else PAPER / "human-experts" / f"{model}_inference_expert.json"


@pytest.fixture(scope="session")
def reference() -> dict:
    return REFERENCE


# Hypothesis: CI runs a fixed sequence of examples (reproducible landings); local runs explore new ones.
# Every property test asks for examples(N): N in the full profile (make test-all, CI), a quarter of it
# (at least 10) in the everyday one.
from hypothesis import settings as _hyp_settings  # noqa: E402

_hyp_settings.register_profile("ci", derandomize=True)
if __import__("os").environ.get("CI"):
    _hyp_settings.load_profile("ci")


# ------------------------------------------------------------------ CLI inputs (tests/hostile.py)
@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    """The small paper workload and its full split document (tests/hostile.py)."""
    from hostile import GOOD, SPLIT, write

    return write(tmp_path / "w.json", GOOD), write(tmp_path / "s.json", SPLIT)


@pytest.fixture
def piper(tmp_path) -> tuple[Path, Path]:
    """A copy of the Piper toy and its solved plan."""
    from hostile import TOY, invoke

    toy = tmp_path / "toy.json"
    toy.write_bytes(TOY.read_bytes())
    plan = tmp_path / "plan.json"
    code, out, err = invoke("solve", toy, "-o", plan, "-q")
    assert code == 0, err
    return toy, plan


@pytest.fixture
def paper(tmp_path) -> tuple[Path, Path]:
    """The small paper workload and a split with no metadata."""
    from hostile import BARE_SPLIT, GOOD, write

    return write(tmp_path / "w.json", GOOD), write(tmp_path / "s.json", BARE_SPLIT)


# ------------------------------------------------------------------ lanes
# `make test` runs every test but these two lanes, on both cores; `make test-all` (what CI runs) runs
# everything, the timing lane alone so that no other test steals its CPU.
#  slow:   spawns worker processes (torch.distributed runs, torchrun) or profiles / traces real models;
#  timing: asserts how fast something answers (a time limit, Ctrl-C, concurrent writers).
# A test carries its lane itself (@pytest.mark.slow, or pytestmark for a module); a docstring example
# says it with an RST comment line ``.. lane: slow`` in its Examples section (invisible in the rendered docs).
import re  # noqa: E402

_DOCTEST_LANE = re.compile(r"^\s*\.\. lane: (slow|timing)\b", re.MULTILINE)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: spawns processes or profiles real models (make test-all)")
    config.addinivalue_line("markers", "timing: asserts elapsed time; run alone by make test-all")


def pytest_collection_modifyitems(config, items):
    for item in items:
        doc = getattr(getattr(item, "dtest", None), "docstring", None)
        if doc and (lane := _DOCTEST_LANE.search(doc)):
            item.add_marker(getattr(pytest.mark, lane.group(1)))
