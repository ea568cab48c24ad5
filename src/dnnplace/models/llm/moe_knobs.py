"""The vocabulary of the expert-parallel knobs: Megatron-Core's token dispatchers and recompute modules.

Kept apart from :mod:`dnnplace.models.llm.moe` (which needs the architecture) so that the configuration
(:mod:`.llm_config`) and the rule set can name them without an import circle.
"""

from __future__ import annotations

__all__ = ["DISPATCHERS", "MODULE_SETS", "RECOMPUTE_MODULES", "ROUTINGS", "UNFORCED_ROUTING", "module_set"]

#: Megatron-Core's token dispatchers (``--moe-token-dispatcher-type``); ``flex`` is DeepEP / HybridEP.
DISPATCHERS = ("alltoall", "allgather", "flex")
#: The routers' token distribution over the experts, named after what the measured MoE tables hold
#: (aiconfigurator's ``balanced`` and ``power_law_<alpha>`` rows): ``balanced`` is Megatron-Core's
#: ``--moe-router-force-load-balancing`` (the Megatron-Bridge performance recipes), the power laws are routers
#: trained with an auxiliary load-balancing loss and left to route as they learned.
ROUTINGS = ("balanced", "power-law-1.01", "power-law-1.2")
#: The skew assumed for a router that is not forced to balance: aiconfigurator-core 0.12.0's own default for
#: its MoE modelling -- ``ModelConfig.workload_distribution = "power_law"`` (sdk/config.py) with
#: ``MOEModel._power_law_alpha = 1.2`` (sdk/models/moe.py: Qwen3-MoE, GPT-OSS, Mixtral, Llama 4); its DeepSeek
#: family uses 1.01 (sdk/models/deepseek.py), the milder skew, which stays a pin away.
UNFORCED_ROUTING = "power-law-1.2"
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
