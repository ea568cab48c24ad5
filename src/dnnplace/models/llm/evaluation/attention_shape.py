"""Which fused-attention kernels a layer runs, and at what measured rate: causal, unmasked, CP-chunked.

The catalogue gives each device a table of cuDNN's fused attention throughput by mask and sequence
length (``DeviceSpec.attention``: NVIDIA's cudnn-frontend sdpa training benchmark, head dim 128).  Its
causal rates count useful work only, so they already carry the diagonal tiles a causal kernel computes
whole and the shorter kernels' lower efficiency -- what the old FlashAttention-3 length and causal-tile
factors estimated.

Context parallelism changes the shapes.  Transformer Engine's ``AttnFuncWithCPAndKVP2P`` splits each
sequence into 2 cp chunks, gives rank r chunks r and 2 cp - 1 - r (load balance), and runs one kernel
per ring step:

* step 0 (own K, V): a causal kernel over its 2 chunks, L = seq / cp queries and keys;
* each of the cp - 1 other steps: an *unmasked* kernel, either all L queries against the first chunk
  of the visiting K, V (L / 2 keys) or the second query chunk (L / 2) against all L keys.

Every step carries the same useful work (L^2 / 2 query-key pairs), so a layer's attention time is
W (1 / cp / causal(L) + (cp - 1) / cp / full(L / 2)).  The unmasked steps are priced at the square
kernel of the shorter side, L / 2 (the rate the table measures; a conservative choice for the step
with L queries, whose extra query tiles only fill more SMs).  Between measured lengths the rate is
log-linear in the length, above them clamped, and below them extended by the kernel's tile count
(:func:`short_kernel_scale`): a short kernel pays its per-tile fixed work over fewer tiles, so clamping
there (the shortest measured rate at any length) would make a high CP on a short sequence look free.
The head count of the table's runs (64 or 128 query
heads) is not rescaled to a TP shard's, and a sliding-window layer is priced at the rates of the
kernels its chunks would run without the window (its FLOPs count the window; the only windowed
rows published are GPT-OSS's, head dim 64 with a 128-token window, not used here).
"""

from __future__ import annotations

import numpy as np

from dnnplace.core.catalogue import TRAINING_STACK, AttentionTable, DeviceSpec

__all__ = ["cp_attention_rates", "short_kernel_scale", "table_rate"]

#: Query rows per thread block of the fused kernels (catalogue ``TRAINING_STACK.attn_query_tile``).
TILE = float(TRAINING_STACK.attn_query_tile)

Array = np.ndarray


def table_rate(table: AttentionTable, mask: str, part: str, seq: Array | float) -> Array:
    """FLOP/s of the ``mask`` ("causal" / "full") ``part`` ("fwd" / "bwd") kernel at ``seq`` tokens.

    Log-linear between the measured lengths, clamped above them, scaled by :func:`short_kernel_scale` below
    them; a mask the table lacks takes the causal rates (lower than the unmasked ones wherever both are
    measured).
    """
    key = (mask, part) if (mask, part) in table.rates else ("causal", part)
    col = table.rates[key]
    lengths = np.array(sorted(col), dtype=float)
    rates = np.array([col[int(n)] for n in lengths])
    seq = np.asarray(seq, dtype=float)
    x = np.clip(np.log2(seq), np.log2(lengths[0]), np.log2(lengths[-1]))
    inside = np.interp(x, np.log2(lengths), rates)
    if len(lengths) < 2:
        return inside
    scale = short_kernel_scale(seq, lengths[0], lengths[1], rates[0] / rates[1], key[0] == "causal")
    return np.where(seq < lengths[0], rates[0] * scale, inside)


def short_kernel_scale(seq: Array | float, l0: float, l1: float, ratio: float, causal: bool) -> Array:
    """Rate at ``seq`` < ``l0`` over the rate at ``l0``, from the kernel's tiles and the table's own slope.

    A kernel over n = L / TILE query tiles does useful work ~ n^2 (causal: n^2 / 2, but it runs its n
    diagonal tiles whole, n (n + 1) / 2) and pays a fixed cost per query tile (loading Q, writing O and the
    softmax statistics) worth k tiles of work, so its useful rate is R n / (n + c + k), c = 1 causal, 0
    unmasked.  k comes from the measured ``ratio`` = rate(l0) / rate(l1) of the two shortest lengths; a table
    whose rate does not rise there is clamped (scale 1); one that rises faster than this form allows (k
    unbounded) scales in proportion to the length.
    """
    c = 1.0 if causal else 0.0
    n0, n1 = l0 / TILE, l1 / TILE
    n = np.asarray(seq, dtype=float) / TILE
    if ratio >= 1.0:
        return np.ones_like(n)
    if ratio * n1 <= n0:
        return n / n0
    k = max((n0 * (n1 + c) - ratio * n1 * (n0 + c)) / (ratio * n1 - n0), 0.0)
    return (n / (n + c + k)) / (n0 / (n0 + c + k))


def cp_attention_rates(dev: DeviceSpec, seq: int, cp: Array | float = 1.0) -> tuple[Array, Array]:
    """Effective forward and backward FLOP/s of one layer's attention at sequence ``seq`` split over ``cp``.

    Module docstring: 1 / cp of the work at the causal rate of L = seq / cp tokens, the rest at the
    unmasked rate of L / 2.  A device without a table: its catalogue fractions of the BF16 peak.
    """
    cp = np.asarray(cp, dtype=float)
    if dev.attention is None:
        peak = dev.peak("bf16")
        one = np.ones_like(cp)
        return one * peak * float(dev.attn_fwd_fraction or 0.0), one * peak * float(dev.attn_bwd_fraction or 0.0)
    local = seq / cp
    out = []
    for part in ("fwd", "bwd"):
        causal = table_rate(dev.attention, "causal", part, local)
        full = table_rate(dev.attention, "full", part, local / 2.0)
        out.append(1.0 / (1.0 / (cp * causal) + (cp - 1.0) / (cp * full)))
    return out[0], out[1]
