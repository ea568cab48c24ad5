"""Memory per GPU: parameters, mixed-precision Adam state, activations (Korthikanti et al.), buffers.

Activations follow Korthikanti et al., *Reducing Activation Recomputation in Large
Transformer Models* (MLSys 2023), Sec. 4, tensor by tensor, so that for a GPT-shaped
layer (MHA, 4h GELU MLP, dropout, no flash attention) one layer stores exactly
s b h (34 + 5 a s / h) / t bytes with TP + sequence parallelism, 34 s b h / t with
selective recomputation and 2 s b h (the layer input; / t when the input is
sequence-parallel) with full recomputation.  The generalisation:

* GQA: K and V are kv_width wide, not h;  q width heads x head_dim.
* Gated MLP (SwiGLU): the activation's input is the 2 x ffn wide fc1 output.
* Flash attention (what Transformer Engine runs) never stores the a s^2 score,
  softmax or dropout tensors; it keeps the fp32 log-sum-exp (4 s b a / t bytes)
  and the output O (already counted as the out projection's input).
* No dropout (Llama-style configs): the three dropout masks are not stored.
"""

from __future__ import annotations

import numpy as np

from dnnplace.core.catalogue import TRAINING_STACK
from dnnplace.models.llm.spec import TransformerArch

Array = np.ndarray

#: Mixed-precision bytes per parameter: bf16 weights, fp32 main gradients (NeMo's
#: grad_reduce_in_fp32), fp32 master copy + Adam's two fp32 moments (Megatron's
#: theoretical_memory_usage.py: 18 bytes/param without, 6 + 12/dp with the distributed optimizer).
WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = (TRAINING_STACK.weight_bytes, TRAINING_STACK.grad_bytes,
                                             TRAINING_STACK.optimizer_bytes)
#: Allowance for what no formula sees: CUDA context (~0.5 GB), cuBLAS workspaces, NCCL channel
#: buffers of the TP/CP/DP/PP communicators and Transformer Engine's comm-overlap buffers: 2 GB;
#: plus 5 % of activation memory for the caching allocator's fragmentation (PyTorch CUDA
#: semantics notes: blocks are rounded and split, so live bytes never reach the reserved total).
BUFFER_FIXED_BYTES, FRAGMENTATION = TRAINING_STACK.buffer_fixed_bytes, TRAINING_STACK.fragmentation
#: Megatron's DDP bucket: 40 M parameters (distributed.DistributedDataParallelConfig.bucket_size).
BUCKET_PARAMS = TRAINING_STACK.bucket_params
#: Bytes per logit live at the end of the forward, by cross-entropy implementation (catalogue ce_logit_bytes).
CE_LOGIT_BYTES = TRAINING_STACK.ce_logit_bytes


def layer_params(arch: TransformerArch, tp: Array) -> Array:
    """Parameters of one layer on one TP shard (matrices sharded, the two norms replicated)."""
    h = arch.hidden
    mats = h * (arch.q_width + 2 * arch.kv_width) + arch.q_width * h + ((3 if arch.gated else 2)
                                                                       * h * arch.ffn_hidden)
    norms = (2 if arch.norm == "rms" else 4) * h
    return mats / tp + norms


def embedding_params(arch: TransformerArch, tp: Array) -> Array:
    """Parameters of the first pipeline stage beyond its layers: vocab-parallel embedding (+ positions)."""
    pos = arch.max_position * arch.hidden if arch.position == "learned" else 0
    return arch.vocab * arch.hidden / tp + pos


def head_params(arch: TransformerArch, tp: Array, pp: Array) -> Array:
    """Parameters of the last stage beyond its layers: final norm + LM head (a tied head is a copy when pp > 1)."""
    head = arch.vocab * arch.hidden / tp
    if arch.tied_embeddings:
        head = np.where(pp > 1, head, 0.0)
    return head + arch.hidden


def head_activation_bytes(arch: TransformerArch, tokens: Array, tp: Array, sp_div: Array,
                          cross_entropy: str = "megatron") -> Array:
    """Bytes the last stage holds beyond its layers at the end of the forward, per micro-batch.

    The final norm's input and the LM head's input (16-bit, hidden wide, sequence-parallel shards) and the
    vocab-parallel logits as the cross entropy keeps them: Megatron-Core's casts them to an fp32 copy beside
    the 16-bit output (6 bytes per logit), Transformer Engine's keeps the 16-bit logits only and writes the
    gradient into them (2 bytes; its 3 fp32 values per token are left out, a vocab-th of that).
    ``tokens`` are the micro-batch's tokens on this GPU (mbs x seq / cp)."""
    return 4.0 * tokens * arch.hidden / sp_div + CE_LOGIT_BYTES[cross_entropy] * tokens * arch.vocab / tp


def layer_activation_bytes(arch: TransformerArch, seq: Array, mbs: Array, tp: Array, sp: Array,
                           recompute: Array, *, flash: bool = True, dropout: bool | None = None) -> Array:
    """Bytes one layer keeps for its backward pass, per micro-batch (module docstring).

    ``seq`` is the sequence length on this GPU (seq / cp), ``recompute`` 0 none, 1 selective, 2 full.
    """
    drop = arch.dropout if dropout is None else dropout
    h, a = arch.hidden, arch.heads
    sb = seq * mbs
    sp_div = np.where(sp, tp, 1)
    outside = 2.0 * sb * h / sp_div  # one 16-bit hidden-sized tensor outside the TP region
    mask = np.where(drop, sb * h / sp_div, 0.0)  # a 1-byte dropout mask
    attn_in = 2.0 * outside + 2.0 * sb * (arch.q_width + 2 * arch.kv_width) / tp  # LN1 in, QKV in, Q K V
    out_in = 2.0 * sb * arch.q_width / tp
    if flash:
        core = 4.0 * sb * a / tp
    else:
        core = (5.0 if drop else 2.0) * a * seq * sb / tp  # softmax 2, its dropout mask 1 and output 2
    mlp = 2.0 * outside + 2.0 * sb * ((2 if arch.gated else 1) * arch.ffn_hidden) / tp \
        + 2.0 * sb * arch.ffn_hidden / tp  # LN2 in, fc1 in, activation in, fc2 in
    none = attn_in + core + out_in + mask + mlp + mask
    return np.where(recompute == 0, none, np.where(recompute == 1, none - core, outside))


def inflight_chunks(rank: Array, pp: Array, vp: Array, m: Array) -> Array:
    """Micro-batch chunks whose activations pipeline rank ``rank`` holds at its peak.

    1F1B: min(m, pp - rank) micro-batches.  Interleaved (Megatron's warm-up count):
    min(m vp, 2 (pp - rank - 1) + (vp - 1) pp + 1) chunk-micro-batches, each holding
    layers / vp layers -- for rank 0 that is pp (1 + (pp - 1)/(pp vp)) micro-batches' worth,
    Megatron's interleaving memory penalty.
    """
    one_f1b = np.minimum(m, pp - rank) * vp
    inter = np.minimum(m * vp, 2 * (pp - rank - 1) + (vp - 1) * pp + 1)
    return np.where(vp > 1, inter, one_f1b)


def inflight_layers(rank: Array, pp: Array, vp: Array, m: Array, chunk_layers: Array) -> Array:
    """Layer-activations pipeline rank ``rank`` holds at its peak, chunk by chunk.

    ``chunk_layers[..., k]``: layers of the rank's chunk k.  Megatron issues the warm-up forwards chunk
    after chunk in groups of pp micro-batches (forward j runs chunk (j mod pp vp) // pp), so of the
    ``inflight_chunks`` forwards in flight, chunk k has G pp + clip(R - k pp, 0, pp) (G, R = divmod(n, pp vp)),
    each counted at its own size.  1F1B: min(m, pp - rank) micro-batches of the rank's layers.
    """
    n = inflight_chunks(rank, pp, vp, m)
    group = pp * vp
    full, rest = n // group, n % group
    k = np.arange(chunk_layers.shape[-1])
    count = full[..., None] * pp[..., None] + np.clip(rest[..., None] - k * pp[..., None], 0, pp[..., None])
    interleaved = (count * chunk_layers).sum(axis=-1)
    one_f1b = np.minimum(m, pp - rank) * chunk_layers.sum(axis=-1)
    return np.where(vp > 1, interleaved, one_f1b)
