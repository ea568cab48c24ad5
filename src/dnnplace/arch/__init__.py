"""One reader of model architectures for every LLM planner.

A Hugging Face ``config.json`` (dense, GQA, sliding windows, MoE with shared experts and group routing,
multi-latent attention, quantization configs) becomes a frozen :class:`TransformerArch` or
:class:`MoEModel`.  Below the planned models: the training and the serving planner import it, it
imports none of them (``.importlinter``).
"""

from dnnplace.arch.dense import TransformerArch
from dnnplace.arch.moe import MLA, MoEModel, MoESpec

__all__ = ["MLA", "MoEModel", "MoESpec", "TransformerArch"]
