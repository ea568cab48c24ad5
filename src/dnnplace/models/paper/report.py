"""A self-contained HTML report of a placement: summary, devices, graph, cut tensors, timeline.

Everything is inlined (SVG, CSS), so the file opens anywhere without network
access.  The graph is laid out by Graphviz ``dot``: one box per colour class
(a forward operator with its backward colour-mates), coloured by device, with
edges that cross devices drawn thick and red.
"""

from __future__ import annotations

import html
import math
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from dnnplace.models.paper.evaluation import Evaluation
from dnnplace.models.paper.evaluation.evaluator import crossing_outputs
from dnnplace.models.paper.simulation import Simulation
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload
from dnnplace.utils.text import format_bytes, format_number, printable

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#17becf"]
MAX_GRAPH_VERTICES = 1500
MAX_TIMELINE_MICROBATCHES = 1000  # the timeline draws every task as SVG
MAX_ORDER_ACTIONS = 4_000  # the issue order is printed as text up to this many tasks
DOT_TIMEOUT_S = 60


def _color(d: int) -> str:
    return PALETTE[d % len(PALETTE)] if d >= 0 else "#dddddd"


def _f(x: float | None, digits: int = 6) -> str:
    return format_number(x, digits, missing="–", infinity="∞")


def _number(v: object) -> float | None:
    """A split's numeric metadata as a float, or None when absent or not a number."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v)
    except OverflowError:
        return None


def dot_label(text: str) -> str:
    """``text`` as the inside of a quoted Graphviz ``label``, drawn literally.

    Control characters become visible escapes; ``&`` is written as an entity
    (dot passes entities through to the SVG); a backslash is doubled so that
    escString sequences (``\\N``, ``\\G``, ``\\L``, ``\\n``, ...) are not expanded and a
    trailing one cannot swallow the closing quote; quotes are escaped.
    """
    return printable(text).replace("&", "&amp;").replace("\\", "\\\\").replace('"', '\\"')


def dot_tooltip(text: str) -> str:
    """``text`` as the inside of a quoted Graphviz ``tooltip``, shown literally.

    Tooltips go through escString expansion without the label's own backslash
    unescaping, so a literal backslash needs two escaped ones.
    """
    return printable(text).replace("&", "&amp;").replace("\\", "\\\\\\\\").replace('"', '\\"')


def graph_svg(w: Workload, ev: Evaluation) -> tuple[str, str]:
    """(SVG markup or "", note) for the colour-class graph laid out by dot."""
    exe = shutil.which("dot")
    if exe is None:
        return "", ("Graphviz's <code>dot</code> is not installed, so the graph is not drawn "
                    "(Debian: <code>apt-get install graphviz</code>; <code>make</code> installs it).")
    cls, G = w.class_of, w.n_classes
    if G > MAX_GRAPH_VERTICES:
        return "", f"The graph has {G} colour classes, too many to draw legibly (limit {MAX_GRAPH_VERTICES})."
    dev = ev.assignment.device
    dev_of_class = np.full(G, -1)
    for v in range(w.n):
        if not w.backward[v] or dev_of_class[cls[v]] < 0:
            dev_of_class[cls[v]] = dev[v]
    names: dict[int, tuple[str, bool]] = {}
    for v in range(w.n):
        if cls[v] not in names or (not w.backward[v] and names[cls[v]][1]):
            names[cls[v]] = (w.names[v] or str(int(w.node_ids[v])), bool(w.backward[v]))
    dev_names = [d.name for d in ev.devices]
    lines = ["digraph placement {", 'graph [rankdir=TB, bgcolor="transparent", nodesep=0.15, ranksep=0.3];',
             'node [shape=box, style="filled,rounded", fontname="Helvetica", fontsize=9, height=0.25];',
             'edge [color="#99999988", arrowsize=0.5];']
    for g in range(G):
        d = int(dev_of_class[g])
        name = printable(names[g][0])
        where = dev_names[d] if 0 <= d < len(dev_names) else "unplaced"
        lines.append(f'c{g} [label="{dot_label(name[:28])}", fillcolor="{_color(d)}",'
                     f' tooltip="{dot_tooltip(name[:200] + " on " + where)}"];')
    seen = set()
    for u, v in zip(w.edge_src.tolist(), w.edge_dst.tolist()):
        if w.backward[u] or w.backward[v]:
            continue
        a, b = int(cls[u]), int(cls[v])
        if a == b or (a, b) in seen:
            continue
        seen.add((a, b))
        cut = dev[u] != dev[v]
        lines.append(f'c{a} -> c{b}' + (' [color="#d62728", penwidth=2.2];' if cut else ";"))
    lines.append("}")
    try:
        proc = subprocess.run([exe, "-Tsvg"], input="\n".join(lines), capture_output=True, text=True,
                              timeout=DOT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return "", f"Graphviz did not lay out the graph within {DOT_TIMEOUT_S} s."
    if proc.returncode != 0:
        return "", f"Graphviz failed: {html.escape(proc.stderr.strip()[:300])}"
    svg = proc.stdout
    svg = svg[svg.find("<svg"):]
    return svg.replace("<svg ", '<svg class="graph" ', 1), ""


def device_chart_svg(w: Workload, ev: Evaluation) -> str:
    """Stacked bars of compute / communication per device, and memory against the limit."""
    devs = [d for d in ev.devices if d.nodes]
    if not devs:
        return ""
    width, bar_h, gap, left = 720, 22, 8, 70
    top = max(d.load for d in devs) or 1.0
    scale = (width - left - 160) / top
    h = len(devs) * (bar_h + gap) + 30
    parts = [f'<svg class="chart" width="{width}" height="{h}" xmlns="http://www.w3.org/2000/svg">']
    for i, d in enumerate(devs):
        y = 10 + i * (bar_h + gap)
        cw = d.compute * scale
        mw = d.communication * scale if not ev.overlap_comm else 0.0
        parts.append(f'<text x="0" y="{y + 15}" font-size="12">{d.name}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{cw:.1f}" height="{bar_h}" fill="{_color(ev.devices.index(d))}">'
                     f'<title>compute {_f(d.compute)}</title></rect>')
        parts.append(f'<rect x="{left + cw:.1f}" y="{y}" width="{mw:.1f}" height="{bar_h}" fill="#888">'
                     f'<title>communication {_f(d.communication)}</title></rect>')
        mem = ""
        if d.kind == "accelerator" and w.memory > 0:
            mem = f", mem {100 * d.memory / w.memory:.0f}%"
        parts.append(f'<text x="{left + (d.load * scale) + 6:.1f}" y="{y + 15}" font-size="11">'
                     f'{_f(d.load, 5)}{mem}</text>')
    ml = ev.max_load * scale + left
    parts.append(f'<line x1="{ml:.1f}" y1="4" x2="{ml:.1f}" y2="{h - 16}" stroke="#d62728" stroke-dasharray="4 3"/>')
    parts.append(f'<text x="{left}" y="{h - 2}" font-size="11" fill="#555">bars: compute (device colour) + '
                 'communication (grey); dashed line: max-load</text>')
    parts.append("</svg>")
    return "".join(parts)


def timeline_svg(sim: Simulation) -> str:
    """The simulated schedule: one row per device, forward / backward / transfer blocks."""
    width, row, left = 900, 26, 60
    span = sim.makespan or 1.0
    scale = (width - left - 10) / span
    h = len(sim.devices) * row + 40
    parts = [f'<svg class="timeline" width="{width}" height="{h}" xmlns="http://www.w3.org/2000/svg">']
    for i, d in enumerate(sim.devices):
        parts.append(f'<text x="0" y="{i * row + 17}" font-size="12">{d}</text>')
        parts.append(f'<line x1="{left}" y1="{i * row + 24}" x2="{width - 10}" y2="{i * row + 24}" stroke="#eee"/>')
    for t in sim.tasks:
        y = t.device * row + 3
        r, c, s = t.parts
        x = left + t.start * scale
        action = t.action
        fill = "#4e79a7" if action.kind == "F" else "#f28e2b"
        segs = [(r, "#bbb", "recv"), (c, fill, str(action)), (s, "#bbb", "send")]
        if t.overlap:
            segs = [(c, fill, str(action))]
        for dur, col, label in segs:
            if dur <= 0:
                continue
            wdt = max(dur * scale, 0.5)
            parts.append(f'<rect x="{x:.2f}" y="{y}" width="{wdt:.2f}" height="{row - 8}" fill="{col}" '
                         f'stroke="white" stroke-width="0.3"><title>{label} microbatch {t.micro}: '
                         f'{_f(t.start)}–{_f(t.start + dur)}</title></rect>')
            if label.startswith(("F", "B")) and wdt > 16:
                parts.append(f'<text x="{x + 2:.2f}" y="{y + 13}" font-size="9" fill="white">{label}</text>')
            x += wdt
    for k in range(6):
        tx = left + k * (width - left - 10) / 5
        anchor = "end" if k == 5 else "start"
        parts.append(f'<text x="{tx:.1f}" y="{h - 6}" font-size="10" fill="#555" text-anchor="{anchor}">'
                     f'{_f(span * k / 5, 4)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def issue_order(sim: Simulation) -> str:
    """Each device's actions in the order the simulation ran them, as text, when short enough to read."""
    order = sim.order
    if order is None:
        return ""
    if len(sim.tasks) > MAX_ORDER_ACTIONS:
        return f"<p class='note'>(issue order omitted: more than {MAX_ORDER_ACTIONS:,} tasks)</p>"
    names = "; ".join(f"rank {r}: {html.escape(d)}" for r, d in enumerate(sim.devices))
    return (f"<p class='note'>Issue order per device ({names}): F forward, B backward, then the microbatch."
            f"</p><pre class='order'>{html.escape(order.text())}</pre>")


CSS = """
body{font-family:Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px} td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f4f4f4} td:first-child,th:first-child{text-align:left}
.summary td{text-align:left} .bad{color:#d62728} .ok{color:#2a7d2a}
.graphbox{overflow:auto;max-height:700px;border:1px solid #eee} .note{color:#555;font-size:13px}
.swatch{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}
"""


def render_report(w: Workload, split: Split, ev: Evaluation, sim: Simulation | None, title: str) -> str:
    """The whole HTML document."""
    meta = split.meta
    bott = ev.bottleneck
    gap_v = _number(meta.get("gap"))
    gap = f"{100 * gap_v:.3g} %" if gap_v is not None else "–"
    n_acc = sum(1 for d in ev.devices if d.nodes and d.kind == "accelerator")
    n_cpu = sum(1 for d in ev.devices if d.nodes and d.kind == "cpu")
    rows = [
        ("method", html.escape(printable(meta.get("method", "given split"))[:200])),
        ("status", html.escape(printable(meta.get("status", "–"))[:200])),
        ("max-load (time per sample)", _f(ev.max_load)),
        ("throughput (samples per time unit)", _f(1 / ev.max_load if ev.max_load > 0 else math.inf)),
        ("single-sample latency", _f(ev.latency) + (f" ({html.escape(ev.latency_note)})" if ev.latency_note else "")),
        ("bottleneck device", bott.name if bott else "–"),
        ("bound / gap", f"{_f(_number(meta.get('bound')))} / {gap}"),
        ("max FW + max BW", _f(ev.fw_plus_bw) if w.is_training else "– (inference)"),
        ("devices used", f"{n_acc} of {w.max_accelerators} accelerators, {n_cpu} of {w.max_cpus} CPU cores"),
        ("feasible", '<span class="ok">yes</span>' if ev.feasible else
         '<span class="bad">no: ' + html.escape("; ".join(v.message for v in ev.violations)) + "</span>"),
    ]
    copies = ev.shared_copies()
    if copies:  # every device using a shared parameter group holds (and pays for) a copy
        rows.append(("shared parameter copies", "<br>".join(
            f"{html.escape(c['name'])}: {', '.join(c['devices'])}" for c in copies)))
    if _number(meta.get("runtime_s")) is not None:
        rows.append(("solver runtime", f"{_number(meta['runtime_s']):.3f} s"))
    summary = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    dev_rows = []
    for i, d in enumerate(ev.devices):
        if not d.nodes:
            continue
        recv = d.forward_parts[0] + d.backward_parts[0]
        send = d.forward_parts[2] + d.backward_parts[2]
        mem = (f"{format_bytes(d.memory)} ({100 * d.memory / w.memory:.0f}%)" if d.kind == "accelerator" and w.memory
               else "–")
        dev_rows.append(f'<tr><td><span class="swatch" style="background:{_color(i)}"></span>{d.name}</td>'
                        f"<td>{_f(d.load)}</td><td>{_f(d.compute)}</td><td>{_f(recv)}</td><td>{_f(send)}</td>"
                        f"<td>{mem}</td><td>{len(d.nodes)}</td><td>{'yes' if d.contiguous else 'no'}</td></tr>")
    graph, note = graph_svg(w, ev)
    names = [d.name for d in ev.devices]
    cuts = crossing_outputs(w, ev.assignment)
    cuts.sort(key=lambda t: -w.comm_cost[t[0]])
    cut_rows = "".join(
        f"<tr><td>{int(w.node_ids[u])}</td><td>{html.escape(w.names[u] or '')}</td><td>{names[d]}</td>"
        f"<td>{', '.join(names[x] for x in to)}</td><td>{_f(float(w.comm_cost[u]))}</td></tr>"
        for u, d, to in cuts[:300]
    )
    more = f"<p class='note'>… and {len(cuts) - 300} more.</p>" if len(cuts) > 300 else ""
    timeline = ""
    if sim is not None:
        timeline = (f"<h2>Simulated pipeline ({sim.schedule}, {sim.microbatches} microbatches)</h2>"
                    f"<p class='note'>time per sample {_f(sim.time_per_sample)} (max-load {_f(ev.max_load)}), "
                    f"bubble fraction {100 * sim.bubble_fraction:.1f}%. Blue: forward, orange: backward, "
                    f"grey: transfers.</p><div class='timelinebox'>{timeline_svg(sim)}</div>{issue_order(sim)}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{CSS}</style></head>
<body>
<h1>dnnplace report: {html.escape(title)}</h1>
<h2>Summary</h2><table class="summary">{summary}</table>
<h2>Devices</h2>
<table><tr><th>device</th><th>load</th><th>compute</th><th>received</th><th>sent</th><th>memory</th>
<th>nodes</th><th>contiguous</th></tr>{''.join(dev_rows)}</table>
<p>{device_chart_svg(w, ev)}</p>
{timeline}
<h2>Graph</h2>
<p class="note">One box per colour class (forward operator with its backward colour-mates), coloured by device;
red edges cross devices.</p>
<div class="graphbox">{graph or f'<p class="note" id="graph-missing">{note}</p>'}</div>
<h2>Tensors crossing devices ({len(cuts)})</h2>
<table><tr><th>node</th><th>name</th><th>from</th><th>to</th><th>cost</th></tr>{cut_rows}</table>{more}
<p class="note">Generated by dnnplace. Times are in the workload's units (the paper's files use milliseconds).</p>
</body></html>
"""


def write_report(w: Workload, split: Split, path: str | Path, *, title: str | None = None,
                 microbatches: int = 8, schedule: str = "1f1b", overlap_comm: bool = False,
                 inputs: Iterable[str | Path | None] = ()) -> Path:
    """Evaluate, simulate and write the report (atomically, never over one of ``inputs``)."""
    from dnnplace.errors import DnnplaceError
    from dnnplace.models.paper.evaluation import evaluate
    from dnnplace.models.paper.simulation import simulate
    from dnnplace.utils.files import check_output, write_text_atomic

    p = Path(path)
    inputs = list(inputs)
    check_output(p, inputs)
    if microbatches > MAX_TIMELINE_MICROBATCHES:
        raise DnnplaceError(f"the report's timeline draws every task: at most {MAX_TIMELINE_MICROBATCHES:,}"
                            f" microbatches, not {microbatches:,}")
    ev = evaluate(w, split, overlap_comm=overlap_comm)
    try:
        sim = simulate(w, split, schedule=schedule, microbatches=microbatches, overlap_comm=overlap_comm)
    except DnnplaceError:
        sim = None
    write_text_atomic(p, render_report(w, split, ev, sim, title or p.stem), inputs=inputs)
    return p
