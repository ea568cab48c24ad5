"""The LLM training report's pictures as inline SVG: step times with their band, memory per GPU, the pipeline.

Why inline SVG built as strings: the page must open offline in any browser (no script, no network, no
plotting library), and every number drawn is also written in the element's ``<title>`` and ``data-*``
attributes, so a test can check the picture against the plan document without rendering it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dnnplace.models.llm.interleaved import ScheduleRun, TaskColumns
from dnnplace.utils.svg import esc as _e
from dnnplace.utils.svg import fmt_number as _fmt
from dnnplace.utils.svg import nice_ticks as _ticks

__all__ = ["GB", "MAX_TASK_BOXES", "SEGMENTS", "Layout", "memory_svg", "nice_ticks", "steps_svg", "timeline_svg"]

GB = 1e9
#: memory segments of one GPU, in drawing order: (key of the estimate's memory_breakdown, label, colour)
SEGMENTS = (("weights", "weights", "#4477cc"), ("gradients", "gradients", "#44aa77"),
            ("optimizer", "optimizer state", "#ee9944"), ("activations", "activations", "#cc4477"),
            ("buffers", "other (CUDA context, NCCL buffers, fragmentation)", "#999999"))
#: Above this many simulated tasks the timeline draws each rank's busy share per two pixels instead of one box
#: per task: a page of 10^5 boxes is slow to open and no eye can read them.
MAX_TASK_BOXES = 4_000
_KIND_COLOUR = {"plan": "#2b6cb0", "runner-up": "#8fb3d9", "compared": "#dd8844"}


def nice_ticks(hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [0, hi]."""
    return _ticks(0.0, hi, n) if hi > 0 else [0.0]


def _axis(ticks: Sequence[float], x0: float, scale: float, y_top: float, y_axis: float, unit: str) -> str:
    """Vertical grid lines at ``ticks`` and their labels under ``y_axis``."""
    out = [f"<line x1='{x0}' y1='{y_axis}' x2='{x0 + ticks[-1] * scale:.1f}' y2='{y_axis}' stroke='#333'/>"]
    for t in ticks:
        x = x0 + t * scale
        out.append(f"<line x1='{x:.1f}' y1='{y_top}' x2='{x:.1f}' y2='{y_axis + 4}' stroke='#e4e4e4'/>"
                   f"<text x='{x:.1f}' y='{y_axis + 16}' text-anchor='middle' class='small'>{_fmt(t)}</text>")
    out.append(f"<text x='{x0 + ticks[-1] * scale / 2:.1f}' y='{y_axis + 32}' text-anchor='middle'>{_e(unit)}</text>")
    return "".join(out)


@dataclass(frozen=True)
class Layout:
    """One configuration drawn beside the plan: its role (plan, runner-up, compared), a label, the evaluator's
    figures, and the step times the error band allows for its prediction (None: no band for this kind of run)."""

    role: str
    label: str
    step_time_s: float
    fits: bool
    memory: dict[str, float]  # the most-loaded GPU's bytes by component (the estimate's memory_breakdown)
    memory_total: float
    band_s: tuple[float, float] | None = None
    within_band: bool | None = None  # the band cannot tell it from the plan (runner-ups and compared only)


def steps_svg(layouts: Sequence[Layout], width: int = 560) -> str:
    """A bar per layout: its predicted step time, and a whisker over the step times its error band allows."""
    finite = [x for lay in layouts for x in (lay.step_time_s, *(lay.band_s or ())) if math.isfinite(x)]
    if not finite:
        return "<p>(no step time to draw)</p>"
    ticks = nice_ticks(max(finite) * 1.04)
    scale = width / ticks[-1]
    lw, rh = 330, 28
    out = []
    for i, lay in enumerate(layouts):
        y = 8 + i * rh
        w = lay.step_time_s * scale if math.isfinite(lay.step_time_s) else 0.0
        fill = _KIND_COLOUR.get(lay.role, "#888")
        extra = "" if lay.fits else " stroke='#d00' stroke-width='2' stroke-dasharray='4 2'"
        text = f"{lay.step_time_s:.3f} s" + ("" if lay.fits else " \u2014 does NOT fit")
        if lay.role != "plan" and lay.within_band is not None:
            text += " (within the band of the plan)" if lay.within_band else " (the band tells it apart)"
        whisker = ""
        band = ""
        if lay.band_s is not None:
            lo, hi = lay.band_s
            band = f" data-band-low-s='{lo:.6g}' data-band-high-s='{hi:.6g}'"
            xl, xh, ym = lw + lo * scale, lw + hi * scale, y + (rh - 10) / 2
            whisker = (f"<g class='whisker'><title>the error band allows {lo:.3f} .. {hi:.3f} s</title>"
                       f"<line x1='{xl:.1f}' y1='{ym:.1f}' x2='{xh:.1f}' y2='{ym:.1f}' stroke='#000'"
                       f" stroke-width='1.5'/><line x1='{xl:.1f}' y1='{ym - 6:.1f}' x2='{xl:.1f}' y2='{ym + 6:.1f}'"
                       f" stroke='#000' stroke-width='1.5'/><line x1='{xh:.1f}' y1='{ym - 6:.1f}' x2='{xh:.1f}'"
                       f" y2='{ym + 6:.1f}' stroke='#000' stroke-width='1.5'/></g>")
        tail = max(w, (lay.band_s[1] * scale) if lay.band_s else 0.0)
        out.append(f"<g class='step {_e(lay.role)}' data-role='{_e(lay.role)}' data-step-s='{lay.step_time_s:.6g}'"
                   f" data-fits='{str(lay.fits).lower()}'{band}><text x='4' y='{y + 13}' class='small'>"
                   f"{_e(lay.label)}</text><rect x='{lw}' y='{y}' width='{w:.2f}' height='{rh - 10}' fill='{fill}'"
                   f"{extra}><title>{_e(lay.role)}: {_e(lay.label)}: predicted {lay.step_time_s:.4f} s</title></rect>"
                   f"{whisker}<text x='{lw + tail + 8:.1f}' y='{y + 13}' class='small'>{_e(text)}</text></g>")
    y_axis = 8 + len(layouts) * rh
    out.append(_axis(ticks, lw, scale, 4, y_axis, "seconds per training step"))
    legend = "".join(f"<rect x='{lw + 150 * j}' y='{y_axis + 42}' width='12' height='12' fill='{c}'/>"
                     f"<text x='{lw + 16 + 150 * j}' y='{y_axis + 52}' class='small'>{k}</text>"
                     for j, (k, c) in enumerate(_KIND_COLOUR.items()))
    legend += (f"<line x1='{lw + 450}' y1='{y_axis + 48}' x2='{lw + 474}' y2='{y_axis + 48}' stroke='#000'/>"
               f"<text x='{lw + 480}' y='{y_axis + 52}' class='small'>error band</text>")
    return (f"<svg class='steps' width='{lw + width + 330}' height='{y_axis + 64}'"
            f" xmlns='http://www.w3.org/2000/svg'>" + "".join(out) + legend + "</svg>")


def memory_svg(layouts: Sequence[Layout], limit_bytes: float, device: str, width: int = 560) -> str:
    """A stacked bar per layout (its most-loaded GPU, by component) against the device's usable memory."""
    if not layouts:
        return "<p>(no layout to draw)</p>"
    top = max(limit_bytes, *(lay.memory_total for lay in layouts))
    ticks = nice_ticks(top * 1.02 / GB)
    scale = width / (ticks[-1] * GB)
    lw, rh = 330, 28
    out = []
    for i, lay in enumerate(layouts):
        y = 8 + i * rh
        x = float(lw)
        segs = []
        known = [k for k, _, _ in SEGMENTS]
        parts = [(k, lab, c, lay.memory.get(k, 0.0)) for k, lab, c in SEGMENTS]
        parts += [(k, k, "#cccccc", v) for k, v in lay.memory.items() if k not in known]
        for key, label, colour, v in parts:
            w = max(v, 0.0) * scale
            segs.append(f"<rect class='seg seg-{_e(key)}' data-gb='{v / GB:.4f}' x='{x:.2f}' y='{y}' width='{w:.2f}'"
                        f" height='{rh - 10}' fill='{colour}'><title>{_e(label)}: {v / GB:.2f} GB</title></rect>")
            x += w
        over = lay.memory_total > limit_bytes
        tail = f"{lay.memory_total / GB:.1f} GB" + (" \u2014 over the limit" if over else "")
        out.append(f"<g class='membar{' over' if over else ''}' data-role='{_e(lay.role)}'"
                   f" data-total-gb='{lay.memory_total / GB:.4f}'><text x='4' y='{y + 13}' class='small'>"
                   f"{_e(lay.label)}</text>{''.join(segs)}<text x='{x + 6:.1f}' y='{y + 13}' class='small'>"
                   f"{_e(tail)}</text></g>")
    y_axis = 8 + len(layouts) * rh
    lx = lw + limit_bytes * scale
    out.append(f"<g class='limit' data-gb='{limit_bytes / GB:.4f}'><line x1='{lx:.1f}' y1='2' x2='{lx:.1f}'"
               f" y2='{y_axis}' stroke='#d00' stroke-width='2' stroke-dasharray='6 3'/><title>{_e(device)} usable"
               f" memory {limit_bytes / GB:.2f} GB</title><text x='{lx - 4:.1f}' y='{y_axis - 4}' text-anchor='end'"
               f" class='small' fill='#d00'>limit {limit_bytes / GB:.1f} GB</text></g>")
    out.append(_axis(ticks, lw, scale * GB, 4, y_axis, "GB per GPU (1 GB = 10^9 bytes)"))
    legend = "".join(f"<rect x='{lw + 250 * (j % 3)}' y='{y_axis + 42 + 18 * (j // 3)}' width='12' height='12'"
                     f" fill='{c}'/><text x='{lw + 16 + 250 * (j % 3)}' y='{y_axis + 52 + 18 * (j // 3)}'"
                     f" class='small'>{_e(label)}</text>" for j, (_, label, c) in enumerate(SEGMENTS))
    return (f"<svg class='memory' width='{lw + width + 200}' height='{y_axis + 84}'"
            f" xmlns='http://www.w3.org/2000/svg'>" + "".join(out) + f"<g class='legend'>{legend}</g></svg>")


def _columns(run: ScheduleRun) -> tuple[Sequence[int], Sequence[int], Sequence[int], Sequence[int],
                                        Sequence[float], Sequence[float]]:
    """The tasks as columns (rank, stage, micro-batch, backward, start, end), without building task objects."""
    t = run.tasks
    if isinstance(t, TaskColumns):
        return t.rank, t.stage, t.microbatch, t.backward, t.start, t.end
    return ([x.rank for x in t], [x.stage for x in t], [x.microbatch for x in t], [int(x.backward) for x in t],
            [x.start for x in t], [x.end for x in t])


def _colour(mb: int, backward: float) -> str:
    """Forward light, backward dark; a micro-batch's hue (``mb`` < 0: grey, a run of several micro-batches)."""
    light = 72 - 30 * backward
    return f"hsl({(mb * 47) % 360},60%,{light:.0f}%)" if mb >= 0 else f"hsl(215,25%,{light:.0f}%)"


def _busy_upto(st: np.ndarray, en: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Seconds of the (sorted, disjoint) tasks ``st .. en`` done by each time of ``t``."""
    if not len(st):
        return np.zeros_like(t)
    cum = np.concatenate(([0.0], np.cumsum(en - st)))
    i = np.searchsorted(st, t, side="right") - 1
    j = np.maximum(i, 0)
    return np.where(i < 0, 0.0, cum[j] + np.clip(t - st[j], 0.0, en[j] - st[j]))


def _runs(rows: list[list[str]], rank: Sequence[int], bwd: Sequence[int], start: Sequence[float],
          end: Sequence[float], total: float, lw: float, scale: float, top: float, rh: float) -> None:
    """Each rank's busy share per 2-pixel bin, quantised, equal neighbours merged into one run: a strip whose
    depth is how busy the rank was (white: a bubble) and whose hue leans from forward (blue) to backward (red).
    Vectorised and bounded by the width, whatever the number of tasks."""
    rk, st, en = np.asarray(rank, np.int64), np.asarray(start, float), np.asarray(end, float)
    back = np.asarray(bwd, bool)
    bins = max(int(total * scale / 2), 1)
    edges = np.linspace(0.0, total, bins + 1)
    for r in range(len(rows)):
        mine = rk == r
        order = np.argsort(st[mine], kind="stable")
        s, e, b = st[mine][order], en[mine][order], back[mine][order]
        busy = np.diff(_busy_upto(s, e, edges))
        bb = np.diff(_busy_upto(s[b], e[b], edges))
        util = np.where(busy > 0, np.maximum(np.round(8 * busy / (total / bins)), 1), 0) / 8  # any work shows
        share = np.round(4 * np.divide(bb, busy, out=np.zeros_like(busy), where=busy > 0)) / 4
        cut = np.flatnonzero(np.concatenate(([True], (util[1:] != util[:-1]) | (share[1:] != share[:-1]))))
        for k, i in enumerate(cut):
            z = cut[k + 1] if k + 1 < len(cut) else bins
            if util[i] == 0:
                continue
            secs, bsecs = float(busy[i:z].sum()), float(bb[i:z].sum())
            a, w = edges[i], edges[z] - edges[i]
            rows[r].append(f"<rect class='run' data-busy-s='{secs:.6g}' x='{lw + a * scale:.2f}' y='{top + r * rh}'"
                           f" width='{w * scale:.2f}' height='{rh - 2}' fill='hsl({215 + 135 * share[i]:.0f},65%,45%)'"
                           f" fill-opacity='{min(util[i], 1.0):.3f}'><title>rank {r}, {a:.3f} .. {a + w:.3f} s:"
                           f" busy {100 * secs / w:.0f} %, {100 * bsecs / secs if secs else 0:.0f} % of it backward"
                           f"</title></rect>")


def timeline_svg(run: ScheduleRun, pp: int, tail_s: float = 0.0) -> str:
    """One row per pipeline rank, time to the right, the step's tail after the schedule shaded.

    Up to :data:`MAX_TASK_BOXES` tasks each is a box (forward light, backward dark, hue by micro-batch, its
    number written when the box is wide enough); beyond, each rank is a strip of its busy share (:func:`_runs`),
    so that 64 stages of thousands of micro-batches stay one readable picture of a bounded size: the bubbles are
    the pale parts.  The picture widens with the tasks per rank (the page scrolls it); rows narrow with the ranks."""
    rank, stage, mb, bwd, start, end = _columns(run)
    n = len(rank)
    total = run.makespan + max(tail_s, 0.0)
    if not total > 0 or pp < 1:
        return "<p>(no timeline: the step takes no time)</p>"
    per_rank = n / pp
    width = int(min(max(per_rank * 9, 900), 2400))
    rh = 22 if pp <= 16 else 14 if pp <= 32 else 10 if pp <= 64 else 6
    every = 1 if rh >= 10 else 4
    lw, top = 70, 6
    scale = width / total
    boxes = n <= MAX_TASK_BOXES
    rows: list[list[str]] = [[] for _ in range(pp)]
    if boxes:
        for i in range(n):
            r, s, k, b = int(rank[i]), int(stage[i]), int(mb[i]), bool(bwd[i])
            x, w = lw + start[i] * scale, max((end[i] - start[i]) * scale, 0.5)
            kind = "B" if b else "F"
            label = (f"<text x='{x + w / 2:.1f}' y='{top + r * rh + rh / 2 + 3:.1f}' text-anchor='middle'"
                     f" class='mb'>{k}</text>") if w >= 14 and rh >= 14 else ""
            rows[r].append(f"<rect class='task' data-tasks='1' x='{x:.2f}' y='{top + r * rh}' width='{w:.2f}'"
                           f" height='{rh - 3}' fill='{_colour(k, float(b))}'><title>{kind}{k}.{s // pp}: {kind}"
                           f" micro-batch {k}, virtual stage {s}, {start[i]:.4f} .. {end[i]:.4f} s</title></rect>"
                           + label)
    else:
        _runs(rows, rank, bwd, start, end, run.makespan, lw, scale, top, rh)
    out = []
    for r in range(pp):
        y = top + r * rh
        busy = run.busy[r] if r < len(run.busy) else 0.0
        label = (f"<text x='{lw - 6}' y='{y + rh / 2 + 3:.1f}' text-anchor='end' class='small'>rank {r}</text>"
                 if r % every == 0 or r == pp - 1 else "")
        out.append(f"<g class='rank' data-rank='{r}' data-busy-s='{busy:.6g}'>{label}<rect x='{lw}' y='{y}'"
                   f" width='{run.makespan * scale:.2f}' height='{rh - 2}' fill='#f3f3f3'><title>rank {r}: busy"
                   f" {busy:.4f} s of {run.makespan:.4f} s</title></rect>{''.join(rows[r])}</g>")
    y_axis = top + pp * rh + 2
    if tail_s > 0:
        x = lw + run.makespan * scale
        out.append(f"<rect class='tail' x='{x:.2f}' y='{top}' width='{tail_s * scale:.2f}' height='{pp * rh - 2}'"
                   f" fill='#d8d8d8'><title>after the schedule: exposed data-parallel communication and the"
                   f" optimizer step, {tail_s:.4f} s</title></rect><text x='{x + 4:.1f}' y='{top + 12}'"
                   f" class='small'>DP + optimizer</text>")
    out.append(_axis(nice_ticks(total), lw, scale, top, y_axis, "seconds into the step"))
    how = "one box per task" if boxes else ("each rank's busy share per 2 pixels: depth how busy (white: a bubble),"
                                            " hue from forward (blue) to backward (red)")
    out.append(f"<text x='{lw}' y='{y_axis + 52}' class='small'>{_e(how)}</text>")
    return (f"<svg class='timeline' width='{lw + width + 60}' height='{y_axis + 60}' data-ranks='{pp}'"
            f" data-tasks='{n}' data-makespan-s='{run.makespan:.6g}' data-drawn='{'tasks' if boxes else 'runs'}'"
            f" xmlns='http://www.w3.org/2000/svg'><title>{_e(how)}</title>" + "".join(out) + "</svg>")
