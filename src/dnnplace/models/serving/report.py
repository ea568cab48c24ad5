"""A self-contained HTML page for a serving plan: the deployment drawn, its memory and times, and the curve.

Why a page: a serving plan is a claim about GPUs of several kinds, and what convinces is seeing it -- which
GPUs hold which layers, how full each GPU is (the KV cache every engine sizes by its weakest stage), which
stage is the bottleneck, what the plan trades between throughput and latency against its runner-ups, and
what it gains over what users run today.  Every figure is the one evaluator's (``evaluate``), the search's
claims (status, bound, gap) are printed as claims, and the page needs no network (inline SVG and CSS).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

from dnnplace.models.serving.bands import band_note
from dnnplace.models.serving.baselines import Baseline
from dnnplace.models.serving.evaluation import ServingEvaluation, evaluate
from dnnplace.models.serving.report_svg import GIB, Series, curve_svg, fleet_svg, memory_svg, owners, times_svg
from dnnplace.models.serving.spec import ServingConfig, ServingPlan, ServingProblem
from dnnplace.utils.svg import esc as _e

__all__ = ["curve", "describe", "proof_line", "render_report", "write_report"]

#: the ``max_num_seqs`` values each curve is evaluated at (with the deployment's own value added)
CURVE_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1300px}table{border-collapse:collapse;margin:1em 0}"
          "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}th{text-align:left}td.l{text-align:left}"
          "svg{display:block;margin:0.5em 0 1.5em}svg text{font-size:12px;font-family:sans-serif}"
          "svg text.small{font-size:11px}svg text.b,svg text.rlabel{font-weight:bold}.proof{font-family:monospace}")


def _num(v: float, unit: str = "", digits: int = 1) -> str:
    return f"{v:,.{digits}f}{unit}" if math.isfinite(v) else "\u2014"


def describe(config: ServingConfig) -> str:
    """A deployment in one line: each replica's stages (GPU kind x TP [layers]) and the batch limits."""
    reps = []
    for r in config.replicas:
        reps.append(" \u2192 ".join(f"{s.gpu}\u00d7{s.tp}@{s.node}[{s.layers}]" for s in r.stages))
    n = len(config.replicas)
    return (f"{n} replica{'s' if n != 1 else ''}: " + " | ".join(reps)
            + f"; max_num_seqs {config.max_num_seqs}, max_num_batched_tokens {config.max_num_batched_tokens}")


def curve(p: ServingProblem, config: ServingConfig) -> list[tuple[int, float, float]]:
    """(max_num_seqs, TPOT ms, output tokens/s) of ``config`` at each value of the grid that fits, the same
    point once (beyond the KV cache's limit a larger max_num_seqs runs the same batch)."""
    out: list[tuple[int, float, float]] = []
    seen: set[tuple[float, float]] = set()
    for b in sorted({*CURVE_GRID, config.max_num_seqs}):
        # at the batch limit (under a load too: the curve is what each limit can serve)
        ev = evaluate(p, dataclasses.replace(config, max_num_seqs=b), at_load=False)
        tpot = max((r.tpot_s for r in ev.replicas), default=math.inf) * 1e3
        if not ev.fits or not (ev.capacity_tokens_per_s > 0 and math.isfinite(tpot)):
            continue
        key = (round(tpot, 6), round(ev.capacity_tokens_per_s, 6))
        if key in seen:
            continue
        seen.add(key)
        out.append((b, tpot, ev.capacity_tokens_per_s))
    return out


def proof_line(plan: ServingPlan, evaluation: ServingEvaluation, band_why: str = "") -> str:
    """Status, bound and gap as the search claims them (gap re-derived against the evaluated throughput),
    the runtime, the error band (``band_why``: why it is wider than the kernel sources', as the screen says)
    and how many prices came from each kernel source."""
    value = evaluation.capacity_tokens_per_s
    parts = [f"status {plan.status} (claimed by the search)"]
    if plan.bound is not None:
        parts.append(f"bound {plan.bound:,.1f} output tokens/s")
        if plan.bound > 0 and math.isfinite(value):
            gap = (plan.bound - value) / plan.bound
            parts.append(f"gap {100 * gap:.2f} % against the evaluated {value:,.1f} tokens/s")
            if plan.bound < value * (1 - 1e-9):
                parts.append("the claimed bound is below the evaluated throughput: the claim is false")
    else:
        parts.append("no bound")
    if plan.gap is not None:
        parts.append(f"claimed gap {100 * plan.gap:.2f} %")
    if plan.runtime_s is not None:
        parts.append(f"search {plan.runtime_s:.2f} s")
    parts.append(f"error band \u00b1{100 * evaluation.error_band:.1f} %" + (f" ({band_why})" if band_why else ""))
    src = ", ".join(f"{v} {k}" for k, v in sorted(evaluation.sources.items(), key=lambda kv: -kv[1])) or "none"
    parts.append(f"kernel prices: {src}")
    return "; ".join(parts)


def _clash_note(config: ServingConfig) -> str:
    """A warning when a physical GPU is given to more than one stage: the plan cannot be deployed as drawn."""
    twice = [(n, g) for (n, g), who in sorted(owners(config).items()) if len(who) > 1]
    if not twice:
        return ""
    listed = ", ".join(f"node {n} GPU {g}" for n, g in twice)
    return (f"<p class='clash'><b>Invalid deployment:</b> {_e(listed)} assigned to more than one stage (drawn red);"
            " the figures below price it as if each stage had its own GPUs.</p>")


def _table(rows: Iterable[tuple[str, str]], cls: str = "") -> str:
    c = f" class='{cls}'" if cls else ""
    return f"<table{c}>" + "".join(f"<tr><th>{_e(k)}</th><td class='l'>{_e(v)}</td></tr>" for k, v in rows) \
        + "</table>"


def _verdict(p: ServingProblem, ev: ServingEvaluation) -> str:
    """Fits or why not; then each way the deployment misses the load or an SLO, or that it meets them."""
    if not ev.fits:
        return f"does NOT fit: {ev.why}"
    wl = p.workload
    misses = []
    if ev.saturated and wl.rate is not None:
        misses.append(f"saturated: {wl.rate:g} requests/s asked, {ev.requests_per_s:.3g} served")
    if wl.ttft_ms is not None and ev.ttft_ms > wl.ttft_ms:
        misses.append(f"TTFT {ev.ttft_ms:.1f} ms over the SLO {wl.ttft_ms:g} ms ({wl.ttft_stat})")
    if wl.tpot_ms is not None and ev.tpot_ms > wl.tpot_ms:
        misses.append(f"TPOT {ev.tpot_ms:.1f} ms over the SLO {wl.tpot_ms:g} ms ({wl.tpot_stat})")
    return "fits; " + ("; ".join(misses) if misses else "meets the load and the SLOs")


def _fraction(p: ServingProblem) -> str:
    """The memory fraction as the engine sets it: a number, or SGLang's rule (per GPU and launch size)."""
    return "by SGLang's rule per GPU and launch" if p.engine.fraction_rule == "sglang" and not p.memory_fraction \
        else f"{p.fraction:g}"


def _summary(p: ServingProblem, plan: ServingPlan, ev: ServingEvaluation) -> list[tuple[str, str]]:
    m, wl = p.model, p.workload
    load = f"{wl.rate:g} requests/s" if wl.rate is not None else \
        f"{wl.concurrency} requests in flight" if wl.concurrency is not None else "offline (maximum throughput)"
    slo = ", ".join(x for x in (f"TTFT {wl.ttft_stat} \u2264 {wl.ttft_ms:g} ms" if wl.ttft_ms is not None else "",
                                f"TPOT {wl.tpot_stat} \u2264 {wl.tpot_ms:g} ms" if wl.tpot_ms is not None else "")
                    if x) or "none"
    verdict = _verdict(p, ev)
    if not plan.config.replicas:  # the evaluator calls an empty deployment "fitting": say what it is
        verdict = f"no deployment (search status {plan.status}): no replica of this model fits the fleet"
    return [("model", f"{m.name}: {m.num_layers} layers, {m.precision} weights, KV {p.kv_dtype}"),
            ("fleet", p.fleet.spec()),
            ("engine", f"{p.engine.name}, memory fraction {_fraction(p)} of {p.engine.fraction_of} memory,"
                       f" block {p.block}, context {p.context}"),
            ("workload", (f"prompt {wl.isl}, output {wl.osl} tokens" if wl.lengths is None else
                          f"{len(wl.lengths):,} request lengths, mean prompt {wl.isl}, output {wl.osl} tokens, "
                          f"longest {wl.max_len}") + f"; {load}; SLOs: {slo}"),
            ("deployment", describe(plan.config)),
            ("output tokens/s (fleet)", _num(ev.output_tokens_per_s)),
            *([("capacity at the batch limits (searched)", _num(ev.capacity_tokens_per_s) + " output tokens/s")]
              if wl.rate is not None else []),
            ("requests/s", _num(ev.requests_per_s, digits=3)),
            ("TTFT", _num(ev.ttft_ms, " ms", 2)), ("TPOT", _num(ev.tpot_ms, " ms", 2)),
            ("KV cache tokens per replica", ", ".join(f"{int(r.kv_tokens):,}" for r in ev.replicas)),
            ("sequences in flight per replica" + (" at the batch limits" if wl.rate is not None else ""),
             ", ".join(f"{int(r.concurrency):,}" for r in ev.replicas)),
            *([("sequences running per replica at the load", ", ".join(f"{x:,.1f}" for x in ev.running))]
              if ev.running else []),
            ("verdict", verdict), *_disaggregated_row(plan, ev)]


def _disaggregated_row(plan: ServingPlan, ev: ServingEvaluation) -> list[tuple[str, str]]:
    """The prefill/decode what-if of ``serve --disaggregate``, when asked for: pools, rate, gain over the plan."""
    from dnnplace.models.serving.disaggregation import Disaggregated

    d = plan.meta.get("disaggregated")
    if d is None:
        return []
    if not isinstance(d, Disaggregated):
        return [("disaggregated (what-if)", str(d))]
    gain = d.output_tokens_per_s / ev.capacity_tokens_per_s if ev.capacity_tokens_per_s > 0 else None
    within = gain is not None and abs(gain - 1.0) <= max(d.error_band, ev.error_band)
    return [("disaggregated (what-if)",
             f"{d.split}: prefill {describe(d.prefill)}; decode {describe(d.decode)}; "
             f"{d.output_tokens_per_s:,.0f} output tokens/s"
             + ("" if gain is None else f" ({gain:.2f}x the plan{', within the error bands' if within else ''})")
             + f", limited by the {d.limited_by}; KV transfer {d.transfer_ms:.1f} ms over {d.link}; {d.status}")]


def _memory_table(p: ServingProblem, plan: ServingPlan, ev: ServingEvaluation) -> str:
    from dnnplace.core.catalogue import device_spec

    head = ("<tr><th>replica</th><th>stage</th><th>GPU</th><th>GPUs</th><th>weights</th><th>activations</th>"
            "<th>CUDA graphs</th><th>KV cache (free for it)</th><th>KV cache (used)</th><th>budget</th>"
            "<th>GPU memory</th></tr>")
    rows = []
    for r, (rep, rev) in enumerate(zip(plan.config.replicas, ev.replicas)):
        for k, (s, mem) in enumerate(zip(rep.stages, rev.memory)):
            kv_free = max(mem.kv_free, 0.0)
            used = min(kv_free, rev.kv_tokens * mem.kv_per_token)
            cells = [mem.weights, mem.activations, mem.graphs, kv_free, used, mem.budget,
                     device_spec(s.gpu).usable_memory_bytes]
            rows.append(f"<tr class='mem' data-replica='{r}' data-stage='{k}'><td>{r + 1}</td><td>{k + 1}</td>"
                        f"<td class='l'>{_e(s.gpu)}</td><td>{','.join(map(str, s.gpus))}</td>"
                        + "".join(f"<td>{v / GIB:.3f}</td>" for v in cells) + "</tr>")
    return f"<table class='memtable'>{head}{''.join(rows)}</table><p>GiB per GPU (each GPU of a stage alike).</p>"


def _runner_table(rows: Sequence[tuple[str, ServingConfig, ServingEvaluation]]) -> str:
    head = "<tr><th></th><th>deployment</th><th>output tokens/s</th><th>TPOT ms</th><th>TTFT ms</th><th>fits</th></tr>"
    body = "".join(f"<tr class='runner'><td class='l'>{_e(name)}</td><td class='l'>{_e(describe(c))}</td>"
                   f"<td>{_num(ev.output_tokens_per_s)}</td><td>{_num(ev.tpot_ms, digits=2)}</td>"
                   f"<td>{_num(ev.ttft_ms, digits=2)}</td><td>{'yes' if ev.fits else 'no'}</td></tr>"
                   for name, c, ev in rows)
    return f"<table class='runners'>{head}{body}</table>"


def _baseline_table(rows: Sequence[Baseline], band: float) -> str:
    if not rows:
        return "<p class='nobaselines'>(no baselines were given)</p>"
    head = "<tr><th>baseline</th><th>output tokens/s</th><th>the plan's gain</th><th>what it is; why</th></tr>"
    body = []
    for b in rows:
        thr = _num(b.evaluation.output_tokens_per_s) if b.evaluation is not None and b.evaluation.fits else \
            "does not fit"
        gain = f"{b.gain:.2f}\u00d7" if b.gain is not None and math.isfinite(b.gain) else "\u2014"
        if b.gain is not None and math.isfinite(b.gain) and b.gain - 1.0 <= band:
            gain += f" (within the \u00b1{100 * band:.0f} % band: not a proven win)"
        body.append(f"<tr class='baseline' data-name='{_e(b.name)}'><td class='l'>{_e(b.name)}</td><td>{thr}</td>"
                    f"<td>{gain}</td><td class='l'>{_e(b.why)}</td></tr>")
    return f"<table class='baselines'>{head}{''.join(body)}</table>"


def render_report(p: ServingProblem, plan: ServingPlan, evaluation: ServingEvaluation, *,
                  runner_ups: Sequence[tuple[ServingConfig, ServingEvaluation]] = (),
                  baselines: Sequence[Baseline] = (), title: str = "") -> str:
    """The page as a string; every name from the inputs escaped."""
    title = title or f"dnnplace serving plan: {p.model.name} on {p.fleet.spec()}"
    series = [Series("plan", curve(p, plan.config))]
    series += [Series(f"runner-up {i + 1}", curve(p, c)) for i, (c, _) in enumerate(runner_ups)]
    chosen = (evaluation.tpot_ms, evaluation.output_tokens_per_s) if evaluation.fits else None
    runners = [("plan", plan.config, evaluation)]
    runners += [(f"runner-up {i + 1}", c, e) for i, (c, e) in enumerate(runner_ups)]
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_e(title)}</title><style>{_STYLE}</style>"
            f"</head><body><h1>{_e(title)}</h1>{_table(_summary(p, plan, evaluation), 'summary')}"
            f"<p class='proof'>{_e(proof_line(plan, evaluation, band_note(p)))}</p>"
            f"<h2>The fleet: pipelines and nodes</h2><p>Each replica's stages in pipeline order (layers 0-based),"
            f" the link each hop crosses; below, each node's GPUs coloured by the stage that uses them.</p>"
            f"{_clash_note(plan.config)}{fleet_svg(p, plan.config)}"
            f"<h2>Memory per GPU</h2><p>Weights, activation peak, CUDA graphs and the KV cache the engine's rule"
            f" allocates; the light green is headroom left for KV on this GPU that the cross-stage rule does not"
            f" use; the outline is the GPU's memory, the dashed line the engine's budget.</p>"
            f"{memory_svg(p, plan.config, evaluation)}{_memory_table(p, plan, evaluation)}"
            f"<h2>Time per stage</h2><p>Each stage's time for one micro-batch iteration at steady state; the"
            f" pipeline advances at its slowest stage (marked).</p>{times_svg(plan.config, evaluation)}"
            f"<h2>Throughput against latency</h2><p>Each deployment evaluated at max_num_seqs in"
            f" {', '.join(map(str, CURVE_GRID))} (and its own); the plan's point is ringed.</p>"
            f"{curve_svg(series, chosen, p.workload.tpot_ms)}{_runner_table(runners)}"
            f"<h2>Against what users run now</h2>{_baseline_table(baselines, evaluation.error_band)}"
            "<p>Generated by dnnplace (the serving model's one evaluator; kernel prices from measured tables where"
            " they exist, a sourced roofline elsewhere: see the error band).</p></body></html>")


def write_report(p: ServingProblem, plan: ServingPlan, evaluation: ServingEvaluation, path: Path, *,
                 runner_ups: Sequence[tuple[ServingConfig, ServingEvaluation]] = (),
                 baselines: Sequence[Baseline] = ()) -> Path:
    """Write the page atomically (never through a link, never a directory); return its path."""
    from dnnplace.utils.files import check_output, write_text_atomic

    out = Path(path)
    check_output(out)
    write_text_atomic(out, render_report(p, plan, evaluation, runner_ups=runner_ups, baselines=baselines))
    return out
