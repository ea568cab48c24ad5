"""Read a mixture-of-experts ``config.json`` into an :class:`~dnnplace.models.llm.moe.MoEModel`, full size, no weights.

Families: ``mixtral``; ``qwen2_moe`` and ``qwen3_moe`` (shared expert, ``moe_intermediate_size``,
``decoder_sparse_step``, ``mlp_only_layers``); ``deepseek_v3`` (multi-latent attention,
``first_k_dense_replace``, ``moe_layer_freq``, group-limited routing, the MTP layers
``num_nextn_predict_layers``); ``llama4`` (the text model under ``text_config``,
``interleave_moe_layer_step``, one shared expert, chunked attention); ``gpt_oss`` (alternating
sliding-window and full attention, attention sinks).  Where each family keeps its fields follows
the Hugging Face ``transformers`` configuration classes of the same names.  Every failure is one
line naming the file and the field; a variant the cost model cannot price (linear-attention
hybrids, for one) is refused, not approximated.
"""

from __future__ import annotations

import math
import stat
from pathlib import Path
from typing import Any

from dnnplace.arch.dense import TransformerArch
from dnnplace.arch.moe import MLA, MoEModel, MoESpec
from dnnplace.errors import DnnplaceError
from dnnplace.utils.files import read_json_file
from dnnplace.utils.text import show_value

__all__ = ["MOE_FAMILIES", "MOE_MODEL_TYPES", "MOE_TYPE_ALIASES", "is_moe_config", "load_moe", "moe_from_dict"]

MOE_FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "llama4", "gpt_oss", "glm4_moe", "minimax_m2")
#: model_types that are one of :data:`MOE_FAMILIES` under another name: Llama 4's text model on its own, and
#: Moonshot's Kimi K2, whose config.json names ``DeepseekV3ForCausalLM`` as its architecture (vLLM and SGLang
#: serve it with their DeepSeek-V3 model classes; huggingface.co/moonshotai/Kimi-K2-Instruct config.json), and
#: Qwen3-VL-MoE's language model (transformers ``Qwen3VLMoeTextConfig``: Qwen3-MoE's decoder with multimodal RoPE).
MOE_TYPE_ALIASES = {"llama4_text": "llama4", "kimi_k2": "deepseek_v3", "qwen3_vl_moe_text": "qwen3_moe"}
#: Every model_type the MoE reader takes.
MOE_MODEL_TYPES = (*MOE_FAMILIES, *MOE_TYPE_ALIASES)

#: Fields that only hybrid linear-attention / state-space variants carry: their token mixer is not
#: attention, and the cost model has no term for it.
_LINEAR_ATTENTION_FIELDS = ("linear_num_value_heads", "linear_num_key_heads", "linear_key_head_dim",
                            "full_attention_interval", "linear_conv_kernel_dim", "attn_layer_period",
                            "mamba_d_state", "layers_block_type")


#: Token mixers the cost model prices (``layer_types`` entries of transformers' configs).
_ATTENTION_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


class _Fields:
    """Typed access to one config object; every error names the file and the field."""

    def __init__(self, cfg: dict[str, Any], where: str, prefix: str = "") -> None:
        self.cfg, self.where, self.prefix = cfg, where, prefix

    def fail(self, key: str, what: str) -> DnnplaceError:
        return DnnplaceError(f"{self.where}: field '{self.prefix}{key}' {what}")

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def integer(self, key: str, default: int | None = None, *, minimum: int = 1) -> int:
        v = self.cfg.get(key)
        if v is None:
            if default is not None:
                return default
            raise DnnplaceError(f"{self.where}: missing required field '{self.prefix}{key}'")
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise self.fail(key, f"must be {kind}, got {show_value(v)}")
        return v

    def flag(self, key: str, default: bool) -> bool:
        v = self.cfg.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.fail(key, f"must be true or false, got {show_value(v)}")
        return v

    def number(self, key: str, default: float) -> float:
        v = self.cfg.get(key, default)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and 0 < v <= 1e12):
            raise self.fail(key, f"must be a positive number up to 1e12, got {show_value(v)}")
        return float(v)

    def int_list(self, key: str, layers: int) -> list[int]:
        v = self.cfg.get(key)
        if v is None:
            return []
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            raise self.fail(key, "must be a list of layer indices")
        bad = [x for x in v if not 0 <= x < layers]
        if bad:
            raise self.fail(key, f"has layer index {bad[0]} outside 0..{layers - 1}")
        return v


def _refuse_linear_attention(f: _Fields) -> None:
    for key in _LINEAR_ATTENTION_FIELDS:
        if f.has(key):
            raise f.fail(key, "belongs to a hybrid linear-attention / state-space model: its token mixer "
                              "is not attention and is not in the cost model")
    types = f.cfg.get("layer_types")
    if isinstance(types, list) and any(t not in _ATTENTION_TYPES for t in types):
        odd = next(t for t in types if t not in _ATTENTION_TYPES)
        raise f.fail("layer_types", f"has layer type {show_value(odd)}: only full, sliding-window and chunked "
                                    "attention are priced (no linear-attention hybrids)")


def _experts(f: _Fields, experts_key: str, topk_key: str) -> tuple[int, int]:
    experts = f.integer(experts_key)
    if experts < 2:
        raise f.fail(experts_key, f"= {experts}: a mixture of experts needs at least 2 routed experts")
    top_k = f.integer(topk_key)
    if top_k > experts:
        raise f.fail(topk_key, f"= {top_k} exceeds the {experts} routed experts")
    return experts, top_k


def _heads(f: _Fields, hidden: int) -> tuple[int, int, int]:
    heads = f.integer("num_attention_heads")
    kv = f.integer("num_key_value_heads", heads)
    if heads % kv:
        raise f.fail("num_key_value_heads", f"= {kv} does not divide {heads} heads")
    if f.has("head_dim"):
        head_dim = f.integer("head_dim")
    else:
        if hidden % heads:
            raise f.fail("num_attention_heads", f"= {heads} does not divide hidden size {hidden}")
        head_dim = hidden // heads
    return heads, kv, head_dim


def _name(cfg: dict[str, Any]) -> str:
    archs = cfg.get("architectures")
    return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""


def _rotary_fraction(f: _Fields, head_dim: int, default: float = 1.0) -> float:
    """The share of a head's channels RoPE rotates: ``partial_rotary_factor``, or MiniMax-M2's legacy
    ``rotary_dim`` over ``head_dim`` (transformers MiniMaxM2Config reads it so); ``default`` (the family's
    config class default) when neither is given."""
    if f.has("partial_rotary_factor"):
        v = f.number("partial_rotary_factor", default)
        if not 0 < v <= 1:
            raise f.fail("partial_rotary_factor", f"= {v} must be in (0, 1]")
        return v
    if f.has("rotary_dim"):
        dim = f.integer("rotary_dim")
        if dim > head_dim:
            raise f.fail("rotary_dim", f"= {dim} exceeds the head dimension {head_dim}")
        return dim / head_dim
    return default


def _arch(f: _Fields, family: str, name: str, *, ffn: int, top: dict[str, Any], moe: MoESpec,
          heads: tuple[int, int, int], hidden: int, layers: int, rotary_default: float = 1.0,
          **extra: Any) -> TransformerArch:
    tie = f.flag("tie_word_embeddings", False)
    drop = any(isinstance(f.cfg.get(k), (int, float)) and not isinstance(f.cfg.get(k), bool) and f.cfg[k] > 0
               for k in ("attention_dropout", "hidden_dropout"))
    return TransformerArch(
        name=name, family=family, num_layers=layers, hidden=hidden, ffn_hidden=ffn, heads=heads[0],
        kv_heads=heads[1], head_dim=heads[2], vocab=f.integer("vocab_size"), tied_embeddings=tie, mlp="swiglu",
        position="rope", norm="rms", max_position=f.integer("max_position_embeddings", 4096), dropout=drop,
        architecture=_name(top), source=f.where, num_experts=moe.num_experts, top_k=moe.top_k,
        expert_ffn=moe.expert_ffn, shared_experts=moe.shared_experts, rope_theta=f.number("rope_theta", 10_000.0),
        rotary_fraction=_rotary_fraction(f, heads[2], rotary_default), **extra)


def _global_every(f: _Fields, layers: int) -> int | None:
    """Every n-th layer attends to the whole sequence, from ``layer_types`` (0: none does; None: no list)."""
    types = f.cfg.get("layer_types")
    if types is None:
        return None
    if not (isinstance(types, list) and len(types) == layers and all(isinstance(t, str) for t in types)):
        raise f.fail("layer_types", f"must list one string per layer ({layers})")
    glob = [i for i, t in enumerate(types) if t == "full_attention"]
    if not glob:
        return 0
    every = glob[0] + 1
    if glob != list(range(every - 1, layers, every)):
        raise f.fail("layer_types", "this pattern of full and windowed layers is not modelled (every n-th "
                                    "layer full, or none)")
    return every


def _window(f: _Fields, layers: int) -> tuple[int, int]:
    """(sliding window, every n-th layer global) from ``sliding_window`` and ``layer_types``."""
    if f.cfg.get("sliding_window") is None:
        return 0, 0
    window = f.integer("sliding_window")
    every = _global_every(f, layers)
    return window, every or 0


def _mixtral(f: _Fields, top: dict[str, Any], name: str) -> MoEModel:
    hidden, layers = f.integer("hidden_size"), f.integer("num_hidden_layers")
    experts, top_k = _experts(f, "num_local_experts", "num_experts_per_tok")
    ffn = f.integer("intermediate_size")
    moe = MoESpec(num_experts=experts, top_k=top_k, expert_ffn=ffn, moe_layers=(True,) * layers)
    window, every = _window(f, layers)
    return MoEModel(_arch(f, "mixtral", name, ffn=ffn, top=top, moe=moe, heads=_heads(f, hidden), hidden=hidden,
                          layers=layers, sliding_window=window, global_every=every), moe)


def _qwen_moe(f: _Fields, top: dict[str, Any], name: str, family: str) -> MoEModel:
    hidden, layers = f.integer("hidden_size"), f.integer("num_hidden_layers")
    experts, top_k = _experts(f, "num_experts", "num_experts_per_tok")
    expert_ffn = f.integer("moe_intermediate_size")
    step = f.integer("decoder_sparse_step", 1)
    dense_only = set(f.int_list("mlp_only_layers", layers))
    # transformers' Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer: sparse when not listed and (i + 1) % step == 0.
    pattern = tuple(i not in dense_only and (i + 1) % step == 0 for i in range(layers))
    if not any(pattern):
        raise f.fail("mlp_only_layers", "leaves no layer with experts (with decoder_sparse_step "
                                        f"{step}): plan it as a dense model")
    dense_ffn = f.integer("intermediate_size", expert_ffn if all(pattern) else None)
    shared_ffn = f.integer("shared_expert_intermediate_size", 0, minimum=0)
    if family == "qwen3_moe" and shared_ffn:
        raise f.fail("shared_expert_intermediate_size", "is not a Qwen3-MoE field (Qwen3-MoE has no shared "
                                                        "expert); is the model_type right?")
    moe = MoESpec(num_experts=experts, top_k=top_k, expert_ffn=expert_ffn, moe_layers=pattern,
                  shared_experts=1 if shared_ffn else 0, shared_ffn=shared_ffn)
    window = 0
    if f.flag("use_sliding_window", False) and f.has("sliding_window"):
        raise f.fail("use_sliding_window", "with max_window_layers (sliding window on some layers only) is not "
                                           "modelled for Qwen MoE configs")
    return MoEModel(_arch(f, family, name, ffn=dense_ffn, top=top, moe=moe, heads=_heads(f, hidden),
                          hidden=hidden, layers=layers, sliding_window=window,
                          qkv_bias=f.flag("attention_bias", family == "qwen2_moe"), qk_norm=family == "qwen3_moe"),
                    moe)


def _deepseek_v3(f: _Fields, top: dict[str, Any], name: str) -> MoEModel:
    hidden, layers = f.integer("hidden_size"), f.integer("num_hidden_layers")
    experts, top_k = _experts(f, "n_routed_experts", "num_experts_per_tok")
    expert_ffn = f.integer("moe_intermediate_size")
    first_dense = f.integer("first_k_dense_replace", 0, minimum=0)
    freq = f.integer("moe_layer_freq", 1)
    if first_dense >= layers:
        raise f.fail("first_k_dense_replace", f"= {first_dense} leaves none of the {layers} layers with experts")
    # transformers' DeepseekV3DecoderLayer: sparse from layer first_k_dense_replace on, every moe_layer_freq-th.
    pattern = tuple(i >= first_dense and i % freq == 0 for i in range(layers))
    if not any(pattern):
        raise f.fail("moe_layer_freq", f"= {freq} leaves no layer with experts")
    shared = f.integer("n_shared_experts", 0, minimum=0)
    groups, topk_groups = _grouped_router(f, experts, top_k)
    scoring = _scoring(f, "softmax")
    mla = MLA(q_lora_rank=f.integer("q_lora_rank", 0, minimum=0), kv_lora_rank=f.integer("kv_lora_rank"),
              qk_nope_head_dim=f.integer("qk_nope_head_dim"), qk_rope_head_dim=f.integer("qk_rope_head_dim"),
              v_head_dim=f.integer("v_head_dim"))
    heads = f.integer("num_attention_heads")
    moe = MoESpec(num_experts=experts, top_k=top_k, expert_ffn=expert_ffn, moe_layers=pattern,
                  shared_experts=shared, shared_ffn=shared * expert_ffn,
                  mtp_layers=f.integer("num_nextn_predict_layers", 0, minimum=0), router=scoring,
                  expert_groups=groups if groups > 1 else 0, topk_groups=topk_groups if groups > 1 else 0)
    # MLA: every head has its own keys and values (no grouping); head_dim is the value head dimension.
    arch = _arch(f, "deepseek_v3", name, ffn=f.integer("intermediate_size"), top=top, moe=moe,
                 heads=(heads, heads, mla.v_head_dim), hidden=hidden, layers=layers,
                 qkv_bias=f.flag("attention_bias", False))
    return MoEModel(arch, moe, mla=mla)


def _llama4(f: _Fields, top: dict[str, Any], name: str) -> MoEModel:
    hidden, layers = f.integer("hidden_size"), f.integer("num_hidden_layers")
    experts, top_k = _experts(f, "num_local_experts", "num_experts_per_tok")
    expert_ffn = f.integer("intermediate_size")
    listed = f.cfg.get("moe_layers")
    if listed is not None:
        sparse = set(f.int_list("moe_layers", layers))
    else:
        # transformers' Llama4TextConfig: moe_layers = range(step - 1, layers, step).
        step = f.integer("interleave_moe_layer_step", 1)
        sparse = set(range(step - 1, layers, step))
    pattern = tuple(i in sparse for i in range(layers))
    if not any(pattern):
        key = "moe_layers" if listed is not None else "interleave_moe_layer_step"
        raise f.fail(key, "leaves no layer with experts")
    dense_ffn = f.integer("intermediate_size_mlp", expert_ffn if all(pattern) else None)
    moe = MoESpec(num_experts=experts, top_k=top_k, expert_ffn=expert_ffn, moe_layers=pattern, shared_experts=1,
                  shared_ffn=expert_ffn, router="sigmoid")
    chunk = f.integer("attention_chunk_size", 0, minimum=0)
    # transformers' Llama4TextConfig: every no_rope_layer_interval-th layer (default 4) has no RoPE and
    # attends to the whole sequence; the others attend within their chunk.
    listed_every = _global_every(f, layers)
    every = (listed_every if listed_every is not None else f.integer("no_rope_layer_interval", 4)) if chunk else 0
    arch = _arch(f, "llama4", name, ffn=dense_ffn, top=top, moe=moe, heads=_heads(f, hidden), hidden=hidden,
                 layers=layers, qkv_bias=f.flag("attention_bias", False), qk_norm=f.flag("use_qk_norm", False))
    return MoEModel(arch, moe, attention_chunk=chunk, chunk_global_every=every)


def _gpt_oss(f: _Fields, top: dict[str, Any], name: str) -> MoEModel:
    hidden, layers = f.integer("hidden_size"), f.integer("num_hidden_layers")
    topk_key = "num_experts_per_tok" if f.has("num_experts_per_tok") or not f.has("experts_per_token") \
        else "experts_per_token"
    experts, top_k = _experts(f, "num_local_experts", topk_key)
    ffn = f.integer("intermediate_size")
    moe = MoESpec(num_experts=experts, top_k=top_k, expert_ffn=ffn, moe_layers=(True,) * layers, expert_bias=True)
    window, every = _window(f, layers)
    arch = _arch(f, "gpt_oss", name, ffn=ffn, top=top, moe=moe, heads=_heads(f, hidden), hidden=hidden,
                 layers=layers, qkv_bias=f.flag("attention_bias", True), sliding_window=window, global_every=every)
    return MoEModel(arch, moe, attention_sinks=True)


def _scoring(f: _Fields, default: str) -> str:
    """The router's score function (``scoring_func``): softmax or sigmoid."""
    scoring = f.cfg.get("scoring_func", default)
    if scoring not in ("softmax", "sigmoid"):
        raise f.fail("scoring_func", f"must be softmax or sigmoid, got {show_value(scoring)}")
    return str(scoring)


def _grouped_router(f: _Fields, experts: int, top_k: int) -> tuple[int, int]:
    """(groups, groups kept) of a DeepSeek-style grouped router, each checked against the experts."""
    groups = f.integer("n_group", 1)
    topk_groups = f.integer("topk_group", groups)
    if experts % groups:
        raise f.fail("n_group", f"= {groups} does not divide the {experts} routed experts")
    if topk_groups > groups:
        raise f.fail("topk_group", f"= {topk_groups} exceeds n_group = {groups}")
    if groups > 1 and top_k > topk_groups * (experts // groups):
        raise f.fail("num_experts_per_tok", f"= {top_k} exceeds the experts of topk_group = {topk_groups} groups")
    return groups, topk_groups


def _glm4_moe(f: _Fields, top: dict[str, Any], name: str) -> MoEModel:
    """GLM-4.5 / 4.6 / 4.7 (transformers Glm4MoeConfig): DeepSeek-V3's expert layout -- dense first layers,
    one shared expert, a sigmoid router over groups, MTP layers -- with grouped-query attention (no MLA),
    QK norm where ``use_qk_norm``, and RoPE on half of each head (``partial_rotary_factor`` 0.5 by default)."""
    hidden, layers = f.integer("hidden_size"), f.integer("num_hidden_layers")
    experts, top_k = _experts(f, "n_routed_experts", "num_experts_per_tok")
    expert_ffn = f.integer("moe_intermediate_size")
    first_dense = f.integer("first_k_dense_replace", 1, minimum=0)
    if first_dense >= layers:
        raise f.fail("first_k_dense_replace", f"= {first_dense} leaves none of the {layers} layers with experts")
    pattern = tuple(i >= first_dense for i in range(layers))
    shared = f.integer("n_shared_experts", 1, minimum=0)
    groups, topk_groups = _grouped_router(f, experts, top_k)
    moe = MoESpec(num_experts=experts, top_k=top_k, expert_ffn=expert_ffn, moe_layers=pattern,
                  shared_experts=shared, shared_ffn=shared * expert_ffn,
                  mtp_layers=f.integer("num_nextn_predict_layers", 1, minimum=0), router="sigmoid",
                  expert_groups=groups if groups > 1 else 0, topk_groups=topk_groups if groups > 1 else 0)
    arch = _arch(f, "glm4_moe", name, ffn=f.integer("intermediate_size"), top=top, moe=moe,
                 heads=_heads(f, hidden), hidden=hidden, layers=layers, qkv_bias=f.flag("attention_bias", False),
                 qk_norm=f.flag("use_qk_norm", False), rotary_default=0.5)
    return MoEModel(arch, moe)


def _minimax_m2(f: _Fields, top: dict[str, Any], name: str) -> MoEModel:
    """MiniMax-M2 (transformers MiniMaxM2Config): every layer routed (no dense layer, no shared expert), a
    sigmoid router with a routing bias, QK norm, grouped-query attention, partial RoPE from ``rotary_dim``.
    Its MTP modules (``num_mtp_modules``) serve speculative decoding only and are not priced."""
    hidden, layers = f.integer("hidden_size"), f.integer("num_hidden_layers")
    experts, top_k = _experts(f, "num_local_experts", "num_experts_per_tok")
    ffn = f.integer("intermediate_size")
    shared_ffn = f.integer("shared_intermediate_size", 0, minimum=0)
    if shared_ffn:
        raise f.fail("shared_intermediate_size", f"= {shared_ffn}: a shared expert in MiniMax-M2 is not modelled")
    scoring = _scoring(f, "sigmoid")
    # use_routing_bias is the router's score-correction bias (DeepSeek-V3's e_score_correction_bias), a vector
    # per expert, not biases on the experts' linear layers (MoESpec.expert_bias, gpt-oss)
    moe = MoESpec(num_experts=experts, top_k=top_k, expert_ffn=ffn, moe_layers=(True,) * layers, router=scoring)
    arch = _arch(f, "minimax_m2", name, ffn=ffn, top=top, moe=moe, heads=_heads(f, hidden), hidden=hidden,
                 layers=layers, qkv_bias=f.flag("attention_bias", False), qk_norm=f.flag("use_qk_norm", False))
    return MoEModel(arch, moe)


def moe_from_dict(cfg: Any, where: str, name: str | None = None) -> MoEModel:
    """Validate an MoE config dict (``where`` names the file in errors)."""
    if not isinstance(cfg, dict):
        raise DnnplaceError(f"{where}: a config must be a JSON object")
    mt = cfg.get("model_type")
    top = cfg
    prefix = ""
    if mt == "llama4":
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            raise DnnplaceError(f"{where}: field 'text_config' must be an object (Llama 4 keeps its language "
                                "model there)")
        cfg, prefix, mt = text, "text_config.", "llama4"
    elif isinstance(mt, str) and mt in MOE_TYPE_ALIASES:
        mt = MOE_TYPE_ALIASES[mt]
    if not isinstance(mt, str) or mt not in MOE_FAMILIES:
        shown = "missing" if mt is None else show_value(mt)
        raise DnnplaceError(f"{where}: unknown or missing MoE model_type ({shown}); supported: "
                            f"{', '.join(MOE_MODEL_TYPES)}")
    f = _Fields(cfg, where, prefix)
    _refuse_linear_attention(f)
    label = name or Path(where).stem
    if mt == "mixtral":
        return _mixtral(f, top, label)
    if mt in ("qwen2_moe", "qwen3_moe"):
        return _qwen_moe(f, top, label, mt)
    if mt == "deepseek_v3":
        return _deepseek_v3(f, top, label)
    if mt == "llama4":
        return _llama4(f, top, label)
    if mt == "glm4_moe":
        return _glm4_moe(f, top, label)
    if mt == "minimax_m2":
        return _minimax_m2(f, top, label)
    return _gpt_oss(f, top, label)


def load_moe(spec: str | Path) -> MoEModel:
    """An MoE config.json path, or a directory holding one (read as the dense reader reads it: a FIFO, a
    device or a socket is refused before it is opened)."""
    p = _regular(Path(spec))
    if p is None:
        raise DnnplaceError(f"{spec}: cannot read (not a regular config.json file)")
    return moe_from_dict(read_json_file(p), str(p))


def _regular(p: Path) -> Path | None:
    """``p``, or the config.json in the folder ``p``, when it is a regular file; else None."""
    for _ in range(2):
        try:
            mode = p.stat().st_mode
        except (OSError, ValueError):
            return None
        if stat.S_ISDIR(mode):
            p = p / "config.json"
            continue
        return p if stat.S_ISREG(mode) else None
    return None


def is_moe_config(spec: str | Path) -> bool:
    """Is ``spec`` a config.json (or a folder holding one) of one of :data:`MOE_FAMILIES`?  False for anything
    else, unreadable files included: the dense reader then gives its own one-line refusal."""
    text = str(spec)
    if ":" in text and text.rpartition(":")[0].endswith(".py"):
        return False
    p = _regular(Path(text))
    if p is None or p.stat().st_size > 1 << 24:
        return False
    try:
        data = read_json_file(p)
    except DnnplaceError:
        return False  # the dense reader gives its own one-line refusal
    return isinstance(data, dict) and data.get("model_type") in MOE_MODEL_TYPES
