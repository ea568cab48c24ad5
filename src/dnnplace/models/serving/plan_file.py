"""The serving plan file (``dnnplace-serving-plan/1``): written by ``dnnplace serve``, read back by
``evaluate``, ``simulate``, ``report`` and ``export``.

Why self-contained: the file embeds the model's config.json, the fleet (with its links), the workload
and the engine, so the deployment is re-priced and exported on another machine without the inputs.
Every field read back is checked (kind, range, the GPUs named exist in that node and are used once,
the layers sum to the model's); each failure is one line naming the field.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.bands import band_note
from dnnplace.models.serving.disaggregation import NONE_FITS, Disaggregated, disaggregate
from dnnplace.models.serving.evaluation import ServingEvaluation, evaluate
from dnnplace.models.serving.fleet import LINKS, Fleet, Node, parse_gpus
from dnnplace.models.serving.lengths import lengths_from_json
from dnnplace.models.serving.load import check_engine_runs_on, fleet_defaults, problem
from dnnplace.models.serving.spec import FORMAT, SLO_STATS, Replica, ServingConfig, ServingPlan, ServingProblem, Stage
from dnnplace.utils.text import clip

__all__ = ["FORMAT", "config_dict", "model_config", "plan_document", "read_serving_plan"]


def config_dict(c: ServingConfig) -> dict[str, Any]:
    """A deployment as JSON: the engine's batch limits and each replica's stages in pipeline order."""
    return {"max_num_seqs": c.max_num_seqs, "max_num_batched_tokens": c.max_num_batched_tokens,
            "expert_parallel": c.expert_parallel,
            "replicas": [{"tp": r.tp, "pp": r.pp, "partition": r.partition(),
                          "stages": [{"gpu": s.gpu, "node": s.node, "gpus": list(s.gpus), "layers": s.layers}
                                     for s in r.stages]} for r in c.replicas]}


def _prediction(p: ServingProblem, ev: ServingEvaluation) -> dict[str, Any]:
    d = ev.to_dict()
    d["max_model_len"] = min((r.max_model_len or p.context for r in ev.replicas), default=p.context) \
        if ev.fits else p.context
    return d


def model_config(p: ServingProblem, plan: ServingPlan) -> dict[str, Any]:
    """The config.json the plan was made for: the one the plan carries, else the problem's source file."""
    doc = plan.meta.get("model_config")
    if isinstance(doc, dict):
        return doc
    from dnnplace.models.serving.load import checkpoint_config

    src = Path(p.source)
    found = checkpoint_config(src / "config.json" if src.is_dir() else src)
    if not isinstance(found, dict):
        raise DnnplaceError(f"{p.source}: not a config.json object")
    return found


def plan_document(p: ServingProblem, plan: ServingPlan, ev: ServingEvaluation,
                  baselines: list[Any] | None = None) -> dict[str, Any]:
    """The plan file's content (``baselines``: :func:`~dnnplace.models.serving.baselines.baselines`'s list)."""
    if baselines is None:
        from dnnplace.models.serving.baselines import plan_baselines

        baselines = plan_baselines(p, plan)
    f = p.fleet
    wl = p.workload
    ups = []
    for c in plan.meta.get("runner_ups", []):
        ups.append({"config": config_dict(c), "prediction": _prediction(p, evaluate(p, c))})
    return {
        "format": FORMAT,
        "model": {"name": p.model.name, "source": p.source, "precision": p.model.precision,
                  "kv_dtype": p.kv_dtype, "num_layers": p.model.num_layers, "config": model_config(p, plan)},
        "fleet": {"gpus": f.spec(), "nodes": [{"gpus": spec, "link": n.link, "fabric": _fabric(n)} for spec, n in
                                              zip(f.spec().split(";"), f.nodes)],
                  "network": {"bandwidth_gbps": f.network_bandwidth / 1e9 or None,
                              "latency_us": f.network_latency_s * 1e6 or None}},
        "workload": {"isl": wl.isl, "osl": wl.osl, "rate": wl.rate, "concurrency": wl.concurrency,
                     "ttft_ms": wl.ttft_ms, "tpot_ms": wl.tpot_ms, "ttft_stat": wl.ttft_stat,
                     "tpot_stat": wl.tpot_stat,
                     # the request-length distribution as [isl, osl, weight] rows (None: every request isl/osl;
                     # with one, isl and osl are its rounded means) and the file it came from
                     "lengths": None if wl.lengths is None else [[i, o, w] for i, o, w in wl.lengths],
                     "lengths_source": wl.lengths_source or None},
        "engine": p.engine.name, "max_model_len": p.max_model_len, "block_size": p.block_size,
        "memory_fraction": p.memory_fraction,
        "config": config_dict(plan.config),
        "prediction": _prediction(p, ev),
        "status": plan.status, "bound": plan.bound, "gap": plan.gap, "runtime_s": plan.runtime_s,
        # solve's bound on its objective (seconds per output token), kept as it was proven
        "seconds_per_token_bound": plan.meta.get("seconds_per_token_bound"),
        "error_band": round(ev.error_band, 4), "sources": dict(ev.sources),
        **({"error_band_note": note} if (note := band_note(p)) else {}),
        "runner_ups": ups,
        # where a baseline's deployment served more than the search's choice and replaced it: which, and why
        "adopted": plan.meta.get("adopted"),
        # the SLOs checked under the workload's load by the simulation (None: no load or no SLO)
        "slo_simulated": plan.meta.get("slo_simulated"),
        # what judged the SLOs: the evaluator's steady state or the simulation (None: no SLO)
        "slo_judged_by": plan.meta.get("slo_judged_by"),
        # each max_num_seqs the search tried and the best output tokens/s it found there (None: pinned)
        "max_num_seqs_searched": {str(k): v for k, v in plan.meta["max_num_seqs_searched"].items()}
        if plan.meta.get("max_num_seqs_searched") else None,
        # the max_num_batched_tokens those limits were tried at (None: not said; it can differ from the plan's own
        # when the budget search moved it after)
        "max_num_seqs_searched_at": plan.meta.get("max_num_seqs_searched_at"),
        # expert parallelism off and on, each setting's best output tokens/s (None: not a choice, or pinned)
        "expert_parallel_searched": plan.meta.get("expert_parallel_searched"),
        # each max_num_batched_tokens priced with the plan's replicas and its output tokens/s (None: not searched)
        "max_num_batched_tokens_searched": {str(k): v for k, v in plan.meta["max_num_batched_tokens_searched"].items()}
        if plan.meta.get("max_num_batched_tokens_searched") else None,
        "baselines": [_with_verdict(b.to_dict(), ev.error_band) for b in baselines],
        # the best prefill/decode disaggregated deployment priced beside the plan (None: not asked for)
        "disaggregated": _disaggregated_doc(plan, ev),
    }


def _fabric(node: Any) -> str:
    """What the node's ``link`` means for each of its GPU kinds, in words (written for the reader, never read
    back): ``nvlink`` is the node's own fabric, so PCIe cards (RTX 4090, L40S, L4) talk over PCIe under it, a
    bridged pair (RTX A6000 / 3090) over its bridge and PCIe beyond, and different kinds over PCIe."""
    from dnnplace.core.catalogue import device_spec
    from dnnplace.models.serving.catalogue import tp_link

    parts = []
    for kind in sorted({g.name for g in node.gpus}):
        spec = device_spec(kind)
        if node.link == "pcie" or spec.nvlink_bandwidth <= 0:
            parts.append(f"{kind}: PCIe")
        elif tp_link(kind, node.link, 4) != node.link:  # the bridge rule the TP all-reduce is priced by
            parts.append(f"{kind}: {spec.nvlink} (pairs), PCIe beyond")
        else:
            parts.append(f"{kind}: {spec.nvlink}")
    if len(parts) > 1:
        parts.append("between kinds: PCIe")
    return "; ".join(parts)


def _disaggregated_doc(plan: ServingPlan, ev: ServingEvaluation) -> dict[str, Any] | None:
    d = plan.meta.get("disaggregated")
    if d is None:
        return None
    if isinstance(d, str):
        return {"status": "infeasible", "note": d or NONE_FITS}
    return disaggregated_document(d, ev.capacity_tokens_per_s if ev.fits else 0.0, ev.error_band)


def disaggregated_document(d: Disaggregated, plan_value: float, plan_band: float) -> dict[str, Any]:
    """The plan file's ``disaggregated`` section: both pools, the rates, the proof, and the gain over the plan
    with whether it exceeds both predictions' error bands (else it is not shown to be a win)."""
    gain = d.output_tokens_per_s / plan_value if plan_value > 0 else None
    band = max(plan_band, d.error_band)
    return {"split": d.split, "prefill": config_dict(d.prefill), "decode": config_dict(d.decode),
            "prefill_requests_per_s": round(d.prefill_rps, 4), "decode_requests_per_s": round(d.decode_rps, 4),
            "transfer_requests_per_s": None if math.isinf(d.transfer_rps) else round(d.transfer_rps, 4),
            "kv_transfer_ms": round(d.transfer_ms, 4), "link": d.link, "limited_by": d.limited_by,
            "requests_per_s": round(d.requests_per_s, 4), "output_tokens_per_s": round(d.output_tokens_per_s, 3),
            "ttft_ms": round(d.ttft_ms, 3), "tpot_ms": round(d.tpot_ms, 4), "error_band": round(d.error_band, 4),
            "status": d.status, "bound": None if d.bound is None else round(d.bound, 3),
            "gap": None if d.gap is None else round(d.gap, 6), "splits": d.splits,
            "gain_over_plan": None if gain is None else round(gain, 4),
            "beyond_band": None if gain is None else bool(abs(gain - 1.0) > band),
            "note": "priced by the same kernels as the plan, checked against no measured disaggregated run; "
                    "one stage per replica; unloaded TTFT"}


def _read_disaggregated(prob: ServingProblem, d: Any, where: str) -> Any:
    """A plan file's ``disaggregated`` section: both pools' deployments checked against the fleet and priced
    again (what the file says of their rates is not taken on trust); the proof as the search left it."""
    if not isinstance(d, dict):
        raise DnnplaceError(f"{where}: must be a JSON object")
    status = _get(d, "status", str, where)
    if status == "infeasible":
        return clip(_get(d, "note", str, where, optional=True) or NONE_FITS, 200)
    if status not in ("optimal", "feasible"):
        raise DnnplaceError(f"{where}: status must be optimal, feasible or infeasible, got '{clip(status, 20)}'")
    pre = _config(prob, _get(d, "prefill", dict, where), f"{where}.prefill")
    dec = _config(prob, _get(d, "decode", dict, where), f"{where}.decode")
    shared = {(s.node, g) for r in pre.replicas for s in r.stages for g in s.gpus} & \
        {(s.node, g) for r in dec.replicas for s in r.stages for g in s.gpus}
    if shared:
        node, g = min(shared)
        raise DnnplaceError(f"{where}: GPU {g} of node {node} is in both the prefill and the decode pool")
    try:
        found = disaggregate(prob, pre, dec)
    except DnnplaceError as exc:
        raise DnnplaceError(f"{where}: {exc}") from None
    rows = _get(d, "splits", list, where)
    if not all(isinstance(r, dict) and isinstance(r.get("split"), str) for r in rows):
        raise DnnplaceError(f"{where}.splits: each must be an object with a 'split' label")
    return replace(found, status=status, split=clip(_get(d, "split", str, where, optional=True) or "", 120),
                   bound=_get(d, "bound", (int, float), where, optional=True),
                   gap=_get(d, "gap", (int, float), where, optional=True),
                   splits=[{k: (clip(v, 120) if isinstance(v, str) else v) for k, v in r.items()} for r in rows])


def _slo_simulated(d: dict[str, Any], where: str) -> dict[str, Any]:
    """The simulated SLO check a plan file carries, each field of its kind (None where it was not settled)."""
    out: dict[str, Any] = {"load": clip(str(_get(d, "load", str, where)), 60)}
    for k in ("requests", "completed"):
        out[k] = _get(d, k, int, where)
    for k in ("ttft_ms", "tpot_ms"):
        out[k] = _get(d, k, (int, float), where, optional=True)
    for k in ("ttft_stat", "tpot_stat"):  # plans before the SLO statistics judged the mean
        stat = _get(d, k, str, where, optional=True) or "mean"
        if stat not in SLO_STATS:
            raise DnnplaceError(f"{where}: {k} must be one of {', '.join(SLO_STATS)}, got '{clip(stat, 20)}'")
        out[k] = stat
    out["saturated"] = _get(d, "saturated", bool, where)
    judged = _get(d, "saturation_judged", bool, where, optional=True)  # plans before it was said: judged
    out["saturation_judged"] = True if judged is None else judged
    stopped = _get(d, "stopped", str, where, optional=True)
    out["stopped"] = None if stopped is None else clip(stopped, 40)
    out["meets_slo"] = _get(d, "meets_slo", bool, where, optional=True)
    return out


def _with_verdict(doc: dict[str, Any], band: float) -> dict[str, Any]:
    """A baseline with whether the plan's gain over it exceeds the prediction's own error band: a gain
    inside the band is not shown to be a win (both are priced by one model, but its errors need not cancel)."""
    gain = doc.get("gain")
    doc["beyond_band"] = None if gain is None else bool(gain - 1.0 > band)
    return doc


def _get(d: Any, key: str, kind: type | tuple[type, ...], where: str, *, optional: bool = False) -> Any:
    if not isinstance(d, dict):
        raise DnnplaceError(f"{where}: must be a JSON object")
    if key not in d or (optional and d[key] is None):
        if optional:
            return None
        raise DnnplaceError(f"{where}: '{key}' is missing")
    v = d[key]
    if isinstance(v, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise DnnplaceError(f"{where}: '{key}' must be a {getattr(kind, '__name__', 'number')}, got {v!r}")
    if not isinstance(v, kind) or (isinstance(v, float) and not math.isfinite(v)):
        raise DnnplaceError(f"{where}: '{key}' has the wrong kind ({clip(repr(v), 40)})")
    return v


def _count(d: Any, key: str, where: str, lo: int = 1) -> int:
    v = _get(d, key, int, where)
    if v < lo or v > 1 << 30:
        raise DnnplaceError(f"{where}: '{key}' must be a whole number >= {lo}, got {v}")
    return int(v)


def _fleet(doc: Any, where: str) -> Fleet:
    f = _get(doc, "fleet", dict, where)
    w = f"{where}: fleet"
    fleet = parse_gpus(_get(f, "gpus", str, w), f"{where} fleet.gpus")
    nodes_doc = _get(f, "nodes", list, w)
    if len(nodes_doc) != len(fleet.nodes):
        raise DnnplaceError(f"{w}: {len(nodes_doc)} nodes listed, the gpus spec has {len(fleet.nodes)}")
    nodes = []
    for i, (nd, node) in enumerate(zip(nodes_doc, fleet.nodes)):
        link = _get(nd, "link", str, f"{w}.nodes[{i}]")
        if link not in LINKS:
            raise DnnplaceError(f"{w}.nodes[{i}]: unknown link '{clip(link, 30)}'; known: {', '.join(LINKS)}")
        nodes.append(Node(node.gpus, link))
    net = _get(f, "network", dict, w)
    bw = _get(net, "bandwidth_gbps", (int, float), f"{w}.network", optional=True)
    lat = _get(net, "latency_us", (int, float), f"{w}.network", optional=True)
    for v, k in ((bw, "bandwidth_gbps"), (lat, "latency_us")):
        if v is not None and not 0 < v < 1e9:
            raise DnnplaceError(f"{w}.network: '{k}' must be a positive number, got {v}")
    return Fleet(tuple(nodes), (bw or 0.0) * 1e9, (lat or 0.0) * 1e-6, text=fleet.text)


def _config(p: ServingProblem, d: Any, where: str) -> ServingConfig:
    reps_doc = _get(d, "replicas", list, where)
    if not reps_doc:
        raise DnnplaceError(f"{where}: 'replicas' is empty")
    used: set[tuple[int, int]] = set()
    reps = []
    for k, rd in enumerate(reps_doc):
        w = f"{where}.replicas[{k}]"
        stages_doc = _get(rd, "stages", list, w)
        if not stages_doc:
            raise DnnplaceError(f"{w}: 'stages' is empty")
        stages = []
        for i, sd in enumerate(stages_doc):
            ws = f"{w}.stages[{i}]"
            node = _count(sd, "node", ws, 0)
            if node >= len(p.fleet.nodes):
                raise DnnplaceError(f"{ws}: node {node} is not in the fleet ({len(p.fleet.nodes)} nodes)")
            gpu = _get(sd, "gpu", str, ws)
            kinds = p.fleet.nodes[node].kinds()
            if gpu not in kinds:
                raise DnnplaceError(f"{ws}: node {node} has no '{clip(gpu, 30)}' GPU")
            gpus = _get(sd, "gpus", list, ws)
            have = {g.index for g in kinds[gpu]}
            if not gpus or any(isinstance(g, bool) or not isinstance(g, int) or g not in have for g in gpus):
                raise DnnplaceError(f"{ws}: 'gpus' must list {gpu} GPUs of node {node} ({sorted(have)})")
            for g in gpus:
                if (node, g) in used:
                    raise DnnplaceError(f"{ws}: GPU {g} of node {node} is used twice")
                used.add((node, g))
            stages.append(Stage(gpu, node, tuple(gpus), _count(sd, "layers", ws)))
        r = Replica(tuple(stages))
        if len({s.tp for s in stages}) != 1:
            raise DnnplaceError(f"{w}: every stage of a replica has the same TP size (as every engine demands)")
        if sum(r.partition()) != p.model.num_layers:
            raise DnnplaceError(f"{w}: the layers {r.partition()} sum to {sum(r.partition())}, "
                                f"the model has {p.model.num_layers}")
        summary: tuple[tuple[str, object], ...] = (("tp", r.tp), ("pp", r.pp), ("partition", r.partition()))
        for key, want in summary:
            if key in rd and rd[key] != want:  # a hand edit of the summary or of the stages: never pick one
                raise DnnplaceError(f"{w}: '{key}' is {clip(repr(rd[key]), 40)} but its stages give {want}; "
                                    f"make them agree (or delete '{key}': the stages are the deployment)")
        reps.append(r)
    ep = _get(d, "expert_parallel", bool, where, optional=True)  # files before the knob: False, as priced then
    if ep:
        from dnnplace.models.serving.evaluation import expert_parallel_refusal

        if why := expert_parallel_refusal(p, tuple(r.tp for r in reps)):
            raise DnnplaceError(f"{where}: 'expert_parallel' is true but {why}")
    return ServingConfig(tuple(reps), _count(d, "max_num_seqs", where), _count(d, "max_num_batched_tokens", where),
                         bool(ep))


def read_serving_plan(doc: Any, source: str) -> tuple[ServingProblem, ServingPlan]:
    """The problem a plan file was made for and its plan (one-line errors naming the field)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DnnplaceError(f"{source}: not a serving plan file (format {FORMAT})")
    m = _get(doc, "model", dict, source)
    wl = _get(doc, "workload", dict, source)
    w = f"{source}: workload"
    isl, osl = _count(wl, "isl", w), _count(wl, "osl", w)
    rows = None
    if wl.get("lengths") is not None:  # older plan files have no such field: identical requests
        rows = lengths_from_json(wl["lengths"], f"{source}: workload.lengths")
    named = _get(wl, "lengths_source", str, w, optional=True)
    fleet = _fleet(doc, source)
    try:  # the plan's own GPUs, not a stand-in: an engine's precision rules read their compute capability
        prob = problem(_get(m, "source", str, f"{source}: model"), gpus=fleet.spec(),
                       isl=isl if rows is None else None, osl=osl if rows is None else None, lengths=rows,
                       rate=_get(wl, "rate", (int, float), w, optional=True),
                       concurrency=_get(wl, "concurrency", int, w, optional=True),
                       ttft_ms=_get(wl, "ttft_ms", (int, float), w, optional=True),
                       tpot_ms=_get(wl, "tpot_ms", (int, float), w, optional=True),
                       ttft_stat=_get(wl, "ttft_stat", str, w, optional=True) or "mean",
                       tpot_stat=_get(wl, "tpot_stat", str, w, optional=True) or "mean",
                       engine=_get(doc, "engine", str, source), precision=_get(m, "precision", str, f"{source}: model"),
                       kv_dtype=_get(m, "kv_dtype", str, f"{source}: model"),
                       max_model_len=_count(doc, "max_model_len", source, 0),
                       block_size=_count(doc, "block_size", source, 0),
                       memory_fraction=_get(doc, "memory_fraction", (int, float), source),
                       doc=_get(m, "config", dict, f"{source}: model"))
    except DnnplaceError as exc:
        msg = str(exc)
        raise DnnplaceError(msg if msg.startswith(source) else f"{source}: {msg}") from None
    if rows is not None and (prob.workload.isl, prob.workload.osl) != (isl, osl):
        raise DnnplaceError(f"{w}.lengths: their means (isl {prob.workload.isl}, osl {prob.workload.osl}) disagree "
                            f"with 'isl' {isl} and 'osl' {osl}; the plan was made for another distribution")
    if rows is not None:
        prob = replace(prob, workload=replace(prob.workload, lengths_source=clip(named or "", 120)))
    prob = replace(prob, fleet=fleet, engine=fleet_defaults(prob.engine, fleet))  # its links and network too
    try:
        check_engine_runs_on(prob.engine, prob.fleet)
    except DnnplaceError as exc:
        raise DnnplaceError(f"{source}: {exc}") from None
    cfg = _config(prob, _get(doc, "config", dict, source), f"{source}: config")
    status = _get(doc, "status", str, source)
    bound = _get(doc, "bound", (int, float), source, optional=True)
    gap = _get(doc, "gap", (int, float), source, optional=True)
    runtime = _get(doc, "runtime_s", (int, float), source, optional=True)
    ups = []
    for i, u in enumerate(_get(doc, "runner_ups", list, source)):
        ups.append(_config(prob, _get(u, "config", dict, f"{source}: runner_ups[{i}]"),
                           f"{source}: runner_ups[{i}].config"))
    meta: dict[str, Any] = {"model_config": m["config"], "runner_ups": ups}
    spt = _get(doc, "seconds_per_token_bound", (int, float), source, optional=True)
    if spt is not None:
        meta["seconds_per_token_bound"] = spt
    if doc.get("slo_simulated") is not None:
        meta["slo_simulated"] = _slo_simulated(_get(doc, "slo_simulated", dict, source), f"{source}: slo_simulated")
    judged = _get(doc, "slo_judged_by", str, source, optional=True)
    if judged is not None:
        meta["slo_judged_by"] = clip(judged, 120)
    if doc.get("disaggregated") is not None:
        meta["disaggregated"] = _read_disaggregated(prob, doc["disaggregated"], f"{source}: disaggregated")
    for key in ("max_num_seqs_searched", "max_num_batched_tokens_searched"):
        tried = doc.get(key)
        if tried is None:
            continue
        where = f"{source}: {key}"
        if not isinstance(tried, dict):
            raise DnnplaceError(f"{where} must be an object of limit: tokens/s")
        try:
            if any(isinstance(v, bool) for v in tried.values()):
                raise TypeError
            meta[key] = {int(k): float(v) for k, v in tried.items()}
        except (TypeError, ValueError):
            raise DnnplaceError(f"{where} must map whole limits to numbers") from None
    at = doc.get("max_num_seqs_searched_at")
    if at is not None:
        if isinstance(at, bool) or not isinstance(at, int) or at < 1:
            raise DnnplaceError(f"{source}: max_num_seqs_searched_at must be a whole number of tokens")
        meta["max_num_seqs_searched_at"] = at
    searched = doc.get("expert_parallel_searched")
    if searched is not None:
        where = f"{source}: expert_parallel_searched"
        if not (isinstance(searched, dict) and set(searched) <= {"off", "on"} and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in searched.values())):
            raise DnnplaceError(f"{where} must map off / on to tokens/s")
        meta["expert_parallel_searched"] = {k: float(v) for k, v in searched.items()}
    plan = ServingPlan(cfg, clip(status, 40), bound, gap, runtime, meta)
    return prob, plan
