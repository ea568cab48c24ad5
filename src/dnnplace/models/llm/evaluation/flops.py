"""Compute: model FLOPs (the recipes' MFU formula), executed GEMM / attention FLOPs and their times.

Every function takes numpy arrays (one entry per candidate configuration) so the
scalar evaluator and the search run the very same code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from dnnplace.core.catalogue import TRAINING_STACK, DeviceSpec
from dnnplace.kernels.roofline import gemm_format, gemm_time
from dnnplace.models.llm.evaluation import kernel_ledger
from dnnplace.models.llm.evaluation.attention_shape import cp_attention_rates
from dnnplace.models.llm.spec import TransformerArch

Array = np.ndarray


def model_flops_per_step(arch: TransformerArch, seq: int, global_batch: int) -> float:
    """Model FLOPs of one step, NeMo's formula generalised from the architecture.

    Per token and layer: 6 x (matrix parameters) for the projections
    (12h^2 + 12 h^2 kv/heads for Q,K,V,O when q width = h; 18 h ffn gated, 12 h ffn not),
    12 s h for attention (non-causal, 3x a forward of 4 s h), and 6 V h once for the LM head.
    For Llama this is gbs s L h^2 (12 + 12 kv/a + 18 f/h + 12 s/h + 6 V/(L h)) exactly.
    A sliding-window layer counts its key span min(window, s) in place of s, in the same
    non-causal convention (NeMo's formulas have no window term; this is ours, docs/llm_planner.md).
    """
    h, L = arch.hidden, arch.num_layers
    proj = 2 * h * arch.q_width + 2 * h * arch.kv_width  # Q and O, K and V
    mlp = (3 if arch.gated else 2) * h * arch.ffn_hidden
    spans = (L - arch.windowed_layers) * seq + arch.windowed_layers * min(arch.sliding_window or seq, seq)
    per_token = L * 6 * (proj + mlp) + 12 * spans * arch.q_width + 6 * arch.vocab * h
    return float(global_batch) * seq * per_token


def executed_flops_per_step(arch: TransformerArch, seq: int, global_batch: int) -> float:
    """The FLOPs of one step as the kernels the time model prices run them: :func:`model_flops_per_step` with
    causal attention counting the scores it computes, w - w(w-1)/(2 seq) keys per query for a span of w keys
    (w = seq without a window: (seq + 1) / 2; Megatron-Bridge's exact mean, as the MoE count uses).

    NeMo's dense formula counts every score (non-causal) while the flash-attention kernel priced is causal,
    so at long sequences its MFU passes 100 %; the estimate's MFU divides this count instead, the convention
    of what is timed, and so stays at or below the peak (issue 45, W6)."""
    h, L = arch.hidden, arch.num_layers
    proj = 2 * h * arch.q_width + 2 * h * arch.kv_width
    mlp = (3 if arch.gated else 2) * h * arch.ffn_hidden

    def causal(w: int) -> float:
        return w - w * (w - 1) / (2.0 * seq)

    window = min(arch.sliding_window or seq, seq)
    spans = (L - arch.windowed_layers) * causal(seq) + arch.windowed_layers * causal(window)
    per_token = L * 6 * (proj + mlp) + 12 * spans * arch.q_width + 6 * arch.vocab * h
    return float(global_batch) * seq * per_token


def layer_gemms(arch: TransformerArch, tokens: Array, tp: Array) -> list[tuple[Array, Array, Array]]:
    """(M, N, K) of one layer's forward GEMMs on one TP shard: QKV, out projection, MLP in, MLP out."""
    h, f = arch.hidden, arch.ffn_hidden
    hf = np.full_like(tokens, float(h))
    return [(tokens, (arch.q_width + 2 * arch.kv_width) / tp, hf),
            (tokens, hf, arch.q_width / tp),
            (tokens, (2 if arch.gated else 1) * f / tp, hf),
            (tokens, hf, f / tp)]


#: fp32 main_grad read + written by the weight-gradient GEMM's epilogue (beta = 1), bytes per element.
WGRAD_OUT_BYTES = TRAINING_STACK.wgrad_out_bytes


def fwd_bwd_gemm_times(shapes: list[tuple[Array, Array, Array]], dev: DeviceSpec, peak: float,
                       fwd_sms: Sequence[Array | float | None] | None = None) -> tuple[list[Array], list[Array]]:
    """Per GEMM: forward time, and backward time (data gradient m x k plus weight gradient k x n).

    Weight gradients accumulate into the fp32 main_grad (gradient_accumulation_fusion).  ``fwd_sms[i]``:
    the SMs forward GEMM i may use (an overlapped reduce-scatter's SM margin), None for all of them.
    """
    sms = fwd_sms or [None] * len(shapes)
    fwd = [priced_gemm(m, n, k, dev, peak, sms=u) for (m, n, k), u in zip(shapes, sms)]
    bwd = [priced_gemm(m, k, n, dev, peak) + priced_gemm(k, n, m, dev, peak, WGRAD_OUT_BYTES) for m, n, k in shapes]
    return fwd, bwd


def priced_gemm(m: Array, n: Array, k: Array, dev: DeviceSpec, peak: float, out_bytes: float = 2.0,
                sms: Array | float | None = None) -> Array:
    """Seconds of one GEMM: the catalogue's roofline, or, where the device's ``measured_kernels`` switch is on,
    the measured table of its format (:mod:`dnnplace.kernels`).

    The tables time a 16-bit output on every SM; a wider epilogue (the fp32 main_grad accumulation) adds its
    extra bytes at streaming bandwidth, and an SM margin scales the time by the SMs taken away, as the
    roofline does.  Backward GEMMs are priced at their own (transposed) shapes, which the tables measure.
    """
    if not kernel_ledger.uses_tables(dev, "dense_gemm"):
        t = gemm_time(m, n, k, dev, peak, out_bytes, sms=sms)
        kernel_ledger.note("dense_gemm", t)
        return t
    from dnnplace.kernels import kernel_costs

    priced = kernel_costs(dev.name).gemm(m, n, k, gemm_format(dev, peak))
    t = priced.seconds
    hbm = dev.hbm_bandwidth * float(dev.hbm_fraction or 0.0)
    t = t + max(out_bytes - 2.0, 0.0) * m * n / hbm
    if sms is not None:
        t = t * dev.sm_count / np.minimum(np.asarray(sms, dtype=float), dev.sm_count)
    kernel_ledger.note("dense_gemm", t, priced.source)
    return t


def causal_keys(seq: int, window: int = 0) -> float:
    """Keys a query of a causal layer sees on average: seq / 2, or with a sliding window w < seq
    (query i sees min(i, w) keys) w - w^2 / (2 seq); the same continuous count at w = seq."""
    if window and window < seq:
        return window - window * window / (2.0 * seq)
    return seq / 2.0


def attention_keys(arch: TransformerArch, seq: int) -> float:
    """Keys per query averaged over the layers (windowed layers at their window, the rest causal)."""
    win = arch.windowed_layers
    return ((arch.num_layers - win) * causal_keys(seq) + win * causal_keys(seq, arch.sliding_window)) \
        / arch.num_layers


def attention_fwd_flops(arch: TransformerArch, tokens: Array, seq: int, tp: Array) -> Array:
    """Executed causal forward FLOPs of one layer's attention core on one GPU (averaged over the layers).

    ``tokens`` queries (the micro-batch's share of the sequence under context
    parallelism, load-balanced) each see on average :func:`attention_keys` keys (seq/2
    when every layer is global): QK^T and AV cost 2 x tokens x keys x q_width each, split
    over the TP heads.  Sliding-window layers (Mistral v0.1, Gemma 2's alternate layers)
    see at most their window.
    """
    return 4.0 * tokens * attention_keys(arch, seq) * arch.q_width / tp


#: Flash attention's backward runs 5 matmuls of the forward's size against the forward's 2
#: (it recomputes QK^T): executed backward FLOPs = 2.5 x forward (Dao 2022, FlashAttention, Sec. 3.1).
FLASH_BWD_RATIO = TRAINING_STACK.flash_bwd_ratio


def attention_times(arch: TransformerArch, tokens: Array, seq: int, tp: Array, dev: DeviceSpec,
                    cp: Array | float = 1.0) -> tuple[Array, Array]:
    """Forward and backward seconds of one layer's fused attention (always 16-bit: FP8 recipes keep it).

    At the rates the device's measured table gives for the kernel shapes context parallelism hands
    the kernel (:func:`attention_shape.cp_attention_rates`); a device without a table at its catalogue
    fractions.
    """
    fwd = attention_fwd_flops(arch, tokens, seq, tp)
    rate_f, rate_b = cp_attention_rates(dev, seq, cp)
    f, b = fwd / rate_f, FLASH_BWD_RATIO * fwd / rate_b
    if not kernel_ledger.uses_tables(dev, "attention"):
        kernel_ledger.note("attention", f + b)
        return f, b
    # Measured: the prefill kernel at this shape (the tables time inference's forward kernel), layers with and
    # without a window weighted by their count; the backward keeps the catalogue's backward/forward ratio.
    # Context parallelism hands the kernel pieces the tables do not describe: those entries stay catalogue.
    from dnnplace.kernels import kernel_costs

    kc = kernel_costs(dev.name)
    batch = np.maximum(np.asarray(tokens, dtype=float) / seq, 1e-9)
    heads, kv = arch.heads / np.asarray(tp, dtype=float), arch.kv_heads / np.asarray(tp, dtype=float)
    win = arch.windowed_layers
    priced = kc.context_attention(batch, seq, heads, kv, arch.head_dim)
    meas, source = priced.seconds, priced.source
    if win:
        windowed = kc.context_attention(batch, seq, heads, kv, arch.head_dim, window=arch.sliding_window)
        meas = ((arch.num_layers - win) * meas + win * windowed.seconds) / arch.num_layers
        source = np.maximum(source, windowed.source)  # the less certain of the two
    single = np.asarray(cp, dtype=float) == 1.0
    f_out, b_out = np.where(single, meas, f), np.where(single, meas * (b / f), b)
    codes = np.where(single, source, kernel_ledger.CATALOGUE)
    kernel_ledger.note("attention", f_out + b_out, codes)
    return f_out, b_out


def elementwise_elements(arch: TransformerArch, tp: Array, sp_div: Array) -> tuple[Array, Array]:
    """16-bit elements read + written per token by one layer's memory-bound kernels (fwd, bwd).

    Forward: two norms (read x, write y: 2 each), RoPE on q and k (read, write),
    two residual adds (3 each), the MLP activation (gated: read 2 ffn write ffn; else 2 ffn).
    Backward: norm grads (read x and dy, write dx: 3 each), RoPE grads, the two residual
    gradient sums (3 each), activation grads (gated 5 ffn, else 3 ffn).
    ``sp_div`` = tp with sequence parallelism (norms and adds sharded), else 1.
    """
    h, f = arch.hidden, arch.ffn_hidden
    qk = 2.0 * (arch.q_width + arch.kv_width) / tp
    act_f, act_b = (3.0, 5.0) if arch.gated else (2.0, 3.0)
    fwd = 10.0 * h / sp_div + qk + act_f * f / tp
    bwd = 12.0 * h / sp_div + qk + act_b * f / tp
    return fwd, bwd


#: Bytes per logit moved by the vocab-parallel cross entropy: read the 16-bit logits, write fp32,
#: read for the max, read + write for exp, read for the sum (fwd 18); backward reads fp32 softmax and
#: writes the 16-bit gradient (6).  Counted from Megatron's vocab_parallel_cross_entropy passes.
CE_BYTES_FWD, CE_BYTES_BWD = TRAINING_STACK.ce_bytes_fwd, TRAINING_STACK.ce_bytes_bwd


def tp_overlap_sms(dev: DeviceSpec, generation: str, overlap: Array) -> Callable[[str], list[Array | None]]:
    """Per layer GEMM (QKV, proj, fc1, fc2), the SMs its forward may use, for GEMMs of a given format.

    Where TP communication is overlapped (``overlap``: TP > 1 with sequence parallelism, NeMo's
    tp_comm_overlap), Transformer Engine runs the reduce-scatters after the out projection and fc2 as
    pipelined / ring-exchange kernels with ``set_sm_margin``: those forward GEMMs get sm_count - margin SMs
    (catalogue ``TrainingStack.tp_overlap_sm_margin``).  The bulk overlaps of the backward take no margin.
    """
    def sms(fmt: str) -> list[Array | None]:
        proj, fc2 = TRAINING_STACK.sm_margin(generation, fmt)
        full = float(dev.sm_count)
        return [None, np.where(overlap, full - proj, full), None, np.where(overlap, full - fc2, full)]
    return sms
