"""Routing skew: how much longer the slowest expert-parallel rank's experts run than under forced balance.

A router trained with an auxiliary load-balancing loss does not spread tokens evenly: some experts are hot, and
the expert-parallel rank holding the hottest ones sets every MoE layer's pace.  The planner prices this as one
factor per candidate on the routed experts' compute (GEMMs and activation) of the slowest rank:

* **measured** -- the ratio of the measured fused-MoE layer time under the routing's token distribution to the
  balanced one, at the row's own shapes (tokens entering the expert-parallel group, hidden, expert ffn / etp,
  top-k, experts, etp, ep, data type), from aiconfigurator-core's ``moe_perf`` tables
  (:meth:`~dnnplace.kernels.costs.KernelCosts.moe`).  Their collector (aiconfigurator ``collector/helper.py``,
  ``_generate_power_law_distribution``) draws each expert's load from a power law of exponent alpha on
  [1, 0.8 x tokens], scales the loads to tokens x top-k and swaps the most loaded ep rank onto the measured GPU:
  the table times the slowest rank.  Tokens outside the measured range keep the ratio at the nearest measured
  point (both lookups are extrapolated alike).  The recipe's data type is read first, then BF16 and the other
  measured types (:data:`FALLBACK_DTYPES`: the skew is a property of the load, which the data type does not
  change).
* **rule** -- where the device or the shape has no table: the expected load of the most loaded of ep ranks over
  the mean, under that same generator (:func:`rule_factor`: its inverse-CDF draw, :data:`DRAWS` draws of a fixed
  seed, so the answer is the same on every run), taken as the time ratio (the expert GEMMs of training are
  compute-bound at thousands of rows per expert).

``balanced`` (Megatron-Core's ``--moe-router-force-load-balancing``) keeps the uniform-multinomial
``moe.load_factor``; no constant here is fitted to a published step time.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from dnnplace.core.catalogue import DeviceSpec
from dnnplace.kernels import kernel_costs
from dnnplace.kernels.sources import ROOFLINE
from dnnplace.models.llm.moe_knobs import ROUTINGS

__all__ = ["ALPHAS", "DRAWS", "FALLBACK_DTYPES", "rule_factor", "skew_factors", "table_factor"]

Array = np.ndarray
#: Each skewed routing's power-law exponent (the tables' ``power_law_<alpha>`` distributions).
ALPHAS = {"power-law-1.01": 1.01, "power-law-1.2": 1.2}
#: The data types whose skew ratio stands in for a recipe's own where its shape was measured only in those
#: (BF16 first; GPT-OSS's experts are measured only as w4a16_mxfp4): the skew is the load's, not the format's.
FALLBACK_DTYPES = ("bf16", "fp8", "fp8_block", "fp4", "w4a16_mxfp4")
#: Draws of the collector's generator the rule averages (seed 0): the mean's sampling error is below 1 %.
DRAWS = 512


@functools.cache
def rule_factor(tokens: int, experts: int, topk: int, ep: int, alpha: float) -> float:
    """Expected load of the most loaded of ``ep`` ranks over the mean rank's, when each of ``experts`` experts'
    load is drawn from aiconfigurator's power law (density ~ x^-alpha on [1, 0.8 tokens] when tokens x topk
    exceeds the experts, else on [0.01, 2]) and rank r holds experts r E/ep .. (r+1) E/ep - 1."""
    if ep <= 1:
        return 1.0
    lo, hi = (1.0, 0.8 * tokens) if tokens * topk > experts else (0.01, 2.0)
    u = np.random.default_rng(0).random((DRAWS, experts))
    a = 1.0 - alpha
    x = ((hi ** a - lo ** a) * u + lo ** a) ** (1.0 / a)
    ranks = x.reshape(DRAWS, ep, experts // ep).sum(axis=2)
    return float(np.mean(ranks.max(axis=1) / ranks.mean(axis=1)))


def _table_dtypes(recipe: Any) -> tuple[str, ...]:
    """The kernel data types whose MoE tables could time this recipe's experts, the recipe's own first."""
    fmt = str(getattr(recipe, "gemm_format", "bf16"))
    own = "fp8_block" if fmt == "fp8" and getattr(recipe, "scaling", "") == "block" else fmt
    return tuple(dict.fromkeys((own, *FALLBACK_DTYPES)))


def table_factor(device: str, tokens: Array, hidden: int, ffn: int, topk: int, experts: int, etp: int, ep: int,
                 routing: str, dtypes: tuple[str, ...] = ("bf16",)) -> Array | None:
    """Measured skewed / balanced MoE layer time at ``tokens`` (the expert-parallel group's), or None where the
    device's tables lack this shape for every one of ``dtypes``."""
    try:
        kc = kernel_costs(device)
    except Exception:  # noqa: BLE001  a device the kernel layer does not know: no tables
        return None
    if kc.system is None:
        return None
    t = np.asarray(tokens, dtype=float)
    for dtype in dtypes:
        bal = kc.moe(t, hidden, ffn, topk, experts, etp, ep, dtype, "balanced")
        if (bal.source == ROOFLINE).any():
            continue
        sk = kc.moe(t, hidden, ffn, topk, experts, etp, ep, dtype, routing)
        if (sk.source == ROOFLINE).any():
            continue
        return np.asarray(sk.seconds / np.where(bal.seconds > 0, bal.seconds, 1.0))
    return None


def skew_factors(m: Any, t: Array, ep: Array, etp: Array, routing: Array | None, dev: DeviceSpec,
                 recipe: Any = None) -> tuple[Array | None, list[str]]:
    """Per candidate: the slowest rank's expert-compute factor under its routing (0 where balanced: the caller
    keeps its load_factor; None when every candidate is balanced), and how each distinct factor was priced
    ("table" or "rule")."""
    if routing is None or not np.any(routing):
        return None, []
    n = max(np.size(t), np.size(ep), np.size(routing))
    out = np.zeros(n)
    s = m.moe
    hidden, e, k = int(m.arch.hidden), int(s.num_experts), int(s.top_k)
    tokens = np.broadcast_to(np.asarray(t, dtype=float) * ep * etp, (n,))
    ep_, etp_ = np.broadcast_to(ep, (n,)).astype(np.int64), np.broadcast_to(etp, (n,)).astype(np.int64)
    r = np.broadcast_to(np.asarray(routing), (n,)).astype(np.int64)
    how: list[str] = []
    for ri, p, q in {(int(a), int(b), int(c)) for a, b, c in zip(r, ep_, etp_) if a}:
        rows = (r == ri) & (ep_ == p) & (etp_ == q)
        name = ROUTINGS[ri]
        f = table_factor(dev.name, tokens[rows], hidden, int(s.expert_ffn // q), k, e, q, p, name,
                         _table_dtypes(recipe))
        if f is None:
            uniq, back = np.unique(np.maximum(np.rint(tokens[rows]), 1.0), return_inverse=True)
            f = np.array([rule_factor(int(u), e, k, p, ALPHAS[name]) for u in uniq])[back]
            how.append("rule")
        else:
            how.append("table")
        out[rows] = f
    return out, how
