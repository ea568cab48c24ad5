"""The cost model's measured error bands, and when two predictions cannot be told apart by one.

A band is the range of relative errors (predicted / measured - 1) of the evaluator on published runs
of one *kind* (:data:`KINDS`): the BF16 Hopper rows the cost model was built against (:data:`HELD_IN`,
NVIDIA's BF16 H100 Llama 3.1 step times), and the rows it was not built on -- FP8 on Hopper, and
Blackwell / NVL72 (:data:`CHECKED`).  No constant of the cost model is fitted to any of them, so a
band says how far off the model is on that kind of run, not how well it was tuned.  Bands are
recomputed from the current cost model, never stored as figures, so a change of the model moves them.
A run of no kind here (a mixture of experts, an A100) gets no band, and the plan says so
(docs/dev/fidelity.md, docs/moe.md give the MoE rows' errors).

Two predictions ``best <= other`` cannot be told apart when the errors of the band could reverse
them: with true time = predicted / (1 + e), e in [low, high], ``best`` may really take
best / (1 + low) and ``other`` other / (1 + high); the order is certain only if
other / (1 + high) >= best / (1 + low).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from dnnplace.core.catalogue import device_spec
from dnnplace.core.systems import GPU_GENERATIONS, system_device, system_spec
from dnnplace.models.llm.spec import Cluster, LLMProblem, ParallelConfig, TrainingJob, TransformerArch

__all__ = ["CHECKED", "HELD_IN", "KINDS", "PUBLISHED", "ErrorBand", "HeldInRow", "PublishedRow", "band_for",
           "held_in_band", "kind_of", "published_split"]

_LLAMA_8B = TransformerArch("llama3.1-8b", "llama", 32, 4096, 14336, 32, 8, 128, 128256, max_position=131072,
                            architecture="LlamaForCausalLM", rope_theta=500000.0)
_LLAMA_70B = TransformerArch("llama3.1-70b", "llama", 80, 8192, 28672, 64, 8, 128, 128256, max_position=131072,
                             architecture="LlamaForCausalLM", rope_theta=500000.0)
LLAMA_405B = TransformerArch("llama3.1-405b", "llama", 126, 16384, 53248, 128, 8, 128, 128256,
                             max_position=131072, architecture="LlamaForCausalLM", rope_theta=500000.0,
                             source="Llama 3.1 405B config (Meta)")
# NVIDIA dgxc-benchmarking Llama 3.1 recipes: BF16 on H100 80GB SXM, 8 per node (NeMo 24.09); FP8 on H100
# (NeMo 24.12); 405B on GB200 NVL72, BF16 and FP8 (NeMo 25.04.01).
_SOURCE = "dgxc-benchmarking, NeMo 24.09"


def published_split(layers: int, stages: int) -> tuple[int, ...]:
    """Decoder layers per virtual stage as NVIDIA's recipes split them: equal when ``stages`` divides
    ``layers``, else the first and last virtual stage one layer short (Megatron's
    account_for_embedding / account_for_loss_in_pipeline_split), which may leave them empty."""
    if layers % stages == 0:
        return (layers // stages,) * stages
    inner = (layers + 2) // stages
    return (inner - 1,) + (inner,) * (stages - 2) + (inner - 1,)


@dataclass(frozen=True)
class PublishedRow:
    """One published run: model, machine, precision, the published configuration and its measured step time.

    ``system`` is ``"h100"`` (the catalogue H100, 8 per NVLink node) or a systems-catalogue name, priced with
    the system's GPU and the NVLink group a job of this size sees (``SystemSpec.domain_for``)."""

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
    precision: str = "bf16"
    system: str = "h100"
    seq_len: int = 8192

    def problem(self) -> LLMProblem:
        if self.system == "h100":
            dev, gpn = device_spec("h100"), 8
        else:
            spec = system_spec(self.system)
            dev, gpn = system_device(spec), spec.domain_for(self.gpus)
        return LLMProblem(self.arch, Cluster(dev.name, self.gpus, gpn),
                          TrainingJob(self.seq_len, self.global_batch, self.precision), dev)

    def config(self) -> ParallelConfig:
        """The published knobs; layers in equal virtual stages, or NeMo's split that gives the first and last
        virtual stage one layer less (account_for_embedding / account_for_loss) when they do not divide."""
        split = published_split(self.arch.num_layers, self.pp * self.vp)
        return ParallelConfig(self.tp, self.pp, self.vp, self.cp, self.gpus // (self.tp * self.pp * self.cp), 1,
                              "none", self.tp > 1, True, split, grad_dtype=self.grad_dtype)

    def error(self) -> float:
        """Predicted / measured - 1 of the current cost model on this run's published configuration."""
        from dnnplace.models.llm.evaluation.step import evaluate

        return evaluate(self.problem(), self.config()).step_time_s / self.measured_s - 1


HeldInRow = PublishedRow  # the name the held-in rows had first

HELD_IN: tuple[PublishedRow, ...] = (
    tuple(PublishedRow(_LLAMA_8B, g, 1, 1, 2, 1, 128 * g // 8, t)
          for g, t in ((8, 12.91), (16, 13.00), (32, 13.05), (64, 13.08), (128, 13.10)))
    + tuple(PublishedRow(_LLAMA_70B, g, 4, 4, 2, 5, 128 * g // 64, t)
            for g, t in ((64, 14.72), (128, 14.73), (256, 14.80), (512, 14.89), (1024, 14.92), (2048, 14.98))))

_FP8_2412 = "dgxc-benchmarking, NeMo 24.12"
_GB200_2504 = "dgxc-benchmarking, NeMo 25.04.01"
#: The published runs the cost model was not built on (issue #31's rows).  Gradient buffers as each run's
#: script sets them: NeMo 24.12's FP8 scripts and NeMo 2.3's set_primary_perf_configs (fp8) pass
#: grad_reduce_in_fp32=False; the 405B BF16 script keeps the recipe's FP32 default.
CHECKED: tuple[PublishedRow, ...] = (
    PublishedRow(_LLAMA_8B, 8, 1, 1, 2, 1, 128, 9.44, _FP8_2412, "bf16", "fp8"),
    PublishedRow(_LLAMA_70B, 64, 4, 4, 2, 5, 128, 10.46, _FP8_2412, "bf16", "fp8"),
    PublishedRow(LLAMA_405B, 128, 4, 8, 2, 8, 64, 9.347, _GB200_2504, "fp32", "bf16", "gb200-nvl72"),
    PublishedRow(LLAMA_405B, 128, 4, 8, 2, 8, 64, 6.131, _GB200_2504, "bf16", "fp8", "gb200-nvl72"),
)
PUBLISHED: tuple[PublishedRow, ...] = HELD_IN + CHECKED

#: Each kind of run with a band: what its rows are, in words.
KINDS: dict[str, str] = {
    "bf16-hopper": "published BF16 H100 runs",
    "fp8-hopper": "published FP8 H100 runs, not built on",
    "blackwell": "published Blackwell runs, not built on",
}


def kind_of(precision: str, device: str, moe: bool = False) -> str | None:
    """The kind of run whose published rows are evidence for this one, or None.  Mixtures of experts price
    terms no dense row exercises (dispatch, grouped GEMMs): no dense band covers them."""
    generation = GPU_GENERATIONS.get(device)
    if moe or generation is None:
        return None
    if generation == "hopper":
        return "bf16-hopper" if precision == "bf16" else "fp8-hopper"
    return "blackwell" if generation == "blackwell" else None


def _row_kind(row: PublishedRow) -> str | None:
    return kind_of(row.precision, row.problem().device.name)


@dataclass(frozen=True)
class ErrorBand:
    """Relative errors predicted / measured - 1 of one kind's rows: ``low`` <= every one <= ``high``."""

    low: float
    high: float
    rows: int
    what: str = KINDS["bf16-hopper"]

    def measured_range(self, predicted_s: float) -> tuple[float, float]:
        """The step times the band allows for a prediction (shortest, longest)."""
        return predicted_s / (1 + self.high), predicted_s / (1 + self.low)

    def indistinguishable(self, best_s: float, other_s: float) -> bool:
        """Could the band's errors reverse ``best_s`` <= ``other_s`` (module docstring)?"""
        lo, hi = sorted((best_s, other_s))
        return hi / (1 + self.high) < lo / (1 + self.low)

    @staticmethod
    def covers(precision: str, device: str, moe: bool = False) -> bool:
        """Is the held-in band evidence for this run: a dense model in BF16 on the Hopper GPUs it was measured on?"""
        return kind_of(precision, device, moe) == "bf16-hopper"

    def text(self) -> str:
        return (f"error band {100 * self.low:+.1f} % .. {100 * self.high:+.1f} % "
                f"(predicted vs measured on {self.rows} {self.what})")

    def to_dict(self, predicted_s: float) -> dict[str, Any]:
        """What a plan document records of its band: the range of errors, the rows, the step times allowed."""
        lo, hi = self.measured_range(predicted_s)
        return {"low": self.low, "high": self.high, "rows": self.rows, "evidence": self.what,
                "measured_low_s": lo, "measured_high_s": hi}


@lru_cache(maxsize=8)
def _band(kind: str) -> ErrorBand:
    errors = [r.error() for r in PUBLISHED if _row_kind(r) == kind]
    return ErrorBand(min(errors), max(errors), len(errors), KINDS[kind])


def band_for(precision: str, device: str, moe: bool = False) -> ErrorBand | None:
    """The band of the current cost model on the published runs of this run's kind (None: no such rows)."""
    kind = kind_of(precision, device, moe)
    return None if kind is None else _band(kind)


def held_in_band() -> ErrorBand:
    """The band of the current cost model on :data:`HELD_IN` (evaluated once per process)."""
    return _band("bf16-hopper")
