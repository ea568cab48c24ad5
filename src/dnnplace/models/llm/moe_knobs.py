"""The vocabulary of the expert-parallel knobs: Megatron-Core's token dispatchers and recompute modules.

Kept apart from :mod:`dnnplace.models.llm.moe` (which needs the architecture) so that the configuration
(:mod:`.llm_config`) and the rule set can name them without an import circle.
"""

from __future__ import annotations

__all__ = ["DISPATCHERS", "MODULE_SETS", "RECOMPUTE_MODULES", "module_set"]

#: Megatron-Core's token dispatchers (``--moe-token-dispatcher-type``); ``flex`` is DeepEP / HybridEP.
DISPATCHERS = ("alltoall", "allgather", "flex")
#: Megatron-Core's selective-recompute modules (``--recompute-modules``) that a transformer with MoE uses.
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
#: Every set of recompute modules as the text ``--fix`` and plan files write ("none", or names joined by
#: "+" in RECOMPUTE_MODULES order); a set's index is its bit mask (bit i: RECOMPUTE_MODULES[i]).
MODULE_SETS: tuple[str, ...] = tuple(
    "+".join(name for b, name in enumerate(RECOMPUTE_MODULES) if i >> b & 1) or "none"
    for i in range(1 << len(RECOMPUTE_MODULES)))


def module_set(modules: tuple[str, ...] | list[str] | set[str] | frozenset[str]) -> str:
    """The :data:`MODULE_SETS` text of a collection of module names (order and repeats ignored)."""
    return "+".join(name for name in RECOMPUTE_MODULES if name in set(modules)) or "none"
