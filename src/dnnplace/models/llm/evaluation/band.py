"""The cost model's measured error band, and when two predictions cannot be told apart by it.

The band is the range of relative errors (predicted / measured - 1) of the evaluator on the
published runs the cost model was built against (:data:`HELD_IN`: NVIDIA's BF16 H100 Llama 3.1
step times).  It is recomputed from the current cost model, never stored as a figure, so a change
of the model moves it.  It is evidence for BF16 on Hopper only: :meth:`ErrorBand.covers` says so,
and a plan outside it must say that its error is unmeasured (docs/dev/fidelity.md shows the FP8 and
Blackwell rows falling outside).

Two predictions ``best <= other`` cannot be told apart when the errors of the band could reverse
them: with true time = predicted / (1 + e), e in [low, high], ``best`` may really take
best / (1 + low) and ``other`` other / (1 + high); the order is certain only if
other / (1 + high) >= best / (1 + low).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from dnnplace.core.catalogue import device_spec
from dnnplace.models.llm.spec import Cluster, LLMProblem, ParallelConfig, TrainingJob, TransformerArch

__all__ = ["HELD_IN", "ErrorBand", "HeldInRow", "held_in_band"]

_LLAMA_8B = TransformerArch("llama3.1-8b", "llama", 32, 4096, 14336, 32, 8, 128, 128256, max_position=131072,
                            architecture="LlamaForCausalLM", rope_theta=500000.0)
_LLAMA_70B = TransformerArch("llama3.1-70b", "llama", 80, 8192, 28672, 64, 8, 128, 128256, max_position=131072,
                             architecture="LlamaForCausalLM", rope_theta=500000.0)
_SOURCE = "NVIDIA dgxc-benchmarking Llama 3.1 recipes, NeMo 24.09, BF16, H100 80GB SXM, 8 per node"


@dataclass(frozen=True)
class HeldInRow:
    """One published run the cost model was built against: its configuration and measured step time."""

    arch: TransformerArch
    gpus: int
    tp: int
    pp: int
    cp: int
    vp: int
    global_batch: int
    measured_s: float
    source: str = _SOURCE
    # The run's gradient buffer: the NeMo-Framework-Launcher's 24.09-era Llama 3.1 configs pass
    # +training.model.optim.grad_sync_dtype=bf16 (docs/dev/fidelity.md section 1).
    grad_dtype: str = "bf16"

    def problem(self) -> LLMProblem:
        return LLMProblem(self.arch, Cluster("h100", self.gpus, 8), TrainingJob(8192, self.global_batch, "bf16"),
                          device_spec("h100"))

    def config(self) -> ParallelConfig:
        per = self.arch.num_layers // (self.pp * self.vp)
        return ParallelConfig(self.tp, self.pp, self.vp, self.cp, self.gpus // (self.tp * self.pp * self.cp), 1,
                              "none", self.tp > 1, True, (per,) * (self.pp * self.vp), grad_dtype=self.grad_dtype)


HELD_IN: tuple[HeldInRow, ...] = (
    tuple(HeldInRow(_LLAMA_8B, g, 1, 1, 2, 1, 128 * g // 8, t)
          for g, t in ((8, 12.91), (16, 13.00), (32, 13.05), (64, 13.08), (128, 13.10)))
    + tuple(HeldInRow(_LLAMA_70B, g, 4, 4, 2, 5, 128 * g // 64, t)
            for g, t in ((64, 14.72), (128, 14.73), (256, 14.80), (512, 14.89), (1024, 14.92), (2048, 14.98))))


@dataclass(frozen=True)
class ErrorBand:
    """Relative errors predicted / measured - 1 of the held-in rows: ``low`` <= every one <= ``high``."""

    low: float
    high: float
    rows: int

    def measured_range(self, predicted_s: float) -> tuple[float, float]:
        """The step times the band allows for a prediction (shortest, longest)."""
        return predicted_s / (1 + self.high), predicted_s / (1 + self.low)

    def indistinguishable(self, best_s: float, other_s: float) -> bool:
        """Could the band's errors reverse ``best_s`` <= ``other_s`` (module docstring)?"""
        lo, hi = sorted((best_s, other_s))
        return hi / (1 + self.high) < lo / (1 + self.low)

    @staticmethod
    def covers(precision: str, device: str, moe: bool = False) -> bool:
        """Is the band evidence for this run: a dense model in BF16 on the Hopper GPUs it was measured on?
        (Mixture-of-experts runs price terms no held-in row exercises: dispatch, grouped GEMMs.)"""
        return precision == "bf16" and device in ("h100", "h200") and not moe

    def text(self) -> str:
        return (f"error band {100 * self.low:+.1f} % .. {100 * self.high:+.1f} % "
                f"(predicted vs measured on {self.rows} published BF16 H100 runs)")


@lru_cache(maxsize=1)
def held_in_band() -> ErrorBand:
    """The band of the current cost model on :data:`HELD_IN` (evaluated once per process)."""
    from dnnplace.models.llm.evaluation.step import evaluate

    errors = [evaluate(r.problem(), r.config()).step_time_s / r.measured_s - 1 for r in HELD_IN]
    return ErrorBand(min(errors), max(errors), len(errors))
