"""What users run today, priced by the same evaluator as the plan (stub: its owner's version replaces it).

Why a stub here: the plan file and ``dnnplace serve`` list the baselines by this signature; until they
land the list is empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dnnplace.models.serving.evaluation import ServingEvaluation
from dnnplace.models.serving.spec import ServingConfig, ServingPlan, ServingProblem

__all__ = ["Baseline", "baselines"]


@dataclass
class Baseline:
    """One baseline deployment: what it is, its price, and the plan's gain over it (None: it does not fit)."""

    name: str
    config: ServingConfig | None
    evaluation: ServingEvaluation | None
    gain: float | None
    why: str

    def to_dict(self) -> dict[str, Any]:
        """The baseline as one JSON object."""
        return {"name": self.name, "gain": self.gain, "why": self.why,
                "prediction": None if self.evaluation is None else self.evaluation.to_dict()}


def baselines(p: ServingProblem, plan: ServingPlan) -> list[Baseline]:
    """The engine's even split, accelerate's balanced map, llama.cpp's free-memory split, the best homogeneous
    subset (none yet)."""
    return []
