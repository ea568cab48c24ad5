"""Weights and KV-cache sizes the engines logged at start-up, against the serving model's memory rules.

Why: a serving plan's verdicts -- how many requests fit, whether a context fits at all -- rest on the KV
cache each engine sizes from the memory left after weights and its profile run.  These rows are what
vLLM and SGLang printed for published runs (tests/data/serving/engine_logs.json, each with its URL and
the settings the run used); each is predicted with that engine's rules and the run's memory fraction,
never fitted.  Writes benchmarks/results/serving_memory.md; exit 0 when every checked row is within 15 % and
every start-up verdict (the engine starts, or refuses for want of KV cache) is the logged one.

    PYTHONPATH=src python benchmarks/serving_memory.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dnnplace.models.serving.catalogue import VLLM_2024  # noqa: E402
from dnnplace.models.serving.evaluation import evaluate  # noqa: E402
from dnnplace.models.serving.load import problem  # noqa: E402
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage  # noqa: E402

LOGS = ROOT / "tests" / "data" / "serving" / "engine_logs.json"
TARGET = 0.15


def rows() -> list[dict[str, Any]]:
    return list(json.loads(LOGS.read_text())["rows"])


def predict(row: dict[str, Any]) -> float:
    """The row's quantity (``kv_blocks``, ``kv_tokens``, ``kv_gib`` or ``weights_gib`` per GPU, or ``starts``:
    1 when the engine starts at the run's context, 0 when it refuses) as the serving model prices that run:
    one replica of ``tp`` GPUs, the engine's rules of the run's time and the run's own settings."""
    engine = "vllm" if row["engine"] == "vllm-2024" else row["engine"]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "config.json"
        cfg.write_text(json.dumps(row["config"]))
        p = problem(cfg, gpus=row["gpus"], precision=row["precision"], isl=128, osl=128, engine=engine,
                    memory_fraction=float(row.get("memory_fraction", 0.0)))
    if row["engine"] == "vllm-2024":
        p = replace(p, engine=VLLM_2024)
    p = replace(p, max_model_len=int(row["max_model_len"]))
    e = p.engine
    # vLLM of 2024: max_num_batched_tokens = max(max_model_len, 2048) without chunked prefill (its profile run)
    tokens = int(row.get("max_num_batched_tokens") or (max(int(row["max_model_len"]), 2048)
                                                       if row["engine"] == "vllm-2024" else e.max_num_batched_tokens))
    seqs = int(row.get("max_num_seqs") or e.max_num_seqs)
    gpu = row["gpus"].split("x", 1)[1]
    stage = Stage(gpu, 0, tuple(range(int(row["tp"]))), p.model.num_layers)
    ev = evaluate(p, ServingConfig((Replica((stage,)),), seqs, tokens))
    if row["quantity"] == "starts":
        return float(ev.fits)
    r = ev.replicas[0]
    if row["quantity"] == "weights_gib":
        return r.memory[0].weights / 2**30
    if row["quantity"] == "kv_gib":
        return min(m.kv_free for m in r.memory) / 2**30
    if row["quantity"] == "kv_blocks":
        return r.kv_tokens / e.block_size
    return float(r.kv_tokens)


def main() -> int:
    lines = ["# Engine start-up logs: weights and KV cache, logged vs predicted", "",
             "`PYTHONPATH=src python benchmarks/serving_memory.py` (rows: `tests/data/serving/engine_logs.json`)", "",
             "| run | GPUs | quantity | logged | predicted | error | source |", "|---|---|---|---|---|---|---|"]
    ok = True
    errs = []
    verdicts = []
    for row in rows():
        pred = predict(row)
        if row["quantity"] == "starts":
            same = bool(pred) == bool(row["value"])
            verdicts.append(same)
            ok &= same
            lines.append(f"| {row['id']} | {row['gpus']} TP{row['tp']} | starts at {row['max_model_len']} | "
                         f"{'yes' if row['value'] else 'no'} | {'yes' if pred else 'no'} | "
                         f"{'same' if same else 'WRONG'} | {row['url']} |")
            continue
        err = pred / row["value"] - 1
        if "source_of" in row:  # the constant's own row: printed, not a check
            lines.append(f"| {row['id']} | {row['gpus']} TP{row['tp']} | {row['quantity']} | {row['value']:,} | "
                         f"{pred:,.1f} | {err:+.1%} (source of {row['source_of']}) | {row['url']} |")
            continue
        errs.append(err)
        ok &= abs(err) <= TARGET
        lines.append(f"| {row['id']} | {row['gpus']} TP{row['tp']} | {row['quantity']} | {row['value']:,} | "
                     f"{pred:,.1f} | {err:+.1%} | {row['url']} |")
    within = sum(abs(e) <= TARGET for e in errs)
    lines += ["", f"{within} of {len(errs)} checked rows within {TARGET:.0%}; start-up verdicts right: "
                  f"{sum(verdicts)} of {len(verdicts)}.", "",
              "Not priced: vLLM #4454's facebook/opt-125m and phi-2 rows (no OPT or Phi reader), LMCache #503's "
              "H20 row (no H20 datasheet in the catalogue).",
              "The vLLM half of #21348 (V1, July 2025, MoE at TP 4) logs 8.11 GiB of KV cache where the model "
              "leaves about 11: beyond the sampler's pass priced here, vLLM's profile of an MoE model reserves "
              "more than the routed experts' intermediates (its own PR #54848 puts its MoE activation reserve at "
              "3-5x what they need) and NCCL's buffers at TP > 1 are not priced; no sourced figure for either "
              "yet, so the row stays a miss.", "",
              f"Target (every row within {TARGET:.0%}): {'met' if ok else 'MISSED'}"]
    text = "\n".join(lines)
    (ROOT / "benchmarks" / "results" / "serving_memory.md").write_text(text + "\n")
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
