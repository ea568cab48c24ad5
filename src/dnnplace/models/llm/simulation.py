"""An LLM plan's pipeline, simulated task by task: the schedule behind the planner's closed form."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dnnplace.models.llm.evaluation.step import StageTimes, evaluate, stage_times
from dnnplace.models.llm.interleaved import ScheduleRun, simulate_schedule
from dnnplace.models.llm.spec import LLMEstimate, LLMPlan


@dataclass(frozen=True)
class LLMSimulation:
    """The simulated forward/backward pipeline of one step next to the evaluator's prediction.

    ``pipeline_s`` is the simulated makespan of the micro-batches (compute, TP and CP time per
    stage, a pipeline send between ranks); ``step_time_s`` is the whole step: that makespan plus
    what the evaluator adds after it (the largest exposed data-parallel communication + optimizer
    step over the ranks), so it equals the evaluator's predicted step time whenever the
    evaluator's schedule recurrence and this task-by-task run agree (tests).  ``estimate`` is the
    evaluator's, computed afresh: a plan file's recorded prediction is a claim, not an input.
    """

    plan: LLMPlan
    times: StageTimes
    run: ScheduleRun
    estimate: LLMEstimate

    @property
    def pipeline_s(self) -> float:
        return self.run.makespan

    @property
    def step_time_s(self) -> float:
        return self.run.makespan + self.times.tail

    @property
    def bubble_fraction(self) -> float:
        return self.run.bubble_fraction

    def chrome_trace(self) -> dict[str, Any]:
        return self.run.chrome_trace()

    def trace_chunks(self) -> Iterator[str]:
        """The Chrome trace as JSON text in pieces, for ``simulate --trace`` to stream into its file."""
        return self.run.trace_chunks()

    def to_dict(self) -> dict[str, Any]:
        cfg = self.plan.config
        return {"schedule": "interleaved 1f1b" if cfg.vp > 1 else "1f1b", "pp": cfg.pp, "vp": cfg.vp,
                "microbatches": self.times.num_microbatches, "pipeline_s": self.pipeline_s,
                "simulated_step_time_s": self.step_time_s, "predicted_step_time_s": self.estimate.step_time_s,
                "bubble_fraction": self.bubble_fraction, "rank_busy_s": list(self.run.busy),
                "stage_forward_s": list(self.times.forward), "stage_backward_s": list(self.times.backward),
                "p2p_s": self.times.p2p}


def simulate_llm(plan: LLMPlan) -> LLMSimulation:
    """Run the plan's schedule (Megatron's issue order) with the evaluator's per-stage costs."""
    cfg = plan.config
    times = stage_times(plan.problem, cfg)
    run = simulate_schedule(cfg.pp, cfg.vp, times.num_microbatches, list(times.forward), list(times.backward),
                            times.p2p if cfg.pp > 1 else 0.0)
    return LLMSimulation(plan, times, run, evaluate(plan.problem, cfg))
