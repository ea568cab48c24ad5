"""A self-contained HTML page for an LLM training plan: configuration, predicted time and memory, timeline."""

from __future__ import annotations

import html
from collections.abc import Iterable
from pathlib import Path

from dnnplace.core.schedule import Action, interleaved_1f1b
from dnnplace.models.llm.evaluation.kernel_ledger import ledger_lines
from dnnplace.models.llm.plan_doc import kernel_sources_doc
from dnnplace.models.llm.simulation import LLMSimulation, simulate_llm
from dnnplace.models.llm.spec import LLMPlan

_STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid"
          " #ccc;padding:4px 8px;text-align:right}th{text-align:left}.bar{height:10px;display:inline-block}")
MAX_ORDER_ACTIONS = 4_000  # the issue order is printed as text up to this many actions
_COLOURS = {"weights": "#47c", "gradients": "#4a7", "optimizer": "#e94", "activations": "#c47", "buffers": "#999"}


def _table(rows: Iterable[tuple[str, str]]) -> str:
    return "<table>" + "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows) \
        + "</table>"


def _timeline(sim: LLMSimulation, width: int = 900) -> str:
    """One row per pipeline rank: forward (light) and backward (dark) tasks, coloured by micro-batch."""
    run = sim.run
    if len(run.tasks) > 20_000:
        return "<p>(timeline omitted: more than 20,000 tasks)</p>"
    scale = width / run.makespan if run.makespan > 0 else 0.0
    pp = len(run.busy)
    rects = []
    for t in run.tasks:
        action = Action("B" if t.backward else "F", t.microbatch, t.stage // pp)
        hue = (t.microbatch * 47) % 360
        light = 45 if t.backward else 70
        w = max((t.end - t.start) * scale, 0.5)
        rects.append(f"<rect x='{t.start * scale:.2f}' y='{t.rank * 22}' width='{w:.2f}' height='18'"
                     f" fill='hsl({hue},60%,{light}%)'><title>{action}: {action.kind} micro-batch"
                     f" {t.microbatch}, virtual stage {t.stage}</title></rect>")
    return f"<svg width='{width}' height='{pp * 22}' xmlns='http://www.w3.org/2000/svg'>{''.join(rects)}</svg>"


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


def render_llm_report(plan: LLMPlan, title: str) -> str:
    """The page as a string (names from the plan escaped)."""
    sim = simulate_llm(plan)
    cfg, est, pr = plan.config, sim.estimate, plan.problem  # the evaluator's figures, not the file's claims
    head = [("model", pr.arch.name), ("cluster", f"{pr.cluster.gpus} x {pr.cluster.device},"
                                                 f" {pr.cluster.gpus_per_node} per node"),
            ("job", f"sequence {pr.job.seq_len}, global batch {pr.job.global_batch}, {pr.job.precision}"),
            ("configuration", f"tp {cfg.tp}, pp {cfg.pp}, vp {cfg.vp}, cp {cfg.cp}, dp {cfg.dp}, micro-batch"
                              f" {cfg.mbs}, recompute {cfg.recompute}, distributed optimizer"
                              f" {'on' if cfg.distributed_optimizer else 'off'}, ZeRO {cfg.zero}"
                              + (f", activations of {cfg.offload_layers} layers offloaded to host memory"
                                 if cfg.offload_layers else "")),
            ("layers per virtual stage", ", ".join(map(str, cfg.layers_per_stage))),
            ("search status (claimed)", claimed_status(plan.status, plan.bound, plan.gap, est.step_time_s)),
            ("predicted step time", f"{est.step_time_s:.3f} s ({est.tokens_per_s:,.0f} tokens/s, MFU"
                                    f" {100 * est.mfu:.1f} %)"),
            ("schedule simulated", f"{sim.step_time_s:.3f} s (pipeline {sim.pipeline_s:.3f} s, bubble"
                                   f" {100 * sim.bubble_fraction:.1f} %)"),
            ("kernel sources", ledger_lines(kernel_sources_doc(plan))[0].split(" ", 2)[2])]
    times = [(k, f"{v:.3f} s") for k, v in est.time_breakdown.items()]
    total = sum(est.memory_breakdown.values()) or 1.0
    bars = "".join(f"<span class='bar' style='width:{600 * v / total:.1f}px;background:{_COLOURS.get(k, '#999')}'"
                   f" title='{html.escape(k)}'></span>" for k, v in est.memory_breakdown.items())
    mem = [(k, f"{v / 1e9:.2f} GB") for k, v in est.memory_breakdown.items()]
    verdict = "fits" if est.fits else "does NOT fit"
    mem.append(("peak per GPU", f"{est.memory_per_gpu_bytes / 1e9:.2f} GB of"
                                f" {pr.device.usable_memory_bytes / 1e9:.2f} GB: {verdict}"))
    if est.host_memory_bytes:
        mem.append(("host memory per GPU (offloaded activations)", f"{est.host_memory_bytes / 1e9:.2f} GB of"
                                                                   f" {est.host_capacity_bytes / 1e9:.2f} GB"))
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{_STYLE}"
            f"</style></head><body><h1>{html.escape(title)}</h1>{_table(head)}<h2>Time per step</h2>{_table(times)}"
            f"<h2>Memory per GPU</h2><div>{bars}</div>{_table(mem)}<h2>Pipeline timeline (one step)</h2>"
            f"{_timeline(sim)}<p>Issue order per rank: F forward, B backward, micro-batch, .chunk when"
            f" interleaved.</p>{_issue_order(sim)}"
            "<p>Generated by dnnplace from datasheet figures and, where the kernel sources say so, measured kernel"
            " tables (docs/llm_planner.md, docs/kernels-training.md).</p>"
            "</body></html>")


def write_llm_report(plan: LLMPlan, path: str | Path, *, title: str | None = None,
                     inputs: Iterable[str | Path | None] = ()) -> Path:
    """Write the page atomically, never over one of ``inputs`` (nor through a link)."""
    from dnnplace.utils.files import check_output, write_text_atomic

    p = Path(path)
    inputs = list(inputs)
    check_output(p, inputs)
    write_text_atomic(p, render_llm_report(plan, title or p.stem), inputs=inputs)
    return p
