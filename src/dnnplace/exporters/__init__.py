"""Exporters: turn a validated LLM plan into the launch configuration of one trainer.

Adding a target is one module with a ``render(plan) -> str`` function plus one
line in :data:`EXPORTERS`.  The table maps each name to ``"module:function"`` so
that listing targets imports nothing; exporters return text and never write
files (the CLI writes it atomically, see :mod:`dnnplace.cli.export_llm_cmd`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.utils.text import clip

Render = Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class Exporter:
    """One export target: its name, a one-line summary, the file suffix it writes, and its render function."""

    name: str
    summary: str
    suffix: str
    target: str  # "module:function", imported on first use

    def render(self, plan: dict[str, Any]) -> str:
        """The exported text for a plan already checked by :func:`~dnnplace.exporters.plan_file.validate_plan`."""
        module, _, func = self.target.partition(":")
        fn: Render = getattr(importlib.import_module(module), func)
        return fn(plan)


#: Target name -> exporter, in display order.
EXPORTERS: dict[str, Exporter] = {e.name: e for e in (
    Exporter("megatron", "Megatron-LM pretrain_gpt.py arguments as a bash array", ".sh",
             "dnnplace.exporters.megatron:render"),
    Exporter("torchtitan", "torchtitan TOML job config (--job.config_file, torchtitan 0.2.x)", ".toml",
             "dnnplace.exporters.torchtitan:render"),
    Exporter("deepspeed", "DeepSpeed config JSON plus the PipelineModule layer split", ".json",
             "dnnplace.exporters.deepspeed:render"),
)}


def get_exporter(name: str) -> Exporter:
    """The exporter registered under ``name`` (an unknown name is a one-line error listing the known ones)."""
    found = EXPORTERS.get(name)
    if found is None:
        raise DnnplaceError(f"unknown export target '{clip(name, 40)}'; choose one of: {', '.join(EXPORTERS)}")
    return found


def export(plan: dict[str, Any], to: str) -> str:
    """Render a validated plan for target ``to``."""
    return get_exporter(to).render(plan)


__all__ = ["EXPORTERS", "Exporter", "export", "get_exporter"]
