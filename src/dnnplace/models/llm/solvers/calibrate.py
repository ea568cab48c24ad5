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

__all__ = ["MAX_RUNS", "SCALED", "Calibration", "calibrate", "read_measured", "scaled_problem"]

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
    """``problem`` with its device's :data:`SCALED` efficiencies multiplied by ``k``."""
    dev = problem.device
    return dataclasses.replace(problem, device=dataclasses.replace(
        dev, **{f: getattr(dev, f) * k for f in SCALED}))


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

    def loss(log_k: float) -> float:
        p = scaled_problem(problem, math.exp(log_k))
        return sum(math.log(evaluate(p, c).step_time_s / t) ** 2 for c, t in zip(configs, measured, strict=True))

    top = min(1.0 / getattr(problem.device, f) for f in SCALED)  # no fraction above 1
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
