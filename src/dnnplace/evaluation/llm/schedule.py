"""Pipeline schedule: 1F1B and Megatron's interleaved 1F1B.

With per-micro-batch times S_r = F_r + B_r of pipeline rank r (all its chunks),
``m`` micro-batches and ``v`` chunks per rank:

    T = m max_r S_r + (sum_r S_r - max_r S_r) / v

The bottleneck rank runs all m micro-batches; the fill and drain cost the other
ranks' time once, cut by v when each rank's work is split into v interleaved chunks
(Narayanan et al., SC'21, Sec. 2.2).  For uniform stages (S_r = S) the bubble
T - m S is exactly (p-1) S / v, a fraction (p-1)/(v m) of the ideal m S; for v = 1
and uneven stages it is the classic (m-1) max + sum.
"""

from __future__ import annotations

import numpy as np

Array = np.ndarray


def pipeline_time(stage_max: Array, stage_sum: Array, m: Array, vp: Array) -> Array:
    """Seconds of the pipelined forward + backward of ``m`` micro-batches (docstring formula)."""
    return m * stage_max + (stage_sum - stage_max) / vp


def pp_exposed(t_p2p: Array, pp: Array, vp: Array, m: Array) -> Array:
    """Point-to-point time on the critical path.

    1F1B (v = 1): Megatron's send/recv are blocking, so each of the m + p - 2 steps of
    the critical path pays one forward and one backward transfer.  Interleaved:
    Megatron overlaps p2p with compute (overlap_p2p_comm), leaving the fill and drain,
    2 (p - 1) transfers.
    """
    steps = np.where(vp > 1, pp - 1, m + pp - 2)
    return np.where(pp > 1, 2.0 * steps * t_p2p, 0.0)
