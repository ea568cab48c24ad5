"""The plan document a user gets: the plan, its error band, and the runner-ups the search found.

The band and the runner-ups are claims about the prediction, derived from the cost model: a reader
checks their shape and drops them (:func:`dnnplace.models.llm.spec.LLMPlan.from_dict`), since the
evaluator recomputes both from the plan itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.config import pin_fields
from dnnplace.models.llm.evaluation.band import ErrorBand, band_for, kind_of
from dnnplace.models.llm.spec import LLMPlan, LLMProblem

__all__ = ["HOST_BOUND_SHARE", "band_of", "calibrated_band_doc", "error_band_doc", "host_doc", "host_lines",
           "kernel_sources_doc", "plan_document", "runner_up_doc"]

#: The share of the step the host's exposed time must reach for the plan to call the step host-bound: a warning
#: threshold for the reader, not a figure of the cost model.
HOST_BOUND_SHARE = 0.05

#: Every knob a runner-up is pinned by (all of ParallelConfig's pinnable fields), so that each can be re-pinned
#: with --fix exactly and two runner-ups differing only in, say, recompute_modules read apart.
RUNNER_UP_KNOBS = tuple(f.name for f in pin_fields())


def band_of(problem: LLMProblem) -> ErrorBand | None:
    """The measured error band for this problem's kind of run (None: no published rows of its kind, or
    kernels priced from the measured tables: the bands were measured with the catalogue's pricing)."""
    if problem.device.measured_kernels:
        return None
    return band_for(problem.job.precision, problem.device.name, problem.moe is not None)


def error_band_doc(problem: LLMProblem, predicted_s: float) -> dict[str, Any]:
    """``error_band`` of a plan document: the band and the step times it allows, or why there is none."""
    band = band_of(problem)
    if band is None and problem.device.measured_kernels:
        return {"evidence": "none: the bands were measured with catalogue pricing; with --kernels measured see "
                            "benchmarks/results/kernels_training.md for its errors on the published rows",
                "low": None, "high": None, "rows": 0, "measured_low_s": None, "measured_high_s": None,
                "kind": kind_of(problem.job.precision, problem.device.name, problem.moe is not None)}
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
    doc["host"] = host_doc(plan)
    doc["kernel_sources"] = kernel_sources_doc(plan)
    return doc


def kernel_sources_doc(plan: LLMPlan) -> dict[str, Any]:
    """``kernel_sources`` of a plan document: the plan's configuration re-priced with the cost model's ledger kept
    (:mod:`~dnnplace.models.llm.evaluation.kernel_ledger`): per term family, which source priced it."""
    from dnnplace.models.llm.evaluation import evaluate
    from dnnplace.models.llm.evaluation.kernel_ledger import ledger_doc, recording

    with recording() as led:
        try:
            evaluate(plan.problem, plan.config)
        except DnnplaceError:  # a configuration the evaluator refuses has no priced terms to report
            pass
    return ledger_doc(led, plan.problem.device.measured_kernels)


def widest_graphs(problem: LLMProblem) -> str:
    """The widest CUDA-graph scope Megatron-Core captures for this model under dropless routing: every module
    of an MoE layer up to the dispatcher's synchronisation, or a dense model's whole layer."""
    if problem.moe is None:
        return "layer"
    return "attn+mlp+moe_router+moe_preprocess" if problem.moe.moe.num_dense_layers else \
        "attn+moe_router+moe_preprocess"


def host_doc(plan: LLMPlan) -> dict[str, Any]:
    """``host`` of a plan document: the host time the step exposes (evaluation/llm/host.py), whether that makes
    it host-bound, and what the widest CUDA-graph scope would save (the same configuration re-priced)."""
    from dnnplace.models.llm.evaluation import evaluate

    step = plan.estimate.step_time_s
    exposed = float(plan.estimate.time_breakdown.get("host_exposed", 0.0))
    doc: dict[str, Any] = {"exposed_s": exposed, "share": exposed / step if step > 0 else 0.0,
                           "host_bound": exposed >= HOST_BOUND_SHARE * step, "cuda_graphs": plan.config.cuda_graphs,
                           "with_graphs": None}
    scope = widest_graphs(plan.problem)
    if plan.config.cuda_graphs not in (scope, "full_iteration") and plan.config.offload_layers == 0:
        try:
            est = evaluate(plan.problem, dataclasses.replace(plan.config, cuda_graphs=scope))
        except DnnplaceError:
            return doc
        doc["with_graphs"] = {"cuda_graphs": scope, "step_time_s": est.step_time_s, "saves_s": step - est.step_time_s}
    return doc


def host_lines(doc: dict[str, Any]) -> list[str]:
    """What the screen says of the host's time: a warning when the step is host-bound, and what graphs save."""
    lines = []
    if doc["host_bound"]:
        lines.append(f"warning: the step is host-bound: {doc['exposed_s']:.3f} s ({100 * doc['share']:.1f} %) is the "
                     "CPU issuing eager ops the GPU waits for")
    w = doc.get("with_graphs")
    if w is not None and w["saves_s"] > 0:
        lines.append(f"  CUDA graphs ({w['cuda_graphs']}) would save {w['saves_s']:.3f} s a step "
                     f"(pin cuda_graphs={w['cuda_graphs']})")
    return lines


def calibrated_band_doc(errors: Sequence[float], predicted_s: float) -> dict[str, Any]:
    """``error_band`` of a calibrated plan: the residuals on the user's own measured runs."""
    band = ErrorBand(min(errors), max(errors), len(errors), "of your measured runs, after calibration")
    return {**band.to_dict(predicted_s), "kind": "calibrated"}
