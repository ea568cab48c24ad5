"""The deployment search: replicas, stage orders, TP and batch limits, each split by the exact DP.

Why this shape: given a replica's stages in order and its batch, the DP's split is optimal; the
search enumerates what the DP takes as given -- the TP size (uniform per replica, as every engine
demands), how the fleet's stage units group into replicas (a DP over the multiset of units: replicas
are independent, their throughputs add), the order of GPU kinds along a pipeline (any kind first and
last, each kind's other stages in one block, the blocks in every order: :func:`~dnnplace.models.serving.
pipeline.stage_orders`) and the number of sequences in flight (a grid; the interval bound between grid
points gives the plan's ``bound`` and ``gap``: pipeline.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from dnnplace.models.serving.bound import per_gpu_bound
from dnnplace.models.serving.evaluation import (
    ServingEvaluation,
    evaluate,
    expert_parallel_refusal,
    seq_cap,
    tp_refusal,
)
from dnnplace.models.serving.pipeline import best_replica, launch_refusal, stage_orders, units
from dnnplace.models.serving.spec import (
    Replica,
    ServingConfig,
    ServingPlan,
    ServingProblem,
    Stage,
    with_expert_parallel,
)

__all__ = ["assign_gpus", "expert_parallel_applies", "search"]

_TPS = (1, 2, 4, 8)
#: Above this many GPU subsets (the replica-partition DP's states) replicas are kept inside nodes.
_MAX_STATES = 20_000


def assign_gpus(p: ServingProblem, reps: tuple[Replica, ...]) -> tuple[Replica, ...]:
    """Physical GPUs for the chosen replicas: each (node, kind)'s GPUs in index order, the widest TP
    groups first (aligned), so no GPU serves two stages (the search priced stages by kind, not index)."""
    pools = {(n, name): [g.index for g in gpus] for n, node in enumerate(p.fleet.nodes)
             for name, gpus in node.kinds().items()}
    out: list[Replica | None] = [None] * len(reps)
    for k in sorted(range(len(reps)), key=lambda k: -reps[k].tp):
        stages = []
        for s in reps[k].stages:
            pool = pools[(s.node, s.gpu)]
            stages.append(Stage(s.gpu, s.node, tuple(pool[:s.tp]), s.layers))
            del pool[:s.tp]
        out[k] = Replica(tuple(stages))
    return tuple(r for r in out if r is not None)


def _search_each_node(p: ServingProblem, time_limit: float, tp: int | None, pp: int | None, mns: int,
                      mbt: int) -> tuple[tuple[Replica, ...], float | None, bool]:
    """Replicas kept inside nodes: the search on each distinct node once (same GPUs, same link: same
    plan), copied to its twins -- the fallback when the fleet's replica partitions are too many -- and the
    sum of the nodes' bounds: a bound over every deployment whose replicas stay inside nodes (None when a
    node's search proved none)."""
    solved: dict[tuple[tuple[str, ...], str], tuple[Replica, ...]] = {}
    bounds: dict[tuple[tuple[str, ...], str], float | None] = {}
    total: float | None = 0.0
    complete = True
    groups = {(tuple(g.name for g in n.gpus), n.link) for n in p.fleet.nodes if n.gpus}
    out: list[Replica] = []
    for k, node in enumerate(p.fleet.nodes):
        key = (tuple(g.name for g in node.gpus), node.link)
        if not node.gpus:
            continue
        if key not in solved:
            one = p.fleet.only(lambda g: g.node == k)  # noqa: B023 -- called at once, inside the iteration
            sp = _search_at(dataclasses.replace(p, fleet=one), time_limit=time_limit / len(groups),
                            tp=tp, pp=pp, max_num_seqs=mns, max_num_batched_tokens=mbt)
            solved[key] = sp.config.replicas
            bounds[key] = sp.bound
            complete = complete and bool(sp.meta.get("complete", True))
        nb = bounds[key]
        total = None if total is None or nb is None else total + nb
        out += [Replica(tuple(dataclasses.replace(s, node=k) for s in r.stages)) for r in solved[key]]
    return tuple(out), total, complete


def expert_parallel_applies(p: ServingProblem) -> bool:
    """Whether expert parallelism is a choice for this problem: a model with routed experts, on an engine that
    shards layers over a TP group (vLLM, SGLang, TensorRT-LLM; not llama.cpp's layer split or a device_map),
    on a fleet with a node of at least two GPUs of one kind (a TP group to spread the experts over)."""
    if expert_parallel_refusal(p):
        return False
    return any(len(g) >= 2 for n in p.fleet.nodes for g in n.kinds().values())


def search(p: ServingProblem, *, time_limit: float = 30.0, tp: int | None = None, pp: int | None = None,
           max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
           within_nodes: bool = False, progress: Callable[[float, float, str], None] | None = None,
           expert_parallel: bool | None = None) -> ServingPlan:
    """The best deployment found, expert parallelism included where it is a choice (``expert_parallel``: a pin;
    None: searched where :func:`expert_parallel_applies`).

    Why searched: an MoE model's experts split whole over a TP group run fewer, larger GEMMs than each expert's
    matrices sharded over it (Qwen3-30B-A3B's 768-wide experts are 96 wide at TP 8), at the same memory and
    the same all-reduce; which serves more depends on the tokens a step routes to each expert.  Both settings
    are searched in full (time split between them) and the better is the plan; its bound is the larger of the
    two searches' bounds, so the status and gap hold over both.  ``meta["expert_parallel_searched"]``: each
    setting's best output tokens/s."""
    def run(ep: bool, seconds: float) -> ServingPlan:
        return _search_limits(with_expert_parallel(p, ep), time_limit=seconds, tp=tp, pp=pp,
                              max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                              within_nodes=within_nodes, progress=progress)

    if expert_parallel is not None or not expert_parallel_applies(p):
        return run(bool(expert_parallel), time_limit)
    t0 = time.monotonic()
    off = run(False, time_limit / 2)
    on = run(True, max(time_limit - (time.monotonic() - t0), 0.05 * time_limit))
    values = {}
    for key, plan in (("off", off), ("on", on)):
        ev = evaluate(p, plan.config, at_load=False) if plan.config.replicas else None
        values[key] = ev.capacity_tokens_per_s if ev is not None and ev.fits else 0.0
    best, other = (on, off) if values["on"] > values["off"] else (off, on)
    meta = {**best.meta, "expert_parallel_searched": {k: round(v, 3) for k, v in values.items()}}
    value = max(values.values())
    bounds = [b for b in (best.bound, other.bound) if b is not None]
    if not bounds or best.status == "infeasible" and other.status == "infeasible":
        return dataclasses.replace(best, runtime_s=time.monotonic() - t0, meta=meta)
    bound = max(max(bounds), value)
    gap = (bound - value) / bound if bound > 0 else 0.0
    status = "optimal" if gap < 1e-9 and best.status == "optimal" else "feasible"
    return dataclasses.replace(best, status=status, bound=bound, gap=gap, runtime_s=time.monotonic() - t0,
                               meta=meta)


def _search_limits(p: ServingProblem, *, time_limit: float = 30.0, tp: int | None = None, pp: int | None = None,
                   max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
                   within_nodes: bool = False, progress: Callable[[float, float, str], None] | None = None
                   ) -> ServingPlan:
    """:func:`_search_limits_from` at the engine's default prompt-token budget, and where nothing fits there (and
    the budget is not pinned), at half of it, a quarter ... down to the search's smallest budget, until a
    deployment fits.

    Why: the budget's activation peak comes out of every GPU's memory before the KV cache; at the engine's
    default (SGLang: 8,192 prompt tokens) a model that fills its GPUs leaves no cache, while a smaller budget
    runs it (Llama 3.1 70B int4 on an RTX 4090 + an RTX 3090 under SGLang: nothing at 8,192, a two-stage
    pipeline at 512).  Without the descent the planner said such a fleet fits no deployment."""
    t0 = time.monotonic()
    plan = _search_limits_from(p, time_limit=time_limit, tp=tp, pp=pp, max_num_seqs=max_num_seqs,
                               max_num_batched_tokens=max_num_batched_tokens, within_nodes=within_nodes,
                               progress=progress)
    if plan.config.replicas or max_num_batched_tokens is not None or not p.engine.searched_tokens:
        return plan
    tried = {p.engine.max_num_batched_tokens: 0.0}
    b = p.engine.max_num_batched_tokens // 2
    # vLLM refuses more sequences than batched tokens: a pinned limit is the least budget it runs
    least = max_num_seqs if p.engine.tokens_cover_seqs and max_num_seqs is not None else 0
    while b >= max(_TOKENS_RANGE[0], least) and time.monotonic() - t0 < time_limit:
        left = max(time_limit - (time.monotonic() - t0), 0.05 * time_limit)
        lean = _search_limits_from(p, time_limit=left, tp=tp, pp=pp, max_num_seqs=max_num_seqs,
                                   max_num_batched_tokens=b, within_nodes=within_nodes, progress=progress)
        if not lean.config.replicas:
            tried[b] = 0.0
            b //= 2
            continue
        value = evaluate(p, lean.config, at_load=False).capacity_tokens_per_s
        tuned = _search_tokens(p, lean, value, t0, time_limit, tp=tp, pp=pp, within_nodes=within_nodes)
        searched = {**tried, **tuned.meta.get("max_num_batched_tokens_searched", {b: round(value, 3)})}
        meta = {**tuned.meta, "max_num_batched_tokens_searched": dict(sorted(searched.items()))}
        return dataclasses.replace(tuned, runtime_s=time.monotonic() - t0, meta=meta)
    return dataclasses.replace(plan, runtime_s=time.monotonic() - t0)


def _search_limits_from(p: ServingProblem, *, time_limit: float = 30.0, tp: int | None = None,
                        pp: int | None = None, max_num_seqs: int | None = None,
                        max_num_batched_tokens: int | None = None, within_nodes: bool = False,
                        progress: Callable[[float, float, str], None] | None = None) -> ServingPlan:
    """The best deployment found, with its status, bound and gap (``tp``/``pp``/``max_num_seqs``: pins;
    ``within_nodes``: every replica inside one node; ``progress``: called with (done, total, what) as the GPU
    subsets are solved, so a large fleet is seen to move).

    ``max_num_seqs``, unpinned, is searched where the engine schedules many sequences (``EngineRules
    .searched_seqs``): from the engine's default, doubling while the plan runs at its cap and halving while
    it runs well below it, as long as the throughput rises and the new plan points the same way
    (:func:`_limit_steps`; a local search: a limit whose best deployment has another shape can be missed;
    fleets above :data:`_PROBE_BOTH_WAYS_ABOVE` GPUs step both ways from the default).
    Why: the limit trades sequences in flight for memory (vLLM's start-up sampling peak grows with it, and
    the KV cache shrinks by as much), so the engine's default is neither always enough (short requests on a
    large GPU) nor always best (Llama 3.1 70B FP8 on 8 H100s: 512 beats vLLM's 1,024).  The plan's status,
    bound and gap are its search's, at the limit chosen (as with a pinned limit);
    ``meta["max_num_seqs_searched"]`` gives each limit tried and its best throughput, so a user sees what
    the limit is worth.  Where the token-budget search then moves the budget, the limit's neighbours are
    screened at the new budget with the plan's replicas and one that gains is searched again (one coordinate
    step, cheap where it gains nothing)."""
    t0 = time.monotonic()
    if max_num_seqs is not None or not p.engine.searched_seqs:
        plan = _search_at(p, time_limit=time_limit, tp=tp, pp=pp, max_num_seqs=max_num_seqs,
                          max_num_batched_tokens=max_num_batched_tokens, within_nodes=within_nodes,
                          progress=progress)
        if max_num_batched_tokens is not None or not p.engine.searched_tokens or not plan.config.replicas:
            return plan
        ev = evaluate(p, plan.config, at_load=False)
        return _search_tokens(p, plan, ev.capacity_tokens_per_s if ev.fits else 0.0, t0, time_limit, tp=tp, pp=pp,
                              within_nodes=within_nodes)
    lo = 1 if p.engine.max_num_seqs < _SEQS_RANGE[0] else _SEQS_RANGE[0]
    hi = min(_SEQS_RANGE[1], p.engine.seqs_ceiling)
    first = p.engine.max_num_seqs
    if p.engine.tokens_cover_seqs and max_num_batched_tokens is not None:  # vLLM refuses more seqs than tokens
        first = min(first, max_num_batched_tokens)
        hi = min(hi, max_num_batched_tokens)
    # a fleet above one node of 8 GPUs (the 10 s class of issue 43's targets) also tries the limit's other way
    # once: near-tied deployments at the default can point different ways
    both = len(p.fleet.gpus) > _PROBE_BOTH_WAYS_ABOVE
    plans, values = _climb_seqs(p, first, lo, hi, max_num_batched_tokens, t0, time_limit, both, tp=tp, pp=pp,
                                within_nodes=within_nodes, progress=progress)
    best = max(plans, key=lambda m: (values[m], m == first))
    plan = plans[best]
    meta = {**plan.meta, "max_num_seqs_searched": {m: round(values[m], 3) for m in sorted(plans)},
            "max_num_seqs_searched_at": plan.config.max_num_batched_tokens}  # the budget the limits were tried at
    plan = dataclasses.replace(plan, runtime_s=time.monotonic() - t0, meta=meta)
    if max_num_batched_tokens is not None or not p.engine.searched_tokens or not plan.config.replicas:
        return plan
    tuned = _search_tokens(p, plan, values[best], t0, time_limit, tp=tp, pp=pp, within_nodes=within_nodes)
    mbt = tuned.config.max_num_batched_tokens
    if mbt == plan.config.max_num_batched_tokens or time.monotonic() - t0 >= time_limit:
        return tuned
    # the budget moved, so the limit's best may have moved with it: the plan's replicas are priced at half and
    # twice its limit at the new budget (cheap), and a limit that gains at least _TOKENS_MIN_GAIN is searched
    # again there (a coordinate step; without it a plan could lose to its own best-homogeneous baseline, which
    # searches the limit at the plan's budget)
    mns = tuned.config.max_num_seqs
    top = hi if not p.engine.tokens_cover_seqs else min(hi, mbt)
    value = evaluate(p, tuned.config, at_load=False).capacity_tokens_per_s
    screened: dict[int, float] = {}
    for m in (mns // 2, mns * 2):
        if lo <= m <= top:
            ev = evaluate(p, dataclasses.replace(tuned.config, max_num_seqs=m), at_load=False)
            screened[m] = ev.capacity_tokens_per_s if ev.fits else 0.0
    if not screened or max(screened.values()) <= value * (1 + _TOKENS_MIN_GAIN):
        return tuned
    m = max(screened, key=lambda k: screened[k])
    left = max(time_limit - (time.monotonic() - t0), 0.05 * time_limit)
    again = _search_at(p, time_limit=left, tp=tp, pp=pp, max_num_seqs=m, max_num_batched_tokens=mbt,
                       within_nodes=within_nodes, progress=progress)
    found = evaluate(p, again.config, at_load=False) if again.config.replicas else None
    if found is None or not found.fits or found.capacity_tokens_per_s <= value:
        return tuned
    # the limits tried at the plan's own budget, as the plan file and summary report them
    limits = {"max_num_seqs_searched": {mns: round(value, 3), m: round(found.capacity_tokens_per_s, 3)},
              "max_num_seqs_searched_at": mbt,
              "max_num_batched_tokens_searched": tuned.meta["max_num_batched_tokens_searched"]}
    return dataclasses.replace(again, runtime_s=time.monotonic() - t0, meta={**again.meta, **limits})


def _climb_seqs(p: ServingProblem, first: int, lo: int, hi: int, mbt: int | None, t0: float, time_limit: float,
                both: bool, *, tp: int | None, pp: int | None, within_nodes: bool,
                progress: Callable[[float, float, str], None] | None
                ) -> tuple[dict[int, ServingPlan], dict[int, float]]:
    """Each ``max_num_seqs`` limit searched at the prompt-token budget ``mbt`` (None: the engine's default), from
    ``first``: doubling while the plan runs at its cap and halving while it runs well below it, as long as the
    throughput rises and the new plan points the same way (:func:`_limit_steps`); ``both``: step both ways from
    ``first`` once."""
    plans: dict[int, ServingPlan] = {}
    values: dict[int, float] = {}
    ways: dict[int, tuple[int, ...]] = {}  # which way each limit's plan points (:func:`_limit_steps`)

    def at(mns: int) -> float:
        if mns not in plans:
            left = max(time_limit - (time.monotonic() - t0), 0.05 * time_limit)
            plans[mns] = _search_at(p, time_limit=left, tp=tp, pp=pp, max_num_seqs=mns, max_num_batched_tokens=mbt,
                                    within_nodes=within_nodes, progress=progress)
            ev = evaluate(p, plans[mns].config, at_load=False) if plans[mns].config.replicas else None
            values[mns] = ev.capacity_tokens_per_s if ev is not None and ev.fits else 0.0
            ways[mns] = _limit_steps(p, plans[mns].config, ev, mns)
        return values[mns]

    at(first)
    steps = ways[first] + (tuple(s for s in (1, -1) if s not in ways[first]) if both else ())
    for step in steps:
        mns = first
        while time.monotonic() - t0 < time_limit:
            nxt = mns * 2 if step > 0 else mns // 2
            # an unfitting limit is passed by (a lower one frees memory); a fitting one must gain to go on, and
            # its plan must still point the same way (no replica at the cap: a higher limit only costs memory)
            if not lo <= nxt <= hi or (at(nxt) <= values[mns] and values[mns] > 0):
                break
            mns = nxt
            if step not in ways[mns]:
                break
    return plans, values


#: The ``max_num_batched_tokens`` values the budget search may try: the plan's budget times these powers of two,
#: within :data:`_TOKENS_RANGE`.
_TOKENS_STEPS = (-2, -1, 1, 2, 3)
_TOKENS_RANGE = (512, 131072)
#: A budget whose screened gain is below this share is not searched again: a search policy, not a model figure.
#: Why: such a gain is far inside the prediction's own error band (7 % at the least, ``catalogue.BAND``), and
#: the second search doubles the time (4 H100 + 4 A100: +0.13 % for 0.5 s more).
_TOKENS_MIN_GAIN = 0.01


def _search_tokens(p: ServingProblem, plan: ServingPlan, value: float, t0: float, time_limit: float, *,
                   tp: int | None, pp: int | None, within_nodes: bool) -> ServingPlan:
    """The plan at the prompt-token budget (``max_num_batched_tokens``) that serves the most, from the one it was
    searched at (the engine's default): the plan's own replicas are priced at the budget times 1/4 ... 8
    (:data:`_TOKENS_STEPS`), and where one serves more, the deployment is searched again at that budget, so the
    status, bound and gap are those of the budget chosen.

    Why a search: the budget trades prompt tokens per step (larger GEMMs, fewer chunks of a long prompt) for
    the activation memory its profile holds (the KV cache shrinks by as much) and for longer steps, so the
    engine's default is neither always enough (long prompts on a large GPU) nor always best.  A budget that
    gains less than :data:`_TOKENS_MIN_GAIN` is reported but not taken.  A local search
    around the default: a budget whose best deployment has another shape than the plan's can be missed.
    ``meta["max_num_batched_tokens_searched"]``: each budget priced with the plan's replicas, and its output
    tokens/s (0: does not fit); the chosen one's is the final plan's own."""
    mns, mbt = plan.config.max_num_seqs, plan.config.max_num_batched_tokens
    lo, hi = _TOKENS_RANGE
    tried: dict[int, float] = {mbt: round(value, 3)}
    for k in _TOKENS_STEPS:
        b = int(mbt * 2.0 ** k)
        if not lo <= b <= hi or (p.engine.tokens_cover_seqs and b < mns):
            continue
        ev = evaluate(p, dataclasses.replace(plan.config, max_num_batched_tokens=b), at_load=False)
        tried[b] = round(ev.capacity_tokens_per_s, 3) if ev.fits else 0.0
    best = max(tried, key=lambda b: (tried[b], b == mbt))
    meta = {**plan.meta, "max_num_batched_tokens_searched": dict(sorted(tried.items()))}
    if best != mbt and tried[best] > value * (1 + _TOKENS_MIN_GAIN):
        left = max(time_limit - (time.monotonic() - t0), 0.05 * time_limit)
        again = _search_at(p, time_limit=left, tp=tp, pp=pp, max_num_seqs=mns, max_num_batched_tokens=best,
                           within_nodes=within_nodes)
        found = evaluate(p, again.config, at_load=False) if again.config.replicas else None
        if found is not None and found.fits and found.capacity_tokens_per_s > value:
            tried[best] = max(tried[best], round(found.capacity_tokens_per_s, 3))
            meta = {**plan.meta, **again.meta, "max_num_batched_tokens_searched": dict(sorted(tried.items()))}
            return dataclasses.replace(again, runtime_s=time.monotonic() - t0, meta=meta)
    return dataclasses.replace(plan, runtime_s=time.monotonic() - t0, meta=meta)


#: The ``max_num_seqs`` values the search may try (powers of two times the engine's default within these; an
#: engine whose default is below the floor may go down to 1, and none above its ``seqs_ceiling``).
_SEQS_RANGE = (16, 4096)
#: Fleets of more GPUs than this try both ways from the engine's default limit (a search policy: one more search
#: where the time target is 10 s, not the 1 s of one node of 8).  Why: deployments nearly tied at the default can
#: point different ways (one with no replica at the cap, one with a replica there), and only one of them leads
#: to the better limit (docs/serving.md: the 64-GPU fleet).
_PROBE_BOTH_WAYS_ABOVE = 8


def _limit_steps(p: ServingProblem, config: ServingConfig, ev: ServingEvaluation | None,
                 mns: int) -> tuple[int, ...]:
    """Which way ``max_num_seqs`` may gain from ``mns`` for a plan's ``config`` (``ev``: its evaluation, None
    when it has no replica): up (+1) when some replica runs at the cap (more sequences would fit), down (-1)
    when one runs below half of it (halved, the cap still does not hold it back, and the memory the limit held
    goes to its KV cache) or nothing fits; both when both."""
    if ev is None:  # nothing fits at the limit: a lower one holds less memory for it
        return (-1,)
    runs = [x.concurrency for x in ev.replicas]
    up = any(c >= seq_cap(p, r.pp, mns) for c, r in zip(runs, config.replicas))
    down = any(c < seq_cap(p, r.pp, mns // 2) for c, r in zip(runs, config.replicas))
    return tuple(s for s, ok in ((1, up), (-1, down)) if ok)


def _search_at(p: ServingProblem, *, time_limit: float = 30.0, tp: int | None = None, pp: int | None = None,
               max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
               within_nodes: bool = False, progress: Callable[[float, float, str], None] | None = None
               ) -> ServingPlan:
    """:func:`search` at the given (or the engine's default) batch limits."""
    t0 = time.monotonic()
    mns = max_num_seqs or p.engine.max_num_seqs
    mbt = max_num_batched_tokens or p.engine.max_num_batched_tokens
    if p.engine.tokens_cover_seqs:  # vLLM refuses more sequences than batched tokens: a pin moves the default
        mns = min(mns, mbt) if max_num_seqs is None else mns
        mbt = max(mbt, mns) if max_num_batched_tokens is None else mbt
    complete = True
    tps = tuple(t for t in (_TPS if tp is None else (tp,)) if not tp_refusal(p, t))  # only TPs the engine takes
    by_tp = {t: units(p, t) for t in tps}
    keys = [k for k, v in units(p, 1).items() if v]
    counts = tuple(len(units(p, 1)[k]) for k in keys)
    many = math.prod(c + 1 for c in counts) > _MAX_STATES
    if (many or within_nodes) and sum(1 for n in p.fleet.nodes if n.gpus) > 1:
        reps, node_bound, nodes_done = _search_each_node(p, time_limit, tp, pp, mns, mbt)
        cfg = ServingConfig(reps, mns, mbt, p.model.expert_parallel)
        if within_nodes and reps and node_bound is not None:  # the asked-for space: each node's own proof
            value = evaluate(p, cfg, at_load=False).capacity_tokens_per_s
            bound = max(node_bound, value)
            gap = (bound - value) / bound if bound > 0 else 0.0
            return ServingPlan(cfg, "optimal" if gap < 1e-9 else "feasible", bound, gap, time.monotonic() - t0,
                               {"complete": True, "bound_kind": "within-nodes",
                                "note": "replicas kept inside nodes (asked for); bound: the sum of each node's"
                                        " own bound, over deployments whose replicas stay inside nodes"})
        note = ("replicas kept inside nodes (asked for)" if within_nodes else
                f"replicas kept inside nodes: the fleet has more than {_MAX_STATES} GPU subsets to split into replicas")
        if not reps:  # every node searched to the end and none holds a replica: proven, with --within-nodes
            return ServingPlan(cfg, "infeasible", None, None, time.monotonic() - t0,
                               {"complete": within_nodes and nodes_done, "note": note})
        bound, gap = _per_gpu(p, evaluate(p, cfg, at_load=False).capacity_tokens_per_s, mns, mbt, tps, pp)
        return ServingPlan(cfg, "optimal" if gap < 1e-9 else "feasible", bound, gap, time.monotonic() - t0,
                           {"complete": False, "bound_kind": "per-GPU", "note": note + "; bound: each GPU at its "
                            "kind's best per-GPU rate (models/serving/bound.py)"})
    memo: dict[tuple[tuple[int, ...], int], tuple[float, float, Replica | None]] = {}
    candidates: list[tuple[float, tuple[Replica, ...]]] = []
    shared: dict[Any, Any] = {}  # the pipelines' shared prices (_Pipeline)

    def replica_of(sub: tuple[int, ...], t: int) -> tuple[float, float, Replica | None]:
        """The best pipeline of TP ``t`` over ``sub`` GPUs per (node, kind): every order of the kinds."""
        nonlocal complete
        if (sub, t) in memo:
            return memo[(sub, t)]
        kinds = [i for i, c in enumerate(sub) if c]
        out: tuple[float, float, Replica | None] = (0.0, 0.0, None)
        size = sum(sub) // t
        per_node = Counter[int]()
        for i in kinds:
            per_node[keys[i][0]] += sub[i] // t
        # a replica across nodes only as the engine's multi-node launch starts it (one equal run per node)
        nodes_ok = not launch_refusal(p, sorted(per_node.elements()))
        if (pp is None or size == pp) and size <= p.model.num_layers and nodes_ok:
            for stages in stage_orders({i: by_tp[t][keys[i]][:sub[i] // t] for i in kinds}):
                if time.monotonic() - t0 > time_limit:
                    complete = False
                    break
                if len(per_node) > 1 and launch_refusal(p, [u.node for u in stages]):
                    continue
                v, bd, rep = best_replica(p, stages, mns, mbt, floor=out[0], shared=shared)
                out = (v, max(bd, out[1]), rep) if v > out[0] else (out[0], max(out[1], bd), out[2])
        memo[(sub, t)] = out
        return out

    if math.prod(c + 1 for c in counts) > _MAX_STATES:  # the DP below will not finish: one-kind replicas
        for i, c in enumerate(counts):  # of up to 8 stages first, so a stopped search can tile the fleet
            for t in tps:
                for size in range(1, min(c // t, 8) + 1):
                    replica_of(tuple(size * t if j == i else 0 for j in range(len(counts))), t)

    # replicas over the multiset of GPUs (each replica one TP, replicas may differ):
    # best(S) = max over R within S (R holding a GPU of S's first kind, so each split is seen once) of
    # value(R) + best(S - R), and best(S) >= best(S less one GPU) (GPUs may idle)
    best: dict[tuple[int, ...], tuple[float, float, tuple[Replica, ...]]] = {}
    n_states, n_total, shown = 0, math.prod(c + 1 for c in counts), 0.0
    for state in itertools.product(*[range(c + 1) for c in counts]):
        if not any(state):
            best[state] = (0.0, 0.0, ())
            continue
        top: tuple[float, float, tuple[Replica, ...]] = (0.0, 0.0, ())
        first = next(i for i, c in enumerate(state) if c)
        for t in tps:
            for sub in itertools.product(*[range(0, c + 1, t) for c in state]):
                if sub[first] == 0:
                    continue
                v, bd, rep = replica_of(sub, t)
                rv, rb, rr = best[tuple(x - y for x, y in zip(state, sub))]
                cand = v + rv
                top = (top[0], max(top[1], bd + rb), top[2])
                if cand > top[0] and rep is not None:
                    top = (cand, top[1], (rep, *rr))
                if state == counts and rep is not None:  # the whole fleet: each first replica + best rest
                    candidates.append((cand, (rep, *rr)))
        for i, c in enumerate(state):
            if c:
                less = best[tuple(c2 - (1 if j == i else 0) for j, c2 in enumerate(state))]
                top = (less[0], max(top[1], less[1]), less[2]) if less[0] > top[0] else \
                    (top[0], max(top[1], less[1]), top[2])
        best[state] = top
        n_states += 1
        elapsed = time.monotonic() - t0
        if progress is not None and elapsed - shown > 0.25:
            shown = elapsed
            progress(max(n_states / n_total, min(elapsed / time_limit, 1.0)), 1.0,
                     f"searching deployments: {n_states} of {n_total} GPU subsets, {elapsed:.0f} s")
        if time.monotonic() - t0 > time_limit:
            complete = False
            break
    full = best.get(counts)
    if full is None:  # stopped early: the best of what was solved, copies of it over the fleet, or per node
        full = max(best.values(), key=lambda x: x[0])
        tiled = _tile(counts, memo)
        if tiled[0] > full[0]:
            full = tiled
        if sum(1 for n in p.fleet.nodes if n.gpus) > 1:
            reps, _, _ = _search_each_node(p, time_limit / 4, tp, pp, mns, mbt)
            v = sum(evaluate(p, ServingConfig((r,), mns, mbt, p.model.expert_parallel),
                             at_load=False).capacity_tokens_per_s for r in reps)
            if v > full[0]:
                full = (v, math.inf, reps)
    best_bound, best_reps = full[1], assign_gpus(p, full[2])
    runtime = time.monotonic() - t0
    cfg = ServingConfig(best_reps, mns, mbt, p.model.expert_parallel)
    if not best_reps:
        return ServingPlan(cfg, "infeasible", None, None, runtime, {"complete": complete, "runner_ups": []})
    value = evaluate(p, cfg, at_load=False).capacity_tokens_per_s
    ups = _runner_ups(p, cfg, candidates, mns, mbt)
    if not complete:  # a bound over part of the fleet bounds nothing: the per-GPU bound does
        pb, pg = _per_gpu(p, value, mns, mbt, tps, pp)
        return ServingPlan(cfg, "feasible", pb, pg, time.monotonic() - t0,
                           {"complete": False, "bound_kind": "per-GPU", "runner_ups": ups})
    bound = max(best_bound, value)
    gap = (bound - value) / bound if bound > 0 else 0.0
    status = "optimal" if gap < 1e-9 else "feasible"
    return ServingPlan(cfg, status, bound, gap, runtime, {"complete": complete, "runner_ups": ups})


def _per_gpu(p: ServingProblem, value: float, mns: int, mbt: int, tps: tuple[int, ...],
             pp: int | None) -> tuple[float, float]:
    """(bound, gap) of a plan worth ``value`` from :func:`per_gpu_bound`, valid over every deployment the
    search could not enumerate (replicas across nodes included)."""
    bound = max(per_gpu_bound(p, mns, mbt, tps, None if pp is None else (pp,)), value)
    return bound, (bound - value) / bound if bound > 0 else 0.0


def _tile(counts: tuple[int, ...], memo: dict[tuple[tuple[int, ...], int], tuple[float, float, Replica | None]]
          ) -> tuple[float, float, tuple[Replica, ...]]:
    """The fleet covered by copies of the solved replicas, most tokens/s per GPU first (greedy, no bound).

    Why: a search stopped by its time limit has solved small GPU subsets only; their best alone would leave
    most of a large fleet idle, a confident under-estimate.  Copies of a replica serve independently, so
    their throughputs add."""
    ranked = sorted(((v / max(sum(sub), 1), sub, v, rep) for (sub, _), (v, _, rep) in memo.items()
                     if rep is not None and v > 0 and any(sub)), key=lambda x: -x[0])
    left = list(counts)
    total, reps = 0.0, []
    for _, sub, v, rep in ranked:
        n = min(left[i] // c for i, c in enumerate(sub) if c)
        if n:
            left = [x - n * c for x, c in zip(left, sub)]
            total += n * v
            reps += [rep] * n
    return total, math.inf, tuple(reps)


def _runner_ups(p: ServingProblem, plan: ServingConfig, candidates: list[tuple[float, tuple[Replica, ...]]],
                mns: int, mbt: int, count: int = 5) -> list[ServingConfig]:
    """Up to ``count`` distinct deployments after the plan, best first (each re-priced by the evaluator): what
    a user weighs against it when the error band cannot order them.  Distinct as a user reads them: the same
    GPU kinds, TP, layers and node crossings on other physical GPUs or another of the same nodes are one
    deployment (a list of the plan's own layout five times over told nothing)."""
    seen = {_shape(p, plan.replicas)}
    ranked: list[tuple[float, ServingConfig]] = []
    for _, reps in sorted(candidates, key=lambda c: -c[0]):
        cfg = ServingConfig(assign_gpus(p, reps), mns, mbt, p.model.expert_parallel)
        shape = _shape(p, cfg.replicas)
        if not reps or shape in seen:
            continue
        seen.add(shape)
        ev = evaluate(p, cfg, at_load=False)
        if ev.fits:
            ranked.append((ev.capacity_tokens_per_s, cfg))
        if len(ranked) >= 4 * count:
            break
    return [c for _, c in sorted(ranked, key=lambda x: -x[0])[:count]]


def _shape(p: ServingProblem, reps: tuple[Replica, ...]) -> tuple[Any, ...]:
    """A deployment up to where it sits: per replica (in sorted order) each stage's GPU kind, TP, layers, its
    node's link and whether the stage starts on another node than the one before."""
    return tuple(sorted(tuple((s.gpu, s.tp, s.layers, p.fleet.nodes[s.node].link,
                               i > 0 and s.node != r.stages[i - 1].node) for i, s in enumerate(r.stages))
                        for r in reps))
