"""``plan --calibrate MEASURED.json``: scale the catalogue's compute efficiencies to a user's own step times.

Optional and explicit, and never applied to the benchmark's checks (``benchmarks/llm_plans.py`` prices with
the catalogue as published).  One factor ``k`` multiplies the device's documented compute efficiencies
(:data:`SCALED`: the MAMF GEMM fraction, flash attention's forward and backward fractions, the streaming
HBM fraction -- the terms the held-in rows show the model too fast on, docs/dev/fidelity.md section 2);
the communication fractions stay as NCCL measured them.  ``k`` minimises the squared log error of the
predictions over the user's measured runs (a one-dimensional golden-section search; every configuration
priced by the one evaluator), capped so that no fraction exceeds 1 (no kernel beats its peak).

The file::

    {"runs": [{"config": {"tp": 4, "pp": 4, "cp": 2, "vp": 5, "mbs": 1, "recompute": "none"},
               "step_time_s": 14.72}]}

``config`` holds ``--fix`` pins; what it leaves out (the layer split, say) is the planner's best for those
pins, found by the search.  Every run is of the problem being planned (same model, GPUs, batch and
sequence).  Bad input is one line naming the run and the key.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dnnplace.errors import InputError
from dnnplace.models.llm.config import check_pins
from dnnplace.models.llm.spec import LLMProblem, ParallelConfig
from dnnplace.utils.files import read_json_file

__all__ = ["MAX_RUNS", "SCALED", "Calibration", "calibrate", "largest_scale", "read_measured", "scaled_problem"]

SCALED = ("gemm_fraction", "attn_fwd_fraction", "attn_bwd_fraction", "hbm_fraction")
MAX_RUNS = 64


@dataclass(frozen=True)
class Calibration:
    """The fitted factor and, per measured run, (config, measured s, predicted before, predicted after)."""

    scale: float
    capped: bool  # k stopped at the largest that keeps every fraction <= 1
    runs: tuple[tuple[ParallelConfig, float, float, float], ...]

    def errors(self, after: bool = True) -> list[float]:
        return [(a if after else b) / m - 1 for _, m, b, a in self.runs]

    def text(self) -> str:
        before, after = self.errors(False), self.errors(True)
        span = (lambda e: f"{100 * min(e):+.1f} % .. {100 * max(e):+.1f} %")  # noqa: E731
        return (f"calibrated: compute efficiencies x{self.scale:.3f}{' (capped at peak)' if self.capped else ''}"
                f" from {len(self.runs)} measured run(s); their errors {span(before)} before, {span(after)} after"
                " (the held-in error band describes the uncalibrated model)")


def read_measured(path: str | Path) -> list[tuple[dict[str, object], float]]:
    """The runs of a MEASURED.json as (pins, measured step seconds), checked (one-line errors)."""
    doc: Any = read_json_file(path)
    where = f"{path}"
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list) or not 1 <= len(runs) <= MAX_RUNS:
        raise InputError(f"{where}: expected {{\"runs\": [...]}} with 1 to {MAX_RUNS} measured runs")
    out = []
    for i, run in enumerate(runs):
        at = f"{where}: runs[{i}]"
        if not isinstance(run, dict) or set(run) != {"config", "step_time_s"}:
            raise InputError(f"{at}: expected exactly the keys config and step_time_s")
        t = run["step_time_s"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or not 0 < t < 1e7:
            raise InputError(f"{at}.step_time_s: must be a positive number of seconds")
        if not isinstance(run["config"], dict):
            raise InputError(f"{at}.config: expected an object of --fix pins")
        out.append((check_pins(run["config"], f"{at}.config"), float(t)))
    return out


def scaled_problem(problem: LLMProblem, k: float) -> LLMProblem:
    """``problem`` with its device's compute efficiencies multiplied by ``k``: the :data:`SCALED` fractions,
    and what the cost model reads in their place where the catalogue has it -- the MAMF fraction of each
    tensor-core format (``gemm_fractions``) and the measured fused-attention rates (``attention``) -- so
    that "compute efficiencies x k" is what every priced kernel gets."""
    dev = problem.device
    att = dev.attention
    if att is not None:
        att = dataclasses.replace(att, rates={key: {n: r * k for n, r in row.items()}
                                              for key, row in att.rates.items()})
    gemm = {f: v * k for f, v in dev.gemm_fractions.items()}
    return dataclasses.replace(problem, device=dataclasses.replace(
        dev, **{f: getattr(dev, f) * k for f in SCALED}, gemm_fractions=gemm, attention=att))


def largest_scale(problem: LLMProblem) -> float:
    """The largest ``k`` keeping every scaled efficiency at or below its peak (no kernel beats its peak): each
    fraction at most 1, each measured attention rate at most the BF16 peak it was measured against."""
    dev = problem.device
    fractions = [float(getattr(dev, f)) for f in SCALED] + [float(v) for v in dev.gemm_fractions.values()]
    top = min(1.0 / f for f in fractions if f > 0)
    if dev.attention is not None:
        peak = dev.peak("bf16")
        top = min([top] + [peak / r for row in dev.attention.rates.values() for r in row.values() if r > 0])
    return top


def calibrate(problem: LLMProblem, runs: list[tuple[dict[str, object], float]]) -> Calibration:
    """The factor on the compute efficiencies that best fits ``runs`` (module docstring)."""
    from dnnplace.errors import DnnplaceError
    from dnnplace.models.llm.evaluation.step import evaluate
    from dnnplace.models.llm.solvers.search import search

    configs = []
    for i, (pins, _) in enumerate(runs):
        try:
            configs.append(search(problem, pins).config)
        except DnnplaceError as exc:
            raise InputError(f"--calibrate: runs[{i}]: {exc}") from None
    measured = [t for _, t in runs]
    from dnnplace.models.llm.rules import PRECISION_RECIPES

    peak = problem.device.peak(PRECISION_RECIPES[problem.job.precision][0])
    for i, (c, t) in enumerate(zip(configs, measured, strict=True)):
        # No step beats every GPU at its peak on the FLOPs it computes (the estimate's count: what is timed): a
        # faster measurement is a typo or another run, and fitting it would scale the model past the hardware.
        floor = evaluate(problem, c).model_flops_per_step / (problem.cluster.gpus * peak)
        if t < floor:
            raise InputError(f"--calibrate: runs[{i}].step_time_s {t:.3g} s is below {floor:.3g} s, the time "
                             f"{problem.cluster.gpus} x {problem.device.name} take for the step's FLOPs at their "
                             "peak: another run or a typo")

    def loss(log_k: float) -> float:
        p = scaled_problem(problem, math.exp(log_k))
        return sum(math.log(evaluate(p, c).step_time_s / t) ** 2 for c, t in zip(configs, measured, strict=True))

    top = largest_scale(problem)  # no efficiency above its peak
    lo, hi = math.log(0.2), math.log(top)
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = loss(a), loss(b)
    for _ in range(40):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = loss(b)
    k = math.exp((lo + hi) / 2)
    capped = k > top * 0.999
    after = scaled_problem(problem, k)
    rows = tuple((c, t, evaluate(problem, c).step_time_s, evaluate(after, c).step_time_s)
                 for c, t in zip(configs, measured, strict=True))
    return Calibration(k, capped, rows)
