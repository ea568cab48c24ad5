"""A serving problem from a Hugging Face ``config.json``, a fleet, a workload and an engine.

Why here and not in the CLI: ``dnnplace.load_serving`` and ``dnnplace serve`` build the same
problem, validated once: unknown names, counts below one, a context longer than the model's and a
checkpoint's quantization that contradicts ``--precision`` are one line each; so is any row of a
request-length file (``--lengths``) that cannot be read or does not fit the context, named by its line.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np

from dnnplace.arch.dense import TransformerArch
from dnnplace.arch.hf_config import arch_from_dict, load_arch
from dnnplace.arch.moe import MoEModel
from dnnplace.arch.moe_config import MOE_MODEL_TYPES, is_moe_config, load_moe, moe_from_dict
from dnnplace.arch.quant import modelopt_file_quant, quant_from_dict
from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.catalogue import (
    COMPUTE_CAPABILITY,
    GGUF,
    GGUF_NAMES,
    KV_DTYPES,
    NON_NVIDIA,
    PRECISIONS,
    Q6_K_BYTES,
    CapabilityRule,
    EngineRules,
    engine_rules,
    use_more_bits,
    vllm_default_max_num_batched_tokens,
    vllm_default_max_num_seqs,
)
from dnnplace.models.serving.fleet import Fleet, fleet_from_toml, parse_gpus
from dnnplace.models.serving.lengths import LengthRows, distribution, mean_lengths, read_lengths
from dnnplace.models.serving.spec import SLO_STATS, LayerProfile, ServingProblem, Workload, slo_flag
from dnnplace.utils.files import read_json_file

__all__ = ["capability_rule", "check_capability", "check_engine_runs_on", "checkpoint_config", "fleet_defaults",
           "layer_profile", "problem", "profile_from"]

_GGUF_NAMES = GGUF_NAMES


def _promoted_params(a: TransformerArch) -> tuple[float, float]:
    """(v projection, MLP down projection) weights of one dense layer: what llama.cpp's K_M mixes store at
    more bits on some layers."""
    return float(a.hidden * a.kv_width), float(a.hidden * a.ffn_hidden)


def _mlp_params(ffn: int, hidden: int, gated: bool) -> float:
    return float((3 if gated else 2) * hidden * ffn)


Modules = list[tuple[tuple[str, ...], float]]


def _gated(prefixes: tuple[str, ...], weights: float) -> Modules:
    """A gated MLP's three projections (equal weights) under each family's spelling of its module."""
    return [(tuple(f"{p}.{proj}" for p in prefixes), weights / 3.0) for proj in ("gate_proj", "up_proj", "down_proj")]


def _part_modules(arch: TransformerArch, moe: MoEModel | None) -> dict[str, Modules]:
    """Each part's modules as Hugging Face names them under a decoder layer, with their weights: what a
    checkpoint's list of 16-bit modules is matched against (:meth:`Quantization.share_16bit`), and the one
    count of an attention layer's weights (dense, GQA or MLA)."""
    h = arch.hidden
    if moe is not None and moe.mla is not None:
        m = moe.mla
        q: Modules = ([(("self_attn.q_a_proj",), float(h * m.q_lora_rank)),
                       (("self_attn.q_b_proj",), float(m.q_lora_rank * arch.heads * m.qk_head_dim))]
                      if m.q_lora_rank else [(("self_attn.q_proj",), float(h * arch.heads * m.qk_head_dim))])
        attn = q + [(("self_attn.kv_a_proj_with_mqa",), float(h * (m.kv_lora_rank + m.qk_rope_head_dim))),
                    (("self_attn.kv_b_proj",),
                     float(m.kv_lora_rank * arch.heads * (m.qk_nope_head_dim + m.v_head_dim))),
                    (("self_attn.o_proj",), float(arch.heads * m.v_head_dim * h))]
    else:
        attn = [(("self_attn.q_proj",), float(h * arch.q_width)), (("self_attn.k_proj",), float(h * arch.kv_width)),
                (("self_attn.v_proj",), float(h * arch.kv_width)), (("self_attn.o_proj",), float(arch.q_width * h))]
    parts = {"attn": attn, "mlp": _gated(("mlp", "feed_forward"), _mlp_params(arch.ffn_hidden, h, arch.gated))}
    if moe is not None:
        s = moe.moe
        one = _mlp_params(s.expert_ffn, h, True)
        experts = [(tuple(f"{p}.{e}" for p in ("mlp.experts.0", "feed_forward.experts.0")) + (alt,), one / 3.0)
                   for e, alt in (("gate_proj", "block_sparse_moe.experts.0.w1"),
                                  ("up_proj", "block_sparse_moe.experts.0.w3"),
                                  ("down_proj", "block_sparse_moe.experts.0.w2"))]
        parts["experts"] = experts
        parts["shared"] = _gated(("mlp.shared_expert", "mlp.shared_experts", "feed_forward.shared_expert"),
                                 _mlp_params(max(s.shared_ffn, 1), h, True))
    return parts


def profile_from(arch: TransformerArch, moe: MoEModel | None, precision: str, kv_dtype: str, source: str,
                 checkpoint: Any = None) -> LayerProfile:
    """The per-layer costs of ``arch`` stored at ``precision`` (bytes per weight from
    :data:`~dnnplace.models.serving.catalogue.PRECISIONS`; a GGUF K_M mix per layer as llama.cpp makes it).

    A checkpoint that leaves modules at 16 bits (its ``modules_to_not_convert`` / ``ignore`` /
    ``exclude_modules``) has them priced at 16 bits, in bytes and in GEMM time, layer by layer; routers
    are 16-bit everywhere (vLLM builds them with no quantization config)."""
    if precision == "auto":  # the checkpoint's own quantization; 16-bit weights where it has none
        precision = checkpoint.precision if checkpoint is not None else "bf16"
    if precision not in PRECISIONS:
        raise DnnplaceError(f"unknown precision '{precision}'; known: auto, {', '.join(PRECISIONS)}")
    if kv_dtype not in KV_DTYPES:
        raise DnnplaceError(f"unknown KV-cache dtype '{kv_dtype}'; known: {', '.join(KV_DTYPES)}")
    bpw, dtype, _ = PRECISIONS[precision]
    if checkpoint is not None and checkpoint.precision != precision:
        raise DnnplaceError(f"{source}: the checkpoint is quantized to {checkpoint.precision} "
                            f"({checkpoint.method}); --precision {precision} contradicts it (give --precision "
                            f"{checkpoint.precision})")
    if checkpoint is not None:
        bpw = checkpoint.bytes_per_weight
    moe_dtype = ""
    if checkpoint is not None and checkpoint.method == "fp8" and checkpoint.group_size and moe is not None:
        # weight_block_size (DeepSeek-V3, Qwen3-*-FP8, MiniMax-M2): the engines' fused MoE runs block-scaled
        # kernels, which the tables measure as fp8_block and which differ from per-tensor FP8's (vLLM 0.24's
        # fused MoE on an H200, one token of Qwen3-235B's experts: 0.33 ms per-tensor, 0.07 ms block-scaled).
        # The dense GEMMs stay on the per-tensor rows: the dense fp8_block tables time more than a GEMM (vLLM
        # 0.24's DeepGEMM rows are flat in m, 0.18 ms for 4096 x 4096 at m = 16 and at m = 1024 on a B200;
        # SGLang 0.5.14's are 2.6x its FP8 at m = 1024), where TensorRT-LLM's measure the two within 10 %
        moe_dtype = "fp8_block"
    if checkpoint is not None and checkpoint.method == "mxfp4" and moe is not None:
        # GPT-OSS: the experts run the engine's MXFP4 kernel (catalogue.mxfp4_moe_kernel), which the tables
        # measure under its own name; NVFP4's rows are another format and have no GPT-OSS shapes
        moe_dtype = "mxfp4"
    n = arch.num_layers
    parts = _part_modules(arch, moe)
    attn = sum(w for _, w in parts["attn"])
    v_proj, down = _promoted_params(arch)
    mask = np.array(moe.moe.moe_layers if moe is not None else [False] * n, dtype=bool)
    mlp = np.full(n, _mlp_params(arch.ffn_hidden, arch.hidden, arch.gated))
    experts = top_k = expert_ffn = shared_ffn = 0
    routed = shared = router = 0.0
    if moe is not None:
        s = moe.moe
        experts, top_k, expert_ffn, shared_ffn = s.num_experts, s.top_k, s.expert_ffn, s.shared_ffn
        routed = s.num_experts * _mlp_params(s.expert_ffn, arch.hidden, True)
        shared = _mlp_params(s.shared_ffn, arch.hidden, True)
        router = float(arch.hidden * s.num_experts)
        mlp = np.where(mask, routed + shared + router, mlp)
    params = attn + mlp
    norm_bytes = 2.0 * arch.hidden * 2.0  # two RMSNorm weights per layer, 16-bit
    a16 = m16 = None
    if precision in GGUF:
        base = GGUF[precision].base_bytes
        more = np.array([use_more_bits(i, n) for i in range(n)])
        promoted = np.where(more, v_proj + (down if not moe else 0.0), 0.0)
        wbytes = params * base + promoted * (Q6_K_BYTES - base) + norm_bytes
    else:
        share = {k: np.zeros(n) for k in ("attn", "mlp", "experts", "shared")}
        if checkpoint is not None and checkpoint.skip:
            for k, mods in parts.items():
                share[k] = np.array([checkpoint.share_16bit(i, mods) for i in range(n)])
        at = lambda x, k: x * (share[k] * 2.0 + (1.0 - share[k]) * bpw)  # noqa: E731
        dense_mlp = at(np.full(n, _mlp_params(arch.ffn_hidden, arch.hidden, arch.gated)), "mlp")
        sparse_mlp = at(np.full(n, routed), "experts") + at(np.full(n, shared), "shared") + router * 2.0
        wbytes = at(np.full(n, attn), "attn") + np.where(mask, sparse_mlp, dense_mlp) + norm_bytes
        if dtype not in ("bf16", "fp16") and (share["attn"].any() or share["mlp"].any() or share["experts"].any()):
            a16, m16 = share["attn"], np.where(mask, share["experts"], share["mlp"])
    kvb = KV_DTYPES[kv_dtype]
    shardable = moe is None or moe.mla is None
    if shardable:
        kv_tok = np.full(n, 2.0 * arch.kv_heads * arch.head_dim * kvb)
    else:
        assert moe is not None and moe.mla is not None
        kv_tok = np.full(n, float(moe.mla.kv_lora_rank + moe.mla.qk_rope_head_dim) * kvb)
    window = np.zeros(n, dtype=np.int64)
    if arch.sliding_window:
        for i in range(n):
            if not arch.global_every or (i + 1) % arch.global_every:
                window[i] = arch.sliding_window
    vh = float(arch.vocab * arch.hidden)
    head = vh * (Q6_K_BYTES if precision in _GGUF_NAMES else 2.0)  # LM heads stay 16-bit in FP8/FP4/INT4 files
    return LayerProfile(
        arch.name, n, arch.hidden, arch.ffn_hidden, arch.heads, arch.kv_heads, arch.head_dim, arch.vocab,
        arch.tied_embeddings, wbytes, kv_tok, shardable, window, mask, experts, top_k, expert_ffn, shared_ffn,
        embed_bytes=vh * (bpw if precision in _GGUF_NAMES else 2.0), head_bytes=head, weight_dtype=dtype,
        precision=precision, max_position=arch.max_position, source=source, attn_16bit=a16, mlp_16bit=m16,
        weight_format=checkpoint.method if checkpoint is not None else "", moe_dtype=moe_dtype)


def layer_profile(model: str | Path, precision: str = "bf16", kv_dtype: str = "bf16",
                  doc: dict[str, Any] | None = None) -> LayerProfile:
    """Read ``model`` (a config.json or its folder) through :mod:`dnnplace.arch` into a layer profile; with
    ``doc``, that decoded config instead (a plan file embeds it, so it is read back without the file)."""
    text = str(model)
    checkpoint = None
    if doc is not None:
        moe_doc = isinstance(doc, dict) and doc.get("model_type") in MOE_MODEL_TYPES
        moe = moe_from_dict(doc, text) if moe_doc else None
        arch = moe.arch if moe is not None else arch_from_dict(doc, text)
        return profile_from(arch, moe, precision, kv_dtype, text, quant_from_dict(doc, text))
    if is_moe_config(text):
        moe = load_moe(text)
        arch = moe.arch
    else:
        moe = None
        arch = load_arch(text)
    p = Path(text)
    cfg_path = p / "config.json" if p.is_dir() else p
    if cfg_path.is_file():
        checkpoint = quant_from_dict(checkpoint_config(cfg_path), str(cfg_path))
    return profile_from(arch, moe, precision, kv_dtype, text, checkpoint)


def checkpoint_config(cfg_path: Path) -> Any:
    """``cfg_path``'s config with a ModelOpt export's quantization folded in as ``quantization_config``.

    Why: ModelOpt checkpoints keep their format in ``hf_quant_config.json`` beside ``config.json`` (vLLM
    detects them by that file); read without it, an FP8 or NVFP4 checkpoint is priced at 16 bits and
    called "does not fit" on GPUs that serve it.  ``NAME_config.json`` pairs with ``NAME_hf_quant_config.json``
    where configs are stored side by side in one folder.
    """
    doc = read_json_file(cfg_path)
    name = cfg_path.name
    beside = cfg_path.with_name(name[: -len("config.json")] + "hf_quant_config.json"
                                if name != "config.json" and name.endswith("_config.json") else "hf_quant_config.json")
    if not isinstance(doc, dict) or doc.get("quantization_config") is not None or not beside.is_file():
        return doc
    extra = read_json_file(beside)
    if modelopt_file_quant(extra, str(beside)) is None:
        return doc
    return {**doc, "quantization_config": {"quant_method": "modelopt", **extra["quantization"]}}


def fleet_defaults(rules: EngineRules, fleet: Fleet) -> EngineRules:
    """The engine's rules with the defaults it derives from the GPUs filled in (vLLM's ``max_num_seqs`` and
    ``max_num_batched_tokens``: :func:`~dnnplace.models.serving.catalogue.vllm_default_max_num_seqs`,
    :func:`~dnnplace.models.serving.catalogue.vllm_default_max_num_batched_tokens`)."""
    if rules.seqs_rule != "vllm":
        return rules
    from dnnplace.core.catalogue import device_spec

    kinds = sorted({g.name for g in fleet.gpus})
    specs = [(device_spec(k).name, device_spec(k).usable_memory_bytes) for k in kinds]
    return dataclasses.replace(rules, max_num_seqs=vllm_default_max_num_seqs(specs),
                               max_num_batched_tokens=vllm_default_max_num_batched_tokens(specs))


def check_engine_runs_on(rules: EngineRules, fleet: Fleet) -> None:
    """Refuse an engine on GPUs it has no build for (TensorRT-LLM: NVIDIA only), in one line."""
    foreign = sorted({g.name for g in fleet.gpus if g.name in NON_NVIDIA})
    if rules.nvidia_only and foreign:
        raise DnnplaceError(f"{rules.name} runs on NVIDIA GPUs only; the fleet has {', '.join(foreign)} "
                            f"({NON_NVIDIA[foreign[0]][0]}): plan those with --engine vllm or llama.cpp")


def capability_rule(rules: EngineRules, precision: str, weight_format: str = "") -> CapabilityRule | None:
    """The engine's limit for ``precision`` weights stored as ``weight_format`` (a checkpoint's quantization
    method: GPT-OSS's ``mxfp4`` is a 4-bit type of its own, not NVFP4): the rule naming that format, else the
    one for the precision as a whole, else None."""
    same = [r for r in rules.capability_rules if r.precision == precision]
    return next((r for r in same if r.method and r.method == weight_format), None) or \
        next((r for r in same if not r.method), None)


def check_capability(rules: EngineRules, fleet: Fleet, precision: str, weight_format: str = "") -> None:
    """Refuse weights an engine has no kernel for on some GPU of the fleet (FP8 below Ada on TensorRT-LLM, any
    GPU below the engine's floor, ...), in one line naming the GPU, its compute capability and the engine's
    limit with where it is read, and which GPUs of the fleet could serve without it.  Why here: a plan priced
    for kernels the engine does not have on that GPU is a deployment that does not start, said to be optimal."""
    kinds = sorted({g.name for g in fleet.gpus})

    def why_not(name: str) -> str | None:
        cc = COMPUTE_CAPABILITY.get(name)
        if cc is None:  # not an NVIDIA GPU: its engines are checked by check_engine_runs_on
            return None
        if cc < rules.min_capability:
            return (f"{rules.name} does not run on {name} (compute capability {cc:.1f}; it needs "
                    f"{rules.min_capability:.1f} or newer: {rules.min_capability_source})")
        rule = capability_rule(rules, precision, weight_format)
        if rule is not None and cc < rule.at_least:
            what = f"{precision} ({weight_format})" if weight_format else precision
            return (f"{what} weights on {name} (compute capability {cc:.1f}, --precision or the "
                    f"checkpoint's quantization): {rules.name} runs them from {rule.at_least:.1f} ({rule.source})")
        return None

    refused = {k: why for k in kinds if (why := why_not(k)) is not None}
    if refused:
        first = next(iter(refused.values()))
        able = [k for k in kinds if k not in refused]
        hint = f"; plan the {', '.join(able)} GPUs alone by leaving {', '.join(refused)} out of the fleet" \
            if able else ""
        raise DnnplaceError(first + hint)


def _positive(value: Any, name: str, *, integer: bool = True, zero: bool = False) -> Any:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or (value < 0 if zero else value <= 0) or \
            (not integer and not math.isfinite(value)) or value > 1e12:
        raise DnnplaceError(f"{name} must be a {'whole ' if integer else ''}number "
                            f"{'>= 0' if zero else '> 0'}, got {value!r}")
    return value


def problem(model: str | Path, *, gpus: str | None = None, fleet: str | Path | None = None, isl: int | None = None,
            osl: int | None = None, rate: float | None = None, concurrency: int | None = None,
            ttft_ms: float | None = None, tpot_ms: float | None = None, engine: str = "vllm",
            precision: str = "auto", kv_dtype: str = "bf16", max_model_len: int = 0, block_size: int = 0,
            memory_fraction: float = 0.0, doc: dict[str, Any] | None = None, ttft_stat: str = "mean",
            tpot_stat: str = "mean", lengths: str | Path | LengthRows | None = None) -> ServingProblem:
    """The serving problem; every argument checked here, once (one line naming the culprit).  ``ttft_stat`` /
    ``tpot_stat``: the statistic each SLO bounds (``mean``, ``p50`` or ``p99``).

    The workload's requests are ``isl`` / ``osl`` tokens each (1024 / 256 when neither ``lengths`` nor they are
    given), or drawn from ``lengths``: a distribution file (:func:`read_lengths`) or rows already read."""
    rules = engine_rules(engine)
    if (gpus is None) == (fleet is None):
        raise DnnplaceError("give the fleet as --gpus SPEC or --fleet FILE.toml (one of them)")
    rows: LengthRows | None = None
    if lengths is not None:
        if isl is not None or osl is not None:
            raise DnnplaceError("give --lengths FILE or --isl/--osl, not both")
        rows = lengths if isinstance(lengths, LengthRows) else read_lengths(lengths)
        isl = osl = 1  # the means, once the rows are checked against the context below
    isl = 1024 if isl is None else isl
    osl = 256 if osl is None else osl
    f: Fleet = parse_gpus(gpus) if gpus is not None else fleet_from_toml(fleet)  # type: ignore[arg-type]
    check_engine_runs_on(rules, f)
    rules = fleet_defaults(rules, f)
    _positive(isl, "--isl")
    _positive(osl, "--osl")
    if rate is not None and concurrency is not None:
        raise DnnplaceError("give --rate or --concurrency, not both")
    for stat, name in ((ttft_stat, "TTFT"), (tpot_stat, "TPOT")):
        if not isinstance(stat, str) or stat not in SLO_STATS:
            raise DnnplaceError(f"the {name} SLO statistic must be one of {', '.join(SLO_STATS)}, got {stat!r}")
    for v, name in ((rate, "--rate"), (ttft_ms, slo_flag("ttft", ttft_stat)), (tpot_ms, slo_flag("tpot", tpot_stat))):
        if v is not None:
            _positive(v, name, integer=False)
    if concurrency is not None:
        _positive(concurrency, "--concurrency")
    _positive(max_model_len, "--max-model-len", zero=True)
    _positive(block_size, "--block-size", zero=True)
    if isinstance(memory_fraction, bool) or not isinstance(memory_fraction, (int, float)) or \
            not 0 <= memory_fraction <= 1:
        raise DnnplaceError(f"--memory-fraction must be in (0, 1], got {memory_fraction!r}")
    prof = layer_profile(model, precision, kv_dtype, doc)
    kv_known = dict(rules.kv_dtypes)
    if kv_dtype in KV_DTYPES and kv_dtype not in kv_known:  # an unknown name is named by profile_from below
        raise DnnplaceError(f"--kv-dtype {kv_dtype}: {rules.name} has no such KV cache; it takes "
                            f"{', '.join(kv_known)}")
    precision = prof.precision  # "auto" resolved to the checkpoint's
    if rules.precisions and precision not in rules.precisions:
        raise DnnplaceError(f"--precision {precision}: {rules.name} has no such weight type; it loads "
                            f"{', '.join(rules.precisions)}")
    if rules.name != "llama.cpp" and precision in _GGUF_NAMES:
        raise DnnplaceError(f"--precision {precision} is a GGUF type: llama.cpp only (give --engine llama.cpp)")
    check_capability(rules, f, prof.precision, prof.weight_format)
    context = max_model_len or prof.max_position
    if max_model_len and max_model_len > prof.max_position:
        raise DnnplaceError(f"--max-model-len {max_model_len} is longer than the model's context "
                            f"({prof.max_position} tokens)")
    dist = None
    if rows is not None:
        dist = distribution(rows, context)
        isl, osl = mean_lengths(dist)
    elif isl + osl > context:
        raise DnnplaceError(f"--isl {isl} + --osl {osl} = {isl + osl} tokens is longer than the context "
                            f"({context} tokens)")
    wl = Workload(isl, osl, rate, concurrency, ttft_ms, tpot_ms, ttft_stat, tpot_stat, lengths=dist,
                  lengths_source=rows.source if rows is not None else "")
    return ServingProblem(prof, f, wl, rules, kv_dtype, max_model_len, block_size, float(memory_fraction),
                          source=str(model))
