"""Leave-one-out accuracy of the measured kernel tables' interpolation, per device and family.

For every interior measured point of every lattice (a point with measured neighbours on both sides along
an axis), the point is left out and priced from those two neighbours by the kernel layer's own axis rule
(:func:`dnnplace.kernels.grid.blend`: ``lin``, ``sqrt``, or ``curve-sqrt``, whose shape is rebuilt with the
point's whole slice left out); the error is |predicted - measured| /
measured.  The curve axis of each family (GEMM m, prefill sequence, decode KV length, collective bytes,
MoE tokens) is the fold aiconfigurator's own design document reports (docs/design/perf_interp_design.md:
GEMM interior median 4.87 %, p90 15.6 %; context attention interior 2.00 % / 9.7 %); the other axes are
printed beside it.  Exit 0 when, on every device, the GEMM curve-axis median and p90 are at least as good
as aiconfigurator's published GEMM figures.

    PYTHONPATH=src python benchmarks/kernels_loo.py [--out benchmarks/results/kernels_loo.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from dnnplace.kernels.grid import Grid, blend
from dnnplace.kernels.measured import family
from dnnplace.kernels.tables import SYSTEMS

FAMILIES = ("gemm", "context_attention", "decode_attention", "collective", "moe")
CURVE = {"gemm": "m", "context_attention": "seq", "decode_attention": "kv_len", "collective": "bytes",
         "moe": "tokens"}
#: aiconfigurator's published leave-one-out figures (median, p90), docs/design/perf_interp_design.md.
AIC = {"gemm": (4.87, 15.6), "context_attention": (2.00, 9.7)}


def axis_errors(grid: Grid, j: int) -> np.ndarray:
    """Relative errors of predicting each interior point along axis ``j`` with it left out, by the layer's
    own axis rule (:func:`dnnplace.kernels.grid.blend`) between its two neighbours.  On a ``curve-sqrt``
    axis, whose blend follows a curve shape drawn from the whole lattice, the point's whole slice (that
    sequence length in every row) is left out and the shape rebuilt without it."""
    v = np.moveaxis(grid.values, j, -1)
    x = grid.axes[j].astype(float)
    lo, mid, hi = v[..., :-2], v[..., 1:-1], v[..., 2:]
    t = (x[1:-1] - x[:-2]) / (x[2:] - x[:-2])
    if grid.scale[j] == "curve-sqrt":
        pred = np.empty_like(mid)
        for i in range(1, len(x) - 1):
            keep = np.r_[0:i, i + 1:len(x)]
            without = Grid([*grid.axes[:j], x[keep], *grid.axes[j + 1:]], np.take(grid.values, keep, axis=j),
                           grid.scale)
            tau = without.warp(j, np.array([i - 1]), np.array([t[i - 1]]))[0]
            pred[..., i - 1] = blend(lo[..., i - 1], hi[..., i - 1], np.asarray(tau), "sqrt")
    else:
        pred = blend(lo, hi, t, grid.scale[j])
    ok = np.isfinite(lo) & np.isfinite(mid) & np.isfinite(hi) & (mid > 0)
    return np.abs(pred[ok] - mid[ok]) / mid[ok]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    ok = True
    for system in sorted(set(SYSTEMS.values())):
        for name in FAMILIES:
            fam = family(system, name)
            if fam is None:
                continue
            per_axis: dict[str, list[np.ndarray]] = {}
            for grid in fam.grids.values():
                for j, (a, ax) in enumerate(zip(fam.axes, grid.axes)):
                    if len(ax) >= 3:
                        per_axis.setdefault(a, []).append(axis_errors(grid, j))
            for a, errs in per_axis.items():
                e = np.concatenate(errs) * 100 if errs else np.array([])
                if not e.size:
                    continue
                med, p90 = float(np.median(e)), float(np.percentile(e, 90))
                ref = AIC.get(name) if a == CURVE[name] else None
                verdict = ""
                if ref is not None:
                    good = med <= ref[0] and p90 <= ref[1]
                    verdict = "at least as good" if good else "WORSE"
                    if name == "gemm" and not good:
                        ok = False
                rows.append((system, name, f"{fam.table[2]} {fam.table[3]}", a + (" (curve)" if a == CURVE[name]
                                                                                     else ""),
                             e.size, med, p90, "" if ref is None else f"{ref[0]:.2f} / {ref[1]:.1f}", verdict))
    head = ("| system | family | table | left-out axis | points | median % | p90 % | aiconfigurator median / p90 % "
            "| |\n|---|---|---|---|---|---|---|---|---|")
    lines = [head] + [f"| {s} | {f} | {t} | {a} | {n} | {m:.2f} | {p:.1f} | {r} | {v} |"
                      for s, f, t, a, n, m, p, r, v in rows]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text("# Leave-one-out interpolation error of the measured kernel tables\n\n"
                            "`PYTHONPATH=src python benchmarks/kernels_loo.py --out benchmarks/results/kernels_loo.md`"
                            "\n\n" + text + "\n")
    print("targets: " + ("met" if ok else "MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
