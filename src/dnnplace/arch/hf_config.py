"""Read a Hugging Face ``config.json`` (or a ``file.py:fn`` factory) into a :class:`TransformerArch`.

The project's safe JSON reader (size cap, UTF-8, depth) plus our own validation: every
failure is one line naming the field and the file; counts are whole numbers inside
``LLM_LIMITS``, so no later product overflows.  Field names differ by family (GPT-2: n_embd / n_layer /
n_head / n_inner; the rest: hidden_size / num_hidden_layers / ...); family
defaults fill what a family fixes (GPT-2: GELU, learned positions, LayerNorm,
tied embeddings, ffn 4h; Nemotron: squared ReLU, LayerNorm).
"""

from __future__ import annotations

import importlib.util
import stat
from pathlib import Path
from typing import Any

from dnnplace.arch.dense import TransformerArch
from dnnplace.core.limits import check_llm_count
from dnnplace.errors import DnnplaceError
from dnnplace.utils.files import read_json_file
from dnnplace.utils.text import clip, show_value

__all__ = ["FAMILIES", "GATED_DELTA_FIELDS", "MAMBA_FIELDS", "TYPE_ALIASES", "arch_from_dict", "hybrid_mixer_refusal",
           "load_arch"]

#: model_type -> (mlp, position, norm, tied default, field aliases)
_STD = {"hidden": "hidden_size", "layers": "num_hidden_layers", "heads": "num_attention_heads",
        "ffn": "intermediate_size", "kv": "num_key_value_heads", "pos": "max_position_embeddings"}
_GPT2 = {"hidden": "n_embd", "layers": "n_layer", "heads": "n_head", "ffn": "n_inner", "kv": "",
         "pos": "n_positions"}
FAMILIES: dict[str, tuple[str, str, str, bool, dict[str, str]]] = {
    "llama": ("swiglu", "rope", "rms", False, _STD),
    "mistral": ("swiglu", "rope", "rms", False, _STD),
    "qwen2": ("swiglu", "rope", "rms", False, _STD),
    "qwen3": ("swiglu", "rope", "rms", False, _STD),
    "gemma": ("geglu", "rope", "rms", True, _STD),
    "gemma2": ("geglu", "rope", "rms", True, _STD),
    # Gemma 3's language model (transformers Gemma3TextConfig; the 1B checkpoint's own model_type): QK norm, five
    # sliding-window layers to one global
    "gemma3_text": ("geglu", "rope", "rms", True, _STD),
    # Phi-3 / Phi-4 (transformers Phi3Config): gated SiLU with gate and up fused, RoPE, RMSNorm
    "phi3": ("swiglu", "rope", "rms", False, _STD),
    "nemotron": ("relu2", "rope", "layer", False, _STD),
    "gpt_neox": ("gelu", "rope", "layer", False, _STD),
    "gpt2": ("gelu", "learned", "layer", True, _GPT2),
}
#: model_types that are one of :data:`FAMILIES` under another name: Qwen3-VL's language model (transformers
#: ``Qwen3VLTextConfig``: Qwen3's decoder -- QK norm, SwiGLU, GQA -- with multimodal RoPE sections, which change
#: no cost of a text token).
TYPE_ALIASES = {"qwen3_vl_text": "qwen3"}
_ACTS = {"silu": "swiglu", "swish": "swiglu", "gelu": "gelu", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu",
         "relu2": "relu2", "squared-relu": "relu2"}


#: Our field name -> the LLM_LIMITS entry its count is checked against.
_LIMIT = {"hidden": "hidden", "layers": "num_layers", "heads": "heads", "ffn": "ffn_hidden", "kv": "kv_heads",
          "pos": "max_position", "vocab": "vocab", "head_dim": "head_dim", "window": "max_position"}


def _int(cfg: dict[str, Any], key: str, where: str, default: int | None = None, *, limit: str) -> int:
    """A whole-number field inside :data:`LLM_LIMITS` (floats, strings, 1e200 and 2**70 refused, naming ``key``)."""
    v = cfg.get(key) if key else None
    if v is None:
        if default is not None:
            return default
        raise DnnplaceError(f"{where}: missing required field '{key}'")
    return check_llm_count(_LIMIT[limit], v, where, f"field '{key}'")


#: Config fields that count experts, and model types that are mixtures of experts (refused in one line).
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3", "jamba", "dbrx", "granitemoe")


#: Fields only hybrid linear-attention (gated delta-net: Qwen3-Next) or state-space (Mamba: Jamba) models carry.
GATED_DELTA_FIELDS = ("linear_num_value_heads", "linear_num_key_heads", "linear_key_head_dim",
                      "linear_value_head_dim", "linear_conv_kernel_dim", "full_attention_interval")
MAMBA_FIELDS = ("mamba_d_state", "layers_block_type", "attn_layer_period")


def hybrid_mixer_refusal(cfg: dict[str, Any], where: str) -> DnnplaceError | None:
    """The one-line refusal of a hybrid model whose token mixer is not attention, or None.

    Said before anything else (experts included), because it is the part of the cost model that is missing:
    Qwen3-Next's gated delta-net (transformers' ``Qwen3NextGatedDeltaNet``: a causal conv and a chunked
    delta-rule recurrence over a per-head state) has no FLOP count, no kernel rate and no state-memory term
    here, so its layers cannot be priced, whatever the expert knobs."""
    gdn = next((k for k in GATED_DELTA_FIELDS if cfg.get(k) is not None), None)
    mamba = next((k for k in MAMBA_FIELDS if cfg.get(k) is not None), None)
    if gdn is None and mamba is None:
        return None
    mt = clip(str(cfg.get("model_type")), 40)
    layers = cfg.get("num_hidden_layers")
    every = cfg.get("full_attention_interval")
    share = ""
    if isinstance(layers, int) and isinstance(every, int) and not isinstance(every, bool) and every >= 1:
        share = f" on {layers - layers // every} of {layers} layers"
    if gdn is not None:
        return DnnplaceError(f"{where}: {mt} is a hybrid linear-attention model (gated delta-net{share}, field "
                             f"'{gdn}'): not planned, the cost model has no gated delta-net term (its FLOPs, "
                             "recurrent-state memory and kernel rates)")
    return DnnplaceError(f"{where}: {mt} is a hybrid state-space model (Mamba layers, field '{mamba}'): not "
                         "planned, the cost model has no Mamba term (its FLOPs, state memory and kernel rates)")


def _vision_language_refusal(cfg: dict[str, Any], mt: str, where: str) -> DnnplaceError:
    """A vision-language config is refused (its vision encoder's weights, encoder cache and image tokens are not
    priced); planning the language model alone is advised only where its ``text_config`` is a family read, so the
    advice never leads to a second refusal."""
    from dnnplace.arch.moe_config import MOE_MODEL_TYPES

    text = cfg["text_config"].get("model_type")
    head = (f"{where}: {clip(mt, 40)} is a vision-language model: its vision encoder (weights, encoder cache, image "
            "tokens) is not in the cost model; ")
    if isinstance(text, str) and (text in FAMILIES or text in TYPE_ALIASES or text in MOE_MODEL_TYPES):
        return DnnplaceError(head + f"to plan its language model alone ({clip(text, 40)}), give its text_config as "
                             "the config.json")
    return DnnplaceError(head + f"its language model ({clip(str(text), 40)}) is not a family planned either")


def arch_from_dict(cfg: Any, where: str, name: str | None = None) -> TransformerArch:
    """Validate a config dict (``where`` names the file in errors)."""
    if not isinstance(cfg, dict):
        raise DnnplaceError(f"{where}: a config must be a JSON object")
    hybrid = hybrid_mixer_refusal(cfg, where)
    if hybrid is not None:
        raise hybrid
    mt = cfg.get("model_type")
    if isinstance(cfg.get("vision_config"), dict) and isinstance(cfg.get("text_config"), dict):
        raise _vision_language_refusal(cfg, str(mt), where)
    mt = TYPE_ALIASES.get(mt, mt) if isinstance(mt, str) else mt
    experts = next((cfg[k] for k in MOE_KEYS if isinstance(cfg.get(k), int) and cfg[k] > 1), None)
    if experts is not None or (isinstance(mt, str) and "moe" in mt.lower()) or mt in MOE_TYPES:
        from dnnplace.arch.moe_config import MOE_MODEL_TYPES

        raise DnnplaceError(f"{where}: mixture-of-experts model ({clip(str(mt), 40)}, {experts or 'several'} experts)"
                            " of a family not planned; mixture-of-experts families: "
                            f"{', '.join(MOE_MODEL_TYPES)}")
    if not isinstance(mt, str) or mt not in FAMILIES:
        shown = "missing" if mt is None else show_value(mt)
        from dnnplace.arch.moe_config import MOE_MODEL_TYPES  # every family the planner reads, not the dense ones alone

        raise DnnplaceError(f"{where}: unknown or missing model_type ({shown}); supported: {', '.join(FAMILIES)};"
                            f" mixture of experts: {', '.join(MOE_MODEL_TYPES)}")
    mlp, position, norm, tied, f = FAMILIES[mt]
    hidden = _int(cfg, f["hidden"], where, limit="hidden")
    layers = _int(cfg, f["layers"], where, limit="layers")
    heads = _int(cfg, f["heads"], where, limit="heads")
    ffn = _int(cfg, f["ffn"], where, 4 * hidden if mt == "gpt2" else None, limit="ffn")
    kv = _int(cfg, f["kv"], where, heads, limit="kv")
    vocab = _int(cfg, "vocab_size", where, limit="vocab")
    head_dim = _int(cfg, "head_dim", where, max(hidden // heads, 1), limit="head_dim")
    if cfg.get("head_dim") is None and hidden % heads:
        raise DnnplaceError(f"{where}: field '{f['heads']}' = {heads} does not divide hidden size {hidden}")
    if heads % kv:
        raise DnnplaceError(f"{where}: field '{f['kv'] or f['heads']}' = {kv} does not divide {heads} heads")
    # The MLP's kind (gated or not, squared ReLU) follows the family: Gemma's gelu is GeGLU, still gated
    # (3 matrices, same cost as SwiGLU); hidden_act only matters where the family fixes nothing.
    act = cfg.get("hidden_act") or cfg.get("activation_function")
    if isinstance(act, str) and _ACTS.get(act) == "relu2":
        mlp = "relu2"
    drop = any(isinstance(cfg.get(k), (int, float)) and not isinstance(cfg.get(k), bool) and cfg[k] > 0
               for k in ("attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop", "embd_pdrop"))
    tie = cfg.get("tie_word_embeddings", tied)
    if not isinstance(tie, bool):
        raise DnnplaceError(f"{where}: field 'tie_word_embeddings' must be true or false")
    if cfg.get("num_local_experts") or cfg.get("num_experts"):
        raise DnnplaceError(f"{where}: mixture-of-experts configs are not modelled")
    archs = cfg.get("architectures")
    window, every = _window(cfg, mt, layers, where)
    return TransformerArch(
        name=name or Path(where).stem, family=mt, num_layers=layers, hidden=hidden, ffn_hidden=ffn, heads=heads,
        kv_heads=kv, head_dim=head_dim, vocab=vocab, tied_embeddings=tie, mlp=mlp, position=position, norm=norm,
        max_position=_int(cfg, f["pos"], where, 4096, limit="pos"), dropout=drop,
        architecture=archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else "",
        source=where, rope_theta=_rope_theta(cfg, where), qkv_bias=_flag(cfg, "attention_bias", mt == "qwen2", where),
        linear_bias=mt in ("gpt2", "gpt_neox") or _flag(cfg, "mlp_bias", False, where),
        qk_norm=mt in ("qwen3", "gemma3_text"),
        sliding_window=window, global_every=every, rotary_fraction=_rotary_fraction(cfg, mt, where),
        parallel_residual=mt == "gpt_neox" and _flag(cfg, "use_parallel_residual", True, where))


def _rotary_fraction(cfg: dict[str, Any], mt: str, where: str) -> float:
    """The share of each head's channels RoPE rotates: transformers' GPTNeoXConfig ``rotary_pct`` (default 0.25),
    the ``partial_rotary_factor`` other configs carry (Phi-3 / Phi-4, default 1.0).  It changes no FLOP or byte
    priced, but a trainer told otherwise builds another model (Megatron's ``--rotary-percent``)."""
    key = "rotary_pct" if mt == "gpt_neox" else "partial_rotary_factor"
    v = cfg.get(key)
    if v is None:
        return 0.25 if mt == "gpt_neox" else 1.0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise DnnplaceError(f"{where}: field '{key}' must be a number in (0, 1], got {show_value(v)}")
    return float(v)


def _flag(cfg: dict[str, Any], key: str, default: bool, where: str) -> bool:
    v = cfg.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise DnnplaceError(f"{where}: field '{key}' must be true or false")
    return v


def _rope_theta(cfg: dict[str, Any], where: str) -> float:
    import math

    v = cfg.get("rope_theta", 10_000.0)
    if v is None:
        return 10_000.0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and 0 < v <= 1e12):
        raise DnnplaceError(f"{where}: field 'rope_theta' must be a positive number up to 1e12, got {show_value(v)}")
    return float(v)


def _window(cfg: dict[str, Any], mt: str, layers: int, where: str) -> tuple[int, int]:
    """(sliding window, every n-th layer global) from the family's rule or the config's ``layer_types``."""
    window = cfg.get("sliding_window")
    if window is None or window is False or (mt == "qwen2" and not cfg.get("use_sliding_window")):
        return 0, 0
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        raise DnnplaceError(f"{where}: field 'sliding_window' must be a positive integer or null, got "
                            f"{show_value(window)}")
    window = _int(cfg, "sliding_window", where, limit="window")
    types = cfg.get("layer_types")
    if types is not None:
        if not (isinstance(types, list) and len(types) == layers and all(isinstance(t, str) for t in types)):
            raise DnnplaceError(f"{where}: field 'layer_types' must list one string per layer")
        glob = [i for i, t in enumerate(types) if t != "sliding_attention"]
        if not glob:
            return window, 0
        every = glob[0] + 1
        if glob != list(range(every - 1, layers, every)):
            raise DnnplaceError(f"{where}: field 'layer_types': this pattern of global and sliding layers is "
                                "not modelled (every n-th layer global, or all sliding)")
        return window, every
    if mt == "gemma3_text":
        # transformers Gemma3TextConfig without layer_types: layer i is global when (i + 1) % pattern == 0
        return window, _int(cfg, "sliding_window_pattern", where, 6, limit="layers")
    return window, 2 if mt == "gemma2" else 0


def load_arch(spec: str | Path) -> TransformerArch:
    """A config.json path, a directory holding one, or ``file.py:fn`` returning a config object or dict."""
    text = str(spec)
    if ":" in text and text.rpartition(":")[0].endswith(".py"):
        path, _, fn = text.rpartition(":")
        return arch_from_dict(_call_factory(Path(path), fn), text)
    data, where = _read_config(Path(text))
    return arch_from_dict(data, str(where))


def _read_config(p: Path) -> tuple[Any, Path]:
    """The JSON of a config.json (or of the one in a folder) through the project's safe reader; a FIFO, a
    device or a socket is refused before it is opened (opening one blocks or never ends)."""
    for _ in range(2):
        try:
            mode = p.stat().st_mode
        except FileNotFoundError:
            raise DnnplaceError(f"{clip(p, 200)}: cannot read (no such file)") from None
        except (OSError, ValueError) as exc:
            raise DnnplaceError(f"{clip(p, 200)}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
        if stat.S_ISDIR(mode):
            p = p / "config.json"
            continue
        if not stat.S_ISREG(mode):
            raise DnnplaceError(f"{clip(p, 200)}: not a regular file (a FIFO, device or socket); give a config.json")
        return read_json_file(p), p
    raise DnnplaceError(f"{clip(p, 200)}: is a directory, not a config.json")


def _call_factory(path: Path, fn: str) -> Any:
    """Import ``path`` and call ``fn`` behind the user-code guard: its errors, exits and prints are one line."""
    from dnnplace.utils.guard import user_code

    name = clip(f"{path}:{fn}", 120)  # named once per message, which stays one short line
    try:
        spec = importlib.util.spec_from_file_location(path.stem, path) if path.is_file() else None
    except (OSError, ValueError):
        spec = None
    if spec is None or spec.loader is None:
        raise DnnplaceError(f"'{name}': cannot import the file (no such file)")
    mod = importlib.util.module_from_spec(spec)
    with user_code(f"'{name}': importing the file"):
        spec.loader.exec_module(mod)
    if not callable(getattr(mod, fn, None)):
        raise DnnplaceError(f"'{name}': the file has no function '{clip(fn, 60)}'")
    with user_code(f"'{name}': the factory"):
        cfg = getattr(mod, fn)()
        return cfg.to_dict() if hasattr(cfg, "to_dict") else cfg
