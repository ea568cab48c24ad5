"""The config.json files of the published mixture-of-experts runs the planner's error bands are measured on.

They ship with the package (architecture figures only, no weights; README.md here gives each file's origin
and licence) because a plan's error band is recomputed from the current cost model on these runs
(``evaluation/band.py``), and a plan must carry its band on a machine without the project's test tree.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONFIGS", "config_path"]

#: The folder holding the config files.
CONFIGS = Path(__file__).resolve().parent


def config_path(stem: str) -> Path:
    """The bundled config.json of the model ``stem`` (e.g. ``"deepseek-v3"``)."""
    return CONFIGS / f"{stem}.json"
