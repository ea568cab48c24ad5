"""How a fused attention kernel's efficiency depends on the shape it is given: sequence chunks, causal tiles.

The catalogue's attention fractions are FlashAttention-3's forward at an 8k sequence.  Context
parallelism hands the kernel shorter pieces: Transformer Engine's ``AttnFuncWithCPAndKVP2P`` splits
each sequence into 2 x cp chunks and runs one kernel per ring step over seq / (2 cp) queries, and a
causal kernel computes its diagonal tiles whole.  Two shape effects, both from published figures:

* **length**: :data:`FA3_BY_SEQ` is FlashAttention-3's forward throughput on H100 by sequence length
  (pytorch/benchmark PR #2391, the catalogue's own source: B x S = 16k tokens, 16 heads of 128);
  :func:`length_factor` is the ratio to the 8k figure, log-linear between the measured lengths;
* **causal tiles**: with n = chunk / tile query tiles, a causal block computes n (n + 1) / 2 tiles for
  n^2 / 2 tiles of useful work: a factor n / (n + 1) on the useful FLOP rate (:func:`causal_tile_factor`).

Pure functions of the shapes; the cost model decides where they apply.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FA3_BY_SEQ", "FA3_TILE", "causal_tile_factor", "length_factor"]

Array = np.ndarray

#: FlashAttention-3 forward TFLOP/s on H100 SXM by sequence length (pytorch/benchmark PR #2391, d_head 128).
FA3_BY_SEQ: dict[int, float] = {512: 430.32, 1024: 517.099, 2048: 565.544, 4096: 590.233, 8192: 614.234,
                                16384: 620.73}
#: Query rows per tile of FlashAttention-3's Hopper forward kernel for head dim 128 (kBlockM = 128).
FA3_TILE = 128
_REFERENCE = 8192


def length_factor(seq: Array) -> Array:
    """Throughput at ``seq`` tokens per kernel relative to the 8k figure (clamped to the measured range)."""
    lengths = np.array(sorted(FA3_BY_SEQ), dtype=float)
    rates = np.array([FA3_BY_SEQ[int(s)] for s in lengths])
    x = np.clip(np.log2(np.asarray(seq, dtype=float)), np.log2(lengths[0]), np.log2(lengths[-1]))
    return np.interp(x, np.log2(lengths), rates) / FA3_BY_SEQ[_REFERENCE]


def causal_tile_factor(chunk: Array, tile: int = FA3_TILE) -> Array:
    """Useful / computed work of a causal block of ``chunk`` queries: n / (n + 1) with n = ceil(chunk / tile)."""
    n = np.ceil(np.asarray(chunk, dtype=float) / tile)
    return n / (n + 1)
