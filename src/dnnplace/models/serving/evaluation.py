"""The serving model's one evaluator: memory, KV cache, throughput and latency of a deployment.

Why one: the solver's DP, the baselines and ``evaluate`` all price a deployment here, so a plan
and the baselines it is compared with share every formula.  Steady state of continuous batching:
each replica runs ``pp`` micro-batches in flight; a micro-batch's running sequences each decode a
token every step, prompt tokens arrive in the workload's ratio (isl : osl), and the pipeline advances
at its slowest stage.  A step carries whole prompts (or, beyond the token budget, budget-sized chunks),
not an even trickle of prompt tokens (:func:`steps`): below the budget the schedulers put a waiting
prompt into the next step whole (vLLM's and SGLang's chunked prefill split only what does not fit;
TensorRT-LLM does not split), so the mean step is a mix of steps with and without a prompt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dnnplace.models.serving.bands import prediction_band
from dnnplace.models.serving.cost import Iteration, LayerTimes, layer_times, layer_times_batch, send_seconds
from dnnplace.models.serving.memory import StageMemory, replica_memory, sampler_note
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingProblem, Stage, with_expert_parallel
from dnnplace.utils.owned_cache import make_room

__all__ = ["ReplicaEval", "ServingEvaluation", "at_load_of", "cached_times", "cached_times_batch", "evaluate",
           "evaluate_replica", "closed_loop", "expert_parallel_refusal", "held_tokens", "iteration",
           "link_between", "load_shares", "micro_batches", "prompt_lumps", "prompts_chunked",
           "seq_cap", "seq_tokens", "served_context", "slot_need", "slot_tokens", "steady_batch", "steps",
           "steps_many", "tp_refusal"]


def tp_refusal(p: ServingProblem, tp: int) -> str:
    """Why the engine refuses a TP group of ``tp`` for this model ("" when it takes it).

    Why: a plan at a TP the engine rejects at start-up is a confident wrong answer.  vLLM, SGLang and
    TensorRT-LLM shard attention heads (``num_attention_heads % tp == 0``) and either shard or replicate
    KV heads (one divides the other); llama.cpp's layer split and a Hugging Face device_map have no TP.
    """
    if tp == 1:
        return ""
    m = p.model
    if not p.engine.tensor_parallel:
        return f"{p.engine.name} places whole layers on each GPU: TP {tp} is not one of its modes (tp 1 only)"
    if m.heads % tp:
        return f"TP {tp} does not divide {m.name}'s {m.heads} attention heads ({p.engine.name} requires it)"
    kv = m.kv_heads
    if m.kv_shardable and kv > 0 and ((kv >= tp and kv % tp) or (kv < tp and tp % kv)):
        return f"TP {tp} neither divides nor is a multiple of {m.name}'s {kv} KV heads ({p.engine.name} requires one)"
    if m.expert_parallel and m.experts % tp:
        return (f"expert parallelism over TP {tp} does not divide {m.name}'s {m.experts} routed experts (each GPU "
                "holds experts / TP whole experts)")
    return ""


def expert_parallel_refusal(p: ServingProblem, tps: tuple[int, ...] = ()) -> str:
    """Why expert parallelism cannot be this problem's ("" when it can) at each TP of ``tps``: no experts, no TP
    group (llama.cpp, a device_map), or a TP not dividing the experts (:func:`tp_refusal` of the variant)."""
    if not p.model.experts:
        return f"{p.model.name} has no routed experts (a dense model)"
    if not p.engine.tensor_parallel:
        return f"{p.engine.name} places whole layers on each GPU; it has no TP group to spread the experts over"
    return next((why for t in tps if (why := tp_refusal(with_expert_parallel(p, True), t))), "")


def served_context(p: ServingProblem, kv_tokens: float, max_num_seqs: int | None = None) -> int:
    """The ``max_model_len`` a replica is launched with: the user's, else the model's -- capped, on an engine
    that refuses to start when its KV cache cannot hold one such request (vLLM), to the tokens it holds; on an
    engine whose slots split the cache (llama.cpp), to one slot's cells at ``max_num_seqs`` slots: no request
    longer than a slot runs."""
    if p.engine.capacity_policy == "slots" and max_num_seqs:
        return max(min(p.context, slot_tokens(p, kv_tokens, max_num_seqs)), 1)
    if p.max_model_len or not p.engine.max_len_must_fit:
        return p.context
    return max(min(p.context, int(kv_tokens)), 1)


def slot_need(p: ServingProblem) -> int:
    """Cells each slot must hold on an engine whose slots split the cache: the longest request, and the user's
    ``--max-model-len`` where one is given (a pinned context is a promise every slot keeps)."""
    return max(p.workload.max_len, p.max_model_len)


def prompts_chunked(p: ServingProblem, budget: int) -> bool:
    """Whether a replica splits prompts over steps: the engine's default, or -- where a request of the served
    context would not fit ``budget`` whole -- because its export turns chunked prefill on (TensorRT-LLM
    refuses such a request without it).  One rule for the export and the simulation of what it runs."""
    return p.engine.chunked_prefill or p.context > budget


def link_between(p: ServingProblem, a: Stage, b: Stage) -> str:
    """The link activations cross from stage ``a`` to ``b``: another node's, PCIe between GPU types, else the node's."""
    if a.node != b.node:
        return "network"
    if a.gpu != b.gpu or p.fleet.nodes[a.node].link == "pcie":
        return "pcie"
    return "nvlink"


@dataclass
class ReplicaEval:
    """One replica: memory per stage, KV tokens, the batch it runs, stage times and the rate it serves."""

    memory: list[StageMemory]
    kv_tokens: float
    concurrency: float
    stage_s: list[float]
    tokens_per_s: float
    tpot_s: float
    ttft_s: float
    fits: bool
    why: str
    sources: dict[str, int] = field(default_factory=dict)
    max_model_len: int = 0  # the context this replica serves (0: the problem's)


def micro_batches(p: ServingProblem, pp: int) -> int:
    """How many micro-batches a replica of ``pp`` stages keeps in flight: ``pp`` for a pipelined engine, one for
    an engine that runs each step through its devices in turn (``EngineRules.pipelined``)."""
    return pp if p.engine.pipelined else 1


def seq_cap(p: ServingProblem, pp: int, max_num_seqs: int) -> int:
    """The sequences a replica of ``pp`` stages may run at once under ``max_num_seqs``: per micro-batch for an
    engine that schedules each micro-batch on its own (TensorRT-LLM), else for all of them together (vLLM)."""
    return max_num_seqs * pp if p.engine.seqs_per_micro_batch else max_num_seqs


def held_tokens(p: ServingProblem) -> float:
    """KV tokens a running sequence holds on average: the prompt plus half the output (an engine that reserves
    a request's whole length before admitting it: ISL + OSL), length-biased over a distribution of lengths
    (:attr:`~dnnplace.models.serving.spec.Workload.held`).  One rule for the evaluator and the bound."""
    wl = p.workload
    if p.engine.capacity_policy == "slots":
        return float(slot_need(p))
    return wl.held_whole if p.engine.capacity_policy == "reserve" else wl.held


def seq_tokens(p: ServingProblem) -> int:
    """KV tokens the cache sets aside per running sequence: :func:`held_tokens` in whole blocks.  One rule for
    the evaluator's steady batch, the split DP's KV need and the bound."""
    return math.ceil(held_tokens(p) / p.block) * p.block


def slot_tokens(p: ServingProblem, kv_tokens: float, max_num_seqs: int) -> int:
    """KV cells each slot of an engine whose slots split the cache evenly (``capacity_policy`` ``slots``: llama.cpp
    without ``--kv-unified``) gets when the whole cache of ``kv_tokens`` is given to ``max_num_seqs`` slots: the
    cache padded down to the engine's multiple, split evenly.  One rule for the evaluator and the export."""
    pad = max(p.engine.kv_pad, 1)
    return int(kv_tokens) // pad * pad // max(max_num_seqs, 1)


def steady_batch(p: ServingProblem, kv_tokens: float, max_num_seqs: int) -> float:
    """Sequences running at steady state: the engine's limit, the KV cache at mean occupancy
    (:func:`held_tokens`, whole blocks), and the workload's own concurrency."""
    wl = p.workload
    c = min(float(max_num_seqs), math.floor(kv_tokens / seq_tokens(p)))
    if wl.concurrency is not None:
        c = min(c, float(wl.concurrency))
    return max(c, 0.0)


def _stage_time(p: ServingProblem, r: Replica, i: int, lo: int, hi: int, it: Iteration,
                src: dict[str, int]) -> float:
    s = r.stages[i]
    fw = p.engine.framework
    link = "pcie" if p.fleet.nodes[s.node].link == "pcie" else "nvlink"
    lt: LayerTimes = cached_times(p, s.gpu, s.tp, it, fw, link)
    for k, v in lt.sources.items():
        src[k] = src.get(k, 0) + v
    t = float(lt.per_layer[lo:hi].sum())
    if i == r.pp - 1:
        t += lt.head
    if i < r.pp - 1:
        nxt = r.stages[i + 1]
        lk = link_between(p, s, nxt)
        t += send_seconds(s.gpu, it.tokens * p.model.hidden * 2.0, lk, p.fleet.network_bandwidth,
                          p.fleet.network_latency_s)
    return t


#: Layer times by (model identity, GPU, TP, iteration shape, ...). Each entry holds its model, so the id in
#: its key cannot be reused by another model while the entry lives (a freed model's id can be).
_CACHE: dict[Any, tuple[Any, LayerTimes]] = {}
_CACHE_CAP = 50_000


def _key(p: ServingProblem, gpu: str, tp: int, it: Iteration, fw: str | None, link: str) -> tuple[Any, ...]:
    return (id(p.model), gpu, tp, round(it.decode, 3), round(it.kv_len, 1), round(it.prefill, 3), it.isl, fw, link,
            p.kv_dtype)


def cached_times(p: ServingProblem, gpu: str, tp: int, it: Iteration, fw: str | None, link: str) -> LayerTimes:
    key = _key(p, gpu, tp, it, fw, link)
    hit = _CACHE.get(key)
    if hit is None or hit[0] is not p.model:
        make_room(_CACHE, p.model, _CACHE_CAP)
        hit = _CACHE[key] = (p.model, layer_times(p.model, gpu, tp, it, fw, link, p.kv_dtype))
    return hit[1]


def cached_times_batch(p: ServingProblem, gpu: str, tp: int, its: list[Iteration], fw: str | None,
                       link: str) -> list[LayerTimes]:
    """:func:`cached_times` of many iterations: the ones not cached are priced in one kernel-layer call
    (:func:`layer_times_batch`, equal entry by entry), so a search prices a pipeline's batch grid at once."""
    keys = [_key(p, gpu, tp, it, fw, link) for it in its]
    missing: dict[Any, Iteration] = {}
    for k, it in zip(keys, its):
        hit = _CACHE.get(k)
        if (hit is None or hit[0] is not p.model) and k not in missing:
            missing[k] = it
    if missing and len(_CACHE) + len(missing) > _CACHE_CAP:
        make_room(_CACHE, p.model, _CACHE_CAP, len(missing))
        if not _CACHE:  # cleared whole: every key is priced, each at its first iteration
            missing = {k: it for k, it in reversed(list(zip(keys, its)))}
    if missing:
        priced = layer_times_batch(p.model, gpu, tp, list(missing.values()), fw, link, p.kv_dtype)
        for k, lt in zip(missing, priced):
            _CACHE[k] = (p.model, lt)
    return [_CACHE[k][1] for k in keys]


def iteration(p: ServingProblem, seqs_per_mb: float, budget: int) -> Iteration:
    """The mean iteration of one micro-batch at steady state: decode and prompt tokens in the ratio
    osl : isl, at most ``budget`` tokens (the engine's max_num_batched_tokens).  Its ``decode`` is the
    tokens each step makes; its prompt tokens are the mean of :func:`steps`, which says how they come.
    The decodes attend over the KV a running sequence holds on average (length-biased over a distribution:
    :attr:`~dnnplace.models.serving.spec.Workload.held`); prompts are priced at the mean prompt."""
    wl = p.workload
    if wl.phase == "decode":  # a disaggregated decode instance: the prompts' KV arrives, every token decodes
        return Iteration(min(float(seqs_per_mb), float(budget)), wl.held, 0.0, wl.isl)
    tokens = min(seqs_per_mb * (wl.isl + wl.osl) / wl.osl, float(budget))
    decode = tokens * wl.osl / (wl.isl + wl.osl)
    return Iteration(decode, wl.held, tokens - decode, wl.isl)


def steps(p: ServingProblem, seqs_per_mb: float, budget: int) -> list[tuple[float, Iteration]]:
    """The steps a micro-batch runs at steady state and each one's share: every step decodes the same
    sequences; prompt tokens come in lumps of a whole prompt (a budget-sized chunk of a longer one), so
    a share of the steps carries one lump more than the rest, the mean being :func:`iteration`'s.

    Why not the mean step: a step's time is convex in its tokens (the weights are read once however few
    there are, compute grows past that), so the mean step underprices the steps that carry a prompt;
    e.g. a 20,000-token prompt every 2,000 decode steps is not 10 extra tokens per step.  Where the
    budget is full every step (prompts fill what the decodes leave) the two agree."""
    it = iteration(p, seqs_per_mb, budget)
    lo, hi, share = _lumps_one(p.workload.isl, it.decode, it.prefill, budget)
    return [(1.0, it)] if share <= 0.0 else [(1.0 - share, Iteration(it.decode, it.kv_len, lo, it.isl)),
                                             (share, Iteration(it.decode, it.kv_len, hi, it.isl))]


def _lumps_one(isl: int, decode: float, prefill: float, budget: int) -> tuple[float, float, float]:
    """:func:`prompt_lumps` of one step, in Python floats (the evaluator asks for one batch at a time, a
    thousand times a search, where numpy's per-call cost is most of the work): the same IEEE operations in
    the same order, so the same numbers."""
    room = float(budget) - decode
    lump = float(min(isl, budget))
    lo = float(math.floor(prefill / lump + 1e-12)) * lump
    hi = min(lo + lump, room)
    if prefill <= 0.0 or prefill >= room - 1e-9 or hi - lo <= 1e-9:
        return prefill, prefill, 0.0
    return lo, hi, (prefill - lo) / (hi - lo)


def steps_many(p: ServingProblem, seqs_per_mb: list[float], budget: int) -> list[list[tuple[float, Iteration]]]:
    """:func:`steps` of many micro-batch sizes, their lumps found in one vectorised call (the search prices
    hundreds of batch sizes per pipeline)."""
    its = [iteration(p, s, budget) for s in seqs_per_mb]
    lo, hi, share = prompt_lumps(p.workload.isl, np.array([it.decode for it in its]),
                                 np.array([it.prefill for it in its]), budget)
    out: list[list[tuple[float, Iteration]]] = []
    for it, a, b, g in zip(its, lo.tolist(), hi.tolist(), share.tolist()):
        out.append([(1.0, it)] if g <= 0.0 else [(1.0 - g, Iteration(it.decode, it.kv_len, a, it.isl)),
                                                  (g, Iteration(it.decode, it.kv_len, b, it.isl))])
    return out


def prompt_lumps(isl: int, decode: np.ndarray, prefill: np.ndarray,
                 budget: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For steps decoding ``decode`` sequences with ``prefill`` prompt tokens each on average (arrays), the
    two step kinds of :func:`steps`: (the lighter kind's prompt tokens, the heavier kind's, the heavier
    kind's share).  Lumps are whole prompts (a budget-sized chunk of a longer one); where the budget is
    full every step, or no prompt comes, there is one kind (share 0, both the mean).  Vectorised because
    the bound prices every micro-batch size a replica may run at once, float for float the evaluator's."""
    room = float(budget) - decode
    lump = float(min(isl, budget))
    lo = np.floor(prefill / lump + 1e-12) * lump
    hi = np.minimum(lo + lump, room)
    whole = (prefill <= 0.0) | (prefill >= room - 1e-9) | (hi - lo <= 1e-9)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(whole, 0.0, (prefill - lo) / np.where(whole, 1.0, hi - lo))
    return np.where(whole, prefill, lo), np.where(whole, prefill, hi), share


def evaluate_replica(p: ServingProblem, r: Replica, max_num_seqs: int, max_num_batched_tokens: int,
                     latency: bool = True) -> ReplicaEval:
    """Memory, KV cache and steady-state rate of one replica at its batch limit (``latency=False``: its TPOT and
    TTFT are not priced, NaN: the split search's probes read the rate alone)."""
    mems, kv = replica_memory(p, r, max_num_seqs, max_num_batched_tokens)
    src: dict[str, int] = {}
    why = tp_refusal(p, r.tp)
    if not why and p.engine.single_node and len({s.node for s in r.stages}) > 1:
        why = f"{p.engine.name} runs a replica in one process on one node; this one spans nodes"
    if not why and max_num_seqs > p.engine.seqs_ceiling:
        why = (f"max_num_seqs {max_num_seqs}: {p.engine.name} takes at most {p.engine.seqs_ceiling} sequences at "
               f"once; plan with --fix max_num_seqs={p.engine.seqs_ceiling} or fewer")
    if not why and p.engine.tokens_cover_seqs and max_num_batched_tokens < max_num_seqs:
        why = (f"max_num_batched_tokens {max_num_batched_tokens} < max_num_seqs {max_num_seqs}: "
               f"{p.engine.name} refuses it at start-up")
    for i, m in enumerate(mems if not why else []):
        if m.kv_free <= 0:
            why = f"stage {i + 1} ({m.gpu}): weights {m.weights / 2**30:.1f} GiB + activations leave no KV cache"
            break
    if not why and p.engine.max_len_must_fit and p.max_model_len and kv < p.max_model_len:
        why = (f"the KV cache holds {int(kv)} tokens, less than one request of --max-model-len {p.max_model_len}:"
               f" {p.engine.name} refuses to start (_check_enough_kv_cache_memory); {int(kv)} or fewer would start"
               f"{sampler_note(p, r, max_num_seqs, max_num_batched_tokens, p.max_model_len)}")
    if not why and kv < p.workload.max_len:
        longest = "the longest request" if p.workload.lengths is not None else "one request"
        why = (f"the KV cache holds {int(kv)} tokens, less than {longest} ({p.workload.max_len})"
               f"{sampler_note(p, r, max_num_seqs, max_num_batched_tokens, p.workload.max_len)}")
    if (not why and p.engine.capacity_policy == "slots"
            and (slot := slot_tokens(p, kv, max_num_seqs)) < (need := slot_need(p))):
        what = f"--max-model-len {need}" if need == p.max_model_len else f"one request ({need})"
        most = slot_tokens(p, kv, 1) // need
        why = (f"{p.engine.name} splits its {int(kv)}-token cache over {max_num_seqs} slots: {slot} each, less than "
               f"{what}; plan with --fix max_num_seqs={max(most, 1)} or fewer")
    context = served_context(p, kv, max_num_seqs)
    conc = steady_batch(p, kv, seq_cap(p, r.pp, max_num_seqs)) if not why else 0.0
    if why or conc < 1:
        return ReplicaEval(mems, kv, 0.0, [math.inf] * r.pp, 0.0, math.inf, math.inf, False, why or "no batch fits",
                           max_model_len=context)
    times, tok_s, tpot, ttft = _running(p, r, conc, max_num_batched_tokens, src, latency)
    if not math.isfinite(max(times)):  # only a send over a network with no figure is unpriceable
        i = next(k for k, t in enumerate(times) if not math.isfinite(t))
        why = (f"stage {i + 1} ({r.stages[i].gpu}, node {r.stages[i].node}) sends to node {r.stages[i + 1].node} "
               f"over a network with no bandwidth figure: give it in --fleet ([network] bandwidth_gbps)"
               if i + 1 < r.pp else f"stage {i + 1} cannot be priced")
        return ReplicaEval(mems, kv, 0.0, times, 0.0, math.inf, math.inf, False, why, max_model_len=context)
    return ReplicaEval(mems, kv, conc, times, tok_s, tpot, ttft, True, "", src, context)


def _running(p: ServingProblem, r: Replica, conc: float, max_num_batched_tokens: int,
             src: dict[str, int], latency: bool = True) -> tuple[list[float], float, float, float]:
    """(stage times, output tokens/s, TPOT s, TTFT s) of a replica running ``conc`` sequences at steady state
    (``latency=False``: TPOT and TTFT not priced, NaN)."""
    bounds = np.concatenate([[0], np.cumsum(r.partition())])
    mb = micro_batches(p, r.pp)
    per_mb = max(conc / mb, 1.0)
    it = iteration(p, per_mb, max_num_batched_tokens)
    mix = steps(p, per_mb, max_num_batched_tokens)
    # a running sequence's steps carry the other sequences' prompts, never its own (it was prefilled before it
    # decodes): its TPOT is the decode-only cycle plus (conc - 1) / conc of what the prompts add to a step, so
    # one sequence alone decodes in steps of its own (tests/models/serving/test_tpot_own_prompt.py)
    other = (conc - 1.0) / conc if conc > 1.0 else 0.0
    bare = Iteration(it.decode, it.kv_len, 0.0, it.isl) if latency and it.prefill > 0.0 else None
    times = [sum(w * _stage_time(p, r, i, int(bounds[i]), int(bounds[i + 1]), x, src) for w, x in mix)
             for i in range(r.pp)]
    slowest = max(times)
    if not math.isfinite(slowest):
        return times, 0.0, math.inf, math.inf
    # a micro-batch comes back after its trip through every stage, or after the stage it waits on has run every
    # micro-batch in flight (fewer than the engine keeps when fewer sequences run): one step's cycle
    in_flight = min(float(mb), conc / per_mb)
    cycle = max(sum(times), in_flight * slowest)
    tok_s = in_flight * it.decode / cycle
    tpot = cycle
    if bare is not None:
        scratch: dict[str, int] = {}
        t0 = [_stage_time(p, r, i, int(bounds[i]), int(bounds[i + 1]), bare, scratch) for i in range(r.pp)]
        cycle0 = max(sum(t0), in_flight * max(t0))
        tpot = cycle0 + other * max(cycle - cycle0, 0.0)
    if not latency:
        return times, tok_s, math.nan, math.nan
    # TTFT: one request's prompt (the mean one, under a distribution) through every stage at the token budget, at
    # the load's iteration pace
    if p.workload.phase == "decode":  # no prompt here: the first token is one step after the KV arrives
        return times, tok_s, tpot, tpot
    first = Iteration(0.0, 0.0, float(min(p.workload.isl, max_num_batched_tokens)), p.workload.isl)
    chunks = math.ceil(p.workload.isl / max_num_batched_tokens)
    pre = sum(_stage_time(p, r, i, int(bounds[i]), int(bounds[i + 1]), first, src) for i in range(r.pp))
    return times, tok_s, tpot, chunks * pre + tpot


def load_shares(p: ServingProblem, capacities: list[float], demand: float) -> list[float]:
    """Each replica's share of ``demand`` output tokens/s under the engine's router (one rule for the evaluator
    and the simulation): a least-loaded router (vLLM's DP client) keeps every replica equally busy, so each
    gets demand in proportion to what it serves; round robin (the others) sends each the same share, so a
    slower replica saturates first."""
    if not capacities:
        return []
    total = sum(capacities)
    if p.engine.least_loaded_router and total > 0:
        return [demand * c / total for c in capacities]
    return [demand / len(capacities)] * len(capacities)


#: The relative width at which the search for a replica's running batch under a rate stops: far inside the
#: prediction's error band (7 % at the least), and about 10 bisections of one replica's batch range.
_LOAD_TOLERANCE = 0.005


def at_load_of(p: ServingProblem, r: Replica, ev: ReplicaEval, demand: float,
               max_num_batched_tokens: int) -> tuple[float, float, float]:
    """(sequences running, TPOT s, TTFT s) of a fitting replica serving ``demand`` output tokens/s.

    Why: under a request rate a replica does not run at its batch limit.  At steady state it runs the
    sequences whose throughput equals the demand (Little's law: ``tokens/s(n) = n x osl / (time a request
    stays)``, which the evaluator's ``tokens/s(n)`` already is), and its steps, so its TPOT and TTFT, are
    those of that batch, not of the limit's.  The batch is found by bisection in ``[1, the limit's]``
    (tokens/s grows with the batch); a demand at or above the limit's rate runs at the limit (saturated).
    Queueing ahead of a prompt is the simulation's: ``verdicts.simulated_slo`` judges SLOs under a rate."""
    if demand >= ev.tokens_per_s or ev.concurrency <= 1.0:
        return ev.concurrency, ev.tpot_s, ev.ttft_s
    scratch: dict[str, int] = {}
    lo, hi = 1.0, ev.concurrency
    _, tok, tpot, ttft = _running(p, r, lo, max_num_batched_tokens, scratch)
    if tok >= demand:
        return lo, tpot, ttft
    best = (hi, ev.tpot_s, ev.ttft_s)
    while hi / lo > 1.0 + _LOAD_TOLERANCE:
        mid = math.sqrt(lo * hi)
        _, tok, tpot, ttft = _running(p, r, mid, max_num_batched_tokens, scratch)
        if tok >= demand:
            hi, best = mid, (mid, tpot, ttft)
        else:
            lo = mid
    return best


#: Points of the batch grid a replica's throughput is priced at to split a closed loop's clients by rate.
_LOOP_GRID = 16


def closed_loop(p: ServingProblem, c: ServingConfig,
                reps: list[ReplicaEval]) -> tuple[float, float, float, tuple[float, ...]]:
    """(output tokens/s, TTFT s, TPOT s, sequences running per replica) of a fitting deployment under a closed
    loop of the workload's C clients.

    Why: each replica was priced at up to C sequences of its own (the search's additive objective), so two
    replicas under 16 clients counted 32 running and twice the throughput.  The clients are split as the
    engine's router splits them: a least-loaded one (vLLM's) keeps the requests in flight equal, C / n each;
    round robin (the others) sends each replica the same number of requests, so each serves the same rate and
    a slower one holds more clients (found by bisection on that rate over each replica's batch grid; when the
    slowest reaches its limit it holds what the others do not).  A replica running fewer sequences than it
    holds clients (its batch limit or KV cache) keeps the rest waiting: by Little's law each waits
    (clients - running) / running request lifetimes for a slot, which its TTFT includes."""
    wl = p.workload
    total = float(wl.concurrency or 0)
    n = len(reps)
    mbt = c.max_num_batched_tokens
    scratch: dict[str, int] = {}
    if n == 1 or p.engine.least_loaded_router:
        clients = [total / n] * n
    else:
        grids = []
        for rc, r in zip(c.replicas, reps):
            ns = np.geomspace(1.0, max(r.concurrency, 1.0), _LOOP_GRID)
            grids.append((ns, np.array([_running(p, rc, float(x), mbt, scratch)[1] for x in ns])))

        def inflight(rate_tok: float) -> list[float]:
            return [float(np.interp(rate_tok, np.maximum.accumulate(tk), ns)) for ns, tk in grids]

        top = min(float(tk.max()) for _, tk in grids)
        if sum(inflight(top)) >= total:
            lo, hi = 0.0, top
            for _ in range(40):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if sum(inflight(mid)) < total else (lo, mid)
            clients = inflight(hi)
        else:  # the slowest replica reaches its limit first and holds what the others do not
            clients = inflight(top)
            slow = min(range(n), key=lambda i: float(grids[i][1].max()))
            clients[slow] = total - sum(x for i, x in enumerate(clients) if i != slow)
    tok = 0.0
    ttfts: list[float] = []
    tpots: list[float] = []
    running: list[float] = []
    for rc, r, held in zip(c.replicas, reps, clients):
        run = max(min(held, r.concurrency), 1.0)
        if n == 1 and run >= r.concurrency:  # the replica as priced: at its limit (or C)
            t_s, tpot_s, ttft_s = r.tokens_per_s, r.tpot_s, r.ttft_s
        else:
            _, t_s, tpot_s, ttft_s = _running(p, rc, run, mbt, scratch)
        if held > run * (1 + 1e-9):
            ttft_s += (ttft_s + max(wl.osl - 1, 0) * tpot_s) * (held - run) / run
        tok += t_s
        ttfts.append(ttft_s)
        tpots.append(tpot_s)
        running.append(run)
    return tok, max(ttfts), max(tpots), tuple(running)


@dataclass
class ServingEvaluation:
    """A deployment's prediction: fleet throughput, per-replica KV and latency, memory per GPU."""

    replicas: list[ReplicaEval]
    output_tokens_per_s: float
    requests_per_s: float
    ttft_ms: float
    tpot_ms: float
    fits: bool
    meets_slo: bool
    saturated: bool
    error_band: float
    sources: dict[str, int]
    why: str = ""
    #: what the deployment serves at its batch limits (the search's objective); under a rate
    #: ``output_tokens_per_s`` is the demand it serves, at most this
    capacity_tokens_per_s: float = 0.0
    #: under a load (a rate, or a closed loop of clients), the sequences each replica runs (empty otherwise)
    running: tuple[float, ...] = ()

    @property
    def value(self) -> float:
        """The search's objective: output tokens/s at the batch limits (under a rate too, where the plan is the
        deployment with the most headroom; what it serves at the rate is ``output_tokens_per_s``)."""
        return self.capacity_tokens_per_s

    def to_dict(self) -> dict[str, Any]:
        def fin(x: float) -> float | None:
            return None if not math.isfinite(x) else round(x, 6)

        return {
            "output_tokens_per_s": fin(self.output_tokens_per_s), "requests_per_s": fin(self.requests_per_s),
            "ttft_ms": fin(self.ttft_ms), "tpot_ms": fin(self.tpot_ms),
            "kv_cache_tokens": [int(r.kv_tokens) for r in self.replicas],
            "max_concurrency": [int(r.concurrency) for r in self.replicas],
            "capacity_tokens_per_s": fin(self.capacity_tokens_per_s),
            **({"running_sequences": [round(x, 2) for x in self.running]} if self.running else {}),
            "fits": self.fits, "meets_slo": self.meets_slo, "saturated": self.saturated,
            "error_band": round(self.error_band, 4), "sources": dict(self.sources), "why": self.why,
            "memory_gib": [[{"gpu": m.gpu, "weights": round(m.weights / 2**30, 3),
                             "activations": round(m.activations / 2**30, 3), "cuda_graphs": round(m.graphs / 2**30, 3),
                             "kv_cache": round(max(m.kv_free, 0.0) / 2**30, 3), "budget": round(m.budget / 2**30, 3)}
                            for m in r.memory] for r in self.replicas],
        }


def evaluate(p: ServingProblem, c: ServingConfig, *, at_load: bool = True) -> ServingEvaluation:
    """The one evaluator of the serving model.

    Under a load, ``capacity_tokens_per_s`` is the search's objective (each replica at its batch limit, under
    ``--concurrency C`` at most C sequences each) and the prediction is the deployment at the load: under a
    rate each replica runs the batch its share of the demand needs (:func:`at_load_of`); under a closed loop of C
    clients the clients are split over the replicas as the engine's router splits them, and those a replica
    cannot run wait for a slot (:func:`closed_loop`).  ``at_load=False``: TTFT, TPOT and the SLO verdict stay
    those of the batch limits (the search ranks deployments by their capacity alone and skips this);
    capacity, and under a rate throughput and ``saturated``, are the same either way."""
    p = with_expert_parallel(p, c.expert_parallel)
    reps = [evaluate_replica(p, r, c.max_num_seqs, c.max_num_batched_tokens) for r in c.replicas]
    fits = all(r.fits for r in reps)
    src: dict[str, int] = {}
    for r in reps:
        for k, v in r.sources.items():
            src[k] = src.get(k, 0) + v
    wl = p.workload
    cap = sum(r.tokens_per_s for r in reps) if fits else 0.0
    tok = cap
    saturated = False
    ttft = max((r.ttft_s for r in reps), default=math.inf) * 1e3
    tpot = max((r.tpot_s for r in reps), default=math.inf) * 1e3
    running: tuple[float, ...] = ()
    if wl.rate is not None and fits:
        shares = load_shares(p, [r.tokens_per_s for r in reps], wl.rate * wl.osl)
        saturated = any(d > r.tokens_per_s * (1 + 1e-9) for d, r in zip(shares, reps))
        tok = sum(min(d, r.tokens_per_s) for d, r in zip(shares, reps))
        if at_load:
            loads = [at_load_of(p, rc, r, d, c.max_num_batched_tokens) for rc, r, d in zip(c.replicas, reps, shares)]
            running = tuple(x[0] for x in loads)
            tpot = max(x[1] for x in loads) * 1e3
            ttft = max(x[2] for x in loads) * 1e3
    elif wl.concurrency is not None and fits and at_load:
        tok, ttft_s, tpot_s, running = closed_loop(p, c, reps)
        ttft, tpot = ttft_s * 1e3, tpot_s * 1e3
    meets = fits and not saturated and (wl.ttft_ms is None or ttft <= wl.ttft_ms) and \
        (wl.tpot_ms is None or tpot <= wl.tpot_ms)
    why = next((r.why for r in reps if not r.fits), "")
    return ServingEvaluation(reps, tok, tok / wl.osl, ttft, tpot, fits, meets, saturated, prediction_band(p, src),
                             src, why, cap, running)
