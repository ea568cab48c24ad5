"""``dnnplace serve MODEL``: the deployment of a model for inference on the GPUs you have (of several kinds).

Why its own command: the serving planner's inputs (a fleet, a workload, an engine) are not the training
planner's; its plan file is read back by ``evaluate``, ``simulate``, ``report`` and ``export``.
:func:`register` adds the command to a typer app; errors end in one line, exit 2, nothing written.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any, Optional

import typer

from dnnplace.errors import DnnplaceError

__all__ = ["Engine", "lengths_line", "parse_serve_pins", "print_serving_plan", "register", "serve"]


class Engine(StrEnum):
    vllm = "vllm"
    sglang = "sglang"
    trtllm = "trtllm"
    llama_cpp = "llama.cpp"
    hf = "hf"


#: ``--fix`` keys -> the serving method's parameter they pin.
_PINS = {"tp": "tp", "pp": "pp", "layers": "layers", "max_num_seqs": "max_num_seqs", "mns": "max_num_seqs",
         "max_num_batched_tokens": "max_num_batched_tokens", "mbt": "max_num_batched_tokens",
         "expert_parallel": "expert_parallel", "ep": "expert_parallel"}
_ON_OFF = {"on": True, "true": True, "1": True, "yes": True, "off": False, "false": False, "0": False, "no": False}


def parse_serve_pins(text: str | None) -> dict[str, Any]:
    """``"tp=2,pp=2,layers=40+40"`` -> the serving method's pins: each key once, known, its value a whole
    number (``layers``: stage sizes joined by '+'); nothing is silently dropped."""
    if text is None:
        return {}
    pins: dict[str, Any] = {}
    for item in text.split(","):
        key, eq, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or not key:
            raise DnnplaceError(f"--fix: cannot read '{item.strip()[:40]}' (write KEY=VALUE, e.g. tp=2,pp=2)")
        if key not in _PINS:
            raise DnnplaceError(f"--fix: unknown key '{key[:40]}'; known: tp, pp, layers, max_num_seqs,"
                                " max_num_batched_tokens, expert_parallel")
        name = _PINS[key]
        if name in pins:
            raise DnnplaceError(f"--fix: '{key}' is given twice")
        value = value.strip()
        if name == "layers":
            from dnnplace.models.serving.method import parse_layers

            parse_layers(value)
            pins[name] = value
        elif name == "expert_parallel":
            if value.lower() not in _ON_OFF:
                raise DnnplaceError(f"--fix: {key} must be on or off, got '{value[:40]}'")
            pins[name] = _ON_OFF[value.lower()]
        elif value.isdigit() and int(value) >= 1:
            pins[name] = int(value)
        else:
            raise DnnplaceError(f"--fix: {key} must be a whole number >= 1, got '{value[:40]}'")
    return pins


def pick_slo(metric: str, given: dict[str, float | None]) -> tuple[float | None, str]:
    """The one SLO given for ``metric`` (ttft or tpot) and the statistic its flag names; two flags for one
    metric are refused, naming both (one bound per metric: which would win is not the user's to guess)."""
    from dnnplace.errors import DnnplaceError
    from dnnplace.models.serving.spec import slo_flag

    set_ = [(stat, v) for stat, v in given.items() if v is not None]
    if len(set_) > 1:
        raise DnnplaceError(f"give one {metric.upper()} SLO, not {' and '.join(slo_flag(metric, s) for s, _ in set_)}")
    return (set_[0][1], set_[0][0]) if set_ else (None, "mean")


def serve(
    model: str = typer.Argument(..., help="Hugging Face config.json (or its folder)."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help='The fleet: nodes separated by ";", each node'
                                       ' COUNTxNAME terms joined by "+", e.g. "2xa100-80g+2xl40s" or'
                                       ' "8xh100;8xa100-80g".'),
    fleet: Optional[Path] = typer.Option(None, "--fleet", help="The fleet as a TOML file ([[node]] gpus, link;"
                                         " [network] bandwidth_gbps, latency_us)."),
    precision: str = typer.Option("auto", "--precision", help="Weights: auto (the checkpoint's quantization,"
                                  " else bf16), bf16, fp16, fp8, fp4, int4 (w4a16), or GGUF q8_0, q6_k, q5_k_m,"
                                  " q4_k_m, q4_0 (llama.cpp)."),
    kv_dtype: str = typer.Option("bf16", "--kv-dtype", help="KV cache: bf16, fp16, fp8, q8_0."),
    engine: Engine = typer.Option(Engine.vllm, "--engine", help="The engine that serves it."),
    isl: Optional[int] = typer.Option(None, "--isl", help="Prompt tokens per request (default 1024)."),
    osl: Optional[int] = typer.Option(None, "--osl", help="Output tokens per request (default 256)."),
    rate: Optional[float] = typer.Option(None, "--rate", help="Requests/s (default: offline, the most it serves)."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Requests in flight."),
    ttft_ms: Optional[float] = typer.Option(None, "--ttft-ms", help="SLO: time to first token (ms, mean)."),
    tpot_ms: Optional[float] = typer.Option(None, "--tpot-ms", help="SLO: time per output token (ms, mean)."),
    ttft_p50_ms: Optional[float] = typer.Option(None, "--ttft-p50-ms", help="SLO: median time to first token (ms)."),
    ttft_p99_ms: Optional[float] = typer.Option(None, "--ttft-p99-ms", help="SLO: 99th-percentile time to first"
                                                " token (ms)."),
    tpot_p50_ms: Optional[float] = typer.Option(None, "--tpot-p50-ms", help="SLO: median time per output token"
                                                " (ms)."),
    tpot_p99_ms: Optional[float] = typer.Option(None, "--tpot-p99-ms", help="SLO: 99th-percentile time per output"
                                                " token (ms)."),
    max_model_len: int = typer.Option(0, "--max-model-len", help="Context (0: the model's own)."),
    fix: Optional[str] = typer.Option(None, "--fix", help='Price a given deployment: "tp=2,pp=2,layers=40+40"'
                                      " (also max_num_seqs, max_num_batched_tokens, expert_parallel=on|off)."),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", help="Seconds; best deployment so far after."),
    disaggregate: bool = typer.Option(False, "--disaggregate", help="Also price the best prefill/decode"
                                      " disaggregated deployment (vLLM, SGLang) beside the plan; `export"
                                      " --disaggregated` writes it."),
    within_nodes: bool = typer.Option(False, "--within-nodes", help="Keep every replica inside one node: what every"
                                      " export writes (across nodes: vLLM's multi-node launch only)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write the plan JSON here."),
    report: Optional[Path] = typer.Option(None, "--report", help="Also write an HTML report here."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan JSON instead of a summary."),
    lengths: Optional[Path] = typer.Option(None, "--lengths", help="Request lengths instead of --isl/--osl: a CSV"
                                           " file with a header (isl, osl and an optional count or weight column;"
                                           " also input_len/output_len, prompt_tokens/completion_tokens) or a JSON"
                                           " list of [isl, osl] pairs."),
) -> None:
    """Plan serving a model on a fleet of GPUs of several kinds: replicas, pipeline stages, TP and layer split
    with the most output tokens/s, against the engines' defaults, exported to vLLM, SGLang, TensorRT-LLM,
    llama.cpp or Hugging Face."""
    from dnnplace.cli.console import out, progress_bar, user_errors

    with user_errors():
        from dnnplace import api
        from dnnplace.utils.files import check_outputs, write_json_atomic
        from dnnplace.utils.params import check_arguments

        source = Path(model)
        inputs: list[Path | None] = [source, source / "config.json" if _is_dir(source) else None, fleet, lengths]
        check_outputs([output, report], inputs)
        time_limit = check_arguments(api.solve, time_limit=time_limit)["time_limit"]
        ttft_ms, ttft_stat = pick_slo("ttft", {"mean": ttft_ms, "p50": ttft_p50_ms, "p99": ttft_p99_ms})
        tpot_ms, tpot_stat = pick_slo("tpot", {"mean": tpot_ms, "p50": tpot_p50_ms, "p99": tpot_p99_ms})
        pins = parse_serve_pins(fix)
        if within_nodes:
            pins["within_nodes"] = True
        if disaggregate:
            pins["disaggregate"] = True
        problem = api.load_serving(model, gpus=gpus, fleet=fleet, isl=isl, osl=osl, rate=rate,
                                   concurrency=concurrency, ttft_ms=ttft_ms, tpot_ms=tpot_ms, ttft_stat=ttft_stat,
                                   tpot_stat=tpot_stat, engine=engine.value,
                                   precision=precision, kv_dtype=kv_dtype, max_model_len=max_model_len,
                                   lengths=lengths)
        with progress_bar(not as_json) as progress:
            sol = api.solve(problem, "serving-search", time_limit=time_limit, progress=progress, **pins)
        doc = api.plan_document(problem, sol.plan, sol.evaluation)
        if output is not None:
            write_json_atomic(output, doc, inputs=inputs)
        if report is not None:
            api.write_report(problem, sol.plan, report, inputs=[*inputs, output])
        if as_json:
            from dnnplace.cli.common import emit_json

            emit_json(doc)
            return
        print_serving_plan(out, doc)
        if output is not None:
            out.print(f"plan written to {output}")
        if report is not None:
            out.print(f"report written to {report}")


def _disaggregated_lines(doc: dict[str, Any]) -> list[str]:
    """The disaggregated what-if, when asked for: its pools, rate and what limits it, and its gain over the plan
    said as a win only beyond both predictions' error bands."""
    d = doc.get("disaggregated")
    if not d:
        return []
    if d.get("status") == "infeasible":
        return [f"disaggregated (what-if): {d.get('note', 'none fits')}"]

    def pool(c: dict[str, Any]) -> str:
        return "; ".join(f"tp={r['tp']} on {r['stages'][0]['gpu']}@{r['stages'][0]['node']}" for r in c["replicas"])

    gain = d.get("gain_over_plan")
    verdict = "-" if gain is None else f"{gain:.2f}x the plan" + (
        "" if d.get("beyond_band") else ", within the error band: not a proven difference")
    return [f"disaggregated (what-if, {d.get('split', '')}): prefill [{pool(d['prefill'])}], decode"
            f" [{pool(d['decode'])}]: {_num(d['output_tokens_per_s'], '.0f')} tok/s ({verdict}), limited by the"
            f" {d['limited_by']}; KV transfer {_num(d['kv_transfer_ms'], '.1f')} ms over {d['link']}; TTFT"
            f" {_num(d['ttft_ms'], '.0f')} ms, TPOT {_num(d['tpot_ms'], '.1f')} ms; {d['status']} over"
            f" {len(d.get('splits', []))} splits (gap {_num(None if d['gap'] is None else 100 * d['gap'], '.1f')} %);"
            " `export --disaggregated` writes it"]


def _slo_line(wl: dict[str, Any]) -> str:
    """The SLOs of a plan's workload with the statistic each bounds: "TTFT p99 <= 500 ms, TPOT mean <= 40 ms"."""
    return ", ".join(f"{name} {wl.get(f'{k}_stat') or 'mean'} <= {wl[f'{k}_ms']:g} ms"
                     for k, name in (("ttft", "TTFT"), ("tpot", "TPOT")) if wl.get(f"{k}_ms") is not None)


def _is_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except (OSError, ValueError):
        return False


def _num(v: Any, fmt: str = ".1f") -> str:
    """``v`` in ``fmt``, or with three significant digits where ``fmt`` would round a small non-zero figure to
    zero (0.001 requests/s serve 0.26 tokens/s, not "0")."""
    if v is None:
        return "-"
    text = format(v, fmt)
    return format(v, ".3g") if v and float(text) == 0.0 else text


def lengths_line(wl: dict[str, Any]) -> str:
    """One line on a plan document's length distribution: how many requests (the counts' sum; with fractional
    weights, how many lengths), from which file, their means and the longest."""
    rows = wl["lengths"]
    total = sum(w for _, _, w in rows)
    many = f"{int(total):,} requests" if all(float(w).is_integer() for _, _, w in rows) else \
        f"{len(rows):,} weighted lengths"
    src = f" from {wl['lengths_source']}" if wl.get("lengths_source") else ""
    return (f"lengths: {many}{src}, mean ISL {wl['isl']:,} / OSL {wl['osl']:,}, "
            f"longest {max(i + o for i, o, _ in rows):,} tokens")


def _spans(r: dict[str, Any]) -> str:
    """" across nodes a, b" for a replica whose stages span nodes (else ""): two runner-ups alike in TP, PP and
    layers may differ only there."""
    nodes = list(dict.fromkeys(s["node"] for s in r["stages"]))
    return f" across nodes {', '.join(map(str, nodes))}" if len(nodes) > 1 else ""


def print_serving_plan(console: Any, doc: dict[str, Any]) -> None:
    """The screen summary of a serving plan document: deployment, prediction, proof, error band, baselines."""
    from rich.table import Table
    from rich.text import Text

    from dnnplace.utils.text import printable

    p, c = doc["prediction"], doc["config"]
    wl = doc["workload"]
    mode = (f"{wl['rate']:g} requests/s" if wl.get("rate") is not None else
            f"{wl['concurrency']} in flight" if wl.get("concurrency") is not None else "offline")
    mean = "mean " if wl.get("lengths") else ""
    title = (f"{doc['model']['name']} ({doc['model']['precision']}) on {doc['fleet']['gpus']} with {doc['engine']}:"
             f" {mean}isl {wl['isl']}, osl {wl['osl']}, {mode}")
    t = Table(title=printable(title))
    for col in ("replica", "stage", "GPU", "node", "GPU ids", "layers", "weights GiB", "KV GiB"):
        t.add_column(col, justify="left" if col == "GPU" else "right")
    for k, r in enumerate(c["replicas"]):
        mem = p["memory_gib"][k] if k < len(p.get("memory_gib", [])) else []
        for i, s in enumerate(r["stages"]):
            m = mem[i] if i < len(mem) else {}
            t.add_row(str(k + 1) if i == 0 else "", str(i + 1), printable(s["gpu"]), str(s["node"]),
                      ",".join(map(str, s["gpus"])), str(s["layers"]), _num(m.get("weights")), _num(m.get("kv_cache")))
    console.print(t)
    lines = [
        *([lengths_line(wl)] if wl.get("lengths") else []),
        f"deployment: {len(c['replicas'])} replica(s), "
        + "; ".join(f"tp={r['tp']} pp={r['pp']} layers={'+'.join(map(str, r['partition']))}" for r in c["replicas"])
        + f"; max_num_seqs {c['max_num_seqs']}, max_num_batched_tokens {c['max_num_batched_tokens']}"
        + ("; expert parallel (experts whole over each TP group)" if c.get("expert_parallel") else ""),
        *(["expert parallelism searched: " + ", ".join(f"{k}: {_num(v, '.0f')}" for k, v in eps.items())
           + " tokens/s"] if (eps := doc.get("expert_parallel_searched")) else []),
        *(["max_num_seqs tried"
           + (f" at max_num_batched_tokens {at}" if (at := doc.get("max_num_seqs_searched_at")) else "") + ": "
           + ", ".join(f"{k}: {_num(v, '.0f')}" for k, v in tried.items())
           + f" tokens/s (the proof below is at {c['max_num_seqs']})"]
          if (tried := doc.get("max_num_seqs_searched")) else []),
        *(["max_num_batched_tokens priced: " + ", ".join(f"{k}: {_num(v, '.0f')}" for k, v in toks.items())
           + f" tokens/s (the plan's replicas; chosen {c['max_num_batched_tokens']})"]
          if (toks := doc.get("max_num_batched_tokens_searched")) else []),
        f"prediction: {_num(p['output_tokens_per_s'], '.0f')} output tokens/s, {_num(p['requests_per_s'], '.2f')}"
        f" requests/s, TTFT {_num(p['ttft_ms'], '.0f')} ms, TPOT {_num(p['tpot_ms'], '.1f')} ms; KV cache"
        f" {', '.join(map(str, p['kv_cache_tokens']))} tokens per replica; max concurrency"
        f" {', '.join(map(str, p['max_concurrency']))}; context {p['max_model_len']}",
        *([f"capacity at the batch limits: {_num(p.get('capacity_tokens_per_s'), '.0f')} output tokens/s (what the"
           " search maximises and the proof is about)"
           + ("; at the rate the replicas run " + ", ".join(_num(x, '.1f') for x in p["running_sequences"])
              + " sequences" if p.get("running_sequences") else "")]
          if wl.get("rate") is not None and p.get("capacity_tokens_per_s") is not None else []),
        f"fits {p['fits']}, meets SLO {p['meets_slo']}" + (f", saturated {p['saturated']}"
                                                            if wl.get("rate") is not None else "")
        + (f" ({_slo_line(wl)}; judged by the {str(doc['slo_judged_by']).split(':')[0]})"
           if doc.get("slo_judged_by") else ""),
        *([f"simulated at {sim['load']}: TTFT {sim.get('ttft_stat', 'mean')} {_num(sim['ttft_ms'], '.0f')} ms,"
           f" TPOT {sim.get('tpot_stat', 'mean')} {_num(sim['tpot_ms'], '.1f')} ms ({sim['completed']} requests),"
           + (" meets SLO " if _slo_line(wl) else " keeps up with the rate ")
           + ("not settled (the simulation was cut short by --time-limit)" if sim["meets_slo"] is None
              else str(sim["meets_slo"]))]
          if (sim := doc.get("slo_simulated")) else []),
        *(["note: the evaluator meets the SLO and the closed-loop simulation beside it does not (identical requests"
           " stay in step there, an upper estimate of TTFT; measured clients drift apart): not settled between them"]
          if sim and p["meets_slo"] and sim["meets_slo"] is False
          and str(doc.get("slo_judged_by", "")).startswith("evaluator") else []),
        f"proof: {doc['status']}, bound {_num(doc['bound'], '.0f')} tokens/s, gap "
        f"{_num(None if doc['gap'] is None else 100 * doc['gap'], '.1f')} %, {_num(doc['runtime_s'], '.2f')} s",
        f"error band: +/-{100 * doc['error_band']:.0f} % (kernel sources: "
        + ", ".join(f"{k} {v}" for k, v in sorted(doc["sources"].items()))
        + (f"; {note}" if (note := doc.get("error_band_note")) else "") + ")",
    ]
    if doc.get("adopted"):
        lines.append(f"plan: {doc['adopted']}")
    slo = bool(_slo_line(wl))
    band = doc["error_band"]
    for b in doc["baselines"]:
        if b.get("gain") is None:
            gain = "does not fit"
        elif slo and b.get("meets_slo") is False:  # a rate the user could not have had at these SLOs
            gain = f"misses the SLOs ({_num(b.get('capacity_tokens_per_s'), '.0f')} tokens/s at its batch limits)"
        elif 1.0 - b["gain"] > band:  # a loss beyond the band is said as one, never as "not a proven win"
            gain = f"plan gains {b['gain']:.2f}x: the baseline serves more, beyond the +/-{100 * band:.0f} % band"
        else:
            gain = f"plan gains {b['gain']:.2f}x" + (
                "" if b.get("beyond_band") else f", within the +/-{100 * band:.0f} % band: not a proven win")
        lines.append(f"baseline {b['name']}: {gain} ({b.get('why', '')})")
    if not doc["baselines"]:
        lines.append("baselines: none priced")
    for k, r in enumerate(c["replicas"], 1):
        nodes = sorted({s["node"] for s in r["stages"]})
        if len(nodes) > 1:
            lines.append(f"note: replica {k} spans nodes {', '.join(map(str, nodes))}: exported as the engine's"
                         " multi-node launch (vLLM, SGLang: the same number of stages on each node); --within-nodes"
                         " plans without it")
    lines += _disaggregated_lines(doc)
    for n, u in enumerate(doc["runner_ups"], 1):
        up = u["prediction"]
        reps = "; ".join(f"tp={r['tp']} pp={r['pp']} layers={'+'.join(map(str, r['partition']))}" + _spans(r)
                         for r in u["config"]["replicas"])
        lines.append(f"runner-up {n}: {len(u['config']['replicas'])} replica(s) {reps}: "
                     f"{_num(up.get('capacity_tokens_per_s', up['output_tokens_per_s']), '.0f')} tokens/s"
                     + (" at the batch limits" if wl.get("rate") is not None else "")
                     + (", misses the SLOs" if slo and up.get("meets_slo") is False else ""))
    for line in lines:
        console.print(Text(printable(line)))


def register(app: typer.Typer) -> None:
    """Add ``serve`` to a typer app."""
    app.command("serve")(serve)
