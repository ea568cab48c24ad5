"""Leave-one-out accuracy of the measured kernel tables' interpolation, per device and family.

For every interior measured point of every lattice (a point with measured neighbours on both sides along
an axis), the point is left out and priced from those two neighbours by the kernel layer's own axis rule
(:func:`dnnplace.kernels.grid.blend`: ``lin``, ``sqrt``, or ``curve-sqrt``, whose shape is rebuilt with the
point's whole slice left out); the error is |predicted - measured| /
measured.  Every axis is printed; three folds are the ones aiconfigurator's design document reports
(docs/design/perf_interp_design.md, section 4): GEMM interior along m (median 4.87 %, p90 15.6 %), prefill
("context") attention interior along batch (2.00 % / 9.7 %), and prefill attention with a whole sequence
row held out (median 3.21 % with its square-root rule; no p90 published).  Those figures come from other
tables (H100 SGLang 0.5.10 / vLLM 0.19.0, GB200 SGLang 0.5.10; 300 GEMM folds), so on the same three folds
aiconfigurator-core's own engine is also asked every point we score, with the same slice left out of the
same table (``aic_folds.py``): that column compares the two interpolators on equal terms.

Exit 0 when, on every device, each of the three folds is at least as good as aiconfigurator's engine on the
same folds (median and p90, to the printed 0.01 %); the verdict against the published figures is printed
beside it, and a miss there is a miss to report.  ``--no-aic`` skips the engine column (minutes on the
Blackwell tables); the exit status then holds the published figures.

    PYTHONPATH=src python benchmarks/kernels_loo.py [--out benchmarks/results/kernels_loo.md] [--no-aic]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import aic_folds
import numpy as np

from dnnplace.kernels.grid import Grid, blend
from dnnplace.kernels.measured import family
from dnnplace.kernels.tables import SYSTEMS

FAMILIES = ("gemm", "context_attention", "decode_attention", "collective", "moe")
CURVE = {"gemm": "m", "context_attention": "seq", "decode_attention": "kv_len", "collective": "bytes",
         "moe": "tokens"}
#: aiconfigurator's published leave-one-out figures (median, p90 or None), docs/design/perf_interp_design.md
#: section 4: "GEMM interior", "context attention interior (batch-axis blends)", "context attention seq-row
#: holdout: sqrt".
AIC = {("gemm", "m"): (4.87, 15.6), ("context_attention", "batch"): (2.00, 9.7),
       ("context_attention", "seq"): (3.21, None)}


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


def _verdict(med: float, p90: float, ref: tuple[float, float | None]) -> bool:
    """At least as good as ``ref`` (median, p90 or None), compared at the printed precision."""
    return round(med, 2) <= round(ref[0], 2) and (ref[1] is None or round(p90, 1) <= round(ref[1], 1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-aic", action="store_true", help="skip asking aiconfigurator's engine the same folds")
    args = ap.parse_args()
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    rows = []
    ok = True
    published_misses = []
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
                ref = AIC.get((name, a))
                pub = same = ""
                if ref is not None:
                    good = _verdict(med, p90, ref)
                    pub = f"{ref[0]:.2f} / {'-' if ref[1] is None else f'{ref[1]:.1f}'} " + \
                        ("(at least as good)" if good else "(**WORSE**)")
                    if not good:
                        published_misses.append(f"{system} {name} {a}")
                    if not args.no_aic and aic_folds.supported(name, a):
                        ae = aic_folds.fold_errors(fam, a) * 100
                        amed, ap90 = float(np.median(ae)), float(np.percentile(ae, 90))
                        better = _verdict(med, p90, (amed, ap90))
                        ok &= better and ae.size == e.size
                        same = f"{amed:.2f} / {ap90:.1f} ({ae.size} pts) " + \
                            ("at least as good" if better else "**WORSE**")
                    print(f"{system} {name} {a}: {med:.2f}/{p90:.1f}  published {pub}  same folds {same}",
                          file=sys.stderr, flush=True)
                axis_label = a + (" (curve)" if a == CURVE[name] else "")
                rows.append((system, name, fam.table.label, axis_label, e.size, med, p90, pub, same))
    head = ("| system | family | table | left-out axis | points | median % | p90 % | aiconfigurator published "
            "median / p90 % | aiconfigurator-core 0.12.0 engine, same folds: median / p90 % |\n"
            "|---|---|---|---|---|---|---|---|---|")
    lines = [head] + [f"| {s} | {f} | {t} | {a} | {n} | {m:.2f} | {p:.1f} | {r} | {v} |"
                      for s, f, t, a, n, m, p, r, v in rows]
    text = "\n".join(lines)
    tail = ("\n\nAgainst aiconfigurator's published figures (other tables, other folds): "
            + ("at least as good on every device." if not published_misses else
               "worse on " + "; ".join(published_misses) + "."))
    if not args.no_aic:
        tail += ("\nAgainst aiconfigurator's own engine on the same folds: "
                 + ("at least as good on every device and fold." if ok else "WORSE somewhere (rows above)."))
    else:  # nothing asked of the engine: the published figures are all there is to hold
        ok = not published_misses
    print(text + tail)
    if args.out:
        cmd = "PYTHONPATH=src python benchmarks/kernels_loo.py --out benchmarks/results/kernels_loo.md"
        args.out.write_text("# Leave-one-out interpolation error of the measured kernel tables\n\n"
                            f"`{cmd}`\n\n" + text + tail + "\n")
    print("targets: " + ("met" if ok else "MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
