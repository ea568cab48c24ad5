"""Measured vs predicted for every given serving row (../shared/serving/measured_given.json) and every row the
project collected (tests/data/serving/published_rows.json).

Why: the serving model's constants come from datasheets, kernel tables and engine sources; these
published rows check it and are never fitted to.  Each row runs with the settings its engine ran
(trtllm-bench's FP8 KV cache and batch limits, vLLM v0.5.3's block size and memory fraction), and
aiconfigurator's own prediction stands beside ours where it can express the row.  Each offline row is
predicted as it was run: its ``num_requests`` sent at once through the engine's scheduler
(``simulate(..., offline=True)``, what ``dnnplace simulate PLAN --offline --requests N`` prints); the
evaluator's steady-state rate is printed beside it.  Every other row of the file (another engine, GPU or
model, a request rate or a client concurrency) is read and priced by ``published_rows.py``, or listed with
the reason it is not.  Writes benchmarks/results/serving.md (``--given FILE``: another file of the same
schema, whose report goes to stdout only); exits 0 only when every target line says "met".

    PYTHONPATH=src python benchmarks/serving.py [--given FILE]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dnnplace.errors import DnnplaceError  # noqa: E402
from dnnplace.models.serving.catalogue import VLLM_2024  # noqa: E402
from dnnplace.models.serving.cost import Iteration, layer_times  # noqa: E402
from dnnplace.models.serving.evaluation import evaluate, iteration  # noqa: E402
from dnnplace.models.serving.load import problem  # noqa: E402
from dnnplace.models.serving.simulator import simulate  # noqa: E402
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from published_rows import price, read_row, trtllm_bench_config  # noqa: E402

GIVEN = ROOT.parent / "shared" / "serving" / "measured_given.json"
#: Published rows the project collected itself (same schema, each with its source), priced beside the given ones.
COLLECTED = ROOT / "tests" / "data" / "serving" / "published_rows.json"
MODELS = {"70B": ROOT / "tests" / "data" / "serving" / "llama3-70b.json",
          "8B": ROOT / "examples" / "llm" / "llama3.1-8b.json"}
AIC_MODELS = {"70B": "nvidia/Llama-3.1-70B-Instruct-FP8", "8B": "meta-llama/Meta-Llama-3.1-8B"}


def trtllm_row(row: dict) -> tuple[float, float, float, float] | None:
    """(our output tokens/s for the run as published, the steady-state rate, steady batch, iteration prefill
    tokens) of a TensorRT-LLM offline row."""
    read = read_row(row)
    if isinstance(read, str) or read.model not in MODELS.values() or (
            read.engine, read.gpu, read.pp, read.precision, read.load, read.quantity, read.scale) != (
            "trtllm", "h100", 1, "fp8", "offline", "output_tokens_per_s", 1.0):
        return None  # every other row: other_rows
    try:
        return _trtllm_run(read, "70B" if read.model == MODELS["70B"] else "8B")
    except DnnplaceError:  # a layout the engine refuses (TP not dividing the heads, ...): other_rows says why
        return None


def _trtllm_run(read: Any, size: str) -> tuple[float, float, float, float]:
    tp, isl, osl = read.tp, read.isl, read.osl
    # FP8 checkpoints run with an FP8 KV cache: trtllm-bench build forces it for FP8 (bench/build/build.py),
    # the PyTorch flow takes the ModelOpt checkpoint's kv_cache_quant_algo FP8 (bench/benchmark/utils/general.py)
    p = problem(MODELS[size], gpus=f"{tp}xh100", isl=isl, osl=osl, engine="trtllm", precision="fp8",
                kv_dtype="fp8", max_model_len=isl + osl)  # trtllm-bench: max_seq_len from the dataset
    # the engine flow's build heuristic runs at 0.95 (bench/build/build.py); the PyTorch flow passes
    # --kv_cache_free_gpu_mem_fraction, default 0.90 (bench/benchmark/throughput.py): ReadRow.kv_fraction
    cfg = trtllm_bench_config(p, "h100", tp, 1, isl, osl, read.kv_fraction)
    tok = cfg.max_num_batched_tokens
    ev = evaluate(p, cfg)
    r = ev.replicas[0]
    it = iteration(p, r.concurrency, tok)
    run = simulate(p, cfg, offline=True, requests=read.requests, time_limit=300.0)
    return run.output_tokens_per_s, ev.output_tokens_per_s, r.concurrency, it.prefill


_AIC: dict[tuple[str, int], Any] = {}


def aiconfigurator(row: dict, batch: float, prefill: float) -> tuple[float | None, str]:
    """aiconfigurator-core's step latency for the same iteration (same batch and prompt tokens per step,
    TRT-LLM, h100_sxm, FP8 GEMM and KV): output tokens/s = batch / step; or why it could not run."""
    try:
        logging.disable(logging.WARNING)
        from aiconfigurator_core.sdk.engine import EngineHandle
    except ImportError as exc:  # pragma: no cover - the venv has it
        return None, f"aiconfigurator_core not importable: {exc}"
    size = "70B" if "70B" in row["model"] else "8B"
    key = (size, int(row["tp"]))
    try:
        if key not in _AIC:
            _AIC[key] = EngineHandle.compile(AIC_MODELS[size], "h100_sxm", "trtllm", tp_size=key[1],
                                             gemm_quant_mode="fp8", kvcache_quant_mode="fp8")
        ms = _AIC[key].mixed_step_latency(int(round(prefill)), int(round(batch)), int(row["isl"]), int(row["osl"]))
    except Exception as exc:  # noqa: BLE001 - report the library's own reason in the table
        return None, f"{type(exc).__name__}: {str(exc)[:120]}"
    return (batch / (ms / 1e3) if ms > 0 else None), ""


def _pipe(gpu: str, parts: list[int]) -> Replica:
    return Replica(tuple(Stage(gpu, 0, (i,), n) for i, n in enumerate(parts)))


def pr6920() -> tuple[list[str], dict[str, bool]]:
    """vLLM PR #6920: blocks of the even split and of the PR's strategy, and the ratio of their rates."""
    from dnnplace.models.serving.search import search

    p = replace(problem(MODELS["70B"], gpus="8xl4", precision="fp8", isl=512, osl=128), engine=VLLM_2024,
                max_model_len=8192)
    # less_layer_in_first_last_partition(80, 8): first/last take 10 - (8 - 2) // 2, the middle 10 + 1
    splits = {"even": [10] * 8, "PR strategy": [7] + [11] * 6 + [7]}
    ev = {k: evaluate(p, ServingConfig((_pipe("l4", v),), 256, 8192)) for k, v in splits.items()}
    plan = search(p, tp=1, pp=8, max_num_seqs=256, max_num_batched_tokens=8192)
    ev["planner"] = evaluate(p, plan.config)
    splits["planner"] = list(plan.config.replicas[0].partition())
    blocks = {k: e.replicas[0].kv_tokens / p.block for k, e in ev.items()}
    rate = {k: e.output_tokens_per_s for k, e in ev.items()}
    lines = ["| split | layers | KV blocks predicted | measured | rate vs even (pred) | measured |",
             "|---|---|---|---|---|---|"]
    meas = {"even": (1476, 1.0), "PR strategy": (3078, 244.53 / 167.68)}
    for k in splits:
        mb, mr = meas.get(k, (None, None))
        lines.append(f"| {k} | {'/'.join(map(str, splits[k]))} | {blocks[k]:.0f} | {mb or '-'} | "
                     f"{rate[k] / rate['even']:.2f}x | {f'{mr:.2f}x' if mr else '-'} |")
    ok = {"#6920 even-split blocks within 15 % of 1,476": abs(blocks["even"] / 1476 - 1) <= 0.15,
          "#6920 planner split >= 3,078 blocks": blocks["planner"] >= 3078,
          "#6920 planner split >= 1.3x the even split's rate": rate["planner"] >= 1.3 * rate["even"]}
    lines += ["", "Workload not printed in the PR (0.02 % of CNN/DailyMail): priced at ISL 512 / OSL 128.",
              "aiconfigurator: cannot express a PP layer split or an L4 PP8 pipeline (PP off, even splits)."]
    return lines, ok


PERF_OVERVIEW = ROOT / "tests" / "data" / "serving" / "trtllm_llama33_perf_overview.json"


def trtllm_bench_run(config: Path, row: dict) -> tuple[float, float]:
    """A ``trtllm-bench throughput`` row (``gpu``, ``tp``, ``pp``, ``precision``, ``kv_dtype``, ``isl``, ``osl``,
    ``requests``) run as published -- its requests at once through the simulated schedulers, at the limits
    trtllm-bench derives, the engine's default layer split -- and the evaluator's steady state: total output
    tokens/s, (the run, steady state)."""
    gpu, tp, pp, isl, osl = row["gpu"], row["tp"], row["pp"], row["isl"], row["osl"]
    p = problem(config, gpus=f"{tp * pp}x{gpu}", isl=isl, osl=osl, engine="trtllm",
                precision=row["precision"], kv_dtype=row["kv_dtype"], max_model_len=isl + osl)
    cfg = trtllm_bench_config(p, gpu, tp, pp, isl, osl)
    steady = evaluate(p, cfg).output_tokens_per_s
    run = simulate(p, cfg, offline=True, requests=int(row["requests"]), time_limit=300.0).output_tokens_per_s
    return run, steady


def perf_overview() -> tuple[list[str], dict[str, bool]]:
    """TensorRT-LLM's release/1.2 perf-overview rows for Llama 3.3 70B (PyTorch flow): other GPUs (B200, GB200,
    H200) and PP scaling on RTX PRO 6000 (TP1 x PP1..8), each run as published (its requests through the
    schedulers) at trtllm-bench's limits; per-GPU output tokens/s as the page prints them."""
    doc = json.loads(PERF_OVERVIEW.read_text())
    lines = ["| GPU | TP x PP | weights | ISL/OSL | requests | measured tok/s/GPU | dnnplace (the run) | error "
             "| steady state | error |", "|---|---|---|---|---|---|---|---|---|---|"]
    errs, got = [], {}
    for row in doc["rows"]:
        gpu, tp, pp, isl, osl = row["gpu"], row["tp"], row["pp"], row["isl"], row["osl"]
        run, steady = (x / (tp * pp) for x in trtllm_bench_run(MODELS["70B"], row))
        err = run / row["per_gpu"] - 1
        errs.append(err)
        got[(gpu, isl, osl, pp)] = (row["per_gpu"], run)
        lines.append(f"| {gpu} | TP{tp} x PP{pp} | {row['precision']} | {isl}/{osl} | {row['requests']} | "
                     f"{row['per_gpu']:,} | {run:,.0f} | {err:+.1%} | {steady:,.0f} | "
                     f"{steady / row['per_gpu'] - 1:+.1%} |")
    med = statistics.median(abs(e) for e in errs)
    within = sum(abs(e) <= 0.15 for e in errs) / len(errs)
    # the PP degree each length pair runs best at on RTX PRO 6000, measured vs predicted (ties within 1 % said)
    pairs = sorted({(isl, osl) for g, isl, osl, _ in got if g == "rtx-pro-6000"})
    rank_lines, right = [], 0
    for isl, osl in pairs:
        pps = {pp: v for (g, i, o, pp), v in got.items() if g == "rtx-pro-6000" and (i, o) == (isl, osl)}
        best_m = max(pps, key=lambda k: pps[k][0])
        best_p = max(pps, key=lambda k: pps[k][1])
        tie = pps[best_p][0] >= 0.99 * pps[best_m][0]
        right += best_m == best_p or tie
        order = [" > ".join(f"PP{k}" for k in sorted(pps, key=lambda k, j=j: -pps[k][j])) for j in (0, 1)]
        rank_lines.append(f"| {isl}/{osl} | {order[0]} | {order[1]} | "
                          f"{'same best' if best_m == best_p else 'within 1 %' if tie else 'WRONG'} |")
    lines += ["", f"{len(errs)} rows, the run as published: median |error| {med:.1%}, within 15 %: {within:.0%}.", "",
              "PP degrees on RTX PRO 6000, best first:", "",
              "| ISL/OSL | measured | predicted | best PP |", "|---|---|---|---|", *rank_lines, "",
              "aiconfigurator on these RTX rows (issue 43's figures): +39 % at PP4, +95 % at PP8, the PP degrees "
              "ranked wrongly on 3 of 4 length pairs.", f"Source: {doc['source']}."]
    ok = {"perf-overview rows: median |error| <= 6 %": med <= 0.06,
          "perf-overview rows: >= 90 % within 15 %": within >= 0.9,
          "perf-overview RTX PRO 6000: best PP degree per length pair": right == len(pairs)}
    return lines, ok


def pr9003() -> tuple[list[str], dict[str, bool]]:
    """TensorRT-LLM PR #9003: per-PP-rank step time of three partitions of a 61-layer model with MTP3."""
    try:
        import aiconfigurator_core

        cfg = Path(aiconfigurator_core.__file__).parent / "model_configs" / "deepseek-ai--DeepSeek-V3_config.json"
        p = problem(cfg, gpus="8xh200", precision="fp8", engine="trtllm", isl=1024, osl=1024)
    except Exception as exc:  # noqa: BLE001
        return [f"not expressed: no DeepSeek-V3 config ({exc})"], {}
    # batch 1 with MTP3: the main model verifies 1 + 3 tokens, the last rank also runs the MTP layer 3 times
    m = p.model
    main = layer_times(m, "h200", 8, Iteration(4.0, 1024.0, 0.0, 1), "trtllm", kv_dtype="fp8")
    draft = layer_times(m, "h200", 8, Iteration(1.0, 1024.0, 0.0, 1), "trtllm", kv_dtype="fp8")
    rows = {430: [16, 16, 15, 14], 431: [16, 15, 15, 15], 432: [16, 16, 16, 13]}
    try:
        given = {r.get("id"): r for r in json.loads(GIVEN.read_text())["rows"] if isinstance(r, dict)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        given = {}
    lines = ["| row | split | predicted ms per rank | measured ms per rank | bottleneck pred / meas |",
             "|---|---|---|---|---|"]
    ok_all, worst = True, {}
    for rid, parts in rows.items():
        lo, t = 0, []
        for i, n in enumerate(parts):
            s = float(main.per_layer[lo:lo + n].sum())
            if i == 3:
                s += main.head + 3 * (float(draft.per_layer[-1]) + draft.head)
            t.append(s * 1e3)
            lo += n
        v = given.get(rid, {}).get("values", {})
        meas = [float(str(v.get(f"rank{i}", "nan")).replace("ms", "").split("~")[-1]) for i in range(4)]
        pb, mb = max(range(4), key=lambda i: t[i]), max(range(4), key=lambda i: meas[i])
        ok_all &= pb == mb
        worst[rid] = max(t)
        lines.append(f"| {rid} | {parts}+MTP3 | {' / '.join(f'{x:.2f}' for x in t)} | "
                     f"{' / '.join(str(v.get(f'rank{i}', '?')) for i in range(4))} | rank{pb} / rank{mb} |")
    lines += ["", "Model, GPU and TP not stated in the PR: priced as DeepSeek-V3 (61 layers, the only 61-layer "
              "MTP model of that time), TP8 H200 per stage, batch 1 at 1,024 cached tokens; absolute ms are not "
              "comparable, the ranks' order is.", "aiconfigurator: cannot express a PP layer split."]
    ok = {"#9003 bottleneck rank of every partition": ok_all,
          "#9003 [16,15,15,15+MTP3] is the slowest partition": worst[431] == max(worst.values())}
    return lines, ok


def tp_sweep(res: list[tuple[dict, float]]) -> tuple[list[str], bool | None]:
    """The TP 1/2/4/8 sweep of Llama 3.1 70B: the best TP per GPU, predicted vs measured, per ISL/OSL."""
    by: dict[tuple[int, int], dict[int, tuple[float, float]]] = {}
    for r, pred in res:
        if "engine flow" in str(r.get("engine_version")):
            tp = int(r.get("tp") or 1)
            by.setdefault((r["isl"], r["osl"]), {})[tp] = (r["value"] / tp, pred / tp)
    lines, ok = ["| ISL/OSL | best TP per GPU, measured | predicted |", "|---|---|---|"], True
    for (isl, osl), d in sorted(by.items()):
        bm = max(d, key=lambda k: d[k][0])
        bp = max(d, key=lambda k: d[k][1])
        ok &= bm == bp
        lines.append(f"| {isl}/{osl} | TP{bm} | TP{bp} |")
    return lines, (ok if by else None)


def spread(errs: list[float]) -> str:
    """``median |error| x %, within 15 %: y %`` of a list of relative errors."""
    return (f"median |error| {statistics.median(abs(e) for e in errs):.1%}, "
            f"within 15 %: {sum(abs(e) <= 0.15 for e in errs) / len(errs):.0%}")


def other_rows(rows: list[dict]) -> tuple[list[str], list[float], dict[str, list[float]]]:
    """Every row the TensorRT-LLM table above does not take: priced as it ran where its words can be read
    (:mod:`published_rows`), else listed with the reason.  (table lines, offline-throughput errors, latency
    errors by quantity)."""
    lines = ["| id | engine | GPU | model | TP x PP | ISL/OSL | load | quantity | measured | dnnplace | error |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    offline: list[float] = []
    lat: dict[str, list[float]] = {"ttft_ms": [], "tpot_ms": [], "itl_ms": []}
    unread: list[str] = []
    for r in rows:
        page = json.dumps(r.get("source", "")) if isinstance(r, dict) else ""
        own = next((k for k in ("6920", "9003") if f"pull/{k}" in page), None)
        read = read_row(r)
        if isinstance(read, str):
            rid = r.get("id") if isinstance(r, dict) else None
            unread.append(f"- row {rid}: " + (f"priced in its own section (PR #{own})" if own else read))
            continue
        try:
            pred = price(read)
        except Exception as exc:  # noqa: BLE001 - the row is listed with dnnplace's own reason
            unread.append(f"- row {r.get('id')}: not priced: {str(exc)[:160]}")
            continue
        meas = float(r["value"]) * read.scale
        err = pred / meas - 1
        if read.load == "offline" and not read.latency:
            offline.append(err)
        else:  # a quantity under a rate or a client concurrency
            lat.setdefault(read.quantity, []).append(err)
        load = read.load + (f" {read.load_value:g}" if read.load != "offline" else "") + f", {read.requests} req"
        what = f"{read.stat} {read.quantity}" if read.latency else read.quantity
        lines.append(f"| {r.get('id')} | {read.engine} | {read.gpu} | {read.model.stem} | TP{read.tp} x PP{read.pp} | "
                     f"{read.isl}/{read.osl} | {load} | {what} | {meas:,.2f} | {pred:,.2f} | {err:+.1%} |")
    if len(lines) == 2:
        lines = ["No other row priced."]
    return lines + ([""] + unread if unread else []), offline, lat


def main() -> int:
    global GIVEN
    ap = argparse.ArgumentParser()
    ap.add_argument("--given", type=Path, default=GIVEN, help="published rows (measured_given.json's schema)")
    args = ap.parse_args()
    own = args.given.resolve() == GIVEN.resolve()
    GIVEN = args.given
    if not GIVEN.is_file():
        print(f"{GIVEN}: not found (the given rows live beside the repository)")
        return 2
    try:
        rows = json.loads(GIVEN.read_text())["rows"]
        if not isinstance(rows, list):
            raise TypeError("'rows' is not a list")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        print(f"{GIVEN}: not a file of published rows ({type(exc).__name__}: {exc})")
        return 2
    if own:  # the project's own collection beside the given rows (another --given file: that file alone)
        rows += json.loads(COLLECTED.read_text())["rows"]
    lines = ["# Serving: measured vs predicted", "", "## TensorRT-LLM offline rows (output tokens/s, H100 SXM)", "",
             "The run as published: its requests sent at once through TensorRT-LLM's schedulers (dnnplace "
             "`simulate --offline --requests N`); steady state: the evaluator's long-run rate.", "",
             "| id | model | TP | ISL/OSL | requests | measured | dnnplace (the run) | error | steady state | error "
             "| aiconfigurator | error |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    errs, serrs, aerrs, res, why_aic = [], [], [], [], set()
    others = []
    for r in rows:
        out = trtllm_row(r)
        if out is None:
            others.append(r)
            continue
        pred, steady, batch, prefill = out
        err = pred / r["value"] - 1
        errs.append(err)
        serr = steady / r["value"] - 1
        serrs.append(serr)
        res.append((r, pred))
        aic, why = aiconfigurator(r, batch, prefill)
        if why:
            why_aic.add(why)
        aerr = aic / r["value"] - 1 if aic else None
        if aerr is not None:
            aerrs.append(aerr)
        lines.append(f"| {r.get('id')} | {r['model']} | {r.get('tp') or 1} | {r['isl']}/{r['osl']} | "
                     f"{r['load'].get('num_requests', r['load'].get('requests'))} | {r['value']:.0f} | "
                     f"{pred:.0f} | {err:+.1%} | {steady:.0f} | {serr:+.1%} | {f'{aic:.0f}' if aic else '-'} | "
                     f"{f'{aerr:+.1%}' if aerr is not None else '-'} |")
    if errs:
        lines += ["", f"dnnplace, the run as published: {len(errs)} rows, {spread(errs)}.",
                  f"dnnplace, steady state: {spread(serrs)}."]
    else:
        lines = lines[:4] + ["No row of this file is a TensorRT-LLM offline row on H100 of the project's Llama 3.x "
                             "configs (every row is read below)."]
    if aerrs:
        lines.append(f"aiconfigurator (its step latency at the same batch and prompt tokens per step): "
                     f"{len(aerrs)} rows, {spread(aerrs)}.")
    lines += [f"aiconfigurator could not run: {w}" for w in sorted(why_aic)]
    olines, oerrs, lat = other_rows(others)
    errs += oerrs
    med = statistics.median(abs(e) for e in errs) if errs else float("nan")
    within = sum(abs(e) <= 0.15 for e in errs) / len(errs) if errs else float("nan")
    sweep, sweep_ok = tp_sweep(res)
    l6920, ok6920 = pr6920()
    l9003, ok9003 = pr9003()
    lpo, okpo = perf_overview()
    lines += ["", "## TP sweep (Llama 3.1 70B FP8, TRT-LLM 0.17)", "", *sweep,
              "", "## vLLM PR #6920 (Llama-3-70B-FP8, 8 x L4, PP8, vLLM v0.5.3)", "", *l6920,
              "", "## TensorRT-LLM PR #9003 (per-PP-rank step time)", "", *l9003,
              "", "## TensorRT-LLM perf-overview, Llama 3.3 70B (release/1.2, PyTorch flow): other GPUs, PP scaling",
              "", *lpo,
              "", "## Every other row (read by benchmarks/published_rows.py)", "", *olines]
    lat_med = {q: statistics.median(abs(e) for e in v) for q, v in lat.items() if v}
    if lat_med:
        lines += ["", "Under a request rate or a client concurrency: "
                  + ", ".join(f"{q} {len(lat[q])} rows, median |error| {m:.1%}" for q, m in sorted(lat_med.items()))
                  + "."]
    else:
        lines += ["", "Under a request rate or a client concurrency: no given rows (TTFT/TPOT target not checked)."]
    lines += ["", "Offline throughput, every priced row (the TensorRT-LLM table and the rows above): "
              + (f"{len(errs)} rows, {spread(errs)}." if errs else "none.")]
    targets: dict[str, bool | None] = {
        "offline median |error| <= 6 %": med <= 0.06 if errs else None,
        "offline >= 90 % of rows within 15 %": within >= 0.9 if errs else None,
        **{f"under load: {q} median |error| <= 15 %": m <= 0.15 for q, m in sorted(lat_med.items())
           if q in ("ttft_ms", "tpot_ms", "itl_ms")},
        "TP sweep: best TP per GPU predicted = measured": sweep_ok, **ok6920, **ok9003, **okpo}
    lines += ["", "## Targets", ""] + [f"- {k}: {'not checked (no rows)' if v is None else 'met' if v else 'MISSED'}"
                                       for k, v in targets.items()]
    if own:
        (ROOT / "benchmarks" / "results" / "serving.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(v is not False for v in targets.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
