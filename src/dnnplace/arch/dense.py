"""A dense decoder-only transformer as every LLM planner prices it: widths, counts and the attention shape.

Lives below the planned models (training and serving read the same object) so there is one
description of an architecture and one reader of ``config.json`` (:mod:`dnnplace.arch.hf_config`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TransformerArch"]


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
    rotary_fraction: float = 1.0  # share of each head's channels RoPE rotates (GPT-NeoX rotary_pct, Phi's factor)
    parallel_residual: bool = False  # attention and MLP read the same input and add to one residual (GPT-NeoX)

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
