"""TTFT and TPOT under load for mixture-of-experts models: dnnplace against aiconfigurator-core's silicon sample.

Why a second file: ``serving_load.py`` holds the dense rows that issue 43's latency target was first read on;
these are the sample's MoE rows the serving model could not read before (MiniMax-M2.5, GPT-OSS-120B,
Qwen3-235B-A22B-FP8: ``arch/moe_config.py``) or price as run (expert parallelism, block-scaled FP8 MoE,
GPT-OSS's MXFP4 on Hopper).  Every aggregated, single-stage, not-``wip`` row of those models on a GPU with a
measured table is priced whose MoE layout is one of the two the serving model has: the experts sharded over
the TP group (``moe_tp`` = TP, the engines' default) or split whole over it (``moe_ep`` = TP, expert
parallelism); rows with attention data parallelism or a mixed moe_tp x moe_ep are left out (not priced).
Each row is simulated as ``serving_load.py`` simulates its fixed-length rows (C clients, ``FIXED_ROUNDS`` x C
requests of the row's ISL/OSL, as aiconfigurator's generated benchmark sends them; the rows' client is not
stated) at the engine's default limits (``max_num_seqs`` at
least C).  Checkpoints: the config each model ships in the same wheel, NVIDIA's NVFP4 export for the
MiniMax-M2.5 rows measured at nvfp4.  Nothing here is fitted: the rows are checks.

    PYTHONPATH=src python benchmarks/serving_load_moe.py   # writes benchmarks/results/serving_load_moe.md
"""

from __future__ import annotations

import csv
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import serving_load as dense  # noqa: E402

from dnnplace.models.serving.evaluation import evaluate  # noqa: E402
from dnnplace.models.serving.load import problem  # noqa: E402
from dnnplace.models.serving.simulator import simulate  # noqa: E402
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage  # noqa: E402

CONFIGS = {"Qwen/Qwen3-235B-A22B-FP8": "Qwen--Qwen3-235B-A22B-FP8",
           "MiniMaxAI/MiniMax-M2.5": "MiniMaxAI--MiniMax-M2.5", "openai/gpt-oss-120b": "openai--gpt-oss-120b"}
#: the checkpoint a row's weights name where the model's own config is another (NVIDIA's NVFP4 export)
NVFP4_CONFIGS = {"MiniMaxAI/MiniMax-M2.5": "nvidia--MiniMax-M2.5-NVFP4"}
PRECISIONS = {"fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4"}


def rows(pkg: Path) -> list[dict[str, str]]:
    with open(pkg / "systems" / "silicon_sample.csv", newline="") as fh:
        every = list(csv.DictReader(fh))
    return [r for r in every if r["mode"] == "agg" and r["model_path"] in CONFIGS and r["system"] in dense.GPUS
            and r["pp_size"] == "1" and r.get("attention_dp_size", "") in ("", "0", "1")
            and r["gemm_quant_mode"] in PRECISIONS and "wip=True" not in r["silicon_data_source"]]


def layout(r: dict[str, str]) -> bool | None:
    """Expert parallelism of a row (False: experts sharded over TP; True: whole over it), None if neither."""
    tp = int(r["tp_size"])
    mtp, mep = int(r["moe_tp_size"] or tp), int(r["moe_ep_size"] or 1)
    if mtp == tp and mep == 1:
        return False
    if mtp == 1 and mep == tp:
        return tp > 1
    return None


def predict(pkg: Path, r: dict[str, str]) -> tuple[float, float, float] | str:
    """(simulated TTFT ms, TPOT ms, steady-state TPOT ms) of one row, or why it is not priced."""
    ep = layout(r)
    if ep is None:
        return "moe_tp x moe_ep layout not modelled"
    tp, c, isl, osl = int(r["tp_size"]), int(r["batch_size"]), int(r["isl"]), int(r["osl"])
    engine, gpu, prec = r["backend"], dense.GPUS[r["system"]], PRECISIONS[r["gemm_quant_mode"]]
    name = CONFIGS[r["model_path"]]
    if prec == "fp4":
        name = NVFP4_CONFIGS.get(r["model_path"], name)
    kv = "fp8" if engine == "trtllm" and prec != "bf16" else "bf16"
    try:
        p = problem(pkg / "model_configs" / f"{name}_config.json", gpus=f"{tp}x{gpu}", concurrency=c, engine=engine,
                    precision=prec, kv_dtype=kv, max_model_len=isl + osl, isl=isl, osl=osl)
    except Exception as exc:  # noqa: BLE001 - the row is reported with the reason
        return f"{type(exc).__name__}: {exc}"
    cfg = ServingConfig((Replica((Stage(gpu, 0, tuple(range(tp)), p.model.num_layers),)),),
                        max(c, p.engine.max_num_seqs), p.engine.max_num_batched_tokens, ep)
    ev = evaluate(p, cfg)
    if not ev.fits:
        return f"does not fit: {ev.why}"
    sim = simulate(p, cfg, concurrency=c, requests=dense.FIXED_ROUNDS * c, time_limit=120.0)
    if sim.ttft_ms["mean"] is None or sim.tpot_ms["mean"] is None:
        return "no request completed"
    return sim.ttft_ms["mean"], sim.tpot_ms["mean"], ev.tpot_ms


def main() -> int:
    pkg = dense._package()
    if pkg is None:
        print("aiconfigurator_core is not installed (make setup installs it)")
        return 2
    t0 = time.time()
    todo = rows(pkg)
    skipped: dict[str, int] = defaultdict(int)
    groups: dict[tuple[str, ...], list[tuple[float, float, float]]] = defaultdict(list)
    table = ["| model | engine | system | weights | TP | EP | ISL/OSL | C | TTFT meas ms | sim | err | TPOT meas ms "
             "| sim | err | steady TPOT err |", "|---" * 15 + "|"]
    for k, r in enumerate(todo):
        out = predict(pkg, r)
        if isinstance(out, str):
            skipped[out.split(":")[0] if out.startswith("does not fit") else out[:90]] += 1
            continue
        mt, mp = float(r["silicon_ttft_ms"]), float(r["silicon_tpot_ms"])
        e = (out[0] / mt - 1, out[1] / mp - 1, out[2] / mp - 1)
        ep = "on" if layout(r) else "off"
        key = (r["model_path"], r["backend"], r["system"], PRECISIONS[r["gemm_quant_mode"]], r["tp_size"], ep)
        groups[key].append(e)
        table.append(f"| {r['model_path']} | {r['backend']} | {r['system']} | {PRECISIONS[r['gemm_quant_mode']]} | "
                     f"{r['tp_size']} | {ep} | {r['isl']}/{r['osl']} | {r['batch_size']} | {mt:.1f} | {out[0]:.1f} | "
                     f"{e[0]:+.0%} | {mp:.2f} | {out[1]:.2f} | {e[1]:+.0%} | {e[2]:+.0%} |")
        if (k + 1) % 100 == 0:
            print(f"{k + 1}/{len(todo)} rows, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    every = [e for v in groups.values() for e in v]

    def med(v: list[float]) -> float:
        return statistics.median(abs(x) for x in v) if v else float("nan")

    summary = ["| model | engine | system | weights | TP | EP | rows | TTFT signed median | TPOT signed median |",
               "|---|---|---|---|---|---|---|---|---|"]
    for key, v in sorted(groups.items()):
        summary.append("| " + " | ".join(key) + f" | {len(v)} | {statistics.median(x[0] for x in v):+.0%} | "
                       f"{statistics.median(x[1] for x in v):+.0%} |")
    lines = ["# Serving under load, mixture-of-experts rows: TTFT and TPOT against aiconfigurator-core's silicon "
             "sample", "",
             "`PYTHONPATH=src python benchmarks/serving_load_moe.py` (module docstring: which rows, which settings).",
             "", f"{len(every)} rows priced ({sum(skipped.values())} not: "
             + ("; ".join(f"{v} x {k}" for k, v in sorted(skipped.items())) or "none") + ").", "",
             f"Closed-loop simulation: TTFT median |error| {med([e[0] for e in every]):.1%}, TPOT "
             f"{med([e[1] for e in every]):.1%}; evaluator steady-state TPOT {med([e[2] for e in every]):.1%} "
             f"(issue 43's target for latency under load, 15 % median: TTFT "
             f"{'met' if med([e[0] for e in every]) <= dense.TARGET else 'MISSED'}, TPOT "
             f"{'met' if med([e[1] for e in every]) <= dense.TARGET else 'MISSED'}).", "",
             f"Wall time {time.time() - t0:.0f} s.", "", "## By model, engine, GPU and layout", "", *summary, "",
             "## Rows", "", *table]
    (ROOT / "benchmarks" / "results" / "serving_load_moe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:8 + len(summary) + 4]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
