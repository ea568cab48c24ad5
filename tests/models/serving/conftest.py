from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "data" / "serving"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def llama70b() -> Path:
    return DATA / "llama3-70b.json"


@pytest.fixture
def llama8b() -> Path:
    return ROOT / "examples" / "llm" / "llama3.1-8b.json"
