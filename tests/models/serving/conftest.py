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


@pytest.fixture(scope="session")
def benchmark_module():
    """``benchmarks/NAME.py`` imported as a module of its own (the benchmarks are not a package on the path): the
    tests that recompute a catalogue figure from a benchmark's rows price them with the benchmark's own code."""
    import importlib.util
    import sys

    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"dnnplace_test_benchmark_{name}",
                                                      ROOT / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # a dataclass in the module looks its module up by name
        spec.loader.exec_module(module)
        return module

    return load
