"""Megatron-Core's rules for expert parallelism, as named vectorised predicates over named columns.

"MoE parallel folding" (Megatron-Core ``parallel_state.initialize_model_parallel``): attention runs
on the grid tp x cp x dp x pp, the experts on etp x ep x edp x pp over the same N ranks, so
EDP = N / (pp x ep x etp) is derived, not chosen.

Written in the shape of the planner's one rule set (``model/llm_rules.py``: ``Rule(name, needs, ok,
message)``, predicates over the configuration's columns beside the problem's scalars), so that the
rules join :data:`CONFIG_RULES` there when the knobs become :class:`ParallelConfig` fields.  Columns:

* the configuration: ``tp pp vp cp dp ep etp`` (int64), ``sequence_parallel``, ``grouped_gemm``,
  ``a2a_overlap`` (overlap_moe_expert_parallel_comm), ``shared_expert_overlap`` (bool),
  ``dispatcher`` (index into :data:`~dnnplace.models.llm.moe.DISPATCHERS`), ``recompute`` (0 none,
  1 selective, 2 full) and ``recompute_modules`` (bit i set: ``RECOMPUTE_MODULES[i]`` is recomputed);
* the problem (:func:`moe_problem_columns`): ``gpus``, ``num_experts``, ``expert_ffn``, ``shared_ffn``,
  ``dense_layers``, ``mla``, ``mtp_layers``, ``expert_bias`` and ``name``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from dnnplace.core.rule import Cols, Rule, first_broken
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.moe_knobs import DISPATCHERS, RECOMPUTE_MODULES

# A model.moe.MoEModel is passed as Any: model.moe needs the architecture (model.llm), which reads this rule set.
MoEModel = Any


__all__ = ["DENSE_MODULES", "DENSE_RULE", "DENSE_VALUES", "MOE_CONFIG_RULES", "Rule", "check_moe_config",
           "dense_modules_message", "dense_problem_columns", "edp_of", "filter_moe_rows", "first_broken",
           "has_module", "modules_mask", "moe_columns", "moe_problem_columns"]

_RECOMPUTE = ("none", "selective", "full")  # the cost model's codes 0, 1, 2 (model.llm.RECOMPUTE)




def modules_mask(modules: Iterable[str]) -> int:
    """The ``recompute_modules`` column of a set of module names (one-line error on an unknown one)."""
    mask = 0
    for name in modules:
        if name not in RECOMPUTE_MODULES:
            raise DnnplaceError(f"unknown recompute module '{name}'; Megatron's: {', '.join(RECOMPUTE_MODULES)}")
        mask |= 1 << RECOMPUTE_MODULES.index(name)
    return mask


def has_module(c: Cols, name: str) -> Any:
    """Does each row's recompute_modules set hold ``name`` (a bit of RECOMPUTE_MODULES)?"""
    return (np.asarray(c["recompute_modules"], dtype=np.int64) >> RECOMPUTE_MODULES.index(name)) & 1 == 1


def _on(c: Cols, name: str) -> Any:
    return np.asarray(c[name], dtype=bool)


def edp_of(c: Cols) -> Any:
    """Expert data parallel size: the ranks holding copies of one expert shard, N / (pp x ep x etp)."""
    return c["gpus"] // (c["pp"] * c["ep"] * c["etp"])


def _grid_divides(c: Cols) -> Any:
    """etp x ep x pp divides the GPUs, without forming the product (no int64 overflow)."""
    rest, ok = c["gpus"], True
    for p in (c["etp"], c["ep"], c["pp"]):
        ok = ok & (rest % p == 0)
        rest = rest // np.maximum(p, 1)
    return ok


_FLEX = DISPATCHERS.index("flex")

#: Megatron's rules for the expert-parallel knobs, in the order they are reported (each with its source).
MOE_CONFIG_RULES: tuple[Rule, ...] = (
    # Megatron-LM arguments.py: "Number of experts should be a multiple of expert model parallel_size".
    Rule("ep_experts", ("ep",), lambda c: c["num_experts"] % c["ep"] == 0,
         lambda r: f"ep={r['ep']} must divide the {r['num_experts']} routed experts"),
    # Megatron-Core parallel_state: world_size divisible by the expert_tensor_model_pipeline size.
    Rule("expert_grid", ("etp", "ep", "pp"), _grid_divides,
         lambda r: f"etp*ep*pp = {r['etp'] * r['ep'] * r['pp']} must divide the {r['gpus']} GPUs "
                   "(edp = GPUs / (pp*ep*etp))"),
    # Megatron-Core experts: fc1 / fc2 split along the ffn dimension over ETP (core.utils.divide).
    Rule("etp_expert_ffn", ("etp",), lambda c: c["expert_ffn"] % c["etp"] == 0,
         lambda r: f"etp={r['etp']} must divide the experts' ffn width {r['expert_ffn']}"),
    # Megatron-Core moe_layer.py: training with MoE and TP > 1 without sequence parallelism is refused.
    Rule("moe_sequence_parallel", ("tp", "sequence_parallel"),
         lambda c: (c["tp"] == 1) | np.asarray(c["sequence_parallel"], dtype=bool),
         lambda r: f"tp={r['tp']} with experts needs sequence parallelism"),
    # Megatron-Core transformer_config.moe_token_dispatcher_type.
    Rule("dispatcher", ("dispatcher",), lambda c: (c["dispatcher"] >= 0) & (c["dispatcher"] < len(DISPATCHERS)),
         lambda r: f"dispatcher must be one of {', '.join(DISPATCHERS)}"),
    # Megatron-Core experts (TEGroupedMLP): "Bias in Moe is only supported when ETP==1".
    Rule("expert_bias_etp", ("etp",), lambda c: ~np.asarray(c["expert_bias"], dtype=bool) | (c["etp"] == 1),
         lambda r: f"etp={r['etp']}: {r['name']}'s experts have biases, which Megatron supports only with etp=1"),
    # Megatron-Core MoEFlexTokenDispatcher: "DeepEP dispatcher requires TPxEP > 1".
    Rule("flex_expert_ranks", ("dispatcher", "etp", "ep"),
         lambda c: (c["dispatcher"] != _FLEX) | (c["etp"] * c["ep"] > 1),
         lambda r: "the flex dispatcher needs etp*ep > 1"),
    # Megatron-Core transformer_config: recompute_modules apply with recompute_granularity 'selective'.
    Rule("modules_selective", ("recompute_modules", "recompute"),
         lambda c: (c["recompute_modules"] == 0) | (c["recompute"] == _RECOMPUTE.index("selective")),
         lambda r: f"recompute modules need recompute=selective, not {_RECOMPUTE[int(r['recompute'])]}"),
    # Megatron-Core transformer_config: "moe_act in recompute_modules is only supported with moe_grouped_gemm".
    Rule("moe_act_grouped_gemm", ("recompute_modules",),
         lambda c: ~has_module(c, "moe_act") | np.asarray(c["grouped_gemm"], dtype=bool),
         lambda r: "recompute module moe_act needs grouped GEMMs"),
    # Megatron-Core transformer_config: "mla_up_proj ... only supported with multi_latent_attention".
    Rule("mla_up_proj_mla", ("recompute_modules",), lambda c: ~has_module(c, "mla_up_proj") | bool(c["mla"]),
         lambda r: f"recompute module mla_up_proj needs multi-latent attention, which {r['name']} has not"),
    # dnnplace: without shared experts / dense MLPs these modules recompute nothing (a duplicate plan).
    Rule("shared_experts_exist", ("recompute_modules",),
         lambda c: ~has_module(c, "shared_experts") | (c["shared_ffn"] > 0),
         lambda r: f"recompute module shared_experts needs shared experts, which {r['name']} has not"),
    Rule("mlp_exists", ("recompute_modules",), lambda c: ~has_module(c, "mlp") | (c["dense_layers"] > 0),
         lambda r: f"recompute module mlp needs dense MLP layers, which {r['name']} has not"),
    # Megatron-Core transformer_config: "shared_experts recompute cannot work with --moe-shared-expert-overlap".
    Rule("shared_overlap_recompute", ("recompute_modules",),
         lambda c: ~(has_module(c, "shared_experts") & np.asarray(c["shared_expert_overlap"], dtype=bool)),
         lambda r: "recompute module shared_experts cannot run with the shared-expert overlap"),
    # Megatron-Core transformer_config, overlap_moe_expert_parallel_comm (the EP all-to-all overlap): needs
    # ep > 1, the alltoall or flex dispatcher, vp when pp > 1, no full recompute and no 'moe' module, no
    # shared-expert overlap, at most one MTP layer.
    Rule("a2a_overlap_ep", ("a2a_overlap", "ep"), lambda c: ~_on(c, "a2a_overlap") | (c["ep"] > 1),
         lambda r: "the all-to-all overlap needs ep > 1"),
    Rule("a2a_overlap_dispatcher", ("a2a_overlap", "dispatcher"),
         lambda c: ~_on(c, "a2a_overlap") | (c["dispatcher"] != DISPATCHERS.index("allgather")),
         lambda r: "the all-to-all overlap needs the alltoall or flex dispatcher"),
    Rule("a2a_overlap_vp", ("a2a_overlap", "pp", "vp"),
         lambda c: ~_on(c, "a2a_overlap") | (c["pp"] == 1) | (c["vp"] > 1),
         lambda r: f"the all-to-all overlap with pp={r['pp']} needs interleaving (vp > 1)"),
    Rule("a2a_overlap_recompute", ("a2a_overlap", "recompute", "recompute_modules"),
         lambda c: ~_on(c, "a2a_overlap") | ((c["recompute"] != _RECOMPUTE.index("full")) & ~has_module(c, "moe")),
         lambda r: "the all-to-all overlap cannot run with full recompute or the 'moe' recompute module"),
    Rule("a2a_overlap_shared", ("a2a_overlap",),
         lambda c: ~(_on(c, "a2a_overlap") & _on(c, "shared_expert_overlap")),
         lambda r: "the all-to-all overlap and the shared-expert overlap exclude each other"),
    Rule("a2a_overlap_mtp", ("a2a_overlap",), lambda c: ~_on(c, "a2a_overlap") | (c["mtp_layers"] <= 1),
         lambda r: f"the all-to-all overlap supports at most 1 MTP layer, {r['name']} has {r['mtp_layers']}"),
    # megatron-core 0.16.1 transformer/transformer_config.py TransformerConfig.__post_init__: "Pipeline model
    # parallel size must be larger than 1 when enabling overlap_moe_expert_parallel_comm with MTP layer."
    Rule("a2a_overlap_mtp_pp", ("a2a_overlap", "pp"),
         lambda c: ~_on(c, "a2a_overlap") | (c["mtp_layers"] == 0) | (c["pp"] > 1),
         lambda r: f"the all-to-all overlap with {r['name']}'s MTP layer needs pp > 1 (megatron-core "
                   "transformer_config.py TransformerConfig.__post_init__)"),
)


def moe_problem_columns(model: MoEModel, gpus: int) -> dict[str, Any]:
    """The problem's scalars the MoE rules read, by name (grouped GEMMs on and the shared-expert overlap off,
    as the planner prices every MoE layer)."""
    return {"gpus": gpus, "num_experts": model.moe.num_experts, "expert_ffn": model.moe.expert_ffn,
            "shared_ffn": model.moe.shared_ffn, "dense_layers": model.moe.num_dense_layers,
            "mla": model.mla is not None, "mtp_layers": model.moe.mtp_layers, "expert_bias": model.moe.expert_bias,
            "name": model.name, "grouped_gemm": True, "shared_expert_overlap": False}


def dense_problem_columns(arch: Any) -> dict[str, Any]:
    """The same scalars for a dense model (every layer dense, no experts to place)."""
    return {"shared_ffn": 0, "dense_layers": arch.num_layers, "mla": False, "mtp_layers": 0, "expert_bias": False,
            "grouped_gemm": True, "shared_expert_overlap": False}


#: The one value of each expert knob a dense model runs (ParallelConfig's defaults): the dense cost model
#: places no experts, dispatches no tokens and prices no recompute module.  DENSE_RULE (plan files) and the
#: pin check (``rules.check_pin_set``: --fix, --compare, --calibrate) both read this table.
DENSE_VALUES: dict[str, object] = {"ep": 1, "etp": 1, "dispatcher": "alltoall", "a2a_overlap": False,
                                   "recompute_modules": "none", "routing": "balanced"}

#: The recompute modules Megatron-Core's selective recompute names in a dense layer (its
#: ``transformer_config.recompute_modules``: the core attention, the two norms, the MLP).  On a dense model the
#: planner's ``recompute=selective`` is Megatron's default set, core_attn alone, exported as
#: ``--recompute-activations``; the dense cost model prices no other set.
DENSE_MODULES = ("core_attn", "layernorm", "mlp")


def dense_modules_message(where: str, name: str, modules: str) -> str:
    """Why a dense model refuses a pin of its own layer's recompute modules: they exist there (unlike the
    expert knobs), but recompute=selective already is core_attn and no other set is priced."""
    other = [m for m in modules.split("+") if m != "core_attn"]
    if not other:
        return (f"{where}: recompute_modules=core_attn on {name}, a dense model, is what its recompute=selective "
                "runs (Megatron's default set, --recompute-activations): pin recompute=selective alone (rule "
                "dense_no_expert_knobs)")
    return (f"{where}: recompute_modules={modules} on {name}, a dense model: the dense cost model prices "
            f"selective recompute only as Megatron's default core_attn (recompute=selective); recomputing "
            f"{'+'.join(other)} of a dense layer is not priced (rule dense_no_expert_knobs)")


#: A dense model has no experts to place, and the dense cost model prices no recompute module set but
#: Megatron's default (core_attn, what recompute=selective means there).
DENSE_RULE = Rule("dense_no_expert_knobs", ("ep", "etp", "dispatcher", "a2a_overlap", "recompute_modules",
                                          "routing"),
                  lambda c: (c["num_experts"] > 1) | ((c["ep"] == 1) & (c["etp"] == 1) & ~_on(c, "a2a_overlap")
                                                      & (c["recompute_modules"] == 0)
                                                      & (np.asarray(c.get("routing", 0)) == 0)
                                                      & (c["dispatcher"] == DISPATCHERS.index("alltoall"))),
                  lambda r: f"{r['name']} has no experts: ep, etp, the dispatcher, the all-to-all overlap and "
                            "routing do not apply, and recompute=selective is core_attn there (recompute modules "
                            "none in the plan; " + ", ".join(f"{k}={v}".lower() for k, v in
                                                                          DENSE_VALUES.items()) + ")")


def moe_columns(*, tp: int = 1, pp: int = 1, vp: int = 1, cp: int = 1, dp: int = 1, ep: int = 1, etp: int = 1,
                sequence_parallel: bool = True, dispatcher: str = "alltoall", recompute: str = "none",
                recompute_modules: Iterable[str] = (), grouped_gemm: bool = True, a2a_overlap: bool = False,
                shared_expert_overlap: bool = False) -> dict[str, np.ndarray]:
    """One configuration's columns (a batch of one), names checked in one line."""
    if dispatcher not in DISPATCHERS:
        raise DnnplaceError(f"dispatcher must be one of {', '.join(DISPATCHERS)}, got '{dispatcher}'")
    if recompute not in _RECOMPUTE:
        raise DnnplaceError(f"recompute must be one of {', '.join(_RECOMPUTE)}, got '{recompute}'")
    counts = {"tp": tp, "pp": pp, "vp": vp, "cp": cp, "dp": dp, "ep": ep, "etp": etp}
    for k, v in counts.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise DnnplaceError(f"config {k} must be a positive integer, got {v!r}")
    cols = {k: np.array([v], dtype=np.int64) for k, v in counts.items()}
    cols.update(sequence_parallel=np.array([sequence_parallel]), grouped_gemm=np.array([grouped_gemm]),
                a2a_overlap=np.array([a2a_overlap]), shared_expert_overlap=np.array([shared_expert_overlap]),
                dispatcher=np.array([DISPATCHERS.index(dispatcher)], dtype=np.int64),
                recompute=np.array([_RECOMPUTE.index(recompute)], dtype=np.int64),
                recompute_modules=np.array([modules_mask(recompute_modules)], dtype=np.int64))
    return cols




def filter_moe_rows(model: MoEModel, gpus: int, config_cols: Cols, n: int) -> np.ndarray:
    """Mask of the ``n`` candidate rows that keep every MoE rule (the search's filter)."""
    cols = {**moe_problem_columns(model, gpus), **config_cols}
    keep = np.ones(n, dtype=bool)
    for rule in MOE_CONFIG_RULES:
        keep &= np.broadcast_to(np.asarray(rule.ok(cols), dtype=bool), (n,))
    return keep


def check_moe_config(model: MoEModel, gpus: int, config_cols: Cols) -> None:
    """One configuration (a batch of one): a one-line DnnplaceError naming the first MoE rule it breaks."""
    broken = first_broken(MOE_CONFIG_RULES, {**moe_problem_columns(model, gpus), **config_cols})
    if broken is not None:
        rule, row = broken
        raise DnnplaceError(f"config {rule.message(row)} (rule {rule.name})")
