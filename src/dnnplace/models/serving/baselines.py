"""What users run now, priced by the same evaluator as the plan, and the plan's gain over each.

Why: a plan's throughput means little alone; the question users ask is how much it beats what they
would have typed.  Each baseline rebuilds the split an engine or library makes by default -- read in
its source (file and function named beside each rule) and reimplemented here, never imported --
and prices it with :func:`~dnnplace.models.serving.evaluation.evaluate`, so the plan and the
baselines share every formula.  A baseline that does not fit is reported (gain None, the stage and
its shortfall named), never raised.

* ``engine-even``: the plan's replicas, stages and TP with the engine's own default layer split
  (vLLM ``get_pp_indices``: remainder to the middle stages; SGLang: to the last; TensorRT-LLM
  ``torch.tensor_split``: to the first; llama.cpp: by free memory; Hugging Face: accelerate's
  balanced map) -- isolates what the split alone is worth.
* ``accelerate-balanced``: ``device_map="auto"`` over each node's GPUs in index order
  (``get_balanced_memory`` then the sequential greedy ``infer_auto_device_map``), one replica per node.
* ``llama.cpp-free-memory``: ``llama-server -ngl all`` with no ``-ts`` over each node's GPUs: layer
  slots (layers + the output layer) proportional to each device's free memory.
* ``best-homogeneous``: the best plan :func:`~dnnplace.models.serving.search.search` finds on the
  GPUs of one kind only (every kind tried, the best kept); with SLOs, each kind's best that meets them, chosen
  as the plan's is (:func:`~dnnplace.models.serving.verdicts.meet_slo`), so the two are compared on equal terms.

Each baseline says whether it meets the workload's SLOs and load (``meets_slo``): a rate from a deployment
that misses them is not one the user could have had instead.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from dnnplace.core.catalogue import device_spec
from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.evaluation import ServingEvaluation, evaluate
from dnnplace.models.serving.load import fleet_defaults
from dnnplace.models.serving.search import search
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, ServingProblem, Stage
from dnnplace.models.serving.verdicts import meet_slo, without_slowest

__all__ = ["NAMES", "Baseline", "accelerate_balanced_layers", "adopt_better", "baselines", "engine_default_split",
           "llama_cpp_layers", "plan_baselines"]

NAMES = ("engine-even", "accelerate-balanced", "llama.cpp-free-memory", "best-homogeneous")


@dataclass
class Baseline:
    """One baseline deployment, its prediction and the plan's gain over it (None: it does not fit)."""

    name: str
    config: ServingConfig | None
    evaluation: ServingEvaluation | None
    gain: float | None
    why: str
    #: best-homogeneous: each kind's best deployment (on disjoint GPUs), which side by side make one more candidate
    parts: tuple[ServingConfig, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        cfg = None
        if self.config is not None:
            cfg = {"max_num_seqs": self.config.max_num_seqs,
                   "max_num_batched_tokens": self.config.max_num_batched_tokens,
                   "replicas": [{"tp": r.tp, "pp": r.pp,
                                 "stages": [{"gpu": s.gpu, "node": s.node, "gpus": list(s.gpus), "layers": s.layers}
                                            for s in r.stages]} for r in self.config.replicas]}
        ev = self.evaluation
        return {"name": self.name, "config": cfg,
                "output_tokens_per_s": None if ev is None or not ev.fits else round(ev.output_tokens_per_s, 6),
                "capacity_tokens_per_s": None if ev is None or not ev.fits else round(ev.capacity_tokens_per_s, 6),
                "fits": bool(ev is not None and ev.fits),
                # whether it meets the workload's SLOs and load at its batch limits, as the plan is judged: a
                # baseline that misses them is no deployment the user could run instead
                "meets_slo": None if ev is None or not ev.fits else bool(ev.meets_slo),
                "gain": None if self.gain is None else round(self.gain, 6), "why": self.why}


# ---------------------------------------------------------------- the engines' default splits

def engine_default_split(layers: int, stages: int, rule: str) -> list[int]:
    """The layer counts an engine gives ``stages`` PP ranks when no partition is set.

    ``middle``: vLLM ``vllm/distributed/utils.py::get_pp_indices`` -- ``layers // stages`` each, the
    remainder added to ``partitions[-2], partitions[-3], ...``; ``last``: SGLang
    ``srt/distributed/utils.py::get_pp_indices`` -- the last ``remainder`` ranks get one more;
    ``first``: TensorRT-LLM ``mapping.py::pp_layers`` (``torch.tensor_split``) -- the first ones do.
    """
    base, rem = divmod(layers, stages)
    out = [base] * stages
    if rule == "middle":
        for i in range(2, rem + 2):
            out[-i] += 1
    elif rule == "last":
        for i in range(stages - rem, stages):
            out[i] += 1
    else:
        for i in range(rem):
            out[i] += 1
    return out


def llama_cpp_layers(layers: int, shares: list[float]) -> list[int]:
    """Repeating layers per device under llama.cpp's ``-sm layer`` with ``-ngl all``
    (``src/llama-model.cpp::load_tensors``): ``splits`` is the normalised cumulative sum of ``shares``
    (``-ts``, or each device's free memory when ``-ts`` is unset) in float32; slot ``il`` of ``layers + 1``
    (the output layer is slot ``layers``) goes to ``upper_bound(splits, il / (layers + 1))``."""
    s = np.cumsum(np.asarray(shares, dtype=np.float32), dtype=np.float32)
    s = (s / s[-1]).astype(np.float32)
    act = layers + 1
    out = [0] * len(shares)
    for il in range(layers):
        dev = int(np.searchsorted(s, np.float32(il) / np.float32(act), side="right"))
        out[min(dev, len(shares) - 1)] += 1
    return out


def accelerate_balanced_layers(p: ServingProblem, free: list[float]) -> tuple[list[int], str]:
    """Decoder layers per GPU of accelerate's ``device_map="auto"`` (``"balanced"``) over GPUs with ``free``
    bytes each, and what went to the CPU ('' when nothing).

    ``accelerate/utils/modeling.py::get_balanced_memory``: every GPU but the last gets
    ``model_size // n + int(1.25 * max(one LlamaDecoderLayer, mean leaf module))``; then
    ``infer_auto_device_map`` walks ``model.embed_tokens``, ``model.layers.*``, ``model.norm``,
    ``lm_head`` in order, filling one GPU until the next module does not fit and never going back; GPU 0
    (a "main device") keeps room for the largest layer.  Leftovers go to the CPU.
    """
    m = p.model
    n_gpu = len(free)
    layer = [float(b) for b in m.weight_bytes]
    head = 0.0 if m.tied else m.head_bytes  # a tied head shares the embedding's tensor (counted once)
    modules = [("embed", m.embed_bytes)] + [(f"layer{i}", b) for i, b in enumerate(layer)] + \
        [("norm", m.hidden * 2.0), ("lm_head", head)]
    total = sum(b for _, b in modules)
    leaves = 9 * m.num_layers + 3 + (0 if m.tied else 1)  # 7 linears + 2 norms per layer, embed, norm, rotary, head
    buffer = int(1.25 * max(layer[0], total / leaves))
    budget = list(free)
    if n_gpu == 1:
        budget[0] = free[0] * 0.9  # one GPU and no max_memory: 90 %
    for i in range(n_gpu - 1):
        budget[i] = min(total // n_gpu + buffer, free[i])
    largest = max(b for _, b in modules)
    used = [0.0] * n_gpu
    counts = [0] * n_gpu
    dev = 0
    cpu: list[str] = []
    for name, size in modules:
        while dev < n_gpu:
            cap = budget[dev] - (largest if dev == 0 else 0.0)
            if used[dev] + size <= cap:
                used[dev] += size
                if name.startswith("layer"):
                    counts[dev] += 1
                break
            dev += 1
        if dev >= n_gpu:
            cpu.append(name)
    why = ""
    if cpu:
        lay = [c for c in cpu if c.startswith("layer")]
        why = f"{len(lay)} decoder layers" + (" and the LM head" if "lm_head" in cpu else "") + " go to the CPU"
        if not lay and cpu == ["norm"]:
            why = "the final norm goes to the CPU"
    return counts, why


# ---------------------------------------------------------------- pricing

def _gain(plan_value: float, ev: ServingEvaluation) -> float | None:
    if not ev.fits or ev.capacity_tokens_per_s <= 0 or plan_value <= 0:
        return None
    return plan_value / ev.capacity_tokens_per_s


def _shortfall(p: ServingProblem, cfg: ServingConfig, ev: ServingEvaluation) -> str:
    """The stage that does not fit and by how much: weights, activations, graphs and one request's KV
    against the engine's budget on that GPU."""
    need_tok = p.workload.max_len
    worst: tuple[float, str] = (0.0, "")
    for k, (r, re) in enumerate(zip(cfg.replicas, ev.replicas)):
        for i, (s, mem) in enumerate(zip(r.stages, re.memory)):
            short = mem.kv_per_token * need_tok - mem.kv_free
            if short > worst[0]:
                worst = (short, f"replica {k + 1} stage {i + 1} ({s.tp}x {s.gpu}, {s.layers} layers) is "
                                f"{short / 2**30:.2f} GiB short of its weights, activations and one request's KV")
    return worst[1] or ev.why or "no batch fits"


def _price(p: ServingProblem, name: str, cfg: ServingConfig, plan_value: float, what: str) -> Baseline:
    ev = evaluate(p, cfg)
    if not ev.fits:
        return Baseline(name, cfg, ev, None, f"{what}; does not fit: {_shortfall(p, cfg, ev)}")
    return Baseline(name, cfg, ev, _gain(plan_value, ev), what)


def _resplit(r: Replica, layers: list[int]) -> Replica | None:
    """``r`` with ``layers`` per stage, dropping stages given none (they hold nothing); None if none is left."""
    kept = tuple(dataclasses.replace(s, layers=n) for s, n in zip(r.stages, layers) if n > 0)
    return Replica(kept) if kept else None


def _free(gpu: str) -> float:
    """A GPU's free memory at start-up (``cudaMemGetInfo``): the catalogue's usable memory."""
    return float(device_spec(gpu).usable_memory_bytes)


def _engine_even(p: ServingProblem, plan: ServingPlan, value: float) -> Baseline:
    rule = p.engine.default_split
    n = p.model.num_layers
    reps = []
    for r in plan.config.replicas:
        if rule == "free_memory":
            layers = llama_cpp_layers(n, [_free(s.gpu) * s.tp for s in r.stages])
        elif rule == "balanced":
            layers, cpu = accelerate_balanced_layers(p, [_free(s.gpu) for s in r.stages for _ in s.gpus])
            if cpu:
                return Baseline("engine-even", None, None, None, f"accelerate's balanced map over the plan's GPUs: "
                                f"{cpu}; offloaded layers are not priced")
            layers = [sum(layers[k:k + s.tp]) for k, s in zip(np.cumsum([0] + [s.tp for s in r.stages]), r.stages)]
        else:
            layers = engine_default_split(n, r.pp, rule)
        rep = _resplit(r, layers)
        if rep is not None:
            reps.append(rep)
    what = {"middle": "vLLM's get_pp_indices default (remainder to the middle stages)",
            "last": "SGLang's default split (remainder to the last stages)",
            "first": "TensorRT-LLM's tensor_split default (remainder to the first stages)",
            "free_memory": "llama.cpp's default -ts (free memory per device)",
            "balanced": "accelerate's balanced device map"}.get(rule, rule)
    what = f"{what} over the plan's replicas, stages and TP" + \
        (" (expert parallel, as the plan)" if plan.config.expert_parallel else "")
    parts = "; ".join("+".join(map(str, r.partition())) for r in reps)
    cfg = ServingConfig(tuple(reps), plan.config.max_num_seqs, plan.config.max_num_batched_tokens,
                        plan.config.expert_parallel)
    return _price(p, "engine-even", cfg, value, f"{what}: {parts}")


def _node_pipelines(p: ServingProblem, plan: ServingPlan, value: float, name: str) -> Baseline:
    """One replica per node over all its GPUs in index order, TP 1, split by accelerate or llama.cpp."""
    n = p.model.num_layers
    reps = []
    notes = []
    for k, node in enumerate(p.fleet.nodes):
        if not node.gpus:
            continue
        free = [_free(g.name) for g in node.gpus]
        if name == "accelerate-balanced":
            layers, cpu = accelerate_balanced_layers(p, free)
            if cpu:
                return Baseline(name, None, None, None, f"device_map='auto' over node {k + 1} "
                                f"({node.gpus[0].name} ...): {cpu}; does not fit on the GPUs (offload is not priced)")
        else:
            layers = llama_cpp_layers(n, free)
        stages = tuple(Stage(g.name, k, (g.index,), c) for g, c in zip(node.gpus, layers))
        rep = _resplit(Replica(stages), layers)
        if rep is not None:
            reps.append(rep)
            notes.append("+".join(map(str, rep.partition())))
    what = ("accelerate get_balanced_memory + infer_auto_device_map" if name == "accelerate-balanced" else
            "llama.cpp -sm layer -ngl all, -ts unset (free memory)") + \
        f", one TP-1 pipeline per node over all its GPUs in index order: {'; '.join(notes)}"
    cfg = ServingConfig(tuple(reps), plan.config.max_num_seqs, plan.config.max_num_batched_tokens)
    return _price(p, name, cfg, value, what)


def _best_homogeneous(p: ServingProblem, plan: ServingPlan, value: float, time_limit: float) -> Baseline:
    kinds = sorted({g.name for g in p.fleet.gpus})
    best: tuple[float, str, ServingConfig | None] = (0.0, "", None)
    tried = []
    # a plan whose batch limit was searched meets each kind at that kind's own best limit (from the engine's
    # default for those GPUs); a pinned limit stays pinned
    searched = bool(plan.meta.get("max_num_seqs_searched"))
    slo = p.workload.ttft_ms is not None or p.workload.tpot_ms is not None
    parts: list[ServingConfig] = []
    for kind in kinds:
        fleet = p.fleet.only(lambda g: g.name == kind)  # noqa: B023 -- called at once
        sub = dataclasses.replace(p, fleet=fleet, engine=fleet_defaults(p.engine, fleet))
        share = time_limit / max(len(kinds), 1)
        sp = search(sub, time_limit=share / 2 if slo else share,
                    max_num_seqs=None if searched else plan.config.max_num_seqs,
                    max_num_batched_tokens=plan.config.max_num_batched_tokens)
        count = sum(1 for g in p.fleet.gpus if g.name == kind)
        if not sp.config.replicas:
            stopped = sp.meta.get("complete") is False  # cut by the time limit: nothing proven
            tried.append(f"{count}x {kind}: " + ("none found in the time limit" if stopped else "no deployment fits"))
            continue
        if slo:  # the kind's best deployment that meets the SLOs, chosen as the plan's is (the search ranks by rate)
            try:
                sp, _ = meet_slo(sub, sp, time_limit=share / 2, pinned_seqs=not searched)
            except DnnplaceError:
                tried.append(f"{count}x {kind}: none meets the SLOs")
                continue
        v = evaluate(p, sp.config).capacity_tokens_per_s
        tried.append(f"{count}x {kind}: {v:.0f} tok/s ({sp.status})")
        parts.append(sp.config)
        if v > best[0]:
            best = (v, kind, sp.config)
    if best[2] is None:
        lead = "no single GPU kind of the fleet holds the model at any TP/PP" if \
            not any("time limit" in t for t in tried) else "no single-kind deployment found"
        return Baseline("best-homogeneous", None, None, None, f"{lead}: " + "; ".join(tried))
    found = _price(p, "best-homogeneous", best[2], value,
                   f"search on the {best[1]} GPUs only (best of: {'; '.join(tried)})")
    return dataclasses.replace(found, parts=tuple(parts))


def baselines(p: ServingProblem, plan: ServingPlan, *, time_limit: float | None = None,
              homogeneous: Baseline | None = None) -> list[Baseline]:
    """The four baselines of the plan, each priced by :func:`evaluate` (``time_limit``: for the
    best-homogeneous searches together; by default the plan's own search limit, so ``--time-limit`` bounds
    the whole command, not only the search; ``homogeneous``: that baseline already searched, its gain re-priced
    against this plan instead of searched again)."""
    if time_limit is None:
        time_limit = float(plan.meta.get("time_limit", 30.0))
    value = evaluate(p, plan.config).capacity_tokens_per_s if plan.config.replicas else 0.0
    out = []

    def _homogeneous() -> Baseline:
        if homogeneous is None:
            return _best_homogeneous(p, plan, value, time_limit)
        ev = homogeneous.evaluation
        return dataclasses.replace(homogeneous, gain=None if ev is None else _gain(value, ev))

    builders = (lambda: _engine_even(p, plan, value),
                lambda: _node_pipelines(p, plan, value, "accelerate-balanced"),
                lambda: _node_pipelines(p, plan, value, "llama.cpp-free-memory"),
                _homogeneous)
    for name, build in zip(NAMES, builders):
        if not plan.config.replicas and name == "engine-even":
            out.append(Baseline(name, None, None, None, "the plan has no replica (nothing fits), so no split to redo"))
            continue
        b = build()
        if value <= 0 and b.gain is not None:
            b = dataclasses.replace(b, gain=None, why=b.why + "; the plan itself does not fit")
        out.append(b)
    return out


def adopt_better(p: ServingProblem, plan: ServingPlan, found: list[Baseline]) -> tuple[ServingPlan, list[Baseline]]:
    """``plan``, or the baseline deployment of ``found`` (or each kind's best side by side, or under a closed
    loop the plan less its slowest replicas) that serves more and fits and meets the SLOs, with the baselines
    re-priced against it: the ones built on the plan's replicas are rebuilt on the adopted ones, the searched
    one is kept.  "Serves more": capacity, or under ``--concurrency`` the rate at that many clients (a slow
    replica the engine's router sends every other request to can hold a closed loop below its fast GPUs alone).
    Its proof, on capacity as the search's: the search's bound where the batch limits are the plan's (the
    search proves at the limits it chose), else a search again at the adopted limits (nothing claimed with under
    a second left); never a bound below the adopted capacity.  ``meta["adopted"]`` says which and what the
    search had chosen."""
    if not plan.config.replicas:
        return plan, found
    slo = p.workload.ttft_ms is not None or p.workload.tpot_ms is not None
    closed = p.workload.concurrency is not None

    def rate(ev: ServingEvaluation) -> float:
        return ev.output_tokens_per_s if closed else ev.capacity_tokens_per_s

    value = rate(evaluate(p, plan.config))
    usable = [b for b in found if b.config is not None and b.evaluation is not None and b.evaluation.fits
              and (b.evaluation.meets_slo or not slo)]
    usable += _side_by_side(p, next((b.parts for b in found if len(b.parts) > 1), ()), slo)
    if closed:
        usable += _fewer_replicas(p, plan.config, slo)
    best = max(usable, key=lambda b: rate(b.evaluation), default=None)  # type: ignore[arg-type]
    if best is None or best.config is None or best.evaluation is None or \
            rate(best.evaluation) <= value * (1.0 + 1e-9):
        return plan, found
    v, cap, cfg = rate(best.evaluation), best.evaluation.capacity_tokens_per_s, best.config
    what = "at its concurrency " if closed else ""
    label = f"the {best.name} baseline's deployment" if best.name in NAMES else f"the {best.name}"
    note = (f"{label}: it serves {v:.0f} tokens/s {what}where the search chose {value:.0f}"
            + (" (the fastest searched deployment that meets the SLOs)" if slo else
               " (the search ranks by capacity)" if closed else
               " (the search stopped at its time limit)" if plan.meta.get("complete") is False else ""))
    bound, status = plan.bound, "feasible"
    same_limits = (cfg.max_num_seqs, cfg.max_num_batched_tokens) == \
        (plan.config.max_num_seqs, plan.config.max_num_batched_tokens)
    left = float(plan.meta.get("time_limit", 30.0)) / 2
    if not same_limits and left < 0.5:  # no time left to prove anything at the adopted limits: nothing claimed
        bound = None
    elif not same_limits:  # the search's proof holds at its own batch limits: proven afresh at the adopted ones
        again = search(p, time_limit=left, max_num_seqs=cfg.max_num_seqs,
                       max_num_batched_tokens=cfg.max_num_batched_tokens)
        ev_again = evaluate(p, again.config) if again.config.replicas else None
        if not slo and ev_again is not None and rate(ev_again) > v * (1.0 + 1e-9):  # better at those limits
            cfg, v, cap = again.config, rate(ev_again), ev_again.capacity_tokens_per_s
            note += f"; searched again at its batch limits: {v:.0f}"
        bound = again.bound if again.bound is not None and again.bound >= cap * (1.0 - 1e-9) else None
        status = again.status if cfg == again.config and not closed else "feasible"
    if bound is not None and cap > bound * (1.0 + 1e-9):  # a bound below the capacity proves nothing about it
        bound = None
    gap = None if not bound else max(0.0, (bound - cap) / bound)
    if status == "optimal" and (gap is None or gap > 1e-9):
        status = "feasible"
    meta = {k: x for k, x in plan.meta.items() if k not in ("slo_simulated",)}
    adopted = dataclasses.replace(plan, config=cfg, status=status, bound=bound, gap=gap,
                                  meta={**meta, "adopted": note})
    kept = next((b for b in found if b.name == "best-homogeneous"), None)
    return adopted, baselines(p, adopted, homogeneous=kept)


def _fewer_replicas(p: ServingProblem, c: ServingConfig, slo: bool) -> list[Baseline]:
    """``c`` less its slowest replicas, one more at a time (:func:`~dnnplace.models.serving.verdicts.without_slowest`),
    each that fits and meets the SLOs.  Why: under a closed loop the engine's router sends a slow replica its share
    of the clients' requests, and every client waits on it in turn."""
    return [Baseline("plan less its slowest replicas", cc, e, None, "the plan's replicas less the slowest")
            for cc, e in without_slowest(p, c, every=True) if e.fits and (e.meets_slo or not slo)]


def plan_baselines(p: ServingProblem, plan: ServingPlan) -> list[Baseline]:
    """The plan's baselines: those its solve priced for this very deployment (``meta["baselines"]``), else priced
    now -- so the plan file and the report do not search the one-kind deployments again."""
    kept = plan.meta.get("baselines")
    if kept is not None and kept[0] == plan.config:
        return list(kept[1])
    return baselines(p, plan)


def _side_by_side(p: ServingProblem, parts: tuple[ServingConfig, ...], slo: bool) -> list[Baseline]:
    """Each GPU kind's best deployment run side by side (their GPUs are disjoint) at one of their batch limits
    -- an engine's limits are one per launch here, so each kind's own is tried for all -- the best that fits and
    meets the SLOs.  Why: under an SLO the search keeps the fastest deployment that meets it among those it
    ranked by rate, which can leave a whole GPU kind idle where each kind alone meets it."""
    if len(parts) < 2:
        return []
    replicas = tuple(r for c in parts for r in c.replicas)
    best: Baseline | None = None
    for c in parts:
        cfg = ServingConfig(replicas, c.max_num_seqs, c.max_num_batched_tokens, c.expert_parallel)
        ev = evaluate(p, cfg)
        if ev.fits and (ev.meets_slo or not slo) and \
                (best is None or ev.capacity_tokens_per_s > best.evaluation.capacity_tokens_per_s):  # type: ignore
            best = Baseline("best-homogeneous deployments side by side", cfg, ev, None,
                            "each GPU kind's best deployment, side by side")
    return [best] if best is not None else []
