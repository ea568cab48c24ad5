"""The serving report's pictures as inline SVG: the fleet as pipelines and nodes, memory and time bars, the curve.

Why inline SVG built as strings: the page must open offline in any browser (no script, no network, no
plotting library), and every number drawn is also written in the element's ``<title>`` and ``data-*``
attributes, so a test can check the picture against the evaluation without rendering it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dnnplace.core.catalogue import device_spec
from dnnplace.models.serving.evaluation import ServingEvaluation, link_between
from dnnplace.models.serving.spec import ServingConfig, ServingProblem
from dnnplace.utils.svg import esc as _e
from dnnplace.utils.svg import fmt_number as _fmt
from dnnplace.utils.svg import nice_ticks

__all__ = ["GIB", "SEGMENTS", "Series", "curve_svg", "fleet_svg", "layer_range", "memory_svg", "nice_ticks", "owners",
           "stage_colour", "times_svg"]

GIB = float(2**30)
#: memory segments of one GPU, in drawing order: (key, label, colour)
SEGMENTS = (("weights", "weights", "#4477cc"), ("activations", "activations", "#cc4477"),
            ("graphs", "CUDA graphs", "#ee9944"), ("kv", "KV cache", "#44aa77"),
            ("kv_idle", "KV headroom unused", "#b9e2c8"), ("free", "outside the budget", "#eeeeee"))
_SERIES = ("#222222", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def stage_colour(replica: int, stage: int) -> str:
    """One colour per (replica, stage), the same in the pipelines and the node map."""
    return f"hsl({(stage * 67 + replica * 151) % 360},55%,72%)"


def layer_range(first: int, count: int) -> str:
    """Decoder layers ``first .. first+count-1`` (0-based, as the engines' layer indices)."""
    return f"layers {first}\u2013{first + count - 1} ({count})"


def owners(config: ServingConfig) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """(node, GPU index) -> the (replica, stage) pairs that use it; more than one pair is an invalid deployment."""
    out: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for r, rep in enumerate(config.replicas):
        for k, s in enumerate(rep.stages):
            for g in s.gpus:
                out.setdefault((s.node, g), []).append((r, k))
    return out


def fleet_svg(p: ServingProblem, config: ServingConfig) -> str:
    """Each replica as its stages in pipeline order (GPU kind, ids, layer range, the link between stages),
    then each node with its GPUs coloured by the stage that uses them (grey: idle)."""
    bw, bh, gap = 200, 66, 44
    parts: list[str] = []
    y = 10
    owner = owners(config)
    width = 400
    for r, rep in enumerate(config.replicas):
        parts.append(f"<text x='8' y='{y + 12}' class='rlabel'>replica {r + 1}: tp {rep.tp}, pp {rep.pp}</text>")
        y += 20
        first = 0
        for k, s in enumerate(rep.stages):
            x = 8 + k * (bw + gap)
            ids = ",".join(map(str, s.gpus))
            title = f"replica {r + 1} stage {k + 1}: {s.gpu} x{s.tp} on node {s.node}, GPUs {ids}, " \
                    f"{layer_range(first, s.layers)}"
            parts.append(
                f"<g class='stage' data-replica='{r}' data-stage='{k}' data-gpu='{_e(s.gpu)}' data-node='{s.node}'"
                f" data-gpus='{ids}' data-first='{first}' data-layers='{s.layers}'><title>{_e(title)}</title>"
                f"<rect x='{x}' y='{y}' width='{bw}' height='{bh}' rx='6' fill='{stage_colour(r, k)}'"
                f" stroke='#333'/><text x='{x + 8}' y='{y + 18}' class='b'>stage {k + 1}: {_e(s.gpu)} \u00d7{s.tp}"
                f"</text><text x='{x + 8}' y='{y + 37}'>node {s.node}, GPUs {ids}</text>"
                f"<text x='{x + 8}' y='{y + 56}'>{layer_range(first, s.layers)}</text></g>")
            if k + 1 < rep.pp:
                ax, ay = x + bw, y + bh / 2
                link = link_between(p, s, rep.stages[k + 1])
                parts.append(f"<g class='hop'><line x1='{ax + 2}' y1='{ay}' x2='{ax + gap - 6}' y2='{ay}'"
                             f" stroke='#333' stroke-width='2'/><polygon points='{ax + gap - 2},{ay} {ax + gap - 10},"
                             f"{ay - 5} {ax + gap - 10},{ay + 5}' fill='#333'/><text x='{ax + gap / 2}' y='{ay - 8}'"
                             f" text-anchor='middle' class='small'>{_e(link)}</text></g>")
            first += s.layers
            width = max(width, x + bw + 10)
        y += bh + 14
    y += 10
    cw, ch = 74, 40
    for n, node in enumerate(p.fleet.nodes):
        nw = 16 + len(node.gpus) * (cw + 6)
        width = max(width, nw + 20)
        parts.append(f"<g class='node' data-node='{n}'><rect x='8' y='{y}' width='{nw}' height='{ch + 36}' rx='8'"
                     f" fill='#f6f6f6' stroke='#777'/><text x='16' y='{y + 16}' class='b'>node {n}"
                     f" ({_e(node.link)})</text>")
        for j, dev in enumerate(node.gpus):
            x = 16 + j * (cw + 6)
            who = owner.get((n, dev.index), [])
            fill = "#ff3333" if len(who) > 1 else stage_colour(*who[0]) if who else "#d0d0d0"
            use = "; ".join(f"replica {a + 1} stage {b + 1}" for a, b in who) or "idle"
            if len(who) > 1:
                use += " (assigned twice: invalid)"
            cls = "gpu clash" if len(who) > 1 else "gpu"
            parts.append(f"<g class='{cls}' data-node='{n}' data-index='{dev.index}' data-use='{_e(use)}'><title>"
                         f"node {n} GPU {dev.index} ({_e(dev.name)}): {_e(use)}</title><rect x='{x}' y='{y + 24}'"
                         f" width='{cw}' height='{ch}' rx='4' fill='{fill}' stroke='#555'/><text x='{x + 5}'"
                         f" y='{y + 40}' class='small'>GPU {dev.index}</text><text x='{x + 5}' y='{y + 56}'"
                         f" class='small'>{_e(dev.name)}</text></g>")
        parts.append("</g>")
        y += ch + 46
    return (f"<svg class='fleet' width='{width}' height='{y}' xmlns='http://www.w3.org/2000/svg'>"
            + "".join(parts) + "</svg>")


@dataclass(frozen=True)
class _GpuMemory:
    label: str
    capacity: float
    budget: float
    parts: dict[str, float]
    over: float  # bytes the weights, activations and graphs need beyond the engine's budget


def _gpu_rows(p: ServingProblem, config: ServingConfig, ev: ServingEvaluation) -> list[_GpuMemory]:
    rows = []
    for r, (rep, rev) in enumerate(zip(config.replicas, ev.replicas)):
        for k, (s, m) in enumerate(zip(rep.stages, rev.memory)):
            cap = device_spec(s.gpu).usable_memory_bytes
            kv_free = max(m.kv_free, 0.0)
            kv_used = min(kv_free, rev.kv_tokens * m.kv_per_token) if math.isfinite(rev.kv_tokens) else kv_free
            used = m.weights + m.activations + m.graphs + kv_free
            parts = {"weights": m.weights, "activations": m.activations, "graphs": m.graphs, "kv": kv_used,
                     "kv_idle": kv_free - kv_used, "free": max(cap - max(m.budget, used), 0.0)}
            for g in s.gpus:
                rows.append(_GpuMemory(f"R{r + 1} S{k + 1} \u00b7 node {s.node} GPU {g} \u00b7 {s.gpu}", cap,
                                       m.budget, parts, max(-m.kv_free, 0.0)))
    return rows


def memory_svg(p: ServingProblem, config: ServingConfig, ev: ServingEvaluation, width: int = 620) -> str:
    """One bar per GPU of the deployment, all on one scale against each GPU's memory (the outline)."""
    rows = _gpu_rows(p, config, ev)
    if not rows:
        return "<p>(no GPU is used)</p>"
    top = max(max(r.capacity, sum(r.parts.values())) for r in rows)
    scale = width / top
    lw, rh = 250, 22
    out = []
    for i, row in enumerate(rows):
        y = 6 + i * rh
        x = float(lw)
        segs = []
        for key, label, colour in SEGMENTS:
            v = row.parts[key]
            w = v * scale
            segs.append(f"<rect class='seg seg-{key}' data-gib='{v / GIB:.3f}' x='{x:.2f}' y='{y}' width='{w:.2f}'"
                        f" height='{rh - 6}' fill='{colour}'><title>{_e(label)}: {v / GIB:.2f} GiB</title></rect>")
            x += w
        bx = lw + row.budget * scale
        segs.append(f"<line class='budget' x1='{bx:.2f}' y1='{y - 2}' x2='{bx:.2f}' y2='{y + rh - 4}' stroke='#000'"
                    f" stroke-dasharray='3 2'><title>the engine's budget {row.budget / GIB:.2f} GiB</title></line>")
        tail = f"{row.capacity / GIB:.1f} GiB"
        if row.over > 0:
            tail += f" \u2014 over the budget by {row.over / GIB:.2f} GiB"
        cls = "membar over" if row.over > 0 else "membar"
        cw = row.capacity * scale
        out.append(f"<g class='{cls}' data-capacity-gib='{row.capacity / GIB:.3f}'><text x='4' y='{y + 12}'"
                   f" class='small'>{_e(row.label)}</text>{''.join(segs)}<rect x='{lw}' y='{y}' width='{cw:.2f}'"
                   f" height='{rh - 6}' fill='none' stroke='#333'><title>GPU memory {row.capacity / GIB:.2f} GiB"
                   f"</title></rect><text x='{lw + cw + 6:.2f}' y='{y + 12}' class='small'>{tail}</text></g>")
    ly = 12 + len(rows) * rh
    legend = "".join(f"<rect x='{lw + 150 * (j % 4)}' y='{ly + 18 * (j // 4)}' width='12' height='12' fill='{c}'"
                     f" stroke='#999'/><text x='{lw + 16 + 150 * (j % 4)}' y='{ly + 10 + 18 * (j // 4)}'"
                     f" class='small'>{_e(label)}</text>"
                     for j, (_, label, c) in enumerate(SEGMENTS))
    h = ly + 40
    return (f"<svg class='memory' width='{lw + width + 260}' height='{h}' xmlns='http://www.w3.org/2000/svg'>"
            + "".join(out) + legend + "</svg>")


def times_svg(config: ServingConfig, ev: ServingEvaluation, width: int = 560) -> str:
    """Each stage's time per iteration, one scale for the whole fleet; each replica's slowest stage marked."""
    finite = [t for r in ev.replicas for t in r.stage_s if math.isfinite(t)]
    if not finite:
        return "<p>(no stage time: the deployment does not fit)</p>"
    scale = width / max(finite)
    lw, rh = 210, 22
    out = []
    i = 0
    for r, (rep, rev) in enumerate(zip(config.replicas, ev.replicas)):
        slow = max(range(len(rev.stage_s)), key=lambda k: rev.stage_s[k]) if rev.stage_s else -1
        for k, s in enumerate(rep.stages):
            t = rev.stage_s[k] if k < len(rev.stage_s) else math.inf
            y = 6 + i * rh
            i += 1
            mark = k == slow and math.isfinite(t)
            cls = "tbar bottleneck" if mark else "tbar"
            w = t * scale if math.isfinite(t) else 0.0
            shown = f"{t * 1e3:.2f} ms" if math.isfinite(t) else "\u2014"
            note = " \u25c0 bottleneck" if mark else ""
            stroke = "stroke='#d00' stroke-width='3'" if mark else "stroke='#333'"
            out.append(f"<g class='{cls}' data-replica='{r}' data-stage='{k}' data-ms='{t * 1e3:.4f}'>"
                       f"<text x='4' y='{y + 12}' class='small'>R{r + 1} S{k + 1} \u00b7 {_e(s.gpu)} \u00d7{s.tp}"
                       f" \u00b7 {s.layers} layers</text><rect x='{lw}' y='{y}' width='{w:.2f}' height='{rh - 6}'"
                       f" fill='{stage_colour(r, k)}' {stroke}><title>replica {r + 1}"
                       f" stage {k + 1}: {shown} per iteration</title></rect><text x='{lw + w + 6:.2f}' y='{y + 12}'"
                       f" class='{'b' if mark else 'small'}'>{shown}{note}</text></g>")
    return (f"<svg class='times' width='{lw + width + 190}' height='{12 + i * rh}'"
            f" xmlns='http://www.w3.org/2000/svg'>" + "".join(out) + "</svg>")


@dataclass(frozen=True)
class Series:
    """One deployment's curve: (max_num_seqs, TPOT ms, output tokens/s) points."""

    label: str
    points: Sequence[tuple[int, float, float]]


def curve_svg(series: Sequence[Series], chosen: tuple[float, float] | None, slo_tpot_ms: float | None = None,
              width: int = 640, height: int = 380) -> str:
    """Output tokens/s against TPOT (ms) for each deployment over ``max_num_seqs``; the plan's point ringed."""
    pts = [(x, y) for s in series for _, x, y in s.points]
    if chosen is not None:
        pts.append(chosen)
    pts = [(x, y) for x, y in pts if math.isfinite(x) and math.isfinite(y)]
    if not pts:
        return "<p>(no point of the curve fits)</p>"
    ml, mr, mt, mb = 70, 20, 16, 46
    xs = nice_ticks(0.0, max(x for x, _ in pts) * 1.05 or 1.0)
    ys = nice_ticks(0.0, max(y for _, y in pts) * 1.05 or 1.0)
    x1, y1 = xs[-1], ys[-1]

    def px(x: float) -> float:
        return ml + (width - ml - mr) * x / x1

    def py(y: float) -> float:
        return height - mb - (height - mt - mb) * y / y1

    out = [f"<line x1='{ml}' y1='{height - mb}' x2='{width - mr}' y2='{height - mb}' stroke='#333'/>",
           f"<line x1='{ml}' y1='{mt}' x2='{ml}' y2='{height - mb}' stroke='#333'/>"]
    for t in xs:
        out.append(f"<line x1='{px(t):.1f}' y1='{height - mb}' x2='{px(t):.1f}' y2='{height - mb + 5}' stroke='#333'/>"
                   f"<text x='{px(t):.1f}' y='{height - mb + 18}' text-anchor='middle' class='small'>{_fmt(t)}</text>")
    for t in ys:
        out.append(f"<line x1='{ml - 5}' y1='{py(t):.1f}' x2='{width - mr}' y2='{py(t):.1f}' stroke='#eee'/>"
                   f"<text x='{ml - 8}' y='{py(t) + 4:.1f}' text-anchor='end' class='small'>{_fmt(t)}</text>")
    out.append(f"<text x='{(ml + width - mr) / 2}' y='{height - 8}' text-anchor='middle'>TPOT (ms per output token)"
               f"</text><text x='14' y='{(mt + height - mb) / 2}' text-anchor='middle'"
               f" transform='rotate(-90 14 {(mt + height - mb) / 2})'>output tokens/s</text>")
    if slo_tpot_ms is not None and slo_tpot_ms <= x1:
        out.append(f"<line class='slo' x1='{px(slo_tpot_ms):.1f}' y1='{mt}' x2='{px(slo_tpot_ms):.1f}'"
                   f" y2='{height - mb}' stroke='#d22' stroke-dasharray='6 4'><title>TPOT SLO {slo_tpot_ms:g} ms"
                   f"</title></line>")
    for j, s in enumerate(series):
        col = _SERIES[j % len(_SERIES)]
        good = [(b, x, y) for b, x, y in s.points if math.isfinite(x) and math.isfinite(y)]
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for _, x, y in good)
        dots = "".join(f"<circle cx='{px(x):.1f}' cy='{py(y):.1f}' r='3' fill='{col}'><title>{_e(s.label)}:"
                       f" max_num_seqs {b}: {y:,.1f} tokens/s at TPOT {x:.2f} ms</title></circle>" for b, x, y in good)
        out.append(f"<g class='series' data-index='{j}' data-points='{len(good)}'><polyline points='{line}'"
                   f" fill='none' stroke='{col}' stroke-width='{2.5 if j == 0 else 1.5}'/>{dots}</g>")
        out.append(f"<rect x='{ml + 12}' y='{mt + 6 + 16 * j}' width='12' height='4' fill='{col}'/><text"
                   f" x='{ml + 30}' y='{mt + 12 + 16 * j}' class='small'>{_e(s.label)}</text>")
    if chosen is not None and math.isfinite(chosen[0]) and math.isfinite(chosen[1]):
        cx, cy = px(chosen[0]), py(chosen[1])
        out.append(f"<g class='chosen' data-tpot-ms='{chosen[0]:.4f}' data-tokens-per-s='{chosen[1]:.4f}'><circle"
                   f" cx='{cx:.1f}' cy='{cy:.1f}' r='8' fill='none' stroke='#d22' stroke-width='2.5'/><text"
                   f" x='{cx + 11:.1f}' y='{cy + 4:.1f}' class='b'>plan</text><title>the plan: {chosen[1]:,.1f}"
                   f" tokens/s at TPOT {chosen[0]:.2f} ms</title></g>")
    return (f"<svg class='curve' width='{width}' height='{height}' xmlns='http://www.w3.org/2000/svg'>"
            + "".join(out) + "</svg>")
