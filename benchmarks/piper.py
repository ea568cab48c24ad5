"""Our exact Piper planner against Piper's own figures (``data/piper/reference.json``).

Prints one row per reference configuration, the BERT-64 rows and the toys: Piper's
time per sample and CPU seconds, ours (CPU seconds, as Piper's were measured, and wall
seconds), the ratios, and whether ours is proven optimal.  Exit status 1 if a row is
worse than Piper's, not infeasible where Piper's is, or off the toys' optimum.
Run: ``python benchmarks/piper.py [--markdown] [--only SUBSTRING] [--repeat R]``.
Runtimes exclude loading the compiled kernels (``warm_up``), like ``solve``'s.  Each
instance is solved ``--repeat`` times in this process (default 5; at most 3 for rows over 1 s)
and the smallest CPU and wall times are reported, so that a figure is the planner's
cost rather than the load of a shared machine; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from dnnplace.errors import InfeasibleError
from dnnplace.models.piper.piper_json import bert_l, load_piper
from dnnplace.models.piper.solvers.solver import solve_piper, warm_up

DATA = Path(__file__).resolve().parents[1] / "src" / "dnnplace" / "data" / "piper"


def solve_once(inst) -> tuple:
    t0 = time.perf_counter()
    c0 = time.process_time()
    try:
        res = solve_piper(inst)
        out = (res.tps, res.status, len(res.plan.stages))
    except InfeasibleError:
        out = (None, "infeasible (proven)", 0)
    return out, time.process_time() - c0, time.perf_counter() - t0  # CPU seconds, like Piper's figures


def run(label: str, inst, piper_tps, piper_s, exact=None, repeat: int = 5) -> dict:
    (tps, status, stages), secs, wall = solve_once(inst)
    for _ in range((repeat if secs < 1.0 else min(repeat, 3)) - 1):
        again, s2, w2 = solve_once(inst)
        assert again == (tps, status, stages), "the planner is deterministic"
        secs, wall = min(secs, s2), min(wall, w2)
    row = {"instance": label, "piper_tps": piper_tps, "piper_s": piper_s, "tps": tps, "seconds": secs, "wall": wall,
           "status": status, "stages": stages, "exact_optimum": exact}
    if piper_tps is None:
        row["ok"] = tps is None
    else:
        row["ok"] = tps is not None and tps <= piper_tps * (1 + 1e-9)
    if exact is not None:
        row["ok"] = tps is not None and abs(tps - exact) <= 1e-9 * exact
    row["tps_ratio"] = None if (tps is None or piper_tps is None) else tps / piper_tps
    row["speedup"] = None if piper_s is None else piper_s / secs
    return row


def rows(only: str | None, repeat: int = 5) -> list[dict]:
    ref = json.loads((DATA / "reference.json").read_text())
    out = []
    gib = 2**30
    bw = 25 * gib
    cache = {}

    def base(name):
        if name not in cache:
            cache[name] = load_piper(DATA / name)
        return cache[name]

    jobs = []
    for c in ref["configs"]:
        name = Path(c["input"]).stem
        label = f"{name} k={c['devices']} mem={c['memory_gib']}GiB"
        jobs.append((label, lambda c=c: base(c["input"]).with_overrides(
            devices=c["devices"], memory=c["memory_gib"] * gib, bandwidth=c["bandwidth"], batch=c["batch"]),
            c["piper_tps"], c["piper_seconds"], None))
    for c in ref["bert64"]:
        label = f"bert64 k={c['devices']} mem={c['memory_gib']}GiB"
        jobs.append((label, lambda c=c: bert_l(base("inputs/bert32a100.json"), 64).with_overrides(
            devices=c["devices"], memory=c["memory_gib"] * gib, bandwidth=bw), c["piper_tps"], c["piper_seconds"],
            None))
    for c in ref["toys"]:
        label = Path(c["input"]).stem
        jobs.append((label, lambda c=c: base(c["input"]), c["piper_tps"], None, c["exact_optimum"]))
    for label, make, ptps, psec, exact in jobs:
        if only and only not in label:
            continue
        out.append(run(label, make(), ptps, psec, exact, repeat))
    return out


def fmt(x, spec=".10g"):
    return "infeasible" if x is None else format(x, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    ap.add_argument("--only", default=None, help="only rows whose label contains this")
    ap.add_argument("--repeat", type=int, default=5, help="solves per row (at most 3 over 1 s); the minimum is shown")
    args = ap.parse_args()
    warm_up()
    load0 = os.getloadavg()
    res = rows(args.only, max(1, args.repeat))
    load1 = os.getloadavg()
    hdr = ["instance", "Piper tps", "Piper CPU s", "ours tps", "ours CPU s", "ours wall s", "tps ours/Piper",
           "speedup (CPU)", "proven optimal", "ok"]
    lines = []
    for r in res:
        lines.append([
            r["instance"], fmt(r["piper_tps"]), "-" if r["piper_s"] is None else f"{r['piper_s']:g}",
            fmt(r["tps"]) + (f" (exact {r['exact_optimum']:g})" if r["exact_optimum"] is not None else ""),
            f"{r['seconds']:.3f}", f"{r['wall']:.3f}", "-" if r["tps_ratio"] is None else f"{r['tps_ratio']:.12f}",
            "-" if r["speedup"] is None else f"{r['speedup']:.1f}x",
            "yes" if r["status"].startswith(("optimal", "infeasible")) else "no", "yes" if r["ok"] else "NO"])
    if args.markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---|" * len(hdr))
        for ln in lines:
            print("| " + " | ".join(ln) + " |")
    else:
        widths = [max(len(h), *(len(ln[i]) for ln in lines)) for i, h in enumerate(hdr)]
        print("  ".join(h.ljust(w) for h, w in zip(hdr, widths)))
        for ln in lines:
            print("  ".join(c.ljust(w) for c, w in zip(ln, widths)))
    print(f"\nmin of {max(1, args.repeat)} solves per row (at most 3 over 1 s); load average (1, 5, 15 min) "
          f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} before, {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} after "
          f"on {os.cpu_count()} cores")
    return 0 if all(r["ok"] for r in res) else 1


if __name__ == "__main__":
    sys.exit(main())
