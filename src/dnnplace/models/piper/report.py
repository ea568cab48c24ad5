"""A self-contained HTML page for a Piper plan: per stage replicas, width, time and memory bars."""

from __future__ import annotations

import html
from collections.abc import Iterable
from pathlib import Path

from dnnplace.models.piper.evaluation import evaluate_piper, stage_rows
from dnnplace.models.piper.spec import PiperInstance, PiperPlan
from dnnplace.utils.text import id_ranges

_STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
          "padding:4px 8px;text-align:right}.bar{width:200px;height:8px;background:#eee;display:flex}"
          ".bar span{display:block;height:8px}")


def render_piper_report(inst: PiperInstance, plan: PiperPlan, title: str) -> str:
    """The page as a string (every user-supplied text escaped)."""
    ev = evaluate_piper(inst, plan)
    rows = stage_rows(inst, ev)
    limit = inst.memory
    body = [f"<h1>{html.escape(title)}</h1>"]
    tps = f"{ev.tps:.10g}" if ev.feasible else "infeasible (out of memory)"
    body.append(f"<p>Time per sample <b>{tps}</b>; {ev.devices} of {inst.max_devices} devices; "
                f"batch {inst.batch} micro-batches; memory {limit / 2**30:.3f} GiB per device; "
                f"bandwidth {inst.bandwidth:.4g} B/s.</p>")
    body.append("<table><tr><th>stage</th><th>nodes</th><th>replicas d</th><th>width t</th><th>in flight y</th>"
                "<th>time/sample</th><th>recomputed</th><th>memory (fixed + in flight)</th></tr>")
    tmax = max((r["time_per_sample"] for r in rows), default=1.0) or 1.0
    for r in rows:
        fixed = 100 * r["memory_fixed"] / limit
        fl = 100 * r["memory_in_flight"] / limit
        bar = (f"<div class='bar'><span style='width:{min(fixed, 100):.1f}%;background:#4a7'></span>"
               f"<span style='width:{min(fl, 100 - min(fixed, 100)):.1f}%;background:#e94'></span></div>")
        tbar = (f"<div class='bar'><span style='width:{100 * r['time_per_sample'] / tmax:.1f}%;"
                "background:#47c'></span></div>")
        body.append(
            f"<tr><td>{r['stage']}</td><td>{id_ranges(r['nodes'])}</td><td>{r['replicas']}</td>"
            f"<td>{r['width']}</td><td>{r['in_flight']}</td><td>{r['time_per_sample']:.6g}{tbar}</td>"
            f"<td>{id_ranges(r['recomputed'])}</td><td>{r['memory'] / 2**30:.3f} GiB = "
            f"{r['memory_fixed'] / 2**30:.3f} + {r['memory_in_flight'] / 2**30:.3f}"
            f"{' OOM' if r['oom'] else ''}{bar}</td></tr>")
    body.append("</table><p>Memory bars: green = fixed (weights, optimizer state), orange = activations of the "
                "micro-batches in flight under 1F1B (y = ceil(D/d)), against the per-device limit.</p>")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{_STYLE}"
            "</style></head><body>" + "\n".join(body) + "</body></html>")


def write_piper_report(inst: PiperInstance, plan: PiperPlan, path: str | Path, *, title: str | None = None,
                       inputs: Iterable[str | Path | None] = ()) -> Path:
    """Evaluate and write the page atomically, never over one of ``inputs`` (nor through a link)."""
    from dnnplace.utils.files import check_output, write_text_atomic

    p = Path(path)
    inputs = list(inputs)
    check_output(p, inputs)
    write_text_atomic(p, render_piper_report(inst, plan, title or p.stem), inputs=inputs)
    return p
