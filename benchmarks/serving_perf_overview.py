"""Held-out check: TensorRT-LLM's v1.0 perf-overview dense rows, priced by the same code as the given rows.

Why: issue 43 says the same code will be checked on published serving runs it has not seen (other GPUs, PP
scaling).  ``benchmarks/serving.py`` holds the given H100 rows and the release/1.2 edition's Llama 3.3 70B
rows; the v1.0 edition of the same page measured more: Llama 3.3 70B on B200 / GB200 (TP1 FP4) and H200
(TP1 FP8, where release/1.2 ran TP2), RTX PRO 6000 at TP1 x PP1/2/4/8 over all ten length pairs (release/1.2:
four), Llama 3.1 405B on B200 / GB200 (TP4 FP4), H200 / H100 (TP8 FP8) and RTX PRO 6000 (PP8), and Llama 3.1
8B on H200.  Each row is run as published (``trtllm-bench throughput``: its requests at once, at the limits
trtllm-bench derives, :func:`~dnnplace.models.serving.catalogue.trtllm_bench_limits`, through the simulated
schedulers) and compared on total output tokens/s.  The rows (``benchmarks/data/trtllm_perf_overview_v1.json``,
transcribed from the page) are read by no test and fitted to nothing.

    PYTHONPATH=src python benchmarks/serving_perf_overview.py [--out benchmarks/results/serving_perf_overview.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from serving import MODELS, trtllm_bench_run  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "trtllm_perf_overview_v1.json"


def _config(name: str) -> Path:
    """The config.json a row's model is read from (405B: the one aiconfigurator-core ships, a pinned dependency)."""
    if name == "llama-3.1-405b":
        import aiconfigurator_core

        folder = Path(aiconfigurator_core.__file__).parent / "model_configs"
        return folder / "meta-llama--Meta-Llama-3.1-405B_config.json"
    return MODELS["70B" if name == "llama-3.3-70b" else "8B"]


def run_row(row: dict) -> tuple[float, float]:
    """(the run as published, the evaluator's steady state), total output tokens/s."""
    return trtllm_bench_run(_config(row["model"]), row)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--limit", type=int, default=0, help="price only the first N rows (a smoke run)")
    args = ap.parse_args()
    doc = json.loads(DATA.read_text())
    rows = doc["rows"][: args.limit or None]
    started = time.monotonic()
    lines = ["| model | GPU | TP x PP | weights | ISL/OSL | requests | measured tok/s | dnnplace (the run) | error | "
             "steady state | error |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    errs: dict[str, list[float]] = {}
    got = {}
    pp1: list[float] = []
    for k, row in enumerate(rows, 1):
        run, steady = run_row(row)
        err = run / row["total"] - 1
        errs.setdefault(f"{row['model']} {row['gpu']}", []).append(err)
        if row["pp"] == 1:
            pp1.append(err)
        got[(row["model"], row["gpu"], row["isl"], row["osl"], row["pp"])] = (row["total"], run)
        lines.append(f"| {row['model']} | {row['gpu']} | TP{row['tp']} x PP{row['pp']} | {row['precision']} | "
                     f"{row['isl']}/{row['osl']} | {row['requests']} | {row['total']:,} | {run:,.0f} | {err:+.1%} | "
                     f"{steady:,.0f} | {steady / row['total'] - 1:+.1%} |")
        print(f"[{k}/{len(rows)}] {lines[-1]}", file=sys.stderr, flush=True)
    every = [e for v in errs.values() for e in v]
    med = statistics.median(abs(e) for e in every)
    within = sum(abs(e) <= 0.15 for e in every) / len(every)
    summary = ["", "| model, GPU | rows | median |error| | signed median | within 15 % |", "|---|---|---|---|---|"]
    for key, v in errs.items():
        summary.append(f"| {key} | {len(v)} | {statistics.median(abs(e) for e in v):.1%} | "
                       f"{statistics.median(v):+.1%} | {sum(abs(e) <= 0.15 for e in v) / len(v):.0%} |")
    # the PP degree each length pair runs best at on RTX PRO 6000 (Llama 3.3 70B), measured vs predicted
    pairs = sorted({(i, o) for (mo, g, i, o, _) in got if mo == "llama-3.3-70b" and g == "rtx-pro-6000"})
    rank, right = ["", "PP degrees of Llama 3.3 70B on RTX PRO 6000, best first (total tokens/s):", "",
                   "| ISL/OSL | measured | predicted | best PP |", "|---|---|---|---|"], 0
    for i, o in pairs:
        pps = {pp: v for (mo, g, ii, oo, pp), v in got.items()
               if mo == "llama-3.3-70b" and g == "rtx-pro-6000" and (ii, oo) == (i, o)}
        best_m, best_p = max(pps, key=lambda x: pps[x][0]), max(pps, key=lambda x: pps[x][1])
        right += best_m == best_p
        order = [" > ".join(f"PP{x}" for x in sorted(pps, key=lambda x, j=j: -pps[x][j])) for j in (0, 1)]
        rank.append(f"| {i}/{o} | {order[0]} | {order[1]} | {'same' if best_m == best_p else 'WRONG'} |")
    head = [f"{len(every)} rows, the run as published: median |error| {med:.1%}, within 15 %: {within:.0%} "
            f"(issue 43's targets for the given rows: 6 % and 90 %; held out here); without PP: {len(pp1)} rows, "
            f"median {statistics.median(abs(e) for e in pp1):.1%}, within 15 %: "
            f"{sum(abs(e) <= 0.15 for e in pp1) / len(pp1):.0%}; best PP degree right on {right} of {len(pairs)} "
            "length pairs.", f"Wall time {time.monotonic() - started:.0f} s."]
    text = "\n".join([*head, "", *lines, *summary, *rank, "", f"Source: {doc['source'].rstrip('.')}.",
                      f"How: {doc['how'].rstrip('.')}."])
    print(text)
    if args.out:
        cmd = ("PYTHONPATH=src python benchmarks/serving_perf_overview.py "
               "--out benchmarks/results/serving_perf_overview.md")
        args.out.write_text(f"# Held out: TensorRT-LLM v1.0 perf-overview, dense models\n\n`{cmd}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
