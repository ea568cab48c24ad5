"""Read a checkpoint's ``quantization_config`` into one small frozen description.

Why: a serving plan's memory is mostly weights, and a quantized checkpoint's bytes per weight are
fixed by its config, not by a flag the user remembers.  The training planner never reads these;
the serving planner does, through this one reader below the planned models.

Formats read (the ``quant_method`` field of ``config.json``'s ``quantization_config``):
``fp8`` (vLLM / Transformers FineGrainedFP8, block or per-tensor scales), ``fbgemm_fp8`` (Meta's FP8
Llama 3.1 checkpoints: per-channel FP8), ``compressed-tensors``
(llm-compressor: FP8 / INT8 / INT4 / NVFP4 schemes in ``config_groups``), ``awq`` and ``gptq``
(INT4 or INT8 weight-only with a group size), ``modelopt`` (NVIDIA ModelOpt FP8 / NVFP4 / W4A16 AWQ: also a
``quantization_config`` naming only ``producer: modelopt``, and the ``hf_quant_config.json`` beside the config,
where ModelOpt exports put it and vLLM reads it), ``mxfp4`` (OCP MX FP4 as GPT-OSS ships its experts).

Every format can also leave modules at 16 bits -- ``modules_to_not_convert`` (fbgemm_fp8, awq, mxfp4,
Transformers' fp8), ``ignored_layers`` (vLLM's fp8), ``ignore`` (compressed-tensors), ``exclude_modules``
(ModelOpt) -- and checkpoints use it for whole parts: Meta's Llama-3.1-405B-FP8 keeps every attention
projection and the first and last layers' MLPs in BF16, NVIDIA's FP4 DeepSeek exports keep attention in
BF16.  Read as all-quantized, such a checkpoint's weights come out a sixth too small and its KV cache too
large (vLLM #6746 logs 57.75 GiB per H100 for 405B FP8 at TP 8; all-FP8 would be 47.7), so the names are
kept (:attr:`Quantization.skip`) and matched as the engines match them (:meth:`Quantization.keeps_16bit`).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

from dnnplace.errors import DnnplaceError

__all__ = ["LAYER_PREFIXES", "QUANT_METHODS", "Quantization", "modelopt_file_quant", "quant_from_dict"]

#: Where Hugging Face checkpoints name decoder layer ``i`` (text models; the language model of a multimodal one).
LAYER_PREFIXES = ("model.layers.{i}.", "model.language_model.layers.{i}.", "language_model.model.layers.{i}.")

QUANT_METHODS = ("fp8", "fbgemm_fp8", "compressed-tensors", "awq", "gptq", "modelopt", "mxfp4")


@dataclass(frozen=True)
class Quantization:
    """How a checkpoint's linear weights are stored.

    ``precision`` is the serving planner's weight precision name (``fp8``, ``fp4``, ``int4``, ``int8``);
    ``bits`` the payload bits per weight, ``group_size`` the weights sharing one scale (0: per channel
    or per tensor), ``scale_bits`` the bits of one scale (and zero point, where the format has one).
    """

    method: str
    precision: str
    bits: int
    group_size: int = 0
    scale_bits: int = 0
    source: str = ""
    skip: tuple[str, ...] = ()  # modules the checkpoint leaves at 16 bits: names, globs or "re:" patterns
    skip_substring: bool = False  # vLLM's AWQ rule: an entry skips every module whose name contains it

    def keeps_16bit(self, module: str) -> bool:
        """Whether ``module`` (a Hugging Face module name, ``model.layers.3.self_attn.q_proj``) stays 16-bit.

        The engines' rules, taken together: an entry equal to the name or to one of its parents
        (vLLM's ``is_layer_skipped``; ``lm_head``, ``model.layers.0.self_attn``); ``re:PATTERN`` matched
        from the name's start (compressed-tensors' ``ignore``); a glob (ModelOpt's ``exclude_modules``,
        GPT-OSS's ``model.layers.*.self_attn``), also as a parent; and, for AWQ, any entry the name
        contains (vLLM's ``is_layer_skipped_awq``)."""
        for pat in self.skip:
            if pat.startswith("re:"):
                try:
                    if re.match(pat[3:], module):
                        return True
                except re.error:
                    continue
            elif any(c in pat for c in "*?["):
                if fnmatch.fnmatchcase(module, pat) or fnmatch.fnmatchcase(module, pat + ".*"):
                    return True
            elif module == pat or module.startswith(pat + ".") or (self.skip_substring and pat in module):
                return True
        return False

    def share_16bit(self, layer: int, modules: list[tuple[tuple[str, ...], float]]) -> float:
        """The share of a part's weights decoder layer ``layer`` keeps at 16 bits: ``modules`` are the part's
        modules as (their names under the layer in the families' spellings, weights); a module is 16-bit
        when any spelling under any of :data:`LAYER_PREFIXES` is (:meth:`keeps_16bit`)."""
        if not self.skip:
            return 0.0
        total = sum(w for _, w in modules)
        kept = sum(w for names, w in modules
                   if any(self.keeps_16bit(pre.format(i=layer) + name) for pre in LAYER_PREFIXES for name in names))
        return kept / total if total > 0 else 0.0

    @property
    def bytes_per_weight(self) -> float:
        """Payload plus the scales spread over their group (per-channel scales: negligible, 0)."""
        per = self.scale_bits / self.group_size if self.group_size else 0.0
        return (self.bits + per) / 8.0


def _int(q: dict[str, Any], key: str, default: int, where: str) -> int:
    v = q.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < -1 or v > 1 << 20:
        raise DnnplaceError(f"{where}: quantization_config field '{key}' must be a whole number, got {v!r}")
    return v


def _skip_list(q: dict[str, Any], where: str, *keys: str) -> tuple[str, ...]:
    """The module names of the first of ``keys`` the config gives (a list of strings), else none."""
    for key in keys:
        v = q.get(key)
        if v is None:
            continue
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise DnnplaceError(f"{where}: quantization_config field '{key}' must be a list of module names")
        return tuple(v)
    return ()


def _compressed(q: dict[str, Any], where: str) -> Quantization:
    groups = q.get("config_groups") or {}
    if not isinstance(groups, dict) or not groups:
        raise DnnplaceError(f"{where}: compressed-tensors quantization_config has no config_groups")
    first = next(iter(groups.values()))
    w = first.get("weights") if isinstance(first, dict) else None
    if not isinstance(w, dict):
        raise DnnplaceError(f"{where}: compressed-tensors config group has no 'weights' scheme")
    bits = _int(w, "num_bits", 8, where)
    kind = w.get("type", "int")
    group = _int(w, "group_size", 0, where)
    group = 0 if group < 0 else group
    skip = _skip_list(q, where, "ignore")
    if kind == "float" and bits == 4:  # NVFP4: FP8 scale per 16 weights (llm-compressor's NVFP4 preset)
        return Quantization("compressed-tensors", "fp4", 4, group or 16, 8, where, skip)
    if kind == "float":
        return Quantization("compressed-tensors", "fp8", 8, group, 32 if group else 0, where, skip)
    return Quantization("compressed-tensors", f"int{bits}", bits, group, 16 if group else 0, where, skip)


def quant_from_dict(cfg: Any, where: str) -> Quantization | None:
    """The checkpoint's quantization (None when the config has no ``quantization_config``)."""
    if not isinstance(cfg, dict):
        return None
    q = cfg.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, dict):
        raise DnnplaceError(f"{where}: quantization_config must be an object")
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8":
        block = q.get("weight_block_size")
        group = int(block[0]) * int(block[1]) if isinstance(block, list) and len(block) == 2 else 0
        skip = _skip_list(q, where, "ignored_layers", "modules_to_not_convert")
        return Quantization("fp8", "fp8", 8, group, 32 if group else 0, where, skip)
    if method == "fbgemm_fp8":  # one FP32 scale per output channel (vLLM's FBGEMMFp8Config)
        return Quantization("fbgemm_fp8", "fp8", 8, 0, 0, where, _skip_list(q, where, "modules_to_not_convert"))
    if method == "compressed-tensors":
        return _compressed(q, where)
    if method in ("awq", "gptq"):
        bits = _int(q, "bits", 4, where) or _int(q, "w_bit", 4, where)
        group = _int(q, "group_size", 128, where) or _int(q, "q_group_size", 128, where)
        group = 0 if group < 0 else group
        # an FP16 scale and a packed zero point per group (AutoAWQ / AutoGPTQ layouts)
        skip = _skip_list(q, where, "modules_to_not_convert")
        return Quantization(method, f"int{bits}", bits, group, 16 + bits if group else 0, where, skip,
                            skip_substring=method == "awq")
    if not method and isinstance(q.get("producer"), dict) and q["producer"].get("name") == "modelopt":
        method = "modelopt"  # vLLM's ModelConfig sets quant_method the same way for ModelOpt exports
    if method == "modelopt":
        return _modelopt(q, where)
    if method == "mxfp4":  # OCP MX: E2M1 weights, one E8M0 scale per 32 (attention and router stay 16-bit)
        return Quantization("mxfp4", "fp4", 4, 32, 8, where, _skip_list(q, where, "modules_to_not_convert"))
    raise DnnplaceError(f"{where}: unknown quant_method '{method}'; known: {', '.join(QUANT_METHODS)}")


def _modelopt(q: dict[str, Any], where: str) -> Quantization:
    """A ModelOpt ``quant_algo`` (vLLM's modelopt.py: FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4,
    W4A16_AWQ / W4A8_AWQ); anything else is named, never read as FP8."""
    algo = str(q.get("quant_algo", "")).upper()
    skip = _skip_list(q, where, "exclude_modules", "ignore")
    if "FP4" in algo:
        return Quantization("modelopt", "fp4", 4, _int(q, "group_size", 16, where) or 16, 8, where, skip)
    if algo.startswith("W4A"):
        return Quantization("modelopt", "int4", 4, _int(q, "group_size", 128, where) or 128, 16, where, skip)
    if algo.startswith("FP8"):
        return Quantization("modelopt", "fp8", 8, 0, 0, where, skip)
    raise DnnplaceError(f"{where}: unknown ModelOpt quant_algo '{algo[:40]}'; known: FP8*, NVFP4, W4A16_AWQ")


def modelopt_file_quant(doc: Any, where: str) -> Quantization | None:
    """The quantization in a ModelOpt ``hf_quant_config.json`` (``{"producer": {"name": "modelopt"},
    "quantization": {"quant_algo": ...}}``); None when ``doc`` names no algorithm."""
    q = doc.get("quantization") if isinstance(doc, dict) else None
    if not isinstance(q, dict) or not q.get("quant_algo"):
        return None
    return _modelopt(q, where)
