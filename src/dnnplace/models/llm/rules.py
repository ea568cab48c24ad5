"""THE rule set of the LLM planner: what a problem must be and what Megatron accepts as a configuration.

Each rule is written once, as a named vectorised predicate over *named columns*: the
configuration's columns (:func:`~dnnplace.models.llm.config.columns`, numpy arrays keyed by
field name, one entry per candidate) beside the problem's scalars (:func:`problem_columns`:
``heads``, ``kv_heads``, ``ffn_hidden``, ``num_layers``, ``seq_len``, ``global_batch``,
``gpus``, ``gpus_per_node``, ...).  The same rules

* filter the search's candidates (:func:`filter_rows`, applying each rule as soon as the
  columns it ``needs`` exist, so that enumeration stays small),
* name the first broken rule of one configuration (:func:`check_config`: the evaluator, the
  plan-file reader and every exporter call it), and
* explain an empty search (:func:`filter_rows` counts the candidates each rule removed).

Problem rules (:data:`PROBLEM_RULES`) run after the field checks of :func:`check_problem`, which
hold every count inside :data:`~dnnplace.core.limits.LLM_LIMITS` before any arithmetic.  The
checks take an :class:`~dnnplace.models.llm.spec.LLMProblem` (read by attribute; this module sits
below :mod:`dnnplace.models.llm.spec`, which reads plan files through it).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from dnnplace.core.catalogue import TRAINING_STACK, host_link
from dnnplace.core.limits import LLM_LIMITS, check_llm_count, shown
from dnnplace.core.rule import Cols, Rule, first_broken
from dnnplace.core.systems import GPU_GENERATIONS
from dnnplace.errors import InputError
from dnnplace.models.llm.config import CUDA_GRAPHS, RECOMPUTE, ParallelConfig, check_fields, columns
from dnnplace.models.llm.moe_rules import (
    DENSE_MODULES,
    DENSE_RULE,
    DENSE_VALUES,
    MOE_CONFIG_RULES,
    dense_modules_message,
    dense_problem_columns,
    has_module,
    moe_problem_columns,
)
from dnnplace.utils.text import clip

__all__ = ["CONFIG_RULES", "CROSS_ENTROPIES", "MLP_KINDS", "NORMS", "POSITIONS", "PRECISIONS", "PRICED_FAMILIES",
           "PROBLEM_RULES", "Rule", "check_config", "check_pin_set", "check_problem", "filter_rows", "first_broken",
           "problem_columns"]


MLP_KINDS = ("swiglu", "geglu", "gelu", "relu2")  # swiglu/geglu are gated (3 matrices); gelu, squared-ReLU not
POSITIONS = ("rope", "learned")
NORMS = ("rms", "layer")
#: Precision recipes (priced term by term in evaluation/llm/precision.py): the tensor-core format their
#: GEMMs run at and the GPU generations Transformer Engine runs them on.
PRECISION_RECIPES: dict[str, tuple[str, tuple[str, ...]]] = {
    "bf16": ("bf16", ("ampere", "hopper", "blackwell")), "fp8": ("fp8", ("hopper", "blackwell")),
    "fp8-cs": ("fp8", ("hopper", "blackwell")), "fp8-cs-all": ("fp8", ("hopper", "blackwell")),
    "mxfp8": ("fp8", ("blackwell",)), "nvfp4": ("fp4", ("blackwell",)), "nvfp4-all": ("fp4", ("blackwell",)),
    "nvfp4-fp4p": ("fp4", ("blackwell",))}
PRECISIONS = tuple(PRECISION_RECIPES)
#: The recipes priced with quantized parameters (Recipe.param_gather in evaluation/precision.py, which a test
#: checks against): Megatron runs them with ``--fp8-param-gather`` / ``--fp4-param-gather``.
PARAM_GATHER_PRECISIONS = ("fp8", "fp8-cs", "fp8-cs-all", "mxfp8", "nvfp4-fp4p")
#: The recipes with delayed scaling (Recipe.scaling == "delayed"): Transformer Engine's DelayedScaling.
DELAYED_PRECISIONS = ("fp8",)
#: Cross-entropy implementations (TrainingJob.cross_entropy), priced by the catalogue's ce_logit_bytes.
CROSS_ENTROPIES = tuple(TRAINING_STACK.ce_logit_bytes)
#: The dense families the cost model prices (the config reader's model types); mixtures of experts are not.
PRICED_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "nemotron",
                   "gpt_neox", "gpt2")




def _chain_divides(n: Any, *parts: Any) -> Any:
    """``parts[0] * parts[1] * ... == n`` without forming the product (no int64 overflow)."""
    ok, rest = True, n
    for p in parts:
        p = np.asarray(p)
        safe = np.where(p > 0, p, 1)  # a zero degree (a pin above the GPUs leaves dp 0) breaks the rule, no warning
        ok = ok & (p > 0) & (rest % safe == 0)
        rest = rest // safe
    return ok & (rest == 1)


def _micro(c: Cols) -> Any:
    return c["global_batch"] // (c["dp"] * c["mbs"])


def _graph_scope(c: Cols, module: str) -> Any:
    """Does each row's CUDA-graph scope name ``module``?"""
    hit = np.array([module in s.split("+") for s in CUDA_GRAPHS])
    return hit[np.asarray(c["cuda_graphs"]).astype(np.int64)]


def _graphs_free(c: Cols) -> Any:
    """Rows without a Transformer Engine capture: no graphs, or the whole iteration's."""
    g = np.asarray(c["cuda_graphs"]).astype(np.int64)
    return (g == CUDA_GRAPHS.index("none")) | (g == CUDA_GRAPHS.index("full_iteration"))


def _graphs_whole(c: Cols) -> Any:
    """Rows whose graphs capture whole layers (TE's empty scope) or the whole iteration: megatron-core's
    ``full_cudagraph``, which covers every recomputed module."""
    g = np.asarray(c["cuda_graphs"]).astype(np.int64)
    return (g == CUDA_GRAPHS.index("layer")) | (g == CUDA_GRAPHS.index("full_iteration"))


def _recomputes(c: Cols, module: str) -> Any:
    """Does each row recompute ``module`` selectively?  A dense model's selective recompute is Megatron's
    default set (core_attn); an MoE model's is its recompute_modules."""
    selective = np.asarray(c["recompute"]) == RECOMPUTE.index("selective")
    return selective & np.where(np.asarray(c["num_experts"]) <= 1, module == "core_attn", has_module(c, module))


def _ends_allowed(c: Cols) -> Any:
    """Where the embedding and the loss may each fill a virtual stage of their own: any interleaved
    configuration the search enumerates (its split family, ``solvers.grid.splits``, has the empty ends), and a
    given split only when its inner stages all hold layers (:func:`_ends_only`).  Megatron-Core counts each
    as a layer (``transformer_block.get_num_layers_to_build``: ``num_layers + 1`` per option, the end stage
    builds one layer fewer, down to none), so pp x vp may reach the layers + 2 (Qwen3-235B-A22B's 94 layers
    on pp 32 x vp 3 in Megatron-MoE-ModelZoo)."""
    if "min_inner_layers" not in c:
        return np.asarray(c["vp"]) > 1
    return _ends_only(c)


def _ends_only(c: Cols) -> Any:
    """An interleaved split whose first / last virtual stage may hold no layer, only the embedding / the loss:
    Megatron-Core's account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split count each as
    a layer, so 126 layers on pp 16 x vp 8 give 0, 1, ..., 1, 0 (Megatron-Bridge's Llama 3.1 405B recipe sets
    both).  Only a given split can be one (the search's columns have none, so its rules are unchanged)."""
    if "min_inner_layers" not in c:
        return False
    return (np.asarray(c["vp"]) > 1) & (np.asarray(c["min_inner_layers"]) >= 1)


#: Megatron's rules for a configuration (arguments.py / ModelParallelConfig), in the order they are reported.
CONFIG_RULES: tuple[Rule, ...] = (
    Rule("world_size", ("tp", "pp", "cp", "dp"),
         lambda c: _chain_divides(c["gpus"], c["tp"], c["pp"], c["cp"], c["dp"]),
         lambda r: (f"tp*pp*cp*dp = {r['tp'] * r['pp'] * r['cp'] * r['dp']} != {r['gpus']} GPUs"
                    if r["dp"] > 0 else  # dp = gpus // (tp*pp*cp) = 0: say what does not divide
                    f"tp*pp*cp = {r['tp']}*{r['pp']}*{r['cp']} = {r['tp'] * r['pp'] * r['cp']} does not divide the"
                    f" {r['gpus']} GPUs")),
    Rule("tp_heads", ("tp",), lambda c: c["heads"] % c["tp"] == 0,
         lambda r: f"tp={r['tp']} must divide the {r['heads']} attention heads"),
    Rule("tp_kv_heads", ("tp",), lambda c: c["kv_heads"] % c["tp"] == 0,
         lambda r: f"tp={r['tp']} must divide the {r['kv_heads']} kv heads (Megatron's query groups)"),
    Rule("tp_ffn", ("tp",), lambda c: c["ffn_hidden"] % c["tp"] == 0,
         lambda r: f"tp={r['tp']} must divide ffn_hidden {r['ffn_hidden']} (the MLP's parallel linears split it)"),
    Rule("tp_in_node", ("tp",), lambda c: c["tp"] <= c["gpus_per_node"],
         lambda r: f"tp={r['tp']} exceeds the {r['gpus_per_node']} GPUs of a node"),
    Rule("pp_layers", ("pp",), lambda c: c["pp"] <= c["num_layers"],
         lambda r: f"pp={r['pp']} exceeds {r['num_layers']} layers"),
    Rule("cp_sequence", ("cp",), lambda c: (c["cp"] == 1) | (c["seq_len"] % (2 * c["cp"]) == 0),
         lambda r: f"seq_len {r['seq_len']} not divisible by 2*cp = {2 * r['cp']}"),
    Rule("sp_sequence", ("tp", "cp", "sequence_parallel"),
         lambda c: ~np.asarray(c["sequence_parallel"]) | ((c["seq_len"] // c["cp"]) % c["tp"] == 0),
         lambda r: f"sequence parallel needs seq/cp = {r['seq_len'] // r['cp']} divisible by tp={r['tp']}"),
    Rule("batch_divisible", ("dp", "mbs"), lambda c: c["global_batch"] % (c["dp"] * c["mbs"]) == 0,
         lambda r: f"global batch {r['global_batch']} not divisible by dp*mbs = {r['dp'] * r['mbs']}"),
    Rule("vp_needs_pp", ("vp", "pp"), lambda c: (c["vp"] == 1) | (c["pp"] >= 2),
         lambda r: "interleaving (vp > 1) needs pp >= 2"),
    Rule("vp_microbatches", ("vp", "pp", "dp", "mbs"), lambda c: (c["vp"] == 1) | (_micro(c) % c["pp"] == 0),
         lambda r: f"interleaving needs micro-batches {_micro(r)} divisible by pp={r['pp']}"),
    Rule("vp_layers", ("vp", "pp"),
         lambda c: (c["vp"] * c["pp"] <= c["num_layers"])
         | (_ends_allowed(c) & (c["vp"] * c["pp"] <= c["num_layers"] + 2)),
         lambda r: f"pp*vp = {r['pp'] * r['vp']} virtual stages exceed {r['num_layers']} layers (+ 2 with an "
                   "embedding-only first and loss-only last stage)"),
    Rule("split_count", ("vp", "pp", "stages"), lambda c: c["stages"] == c["pp"] * c["vp"],
         lambda r: f"layers_per_stage needs pp*vp = {r['pp'] * r['vp']} entries, has {r['stages']}"),
    Rule("split_min", ("min_stage_layers",),
         lambda c: (c["min_stage_layers"] >= 1) | (_ends_only(c) & (c["min_stage_layers"] >= 0)),
         lambda r: "every virtual stage needs >= 1 layer (an interleaved split's first and last may hold none)"),
    Rule("split_sum", ("layers_total",), lambda c: c["layers_total"] == c["num_layers"],
         lambda r: f"layers_per_stage sums to {r['layers_total']}, the model has {r['num_layers']}"),
    # ZeRO: Megatron's distributed optimizer is stage 1, and stages 2-3 keep it (Megatron-FSDP v1 requires
    # --use-distributed-optimizer: megatron/training/arguments.py validate_args).
    Rule("zero_dist_opt", ("zero", "distributed_optimizer"),
         lambda c: np.asarray(c["distributed_optimizer"]) == (np.asarray(c["zero"]) >= 1),
         lambda r: f"zero={r['zero']} " + ("needs distributed_optimizer=true (ZeRO-1 is the distributed optimizer)"
                                           if r["zero"] >= 1 else "means distributed_optimizer=false")),
    Rule("zero_shards", ("zero", "dp", "cp"), lambda c: (c["zero"] < 2) | (c["dp"] * c["cp"] > 1),
         lambda r: f"zero={r['zero']} shards over dp*cp = 1 rank: there is nothing to shard"),
    Rule("zero_dense", ("zero",), lambda c: (c["zero"] < 2) | (c["num_experts"] == 1),
         lambda r: f"zero={r['zero']} is priced for dense models; a mixture of experts plans with zero 0 or 1"),
    # Activation CPU offloading: Megatron-Core TransformerConfig.__post_init__ (cpu_offloading_num_layers in
    # [0, num_layers), no pipeline parallelism, no recomputation); the host link and memory are the catalogue's.
    Rule("offload_layers", ("offload_layers",), lambda c: c["offload_layers"] < c["num_layers"],
         lambda r: f"offload_layers={r['offload_layers']}: Megatron offloads fewer than the {r['num_layers']} "
                   "layers (cpu_offloading_num_layers < num_layers)"),
    Rule("offload_pp", ("offload_layers", "pp"), lambda c: (c["offload_layers"] == 0) | (c["pp"] == 1),
         lambda r: f"offload_layers={r['offload_layers']} needs pp=1 (Megatron: no pipeline parallelism with CPU "
                   "offloading)"),
    Rule("offload_recompute", ("offload_layers", "recompute"),
         lambda c: (c["offload_layers"] == 0) | (c["recompute"] == RECOMPUTE.index("none")),
         lambda r: f"offload_layers={r['offload_layers']} needs recompute=none (Megatron: CPU offloading does not "
                   "work with activation recomputation)"),
    # CUDA graphs: Megatron-Core TransformerConfig.__post_init__ (0.16.1) checks of cuda_graph_scope.
    Rule("graphs_moe_scope", ("cuda_graphs",),
         lambda c: (c["num_experts"] > 1) | ~_graph_scope(c, "moe_router"),
         lambda r: f"cuda_graphs={CUDA_GRAPHS[r['cuda_graphs']]}: the moe_router / moe_preprocess scopes need a "
                   "mixture of experts (Megatron: 'moe cuda graph is only supported for MoE')"),
    Rule("graphs_mlp_scope", ("cuda_graphs",),
         lambda c: (c["dense_layers"] > 0) | ~_graph_scope(c, "mlp"),
         lambda r: f"cuda_graphs={CUDA_GRAPHS[r['cuda_graphs']]}: the mlp scope captures dense layers and the model "
                   "has none (Megatron: 'mlp cuda graph is only supported for dense layers')"),
    Rule("graphs_layer_moe", ("cuda_graphs",),
         lambda c: (c["num_experts"] == 1) | (np.asarray(c["cuda_graphs"]) != CUDA_GRAPHS.index("layer")),
         lambda r: "cuda_graphs=layer captures the MoE layers whole, which Megatron-Core graphs only with token "
                   "drop-and-pad; the planner prices dropless routing (pick module scopes, e.g. "
                   "attn+moe_router+moe_preprocess)"),
    Rule("graphs_offload", ("cuda_graphs", "offload_layers"),
         lambda c: (np.asarray(c["cuda_graphs"]) == 0) | (c["offload_layers"] == 0),
         lambda r: f"cuda_graphs={CUDA_GRAPHS[r['cuda_graphs']]} needs offload_layers=0 (Megatron: 'CUDA graphs "
                   "not supported with CPU offloading')"),
    # megatron-core TransformerConfig.__post_init__ (0.16.1 to 0.19), overlap_moe_expert_parallel_comm: Transformer
    # Engine graphs of the mlp (or moe) module do not run with the EP all-to-all overlap.
    Rule("graphs_a2a_mlp", ("cuda_graphs", "a2a_overlap"),
         lambda c: ~_graph_scope(c, "mlp") | ~np.asarray(c["a2a_overlap"], dtype=bool),
         lambda r: f"cuda_graphs={CUDA_GRAPHS[r['cuda_graphs']]} captures the mlp module, which Megatron-Core does not "
                   "graph with a2a_overlap=true ('CUDA graph scope on moe and mlp is not supported with "
                   "overlap_moe_expert_parallel_comm')"),
    # megatron-core 0.16.1 TransformerConfig.__post_init__, CUDA graphs with recomputation: full recomputation
    # only under whole-iteration graphs; no 'moe' recompute module under a moe_router graph (Transformer Engine);
    # a graphed recomputation takes no dropout (the exports leave a dropout model's rates at Megatron's 0.1).
    Rule("graphs_full_recompute", ("cuda_graphs", "recompute"),
         lambda c: _graphs_free(c) | (c["recompute"] != RECOMPUTE.index("full")),
         lambda r: f"cuda_graphs={CUDA_GRAPHS[r['cuda_graphs']]} with recompute=full: Megatron-Core recomputes whole "
                   "layers only under cuda_graphs=full_iteration ('full recompute is only supported with full "
                   "iteration CUDA graph')"),
    Rule("graphs_moe_recompute", ("cuda_graphs", "recompute", "recompute_modules"),
         lambda c: ~(_graph_scope(c, "moe_router") & _recomputes(c, "moe")),
         lambda r: f"cuda_graphs={CUDA_GRAPHS[r['cuda_graphs']]} graphs moe_router, which Megatron-Core does not run "
                   "with the 'moe' recompute module ('moe recompute is not supported with moe_router CUDA graph')"),
    Rule("graphs_dropout_recompute", ("cuda_graphs", "recompute", "recompute_modules"),
         lambda c: ~np.asarray(c["dropout"], dtype=bool)
         | ~((_recomputes(c, "core_attn") & (_graph_scope(c, "attn") | _graphs_whole(c)))
             | (_recomputes(c, "mlp") & (_graph_scope(c, "mlp") | _graphs_whole(c)))
             | (_recomputes(c, "moe") & _graphs_whole(c))),
         lambda r: f"cuda_graphs={CUDA_GRAPHS[r['cuda_graphs']]} graphs a module {r['name']} recomputes, and the model "
                   "has dropout: Megatron-Core graphs no recomputation with dropout ('attention dropout is not "
                   "supported with graphed attention recomputation')"),
    Rule("offload_host", ("offload_layers",), lambda c: (c["offload_layers"] == 0) | c["host_link"],
         lambda r: f"offload_layers={r['offload_layers']}: device {clip(str(r['device']), 40)} has no host link in "
                   "the catalogue (core/catalogue.py HOST_LINKS)"),
    # What the trainers refuse of a precision recipe (each rule names the trainer's file and function).
    Rule("fp8_param_gather_zero", ("zero",),
         lambda c: ~np.asarray(c["param_gather"], dtype=bool) | (c["zero"] >= 1),
         lambda r: f"precision {r['precision']} is priced with quantized parameters (--fp8-param-gather), which "
                   "Megatron-LM runs only with the distributed optimizer or Megatron-FSDP (megatron/training/"
                   f"arguments.py validate_args): zero={r['zero']} needs zero >= 1"),
    Rule("fp8_delayed_recompute_modules", ("recompute_modules",),
         lambda c: ~np.asarray(c["fp8_delayed"], dtype=bool)
         | ~(has_module(c, "moe_act") | has_module(c, "layernorm")),
         lambda r: f"precision {r['precision']} (delayed scaling) cannot recompute moe_act or layernorm "
                   "(megatron-core transformer/transformer_config.py TransformerConfig.__post_init__: \"Delayed "
                   "scaling does not support moe_act and layernorm recompute for fp8\")"),
    Rule("offload_dense", ("offload_layers",), lambda c: (c["offload_layers"] == 0) | (c["num_experts"] == 1),
         lambda r: f"offload_layers={r['offload_layers']} is priced for dense models only"),
)
# The expert-parallel knobs' rules (model/moe_rules.py), in the same form, after the dense ones.
CONFIG_RULES += tuple(Rule(r.name, r.needs, r.ok, r.message) for r in (DENSE_RULE, *MOE_CONFIG_RULES))

#: What a problem must be for the cost model to price it (after the field checks of :func:`check_problem`).
PROBLEM_RULES: tuple[Rule, ...] = (
    Rule("dense", (), lambda c: (c["num_experts"] == 1) | c["moe_priced"],
         lambda r: f"{clip(r['name'], 60)}: mixture-of-experts ({r['num_experts']} experts) is not modelled"),
    Rule("priced_family", (), lambda c: (c["family"] in PRICED_FAMILIES) | c["moe_priced"],
         lambda r: f"family {clip(r['family'], 40)!r} is not one of the priced families "
                   f"({', '.join(PRICED_FAMILIES)})"),
    Rule("kv_groups", (), lambda c: c["heads"] % c["kv_heads"] == 0,
         lambda r: f"{r['kv_heads']} kv heads do not divide {r['heads']} attention heads"),
    Rule("plannable_device", (), lambda c: c["plannable"],
         lambda r: f"device {clip(r['device'], 40)}: no published efficiency figures in the catalogue; use "
                   f"{', '.join(plannable_devices())}"),
    Rule("whole_nodes", (), lambda c: (c["gpus"] <= c["gpus_per_node"]) | (c["gpus"] % c["gpus_per_node"] == 0),
         lambda r: f"gpus {r['gpus']} is not a multiple of gpus_per_node {r['gpus_per_node']} (the NVLink group:"
                   " --gpus-per-node, 8 unless given, or the --system's)"),
    Rule("learned_positions", (), lambda c: (c["position"] != "learned") | (c["seq_len"] <= c["max_position"]),
         lambda r: f"seq_len {r['seq_len']} exceeds the {r['max_position']} learned positions of "
                   f"{clip(r['name'], 60)} (max_position)"),
)

# (attribute, kind, argument) of the problem's fields, checked before any rule: "count" -> LLM_LIMITS name,
# "whole" -> inclusive maximum, "choice" -> the choices, "flag", "real" -> (low exclusive, high), "text".
_COUNT_FIELDS = ("num_layers", "hidden", "ffn_hidden", "heads", "kv_heads", "head_dim", "vocab", "max_position",
                 "num_experts", "top_k")
ARCH_CHECKS: tuple[tuple[str, str, Any], ...] = (
    *((k, "count", k) for k in _COUNT_FIELDS),
    ("expert_ffn", "whole", LLM_LIMITS["ffn_hidden"][1]),
    ("shared_experts", "whole", LLM_LIMITS["num_experts"][1]),
    ("sliding_window", "whole", LLM_LIMITS["max_position"][1]),
    ("global_every", "whole", LLM_LIMITS["num_layers"][1]),
    ("mlp", "choice", MLP_KINDS), ("position", "choice", POSITIONS), ("norm", "choice", NORMS),
    ("tied_embeddings", "flag", None), ("dropout", "flag", None), ("qkv_bias", "flag", None),
    ("linear_bias", "flag", None), ("qk_norm", "flag", None), ("parallel_residual", "flag", None),
    ("rope_theta", "real", (0.0, 1e12)), ("rotary_fraction", "real", (0.0, 1.0)),
    ("name", "text", None), ("family", "text", None), ("architecture", "text", None), ("source", "text", None),
)


def check_field(kind: str, arg: Any, value: Any, where: str, key: str) -> Any:
    """``value`` of a problem field of ``kind`` (see :data:`ARCH_CHECKS`), or a one-line error naming ``key``."""
    import math

    if kind == "count":
        return check_llm_count(arg, value, where, key)
    if kind == "whole":
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= arg:
            raise InputError(f"{where}: {key} must be a whole number in 0..{arg:,}, got {shown(value)}")
        return int(value)
    if kind == "flag":
        if not isinstance(value, bool):
            raise InputError(f"{where}: {key} must be true or false, got {shown(value)}")
        return value
    if kind == "choice":
        if not isinstance(value, str) or value not in arg:
            raise InputError(f"{where}: {key} must be one of {', '.join(arg)}, got {shown(value)}")
        return value
    if kind == "real":
        lo, hi = arg
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not lo < value <= hi:
            raise InputError(f"{where}: {key} must be a number in ({lo:g}, {hi:g}], got {shown(value)}")
        return float(value)
    if not isinstance(value, str):
        raise InputError(f"{where}: {key} must be a string, got {shown(value)}")
    return value


def plannable_devices() -> tuple[str, ...]:
    """Every catalogue device the LLM planner prices (published efficiency figures), for the refusal to list."""
    from dnnplace.core.catalogue import device_names, device_spec

    return tuple(d for d in device_names() if device_spec(d).plannable)


def problem_columns(problem: Any) -> dict[str, Any]:
    """The problem's scalars the rules read (architecture, cluster, job, device), by name."""
    a, c, j = problem.arch, problem.cluster, problem.job
    cols = {name: getattr(a, name) for name, _, _ in ARCH_CHECKS}
    cols.update(gpus=c.gpus, gpus_per_node=c.gpus_per_node, device=c.device, seq_len=j.seq_len,
                global_batch=j.global_batch, precision=j.precision, plannable=bool(problem.device.plannable))
    moe = getattr(problem, "moe", None)
    cols.update(moe_problem_columns(moe, c.gpus) if moe is not None else dense_problem_columns(a))
    cols["host_link"] = host_link(str(c.device)) is not None  # activation offloading's link (HOST_LINKS)
    cols["moe_priced"] = moe is not None  # read by frontends/moe_config.py: the MoE cost terms price it
    cols["param_gather"] = j.precision in PARAM_GATHER_PRECISIONS
    cols["fp8_delayed"] = j.precision in DELAYED_PRECISIONS
    return cols




def filter_rows(rules: Sequence[Rule], cols: dict[str, Any], n: int, have: set[str],
                removed: Counter[str] | None = None, emptied: list[str] | None = None) -> np.ndarray:
    """Mask of the ``n`` rows that obey every rule whose columns are all in ``have``; ``removed`` counts,
    per rule, the rows it was the first to remove, and ``emptied`` gets the rule that removed the last
    rows (to explain an empty search)."""
    keep = np.ones(n, dtype=bool)
    for rule in rules:
        if not set(rule.needs) <= have:
            continue
        ok = np.broadcast_to(np.asarray(rule.ok(cols), dtype=bool), (n,))
        gone = int(np.count_nonzero(keep & ~ok))
        if gone and removed is not None:
            removed[rule.name] += gone
        if gone and emptied is not None and not (keep & ok).any():
            at = int(np.argmax(keep & ~ok))
            row = {k: (v[at].item() if isinstance(v, np.ndarray) and v.shape == (n,) else v) for k, v in cols.items()}
            emptied.append(f"{rule.name} ({rule.message(row)})")
        keep &= ok
    return keep


def check_problem_fields(problem: Any, where: str = "problem") -> None:
    """Every field of the problem of its kind and inside LLM_LIMITS (no arithmetic has run on them yet)."""
    a, c, j = problem.arch, problem.cluster, problem.job
    for name, kind, arg in ARCH_CHECKS:
        check_field(kind, arg, getattr(a, name), where, name)
    for name in ("gpus", "gpus_per_node"):
        check_llm_count(name, getattr(c, name), where)
    for name in ("seq_len", "global_batch"):
        check_llm_count(name, getattr(j, name), where)
    check_field("choice", PRECISIONS, j.precision, where, "precision")
    check_field("choice", CROSS_ENTROPIES, j.cross_entropy, where, "cross_entropy")
    check_field("text", None, c.device, where, "device")


def check_problem(problem: Any, where: str = "problem") -> None:
    """Refuse what the model cannot price, in one line naming the field or the rule: every count inside
    LLM_LIMITS (before any enumeration), then :data:`PROBLEM_RULES`."""
    check_problem_fields(problem, where)
    broken = first_broken(PROBLEM_RULES, problem_columns(problem))
    if broken is not None:
        rule, row = broken
        raise InputError(f"{rule.message(row)} (rule {rule.name})")
    gemm_format, generations = PRECISION_RECIPES[problem.job.precision]
    generation = GPU_GENERATIONS.get(problem.device.name)
    if generation is not None and generation not in generations:
        raise InputError(f"precision {problem.job.precision} runs on {' or '.join(generations)} GPUs; "
                         f"{problem.device.name} is {generation}")
    problem.device.peak(gemm_format)


def check_config(problem: Any, config: ParallelConfig) -> None:
    """Megatron's rules on one configuration (:data:`CONFIG_RULES`): one line naming the first broken rule."""
    check_fields(config)
    cols: dict[str, Any] = problem_columns(problem)
    cols.update(columns([config]))
    broken = first_broken(CONFIG_RULES, cols)
    if broken is not None:
        rule, row = broken
        raise InputError(f"config {rule.message(row)} (rule {rule.name})")


def check_pin_set(problem: Any, pins: dict[str, object], where: str = "--fix") -> None:
    """Every pin is kept in the plan's configuration or refused here, in one line naming it and what makes it
    meaningless (the model, or another knob).

    The search enumerates only the knobs a problem has a choice in: a dense model runs the expert knobs at
    :data:`~dnnplace.models.llm.moe_rules.DENSE_VALUES`, and recompute modules exist only under selective
    recompute, so a pin of anything else would be dropped from the plan while a plan file holding it is refused
    (rules ``dense_no_expert_knobs``, ``modules_selective``).  --fix, --compare and --calibrate pin through the
    search, which calls this first."""
    grid = {k: int(pins[k]) for k in ("tp", "pp", "cp", "dp") if k in pins}  # type: ignore[call-overload]
    gpus, product = problem.cluster.gpus, math.prod(grid.values())
    if product > gpus:  # rule world_size, said of the pins themselves (the rule set would see dp = 0)
        named = ", ".join(f"{k}={v}" for k, v in grid.items())
        raise InputError(f"{where}: {named}: {'*'.join(grid)} = {product} does not divide the {gpus} GPUs"
                         " (tp*pp*cp*dp must be the number of GPUs; rule world_size)")
    modules = str(pins.get("recompute_modules", "none"))
    if problem.arch.num_experts == 1:
        if modules != "none" and set(modules.split("+")) <= set(DENSE_MODULES):
            raise InputError(dense_modules_message(where, clip(problem.arch.name, 60), modules))
        for key, value in DENSE_VALUES.items():
            if key in pins and pins[key] != value:
                raise InputError(f"{where}: {key}={str(pins[key]).lower()} does not apply to "
                                 f"{clip(problem.arch.name, 60)}, a dense model (no experts: it runs "
                                 f"{key}={str(value).lower()}; rule {DENSE_RULE.name})")
    if modules != "none" and pins.get("recompute") != "selective":
        told = f"recompute={pins['recompute']}" if "recompute" in pins else "recompute not pinned"
        raise InputError(f"{where}: recompute_modules={modules} needs recompute=selective, got {told} (pin "
                         "recompute=selective with it; rule modules_selective)")


def describe_removed(removed: Counter[str], last: str | None) -> str:
    """Which rules emptied a search: the one that removed the last candidates, and the two most common."""
    if not removed:
        return "no candidate to begin with"
    common = ", ".join(f"{k} {v:,}" for k, v in removed.most_common(2))
    return (f"rule {last} removed the last candidates; most removed: {common}" if last
            else f"most candidates removed by: {common}")


assert RECOMPUTE == ("none", "selective", "full")  # the cost model's recompute codes 0, 1, 2 follow this order
