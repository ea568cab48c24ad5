"""A Piper plan streamed through 1F1B: after the pipeline fills, the bottleneck stage sets the pace.

The stream is the shared :func:`~dnnplace.core.schedule.one_f_one_b` over the plan's stages
(the order whose in-flight counts Piper's memory model charges).  Piper's model gives a stage one
time per sample, forward and backward together; timed as one pass per micro-batch, that order
finishes after one pass through every stage plus one bottleneck period per further micro-batch,
the closed form below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dnnplace.core.schedule import Schedule, one_f_one_b
from dnnplace.models.piper.evaluation import PiperEvaluation, evaluate_piper, stage_rows
from dnnplace.models.piper.spec import PiperInstance, PiperPlan


@dataclass(frozen=True)
class PiperSimulation:
    """Makespan and bubble of ``microbatches`` samples; ``None`` figures when the plan is out of memory."""

    evaluation: PiperEvaluation
    stages: list[dict[str, Any]]
    microbatches: int
    makespan: float | None

    @property
    def order(self) -> Schedule:
        """What each stage runs, in order (built on demand: the makespan needs only its closed form)."""
        return one_f_one_b(len(self.stages), self.microbatches)

    @property
    def time_per_sample(self) -> float | None:
        return self.evaluation.tps if self.evaluation.feasible else None

    @property
    def bubble_fraction(self) -> float | None:
        tps = self.time_per_sample
        if not self.makespan or tps is None:
            return None
        return 1.0 - self.microbatches * tps / self.makespan

    def to_dict(self) -> dict[str, Any]:
        tps = self.time_per_sample
        return {"time_per_sample": tps, "throughput": 1.0 / tps if tps else None, "stages": self.stages,
                "microbatches": self.microbatches, "makespan": self.makespan,
                "bubble_fraction": self.bubble_fraction, "devices_used": self.evaluation.devices,
                "pipeline_depth": len(self.stages)}


def simulate_piper(inst: PiperInstance, plan: PiperPlan, *, microbatches: int = 64) -> PiperSimulation:
    """Fill (every stage once) plus ``microbatches - 1`` periods of the bottleneck stage."""
    ev = evaluate_piper(inst, plan)
    rows = stage_rows(inst, ev)
    fill = sum(r["time_per_sample"] for r in rows)
    makespan = fill + (microbatches - 1) * ev.tps if ev.feasible else None
    return PiperSimulation(ev, rows, microbatches, makespan)
