"""Prefill/decode disaggregation (``serve --disaggregate``): prompts on some of the fleet's GPUs, decodes on the
others, the KV cache sent between them -- priced beside the plan, never instead of it.

Why a what-if beside the plan: prefill is compute-bound and decode bandwidth-bound, so on a fleet of several GPU
kinds one may suit each phase (issue 43: "optionally prefill/decode disaggregation onto different GPU types");
but vLLM's own documentation says disaggregation "does not improve throughput" in general, its KV connector
is experimental, and no measured disaggregated run checks this model, so the aggregated plan stays the plan
and the disaggregated deployment is shown with its gain and whether that gain exceeds the error band.

The model, one formula per part:

* **the split**: the fleet's GPU kinds into a prefill and a decode pool (every non-empty proper subset); a
  fleet of one kind by nodes (every subset up to :data:`MAX_NODE_SPLITS` nodes, else node prefixes), one node
  of one kind by GPU count (the first 1, 2, 4 ... GPUs prefill).
* **each pool** is searched by the aggregated search (:func:`~dnnplace.models.serving.search.search`) on its
  own GPUs, one stage per replica (``pp`` 1: vLLM's NixlConnector compatibility matrix lists TP, not PP):
  the prefill pool serves requests of ``isl`` prompt tokens and one output token (what a prefill instance
  samples, ``max_tokens=1`` in vLLM's proxy), the decode pool requests whose KV cache arrives (phase
  ``decode``: no prompt token computed, ``osl`` tokens decoded over a cache of ``isl`` + what they made).
* **the transfer**: ``isl`` tokens of every layer's KV bytes per request, over the link between the pools
  (the network between nodes, PCIe between GPU kinds in a node, NVLink within one kind), priced as the
  pipeline's sends are (:func:`~dnnplace.models.serving.cost.p2p_time`); each prefill replica sends its own.
* **the rate**: requests/s = min(prefill pool, decode pool, transfers); TTFT unloaded = the prefill
  replica's TTFT + the transfer + one decode step; TPOT = the decode pool's.
* **the proof**: per split, the bound is min over the three of each pool's search bound (and the transfer
  cap), the best split's value against the largest such bound over every split tried.

Engines: vLLM (NixlConnector, its proxy) and SGLang (``--disaggregation-mode``, its router); TensorRT-LLM,
llama.cpp and Hugging Face are refused in one line.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.cost import p2p_time
from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.fleet import Fleet, Gpu
from dnnplace.models.serving.load import fleet_defaults
from dnnplace.models.serving.spec import ServingConfig, ServingPlan, ServingProblem, Workload

__all__ = ["DISAGGREGATION_ENGINES", "MAX_NODE_SPLITS", "NONE_FITS", "NO_SPLIT", "Disaggregated", "best_disaggregated",
           "check_engine", "disaggregate", "pool_problems", "splits"]

#: What a plan carries when no disaggregated deployment fits any split.
NONE_FITS = "no disaggregated deployment fits: every split leaves a pool that holds no replica"
#: ... and when the fleet has no split at all.
NO_SPLIT = "one GPU cannot be split into a prefill and a decode pool"

#: The engines whose disaggregated launch is written (exporters.py): vLLM's NixlConnector, SGLang's PD mode.
DISAGGREGATION_ENGINES = ("vllm", "sglang")
#: A fleet of one GPU kind is split by every subset of its nodes up to this many nodes, by prefixes beyond.
MAX_NODE_SPLITS = 6


@dataclass(frozen=True)
class Disaggregated:
    """A disaggregated deployment and its prediction (rates in requests/s, times in ms)."""

    prefill: ServingConfig
    decode: ServingConfig
    prefill_rps: float
    decode_rps: float
    transfer_rps: float
    transfer_ms: float
    link: str
    requests_per_s: float
    output_tokens_per_s: float
    ttft_ms: float
    tpot_ms: float
    error_band: float
    status: str = "feasible"
    bound: float | None = None  # output tokens/s, over the disaggregated deployments tried
    gap: float | None = None
    splits: list[dict[str, Any]] = field(default_factory=list)
    split: str = ""  # which split this is (:func:`splits`' label)

    @property
    def limited_by(self) -> str:
        """Which part sets the rate: the prefill pool, the decode pool or the transfers."""
        rates = {"prefill pool": self.prefill_rps, "decode pool": self.decode_rps, "KV transfers": self.transfer_rps}
        return min(rates, key=lambda k: rates[k])


def check_engine(p: ServingProblem) -> None:
    """Refuse ``--disaggregate`` for an engine whose disaggregated launch is not written."""
    if p.engine.name not in DISAGGREGATION_ENGINES:
        raise DnnplaceError(f"--disaggregate: written for {' and '.join(DISAGGREGATION_ENGINES)} (vLLM's "
                            f"NixlConnector, SGLang's --disaggregation-mode), not for {p.engine.name}")


def pool_problems(p: ServingProblem) -> tuple[ServingProblem, ServingProblem]:
    """The prefill pool's problem (prompts of ``isl``, one token each: requests/s = its tokens/s) and the decode
    pool's (phase ``decode``), both offline: the pools are sized for throughput, the whole judged after.  A
    length distribution is priced at its mean request here (the aggregated plan prices its length-biased KV)."""
    wl = p.workload
    pre = dataclasses.replace(p, workload=Workload(wl.isl, 1))
    dec = dataclasses.replace(p, workload=Workload(wl.isl, wl.osl, phase="decode"))
    return pre, dec


def splits(f: Fleet) -> list[tuple[str, set[tuple[int, int]], set[tuple[int, int]]]]:
    """The prefill / decode splits tried (module docstring): (label, prefill GPUs, decode GPUs)."""
    every = {(g.node, g.index) for g in f.gpus}
    out: list[tuple[str, set[tuple[int, int]], set[tuple[int, int]]]] = []
    kinds = sorted({g.name for g in f.gpus})
    if len(kinds) >= 2:
        for k in range(1, len(kinds)):
            for chosen in itertools.combinations(kinds, k):
                pre = {(g.node, g.index) for g in f.gpus if g.name in chosen}
                out.append((f"prefill on {'+'.join(chosen)}, decode on the rest", pre, every - pre))
        return out
    nodes = [i for i, nd in enumerate(f.nodes) if nd.gpus]
    if len(nodes) >= 2:
        if len(nodes) <= MAX_NODE_SPLITS:
            chosen_sets = [c for k in range(1, len(nodes)) for c in itertools.combinations(nodes, k)]
        else:
            chosen_sets = [tuple(nodes[:k]) for k in range(1, len(nodes))]
        for picked in chosen_sets:
            pre = {(g.node, g.index) for g in f.gpus if g.node in picked}
            out.append((f"prefill on node(s) {','.join(str(n + 1) for n in picked)}", pre, every - pre))
        return out
    gpus: list[Gpu] = sorted(f.gpus, key=lambda g: g.index)
    c = 1
    while c < len(gpus):
        pre = {(g.node, g.index) for g in gpus[:c]}
        out.append((f"prefill on the first {c} GPU(s)", pre, every - pre))
        c *= 2
    return out


def _link(p: ServingProblem, pre: ServingConfig, dec: ServingConfig) -> str:
    """The link a prefill replica's KV crosses to the decode pool: the network when no decode replica shares its
    node, else PCIe between GPU kinds (or on a PCIe node), else NVLink; the slowest over the prefill replicas."""
    order = {"nvlink": 0, "pcie": 1, "network": 2}
    worst = "nvlink"
    for r in pre.replicas:
        node, gpu = r.stages[0].node, r.stages[0].gpu
        near = [d for d in dec.replicas if d.stages[0].node == node]
        if not near:
            link = "network"
        elif all(d.stages[0].gpu != gpu for d in near) or p.fleet.nodes[node].link == "pcie":
            link = "pcie"
        else:
            link = "nvlink"
        worst = max(worst, link, key=lambda x: order[x])
    return worst


def disaggregate(p: ServingProblem, pre: ServingConfig, dec: ServingConfig) -> Disaggregated:
    """The prediction of one disaggregated deployment (its status, bound and gap left for the search to fill)."""
    pp, dp = pool_problems(p)
    pe, de = evaluate(pp, pre), evaluate(dp, dec)
    if not pe.fits or not de.fits:
        why = pe.why if not pe.fits else de.why
        raise DnnplaceError(f"the disaggregated deployment does not fit: {why}")
    link = _link(p, pre, dec)
    first = pre.replicas[0].stages[0]
    nbytes = p.workload.isl * float(p.model.kv_per_gpu(1).sum())
    sent = float(p2p_time(first.gpu, nbytes, link, p.fleet.network_bandwidth, p.fleet.network_latency_s).seconds[0])
    if not math.isfinite(sent):
        raise DnnplaceError(f"the KV cache crosses the {link} between the pools, which has no figure for "
                            f"{first.gpu} (give the network in --fleet FILE.toml)")
    transfer_rps = len(pre.replicas) / sent if sent > 0 else math.inf
    prefill_rps, decode_rps = pe.requests_per_s, de.output_tokens_per_s / p.workload.osl
    rps = min(prefill_rps, decode_rps, transfer_rps)
    ttft = pe.ttft_ms + sent * 1e3 + de.tpot_ms
    return Disaggregated(pre, dec, prefill_rps, decode_rps, transfer_rps, sent * 1e3, link, rps,
                         rps * p.workload.osl, ttft, de.tpot_ms, max(pe.error_band, de.error_band))


def _pool(p: ServingProblem, gpus: set[tuple[int, int]], time_limit: float) -> tuple[ServingPlan, ServingProblem]:
    from dnnplace.models.serving.search import search

    fleet = p.fleet.only(lambda g: (g.node, g.index) in gpus)
    sub = dataclasses.replace(p, fleet=fleet, engine=fleet_defaults(p.engine, fleet))
    return search(sub, time_limit=time_limit, pp=1), sub


def best_disaggregated(p: ServingProblem, time_limit: float = 30.0) -> Disaggregated:
    """The disaggregated deployment that serves the most over :func:`splits`, with its status, bound and gap
    over that space (module docstring); none is one line saying why (no split, nothing fits, a transfer
    that cannot be priced)."""
    check_engine(p)
    t0 = time.monotonic()
    pre_p, dec_p = pool_problems(p)
    tried = splits(p.fleet)
    best: Disaggregated | None = None
    bound = 0.0
    complete = True
    rows: list[dict[str, Any]] = []
    for k, (label, pre_g, dec_g) in enumerate(tried):
        left = time_limit - (time.monotonic() - t0)
        if left <= 0:
            complete = False
            rows.append({"split": label, "output_tokens_per_s": None, "note": "not tried: time limit"})
            continue
        share = left / (2 * (len(tried) - k))
        pre_plan, _ = _pool(pre_p, pre_g, share)
        dec_plan, _ = _pool(dec_p, dec_g, share)
        # a pool search cut short (or one that kept replicas inside nodes on a large fleet) proves nothing more
        complete &= pre_plan.meta.get("complete") is not False and dec_plan.meta.get("complete") is not False
        if not pre_plan.config.replicas or not dec_plan.config.replicas:
            side = "prefill" if not pre_plan.config.replicas else "decode"
            rows.append({"split": label, "output_tokens_per_s": 0.0, "note": f"nothing fits the {side} pool"})
            continue
        try:
            d = disaggregate(p, pre_plan.config, dec_plan.config)
        except DnnplaceError as exc:  # a split that cannot be priced is said, not taken
            rows.append({"split": label, "output_tokens_per_s": None, "note": str(exc)})
            complete = False
            continue
        cap_pre = pre_plan.bound if pre_plan.bound is not None else math.inf
        cap_dec = dec_plan.bound / p.workload.osl if dec_plan.bound is not None else math.inf
        split_bound = min(cap_pre, cap_dec, d.transfer_rps) * p.workload.osl
        bound = max(bound, split_bound, d.output_tokens_per_s)
        rows.append({"split": label, "output_tokens_per_s": round(d.output_tokens_per_s, 3),
                     "limited_by": d.limited_by, "bound": round(split_bound, 3)})
        if best is None or d.output_tokens_per_s > best.output_tokens_per_s:
            best = dataclasses.replace(d, split=label)
    if best is None:
        other = [r["note"] for r in rows if r.get("note") and not str(r["note"]).startswith("nothing fits")]
        raise DnnplaceError(NO_SPLIT if not tried else f"no disaggregated deployment: {other[0]}" if other
                            else NONE_FITS)
    gap = (bound - best.output_tokens_per_s) / bound if bound > 0 else 0.0
    status = "optimal" if gap < 1e-9 and complete else "feasible"
    return dataclasses.replace(best, status=status, bound=bound, gap=gap, splits=rows)
