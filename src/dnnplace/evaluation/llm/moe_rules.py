"""Megatron-Core's rules for expert parallelism, as vectorised predicates over named columns.

"MoE parallel folding" (Megatron-Core ``parallel_state.initialize_model_parallel``): attention runs
on the grid tp x cp x dp x pp, the experts on etp x ep x edp x pp over the same N ranks, so
EDP = N / (pp x ep x etp) is derived, not chosen.  Each :class:`Rule` holds on a batch of
candidates given as columns (numpy arrays keyed by knob name); the search keeps the rows where
:func:`moe_mask` is true, and :func:`check_moe_config` names the first rule one configuration breaks.

Columns: ``tp pp cp dp ep etp`` (ints), ``sp`` (sequence parallelism, bool), ``dispatcher`` (index into
:data:`~dnnplace.model.moe.DISPATCHERS`), ``recompute`` (0 none, 1 selective, 2 full, as ``RECOMPUTE``),
``modules`` (bit i set: ``RECOMPUTE_MODULES[i]`` is recomputed), ``grouped_gemm`` (bool).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from dnnplace.errors import DnnplaceError
from dnnplace.model.moe import DISPATCHERS, RECOMPUTE_MODULES, MoEModel

Array = np.ndarray
Columns = Mapping[str, Array]

__all__ = ["MOE_RULES", "Rule", "check_moe_config", "columns_of", "edp_of", "modules_mask", "moe_mask"]


def modules_mask(modules: Iterable[str]) -> int:
    """The ``modules`` column's bit mask of a set of recompute module names (one-line error on an unknown one)."""
    mask = 0
    for name in modules:
        if name not in RECOMPUTE_MODULES:
            raise DnnplaceError(f"unknown recompute module '{name}'; Megatron's: {', '.join(RECOMPUTE_MODULES)}")
        mask |= 1 << RECOMPUTE_MODULES.index(name)
    return mask


def _has(c: Columns, name: str) -> Array:
    return (np.asarray(c["modules"]).astype(np.int64) >> RECOMPUTE_MODULES.index(name)) & 1 == 1


def edp_of(gpus: int, c: Columns) -> Array:
    """Expert data parallel size: the ranks that hold copies of one expert shard, N / (pp x ep x etp)."""
    return gpus / (np.asarray(c["pp"]) * np.asarray(c["ep"]) * np.asarray(c["etp"]))


@dataclass(frozen=True)
class Rule:
    """One of Megatron's constraints: ``holds(model, gpus, columns)`` per row, ``why`` its source."""

    name: str
    holds: Callable[[MoEModel, int, Columns], Array]
    text: str  # what the rule demands, as the one-line message says it
    why: str


def _int(x: Array) -> Array:
    return np.asarray(x).astype(np.int64)


MOE_RULES: tuple[Rule, ...] = (
    Rule("ep_divides_experts", lambda m, n, c: m.moe.num_experts % _int(c["ep"]) == 0,
         "ep must divide the routed experts",
         "Megatron-LM arguments.py: 'Number of experts should be a multiple of expert model parallel_size'"),
    Rule("expert_grid", lambda m, n, c: n % (_int(c["etp"]) * _int(c["ep"]) * _int(c["pp"])) == 0,
         "etp*ep*pp must divide the GPUs (edp = N / (pp*ep*etp))",
         "Megatron-Core parallel_state: world_size divisible by expert_tensor_model_pipeline size"),
    Rule("etp_divides_expert_ffn", lambda m, n, c: m.moe.expert_ffn % _int(c["etp"]) == 0,
         "etp must divide the experts' ffn width",
         "Megatron-Core experts: fc1/fc2 are split along the ffn dimension over ETP (core.utils.divide)"),
    Rule("sequence_parallel_with_tp", lambda m, n, c: (_int(c["tp"]) == 1) | np.asarray(c["sp"], dtype=bool),
         "tp > 1 with experts needs sequence parallelism",
         "Megatron-Core moe_layer.py: training with MoE and TP > 1 without sequence parallelism is refused"),
    Rule("known_dispatcher", lambda m, n, c: (_int(c["dispatcher"]) >= 0) & (_int(c["dispatcher"]) < len(DISPATCHERS)),
         f"dispatcher must be one of {', '.join(DISPATCHERS)}",
         "Megatron-Core transformer_config.moe_token_dispatcher_type"),
    Rule("flex_needs_expert_ranks", lambda m, n, c: (_int(c["dispatcher"]) != DISPATCHERS.index("flex"))
         | (_int(c["etp"]) * _int(c["ep"]) > 1),
         "the flex dispatcher needs etp*ep > 1",
         "Megatron-Core token_dispatcher.MoEFlexTokenDispatcher: 'DeepEP dispatcher requires TPxEP > 1'"),
    Rule("modules_need_selective", lambda m, n, c: (_int(c["modules"]) == 0) | (_int(c["recompute"]) == 1),
         "recompute modules need recompute=selective",
         "Megatron-Core transformer_config: recompute_modules apply with recompute_granularity 'selective'"),
    Rule("moe_act_needs_grouped_gemm", lambda m, n, c: ~_has(c, "moe_act") | np.asarray(c["grouped_gemm"],
                                                                                          dtype=bool),
         "recompute module moe_act needs grouped GEMMs",
         "Megatron-Core transformer_config: 'moe_act in recompute_modules is only supported with moe_grouped_gemm'"),
    Rule("mla_up_proj_needs_mla", lambda m, n, c: ~_has(c, "mla_up_proj") | (m.mla is not None),
         "recompute module mla_up_proj needs multi-latent attention",
         "Megatron-Core transformer_config: 'mla_up_proj ... only supported with multi_latent_attention'"),
    Rule("shared_experts_need_shared", lambda m, n, c: ~_has(c, "shared_experts") | (m.moe.shared_ffn > 0),
         "recompute module shared_experts needs shared experts",
         "dnnplace: without shared experts the module recomputes nothing (a duplicate of the same plan)"),
    Rule("mlp_needs_dense_layers", lambda m, n, c: ~_has(c, "mlp") | (m.moe.num_dense_layers > 0),
         "recompute module mlp needs dense MLP layers",
         "dnnplace: Megatron's 'mlp' recomputes the dense MLP only; without one it is a duplicate plan"),
)


def moe_mask(model: MoEModel, gpus: int, c: Columns) -> Array:
    """Rows of ``c`` that keep every rule (the search's filter)."""
    n = len(np.atleast_1d(np.asarray(c["ep"])))
    ok = np.ones(n, dtype=bool)
    for rule in MOE_RULES:
        ok &= np.broadcast_to(np.asarray(rule.holds(model, gpus, c), dtype=bool), (n,))
    return ok


def columns_of(*, tp: int = 1, pp: int = 1, cp: int = 1, dp: int = 1, ep: int = 1, etp: int = 1, sp: bool = True,
               dispatcher: str = "alltoall", recompute: str = "none", modules: Iterable[str] = (),
               grouped_gemm: bool = True) -> dict[str, Array]:
    """One configuration as a batch of one (the checker's and the tests' way in)."""
    from dnnplace.model.llm import RECOMPUTE

    if dispatcher not in DISPATCHERS:
        raise DnnplaceError(f"dispatcher must be one of {', '.join(DISPATCHERS)}, got '{dispatcher}'")
    if recompute not in RECOMPUTE:
        raise DnnplaceError(f"recompute must be one of {', '.join(RECOMPUTE)}, got '{recompute}'")
    row = {"tp": tp, "pp": pp, "cp": cp, "dp": dp, "ep": ep, "etp": etp, "sp": sp,
           "dispatcher": DISPATCHERS.index(dispatcher), "recompute": RECOMPUTE.index(recompute),
           "modules": modules_mask(modules), "grouped_gemm": grouped_gemm}
    return {k: np.array([v]) for k, v in row.items()}


def check_moe_config(model: MoEModel, gpus: int, c: Columns) -> None:
    """One configuration (a batch of one): one-line DnnplaceError naming the first rule it breaks."""
    for name in ("tp", "pp", "cp", "dp", "ep", "etp"):
        v = int(np.asarray(c[name]).ravel()[0])
        if v < 1:
            raise DnnplaceError(f"config {name} must be a positive integer, got {v}")
    for rule in MOE_RULES:
        if not bool(np.asarray(rule.holds(model, gpus, c)).ravel()[0]):
            shown = {k: int(np.asarray(c[k]).ravel()[0]) for k in ("tp", "pp", "ep", "etp")}
            raise DnnplaceError(f"config breaks {rule.name}: {rule.text} ({model.name}: {model.moe.num_experts} "
                                f"experts, expert ffn {model.moe.expert_ffn}; {gpus} GPUs, "
                                + ", ".join(f"{k}={v}" for k, v in shown.items()) + ")")
