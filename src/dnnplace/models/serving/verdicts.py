"""What ``dnnplace serve`` says when the answer is "no": the smallest fleet that would hold the model, the
best latency any searched deployment reaches, the pins that cannot be honoured.

Why here and not in the CLI: ``dnnplace.solve`` on a serving problem refuses the same way, one line
each, so a script and the command read the same verdict.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.evaluation import ServingEvaluation, evaluate
from dnnplace.models.serving.fleet import parse_gpus
from dnnplace.models.serving.pipeline import launch_refusal, stage_orders
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, ServingProblem, Stage, slo_flag

__all__ = ["SLO_REQUESTS", "apply_layers", "meet_slo", "simulated_slo", "slo_requests", "smallest_fleet", "unfit",
           "without_slowest"]

#: Requests a Poisson load is simulated with to check a latency SLO, at the least (a closed loop sends 5 per
#: client); more where the rate times a request's life asks for it (:func:`slo_requests`).
SLO_REQUESTS = 600
#: ... and at the most: a bound on the simulation's work (the time limit bounds its wall time too).
SLO_REQUESTS_MAX = 20_000
#: The arrival window a rate is simulated over, in request lifetimes: the first half fills the engine, the
#: second is judged against it (``simulator``'s saturation test), so each half spans two lifetimes.
SLO_LIFETIMES = 4.0

_MAX_PROBE = 256  # GPUs of one kind tried before saying "more than this"


def _even(n: int, parts: int) -> list[int]:
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def _fits_on(p: ServingProblem, kind: str, n: int) -> bool:
    """Does one replica on ``n`` GPUs of ``kind`` in one node fit (TP within 8, the layers split evenly)?"""
    q = replace(p, fleet=parse_gpus(f"{n}x{kind}"))
    for tp in (t for t in (8, 4, 2, 1) if n % t == 0):
        pp = n // tp
        if pp > p.model.num_layers:
            continue
        if evaluate(q, ServingConfig((_even_replica(p, kind, 0, list(range(n)), tp, pp),), 1,
                                     p.engine.max_num_batched_tokens)).fits:
            return True
    return False


def _even_replica(p: ServingProblem, kind: str, node: int, gpus: list[int], tp: int, pp: int) -> Replica:
    """``pp`` stages of ``tp`` of ``gpus`` (in order) on ``node``, the layers split evenly."""
    return Replica(tuple(Stage(kind, node, tuple(gpus[s * tp:(s + 1) * tp]), k)
                         for s, k in enumerate(_even(p.model.num_layers, pp))))


def smallest_fleet(p: ServingProblem) -> dict[str, int | None]:
    """GPU kind of the fleet -> the fewest of that kind one replica fits on (None: more than _MAX_PROBE)."""
    out: dict[str, int | None] = {}
    for kind in dict.fromkeys(g.name for g in p.fleet.gpus):
        lo = next((n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256) if _fits_on(p, kind, n)), None)
        if lo is not None:  # between the last power of two that failed and lo: the first count that fits
            lo = next(n for n in range(lo // 2 + 1, lo + 1) if _fits_on(p, kind, n))
        out[kind] = lo
    return out


def unfit(p: ServingProblem, pins: dict[str, object]) -> DnnplaceError:
    """The one line for a model that fits on no deployment of the fleet (under ``pins``, when given)."""
    where = f"{p.model.name} ({p.model.precision}, context {p.context}) fits on no deployment of {p.fleet.spec()}"
    fixed = {k: v for k, v in pins.items() if k != "within_nodes"}
    if pins.get("within_nodes"):
        where += " with every replica inside one node (--within-nodes)"
    if fixed:
        shown = ",".join(f"{k}={({True: 'on', False: 'off'}[v] if isinstance(v, bool) else v)}"
                         for k, v in fixed.items())
        return DnnplaceError(f"{where} with --fix {shown}{_pinned_why(p, fixed)}{_network_note(p)}"
                             f"{_launch_note(p)}")
    need = smallest_fleet(p)
    parts = [f"{n} x {k}" if n is not None else f"more than {_MAX_PROBE} x {k}" for k, n in need.items()]
    ctx = (f" ({p.engine.name} starts only with one --max-model-len {p.max_model_len} request of KV cache on"
           " every worker: a smaller --max-model-len may fit)") if p.engine.max_len_must_fit and p.max_model_len else ""
    return DnnplaceError(f"{where}: needs at least {' or '.join(parts)} in one node{ctx}{_network_note(p)}"
                         f"{_launch_note(p)}")


def _pinned_why(p: ServingProblem, fixed: dict[str, object]) -> str:
    """Why the pins fail, shown on one deployment: the largest node's most numerous GPU kind as one replica at
    the pinned TP (else the widest TP that fits, down to 1) and batch limits, its layers split evenly.

    Why: "fits on no deployment with --fix max_num_seqs=1024" alone leaves the user guessing which knob to
    move; the evaluator's own reason (the KV cache below one request, a stage without KV room) says it."""
    if "layers" in fixed or "pp" in fixed and "tp" not in fixed:
        return ""
    node = max((n for n in p.fleet.nodes if n.gpus), key=lambda n: len(n.gpus))
    k = p.fleet.nodes.index(node)
    kind, gpus = max(node.kinds().items(), key=lambda kv: len(kv[1]))
    mns = _pin(fixed, "max_num_seqs", p.engine.max_num_seqs)
    mbt = _pin(fixed, "max_num_batched_tokens", p.engine.max_num_batched_tokens)
    why = ""
    for tp in [_pin(fixed, "tp", 1)] if "tp" in fixed else [t for t in (8, 4, 2, 1) if len(gpus) % t == 0]:
        pp = _pin(fixed, "pp", len(gpus) // tp)
        if tp * pp > len(gpus) or pp > p.model.num_layers:
            continue
        one = _even_replica(p, kind, k, [g.index for g in gpus], tp, pp)
        ev = evaluate(p, ServingConfig((one,), mns, mbt, p.model.expert_parallel))
        if ev.fits:
            return ""
        why = why or f"; e.g. {tp * pp} x {kind} of node {k + 1} as tp={tp} pp={pp}: {ev.why}"
    return why


def _pin(fixed: dict[str, object], key: str, default: int) -> int:
    v = fixed.get(key, default)
    return int(v) if isinstance(v, (int, float, str)) else default


def _launch_note(p: ServingProblem) -> str:
    """Why no replica crossed nodes, when the engine's launch is why (the same model may fit across nodes
    under vLLM or SGLang: a verdict of "does not fit" must not read as one about the GPUs)."""
    if len([n for n in p.fleet.nodes if n.gpus]) < 2 or p.engine.multi_node:
        return ""
    return f"; {launch_refusal(p, [0, 1])} (plan with --engine vllm or sglang to span nodes)"


def _network_note(p: ServingProblem) -> str:
    """Why no replica may cross nodes, when that is why: the fleet gives no network and a GPU kind's
    datasheet has none (inference cards), so a send between nodes cannot be priced."""
    if len([n for n in p.fleet.nodes if n.gpus]) < 2 or p.fleet.network_bandwidth > 0:
        return ""
    from dnnplace.core.catalogue import device_spec

    blind = sorted({g.name for g in p.fleet.gpus if device_spec(g.name).internode_bandwidth <= 0})
    if not blind:
        return ""
    return (f"; a replica across nodes cannot be priced: no network figure for {', '.join(blind)} (give"
            " [network] bandwidth_gbps and latency_us in --fleet)")


#: A pinned split is tried in every distinct order of its stages' GPU groups up to this many orders.
MAX_PINNED_ORDERS = 5040


def _orders(r: Replica) -> list[Replica]:
    """``r`` with its stages in every distinct order of their GPU groups (one node and kind each): with the
    layers pinned per position, any order may be the one where they fit (A100, T4, T4, A100 holds 30+10+10+30
    where no order of whole blocks does).  Past :data:`MAX_PINNED_ORDERS`, the orders the search tries
    (:func:`~dnnplace.models.serving.pipeline.stage_orders`: any group at each end, whole blocks between)."""
    groups: dict[tuple[int, str], list[Stage]] = {}
    for s in r.stages:
        groups.setdefault((s.node, s.gpu), []).append(s)
    counts = [len(v) for v in groups.values()]
    if math.factorial(sum(counts)) // math.prod(math.factorial(c) for c in counts) > MAX_PINNED_ORDERS:
        return [Replica(tuple(o)) for o in stage_orders(groups)]
    keys = list(groups)
    out = []
    for seq in dict.fromkeys(itertools.permutations([k for k in keys for _ in groups[k]])):
        taken = dict.fromkeys(keys, 0)
        stages = []
        for k in seq:
            stages.append(groups[k][taken[k]])
            taken[k] += 1
        out.append(Replica(tuple(stages)))
    return out


def apply_layers(p: ServingProblem, plan: ServingPlan, layers: list[int]) -> ServingPlan:
    """The plan with every replica's split set to ``layers`` (``--fix layers=40+40``), checked; each
    replica's GPU groups in the order that serves fastest with that split (the search chose its order
    for its own split)."""
    if sum(layers) != p.model.num_layers:
        raise DnnplaceError(f"--fix layers={'+'.join(map(str, layers))} sums to {sum(layers)}; "
                            f"{p.model.name} has {p.model.num_layers} layers")
    reps = []
    why = ""
    for r in plan.config.replicas:
        if r.pp != len(layers):
            raise DnnplaceError(f"--fix layers gives {len(layers)} stages; the deployment found has pp={r.pp}")
        best: tuple[float, Replica | None] = (-1.0, None)
        for o in _orders(r):
            if launch_refusal(p, [s.node for s in o.stages]):  # an order its engine cannot start across nodes
                continue
            cand = Replica(tuple(replace(s, layers=k) for s, k in zip(o.stages, layers)))
            ev = evaluate(p, replace(plan.config, replicas=(cand,)))
            if ev.fits and ev.capacity_tokens_per_s > best[0]:
                best = (ev.capacity_tokens_per_s, cand)
            why = why or ev.why
        if best[1] is None:
            raise DnnplaceError(f"--fix layers={'+'.join(map(str, layers))} does not fit in any order of the"
                                f" stages: {why}")
        reps.append(best[1])
    cfg = replace(plan.config, replicas=tuple(reps))
    ev = evaluate(p, cfg)
    if not ev.fits:
        raise DnnplaceError(f"--fix layers={'+'.join(map(str, layers))} does not fit: {ev.why}")
    return replace(plan, config=cfg, status="feasible", meta={**plan.meta, "runner_ups": []})


#: Who judged the SLOs, as a plan says it (``slo_judged_by``).
EVALUATOR_JUDGES = "evaluator: the steady state, every request alike (its mean, median and p99 are one value)"
SIMULATION_JUDGES = "simulation: the requests streamed at the workload's rate, at the statistic each SLO names"


def _slo_text(p: ServingProblem) -> str:
    wl = p.workload
    parts = [f"{slo_flag('ttft', wl.ttft_stat)} {wl.ttft_ms:g}" if wl.ttft_ms is not None else "",
             f"{slo_flag('tpot', wl.tpot_stat)} {wl.tpot_ms:g}" if wl.tpot_ms is not None else "",
             f"--rate {wl.rate:g}" if wl.rate is not None else "",
             f"--concurrency {wl.concurrency}" if wl.concurrency is not None else ""]
    return " ".join(x for x in parts if x)


def slo_requests(p: ServingProblem, c: ServingConfig, ev: ServingEvaluation | None = None) -> int:
    """How many Poisson arrivals judge ``c`` under the workload's rate: enough that the arrival window spans
    :data:`SLO_LIFETIMES` request lifetimes (the evaluator's TTFT + (OSL - 1) x TPOT at the rate), within
    [:data:`SLO_REQUESTS`, :data:`SLO_REQUESTS_MAX`].  ``ev``: ``c``'s evaluation where the caller has it.

    Why: a fixed count judged a high rate over a window shorter than a request's life, so the engine never
    filled, and the slower replicas' requests, still running at the window's end, read as a queue that does
    not keep up (the case is in docs/serving.md)."""
    wl = p.workload
    ev = evaluate(p, c) if ev is None else ev
    life = (ev.ttft_ms + max(wl.osl - 1, 0) * ev.tpot_ms) / 1e3 if ev.fits else 0.0
    want = SLO_LIFETIMES * float(wl.rate or 0.0) * life if math.isfinite(life) else SLO_REQUESTS_MAX
    return int(min(max(SLO_REQUESTS, math.ceil(want)), SLO_REQUESTS_MAX))


def simulated_slo(p: ServingProblem, c: ServingConfig, time_limit: float,
                  ev: ServingEvaluation | None = None) -> dict[str, Any]:
    """The workload's load streamed through ``c`` by the simulation (its rate as Poisson arrivals, or its
    clients in a closed loop): TTFT and TPOT at the statistic each SLO names (the mean, median or 99th
    percentile of the simulated requests), whether the queue keeps up, whether the SLOs hold.

    Why: the evaluator's TTFT is one prompt with nothing ahead of it; under a load a prompt waits behind
    the others' prefills (and, near saturation, in the queue), which only the simulation sees, and only the
    simulation has a distribution to take a percentile of."""
    from dnnplace.models.serving.simulator import JUDGED_LIFETIMES, simulate

    wl = p.workload
    if wl.concurrency is not None:
        s = simulate(p, c, concurrency=wl.concurrency, requests=min(max(5 * wl.concurrency, 50), 5000),
                     time_limit=time_limit)
        load = f"{wl.concurrency} clients"
    else:
        t0 = time.monotonic()
        s = simulate(p, c, rate=float(wl.rate or 0.0), requests=slo_requests(p, c, ev), time_limit=time_limit)
        # the run was sized by the evaluator's request lifetime; where the simulation's own is longer, its
        # saturation verdict was read during the fill: once more over enough lifetimes, while time is left
        n = min(math.ceil(JUDGED_LIFETIMES * s.lifetime_s * float(wl.rate or 0.0)), SLO_REQUESTS_MAX)
        left = time_limit - (time.monotonic() - t0)
        if not s.saturation_judged and not s.stopped and n > s.requests and left > 0:
            s = simulate(p, c, rate=float(wl.rate or 0.0), requests=n, time_limit=left)
        load = f"{wl.rate:g} requests/s"
    ttft, tpot = s.ttft_ms[wl.ttft_stat], s.tpot_ms[wl.tpot_stat]
    over = ((wl.ttft_ms is not None and ttft is not None and ttft > wl.ttft_ms)
            or (wl.tpot_ms is not None and tpot is not None and tpot > wl.tpot_ms))
    meets: bool | None = bool(s.completed > 0 and not s.saturated and not over
                              and (wl.ttft_ms is None or ttft is not None) and (wl.tpot_ms is None or tpot is not None))
    if s.stopped:  # cut short: the early requests saw the least queueing, so only a miss is settled
        meets = False if over else None
    return {"load": load, "requests": s.arrived, "completed": s.completed, "ttft_ms": ttft, "tpot_ms": tpot,
            "ttft_stat": wl.ttft_stat, "tpot_stat": wl.tpot_stat,
            "saturated": s.saturated, "saturation_judged": s.saturation_judged, "stopped": s.stopped or None,
            "meets_slo": meets}


def meet_slo(p: ServingProblem, plan: ServingPlan, time_limit: float = 10.0,
             more: Callable[[float], list[ServingConfig]] | None = None,
             pinned_seqs: bool = False) -> tuple[ServingPlan, ServingEvaluation]:
    """The plan when it meets the workload's SLOs; else the fastest searched deployment (the plan and its
    runner-ups, each also at fewer sequences in flight) that does; else one line with the best reached.

    Under a request rate the simulation judges whether the deployment keeps up with the rate and, when SLOs
    are given, meets them (:func:`simulated_slo`: queueing counts, and the engine's own micro-batches, uneven
    under PP where the evaluator's are even), trying the plan, then the deployments that pass the evaluator
    fastest first, while ``time_limit`` seconds last; a simulation the time limit cuts short settles nothing,
    so the plan keeps the evaluator's verdict and says so (``meets_slo`` None).  Under a closed loop of
    clients the evaluator judges and the simulation's figures ride along in ``meta["slo_simulated"]``
    (identical requests stay in step there, so
    its TTFT is an upper estimate: +50 to +235 % on InferenceMAX's measured rows; requests drawn from a
    ``--lengths`` distribution drift apart as measured ones do: 15 % median |error|, mostly under, on the
    same rows; benchmarks/results/serving_load.md).
    Offline or under a closed loop a percentile SLO is judged on the evaluator's steady state, where every
    request is alike, so its mean, median and 99th percentile are one value; ``meta["slo_judged_by"]`` says
    which judged.  With SLOs each candidate is also tried without its slowest replicas (:func:`without_slowest`).
    ``more(seconds)``: further deployments to try under a rate when every one above fell behind or missed in
    the simulation (the caller's search policy; e.g. deployments without PP, whose even micro-batches the
    simulation does not see under a trickle of arrivals).  ``pinned_seqs``: the user fixed ``max_num_seqs``, so
    no candidate runs at fewer sequences (a pin is kept or the SLO refused, never traded)."""
    wl = p.workload
    slo = wl.ttft_ms is not None or wl.tpot_ms is not None
    ev = evaluate(p, plan.config)
    tried: list[tuple[ServingConfig, ServingEvaluation]] = [(plan.config, ev)]
    if not ev.meets_slo or wl.rate is not None:
        default = replace(plan.config, max_num_batched_tokens=p.engine.max_num_batched_tokens)
        # a searched budget serves more but runs longer steps: the engine's own is tried as well
        alts = (default,) if plan.meta.get("max_num_batched_tokens_searched") and default != plan.config and \
            (not p.engine.tokens_cover_seqs or default.max_num_batched_tokens >= default.max_num_seqs) else ()
        tried += _variants(p, [plan.config, *alts, *plan.meta.get("runner_ups", [])], plan.config, pinned_seqs)
    # the plan first when it passes (its proof stands), then the others fastest first
    ok = _passing(tried, plan.config)
    by_evaluator = {"slo_judged_by": EVALUATOR_JUDGES} if slo else {}
    if ok and wl.rate is None and (not slo or wl.concurrency is None):
        chosen = _chosen(plan, *ok[0])
        return replace(chosen, meta={**chosen.meta, **by_evaluator}), ok[0][1]
    if ok and wl.rate is None:  # a closed loop: the evaluator judges, the simulation is reported beside it
        chosen = _chosen(plan, *ok[0])
        sim = simulated_slo(p, chosen.config, time_limit)
        return replace(chosen, meta={**chosen.meta, "slo_simulated": sim, **by_evaluator}), ok[0][1]
    deadline = time.monotonic() + time_limit
    sims: list[dict[str, Any]] = []
    simulated = 0
    for batch in range(2):
        if batch == 1:  # every searched deployment fell behind or missed: the deployments ``more`` gives
            left = deadline - time.monotonic()
            if wl.rate is None or more is None or left <= 0:
                break
            extra = more(left / 2)
            seen = {c for c, _ in tried}
            new = [t for t in _variants(p, [c for c in extra if c not in seen], None, pinned_seqs) if t[0] not in seen]
            tried += new
            ok = _passing(new, None)
        for k, (c, e) in enumerate(ok):
            left = deadline - time.monotonic()
            if left <= 0 and (k or batch):
                break
            # the first is simulated however little time is left: cut short, it settles nothing and says so,
            # where skipping it would refuse deployments the evaluator passes for want of time alone
            sim = simulated_slo(p, c, max(left, 1e-3), e)
            sims.append(sim)
            simulated += 1
            if sim["meets_slo"] or sim["meets_slo"] is None:  # a pass, or not settled in time: said in the plan
                chosen = _chosen(plan, c, e)
                judged = {"slo_judged_by": SIMULATION_JUDGES} if slo else {}
                return replace(chosen, meta={**chosen.meta, "slo_simulated": sim, **judged}), e
    fit = [(c, e) for c, e in tried if e.fits]
    if not fit:
        raise unfit(p, {})
    passing = sum(1 for _, e in tried if e.meets_slo)
    if sims:  # one simulated run's figures, the one nearest the SLOs (a queue that fell behind last)
        near = min(sims, key=lambda x: (bool(x["saturated"]), _sim_shortfall(p, x)))
        best_t = near["ttft_ms"] if near["ttft_ms"] is not None else math.inf
        best_p = near["tpot_ms"] if near["tpot_ms"] is not None else math.inf
        behind = sum(1 for x in sims if x["saturated"])
        raise DnnplaceError(f"no deployment of {p.fleet.spec()} meets {_slo_text(p)} under the simulated load: "
                            f"the best simulated is TTFT {best_t:.0f} ms, TPOT {best_p:.1f} ms; {behind} of the "
                            f"{simulated} simulated fell behind the rate ({simulated} of {passing} deployments that "
                            f"meet it in the steady state were simulated"
                            f"{'' if simulated == passing else ' within the time limit'})")
    # one deployment's figures, the one nearest every target at once: the least TTFT and the least TPOT of two
    # different deployments, side by side, could each meet their SLO and read as a deployment that meets both
    c, e = min(fit, key=lambda t: _shortfall(p, t[1]))
    short = _shortfall(p, e)
    best = f"the best reached is TTFT {e.ttft_ms:.0f} ms, TPOT {e.tpot_ms:.1f} ms"
    if p.workload.rate is not None:
        best += f", {e.capacity_tokens_per_s / p.workload.osl:.2f} requests/s at most"
    layout = "; ".join(f"tp={r.tp} pp={r.pp} on {'+'.join(st.gpu for st in r.stages)}" for r in c.replicas)
    best += f", by {layout} at max_num_seqs {c.max_num_seqs} (the evaluator's steady state; nearest every target)"
    if short <= 1.0 + e.error_band:  # a miss inside the model's own error is not a verdict
        best += (f"; it misses by {100 * (short - 1):.1f} %, inside the prediction's +/-"
                 f"{100 * e.error_band:.0f} % band, so it may meet them: measure it")
    pin = f" at the pinned max_num_seqs={plan.config.max_num_seqs} (fewer might: drop the pin)" if pinned_seqs else ""
    raise DnnplaceError(f"no deployment of {p.fleet.spec()} meets {_slo_text(p)}{pin}: {best}")


def _over_slo(p: ServingProblem, ttft: float | None, tpot: float | None) -> float:
    """The larger of TTFT and TPOT over their SLOs (a missing figure: infinitely over; 0 without SLOs)."""
    wl = p.workload
    return max([(math.inf if v is None else v) / t for v, t in ((ttft, wl.ttft_ms), (tpot, wl.tpot_ms)) if t]
               or [0.0])


def _sim_shortfall(p: ServingProblem, x: dict[str, Any]) -> float:
    """A simulated run's largest TTFT or TPOT over its SLO (the statistic each names)."""
    return _over_slo(p, x["ttft_ms"], x["tpot_ms"])


def _shortfall(p: ServingProblem, e: ServingEvaluation) -> float:
    """How far ``e`` is from the workload's targets: the largest of its TTFT and TPOT over their SLOs and the
    rate over its capacity (1 or less: every one met)."""
    wl = p.workload
    over = _over_slo(p, e.ttft_ms, e.tpot_ms)
    if wl.rate is None:
        return over
    return max(over, wl.rate * wl.osl / e.capacity_tokens_per_s if e.capacity_tokens_per_s > 0 else math.inf)


def _variants(p: ServingProblem, bases: list[ServingConfig], plan: ServingConfig | None,
              pinned_seqs: bool = False) -> list[tuple[ServingConfig, ServingEvaluation]]:
    """Each base at its limit and at every halving of ``max_num_seqs`` (the plan's own limit is already
    evaluated), and with SLOs, less its slowest replicas (:func:`without_slowest`), each evaluated."""
    out: list[tuple[ServingConfig, ServingEvaluation]] = []
    slo = p.workload.ttft_ms is not None or p.workload.tpot_ms is not None
    for c in bases:
        seqs = c.max_num_seqs if c is not plan else c.max_num_seqs // 2
        if pinned_seqs:  # the pinned limit only: the plan's own is already evaluated
            seqs = 0 if c is plan else c.max_num_seqs
        halved: list[tuple[ServingConfig, ServingEvaluation]] = []
        while seqs >= 1:
            cc = replace(c, max_num_seqs=seqs)
            halved.append((cc, evaluate(p, cc)))
            seqs = 0 if pinned_seqs else seqs // 2
        out += halved + ([] if pinned_seqs else _between(p, c, halved))
        if slo:
            out.extend(without_slowest(p, c))
    return out


def _between(p: ServingProblem, c: ServingConfig,
             halved: list[tuple[ServingConfig, ServingEvaluation]]) -> list[tuple[ServingConfig, ServingEvaluation]]:
    """The limits between the largest halving of ``c``'s ``max_num_seqs`` that meets the SLOs and the one above
    it that misses, by bisection (each evaluated).  Why: a deployment's latency grows with the sequences in
    flight, so the best limit under an SLO is the largest that meets it, and halvings alone left up to half of
    it unused."""
    seqs = [cc.max_num_seqs for cc, _ in halved]
    meets = [e.meets_slo for _, e in halved]
    k = next((i for i, m in enumerate(meets) if m), None)
    if k is None:
        return []
    lo = seqs[k]
    hi = seqs[k - 1] if k > 0 else (c.max_num_seqs if c.max_num_seqs > lo else None)
    if hi is None or hi == lo or (k == 0 and c.max_num_seqs == lo):
        return []
    out: list[tuple[ServingConfig, ServingEvaluation]] = []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        cc = replace(c, max_num_seqs=mid)
        e = evaluate(p, cc)
        out.append((cc, e))
        lo, hi = (mid, hi) if e.meets_slo else (lo, mid)
    return out


def _passing(tried: list[tuple[ServingConfig, ServingEvaluation]],
             plan: ServingConfig | None) -> list[tuple[ServingConfig, ServingEvaluation]]:
    """The evaluations that meet the load and the SLOs: the plan first (its proof stands), then fastest first."""
    return sorted(((c, e) for c, e in tried if e.meets_slo),
                  key=lambda x: (x[0] != plan, -x[1].capacity_tokens_per_s))


def _lateness(p: ServingProblem, r: Any) -> float:
    """How far a replica's own TTFT / TPOT at its batch limit are over the SLOs (the larger ratio)."""
    wl = p.workload
    return max(r.tpot_s * 1e3 / wl.tpot_ms if wl.tpot_ms is not None else 0.0,
               r.ttft_s * 1e3 / wl.ttft_ms if wl.ttft_ms is not None else 0.0)


def without_slowest(p: ServingProblem, c: ServingConfig,
                    every: bool = False) -> list[tuple[ServingConfig, ServingEvaluation]]:
    """``c`` less its slowest replicas (the latest against the SLOs, then the longest time per output token), one
    more at a time, each evaluated, until one meets the SLOs or what is left no longer serves the load (a rate it
    saturates, or nothing); ``every``: down to one replica whatever each does (the closed-loop candidates of
    :func:`~dnnplace.models.serving.baselines.adopt_better`, where the router holds every client on a slow one).

    Why: a deployment's TTFT and TPOT are its slowest replica's, so on a fleet of mixed GPUs a replica of the
    slow kind (a large model on small GPUs against a tight TPOT) fails an SLO at any batch while the others
    meet it with room to serve the rate; fewer sequences in flight do not help it, leaving its GPUs idle
    does.  Without this such a fleet was told that no deployment meets the SLO (docs/serving.md)."""
    out: list[tuple[ServingConfig, ServingEvaluation]] = []
    if len(c.replicas) < 2:
        return out
    ev = evaluate(p, c, at_load=False)
    if not ev.fits:
        return out
    # a replica's evaluation at its limit does not depend on the others: priced once, dropped with its replica
    kept = list(zip(c.replicas, ev.replicas))
    while len(kept) > 1:
        kept.pop(max(range(len(kept)), key=lambda i: (_lateness(p, kept[i][1]), kept[i][1].tpot_s)))
        cc = replace(c, replicas=tuple(r for r, _ in kept))
        e = evaluate(p, cc)
        out.append((cc, e))
        if not every and (e.meets_slo or (p.workload.rate is not None and e.saturated)):
            break
    return out


def _chosen(plan: ServingPlan, c: ServingConfig, e: ServingEvaluation) -> ServingPlan:
    """``plan`` itself, or another searched deployment that meets the SLOs (no longer proven optimal)."""
    if c == plan.config:
        return plan
    meta = {**plan.meta, "slo": "the fastest searched deployment that meets the SLOs (heuristic)"}
    return replace(plan, config=c, status="feasible", meta=meta)
