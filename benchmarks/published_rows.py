"""A published serving row, written in words, read into what dnnplace prices -- and priced.

Why a module of its own: the rows of ``../shared/serving/measured_given.json`` name their GPU ("H100 SXM 80GB
(DGX H100)"), model ("LLaMA v3.1 70B"), engine, load and metric in free text, and the same benchmark is to be
run, unchanged, on other published rows of that schema (other engines and GPUs, PP degrees, latency at a
request rate or a client concurrency).  Every row is read here by one set of rules, priced by the one
simulator the CLI uses (``dnnplace simulate``: its requests at once, at a Poisson rate or from closed-loop
clients), and a row that cannot be read is returned with the reason -- never dropped in silence.

Settings a row does not state are each engine's defaults as dnnplace's engine rules hold them (vLLM's
``max_num_seqs`` keyed on the GPU, SGLang's memory fraction, ...); a TensorRT-LLM offline row runs at the
limits ``trtllm-bench`` derives (``trtllm_bench_limits``) with the FP8 KV cache it forces for FP8 / FP4
checkpoints.  Nothing here is fitted to a row.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: Models the project ships a config for, by family and size (every Llama 3.x of a size shares one architecture:
#: the 3.1 and 3.3 70B configs differ only in RoPE scaling and vocabulary metadata).
LOCAL_MODELS = {("llama3", "70b"): ROOT / "tests" / "data" / "serving" / "llama3-70b.json",
                ("llama3", "8b"): ROOT / "examples" / "llm" / "llama3.1-8b.json"}

ENGINES = {"tensorrt-llm": "trtllm", "tensorrtllm": "trtllm", "trt-llm": "trtllm", "trtllm": "trtllm",
           "vllm": "vllm", "sglang": "sglang", "llama.cpp": "llama.cpp", "llamacpp": "llama.cpp",
           "hugging face": "hf", "transformers": "hf", "hf": "hf"}

#: (pattern, catalogue GPU) in the order tried: the longer names first ("gb200" before "b200", "l40s" before "l4").
GPU_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"gb300", "gb300"), (r"gb200", "gb200"), (r"gh200", "gh200"), (r"b300", "b300"), (r"b200", "b200"),
    (r"h200", "h200"), (r"h100.*pcie|pcie.*h100", "h100-pcie"), (r"h100(?!.*nvl)", "h100"),
    (r"a100.*40\s*gb|a100-40g", "a100-40g"), (r"a100", "a100"), (r"l40s", "l40s"), (r"\bl4\b", "l4"),
    (r"a10g", "a10g"), (r"\bt4\b", "t4"), (r"v100", "v100"), (r"rtx[\s-]*pro[\s-]*6000", "rtx-pro-6000"),
    (r"a6000", "a6000"), (r"5090", "rtx-5090"), (r"4090", "rtx-4090"), (r"3090", "rtx-3090"),
    (r"3060", "rtx-3060"), (r"mi300x", "mi300x"), (r"\bb60\b", "b60"))

PRECISION_WORDS: tuple[tuple[str, str], ...] = (
    (r"nvfp4|\bfp4\b|mxfp4", "fp4"), (r"fp8", "fp8"), (r"int4|awq|gptq|w4a16", "int4"), (r"int8|w8a8", "int8"),
    (r"bf16|bfloat16", "bf16"), (r"fp16|float16|half", "fp16"))


@dataclass(frozen=True)
class ReadRow:
    """What a row asks for, in dnnplace's terms."""

    engine: str
    gpu: str
    tp: int
    pp: int
    model: Path
    precision: str
    kv_dtype: str
    isl: int
    osl: int
    load: str  # "offline", "rate" or "concurrency"
    load_value: float  # requests/s for "rate", clients for "concurrency", 0 offline
    requests: int
    quantity: str  # output_tokens_per_s, total_tokens_per_s, requests_per_s, ttft_ms, tpot_ms
    stat: str  # mean, p50, p90 or p99
    scale: float  # measured value x scale = the quantity in dnnplace's unit (per-GPU rows x GPUs, s -> ms)
    #: trtllm-bench's KV-cache memory fraction: 0.95 in the engine flow's build heuristic (bench/build/build.py),
    #: --kv_cache_free_gpu_mem_fraction 0.90 in the PyTorch flow (bench/benchmark/throughput.py)
    kv_fraction: float = 0.90
    #: each request's lengths drawn uniformly from these inclusive ranges (a client's random dataset with a range
    #: ratio; the row gives the interval, since clients read the ratio differently), else every one ISL / OSL
    isl_range: tuple[int, int] | None = None
    osl_range: tuple[int, int] | None = None

    @property
    def latency(self) -> bool:
        return self.quantity in ("ttft_ms", "tpot_ms", "itl_ms")


def engine_of(text: Any) -> str | None:
    key = str(text or "").strip().lower()
    return ENGINES.get(key) or next((v for k, v in ENGINES.items() if key.startswith(k)), None)


def gpu_of(text: Any) -> str | None:
    low = str(text or "").lower()
    return next((name for pat, name in GPU_PATTERNS if re.search(pat, low)), None)


def precision_of(text: Any) -> str | None:
    low = str(text or "").lower()
    return next((name for pat, name in PRECISION_WORDS if re.search(pat, low)), None)


def _canon(name: str, strip_quant: bool = True) -> str:
    """``LLaMA v3.1 70B`` / ``meta-llama--Meta-Llama-3.1-70B`` -> ``llama3.170b``: lowercase, org and checkpoint
    words dropped, separators removed (dots kept: 3.1 is not 31); a name's quantization suffix ("-FP8") dropped
    where ``strip_quant`` (a row's model name; the precision is read from it separately)."""
    low = re.split(r"--|/", name.lower())[-1]
    low = re.sub(r"\s+v\d+(\.\d+)*\s*$", "", low.replace("_", " ").replace("-", " "))  # Mixtral-8x7B-v0.1
    low = re.sub(r"\b(meta|instruct|chat|hf|base|it)\b", " ", low)
    if strip_quant:
        low = re.sub(r"\b(fp8|nvfp4|fp4|awq|gptq|int4|int8|bf16|fp16)\b.*$", "", low)
    low = re.sub(r"\bv(?=\d)", "", low)
    return re.sub(r"[^a-z0-9.]", "", low)


def _config_dirs() -> list[Path]:
    dirs = [ROOT.parent / "shared" / "llm"]
    try:
        import aiconfigurator_core

        dirs.append(Path(aiconfigurator_core.__file__).parent / "model_configs")
    except ImportError:  # pragma: no cover - the venv has it
        pass
    return [d for d in dirs if d.is_dir()]


def model_of(text: Any) -> Path | None:
    """The config.json a row's model name stands for: the project's own Llama 3.x configs, else a config of the
    same canonical name among ``../shared/llm`` and aiconfigurator-core's vendored ``model_configs`` -- a
    quantized checkpoint's own config first (``Qwen3-235B-A22B-FP8``: its block-scaled quantization_config),
    then the base model's (the precision read from the row)."""
    canon = _canon(str(text or ""))
    m = re.fullmatch(r"llama3(?:\.\d)?(\d+b)", canon)
    if m and ("llama3", m.group(1)) in LOCAL_MODELS:
        return LOCAL_MODELS[("llama3", m.group(1))]
    files = [f for d in _config_dirs() for f in sorted(d.glob("*.json")) if "_hf_quant" not in f.name]
    names = {f: _canon(f.name.removesuffix("_config.json").removesuffix(".json"), strip_quant=False) for f in files}
    for want in (_canon(str(text or ""), strip_quant=False), canon):
        hit = next((f for f in files if names[f] == want), None)
        if hit is not None:
            return hit
    return None


def quantity_of(metric: Any, unit: Any) -> tuple[str, str, float] | None:
    """(dnnplace quantity, statistic, scale to dnnplace's unit) of a row's metric and unit."""
    m, u = str(metric or "").lower(), str(unit or "").lower()
    stat = "p99" if "p99" in m else "p90" if "p90" in m else "p50" if "median" in m or "p50" in m else "mean"
    to_ms = 1e3 if re.search(r"(^|\W)s(ec)?(\W|$)", u) and "ms" not in u and "/s" not in u else 1.0
    if "ttft" in m or "time to first token" in m:
        return "ttft_ms", stat, to_ms
    if any(w in m for w in ("itl", "inter-token", "inter token")):  # every gap between two tokens
        return "itl_ms", stat, to_ms
    if any(w in m for w in ("tpot", "time per output token")):  # each request's own mean gap
        return "tpot_ms", stat, to_ms
    if "throughput" not in m and "tok" not in u and "req" not in u:
        return None
    per_gpu = "per gpu" in m or "per gpu" in u or "/gpu" in u
    scale = -1.0 if per_gpu else 1.0  # negative: multiply by the row's GPU count (done by read_row)
    if "request" in m or "req/s" in u or "requests" in u:
        return "requests_per_s", "mean", scale
    if "total token" in m or "total tokens" in u:
        return "total_tokens_per_s", "mean", scale
    return "output_tokens_per_s", "mean", scale


def _count(v: Any, hi: int = 10_000_000) -> int | None:
    """A whole number in [1, hi] (an integral float too), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v):
        return None
    return int(v) if 1 <= v <= hi else None


def _positive(v: Any) -> float | None:
    """A finite number > 0, else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        return None
    return float(v)


def load_of(load: Any) -> tuple[str, float, int] | None:
    """(kind, value, requests) of a row's load: offline (all requests at once), a Poisson request rate, or
    closed-loop clients; the requests default to 10 per client (or 1,000) where the row does not print them.
    None for anything else, or a count or rate that is not a positive number."""
    if not isinstance(load, dict):
        return None
    kind = str(load.get("type", "")).lower()
    given = load.get("num_requests", load.get("requests"))
    n = _count(given, 1_000_000) if given is not None else None
    if given is not None and n is None:
        return None
    if "offline" in kind or "infinite" in kind:
        return ("offline", 0.0, n) if n else None
    if "concurren" in kind:
        c = _count(load.get("concurrency", load.get("value")), 100_000)
        return ("concurrency", float(c), n or 10 * c) if c else None
    if "rate" in kind or "qps" in kind:
        r = _positive(load.get("request_rate", load.get("rate", load.get("value"))))
        return ("rate", r, n or 1000) if r else None
    return None


def read_row(row: dict) -> ReadRow | str:
    """The row in dnnplace's terms, or why it cannot be priced (one line); never raises on a malformed row."""
    if not isinstance(row, dict):
        return f"not a JSON object: {str(row)[:60]!r}"
    if row.get("measured") is False:
        return "not a measurement (measured: false)"
    if _positive(row.get("value")) is None:
        return f"value {row.get('value')!r} not a positive number"
    engine = engine_of(row.get("engine"))
    if engine is None:
        return f"engine {row.get('engine')!r} not one dnnplace prices"
    gpu = gpu_of(row.get("gpu"))
    if gpu is None:
        return f"GPU {row.get('gpu')!r} not in the catalogue"
    model = model_of(row.get("model"))
    if model is None:
        return f"no config.json for model {row.get('model')!r}"
    if row.get("isl") is None or row.get("osl") is None:
        return "no ISL/OSL printed"
    if _count(row.get("isl")) is None or _count(row.get("osl")) is None:
        return f"ISL/OSL {row.get('isl')!r}/{row.get('osl')!r} not token counts"
    sizes = []
    for key in ("tp", "pp"):
        v = row.get(key)
        if v is not None and _count(v, 4096) is None:
            return f"{key.upper()} {v!r} not read"
        sizes.append(1 if v is None else int(v))
    tp, pp = sizes
    if _count(row.get("num_gpus")) is not None and row["num_gpus"] != tp * pp:
        return f"{row['num_gpus']} GPUs for TP{tp} x PP{pp} (data-parallel replicas are not read)"
    load = load_of(row.get("load"))
    if load is None:
        return f"load {row.get('load')!r} not read"
    q = quantity_of(row.get("metric"), row.get("unit"))
    if q is None:
        return f"metric {row.get('metric')!r} not read"
    precision = precision_of(row.get("precision")) or precision_of(row.get("model")) or "bf16"
    kv = precision_of(row.get("kv_cache_dtype")) if row.get("kv_cache_dtype") else None
    if kv is None:  # trtllm-bench / the PyTorch flow run FP8 and FP4 checkpoints with an FP8 KV cache
        kv = "fp8" if engine == "trtllm" and precision in ("fp8", "fp4") else "bf16"
    quantity, stat, scale = q
    if scale < 0:
        scale = float(tp * pp)
    frac = 0.95 if "engine flow" in str(row.get("engine_version")) else 0.90
    ranges = []
    for key in ("isl_range", "osl_range"):
        v = row["load"].get(key)
        if v is None:
            ranges.append(None)
        elif (isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v)
              and 1 <= v[0] <= v[1] <= 1_000_000):
            ranges.append((v[0], v[1]))
        else:
            return f"load {key} {v!r} not an interval [lo, hi] of token counts"
    return ReadRow(engine, gpu, tp, pp, model, precision, kv, int(row["isl"]), int(row["osl"]), load[0],
                   load[1], load[2], quantity, stat, scale, frac, ranges[0], ranges[1])


def drawn_lengths(isl: tuple[int, int], osl: tuple[int, int], prompts: int, seed: int = 0,
                  name: str = "a published row's random lengths") -> Any:
    """``prompts`` (prompt, output) lengths drawn uniformly from the inclusive ranges (numpy ``integers``, the
    prompts' then the outputs'), one row per prompt, as a benchmark client's random dataset draws them, for
    ``problem(lengths=...)``."""
    import numpy as np

    from dnnplace.models.serving.lengths import LengthRows

    rng = np.random.default_rng(seed)
    ins = rng.integers(isl[0], isl[1] + 1, size=prompts)
    outs = rng.integers(osl[0], osl[1] + 1, size=prompts)
    rows = LengthRows(name)
    for k, (i, o) in enumerate(zip(ins, outs)):
        rows.count(f"prompt {k}")
        rows.add(int(i), int(o), 1.0, f"prompt {k}")
    return rows


def params_of(m: Any) -> float:
    """Parameters of the checkpoint (what trtllm-bench reads from the safetensors header)."""
    from dnnplace.models.serving.catalogue import PRECISIONS

    bpw = PRECISIONS[m.precision][0]
    norms = 2.0 * m.hidden * 2.0
    return float(((m.weight_bytes - norms) / bpw + norms / 2.0).sum() + (m.embed_bytes + m.head_bytes) / 2.0)


def default_split_config(p: Any, gpu: str, tp: int, pp: int, seqs: int, tokens: int) -> Any:
    """One replica of ``pp`` stages of ``tp`` ``gpu``s with the engine's default layer split, at these limits."""
    from dnnplace.models.serving.baselines import engine_default_split
    from dnnplace.models.serving.spec import Replica, ServingConfig, Stage

    parts = engine_default_split(p.model.num_layers, pp, p.engine.default_split)
    rep = Replica(tuple(Stage(gpu, 0, tuple(range(i * tp, (i + 1) * tp)), n) for i, n in enumerate(parts)))
    return ServingConfig((rep,), seqs, tokens)


def trtllm_bench_config(p: Any, gpu: str, tp: int, pp: int, isl: int, osl: int, fraction: float = 0.90) -> Any:
    """The deployment ``trtllm-bench throughput`` runs: its derived batch and token limits (``trtllm_bench_limits``
    at the KV-cache memory ``fraction``) over the engine's default layer split."""
    from dnnplace.core.catalogue import device_spec
    from dnnplace.models.serving.catalogue import trtllm_bench_limits

    m = p.model
    seqs, tokens = trtllm_bench_limits(params_of(m), m.precision, p.kv_dtype, m.num_layers, m.kv_heads, m.head_dim,
                                       device_spec(gpu).usable_memory_bytes / 2**30, tp, pp, isl, osl, fraction)
    return default_split_config(p, gpu, tp, pp, seqs, tokens)


def price(r: ReadRow, time_limit: float = 300.0) -> float:
    """dnnplace's prediction of the row's quantity: its requests through the simulated engine as the row ran
    them (a TensorRT-LLM offline row at trtllm-bench's limits, every other at the engine's defaults), the
    engine's default layer split across the PP ranks."""
    from dnnplace.models.serving.load import problem
    from dnnplace.models.serving.simulator import simulate

    if r.isl_range or r.osl_range:
        isl, osl = r.isl_range or (r.isl, r.isl), r.osl_range or (r.osl, r.osl)
        shape: dict[str, Any] = {"lengths": drawn_lengths(isl, osl, r.requests)}
        longest = isl[1] + osl[1]
    else:
        shape, longest = {"isl": r.isl, "osl": r.osl}, r.isl + r.osl
    p = problem(r.model, gpus=f"{r.tp * r.pp}x{r.gpu}", engine=r.engine, precision=r.precision,
                kv_dtype=r.kv_dtype, max_model_len=longest, **shape)
    if r.engine == "trtllm" and r.load == "offline":
        cfg = trtllm_bench_config(p, r.gpu, r.tp, r.pp, r.isl, r.osl, r.kv_fraction)
    else:
        seqs = p.engine.max_num_seqs
        if r.load == "concurrency":
            seqs = max(seqs, int(r.load_value))
        cfg = default_split_config(p, r.gpu, r.tp, r.pp, seqs, p.engine.max_num_batched_tokens)
    kw: dict[str, Any] = {"offline": True} if r.load == "offline" else \
        {"concurrency": int(r.load_value)} if r.load == "concurrency" else {"rate": r.load_value}
    sim = simulate(p, cfg, requests=r.requests, time_limit=time_limit, **kw)
    if r.latency:
        v = getattr(sim, r.quantity).get(r.stat)
        if v is None:
            raise ValueError(f"no {r.stat} {r.quantity} simulated (no request completed)")
        return float(v)
    if r.quantity == "requests_per_s":
        return sim.requests_per_s
    if r.quantity == "total_tokens_per_s":
        mean_in = sum(r.isl_range) / 2 if r.isl_range else r.isl
        mean_out = sum(r.osl_range) / 2 if r.osl_range else r.osl
        return sim.output_tokens_per_s * (1.0 + mean_in / mean_out)
    return sim.output_tokens_per_s
