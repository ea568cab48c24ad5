"""Export targets: a plan in the format another trainer or runtime reads, all in one table.

Adding a target is one module with a render function plus one line in
:data:`EXPORTERS`.  The table maps each name to ``"module:function"`` so that
listing targets imports nothing (torch loads only for the runtime's targets);
exporters return text and never write files (the CLI writes it atomically).

A target takes either an LLM plan (``takes="llm-plan"``: ``render(plan)``, a
plan document or an in-memory :class:`~dnnplace.models.llm.spec.LLMPlan`, which every
such target first reads and checks by the planner's own rules with
:func:`~dnnplace.models.llm.exporters.checked.checked_plan`, refusing in one line what the
rules or the trainer cannot take) or a split of a profiled workload (``takes="split"``:
``render(workload, split, model=None)``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.utils.text import clip


@dataclass(frozen=True)
class Exporter:
    """One export target: its name, a one-line summary, the file suffix it writes, and its render function."""

    name: str
    summary: str
    suffix: str
    target: str  # "module:function", imported on first use
    takes: str = "llm-plan"  # or "split": a split of a workload made by `dnnplace profile`

    def render(self, *args: Any, **kwargs: Any) -> str:
        """The exported text (see the module docstring for what each kind of target takes)."""
        module, _, func = self.target.partition(":")
        fn: Callable[..., str] = getattr(importlib.import_module(module), func)
        return fn(*args, **kwargs)


#: Target name -> exporter, in display order.
EXPORTERS: dict[str, Exporter] = {e.name: e for e in (
    Exporter("megatron", "Megatron-LM pretrain_gpt.py arguments as a bash array", ".sh",
             "dnnplace.models.llm.exporters.megatron:render"),
    Exporter("torchtitan", "torchtitan TOML job config (--job.config_file, torchtitan 0.2.x)", ".toml",
             "dnnplace.models.llm.exporters.torchtitan:render"),
    Exporter("deepspeed", "DeepSpeed config JSON plus the PipelineModule layer split", ".json",
             "dnnplace.models.llm.exporters.deepspeed:render"),
    Exporter("torch-pipelining", "a torchrun training script for torch.distributed.pipelining (chain-shaped"
             " splits of a profiled workload)", ".py", "dnnplace.runtime.export:render_pipelining_script",
             takes="split"),
    Exporter("torch-pipelining-points", "the split points for torch.distributed.pipelining, as JSON", ".json",
             "dnnplace.runtime.export:render_pipelining_points", takes="split"),
    Exporter("stages", "the stage list of a split: device, node ids, fx nodes, modules (JSON)", ".json",
             "dnnplace.runtime.export:render_stages", takes="split"),
)}


def get_exporter(name: str) -> Exporter:
    """The exporter registered under ``name`` (an unknown name is a one-line error listing the known ones)."""
    found = EXPORTERS.get(name)
    if found is None:
        raise DnnplaceError(f"unknown export target '{clip(name, 40)}'; choose one of: {', '.join(EXPORTERS)}")
    return found


def export(plan: Any, to: str) -> str:
    """Render an LLM plan (a plan document or an ``LLMPlan``) for target ``to``."""
    exporter = get_exporter(to)
    if exporter.takes != "llm-plan":
        raise DnnplaceError(f"export target '{to}' takes a split of a profiled workload, not an LLM plan")
    return exporter.render(plan)


__all__ = ["EXPORTERS", "Exporter", "export", "get_exporter"]
