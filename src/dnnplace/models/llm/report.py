"""A self-contained HTML page for an LLM training plan: what the screen shows of it, and the pictures.

The page is built from the plan document (:func:`~dnnplace.models.llm.plan_doc.plan_document`) of the plan
evaluated afresh (a plan file's recorded prediction is a claim, not an input), so every figure on it is the
one ``dnnplace plan --json`` writes: the step time and its error band, the runner-ups and the ``--compare``
layout beside it, memory per GPU against the device's limit, the kernel sources, the host's exposed time.
The pictures are :mod:`~dnnplace.models.llm.report_svg`'s inline SVG: no script, nothing fetched.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from dnnplace.core.schedule import interleaved_1f1b
from dnnplace.models.llm.evaluation.kernel_ledger import FAMILIES, LABELS, NAMES, ledger_lines
from dnnplace.models.llm.plan_doc import RUNNER_UP_KNOBS, host_lines, plan_document, runner_up_doc
from dnnplace.models.llm.report_svg import GB, SEGMENTS, Layout, memory_svg, steps_svg, timeline_svg
from dnnplace.models.llm.simulation import LLMSimulation, simulate_llm
from dnnplace.models.llm.spec import LLMPlan

__all__ = ["MAX_ORDER_ACTIONS", "claimed_status", "knobs_text", "render_llm_report", "report_layouts",
           "write_llm_report"]

_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1500px}table{border-collapse:collapse;margin:1em 0}"
          "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}th,td.l{text-align:left}"
          "text{font-family:sans-serif;font-size:13px}text.small{font-size:11px}text.mb{font-size:9px}"
          ".headline{font-size:1.25em}.warning{border-left:6px solid #d80;background:#fff4e0;padding:.5em 1em}"
          ".note{color:#555}table.kv td{text-align:left}.scroll{overflow:auto;max-height:900px;border:1px solid #ddd}")
MAX_ORDER_ACTIONS = 4_000  # the issue order is printed as text up to this many actions
_SHORT = ("tp", "pp", "vp", "cp", "dp", "mbs")


def _table(rows: Iterable[tuple[str, str]], cls: str = "") -> str:
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<table class='{cls}'>{body}</table>"


def _issue_order(sim: LLMSimulation) -> str:
    """Each rank's actions in issue order (the schedule the timeline times), when short enough to read."""
    cfg = sim.plan.config
    m = sim.times.num_microbatches
    if 2 * cfg.pp * cfg.vp * m > MAX_ORDER_ACTIONS:
        return f"<p>(issue order omitted: more than {MAX_ORDER_ACTIONS:,} actions)</p>"
    return f"<pre>{html.escape(interleaved_1f1b(cfg.pp, cfg.vp, m).text())}</pre>"


def claimed_status(status: str, bound: float, gap: float, step_time_s: float) -> str:
    """The plan's status, bound and gap as what they are: the search's claims, carried by the plan (a plan
    file's are not re-proven here), with the gap re-derived against the step time evaluated now."""
    text = f"{status}, as the plan claims (bound {bound:.4g} s, gap {100 * gap:.2f} %; not re-proven here)"
    if not step_time_s > 0:
        return text
    if bound > step_time_s * (1 + 1e-9):
        return f"{text}; the claimed bound exceeds the evaluated step time {step_time_s:.4g} s: the claim is false"
    return f"{text}; gap against the evaluated step time {100 * (step_time_s - bound) / step_time_s:.2f} %"


def knobs_text(config: dict[str, Any], base: dict[str, Any] | None = None) -> str:
    """A configuration in a line: its degrees and micro-batch, then each other knob that differs from ``base``
    (the plan's; None: the degrees alone), so that runner-ups differing only in, say, recompute_modules read apart."""
    text = " ".join(f"{k} {config[k]}" for k in _SHORT if k in config)
    rest = [] if base is None else [f"{k} {config[k]}" for k in RUNNER_UP_KNOBS if k not in _SHORT
                                    and k in config and config[k] != base.get(k)]
    return text + (", " + ", ".join(rest) if rest else "")


def _band_s(band: dict[str, Any], step_s: float) -> tuple[float, float] | None:
    """The step times the band's errors allow for a prediction (predicted / (1 + error)); None: no band."""
    lo, hi = band.get("low"), band.get("high")
    if lo is None or hi is None:
        return None
    return step_s / (1 + hi), step_s / (1 + lo)


def report_layouts(doc: dict[str, Any], others: Sequence[tuple[str, LLMPlan, dict[str, Any]]],
                   plan: LLMPlan) -> list[Layout]:
    """The plan, then each runner-up and compared configuration as a :class:`Layout`: the document's figures,
    with each one's memory by component from its own estimate."""
    pred = doc["prediction"]
    base = {k: doc["config"].get(k) for k in RUNNER_UP_KNOBS}
    out = [Layout("plan", "plan: " + knobs_text(base), pred["step_time_s"], pred["fits"],
                  dict(plan.estimate.memory_breakdown), pred["memory_per_gpu_bytes"],
                  _band_s(doc["error_band"], pred["step_time_s"]))]
    for j, (role, other, od) in enumerate(others):
        name = f"runner-up {j + 1}" if role == "runner-up" else "compared"
        out.append(Layout(role, f"{name}: {knobs_text(od['config'], base)}", od["step_time_s"], od["fits"],
                          dict(other.estimate.memory_breakdown), od["memory_per_gpu_bytes"],
                          _band_s(doc["error_band"], od["step_time_s"]), od["within_band"]))
    return out


def _headline(doc: dict[str, Any]) -> str:
    """The predicted step time, and the measured times its error band allows (or why there is no band)."""
    t, band = doc["prediction"]["step_time_s"], doc["error_band"]
    text = f"Predicted step time <b>{t:.3f} s</b>"
    if band.get("low") is None:
        return (f"<p class='headline' data-step-s='{t:.6g}'>{text}; no error band: "
                f"{html.escape(str(band['evidence']))}.</p>")
    lo, hi = band["measured_low_s"], band["measured_high_s"]
    return (f"<p class='headline' data-step-s='{t:.6g}' data-band-low-s='{lo:.6g}' data-band-high-s='{hi:.6g}'>"
            f"{text}; the error band ({100 * band['low']:+.1f} % .. {100 * band['high']:+.1f} %, predicted vs"
            f" measured on {band['rows']} {html.escape(str(band['evidence']))}) puts the measured step at"
            f" <b>{lo:.3f} .. {hi:.3f} s</b>.</p>")


def _host(doc: dict[str, Any]) -> str:
    """The host-bound warning, and what CUDA graphs would save, when the plan document says so."""
    host = doc["host"]
    lines = host_lines(host)
    out = ""
    if host["host_bound"]:
        out += (f"<p class='warning host-bound' data-exposed-s='{host['exposed_s']:.6g}'>"
                f"{html.escape(lines.pop(0))}</p>")
    if lines:
        w = host["with_graphs"]
        out += (f"<p class='graphs' data-saves-s='{w['saves_s']:.6g}'>{html.escape(lines[0].strip())}:"
                f" {w['step_time_s']:.3f} s a step instead of {doc['prediction']['step_time_s']:.3f} s.</p>")
    if not out:
        out = (f"<p class='note host'>The host's exposed time is {host['exposed_s']:.3f} s a step"
               f" ({100 * host['share']:.1f} %): not host-bound.</p>")
    return out


def _others_table(layouts: Sequence[Layout], docs: Sequence[dict[str, Any]]) -> str:
    """The runner-ups and compared layouts as a table: time, against the plan, memory, the band's verdict."""
    if len(layouts) == 1:
        return ("<p class='note'>No runner-up nor compared configuration was given (<code>dnnplace plan"
                " --runner-ups N --compare PINS</code> adds them).</p>")
    head = "<tr><th>layout</th><th>step time</th><th>vs plan</th><th>memory per GPU</th><th>fits</th>" \
           "<th>the band tells it from the plan</th></tr>"
    rows = []
    for lay, d in zip(layouts[1:], docs):
        verdict = "no band" if d["within_band"] is None else "no" if d["within_band"] else "yes"
        rows.append(f"<tr class='runner' data-role='{lay.role}'><td class='l'>{html.escape(lay.label)}</td>"
                    f"<td>{d['step_time_s']:.3f} s</td><td>{100 * d['vs_plan']:+.2f} %</td>"
                    f"<td>{d['memory_per_gpu_bytes'] / GB:.1f} GB</td><td>{'yes' if d['fits'] else 'NO'}</td>"
                    f"<td>{verdict}</td></tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def _kernel_sources(ks: dict[str, Any]) -> str:
    """The screen's kernel-sources line, and per term family the share of its kernel seconds each source priced
    (measured, interpolated, extrapolated: the kernel tables; roofline, catalogue: formulas)."""
    used = [n for n in NAMES if any(n in ks["families"][f]["counts"] for f in FAMILIES)]
    head = "<tr><th>term family</th>" + "".join(f"<th>{html.escape(n)}</th>" for n in used) + "</tr>"
    rows = []
    for f in FAMILIES:
        fam = ks["families"][f]
        if not fam["counts"]:
            continue
        cells = "".join(f"<td>{100 * fam['seconds_share'][n]:.1f} % ({fam['counts'][n]})</td>"
                        if n in fam["counts"] else "<td>\u2014</td>" for n in used)
        rows.append(f"<tr class='family' data-family='{f}'><td class='l'>{LABELS[f]}</td>{cells}</tr>")
    return (f"<p class='kernel-line'>{html.escape(ledger_lines(ks)[0])}</p><table>{head}{''.join(rows)}</table>"
            "<p class='note'>Share of each family's kernel seconds (entries priced); measured, interpolated and"
            " extrapolated come from the measured kernel tables, roofline and catalogue from formulas.</p>")


def _memory_table(doc: dict[str, Any], plan: LLMPlan) -> str:
    est, pr = plan.estimate, plan.problem
    mem = [(label, f"{est.memory_breakdown.get(k, 0.0) / GB:.2f} GB") for k, label, _ in SEGMENTS]
    verdict = "fits" if est.fits else "does NOT fit"
    mem.append(("peak per GPU", f"{est.memory_per_gpu_bytes / GB:.2f} GB of {pr.device.usable_memory_bytes / GB:.2f}"
                                f" GB: {verdict}"))
    if est.host_memory_bytes:
        mem.append(("host memory per GPU (offloaded activations)", f"{est.host_memory_bytes / GB:.2f} GB of"
                                                                   f" {est.host_capacity_bytes / GB:.2f} GB"))
    return _table(mem)


def render_llm_report(plan: LLMPlan, title: str, *, runner_ups: Sequence[LLMPlan] = (),
                      compared: Sequence[LLMPlan] = (), error_band: dict[str, Any] | None = None) -> str:
    """The page as a string (names from the plan escaped).  ``runner_ups`` and ``compared`` are the search's
    runner-ups and ``--compare``'s configurations; ``error_band`` replaces the published band (calibrated)."""
    sim = simulate_llm(plan)
    plan = dataclasses.replace(plan, estimate=sim.estimate)  # the evaluator's figures, not the file's claims
    cfg, est, pr = plan.config, sim.estimate, plan.problem
    doc = plan_document(plan, runner_ups)
    if error_band is not None:
        doc["error_band"] = error_band
    odocs = list(doc.get("runner_ups", [])) + [runner_up_doc(pr, est.step_time_s, c) for c in compared]
    others = [("runner-up", p, d) for p, d in zip(runner_ups, odocs)]
    others += [("compared", p, d) for p, d in zip(compared, odocs[len(runner_ups):])]
    layouts = report_layouts(doc, others, plan)
    head = [("model", pr.arch.name), ("cluster", f"{pr.cluster.gpus} x {pr.cluster.device},"
                                                 f" {pr.cluster.gpus_per_node} per node"),
            ("job", f"sequence {pr.job.seq_len}, global batch {pr.job.global_batch}, {pr.job.precision}"),
            ("configuration", f"tp {cfg.tp}, pp {cfg.pp}, vp {cfg.vp}, cp {cfg.cp}, dp {cfg.dp}, micro-batch"
                              f" {cfg.mbs}, recompute {cfg.recompute}, distributed optimizer"
                              f" {'on' if cfg.distributed_optimizer else 'off'}, ZeRO {cfg.zero}, CUDA graphs"
                              f" {cfg.cuda_graphs}"
                              + (f", activations of {cfg.offload_layers} layers offloaded to host memory"
                                 if cfg.offload_layers else "")),
            ("layers per virtual stage", ", ".join(map(str, cfg.layers_per_stage))),
            ("search status (claimed)", claimed_status(plan.status, plan.bound, plan.gap, est.step_time_s)),
            ("predicted step time", f"{est.step_time_s:.3f} s ({est.tokens_per_s:,.0f} tokens/s, MFU"
                                    f" {100 * est.mfu:.1f} %)"),
            ("schedule simulated", f"{sim.step_time_s:.3f} s (pipeline {sim.pipeline_s:.3f} s, bubble"
                                   f" {100 * sim.bubble_fraction:.1f} %)")]
    step = est.step_time_s or 1.0
    times = [(k, f"{v:.3f} s ({100 * v / step:.1f} %)") for k, v in est.time_breakdown.items()]
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{_STYLE}"
            f"</style></head><body><h1>{html.escape(title)}</h1>{_headline(doc)}{_host(doc)}{_table(head, 'kv')}"
            f"<h2>The plan, its runner-ups and the compared layout</h2><p class='note'>Bars: the predicted step"
            " time; whiskers: the measured step times the error band allows for each prediction (predicted / (1 +"
            f" error)).</p>{steps_svg(layouts)}"
            f"{_others_table(layouts, odocs)}<h2>Time per step</h2>{_table(times)}"
            f"<h2>Memory per GPU</h2><p class='note'>Each layout's most-loaded GPU (pipeline rank), by component,"
            f" against the {html.escape(pr.device.name)}'s usable memory.</p>"
            f"{memory_svg(layouts, pr.device.usable_memory_bytes, pr.device.name)}{_memory_table(doc, plan)}"
            f"<h2>Kernel sources</h2>{_kernel_sources(doc['kernel_sources'])}"
            f"<h2>Pipeline timeline (one step)</h2><p class='note'>One row per pipeline rank; forward light, backward"
            f" dark, hue by micro-batch; hover a box for its task.</p><div class='scroll'>"
            f"{timeline_svg(sim.run, cfg.pp, sim.times.tail)}</div><p>Issue order per rank: F forward, B backward,"
            f" micro-batch, .chunk when interleaved.</p><div class='scroll'>{_issue_order(sim)}</div>"
            "<p class='note'>Generated by dnnplace from datasheet figures and, where the kernel sources say so,"
            " measured kernel tables (docs/llm_planner.md, docs/kernels-training.md).</p></body></html>")


def write_llm_report(plan: LLMPlan, path: str | Path, *, title: str | None = None,
                     inputs: Iterable[str | Path | None] = (), runner_ups: Sequence[LLMPlan] = (),
                     compared: Sequence[LLMPlan] = (), error_band: dict[str, Any] | None = None) -> Path:
    """Write the page atomically, never over one of ``inputs`` (nor through a link); the other arguments are
    :func:`render_llm_report`'s."""
    from dnnplace.utils.files import check_output, write_text_atomic

    p = Path(path)
    inputs = list(inputs)
    check_output(p, inputs)
    write_text_atomic(p, render_llm_report(plan, title or p.stem, runner_ups=runner_ups,
                                                  compared=compared, error_band=error_band), inputs=inputs)
    return p
