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


# CI runs a fixed sequence of examples (reproducible landings); local runs explore new ones.
from hypothesis import settings as _hyp_settings  # noqa: E402

_hyp_settings.register_profile("ci", derandomize=True)
if __import__("os").environ.get("CI"):
    _hyp_settings.load_profile("ci")
