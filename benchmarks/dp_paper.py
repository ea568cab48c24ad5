"""Benchmark the DP on every paper throughput workload against the reference C++.

Prints, per workload: ideals (reference lattice and dnnplace's after its exact
reduction), ideal pairs (reference) and pairs the kernel examined, runtime_s
(in-process, reading the workload to the split), the whole `dnnplace solve`
command's wall time, peak memory, and the speed-up over the reference seconds.

    python benchmarks/dp_paper.py [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dnnplace

PAPER = Path(dnnplace.__file__).parent / "data" / "paper"
REF = json.loads((PAPER / "reference.json").read_text())
REF_NOTE = {"LayerGraphs/inceptionv3_inference": "OOM after 23 min",
            "LayerGraphs/inceptionv3_training": "> 15 min"}


def one(key: str) -> dict:
    """Solve one workload in this process; report timings and peak memory."""
    from dnnplace.models.paper.solvers.dp.ideals import enumerate_ideals
    from dnnplace.models.paper.solvers.dp.kernel import warm_up
    from dnnplace.models.paper.solvers.prepare import prepare

    warm_up()
    path = PAPER / "throughput-inputs" / f"{key}.json"
    t0 = time.perf_counter()
    w = dnnplace.load_workload(path)
    read_s = time.perf_counter() - t0
    sol = dnnplace.solve(w, "dp")
    ref_ideals = enumerate_ideals(prepare(w), 10**6).n_ideals
    return {
        "key": key, "value": sol.value, "runtime_s": sol.runtime_s + read_s, "ideals": sol.stats["ideals"],
        "ref_ideals": ref_ideals, "pairs": sol.stats.get("pairs_examined", -1),  # -1: the DP stopped early
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def cli_wall(key: str) -> tuple[float, float]:
    """Wall time of the whole `dnnplace solve` command and the runtime_s it wrote."""
    path = PAPER / "throughput-inputs" / f"{key}.json"
    exe = Path(sys.executable).with_name("dnnplace")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "split.json"
        t = time.perf_counter()
        subprocess.run([str(exe), "solve", str(path), "-q", "-o", str(out)], check=True)
        wall = time.perf_counter() - t
        return wall, json.loads(out.read_text())["runtime_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="run workloads whose name contains this")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    from rich.console import Console
    from rich.table import Table

    keys = sorted(p.relative_to(PAPER / "throughput-inputs").with_suffix("").as_posix()
                  for p in (PAPER / "throughput-inputs").glob("*/*.json"))
    keys = [k for k in keys if args.only in k]
    table = Table(title="dnnplace DP vs the paper's reference DP (one process, this machine)")
    for col in ("workload", "max-load", "ref max-load", "ideals (ref / ours)", "ref pairs", "pairs examined",
                "ref s", "runtime_s", "speed-up", "cmd wall s", "cmd - runtime_s", "peak MB"):
        table.add_column(col, justify="left" if col == "workload" else "right")
    failures = []
    for key in keys:
        res = json.loads(subprocess.run([sys.executable, __file__, "--one", key], check=True,
                                        capture_output=True, text=True, env=os.environ).stdout)
        wall, rt = cli_wall(key)
        ref_s = REF["dp_seconds"].get(key)
        ref_v = REF["dp_maxload"].get(key)
        ideals_ref, pairs_ref = REF["dp_ideals_and_pairs"][key]
        speed = f"{ref_s / res['runtime_s']:.0f}x" if ref_s else "-"
        if ref_s and ref_s >= 3 and ref_s / res["runtime_s"] < 20:
            failures.append(f"{key}: speed-up {ref_s / res['runtime_s']:.1f}x < 20x")
        if wall - rt > 1.5:
            failures.append(f"{key}: command overhead {wall - rt:.2f} s > 1.5 s")
        if "inception" in key and (res["runtime_s"] > 60 or res["peak_mb"] > 2048):
            failures.append(f"{key}: {res['runtime_s']:.1f} s / {res['peak_mb']:.0f} MB")
        ref_text = f"{ref_v:.6f}" if ref_v else f"<= {REF['linearized_maxload'][key]} (lin.)"
        table.add_row(key, f"{res['value']:.6f}", ref_text, f"{ideals_ref:,} / {res['ideals']:,}",
                      f"{pairs_ref:,}", f"{res['pairs']:,}", REF_NOTE.get(key, f"{ref_s:.2f}" if ref_s is not None
                                                                         else "-"),
                      f"{res['runtime_s']:.3f}", speed if key not in REF_NOTE else "exact now",
                      f"{wall:.2f}", f"{wall - rt:.2f}", f"{res['peak_mb']:.0f}")
    Console(width=200).print(table)
    if failures:
        print("targets missed:\n  " + "\n  ".join(failures))
    else:
        print("all targets met: >= 20x where the reference takes >= 3 s, command overhead <= 1.5 s,"
              " InceptionV3 < 60 s and < 2 GB")


if __name__ == "__main__":
    main()
