"""The LLM training planner's vocabulary: architecture, cluster, job, problem, estimate, plan, plan codec.

All frozen dataclasses.  The parallel configuration (:class:`ParallelConfig`, :class:`Recompute`)
is declared in :mod:`.llm_config` and the rules in :mod:`.llm_rules`; both are re-exported here.

:meth:`LLMPlan.to_dict` / :meth:`LLMPlan.from_dict` are THE plan codec (schema ``dnnplace.llm-plan``,
docs/llm_planner.md): ``to_dict`` writes every field the evaluator reads (every
:class:`TransformerArch` field, the cluster, the job, every configuration field) and ``from_dict``
reads back everything ``to_dict`` writes, checking each field (kind, ``LLM_LIMITS``, choices),
then the problem and configuration rules, then what the file claims (status, bound, gap): a
malformed or inconsistent file is one line naming the field or the rule.  Version 1 files (written
before the architecture's extra fields) read back with the old defaults.

MoE: the fields exist so a config can be described, but the planner refuses
``num_experts > 1`` in one line (expert parallelism is not modelled).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from dnnplace.arch.dense import TransformerArch
from dnnplace.core.catalogue import DeviceSpec
from dnnplace.core.limits import LLM_NAME_CHARS, LLM_SOURCE_CHARS, MAX_VALUE, shown
from dnnplace.errors import DnnplaceError, InputError
from dnnplace.models.llm.config import FIELDS as CONFIG_FIELDS
from dnnplace.models.llm.config import RECOMPUTE, ParallelConfig, Recompute, check_value
from dnnplace.models.llm.rules import (
    ARCH_CHECKS,
    CROSS_ENTROPIES,
    MLP_KINDS,
    PRECISIONS,
    PRICED_FAMILIES,
    check_config,
    check_field,
    check_problem,
    check_problem_fields,
)
from dnnplace.utils.text import clip

__all__ = ["MLP_KINDS", "RECOMPUTE", "Cluster", "LLMEstimate", "LLMPlan", "LLMProblem", "ParallelConfig",
           "Recompute", "TrainingJob", "TransformerArch"]

FORMAT = "dnnplace.llm-plan"
VERSION = 9  # 9: rotary_fraction, parallel_residual (older files: 1.0, false); 8: routing (older files:
# balanced, as they priced it); 7: MoE recompute_modules=none under
# selective recompute is none (was core_attn); 6: cuda_graphs;
# 5: offload_layers; 4: zero, grad_dtype; 3: the expert-parallel knobs; 2: every architecture field;
READ_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9)  # 1: without head_dim, max_position, dropout, biases, rope, window, MoE
TIME_KEYS = ("compute", "tp_comm_exposed", "cp_comm_exposed", "pp_comm_exposed", "dp_comm_exposed", "bubble",
             "ep_comm_exposed", "offload_exposed", "host_exposed")
MEMORY_KEYS = ("weights", "gradients", "optimizer", "activations", "buffers")
#: The overflow a plan names when its offloaded activations exceed the host memory per GPU.
HOST_OVERFLOW = "host_memory"
#: What a plan may claim the search proved (solvers/llm/search.py writes these).
PLAN_STATUSES = ("optimal", "fixed", "time_limit")


@dataclass(frozen=True)
class Cluster:
    """The GPUs of one training run."""

    device: str
    """Catalogue device name (model/catalogue.py), e.g. h100."""
    gpus: int
    """GPUs of the run: tp x pp x cp x dp."""
    gpus_per_node: int = 8
    """GPUs joined by NVLink in one node."""


@dataclass(frozen=True)
class TrainingJob:
    """What one training step processes."""

    seq_len: int
    """Tokens per sequence."""
    global_batch: int
    """Sequences per optimizer step (over every data-parallel replica)."""
    precision: str = "bf16"
    """Precision recipe (model/llm_rules.py PRECISION_RECIPES): bf16, fp8, fp8-cs, fp8-cs-all, mxfp8, nvfp4,
    nvfp4-all or nvfp4-fp4p."""
    cross_entropy: str = "megatron"
    """Cross-entropy implementation (the catalogue's ``ce_logit_bytes``): ``megatron`` (Megatron-Core's
    vocab-parallel cross entropy, fused or not: an fp32 copy of the logits) or ``te`` (Transformer Engine's
    ``parallel_cross_entropy``, ``cross_entropy_fusion_impl='te'``, which Megatron-Bridge's Llama recipes set)."""


@dataclass(frozen=True)
class LLMProblem:
    """A model to train on a cluster: what the planner plans and the evaluator prices.

    Built, its fields are of their kinds and inside ``LLM_LIMITS`` (one line naming the field
    otherwise), so that whoever builds one -- ``load_llm``, the plan reader, a caller -- has the
    limits checked before any enumeration or arithmetic; the rules are :func:`check_problem`'s.
    """

    arch: TransformerArch
    cluster: Cluster
    job: TrainingJob
    device: DeviceSpec
    moe: Any = None
    """A mixture of experts: its :class:`dnnplace.models.llm.moe.MoEModel` (whose ``arch`` is ``arch``: the dense
    fields), read by ``frontends/moe_config.py``; None for a dense model.  Typed loosely because model.moe
    imports this module."""

    def __post_init__(self) -> None:
        check_problem_fields(self)


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
    host_memory_bytes: float = 0.0  # offloaded activations held in host memory per GPU (offload_layers)
    host_capacity_bytes: float = 0.0  # the host memory per GPU they must fit in (0: no host link)

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
                "fits": self.fits, "overflow": self.overflow, "host_memory_bytes": self.host_memory_bytes,
                "host_capacity_bytes": self.host_capacity_bytes}


# The plan file's name of each TransformerArch field (its own name unless listed), and the version that first
# wrote it: an older file reads back with the field's default (head_dim: hidden / heads; max_position: see below).
_ARCH_KEY = {"hidden": "hidden_size", "ffn_hidden": "ffn_hidden_size", "heads": "num_attention_heads",
             "kv_heads": "num_key_value_heads", "vocab": "vocab_size"}
_ARCH_SINCE = {"head_dim": 2, "max_position": 2, "dropout": 2, "num_experts": 2, "top_k": 2, "expert_ffn": 2,
               "shared_experts": 2, "rope_theta": 2, "qkv_bias": 2, "linear_bias": 2, "qk_norm": 2,
               "sliding_window": 2, "global_every": 2, "rotary_fraction": 9, "parallel_residual": 9}
_ARCH_FIELDS = tuple(f.name for f in dataclasses.fields(TransformerArch))
_TEXT_LIMIT = {"source": LLM_SOURCE_CHARS}
_TOP = ("format", "version", "model", "cluster", "job", "config", "prediction", "status", "bound", "gap",
        "exhaustive", "runtime_s")
#: What the planner adds about its prediction (models/llm/plan_doc.py); a reader recomputes both, so drops them.
_CLAIMS = ("error_band", "runner_ups", "compared", "host", "kernel_sources")
_DERIVED = ("num_microbatches", "first_stage_layers", "last_stage_layers")  # written for readers, checked back


def _config_keys() -> tuple[str, ...]:
    names = list(CONFIG_FIELDS)
    return (*names[:names.index("recompute")], "num_microbatches", *names[names.index("recompute"):],
            "first_stage_layers", "last_stage_layers")


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
        """The plan document: every field the evaluator reads (names and paths made printable and cut to the
        lengths the reader takes, so that every file written reads back)."""
        a, c, j, cfg = self.problem.arch, self.problem.cluster, self.problem.job, self.config
        model: dict[str, Any] = {}
        for name in _ARCH_FIELDS:
            v = getattr(a, name)
            if isinstance(v, str):
                v = clip(v, _TEXT_LIMIT.get(name, LLM_NAME_CHARS))
                v = "unnamed" if name == "name" and not v.strip() else v
            model[_ARCH_KEY.get(name, name)] = v
        config: dict[str, Any] = {}
        for key in _config_keys():
            v = {"num_microbatches": self.estimate.num_microbatches, "first_stage_layers": cfg.first_stage_layers,
                 "last_stage_layers": cfg.last_stage_layers}[key] if key in _DERIVED else getattr(cfg, key)
            config[key] = list(v) if isinstance(v, tuple) else (str(v) if isinstance(v, Recompute) else v)
        doc = {
            "format": FORMAT, "version": VERSION, "model": model,
            "cluster": {"device": c.device, "gpus": c.gpus, "gpus_per_node": c.gpus_per_node,
                        **({"kernels": "measured"} if self.problem.device.measured_kernels else {})},
            "job": {"seq_len": j.seq_len, "global_batch": j.global_batch, "precision": j.precision,
                    **({} if j.cross_entropy == "megatron" else {"cross_entropy": j.cross_entropy})},
            "config": config, "prediction": self.estimate.prediction_dict(),
            "status": self.status, "bound": self.bound, "gap": self.gap, "exhaustive": self.exhaustive,
            "runtime_s": self.runtime_s,
        }
        if self.problem.moe is not None:  # what an MoE model adds (model/moe.py moe_doc)
            doc["moe"] = self.problem.moe.doc()
        return doc

    @staticmethod
    def from_dict(doc: Any, where: str = "plan", moe_reader: Any = None) -> LLMPlan:
        """Read and check a plan document (module docstring); one-line :class:`InputError` naming the field.

        ``moe_reader(doc, arch, where)`` reads an MoE plan's ``moe`` object (``model.moe.moe_from_doc``: passed
        in, since that module imports this one)."""
        return _read_plan(doc, where, moe_reader)


def _obj(v: Any, where: str, key: str, keys: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise InputError(f"{where}: {key}: expected a JSON object, got {shown(v)}")
    missing = [k for k in keys if k not in v and k not in optional]
    if missing:
        raise InputError(f"{where}: {key}.{missing[0]}: missing")
    extra = [k for k in v if k not in keys]
    if extra:
        raise InputError(f"{where}: {key}.{clip(extra[0], 60)}: unknown key")
    return v


def _text(v: Any, where: str, key: str, limit: int, empty: bool) -> str:
    if not isinstance(v, str) or (not empty and not v.strip()):
        raise InputError(f"{where}: {key}: expected a{'' if empty else ' non-empty'} string, got {shown(v)}")
    if len(v) > limit:
        raise InputError(f"{where}: {key}: longer than {limit} characters")
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 or ch in "\u2028\u2029" for ch in v):
        raise InputError(f"{where}: {key}: {clip(v, 60)} contains a control character (a newline?)")
    return v


def _number(v: Any, where: str, key: str, low: float = 0.0) -> float:
    """A finite number in [low, MAX_VALUE] (what a file claims or predicts)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not low <= v <= MAX_VALUE:
        raise InputError(f"{where}: {key} must be a finite number in [{low:g}, {MAX_VALUE:g}], not "
                         f"{'null' if v is None else shown(v, 20)}")
    return float(v)


def _read_arch(m: Any, where: str, version: int, seq_len: int, moe: bool = False) -> TransformerArch:
    keys = tuple(_ARCH_KEY.get(n, n) for n in _ARCH_FIELDS)
    optional = tuple(_ARCH_KEY.get(n, n) for n in _ARCH_FIELDS if _ARCH_SINCE.get(n, 1) > version)
    _obj(m, where, "model", keys, optional)
    kinds = {name: (kind, arg) for name, kind, arg in ARCH_CHECKS}
    vals: dict[str, Any] = {}
    for name in _ARCH_FIELDS:
        key = _ARCH_KEY.get(name, name)
        if key not in m:
            continue
        kind, arg = kinds[name]
        if kind == "text":
            vals[name] = _text(m[key], where, f"model.{key}", _TEXT_LIMIT.get(name, LLM_NAME_CHARS),
                               empty=name not in ("name", "family"))
        else:
            vals[name] = check_field(kind, arg, m[key], where, f"model.{key}")
    if vals["family"] not in PRICED_FAMILIES and not moe:
        raise InputError(f"{where}: model.family {shown(vals['family'])} is not one of the priced families "
                         f"({', '.join(PRICED_FAMILIES)}); mixtures of experts are not modelled")
    if vals["heads"] % vals["kv_heads"]:
        raise InputError(f"{where}: model.num_key_value_heads: {vals['kv_heads']} does not divide "
                         f"num_attention_heads {vals['heads']}")
    # Version 1 defaults: head_dim as the evaluator then took it; the learned-position limit was not recorded,
    # so the plan's own sequence length (at least TransformerArch's old 4096) is taken as allowed.
    vals.setdefault("head_dim", max(vals["hidden"] // vals["heads"], 1))
    vals.setdefault("max_position", max(4096, seq_len))
    return TransformerArch(**vals)


def _read_config(g: Any, where: str, version: int) -> tuple[ParallelConfig, dict[str, int]]:
    optional = tuple(n for n, f in CONFIG_FIELDS.items() if f.metadata["since"] > version)
    _obj(g, where, "config", _config_keys(), optional)
    vals = {n: check_value(n, g[n], where, f"config.{n}") for n in CONFIG_FIELDS if n in g}
    derived = {k: check_field("whole", 1 << 24, g[k], where, f"config.{k}") for k in _DERIVED}
    return ParallelConfig(**vals), derived  # type: ignore[arg-type]


def _read_estimate(p: Any, where: str, num_microbatches: int) -> LLMEstimate:
    if not isinstance(p, dict):
        raise InputError(f"{where}: prediction: expected a JSON object, got {shown(p)}")
    vals: dict[str, Any] = {"num_microbatches": num_microbatches}
    for f in dataclasses.fields(LLMEstimate):
        if f.name in vals:
            continue
        if f.name not in p:
            if f.default is dataclasses.MISSING:
                raise InputError(f"{where}: prediction.{f.name}: missing")
            continue
        v = p[f.name]
        if v is None and f.default is None:  # an optional figure the evaluator may leave out
            vals[f.name] = None
        elif f.name.endswith("_breakdown"):
            if not isinstance(v, dict) or len(v) > 64 or not all(
                    isinstance(k, str) and len(k) <= 64 for k in v):
                raise InputError(f"{where}: prediction {f.name!r} must map part names to numbers")
            vals[f.name] = {k: _number(x, where, f"prediction.{f.name}.{clip(k, 40)}", -MAX_VALUE)
                            for k, x in v.items()}
        elif f.name == "fits":
            vals[f.name] = check_field("flag", None, v, where, "prediction.fits")
        elif f.name == "overflow":
            if v is not None and (not isinstance(v, str) or (v not in p.get("memory_breakdown", {})
                                                                and v != HOST_OVERFLOW)):
                raise InputError(f"{where}: prediction.overflow must be null, a memory part or "
                                 f"{HOST_OVERFLOW!r}, got {shown(v)}")
            vals[f.name] = v
        else:
            vals[f.name] = _number(v, where, f"prediction.{f.name}")
    return LLMEstimate(**vals)


def _check_claims(doc: dict[str, Any], est: LLMEstimate, where: str) -> dict[str, Any]:
    """What the file claims the search proved, validated against itself (it is not re-proved here)."""
    status = doc["status"]
    if not isinstance(status, str) or status not in PLAN_STATUSES:
        raise InputError(f"{where}: status must be one of {', '.join(PLAN_STATUSES)}, got {shown(status)}")
    bound, gap = _number(doc["bound"], where, "bound"), _number(doc["gap"], where, "gap")
    runtime = _number(doc["runtime_s"], where, "runtime_s")
    exhaustive = check_field("flag", None, doc["exhaustive"], where, "exhaustive")
    value = est.step_time_s
    tol = 1e-9
    if gap > 1:
        raise InputError(f"{where}: gap {gap:g} must be in [0, 1]")
    if bound > value * (1 + tol):
        raise InputError(f"{where}: bound {bound:.6g} s exceeds the plan's predicted step time {value:.6g} s")
    if value > 0 and abs(gap - (value - bound) / value) > 1e-6:
        raise InputError(f"{where}: gap {gap:g} is not (step time - bound) / step time = {(value - bound) / value:g}")
    if status in ("optimal", "fixed") and gap > tol:
        raise InputError(f"{where}: status {status!r} claims gap 0, the file says gap {gap:g}")
    if exhaustive and status != "optimal":
        raise InputError(f"{where}: exhaustive true needs status 'optimal', not {status!r}")
    return {"status": status, "bound": bound, "gap": gap, "exhaustive": exhaustive, "runtime_s": runtime}


def _read_plan(doc: Any, where: str, moe_reader: Any = None) -> LLMPlan:
    from dnnplace.core.catalogue import device_spec

    if not isinstance(doc, dict):
        raise InputError(f"{where}: expected a JSON object, got {shown(doc)}")
    if doc.get("format") != FORMAT:
        raise InputError(f"{where}: plan.format: {shown(doc.get('format'))} is not {FORMAT!r}")
    version = doc.get("version")
    if isinstance(version, bool) or version not in READ_VERSIONS:
        raise InputError(f"{where}: plan.version: {shown(version)} is not supported (expected "
                         f"{' or '.join(map(str, READ_VERSIONS))})")
    _obj(doc, where, "plan", (*_TOP, *_CLAIMS, "moe"), (*_CLAIMS, "moe"))
    for key, kind in zip(_CLAIMS, (dict, list, dict)):  # derived claims (models/llm/plan_doc.py): shape only, dropped
        if key in doc and not isinstance(doc[key], kind):
            raise InputError(f"{where}: {key}: expected a JSON {'object' if kind is dict else 'array'}, "
                             f"got {shown(doc[key])}")
    if "moe" in doc and moe_reader is None:
        raise InputError(f"{where}: moe: this reader does not read mixture-of-experts plans")
    c = _obj(doc["cluster"], where, "cluster", ("device", "gpus", "gpus_per_node", "kernels"), ("kernels",))
    kernels = check_field("choice", ("catalogue", "measured"), c.get("kernels", "catalogue"), where,
                          "cluster.kernels")
    j = _obj(doc["job"], where, "job", ("seq_len", "global_batch", "precision", "cross_entropy"),
             ("cross_entropy",))
    job = TrainingJob(check_field("count", "seq_len", j["seq_len"], where, "job.seq_len"),
                      check_field("count", "global_batch", j["global_batch"], where, "job.global_batch"),
                      check_field("choice", PRECISIONS, j["precision"], where, "job.precision"),
                      check_field("choice", CROSS_ENTROPIES, j.get("cross_entropy", "megatron"), where,
                                  "job.cross_entropy"))
    arch = _read_arch(doc["model"], where, version, job.seq_len, moe="moe" in doc)
    device = _text(c["device"], where, "cluster.device", 64, empty=False)
    cluster = Cluster(device, check_field("count", "gpus", c["gpus"], where, "cluster.gpus"),
                      check_field("count", "gpus_per_node", c["gpus_per_node"], where, "cluster.gpus_per_node"))
    config, derived = _read_config(doc["config"], where, version)
    if version < 7 and "moe" in doc and config.recompute == "selective" and config.recompute_modules == "none":
        config = dataclasses.replace(config, recompute_modules="core_attn")  # what versions 3-6 meant by it
    try:
        spec = device_spec(device)
        problem = LLMProblem(arch, cluster, job,
                             dataclasses.replace(spec, measured_kernels=True) if kernels == "measured" else spec,
                             moe=moe_reader(doc["moe"], arch, where) if "moe" in doc else None)
        check_config(problem, config)  # Megatron's rules first: they name the knob a hand edit broke
        check_problem(problem)
    except InputError:
        raise
    except DnnplaceError as exc:  # the catalogue's or a rule's message: say which file
        raise InputError(f"{where}: {exc}") from None
    m = job.global_batch // (config.dp * config.mbs)
    if derived["num_microbatches"] != m:
        raise InputError(f"{where}: config.num_microbatches: {derived['num_microbatches']} but global batch / "
                         f"(dp*mbs) = {m}")
    for key, rank in (("first_stage_layers", 0), ("last_stage_layers", config.pp - 1)):
        if derived[key] != config.rank_layers(rank):
            raise InputError(f"{where}: config.{key}: {derived[key]} but layers_per_stage puts "
                             f"{config.rank_layers(rank)} on pipeline rank {rank}")
    est = _read_estimate(doc["prediction"], where, m)
    return LLMPlan(problem, config, est, **_check_claims(doc, est, where))
