"""Benchmark the integer programs (HiGHS) on the paper's workloads.

Throughput: all layer graphs and the BERT-3/6 and ResNet-50 operator graphs,
contiguous IP (warm-started with the DP split) beside the DP optimum.
Latency: every latency workload, latency IP (q = 1) beside the reference
greedy latency.  Each run has a time limit (default 60 s).

    python benchmarks/ip_paper.py [--time-limit 60] [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import dnnplace

PAPER = Path(dnnplace.__file__).parent / "data" / "paper"
REF = json.loads((PAPER / "reference.json").read_text())
THROUGHPUT = [f"LayerGraphs/{m}_{t}" for m in ("bert24", "gnmt", "inceptionv3", "resnet50")
              for t in ("inference", "training")] + \
             [f"OperatorGraphs/{m}_{t}" for m in ("bert_l-3", "bert_l-6", "resnet50")
              for t in ("inference", "training")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    console = Console(width=180)
    table = Table(title=f"Integer programs on HiGHS ({args.time_limit:g} s limit each)")
    for col in ("workload", "objective", "IP value", "bound", "gap", "status", "seconds", "beside it", "IP / it"):
        table.add_column(col, justify="left" if col in ("workload", "objective", "status") else "right")
    misses = []
    for key in THROUGHPUT:
        if args.only not in key:
            continue
        w = dnnplace.load_workload(PAPER / "throughput-inputs" / f"{key}.json")
        dp = dnnplace.solve(w, "dp")
        sol = dnnplace.solve(w, "ip", time_limit=args.time_limit)
        ratio = sol.value / dp.value
        if dp.runtime_s < 1.0 and ratio > 1.01:
            misses.append(f"{key}: IP {sol.value:.6g} vs DP {dp.value:.6g}")
        table.add_row(key, "max-load", f"{sol.value:.6g}", f"{sol.bound:.6g}" if sol.bound is not None else "-",
                      f"{100 * sol.gap:.1f}%" if sol.gap is not None else "-", sol.status, f"{sol.runtime_s:.1f}",
                      f"DP {dp.value:.6g}", f"{ratio:.4f}")
        console.print(f"done {key}", style="dim")
    for key, greedy in sorted(REF["greedy_latency"].items()):
        if args.only not in key:
            continue
        w = dnnplace.load_workload(PAPER / "latency-inputs" / f"{key}.json")
        sol = dnnplace.solve(w, "ip", objective="latency", time_limit=args.time_limit)
        if sol.value > greedy + 1e-6:
            misses.append(f"{key}: latency IP {sol.value:.6g} vs greedy {greedy:.6g}")
        table.add_row(key, "latency", f"{sol.value:.6g}", f"{sol.bound:.6g}" if sol.bound is not None else "-",
                      f"{100 * sol.gap:.1f}%" if sol.gap is not None else "-", sol.status, f"{sol.runtime_s:.1f}",
                      f"greedy {greedy:.6g}", f"{sol.value / greedy:.4f}")
        console.print(f"done {key}", style="dim")
    console.print(table)
    print("targets missed:\n  " + "\n  ".join(misses) if misses else
          "all targets met: contiguous IP within 1% of the DP where the DP takes < 1 s;"
          " latency IP at or below the reference greedy latency")


if __name__ == "__main__":
    main()
