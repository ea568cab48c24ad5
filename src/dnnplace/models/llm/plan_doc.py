"""The plan document a user gets: the plan, its error band, and the runner-ups the search found.

The band and the runner-ups are claims about the prediction, derived from the cost model: a reader
checks their shape and drops them (:func:`dnnplace.models.llm.spec.LLMPlan.from_dict`), since the
evaluator recomputes both from the plan itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dnnplace.models.llm.config import pin_fields
from dnnplace.models.llm.evaluation.band import ErrorBand, band_for, kind_of
from dnnplace.models.llm.spec import LLMPlan, LLMProblem

__all__ = ["band_of", "calibrated_band_doc", "error_band_doc", "plan_document", "runner_up_doc"]

#: Every knob a runner-up is pinned by (all of ParallelConfig's pinnable fields), so that each can be re-pinned
#: with --fix exactly and two runner-ups differing only in, say, recompute_modules read apart.
RUNNER_UP_KNOBS = tuple(f.name for f in pin_fields())


def band_of(problem: LLMProblem) -> ErrorBand | None:
    """The measured error band for this problem's kind of run (None: no published rows of its kind)."""
    return band_for(problem.job.precision, problem.device.name, problem.moe is not None)


def error_band_doc(problem: LLMProblem, predicted_s: float) -> dict[str, Any]:
    """``error_band`` of a plan document: the band and the step times it allows, or why there is none."""
    band = band_of(problem)
    if band is None:
        what = ("mixture-of-experts runs" if problem.moe is not None
                else f"{problem.job.precision} runs on {problem.device.name}")
        return {"evidence": f"none: no published {what} are evaluated in a band (docs/dev/fidelity.md, docs/moe.md)",
                "low": None, "high": None, "rows": 0, "measured_low_s": None, "measured_high_s": None,
                "kind": kind_of(problem.job.precision, problem.device.name, problem.moe is not None)}
    return {**band.to_dict(predicted_s), "kind": kind_of(problem.job.precision, problem.device.name,
                                                         problem.moe is not None)}


def runner_up_doc(problem: LLMProblem, predicted_s: float, other: LLMPlan) -> dict[str, Any]:
    """One runner-up: its knobs, time, memory, and whether the band can tell it from the plan."""
    band, t = band_of(problem), other.estimate.step_time_s
    c = other.config
    return {"config": {k: (str(getattr(c, k)) if k == "recompute" else getattr(c, k)) for k in RUNNER_UP_KNOBS},
            "step_time_s": t, "vs_plan": t / predicted_s - 1,
            "memory_per_gpu_bytes": other.estimate.memory_per_gpu_bytes, "fits": other.estimate.fits,
            "within_band": None if band is None else band.indistinguishable(predicted_s, t)}


def plan_document(plan: LLMPlan, runner_ups: Sequence[LLMPlan] = ()) -> dict[str, Any]:
    """The plan's document with its error band, and (when the search was asked for them) its runner-ups."""
    doc = plan.to_dict()
    predicted = plan.estimate.step_time_s
    doc["error_band"] = error_band_doc(plan.problem, predicted)
    if runner_ups:
        doc["runner_ups"] = [runner_up_doc(plan.problem, predicted, o) for o in runner_ups]
    return doc


def calibrated_band_doc(errors: Sequence[float], predicted_s: float) -> dict[str, Any]:
    """``error_band`` of a calibrated plan: the residuals on the user's own measured runs."""
    band = ErrorBand(min(errors), max(errors), len(errors), "of your measured runs, after calibration")
    return {**band.to_dict(predicted_s), "kind": "calibrated"}
