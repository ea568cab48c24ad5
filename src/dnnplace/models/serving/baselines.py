"""What users run now, priced by the same evaluator as the plan (stub: the baselines helper builds it).

Why a stub here: the report draws a baselines table from :class:`Baseline` rows; this file keeps the
shared interface's signature so the report runs and is tested before the real baselines land.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dnnplace.models.serving.evaluation import ServingEvaluation
from dnnplace.models.serving.spec import ServingConfig, ServingPlan, ServingProblem

__all__ = ["Baseline", "baselines"]


@dataclass
class Baseline:
    """One deployment users run today (``name``), its evaluation, the plan's gain over it and why."""

    name: str
    config: ServingConfig | None
    evaluation: ServingEvaluation | None
    gain: float | None
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "gain": self.gain, "why": self.why,
                "prediction": self.evaluation.to_dict() if self.evaluation is not None else None}


def baselines(p: ServingProblem, plan: ServingPlan) -> list[Baseline]:
    """The baselines of a plan (none until the baselines module is built)."""
    return []
