"""Mixture-of-experts and multi-latent attention: what an MoE model's cost depends on, beyond a dense layer.

:class:`MoEModel` pairs the dense :class:`~dnnplace.arch.dense.TransformerArch` (hidden size, heads,
vocabulary, the dense layers' ffn) with :class:`MoESpec` (routed and shared experts, which layers
are sparse, the multi-token-prediction layers) and, for DeepSeek-style models, :class:`MLA`.
All frozen; :mod:`dnnplace.arch.moe_config` builds them from a config.json.  Below the planned
models: the training and the serving planner price the same object.
"""

from __future__ import annotations

from dataclasses import dataclass

from dnnplace.arch.dense import TransformerArch

__all__ = ["MLA", "MoEModel", "MoESpec", "moe_doc"]


@dataclass(frozen=True)
class MLA:
    """DeepSeek's multi-latent attention: queries and keys/values through low-rank latents.

    Per head, queries and keys have ``qk_nope_head_dim`` position-free channels plus
    ``qk_rope_head_dim`` rotary ones (the rotary key is one shared head); values have
    ``v_head_dim``.  ``q_lora_rank`` 0 means queries are projected directly (no latent).
    """

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        """Channels per head that queries and keys multiply over (position-free + rotary)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class MoESpec:
    """The experts of a model and where they sit.

    ``moe_layers[i]`` is true when decoder layer i has routed experts (the others run a dense
    MLP of ``arch.ffn_hidden``).  ``shared_ffn`` is the summed intermediate width of the shared
    experts (one dense MLP that every token passes through, beside the routed ones).
    ``mtp_layers`` extra layers (DeepSeek's multi-token prediction) run after the last decoder
    layer, each with its own projection, an MoE layer of the same shape and the shared LM head.
    """

    num_experts: int
    top_k: int
    expert_ffn: int
    moe_layers: tuple[bool, ...]
    shared_experts: int = 0
    shared_ffn: int = 0
    mtp_layers: int = 0
    router: str = "softmax"  # softmax | sigmoid: the score function applied to the router logits
    expert_groups: int = 0  # group-limited routing (DeepSeek's n_group); 0: none
    topk_groups: int = 0  # groups a token may route to (DeepSeek's topk_group)
    expert_bias: bool = False  # biases on the experts' linear layers (gpt-oss)

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layers)

    @property
    def num_dense_layers(self) -> int:
        return len(self.moe_layers) - self.num_moe_layers


@dataclass(frozen=True)
class MoEModel:
    """An MoE decoder: the dense architecture, its experts and (optionally) multi-latent attention.

    ``arch`` carries what a dense layer has (its ``ffn_hidden`` is the dense layers' MLP width)
    and, for consistency with the dense planner, ``num_experts``/``top_k``/``expert_ffn``/
    ``shared_experts`` mirrored from ``moe``.  With ``mla`` set, ``arch.head_dim`` is the value
    head dimension, so ``arch.q_width`` is the output projection's input width.
    ``attention_sinks``: gpt-oss's learned per-head softmax sink (one logit per head, no FLOPs
    of note).  ``attention_chunk``: Llama 4's chunked local attention on its rotary layers.
    """

    arch: TransformerArch
    moe: MoESpec
    mla: MLA | None = None
    attention_sinks: bool = False
    attention_chunk: int = 0
    chunk_global_every: int = 0  # with attention_chunk: every n-th layer attends to the whole sequence

    @property
    def name(self) -> str:
        return self.arch.name

    def doc(self) -> dict[str, object]:
        """The plan file's ``moe`` object (:func:`moe_doc`)."""
        return moe_doc(self)


def moe_doc(m: MoEModel) -> dict[str, object]:
    """The plan file's ``moe`` object: what an MoE model adds to its dense fields (``model``), by name."""
    s, x = m.moe, m.mla
    return {"num_experts": s.num_experts, "top_k": s.top_k, "expert_ffn": s.expert_ffn,
            "moe_layers": [int(v) for v in s.moe_layers], "shared_experts": s.shared_experts,
            "shared_ffn": s.shared_ffn, "mtp_layers": s.mtp_layers, "router": s.router,
            "expert_groups": s.expert_groups, "topk_groups": s.topk_groups, "expert_bias": s.expert_bias,
            "mla": None if x is None else {"q_lora_rank": x.q_lora_rank, "kv_lora_rank": x.kv_lora_rank,
                                           "qk_nope_head_dim": x.qk_nope_head_dim,
                                           "qk_rope_head_dim": x.qk_rope_head_dim, "v_head_dim": x.v_head_dim},
            "attention_sinks": m.attention_sinks, "attention_chunk": m.attention_chunk,
            "chunk_global_every": m.chunk_global_every}
