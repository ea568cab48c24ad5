"""Read and check an LLM plan file (``dnnplace.llm-plan``, versions 1 to 4) before anything uses it.

The checking itself is the plan codec's (:meth:`dnnplace.models.llm.spec.LLMPlan.from_dict`): every
key present and no unknown key, every field of its kind and inside ``LLM_LIMITS``, names without
control characters, the problem and Megatron's configuration rules (the same rule set the search
and the evaluator apply), the arithmetic that ties the degrees, the batch and the layer split
together, and the file's claims (status, bound, gap) against each other.  Each failure is one
:class:`InputError` line naming the field or the rule.  Exporters write the plan's values into
shell snippets, TOML and JSON that a trainer will run; they still escape every string they write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dnnplace.errors import InputError
from dnnplace.models.llm.moe import moe_from_doc
from dnnplace.models.llm.spec import FORMAT, READ_VERSIONS, VERSION, LLMPlan
from dnnplace.utils.files import read_json_file
from dnnplace.utils.text import clip

__all__ = ["FORMAT", "READ_VERSIONS", "VERSION", "load_plan", "rank_layers", "read_llm_plan", "stage_bounds",
           "validate_plan"]


def load_plan(path: str | Path) -> dict[str, Any]:
    """Read ``path`` (size-capped JSON, one-line errors) and return the validated plan document."""
    return validate_plan(read_json_file(path), str(path))


def validate_plan(doc: Any, source: str = "plan") -> dict[str, Any]:
    """Check ``doc``; return it as the current version writes it (a version-1 file with the defaults
    filled in, so that every reader sees every field), or raise a one-line :class:`InputError`."""
    return read_llm_plan(doc, source).to_dict()


def rank_layers(layers_per_stage: list[int], pp: int, rank: int) -> list[int]:
    """Decoder layers of each model chunk on pipeline ``rank`` (virtual stage i runs on rank i % pp)."""
    return layers_per_stage[rank::pp]


def stage_bounds(layers_per_stage: list[int]) -> list[tuple[int, int]]:
    """``(first, end)`` decoder-layer indices of each virtual stage, in model order."""
    out, start = [], 0
    for n in layers_per_stage:
        out.append((start, start + n))
        start += n
    return out


def read_llm_plan(doc: Any, source: str = "plan") -> LLMPlan:
    """A checked plan document as an :class:`~dnnplace.models.llm.spec.LLMPlan` (one-line errors naming the field)."""
    try:
        return LLMPlan.from_dict(doc, "plan", moe_reader=moe_from_doc)
    except InputError as exc:
        raise InputError(f"{clip(source)}: {exc}") from None
