"""The serving model's instance and plan: a model on a fleet under a workload, and a deployment.

Why frozen dataclasses of plain values: a plan is priced by one evaluator, written to JSON, read
back and exported to five engines; each reads the same fields (``replicas[*].stages[*]`` with the
GPUs in stage order and the layers of each stage) so no exporter re-derives a split.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from dnnplace.models.serving.catalogue import EngineRules, sglang_mem_fraction
from dnnplace.models.serving.fleet import Fleet

__all__ = ["FORMAT", "LayerProfile", "Replica", "ServingConfig", "ServingPlan", "ServingProblem", "Stage",
           "SLO_STATS", "Workload", "slo_flag", "with_expert_parallel"]

FORMAT = "dnnplace-serving-plan/1"


@dataclass(frozen=True)
class LayerProfile:
    """What one model costs per decoder layer, independent of the GPUs: the planner's view of an
    architecture at a precision.  Arrays have one entry per decoder layer (layers differ: GGUF mixes,
    windowed or MoE layers)."""

    name: str
    num_layers: int
    hidden: int
    ffn: int  # dense MLP width (0 on an MoE layer: see experts)
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    weight_bytes: np.ndarray  # bytes of each decoder layer's weights (all TP shards together)
    kv_bytes_per_token: np.ndarray  # K and V bytes per token per layer, all KV heads (MLA: the latent)
    kv_shardable: bool  # False: MLA's latent is replicated over TP
    window: np.ndarray  # keys each layer's queries see (0: all)
    moe: np.ndarray  # True where the layer has routed experts
    experts: int = 0
    top_k: int = 0
    expert_ffn: int = 0
    shared_ffn: int = 0
    embed_bytes: float = 0.0  # the input embedding (vocab x hidden at 16 bits)
    head_bytes: float = 0.0  # the LM head (vocab x hidden at 16 bits, or Q6_K in a GGUF file)
    weight_dtype: str = "bf16"  # the GEMM dtype the kernels price
    precision: str = "bf16"
    max_position: int = 4096
    source: str = ""
    # share of each layer's attention / MLP (routed experts on an MoE layer) weights a quantized checkpoint
    # keeps at 16 bits (its list of unconverted modules); None: all at ``weight_dtype``
    attn_16bit: np.ndarray | None = None
    mlp_16bit: np.ndarray | None = None
    # the routed experts split whole over each stage's TP group (expert parallelism: vLLM's
    # --enable-expert-parallel, SGLang's --ep-size, TensorRT-LLM's moe_expert_parallel_size) rather than each
    # expert's matrices sharded over it (every engine's default); the deployment's knob, priced per layer
    expert_parallel: bool = False
    # the checkpoint's quantization method ("mxfp4", "modelopt", "awq", ...; "" for --precision alone): which
    # kernels an engine runs the weights with (GPT-OSS's MXFP4 is not NVFP4)
    weight_format: str = ""
    # the routed experts' kernel dtype where it is not ``weight_dtype`` ("": the same): a block-scaled FP8
    # checkpoint's fused MoE runs the block-scaled kernels (the tables' fp8_block), its dense GEMMs are priced
    # from the per-tensor FP8 rows (load.profile_from says why); "mxfp4": an MXFP4 checkpoint's experts, whose
    # kernel depends on the engine and GPU (catalogue.mxfp4_moe_kernel)
    moe_dtype: str = ""

    def kv_per_gpu(self, tp: int) -> np.ndarray:
        """KV bytes per token per layer on one GPU of a TP group of ``tp`` (KV heads replicate when fewer
        than ``tp``; an MLA latent never shards)."""
        if not self.kv_shardable:
            return self.kv_bytes_per_token
        per_head = self.kv_bytes_per_token / max(self.kv_heads, 1)
        return per_head * max(self.kv_heads // tp, 1)


#: The latency statistics an SLO may bound, as the simulation reports them (``simulator._stats``) and the
#: serving benchmarks print them (``vllm bench serve``: mean, median, P99 TTFT and TPOT).
SLO_STATS = ("mean", "p50", "p99")


def slo_flag(metric: str, stat: str) -> str:
    """The ``dnnplace serve`` flag of an SLO: ``--ttft-ms`` bounds the mean, ``--ttft-p99-ms`` the 99th percentile."""
    return f"--{metric}-ms" if stat == "mean" else f"--{metric}-{stat}-ms"


@dataclass(frozen=True)
class Workload:
    """Requests of ``isl`` prompt and ``osl`` output tokens; offline (both None), or ``rate`` requests/s,
    or ``concurrency`` requests in flight.  ``ttft_stat`` / ``tpot_stat``: which statistic of the requests'
    latencies each SLO bounds (:data:`SLO_STATS`: the mean, the median or the 99th percentile).

    With ``lengths`` (a distribution: (isl, osl, weight) rows, weights > 0, each pair once) ``isl`` and ``osl``
    are its weighted means rounded to whole tokens: the steady-state evaluator prices the mean request, which
    keeps the prompt-to-decode token ratio exact (prompt tokens arrive at the completion rate times the mean
    prompt, decodes at the same rate times the mean output).  What a running request holds is length-biased
    (:attr:`held`), whether one fits is the longest's business (:attr:`max_len`), and the simulation draws each
    request's own lengths from the rows."""

    isl: int
    osl: int
    rate: float | None = None
    concurrency: int | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    ttft_stat: str = "mean"
    tpot_stat: str = "mean"
    lengths: tuple[tuple[int, int, float], ...] | None = None
    lengths_source: str = field(default="", compare=False)  # the file the distribution was read from
    #: ``both`` (an engine that prefills and decodes), or the decode pool of a disaggregated deployment
    #: (``decode``: each prompt's KV cache arrives from a prefill instance, no prompt token is computed)
    phase: str = "both"

    @property
    def mode(self) -> str:
        return "rate" if self.rate is not None else "concurrency" if self.concurrency is not None else "offline"

    @cached_property
    def max_len(self) -> int:
        """Tokens of the longest request (prompt + output): the one that must fit a replica's KV cache."""
        if self.lengths is None:
            return self.isl + self.osl
        return max(i + o for i, o, _ in self.lengths)

    def _biased(self, tokens: Callable[[int, int], float]) -> float:
        """The mean of ``tokens(isl, osl)`` over the requests in flight: a request is in flight for its ``osl``
        decode steps, so each row counts by weight times output length (a long answer is met more often)."""
        assert self.lengths is not None
        num = den = 0.0
        for i, o, w in self.lengths:
            num += w * o * tokens(i, o)
            den += w * o
        return num / den

    @cached_property
    def held(self) -> float:
        """KV tokens a running request holds on average: its prompt plus half its output, length-biased by
        its residence (:meth:`_biased`); for identical requests ``isl + osl / 2``."""
        if self.lengths is None:
            return self.isl + self.osl / 2
        return self._biased(lambda i, o: i + o / 2)

    @cached_property
    def held_whole(self) -> float:
        """:attr:`held` for an engine that reserves a request's whole length on admission (TensorRT-LLM):
        the length-biased mean of ``isl + osl``."""
        if self.lengths is None:
            return float(self.isl + self.osl)
        return self._biased(lambda i, o: float(i + o))


@dataclass(frozen=True)
class ServingProblem:
    """A model (its layer profile) to serve on a fleet under a workload with one engine."""

    model: LayerProfile
    fleet: Fleet
    workload: Workload
    engine: EngineRules
    kv_dtype: str = "bf16"
    max_model_len: int = 0  # 0: the model's own maximum
    block_size: int = 0  # 0: the engine's
    memory_fraction: float = 0.0  # 0: the engine's
    source: str = ""

    @property
    def context(self) -> int:
        return self.max_model_len or self.model.max_position

    @property
    def block(self) -> int:
        return self.block_size or self.engine.block_size

    @property
    def fraction(self) -> float:
        """The memory fraction given, else the engine's fixed default (SGLang's rule: :meth:`fraction_for`)."""
        return self.memory_fraction or self.engine.memory_fraction

    def fraction_for(self, gpu_bytes: float, tp: int, pp: int) -> float:
        """The fraction a launch of ``tp`` x ``pp`` GPUs of ``gpu_bytes`` each runs with: the one given, else the
        engine's default for that launch (SGLang derives it from the GPU and the launch's size)."""
        if self.memory_fraction or self.engine.fraction_rule != "sglang":
            return self.fraction
        return sglang_mem_fraction(gpu_bytes / 2**20, tp, pp)


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: ``tp`` GPUs of one type in one node (``gpus``: their indices in the node, in
    TP-rank order) running ``layers`` consecutive decoder layers."""

    gpu: str
    node: int
    gpus: tuple[int, ...]
    layers: int

    @property
    def tp(self) -> int:
        return len(self.gpus)


@dataclass(frozen=True)
class Replica:
    """One copy of the model: its stages in pipeline order (uniform TP, as every engine demands)."""

    stages: tuple[Stage, ...]

    @property
    def tp(self) -> int:
        return self.stages[0].tp

    @property
    def pp(self) -> int:
        return len(self.stages)

    def partition(self) -> list[int]:
        return [s.layers for s in self.stages]


@dataclass(frozen=True)
class ServingConfig:
    """A deployment: the replicas (data parallel) and the engine's batch limits."""

    replicas: tuple[Replica, ...]
    max_num_seqs: int
    max_num_batched_tokens: int
    expert_parallel: bool = False  # routed experts whole over each stage's TP group (LayerProfile.expert_parallel)


@dataclass(frozen=True)
class ServingPlan:
    """A deployment with what was proven about it (status, bound on the objective, gap, runtime)."""

    config: ServingConfig
    status: str = "optimal"
    bound: float | None = None
    gap: float | None = None
    runtime_s: float | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False)


#: The expert-parallel variants of problems made so far: (the problem, its variant) by id of the problem, so
#: every caller pricing one deployment sees one variant object (the layer-time caches key on id(model)).
_EP_VARIANTS: dict[int, tuple[ServingProblem, ServingProblem]] = {}
_EP_VARIANTS_CAP = 64


def with_expert_parallel(p: ServingProblem, on: bool) -> ServingProblem:
    """``p`` with its model priced with (``on``) or without expert parallelism: ``p`` itself where it already is.

    Why a problem variant, not an argument through every pricing call: a layer's time is cached per model
    object, and the knob changes only the MoE layers' kernel shapes; a variant model is a second cache entry."""
    import dataclasses

    if p.model.expert_parallel == on:
        return p
    hit = _EP_VARIANTS.get(id(p))
    if hit is not None and hit[0] is p:
        return hit[1]
    if len(_EP_VARIANTS) >= _EP_VARIANTS_CAP:
        _EP_VARIANTS.clear()
    variant = dataclasses.replace(p, model=dataclasses.replace(p.model, expert_parallel=on))
    _EP_VARIANTS[id(p)] = (p, variant)
    _EP_VARIANTS[id(variant)] = (variant, p)
    return variant
