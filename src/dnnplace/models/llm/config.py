"""The LLM planner's parallel configuration: one frozen :class:`ParallelConfig`, its knobs declared once.

Every knob is a field of :class:`ParallelConfig` with a docstring under it and its declaration in
the field's metadata (:func:`knob`): its *kind* (``count``: a whole number >= 1 inside
:data:`~dnnplace.core.limits.LLM_LIMITS`; ``choice``: one of a fixed set of names; ``level``: one of
a fixed set of whole numbers, the ZeRO stage; ``switch``: true / false; ``split``: the layer split),
whether ``--fix`` / ``dnnplace.solve`` may pin it, and the help line.  From that one declaration come

* its **column**: :func:`columns` turns configurations into numpy arrays keyed by field name
  (counts and levels as int64, switches as bool, choices as their index in the choice tuple), which is
  what the rule set (:mod:`.llm_rules`) and the search read;
* its **pin**: :func:`pin_fields` lists the pinnable knobs; the search method's parameters
  (``solvers/llm/method.py``), :func:`check_pins` and :func:`parse_pins` (the text of ``--fix``)
  are generated from them;
* its **plan-file key**: the codec (:mod:`.llm`) writes and reads every field under its own name.

Adding a knob (expert parallel size, token dispatcher, per-module recomputation, ZeRO stage,
precision recipe) is therefore: a field here (with :func:`knob` metadata and a default that
means "as before", so old plan files read back unchanged), its limit in ``LLM_LIMITS`` when it is
a count, and its rules in :data:`~dnnplace.models.llm.rules.CONFIG_RULES` (each a named vectorised
predicate over the columns it reads).  The cost model then reads the new column.  Counts
(expert, expert-tensor and expert-data parallel sizes) and choices (token dispatcher, precision
recipe, a ZeRO/FSDP stage written as its name) fit the kinds above; a knob of a new shape (say,
the set of modules recomputed) adds its kind once, to :func:`check_value` and :func:`columns`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from dnnplace.core.limits import LLM_LIMITS, check_llm_count, shown
from dnnplace.errors import InputError
from dnnplace.models.llm.moe_knobs import DISPATCHERS, MODULE_SETS, RECOMPUTE_MODULES, ROUTINGS, module_set
from dnnplace.utils.text import clip

__all__ = ["CUDA_GRAPHS", "GRAD_DTYPES", "RECOMPUTE", "ZERO_STAGES", "ParallelConfig", "Recompute", "check_pins",
           "columns", "knob", "parse_pins", "pin_fields"]


class Recompute(StrEnum):
    """Activation recomputation; the value is what plan files and ``--fix`` write."""

    NONE = "none"
    SELECTIVE = "selective"  # the attention core's forward is rerun in the backward pass
    FULL = "full"  # the whole layer's forward is rerun


RECOMPUTE: tuple[str, ...] = tuple(r.value for r in Recompute)
KINDS = ("count", "choice", "switch", "split", "level")
#: ZeRO stages (Rajbhandari et al., SC 2020, Sec. 5): 0 replicas, 1 optimizer state sharded (Megatron's
#: distributed optimizer), 2 + gradients, 3 + parameters (FSDP).
ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)
#: The dtype of the main-gradient buffer that is accumulated and reduced over data parallelism.
GRAD_DTYPES: tuple[str, ...] = ("fp32", "bf16")
#: Megatron-Core's CUDA-graph scopes (TransformerConfig.cuda_graph_scope, enums.CudaGraphScope), as the recipes
#: combine them: none (eager), per-module captures through Transformer Engine (``cuda_graph_impl=
#: transformer_engine``: attn, mlp for dense layers, moe_router, moe_preprocess which needs moe_router), the whole
#: layer (an empty scope list) and the local implementation's whole iteration (``full_iteration``).
CUDA_GRAPHS: tuple[str, ...] = ("none", "attn", "moe_router", "moe_router+moe_preprocess", "attn+moe_router",
                                "attn+moe_router+moe_preprocess", "attn+mlp", "attn+mlp+moe_router+moe_preprocess",
                                "layer", "full_iteration")
_BOOL_TEXT = {"true": True, "on": True, "1": True, "yes": True, "false": False, "off": False, "0": False,
              "no": False}


def knob(doc: str, kind: str, *, pin: bool = True, choices: tuple[Any, ...] = (), since: int = 1,
         **kw: Any) -> Any:
    """Declare a :class:`ParallelConfig` field: its help line, kind (:data:`KINDS`), pinnability, choices,
    and the plan-file version that first wrote it (older files read back with the field's default)."""
    assert kind in KINDS
    return field(metadata={"doc": doc, "kind": kind, "pin": pin, "choices": choices, "since": since}, **kw)


@dataclass(frozen=True)
class ParallelConfig:
    """One point of the decision space: Megatron-Core's parallel and memory knobs for one run."""

    tp: int = knob("pin the tensor-parallel size", "count")
    """Tensor-parallel size: each layer's GEMMs split over tp GPUs of one node (Megatron's column/row
    parallel linears); tp must divide the heads, the kv heads and the MLP width."""
    pp: int = knob("pin the pipeline-parallel size", "count")
    """Pipeline-parallel size: the layers split over pp ranks, micro-batches flowing through them."""
    vp: int = knob("pin the virtual-pipeline (interleaving) size", "count")
    """Virtual stages (model chunks) per pipeline rank: Megatron's interleaved 1F1B when vp > 1."""
    cp: int = knob("pin the context-parallel size", "count")
    """Context-parallel size: each sequence split over cp GPUs (load-balanced, 2 x cp chunks)."""
    dp: int = knob("pin the data-parallel size", "count")
    """Data-parallel size: replicas of the model; tp x pp x cp x dp is the number of GPUs."""
    mbs: int = knob("pin the micro-batch size", "count")
    """Sequences per micro-batch on one data-parallel replica."""
    recompute: Recompute | str = knob("pin activation recomputation", "choice", choices=RECOMPUTE,
                                      default=Recompute.NONE)
    """What the backward pass recomputes instead of storing: none, selective (attention core) or full
    (given as text, it is kept as the :class:`Recompute` it names)."""
    sequence_parallel: bool = knob("sequence parallelism", "switch", pin=False, default=True)
    """Megatron's sequence parallelism: the norms and dropouts run on a 1/tp shard of the sequence
    (the search turns it on whenever tp > 1)."""
    distributed_optimizer: bool = knob("pin the distributed optimizer (optimizer states over DP)", "switch",
                                       default=True)
    """The distributed optimizer: Adam's states (and the fp32 master weights) sharded over dp x cp."""
    layers_per_stage: tuple[int, ...] = knob("the layer split", "split", pin=False, default=())
    """Decoder layers of each of the pp x vp virtual stages; stage i runs on pipeline rank i % pp as
    its chunk i // pp (Megatron's interleaved order)."""
    # The expert-parallel knobs (after the split: older callers pass the fields above by position).
    ep: int = knob("pin the expert-parallel size", "count", since=3, default=1)
    """Expert-parallel size: the routed experts split over ep ranks (it must divide them); tokens travel
    to their experts' ranks and back (the dispatcher). 1 for a dense model."""
    etp: int = knob("pin the expert-tensor-parallel size", "count", since=3, default=1)
    """Expert-tensor-parallel size: each expert's ffn split over etp ranks. The experts run on the grid
    etp x ep x edp x pp over the same GPUs as attention's tp x cp x dp x pp (Megatron's "MoE parallel
    folding"); edp = GPUs / (pp x ep x etp) follows."""
    dispatcher: str = knob("pin the token dispatcher", "choice", choices=DISPATCHERS, since=3,
                           default="alltoall")
    """Megatron-Core's token dispatcher: alltoall, allgather, or flex (DeepEP: a token crosses the network
    once per remote node its experts are on)."""
    recompute_modules: str = knob("pin the selective-recompute modules", "choice", choices=MODULE_SETS, since=3,
                                  default="none")
    """With recompute=selective, Megatron-Core's ``--recompute-modules``: 'none' or module names joined by '+'
    (core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts)."""
    a2a_overlap: bool = knob("pin the expert-parallel all-to-all overlap", "switch", since=3, default=False)
    """Megatron-Core's overlap_moe_expert_parallel_comm: one micro-batch's dispatch and combine run under
    another's compute."""
    # The data-parallel sharding knobs (plan-file version 4).
    zero: int | None = knob("pin the ZeRO stage: 0, 1 (distributed optimizer), 2, 3 (FSDP)", "level",
                            choices=ZERO_STAGES, since=4, default=None)
    """ZeRO stage over the dp x cp ranks: 0 replicas, 1 Adam's state sharded (Megatron's distributed
    optimizer), 2 the gradients too (reduce-scattered layer by layer every micro-batch), 3 the parameters too
    (FSDP: each layer all-gathered before its forward and its backward, evaluation/llm/fsdp.py).  Left out, it
    follows ``distributed_optimizer`` (1 with it, 0 without), so older plan files read back unchanged; the rules
    require distributed_optimizer exactly when zero >= 1."""
    grad_dtype: str = knob("pin the gradient buffer dtype (fp32 or bf16)", "choice", choices=GRAD_DTYPES, since=4,
                           default="fp32")
    """The main-gradient buffer's dtype, in which gradients accumulate over micro-batches and are reduced over
    data parallelism: fp32 (Megatron's default for bf16, NeMo's ``grad_reduce_in_fp32=True``) or bf16
    (``--grad-reduce-in-bf16``; NeMo's performance scripts and launcher set it per run).  A numerics choice, so
    the search never changes it: it keeps the default unless pinned."""
    # Activation CPU offloading (plan-file version 5).
    offload_layers: int = knob("pin the layers whose activations are offloaded to host memory", "count", since=5,
                               default=0)
    """Megatron-Core's ``cpu_offloading_num_layers`` (``cpu_offloading_activations=True``, weights kept): the
    saved activations of the first N transformer layers go to host memory during the forward pass and come
    back during the backward pass (Transformer Engine's ``get_cpu_offload_context``).  Megatron-Core allows
    0 <= N < num_layers, pp = 1 and no recomputation (TransformerConfig.__post_init__).  Left out, the search
    takes, for each configuration, 0 when it fits and else the smallest N that does (evaluation/llm/offload.py)."""
    # CUDA graphs (plan-file version 6).
    cuda_graphs: str = knob("pin the CUDA-graph scope (Megatron-Core --cuda-graph-scope)", "choice",
                            choices=CUDA_GRAPHS, since=6, default="none")
    """Megatron-Core's CUDA graphs: which modules are captured and replayed with one launch, so their ops cost
    the host one op (evaluation/llm/host.py).  'none' (eager), module scopes joined by '+' (attn, mlp,
    moe_router, moe_preprocess; ``--cuda-graph-impl transformer_engine``), 'layer' (every layer whole) or
    'full_iteration' (``--cuda-graph-impl local``).  A choice of the software stack the recipe makes, so the
    search keeps it as pinned (default none)."""

    # MoE routing skew (plan-file version 8).
    routing: str = knob("pin the MoE routing skew (balanced: forced load balancing)", "choice", choices=ROUTINGS,
                        since=8, default="balanced")
    """How the router spreads tokens over the experts (moe_knobs.ROUTINGS): 'balanced' is Megatron-Core's
    ``--moe-router-force-load-balancing`` (random logits, what the Megatron-Bridge benchmark recipes run);
    'power-law-1.01' / 'power-law-1.2' are routers trained with an auxiliary loss, whose slowest expert-parallel
    rank holds more than its share (moe_knobs.UNFORCED_ROUTING is the default for such a router).  A property of
    the training run, not a layout, so the search keeps it as pinned (default balanced, as plan files before
    version 8 priced every MoE run)."""

    def __post_init__(self) -> None:
        # Plan files and callers write recompute as text; keep the enum (an unknown value is left for the
        # rules to refuse by name, never a raw ValueError here).
        if isinstance(self.recompute, str) and not isinstance(self.recompute, Recompute) \
                and self.recompute in RECOMPUTE:
            object.__setattr__(self, "recompute", Recompute(self.recompute))
        if isinstance(self.layers_per_stage, list):
            object.__setattr__(self, "layers_per_stage", tuple(self.layers_per_stage))
        if self.zero is None:  # not given: the stage the distributed-optimizer switch means
            object.__setattr__(self, "zero", 1 if self.distributed_optimizer is True else 0)

    def rank_layers(self, rank: int) -> int:
        """Layers held by pipeline rank ``rank`` over all its chunks."""
        return sum(self.layers_per_stage[rank::self.pp])

    @property
    def first_stage_layers(self) -> int:
        return self.rank_layers(0)

    @property
    def last_stage_layers(self) -> int:
        return self.rank_layers(self.pp - 1)


FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(ParallelConfig)}


def kind_of(name: str) -> str:
    return str(FIELDS[name].metadata["kind"])


def pin_fields() -> tuple[dataclasses.Field, ...]:
    """The knobs ``--fix`` and ``dnnplace.solve(problem, **pins)`` may pin, in declaration order."""
    return tuple(f for f in FIELDS.values() if f.metadata["pin"])


def check_value(name: str, value: object, where: str, key: str | None = None) -> object:
    """``value`` as knob ``name`` takes it (the enum for a choice), or a one-line error naming ``key``."""
    kind, label = kind_of(name), key or name
    if kind == "count":
        return check_llm_count(name, value, where, label)
    if kind == "switch":
        if not isinstance(value, (bool, np.bool_)):
            raise InputError(f"{where}: {label} must be true or false, got {shown(value)}")
        return bool(value)
    if kind == "level":
        levels = FIELDS[name].metadata["choices"]
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value not in levels:
            raise InputError(f"{where}: {label} must be one of {', '.join(map(str, levels))}, got {shown(value)}")
        return int(value)
    if kind == "choice":
        choices = FIELDS[name].metadata["choices"]
        if name == "recompute_modules" and isinstance(value, str) and set(value.split("+")) <= set(RECOMPUTE_MODULES):
            value = module_set(value.split("+"))  # any order of the names
        if not isinstance(value, str) or value not in choices:
            told = ", ".join(choices) if len(choices) <= 16 else \
                f"none, or names joined by '+' of {', '.join(RECOMPUTE_MODULES)}"
            raise InputError(f"{where}: {label} must be one of {told}, got {shown(value)}")
        return Recompute(value) if name == "recompute" else value
    most = LLM_LIMITS["num_layers"][1]
    if not isinstance(value, (tuple, list)) or len(value) > most:
        raise InputError(f"{where}: {label} must be a list of at most {most} layer counts, got "
                            f"{shown(value)}")
    for i, n in enumerate(value):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n <= most:
            raise InputError(f"{where}: {label}[{i}] must be a whole number of layers, got {shown(n)}")
    return tuple(int(n) for n in value)


def check_fields(config: ParallelConfig, where: str = "config") -> None:
    """Every field of ``config`` of its kind and inside its limits (before any arithmetic on it)."""
    for name in FIELDS:
        check_value(name, getattr(config, name), where)


def columns(configs: Sequence[ParallelConfig]) -> dict[str, np.ndarray]:
    """Configurations as named columns (module docstring); the split adds ``stages`` (its length),
    ``min_stage_layers``, ``min_inner_layers`` (of the stages between the first and the last) and
    ``layers_total``."""
    cols: dict[str, np.ndarray] = {}
    for name, f in FIELDS.items():
        vals = [getattr(c, name) for c in configs]
        kind = f.metadata["kind"]
        if kind in ("count", "level"):
            cols[name] = np.array(vals, dtype=np.int64)
        elif kind == "switch":
            cols[name] = np.array(vals, dtype=bool)
        elif kind == "choice":
            cols[name] = np.array([f.metadata["choices"].index(v) for v in vals], dtype=np.int64)
        else:
            cols["stages"] = np.array([len(v) for v in vals], dtype=np.int64)
            cols["min_stage_layers"] = np.array([min(v, default=0) for v in vals], dtype=np.int64)
            cols["min_inner_layers"] = np.array([min(v[1:-1], default=1) for v in vals], dtype=np.int64)
            cols["layers_total"] = np.array([sum(v) for v in vals], dtype=np.int64)
    return cols


def check_pins(pins: Mapping[str, object], where: str = "fixed") -> dict[str, object]:
    """Pins checked against the declarations: known knobs only, each of its kind (one-line errors)."""
    names = [f.name for f in pin_fields()]
    unknown = sorted(set(pins) - set(names))
    if unknown:
        raise InputError(f"cannot fix {', '.join(map(clip, unknown))}; fixable: {', '.join(names)}")
    return {k: check_value(k, v, where) for k, v in pins.items()}


def parse_pins(text: str | None, where: str = "--fix") -> dict[str, object]:
    """``"tp=4,pp=4,recompute=selective"`` -> typed pins, each key at most once (one-line errors)."""
    names = [f.name for f in pin_fields()]
    out: dict[str, object] = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        key, sep, value = part.partition("=")
        key, value = key.strip().replace("-", "_"), value.strip()
        if not sep or key not in names:
            raise InputError(f"{where}: '{clip(part, 60)}' is not KEY=VALUE with KEY one of {', '.join(names)}")
        if key in out:
            raise InputError(f"{where}: {key} is given twice")
        kind = kind_of(key)
        parsed: object = value
        if kind in ("count", "level"):
            try:
                parsed = int(value, 10)
            except ValueError:
                raise InputError(f"{where}: {key} must be an integer, got '{clip(value, 40)}'") from None
        elif kind == "switch":
            if value.lower() not in _BOOL_TEXT:
                raise InputError(f"{where}: {key} must be true or false, got '{clip(value, 40)}'")
            parsed = _BOOL_TEXT[value.lower()]
        out[key] = check_value(key, parsed, where)
    return out
