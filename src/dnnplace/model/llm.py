"""The LLM training planner's vocabulary: architecture, cluster, job, parallel configuration, plan.

All frozen dataclasses.  :meth:`LLMPlan.to_dict` / :meth:`LLMPlan.from_dict`
write and read the plan-file schema ``dnnplace.llm-plan`` version 1 (docs/llm_planner.md),
which the Megatron / torchtitan / DeepSpeed exporters read.

MoE: the fields exist so a config can be described, but the planner refuses
``num_experts > 1`` in one line (expert parallelism is not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.model.catalogue import DeviceSpec

__all__ = ["MLP_KINDS", "RECOMPUTE", "Cluster", "LLMEstimate", "LLMPlan", "LLMProblem", "ParallelConfig",
           "TrainingJob", "TransformerArch"]

MLP_KINDS = ("swiglu", "geglu", "gelu", "relu2")  # swiglu/geglu are gated (3 matrices); gelu, squared-ReLU not
RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp8")
FORMAT = "dnnplace.llm-plan"
VERSION = 1
TIME_KEYS = ("compute", "tp_comm_exposed", "cp_comm_exposed", "pp_comm_exposed", "dp_comm_exposed", "bubble")
MEMORY_KEYS = ("weights", "gradients", "optimizer", "activations", "buffers")


@dataclass(frozen=True)
class TransformerArch:
    """A dense decoder-only transformer, as much as its cost depends on."""

    name: str
    family: str
    num_layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool = False
    mlp: str = "swiglu"
    position: str = "rope"  # rope | learned
    norm: str = "rms"  # rms | layer
    max_position: int = 4096
    dropout: bool = False  # any dropout > 0 (dropout masks are stored for the backward pass)
    architecture: str = ""  # the HF class name, e.g. LlamaForCausalLM
    source: str = ""  # where the config came from
    num_experts: int = 1
    top_k: int = 1
    expert_ffn: int = 0
    shared_experts: int = 0
    # What the trainer must be told to build exactly this model (the exporters spell each out) and what
    # the attention cost depends on beyond the widths.
    rope_theta: float = 10_000.0  # RoPE base frequency (config's rope_theta)
    qkv_bias: bool = False  # biases on the Q, K, V projections only (Qwen2)
    linear_bias: bool = False  # biases on every linear layer (GPT-2, GPT-NeoX)
    qk_norm: bool = False  # a norm on queries and keys per head (Qwen3, Gemma 3)
    sliding_window: int = 0  # keys each query sees in a windowed layer; 0: every layer attends to all
    global_every: int = 0  # with a window: every n-th layer (n-1, 2n-1, ...) is global; 0: all windowed

    @property
    def gated(self) -> bool:
        return self.mlp in ("swiglu", "geglu")

    @property
    def windowed_layers(self) -> int:
        """Layers whose attention is limited to :attr:`sliding_window` keys."""
        if not self.sliding_window:
            return 0
        if not self.global_every:
            return self.num_layers
        return self.num_layers - self.num_layers // self.global_every

    @property
    def q_width(self) -> int:
        """Width of the query projection (heads x head_dim; need not equal hidden)."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim


@dataclass(frozen=True)
class Cluster:
    device: str
    gpus: int
    gpus_per_node: int = 8


@dataclass(frozen=True)
class TrainingJob:
    seq_len: int
    global_batch: int
    precision: str = "bf16"


@dataclass(frozen=True)
class LLMProblem:
    arch: TransformerArch
    cluster: Cluster
    job: TrainingJob
    device: DeviceSpec


@dataclass(frozen=True)
class ParallelConfig:
    """One point of the decision space (Megatron's knobs).

    ``layers_per_stage`` has pp*vp entries: virtual stage i runs on pipeline rank
    i % pp as its chunk i // pp (Megatron's interleaved order).
    """

    tp: int
    pp: int
    vp: int
    cp: int
    dp: int
    mbs: int
    recompute: str = "none"
    sequence_parallel: bool = True
    distributed_optimizer: bool = True
    layers_per_stage: tuple[int, ...] = ()

    def rank_layers(self, rank: int) -> int:
        """Layers held by pipeline rank ``rank`` over all its chunks."""
        return sum(self.layers_per_stage[rank::self.pp])

    @property
    def first_stage_layers(self) -> int:
        return self.rank_layers(0)

    @property
    def last_stage_layers(self) -> int:
        return self.rank_layers(self.pp - 1)


@dataclass(frozen=True)
class LLMEstimate:
    """What the evaluator predicts for one configuration (per training step)."""

    step_time_s: float
    tokens_per_s: float
    mfu: float
    model_flops_per_step: float
    memory_per_gpu_bytes: float
    memory_breakdown: dict[str, float]
    time_breakdown: dict[str, float]
    fits: bool
    overflow: str | None
    num_microbatches: int
    mfu_bf16_peak: float | None = None  # model FLOP/s over the dense BF16 peak (NVIDIA's tables), any precision

    @property
    def feasible(self) -> bool:
        return self.fits

    def value(self, objective: str = "throughput") -> float:
        """The objective's value: the predicted seconds per training step."""
        return self.step_time_s

    def prediction_dict(self) -> dict[str, Any]:
        return {"step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
                "mfu_bf16_peak": self.mfu_bf16_peak,
                "model_flops_per_step": self.model_flops_per_step,
                "memory_per_gpu_bytes": self.memory_per_gpu_bytes,
                "memory_breakdown": dict(self.memory_breakdown), "time_breakdown": dict(self.time_breakdown),
                "fits": self.fits, "overflow": self.overflow}


@dataclass(frozen=True)
class LLMPlan:
    """A configuration, its estimate, and what the search proved about it."""

    problem: LLMProblem
    config: ParallelConfig
    estimate: LLMEstimate
    status: str
    bound: float
    gap: float
    exhaustive: bool
    runtime_s: float

    def to_dict(self) -> dict[str, Any]:
        a, c, j, cfg = self.problem.arch, self.problem.cluster, self.problem.job, self.config
        return {
            "format": FORMAT, "version": VERSION,
            "model": {"name": a.name, "architecture": a.architecture, "family": a.family,
                      "num_layers": a.num_layers, "hidden_size": a.hidden, "ffn_hidden_size": a.ffn_hidden,
                      "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "vocab_size": a.vocab,
                      "tied_embeddings": a.tied_embeddings, "mlp": a.mlp, "position": a.position, "norm": a.norm,
                      "source": a.source},
            "cluster": {"device": c.device, "gpus": c.gpus, "gpus_per_node": c.gpus_per_node},
            "job": {"seq_len": j.seq_len, "global_batch": j.global_batch, "precision": j.precision},
            "config": {"tp": cfg.tp, "pp": cfg.pp, "vp": cfg.vp, "cp": cfg.cp, "dp": cfg.dp, "mbs": cfg.mbs,
                       "num_microbatches": self.estimate.num_microbatches, "recompute": cfg.recompute,
                       "sequence_parallel": cfg.sequence_parallel,
                       "distributed_optimizer": cfg.distributed_optimizer,
                       "layers_per_stage": list(cfg.layers_per_stage),
                       "first_stage_layers": cfg.first_stage_layers, "last_stage_layers": cfg.last_stage_layers},
            "prediction": self.estimate.prediction_dict(),
            "status": self.status, "bound": self.bound, "gap": self.gap, "exhaustive": self.exhaustive,
            "runtime_s": self.runtime_s,
        }

    @staticmethod
    def from_dict(doc: Any) -> LLMPlan:
        """Read a plan document back (the architecture's head_dim = hidden / heads, as the file keeps)."""
        from dnnplace.model.catalogue import device_spec

        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
            raise DnnplaceError(f"not a {FORMAT} version {VERSION} document")
        try:
            m, c, j, g, p = doc["model"], doc["cluster"], doc["job"], doc["config"], doc["prediction"]
            arch = TransformerArch(
                name=m["name"], family=m["family"], num_layers=m["num_layers"], hidden=m["hidden_size"],
                ffn_hidden=m["ffn_hidden_size"], heads=m["num_attention_heads"],
                kv_heads=m["num_key_value_heads"], head_dim=m["hidden_size"] // m["num_attention_heads"],
                vocab=m["vocab_size"], tied_embeddings=m["tied_embeddings"], mlp=m["mlp"],
                position=m["position"], norm=m["norm"], architecture=m["architecture"], source=m["source"])
            cluster = Cluster(c["device"], c["gpus"], c["gpus_per_node"])
            problem = LLMProblem(arch, cluster, TrainingJob(j["seq_len"], j["global_batch"], j["precision"]),
                                 device_spec(c["device"]))
            cfg = ParallelConfig(tp=g["tp"], pp=g["pp"], vp=g["vp"], cp=g["cp"], dp=g["dp"], mbs=g["mbs"],
                                 recompute=g["recompute"], sequence_parallel=g["sequence_parallel"],
                                 distributed_optimizer=g["distributed_optimizer"],
                                 layers_per_stage=tuple(g["layers_per_stage"]))
            est = LLMEstimate(step_time_s=p["step_time_s"], tokens_per_s=p["tokens_per_s"], mfu=p["mfu"],
                              model_flops_per_step=p["model_flops_per_step"],
                              memory_per_gpu_bytes=p["memory_per_gpu_bytes"],
                              memory_breakdown=_breakdown(p, "memory_breakdown"),
                              time_breakdown=_breakdown(p, "time_breakdown"), fits=p["fits"], overflow=p["overflow"],
                              num_microbatches=g["num_microbatches"], mfu_bf16_peak=p.get("mfu_bf16_peak"))
            if not isinstance(doc["status"], str):
                raise DnnplaceError("plan document: 'status' must be a string")
            return LLMPlan(problem, cfg, est, status=doc["status"], bound=_claimed_number(doc, "bound"),
                           gap=_claimed_number(doc, "gap"), exhaustive=doc["exhaustive"],
                           runtime_s=_claimed_number(doc, "runtime_s"))
        except (KeyError, TypeError) as exc:
            raise DnnplaceError(f"plan document lacks or mistypes {exc}") from None


def _breakdown(prediction: dict, key: str) -> dict[str, float]:
    """A prediction's breakdown (part name -> seconds or bytes): an object of numbers, or the file is refused."""
    v = prediction[key]
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, (int, float))
                                          and not isinstance(x, bool) for k, x in v.items()):
        raise DnnplaceError(f"plan document: prediction {key!r} must map part names to numbers")
    return {k: float(x) for k, x in v.items()}


def _claimed_number(doc: dict, key: str) -> float:
    """What a plan file claims as a number (bound, gap, runtime): a finite one, or the file is refused."""
    import math

    v = doc[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        shown = "null" if v is None else repr(v)[:20]
        raise DnnplaceError(f"plan document: {key!r} must be a finite number, not {shown}")
    return float(v)
