"""Mixture-of-experts and multi-latent attention: what an MoE model's cost depends on, beyond a dense layer.

:class:`MoEModel` pairs the dense :class:`~dnnplace.models.llm.spec.TransformerArch` (hidden size, heads,
vocabulary, the dense layers' ffn) with :class:`MoESpec` (routed and shared experts, which layers
are sparse, the multi-token-prediction layers) and, for DeepSeek-style models, :class:`MLA`.
All frozen; the frontend ``frontends/moe_config.py`` builds them from a config.json, and
``evaluation/llm/moe.py`` prices them.  :data:`MOE_STACK` holds the few software figures the MoE
cost model uses, each with its source, the same for every model (as ``TRAINING_STACK`` does).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dnnplace.models.llm.moe_knobs import DISPATCHERS, RECOMPUTE_MODULES
from dnnplace.models.llm.spec import TransformerArch

__all__ = ["DISPATCHERS", "MLA", "MOE_STACK", "RECOMPUTE_MODULES", "MoEModel", "MoESpec", "MoEStack"]


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


@dataclass(frozen=True)
class MoEStack:
    """Figures of the MoE software path, each with its source; the same for every model."""

    router_bytes_per_score: float = 4.0  # the router's logits and probabilities are fp32
    permute_passes: float = 2.0  # permute reads and writes each dispatched token once
    sources: dict[str, str] = field(default_factory=lambda: {
        "router_bytes_per_score": "Megatron-Core moe_router_dtype='fp32' in the DeepSeek-V3 / Qwen3 recipes "
                                  "(router logits, scores and top-k probabilities in fp32)",
        "permute_passes": "Megatron-Core moe_permute_fusion (TE fused permute/unpermute): one read and one "
                          "write of each token copy; the unpermute of the combine likewise",
        "load_balance": "Megatron-Bridge performance recipes set moe_router_force_load_balancing=True "
                        "(router logits replaced by random ones: every token picks top-k experts "
                        "uniformly), so the slowest rank's excess is the fluctuation of a uniform "
                        "multinomial: the expected maximum of n loads of mean mu, standard deviation "
                        "sqrt(mu), ~ mu + sqrt(2 ln n) sqrt(mu) (Gaussian extreme value; no fitted constant)",
    }, compare=False)


#: The MoE software stack every MoE plan is priced for.
MOE_STACK = MoEStack()


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


def moe_from_doc(doc: object, arch: TransformerArch, where: str) -> MoEModel:
    """Read a plan file's ``moe`` object back (one-line error naming the key)."""
    from dnnplace.errors import InputError

    keys = tuple(moe_doc(MoEModel(arch, MoESpec(2, 1, 1, (True,)))))
    if not isinstance(doc, dict) or set(doc) != set(keys):
        missing = sorted(set(keys) - set(doc)) if isinstance(doc, dict) else ["(an object)"]
        extra = sorted(set(doc) - set(keys)) if isinstance(doc, dict) else []
        raise InputError(f"{where}: moe: {'missing ' + missing[0] if missing else 'unknown key ' + extra[0]}")

    def whole(v: object, key: str, low: int = 0) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= 1 << 24:
            raise InputError(f"{where}: moe.{key} must be a whole number >= {low}, got {v!r}"[:200])
        return v

    def flag(v: object, key: str) -> bool:
        if not isinstance(v, bool):
            raise InputError(f"{where}: moe.{key} must be true or false")
        return v

    layers = doc["moe_layers"]
    if not (isinstance(layers, list) and len(layers) == arch.num_layers and all(v in (0, 1) for v in layers)
            and not any(isinstance(v, bool) for v in layers) and any(layers)):
        raise InputError(f"{where}: moe.moe_layers must list 0 or 1 for each of the {arch.num_layers} layers, "
                         "with at least one 1")
    if doc["router"] not in ("softmax", "sigmoid"):
        raise InputError(f"{where}: moe.router must be softmax or sigmoid")
    spec = MoESpec(num_experts=whole(doc["num_experts"], "num_experts", 2), top_k=whole(doc["top_k"], "top_k", 1),
                   expert_ffn=whole(doc["expert_ffn"], "expert_ffn", 1), moe_layers=tuple(bool(v) for v in layers),
                   shared_experts=whole(doc["shared_experts"], "shared_experts"),
                   shared_ffn=whole(doc["shared_ffn"], "shared_ffn"), mtp_layers=whole(doc["mtp_layers"], "mtp_layers"),
                   router=str(doc["router"]), expert_groups=whole(doc["expert_groups"], "expert_groups"),
                   topk_groups=whole(doc["topk_groups"], "topk_groups"),
                   expert_bias=flag(doc["expert_bias"], "expert_bias"))
    if spec.top_k > spec.num_experts:
        raise InputError(f"{where}: moe.top_k {spec.top_k} exceeds the {spec.num_experts} experts")
    mla = None
    if doc["mla"] is not None:
        d = doc["mla"]
        names = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        if not isinstance(d, dict) or set(d) != set(names):
            raise InputError(f"{where}: moe.mla must be null or an object of {', '.join(names)}")
        mla = MLA(*(whole(d[k], f"mla.{k}", 0 if k == "q_lora_rank" else 1) for k in names))
    return MoEModel(arch, spec, mla, attention_sinks=flag(doc["attention_sinks"], "attention_sinks"),
                    attention_chunk=whole(doc["attention_chunk"], "attention_chunk"),
                    chunk_global_every=whole(doc["chunk_global_every"], "chunk_global_every"))
