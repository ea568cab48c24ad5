"""Trainers' own config parsers, shared by the export tests: a written file is read the way the trainer reads it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest


def torchtitan_job(text: str, tmp_path: Path) -> Any:
    """torchtitan's JobConfig from a job TOML, parsed by its ConfigManager (skipped where torchtitan is absent)."""
    spec = importlib.util.find_spec("torchtitan")
    if spec is None:
        pytest.skip("torchtitan is not installed (pip install '.[trainers]')")
    if "torchtitan" not in sys.modules:
        sys.modules["torchtitan"] = importlib.util.module_from_spec(spec)  # its __init__ pulls triton kernels
    from torchtitan.config import ConfigManager

    f = tmp_path / "job.toml"
    f.write_text(text)
    return ConfigManager().parse_args(["--job.config_file", str(f)])
