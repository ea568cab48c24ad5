"""One rule of the LLM planner's rule set: a named, vectorised predicate over named columns.

The dense rules (:mod:`.llm_rules`) and the expert-parallel ones (:mod:`.moe_rules`) are written in this one
shape, so the search filters, the checker names the first broken rule and the plan reader refuses by the same
objects whichever model family they concern.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Cols", "Rule", "first_broken"]

Cols = Mapping[str, Any]


@dataclass(frozen=True)
class Rule:
    """One rule: a name, the configuration columns it reads, a predicate (true where obeyed), a message."""

    name: str
    needs: tuple[str, ...]
    ok: Callable[[Cols], Any]
    message: Callable[[Cols], str]


def first_broken(rules: Sequence[Rule], cols: Cols) -> tuple[Rule, dict[str, Any]] | None:
    """The first rule a one-row ``cols`` breaks, with the row as Python scalars (for its message)."""
    for rule in rules:
        if not bool(np.all(rule.ok(cols))):
            row = {k: (v.item() if isinstance(v, np.ndarray) and v.size == 1 else v) for k, v in cols.items()}
            return rule, row
    return None
