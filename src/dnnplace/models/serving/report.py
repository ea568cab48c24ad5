"""The serving plan's HTML report (stub: its owner's version replaces it).

Why a stub here: ``dnnplace serve --report`` and the protocol call :func:`write_report` by this signature.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.baselines import Baseline
from dnnplace.models.serving.evaluation import ServingEvaluation
from dnnplace.models.serving.spec import ServingConfig, ServingPlan, ServingProblem

__all__ = ["write_report"]


def write_report(p: ServingProblem, plan: ServingPlan, evaluation: ServingEvaluation, path: Path, *,
                 runner_ups: Sequence[tuple[ServingConfig, ServingEvaluation]] = (),
                 baselines: Sequence[Baseline] = ()) -> Path:
    """Write the report to ``path``."""
    raise DnnplaceError("the serving report is not built yet")
