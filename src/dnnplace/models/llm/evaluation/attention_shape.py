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
log-linear in the length, outside them clamped.  The head count of the table's runs (64 or 128 query
heads) is not rescaled to a TP shard's, and a sliding-window layer is priced at the rates of the
kernels its chunks would run without the window (its FLOPs count the window; the only windowed
rows published are GPT-OSS's, head dim 64 with a 128-token window, not used here).
"""

from __future__ import annotations

import numpy as np

from dnnplace.core.catalogue import AttentionTable, DeviceSpec

__all__ = ["cp_attention_rates", "table_rate"]

Array = np.ndarray


def table_rate(table: AttentionTable, mask: str, part: str, seq: Array | float) -> Array:
    """FLOP/s of the ``mask`` ("causal" / "full") ``part`` ("fwd" / "bwd") kernel at ``seq`` tokens.

    Log-linear between the measured lengths, clamped outside them; a mask the table lacks takes the
    causal rates (lower than the unmasked ones wherever both are measured).
    """
    col = table.rates.get((mask, part)) or table.rates[("causal", part)]
    lengths = np.array(sorted(col), dtype=float)
    rates = np.array([col[int(n)] for n in lengths])
    x = np.clip(np.log2(np.asarray(seq, dtype=float)), np.log2(lengths[0]), np.log2(lengths[-1]))
    return np.interp(x, np.log2(lengths), rates)


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
