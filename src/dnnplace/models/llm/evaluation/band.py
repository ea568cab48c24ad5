"""The cost model's measured error bands, and when two predictions cannot be told apart by one.

A band is the range of relative errors (predicted / measured - 1) of the evaluator on published runs
of one *kind* (:data:`KINDS`): the BF16 Hopper rows the cost model was built against (:data:`HELD_IN`,
NVIDIA's BF16 H100 Llama 3.1 step times), and the rows it was not built on -- FP8 on Hopper, and
Blackwell / NVL72 (:data:`CHECKED`) -- and the mixture-of-experts runs issue #32 names (:data:`MOE_PUBLISHED`:
DeepSeek-V3, Llama 4 Maverick, Qwen3-30B-A3B on H100 and GB200 NVL72).  No constant of the cost model is
fitted to any of them, so a band says how far off the model is on that kind of run, not how well it was tuned.
Bands are recomputed from the current cost model, never stored as figures, so a change of the model moves them.
All MoE rows make one band, whatever their GPU: five rows are too few to split, and a band that is
wide says so plainly (docs/moe.md gives the errors on 120 more published MoE runs).  A run of no kind
here (an A100) gets no band, and the plan says so (docs/dev/fidelity.md).

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

__all__ = ["CHECKED", "HELD_IN", "KINDS", "MOE_PUBLISHED", "PUBLISHED", "ErrorBand", "HeldInRow",
           "PublishedMoERow", "PublishedRow", "band_for", "held_in_band", "kind_of", "published_split"]

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
#: grad_reduce_in_fp32=False; so does the 405B BF16 run: dgxc 25.05 pins NeMo 6f2c6fd, whose perf script calls
#: pretrain_recipe(performance_mode=True), and pretrain_performance_optimizations sets the plugin's
#: grad_reduce_in_fp32 = False, which MegatronStrategy writes into the DDP config (update_config_with_dtype_overrides).
CHECKED: tuple[PublishedRow, ...] = (
    PublishedRow(_LLAMA_8B, 8, 1, 1, 2, 1, 128, 9.44, _FP8_2412, "bf16", "fp8"),
    PublishedRow(_LLAMA_70B, 64, 4, 4, 2, 5, 128, 10.46, _FP8_2412, "bf16", "fp8"),
    PublishedRow(LLAMA_405B, 128, 4, 8, 2, 8, 64, 9.347, _GB200_2504, "bf16", "bf16", "gb200-nvl72"),
    PublishedRow(LLAMA_405B, 128, 4, 8, 2, 8, 64, 6.131, _GB200_2504, "bf16", "fp8", "gb200-nvl72"),
)
PUBLISHED: tuple[PublishedRow, ...] = HELD_IN + CHECKED

#: DeepSeek-V3's layouts (decoder layers per virtual stage; the embedding sits on the first, the MTP layer and the
#: loss on the last).  PP8 VP2: the 25.08 recipe's map_pp_vp_to_layout (NeMo scripts/performance/llm/
#: pretrain_deepseek_v3.py at the commit dgxc 25.08 pins), Et*4|(t*4|)*14|tL.  PP4: the 25.05 recipe (NeMo 25.04,
#: same script at v2.3.0) sets num_layers_in_first_pipeline_stage = 64/pp - 1 and the last 64/pp - 2.
_DS_PP8_VP2 = (4,) * 15 + (1,)
DS_PP4_SPLIT = (15, 16, 16, 14)
_DGXC = "NVIDIA dgxc-benchmarking"


@dataclass(frozen=True)
class PublishedMoERow:
    """One published mixture-of-experts run (issue #32's rows): the bundled config.json
    (``models/llm/published``), the system, the published layout and the measured seconds per step."""

    model: str  # config file stem under models/llm/published
    label: str
    system: str  # catalogue device name
    gpus_per_domain: int  # GPUs per NVLink domain
    gpus: int
    precision: str
    tp: int
    pp: int
    vp: int
    ep: int
    etp: int
    global_batch: int
    seq_len: int
    measured_s: float
    source: str
    dispatcher: str = "alltoall"
    recompute_modules: tuple[str, ...] = ()
    layers_per_stage: tuple[int, ...] = ()

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)

    def problem(self) -> LLMProblem:
        from dnnplace.models.llm.load import problem
        from dnnplace.models.llm.published import config_path

        return problem(config_path(self.model), gpus=self.gpus, seq_len=self.seq_len, global_batch=self.global_batch,
                       gpus_per_node=self.gpus_per_domain, device=self.system, precision=self.precision)

    def config(self) -> ParallelConfig:
        from dnnplace.models.llm.moe_knobs import module_set

        return ParallelConfig(self.tp, self.pp, self.vp, 1, self.dp, 1,
                              "selective" if self.recompute_modules else "none", self.tp > 1, True,
                              self.layers_per_stage, ep=self.ep, etp=self.etp, dispatcher=self.dispatcher,
                              recompute_modules=module_set(self.recompute_modules))

    def error(self) -> float:
        """Predicted / measured - 1 of the current cost model on this run's published configuration."""
        from dnnplace.models.llm.evaluation.step import evaluate

        return evaluate(self.problem(), self.config()).step_time_s / self.measured_s - 1


#: GB200 NVL72: a job of 256 GPUs fills 64-GPU segments of its racks (``SystemSpec.domain_for``).
MOE_PUBLISHED: tuple[PublishedMoERow, ...] = (
    PublishedMoERow("deepseek-v3", "DeepSeek-V3", "h100", 8, 1024, "bf16", 1, 8, 2, 64, 1, 8192, 4096, 36.189,
                    f"{_DGXC} 25.08", dispatcher="flex", recompute_modules=("mla_up_proj", "mlp", "moe"),
                    layers_per_stage=_DS_PP8_VP2),  # the 25.08 script: H100 uses DeepEP (flex), forced balancing
    PublishedMoERow("deepseek-v3", "DeepSeek-V3", "gb200", system_spec("gb200-nvl72").domain_for(256), 256, "bf16",
                    2, 4, 1, 64, 1, 2048, 4096, 34.194, f"{_DGXC} 25.05", recompute_modules=("core_attn",),
                    layers_per_stage=DS_PP4_SPLIT),  # launch.sh RM=core_attn
    PublishedMoERow("llama-4-maverick-17b-128e", "Llama 4 Maverick", "h100", 8, 512, "bf16", 4, 1, 1, 128, 4, 1024,
                    8192, 4.426, f"{_DGXC} 25.05", layers_per_stage=(48,)),
    PublishedMoERow("llama-4-maverick-17b-128e", "Llama 4 Maverick", "h100", 8, 512, "fp8", 4, 1, 1, 128, 4, 1024,
                    8192, 3.855, f"{_DGXC} 25.05", layers_per_stage=(48,)),
    PublishedMoERow("qwen3-30b-a3b", "Qwen3-30B-A3B", "h100", 8, 16, "bf16", 1, 1, 1, 16, 1, 1024, 4096, 20.147,
                    "Megatron-Bridge MoE performance notes", dispatcher="flex", layers_per_stage=(48,)),
)

#: Each kind of run with a band: what its rows are, in words.
KINDS: dict[str, str] = {
    "bf16-hopper": "published BF16 H100 runs",
    "fp8-hopper": "published FP8 H100 runs, not built on",
    "blackwell": "published Blackwell runs, not built on",
    "moe": "published mixture-of-experts runs (H100 and GB200)",
}


def kind_of(precision: str, device: str, moe: bool = False) -> str | None:
    """The kind of run whose published rows are evidence for this one, or None.  Mixtures of experts price
    terms no dense row exercises (dispatch, grouped GEMMs): no dense band covers them, their own rows do."""
    generation = GPU_GENERATIONS.get(device)
    if generation is None:
        return None
    if moe:
        return "moe" if generation in ("hopper", "blackwell") else None
    if generation == "hopper":
        return "bf16-hopper" if precision == "bf16" else "fp8-hopper"
    return "blackwell" if generation == "blackwell" else None


def _row_kind(row: PublishedRow | PublishedMoERow) -> str | None:
    return kind_of(row.precision, row.problem().device.name, isinstance(row, PublishedMoERow))


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
    rows: tuple[PublishedRow | PublishedMoERow, ...] = (*PUBLISHED, *MOE_PUBLISHED)
    errors = [r.error() for r in rows if _row_kind(r) == kind]
    return ErrorBand(min(errors), max(errors), len(errors), KINDS[kind])


def band_for(precision: str, device: str, moe: bool = False) -> ErrorBand | None:
    """The band of the current cost model on the published runs of this run's kind (None: no such rows)."""
    kind = kind_of(precision, device, moe)
    return None if kind is None else _band(kind)


def held_in_band() -> ErrorBand:
    """The band of the current cost model on :data:`HELD_IN` (evaluated once per process)."""
    return _band("bf16-hopper")
