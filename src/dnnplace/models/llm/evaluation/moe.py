"""The MoE terms of the LLM cost model: router, permutation, dispatch, grouped GEMMs, shared experts, MLA, memory.

Pure functions over numpy arrays (one entry per candidate configuration), as the rest of
``evaluation/llm``.  Token counts are per GPU and per micro-batch:

* ``t`` -- tokens that enter a rank's MoE layer: its sequence-parallel shard, mbs x seq / (cp x tp)
  (Megatron routes the sequence-parallel input; MoE with TP requires sequence parallelism).
* Every rank holds distinct tokens, so an ETP x EP block of ranks routes etp x ep x t tokens,
  each to ``top_k`` experts; under balanced routing every expert receives
  ``etp x ep x t x top_k / experts`` of them and each of its ETP shards (ffn / etp columns)
  processes all of them -- a rank receives ``t x top_k x etp`` token copies in all.

Expert parallel ranks are laid out as Megatron-Core's expert grid ``etp-ep-edp-pp`` (ETP innermost,
then EP: the EP group has stride etp), within an NVLink domain of ``domain`` GPUs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dnnplace.core.catalogue import (
    DEEPEP,
    HYBRIDEP_NVLINK,
    MLA_ATTENTION,
    SLIDING_WINDOW_ATTENTION,
    TRAINING_STACK,
    DeviceSpec,
)
from dnnplace.kernels import roofline
from dnnplace.models.llm.evaluation import flops, kernel_ledger
from dnnplace.models.llm.evaluation.moe_dispatch import (
    dispatch_time,
    dispatch_times,
    dispatch_volumes,
    distinct_groups,
    domains_hit,
    etp_collective_time,
    flex_dispatch_time,
    permute_bytes,
)
from dnnplace.models.llm.moe import MOE_STACK, RECOMPUTE_MODULES, MoEModel
from dnnplace.models.llm.moe_knobs import DISPATCHERS
from dnnplace.models.llm.spec import TransformerArch

Array = np.ndarray

__all__ = ["activation_bytes", "activation_parts", "attention_params", "dense_mlp_params", "dispatch_time",
           "dispatch_times", "dispatch_volumes", "distinct_groups", "domains_hit", "etp_collective_time",
           "expert_gemm_times",
           "expert_memory", "expert_params", "flex_dispatch_time", "grouped_gemm_time", "load_factor",
           "mla_attention_fwd_flops", "mla_gemms", "mla_layer_compute", "model_flops_per_step",
           "model_flops_per_token", "moe_cast_bytes", "moe_dense_params", "moe_layer_costs", "permute_bytes",
           "rank_layer_counts", "recompute_reruns", "router_bytes", "router_gemm", "router_times",
           "shared_expert_gemms", "stage_layer_kinds"]


# ----------------------------------------------------------------------------------------------- model FLOPs

def _attention_flops_per_token(m: MoEModel, seq: int, windowed: bool) -> float:
    """Model FLOPs of one layer's attention per token (fwd + bwd = 3 x fwd, causal: half the scores)."""
    a = m.arch
    if m.mla is not None:
        x, heads, h = m.mla, a.heads, a.hidden
        q = h * x.q_lora_rank + x.q_lora_rank * heads * x.qk_head_dim if x.q_lora_rank else h * heads * x.qk_head_dim
        proj = q + h * x.qk_rope_head_dim + h * x.kv_lora_rank + x.kv_lora_rank * heads * (x.qk_nope_head_dim
                                                                                            + x.v_head_dim)
        proj += heads * x.v_head_dim * h
        return 6.0 * proj + 3.0 * seq * heads * (x.qk_head_dim + x.v_head_dim)
    proj = 2 * a.hidden * a.q_width + 2 * a.hidden * a.kv_width
    if windowed and a.sliding_window and a.sliding_window < seq:
        w = a.sliding_window
        context = w - w * (w - 1) / (2 * seq)  # mean keys per query of a causal window (exact)
    elif windowed and m.attention_chunk and m.attention_chunk < seq:
        context = m.attention_chunk / 2  # causal attention within a chunk
    else:
        context = seq / 2
    return 6.0 * proj + 12.0 * a.q_width * context


def _windowed(m: MoEModel) -> list[bool]:
    """Per decoder layer: does it attend within a window or chunk (else the whole causal sequence)?"""
    a, n = m.arch, m.arch.num_layers
    every = a.global_every if a.sliding_window else m.chunk_global_every if m.attention_chunk else 0
    if not (a.sliding_window or m.attention_chunk):
        return [False] * n
    return [not (every and (i + 1) % every == 0) for i in range(n)]


def model_flops_per_token(m: MoEModel, seq: int) -> float:
    """Model FLOPs per token of one training step, the formula NeMo's MoE recipes report MFU with.

    NeMo's ``flops_formulas.deepseekv3`` (and Megatron-Bridge's ``num_floating_point_operations``,
    which adds norm terms of under 0.01 %): 6 x the parameters a token meets in every GEMM --
    MLA's Q (through its latent), shared rotary key, KV latent and up projections, output; a dense
    layer's gated MLP; an MoE layer's shared experts + top_k routed experts -- plus the causal
    attention core 6 x seq/2 x heads x (qk + v head dims) per layer, 6 V h for the LM head; each
    MTP layer adds an attention + MoE layer, its 2h x h projection and another LM head.  The router
    is not counted (as in the recipes).  Causal attention counts half the scores; a sliding window
    of w keys counts w - w(w-1)/(2 seq) keys per query (Megatron-Bridge's exact mean).
    """
    a, s = m.arch, m.moe
    h, glu = a.hidden, (3 if a.gated else 2)
    dense = 6.0 * glu * h * a.ffn_hidden
    sparse = 6.0 * glu * h * (s.top_k * s.expert_ffn + s.shared_ffn)
    total = sum(_attention_flops_per_token(m, seq, w) for w in _windowed(m))
    total += sum(sparse if moe else dense for moe in s.moe_layers)
    if s.mtp_layers:
        last_sparse = s.moe_layers[-1]
        per_mtp = (_attention_flops_per_token(m, seq, False) + (sparse if last_sparse else dense)
                   + 6.0 * 2 * h * h)
        total += s.mtp_layers * per_mtp
    return total + 6.0 * a.vocab * h * (1 + s.mtp_layers)


def model_flops_per_step(m: MoEModel, seq: int, global_batch: int) -> float:
    return float(global_batch) * seq * model_flops_per_token(m, seq)


# ----------------------------------------------------------------------------------------------- router

def router_gemm(m: MoEModel, t: Array) -> tuple[Array, Array, Array]:
    """(M, N, K) of the router's forward GEMM on one rank: t tokens x experts logits over hidden."""
    return t, np.full_like(t, float(m.moe.num_experts)), np.full_like(t, float(m.arch.hidden))


#: The router's score passes (fp32, ``MOE_STACK.router_bytes_per_score`` bytes per score): forward
#: reads the logits and writes the scores (score function), reads them for the top-k and writes the
#: k probabilities; backward reads the saved scores and the probability gradient and writes the
#: logit gradient.  Counted from Megatron-Core's router (topk_softmax_with_capacity) passes.
ROUTER_PASSES_FWD, ROUTER_PASSES_BWD = 3.0, 3.0


def router_bytes(m: MoEModel, t: Array) -> tuple[Array, Array]:
    """HBM bytes of the score function and top-k per rank (forward, backward)."""
    e, b = float(m.moe.num_experts), MOE_STACK.router_bytes_per_score
    return ROUTER_PASSES_FWD * b * t * e, ROUTER_PASSES_BWD * b * t * e


def router_times(m: MoEModel, t: Array, dev: DeviceSpec, peak: float) -> tuple[Array, Array]:
    """Forward and backward seconds of the router on one rank: its GEMM and its fp32 score passes."""
    (gf,), (gb,) = flops.fwd_bwd_gemm_times([router_gemm(m, t)], dev, peak)
    bf, bb = router_bytes(m, t)
    return gf + roofline.hbm_time(bf, dev), gb + roofline.hbm_time(bb, dev)


# ----------------------------------------------------------------------------------------------- permutation

def load_factor(mean_tokens: Array, ranks: Array) -> Array:
    """The slowest of ``ranks`` ranks' load over the mean, under uniform random routing.

    Performance recipes force balanced routing (random router logits: ``MOE_STACK.sources['load_balance']``);
    a rank's token count is then binomial with mean mu and standard deviation ~ sqrt(mu), and the expected
    maximum of n such loads ~ mu + sqrt(2 ln n) sqrt(mu).
    """
    mu = np.maximum(mean_tokens, 1.0)
    return 1.0 + np.sqrt(2.0 * np.log(np.maximum(ranks, 1.0)) / mu)


def grouped_gemm_time(m_rows: Array, n: Array, k: Array, groups: Array, dev: DeviceSpec, peak: float,
                      out_bytes: float = 2.0) -> Array:
    """Seconds of a grouped GEMM: ``groups`` problems (m_rows x k) @ (k x n) scheduled as one kernel.

    Tiles of every group share the SMs (one wave count over all of them), a partial tile costs a
    full one; each group reads its own weight matrix, so few rows per expert make the GEMM
    bandwidth-bound (the inefficiency of small expert GEMMs); the epilogue writes each output.
    """
    t = roofline.gemm_time(m_rows, n, k, dev, peak, out_bytes, groups)
    kernel_ledger.note("expert_gemm", t)  # the tables time fused MoE layers, not a trainer's grouped GEMMs
    return t


def rank_load(mean_tokens: Array, ranks: Array, skew: Array | None) -> Array:
    """The slowest rank's load over the mean: :func:`load_factor` (balanced routing) where ``skew`` is 0 or
    not given, else 1 -- a skewed routing's factor (``moe_skew``) multiplies the seconds instead."""
    lf = load_factor(mean_tokens, ranks)
    return lf if skew is None else np.where(np.asarray(skew) > 0, 1.0, lf)


def skew_seconds(seconds: Array, skew: Array | None) -> Array:
    """``seconds`` of the experts at an even load, times the routing's skew factor where it has one."""
    return seconds if skew is None else seconds * np.where(np.asarray(skew) > 0, skew, 1.0)


def expert_gemm_times(m: MoEModel, t: Array, ep: Array, etp: Array, dev: DeviceSpec,
                      peak: float, skew: Array | None = None) -> tuple[Array, Array]:
    """Forward and backward seconds of one MoE layer's routed experts on the slowest rank.

    Local experts E/ep each receive etp x ep x t x top_k / E rows (balanced), times the
    :func:`load_factor` of the rank with the most (or, under a skewed routing, the seconds times its factor:
    :func:`rank_load`); fc1 (2 ffn/etp gated) and fc2 (ffn/etp);
    backward = data-gradient + weight-gradient grouped GEMMs (fp32 main_grad epilogue).
    """
    s, h = m.moe, float(m.arch.hidden)
    e, k = float(s.num_experts), float(s.top_k)
    local = e / ep
    rows = etp * ep * t * k / e
    rows = rows * rank_load(rows * local, ep, skew)
    f = s.expert_ffn / etp
    fc1_n = (2.0 if m.arch.gated else 1.0) * f
    hh = np.full_like(rows, h)
    fwd = grouped_gemm_time(rows, fc1_n, hh, local, dev, peak) + grouped_gemm_time(rows, hh, f, local, dev, peak)
    wg = TRAINING_STACK.wgrad_out_bytes
    bwd = (grouped_gemm_time(rows, hh, fc1_n, local, dev, peak) + grouped_gemm_time(hh, fc1_n, rows, local, dev,
                                                                                     peak, wg)
           + grouped_gemm_time(rows, f, hh, local, dev, peak) + grouped_gemm_time(f, hh, rows, local, dev, peak, wg))
    return skew_seconds(fwd, skew), skew_seconds(bwd, skew)


def shared_expert_gemms(m: MoEModel, tokens: Array, tp: Array) -> list[tuple[Array, Array, Array]]:
    """(M, N, K) of the shared experts' forward GEMMs on one TP shard (a dense gated MLP of shared_ffn).

    ``tokens``: the micro-batch's tokens on the TP group (mbs x seq / cp), as for the dense MLP.
    """
    sf, h = float(m.moe.shared_ffn), float(m.arch.hidden)
    if not sf:
        return []
    hf = np.full_like(tokens, h)
    return [(tokens, (2.0 if m.arch.gated else 1.0) * sf / tp, hf), (tokens, hf, sf / tp)]


# ----------------------------------------------------------------------------------------------- MLA

def mla_gemms(m: MoEModel, tokens: Array, tp: Array) -> list[tuple[Array, Array, Array]]:
    """(M, N, K) of MLA's forward projections on one TP shard.

    Megatron-Core's MultiLatentAttention: the down projections (to the Q latent, and to the KV latent
    + the shared rotary key) are duplicated over TP and run on each rank's sequence-parallel tokens
    (tokens / tp); the up projections and the output projection are split by heads over TP and run
    on all the group's tokens.
    """
    x, heads, h = m.mla, float(m.arch.heads), float(m.arch.hidden)
    assert x is not None
    local = tokens / tp
    hh = np.full_like(tokens, h)
    out = []
    if x.q_lora_rank:
        out += [(local, np.full_like(tokens, float(x.q_lora_rank)), hh),
                (tokens, heads * x.qk_head_dim / tp, np.full_like(tokens, float(x.q_lora_rank)))]
    else:
        out.append((tokens, heads * x.qk_head_dim / tp, hh))
    out += [(local, np.full_like(tokens, float(x.kv_lora_rank + x.qk_rope_head_dim)), hh),
            (tokens, heads * (x.qk_nope_head_dim + x.v_head_dim) / tp, np.full_like(tokens, float(x.kv_lora_rank))),
            (tokens, hh, heads * x.v_head_dim / tp)]
    return out


def mla_attention_fwd_flops(m: MoEModel, tokens: Array, seq: int, tp: Array) -> Array:
    """Executed causal forward FLOPs of MLA's attention core on one GPU: QK^T over qk_head_dim and AV over
    v_head_dim, each query seeing seq/2 keys on average, heads split over TP."""
    x = m.mla
    assert x is not None
    return tokens * seq * m.arch.heads * (x.qk_head_dim + x.v_head_dim) / tp


# ----------------------------------------------------------------------------------------------- memory

def expert_params(m: MoEModel, moe_layers: Array, ep: Array, etp: Array) -> Array:
    """Routed-expert parameters on one rank: its MoE layers' E/ep experts, each sharded over etp."""
    s, h = m.moe, m.arch.hidden
    per_expert = (3 if m.arch.gated else 2) * h * s.expert_ffn + (s.expert_ffn * (2 if m.arch.gated else 1) + h
                                                                  if s.expert_bias else 0)
    return moe_layers * (s.num_experts / ep) * per_expert / etp


def expert_memory(params: Array, edp: Array, distributed_optimizer: Array, fp8: bool = False,
                  grad_bytes: Array | float = TRAINING_STACK.grad_bytes,
                  weight_bytes: Array | float | None = None) -> dict[str, Array]:
    """Bytes of the routed experts' weights, gradients and optimizer state on one rank.

    Weights and gradients (``grad_bytes`` per parameter: fp32 main grads by default, 2 with Megatron's
    ``grad_reduce_in_fp32=False``, which the NeMo / Megatron-Bridge benchmark recipes set) stay whole on the
    rank that holds the expert shard; with the distributed optimizer the fp32 master copy and Adam moments are
    sharded over the expert-data-parallel group (EDP = N / (pp x ep x etp): the ranks holding copies of the
    same expert shard).  ``weight_bytes``: bytes per weight the precision recipe keeps (``Recipe.weight_bytes``:
    the BF16 weight and its cached quantized copies, or FP8 parameters alone); without it BF16, plus one byte
    with ``fp8``.
    """
    wb = (TRAINING_STACK.weight_bytes + (1.0 if fp8 else 0.0)) if weight_bytes is None else weight_bytes
    shard = np.where(distributed_optimizer, edp, 1.0)
    return {"weights": wb * params, "gradients": grad_bytes * params,
            "optimizer": TRAINING_STACK.optimizer_bytes * params / shard}


def activation_parts(m: MoEModel, t: Array, tp: Array, etp: Array, moe_layer: bool,
                     act_bytes: float = 2.0, quant_bytes: float | None = None) -> dict[str, Array]:
    """Bytes one decoder layer stores for its backward, per micro-batch, by the recompute module that frees them.

    ``t``: the rank's sequence-parallel tokens; T = t x tp the TP group's.  Keys: a module of
    ``RECOMPUTE_MODULES`` (what recomputing it frees) or ``kept`` (never freed by selective recompute:
    the layer's input and residual, the attention output, the router's saved probabilities).
    MLA layers store the two latents (up projections' inputs) and the post-RoPE Q, K and V
    (``mla_up_proj``); a GQA layer its norm output's QKV and Q, K, V.  Flash attention keeps its fp32
    log-sum-exp (``core_attn``).  An MoE layer keeps the t x top_k x etp dispatched copies as fc1's input
    (``moe``) with each copy's routing prob, fc1's output and the activation output (fc2's input,
    ``moe_act``), and the shared experts' internals (``shared_experts``).

    ``quant_bytes``: a quantized recipe's bytes per saved GEMM input (``Recipe.saved_input_bytes``).  TE saves
    the quantized (column-wise) copy of a linear's input for its weight gradient instead of the 16-bit one,
    the dense rule of ``precision.saved_input_delta`` applied part by part: the input norm's output (QKV or
    MLA's down projections), the latents entering MLA's up projections, a quantized copy of the out
    projection's input beside the 16-bit attention output flash keeps, the dense and shared MLPs' activation
    output, and an expert's fc1 input (the dispatched copies) and activation output (fc2's input).  An MoE
    layer's pre-MLP norm output stays 16-bit: the router, a BF16 linear, saves it.
    """
    a, b = m.arch, act_bytes
    qb = act_bytes if quant_bytes is None else quant_bytes
    h, T = float(a.hidden), t * tp
    parts = {key: np.zeros_like(t) for key in ("kept", *RECOMPUTE_MODULES)}
    parts["kept"] = parts["kept"] + 2.0 * b * t * h  # layer input, residual after attention
    # input and pre-MLP norm outputs (SP shards); quantized recipes save the first as the QKV / down input
    parts["layernorm"] = parts["layernorm"] + (qb + (b if moe_layer else qb)) * t * h
    extra = 0.0 if quant_bytes is None else quant_bytes  # the out projection's quantized input copy
    if m.mla is not None:
        x, heads = m.mla, float(a.heads)
        latents = T * (x.q_lora_rank + x.kv_lora_rank)
        qkv = T * heads * (2 * x.qk_head_dim + x.v_head_dim) / tp
        parts["mla_up_proj"] = parts["mla_up_proj"] + qb * latents + b * (T * x.qk_rope_head_dim + qkv)
        parts["kept"] = parts["kept"] + (b + extra) * T * heads * x.v_head_dim / tp  # attention output
    else:
        parts["kept"] = parts["kept"] + b * T * (a.q_width + 2 * a.kv_width) / tp + (b + extra) * T * a.q_width / tp
    parts["core_attn"] = parts["core_attn"] + 4.0 * T * a.heads / tp
    glu = 2.0 if a.gated else 1.0
    if not moe_layer:
        dense_f = float(a.ffn_hidden)
        parts["mlp"] = parts["mlp"] + (b * glu + qb) * T * dense_f / tp  # fc1 output, activation output
        return parts
    s = m.moe
    copies = t * s.top_k * etp
    f = s.expert_ffn / etp
    parts["kept"] = parts["kept"] + MOE_STACK.router_bytes_per_score * t * (s.num_experts + s.top_k)
    # fc1 input, fc1 output and the fp32 routing prob of each copy: Megatron-Core applies the probs in the
    # activation (weighted_bias_swiglu_impl, TEGroupedMLP, since ADLR/megatron-lm!2668 "Memory efficient
    # token permutation", core_r0.12.0) and unpermutes by a plain sum, so no expert output is kept for the combine
    parts["moe"] = parts["moe"] + copies * (qb * h + b * glu * f + MOE_STACK.router_bytes_per_score)
    parts["moe_act"] = parts["moe_act"] + qb * copies * f  # activation output (fc2 input)
    if s.shared_ffn:
        parts["shared_experts"] = parts["shared_experts"] + (b * glu + qb) * T * s.shared_ffn / tp
    return parts


def activation_bytes(parts: dict[str, Array], modules: frozenset[str] | set[str] | tuple[str, ...]) -> Array:
    """Bytes a layer keeps with selective recomputation of ``modules``.

    Recomputing ``moe`` (the whole MoE layer, normal checkpointing) keeps only its input, which the layer
    already keeps: every MoE part (moe, moe_act, shared_experts) is freed.
    """
    drop = set(modules)
    if "moe" in drop:
        drop |= {"moe_act", "shared_experts"}
    return sum((v for key, v in parts.items() if key not in drop), np.zeros_like(parts["kept"]))


def recompute_reruns(modules: frozenset[str] | set[str] | tuple[str, ...]) -> frozenset[str]:
    """Forward pieces the backward pass reruns for the recompute ``modules`` (what it costs in time).

    ``moe`` reruns the router, permutation, the dispatch and combine communication, the experts and
    the shared experts; ``mlp`` the dense MLP GEMMs; ``mla_up_proj`` the two up projections (and RoPE);
    ``moe_act``, ``layernorm``, ``core_attn`` their own kernels.
    """
    out: set[str] = set()
    for mod in modules:
        if mod == "moe":
            out |= {"router", "permute", "dispatch", "experts", "shared_experts", "moe_act"}
        else:
            out.add(mod)
    return frozenset(out)


# ----------------------------------------------------------------------------------------------- one layer

def _bit(modules: Array, name: str) -> Array:
    return (np.asarray(modules, dtype=np.int64) >> RECOMPUTE_MODULES.index(name)) & 1 == 1


def moe_layer_costs(m: MoEModel, t: Array, tp: Array, ep: Array, etp: Array, dispatcher: Array, modules: Array,
                    domain: int, dev: DeviceSpec, peak: float, *, shared_overlap: bool = False,
                    a2a_overlap: bool | Array = False, skew: Array | None = None) -> dict[str, tuple[Array, Array]]:
    """Forward / backward seconds of one MoE layer's MLP part on the slowest rank, per micro-batch, by kind.

    ``compute``: router (its GEMM at the BF16 peak whatever the recipe), the dispatcher's permutations
    (:func:`permute_bytes`), routed experts (grouped GEMMs), their activation (gated:
    read 2 ffn, write ffn per copy; backward 5 ffn), shared experts (a dense MLP on the TP group's
    tokens t x tp).  ``ep``: the exposed dispatch + combine, twice each way (the backward sends the
    gradients back the same routes).  ``shared_overlap`` (Megatron's moe_shared_expert_overlap) hides
    the dispatch behind the shared experts; ``a2a_overlap`` (overlap_moe_expert_parallel_comm: one
    micro-batch's all-to-all runs under another's compute) hides it behind this layer's compute -- but the
    flex (DeepEP) kernels hold ``DEEPEP.sms`` of the device's SMs while they run (HybridEP's ``sms`` on a
    device of ``HYBRIDEP_NVLINK``), so the compute beside them
    runs on the rest: over a transfer of T seconds it loses T x sms / sm_count, and the overlapped layer
    exposes max(T - compute, T x sms / sm_count).  (NCCL's all-to-all kernels take SMs too; no source gives
    their count, so the alltoall / allgather overlap is priced without it.)
    Recompute ``modules``: ``moe`` reruns the whole forward (its all-to-alls included) in the backward,
    ``moe_act`` the activation, ``shared_experts`` the shared experts' GEMMs.
    """
    s = m.moe
    # the router GEMM stays 16-bit in every recipe: Megatron-Core's RouterGatingLinearFunction calls TE's general
    # GEMM on the BF16 input and weight directly (or torch.mm), outside the quantized linear modules
    rf, rb = router_times(m, t, dev, dev.peak_flops.get("bf16", peak))
    perm = roofline.hbm_time(permute_bytes(m, t, etp, ep=ep, dispatcher=dispatcher), dev)
    ef, eb = expert_gemm_times(m, t, ep, etp, dev, peak, skew)
    copies = t * s.top_k * etp * rank_load(t * s.top_k * etp, ep, skew)
    f = s.expert_ffn / etp
    act_f = skew_seconds(roofline.hbm_time(2.0 * copies * (3.0 if m.arch.gated else 2.0) * f, dev), skew)
    act_b = skew_seconds(roofline.hbm_time(2.0 * copies * (5.0 if m.arch.gated else 3.0) * f, dev), skew)
    sh_f = sh_b = np.zeros_like(t, dtype=float)
    shapes = shared_expert_gemms(m, t * tp, tp)
    if shapes:
        gf, gb = flops.fwd_bwd_gemm_times(shapes, dev, peak)
        sh_f, sh_b = gf[0] + gf[1], gb[0] + gb[1]
    comp_f = rf + perm + ef + act_f + sh_f
    comp_b = rb + perm + eb + act_b + sh_b
    one = dispatch_times(m, t, ep, etp, dispatcher, domain, dev)
    ep_f = ep_b = 2.0 * one
    if shared_overlap:
        ep_f, ep_b = np.maximum(ep_f - sh_f, 0.0), np.maximum(ep_b - sh_b, 0.0)
    on = np.asarray(a2a_overlap, dtype=bool)  # per candidate
    # the search's relaxation (dispatcher < 0, the fastest) takes no SMs: it stays a lower bound
    hybrid = HYBRIDEP_NVLINK.get(dev.name)  # Blackwell: the recipes' flex backend is HybridEP, with its own SMs
    sms = float(hybrid.sms if hybrid is not None else DEEPEP.sms)
    steal = np.where(np.asarray(dispatcher) == DISPATCHERS.index("flex"), sms / float(dev.sm_count), 0.0)
    ep_f = np.where(on, np.maximum(ep_f - (comp_f - sh_f), steal * ep_f), ep_f)
    ep_b = np.where(on, np.maximum(ep_b - (comp_b - sh_b), steal * ep_b), ep_b)
    whole, act, shared = _bit(modules, "moe"), _bit(modules, "moe_act"), _bit(modules, "shared_experts")
    comp_b = comp_b + np.where(whole, comp_f, np.where(act, act_f, 0.0) + np.where(shared, sh_f, 0.0))
    ep_b = ep_b + np.where(whole, ep_f, 0.0)
    return {"compute": (comp_f, comp_b), "ep": (ep_f, ep_b)}


def attention_core_times(a: TransformerArch, tokens: Array, seq: int, tp: Array, dev: DeviceSpec,
                         cp: Array) -> tuple[Array, Array]:
    """Forward / backward seconds of one layer's attention core (averaged over the layers), sliding windows at
    their measured rates.

    ``flops.attention_times`` prices every layer's useful FLOPs at the long-sequence causal rates of a head-dim-128
    table; a short window runs only a few tiles per query block, so where the catalogue measured the model's
    window and head dim on this device (``SLIDING_WINDOW_ATTENTION``: cuDNN, window 128, head dim 64, GPT-OSS's
    local layers) the windowed layers run at those rates and the global layers as before.  Context parallelism
    (cp > 1) keeps the old pricing: the measurement is of whole sequences.
    """
    f, b = flops.attention_times(a, tokens, seq, tp, dev, cp)
    tab = SLIDING_WINDOW_ATTENTION.get(dev.name)
    win = a.windowed_layers
    if not win or tab is None or a.sliding_window != tab.window or a.head_dim != tab.head_dim \
            or a.sliding_window >= seq:
        return f, b
    ff, fb = flops.attention_times(dataclasses.replace(a, sliding_window=0), tokens, seq, tp, dev, cp)
    useful = 4.0 * tokens * flops.causal_keys(seq, a.sliding_window) * a.q_width / tp
    wf, wb = useful / tab.rate("fwd", seq), flops.FLASH_BWD_RATIO * useful / tab.rate("bwd", seq)
    n, one = a.num_layers, np.asarray(cp) == 1
    return (np.where(one, ((n - win) * ff + win * wf) / n, f), np.where(one, ((n - win) * fb + win * wb) / n, b))


def moe_cast_bytes(m: MoEModel, cast: float, fused: float, tokens: Array, tp: Array, etp: Array, sp_div: Array,
                   copies: Array) -> dict[str, tuple[Array, Array]]:
    """HBM bytes a quantized (FP8 / FP4) recipe's casts add to one layer of an MoE model, per micro-batch, by part.

    The dense model's rule (``precision.cast_bytes_per_token``) applied part by part: ``cast`` bytes per
    element a quantize kernel moves, ``fused`` the extra bytes of a cast fused into the producing norm.
    ``attention``: the input norm writes QKV's input quantized (fused), the out projection's input is cast;
    backward, the gradients entering the out projection and QKV are cast.  ``dense_mlp``: the pre-MLP norm
    (fused) and the activation output; backward fc2's and fc1's output gradients.  ``experts``: the
    dispatched copies enter TE's grouped linear in 16 bits and are cast there -- fc1's input (hidden) and the
    activation output (ffn / etp) per copy; backward fc2's and fc1's output gradients.  ``shared``: the
    shared experts as a dense MLP on the TP group's tokens.  The router stays 16-bit (HIGH_PRECISION_OPS).
    """
    a, s = m.arch, m.moe
    h, T = float(a.hidden), tokens
    glu = 2.0 if a.gated else 1.0
    q, kv = float(a.q_width), float(a.kv_width)
    out = {"attention": (T * (fused * h / sp_div + cast * q / tp), T * cast * (h / sp_div + (q + 2 * kv) / tp)),
           "dense_mlp": (T * (fused * h / sp_div + fused * a.ffn_hidden / tp),
                         T * cast * (h / sp_div + glu * a.ffn_hidden / tp))}
    f = s.expert_ffn / etp
    out["experts"] = (copies * cast * (h + f), copies * cast * (h + glu * f))
    sf = float(s.shared_ffn)
    out["shared"] = (T * cast * (h / sp_div + sf / tp), T * cast * (h / sp_div + glu * sf / tp))
    return out


def mla_layer_compute(m: MoEModel, tokens: Array, seq: int, tp: Array, modules: Array, dev: DeviceSpec,
                      peak: float) -> tuple[Array, Array]:
    """Forward / backward seconds of MLA's projections and attention core on one GPU, per micro-batch.

    ``tokens``: the TP group's tokens (mbs x seq / cp).  The core runs at the catalogue's fused-attention
    fractions (16-bit in every recipe), the backward at 2.5 x the forward's FLOPs (as the dense
    attention); recomputing ``mla_up_proj`` reruns the two up projections, ``core_attn`` the core.
    Where the catalogue measured the model's head dims on this device (``MLA_ATTENTION``: cuDNN at DeepSeek-V3's
    192 / 128), the core runs at those rates at the job's sequence instead, the backward counted as that benchmark
    counts it: (3 qk + 2 v) / (qk + v) x the forward's FLOPs.  Context parallelism takes the same rates (as the
    fractions before it: no CP-specific measurement exists, and pricing CP apart would favour one side unsourced).
    """
    shapes = mla_gemms(m, tokens, tp)
    gf, gb = flops.fwd_bwd_gemm_times(shapes, dev, peak)
    core = mla_attention_fwd_flops(m, tokens, seq, tp)
    bf = dev.peak("bf16")
    cf = core / (bf * float(dev.attn_fwd_fraction or 0.0))
    cb = TRAINING_STACK.flash_bwd_ratio * core / (bf * float(dev.attn_bwd_fraction or 0.0))
    assert m.mla is not None
    tab = MLA_ATTENTION.get(dev.name)
    x = m.mla
    if tab is not None and (x.qk_head_dim, x.v_head_dim) == (tab.head_dim_qk, tab.head_dim_v):
        ratio = (3.0 * x.qk_head_dim + 2.0 * x.v_head_dim) / (x.qk_head_dim + x.v_head_dim)
        cf = core / tab.rate("fwd", seq)
        cb = ratio * core / tab.rate("bwd", seq)
    ups = (1, 3) if m.mla.q_lora_rank else (2,)  # mla_gemms' order: [q_down, q_up | q], kv_down, kv_up, o
    up_f = sum((gf[i] for i in ups), np.zeros_like(cf))
    fwd = sum(gf) + cf
    bwd = sum(gb) + cb + np.where(_bit(modules, "mla_up_proj"), up_f, 0.0) + np.where(_bit(modules, "core_attn"),
                                                                                      cf, 0.0)
    return fwd, bwd


# ----------------------------------------------------------------------------------------------- placement

def rank_layer_counts(moe_layers: tuple[bool, ...], layers_per_stage: tuple[int, ...],
                      pp: int) -> tuple[Array, Array]:
    """(dense layers, MoE layers) of each pipeline rank: virtual stage i (model order) runs on rank i % pp.

    Where the dense layers fall matters (DeepSeek's first three): rank 0's first chunk holds them.
    """
    if sum(layers_per_stage) != len(moe_layers):
        raise ValueError("layers_per_stage must sum to the model's layers")
    dense, sparse = np.zeros(pp), np.zeros(pp)
    start = 0
    for i, n in enumerate(layers_per_stage):
        chunk = moe_layers[start:start + n]
        sparse[i % pp] += sum(chunk)
        dense[i % pp] += n - sum(chunk)
        start += n
    return dense, sparse


def attention_params(m: MoEModel, tp: Array) -> Array:
    """Parameters of one layer's attention on one TP shard (with its input norm).

    MLA: the down projections (to the Q latent; to the KV latent and the shared rotary key) are
    duplicated over TP, the up and output projections split by heads; the two latents have norms.
    GQA: Q, K, V and the output projection split by heads.
    """
    a, h = m.arch, m.arch.hidden
    if m.mla is None:
        return (h * (a.q_width + 2 * a.kv_width) + a.q_width * h) / tp + h
    x, heads = m.mla, a.heads
    down = (h * x.q_lora_rank if x.q_lora_rank else 0) + h * (x.kv_lora_rank + x.qk_rope_head_dim)
    up = (x.q_lora_rank if x.q_lora_rank else h) * heads * x.qk_head_dim \
        + x.kv_lora_rank * heads * (x.qk_nope_head_dim + x.v_head_dim) + heads * x.v_head_dim * h
    norms = h + x.q_lora_rank + x.kv_lora_rank
    return down + up / tp + norms


def moe_dense_params(m: MoEModel, tp: Array) -> Array:
    """Parameters of one MoE layer outside the routed experts, on one TP shard: the router (replicated,
    experts x hidden), the shared experts (a gated MLP split over TP) and the pre-MLP norm."""
    s, h = m.moe, m.arch.hidden
    shared = (3 if m.arch.gated else 2) * h * s.shared_ffn
    return s.num_experts * h + shared / tp + h


def dense_mlp_params(m: MoEModel, tp: Array) -> Array:
    """Parameters of a dense layer's MLP on one TP shard (with its pre-MLP norm)."""
    return (3 if m.arch.gated else 2) * m.arch.hidden * m.arch.ffn_hidden / tp + m.arch.hidden


def stage_layer_kinds(moe_layers: tuple[bool, ...], stage_layers: Array) -> tuple[Array, Array]:
    """(dense, MoE) layers of every virtual stage of every candidate, vectorised.

    ``stage_layers[i, s]``: decoder layers of virtual stage s (model order) of candidate i, 0 past its
    pp x vp stages.  Stage s holds the layers from sum(stage_layers[i, :s]) on, so its MoE count is a
    difference of the pattern's prefix sums at the stage boundaries.
    """
    prefix = np.concatenate([[0], np.cumsum(np.asarray(moe_layers, dtype=np.int64))])
    sl = np.asarray(stage_layers, dtype=np.int64)
    end = np.cumsum(sl, axis=1)
    if (end[:, -1] > len(moe_layers)).any():
        raise ValueError("a candidate's stages hold more layers than the model has")
    start = end - sl
    sparse = (prefix[end] - prefix[start]).astype(float)
    return sl - sparse, sparse
