"""The measured families of one system, as lattices built once per process from its tables.

Each builder reads the columns it needs (:func:`tables.read_columns`), splits the rows by the categorical
keys of the family (data type, head dim, window, ...) and builds one :class:`~dnnplace.kernels.grid.Grid`
per key over the numeric axes.  Latencies in the tables are milliseconds; the grids hold seconds.
Every choice between rows of one key (which kernel source when several measured the same GEMM) is made
here, once, by a stated rule.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from dnnplace.kernels.grid import Grid
from dnnplace.kernels.tables import COMM_ORDER, TableRef, find_table, find_tables, read_columns

__all__ = ["ATTN_DTYPES", "COMM_OPS", "FP8_QUANT_FILES", "GEMM_DTYPES", "MOE_ROUTING", "Family", "family"]

#: Our kernel data type -> the tables' name.  FP16 GEMMs run at the BF16 rate on every tensor-core
#: generation these tables cover (same peak in the datasheets), so they read the BF16 rows.
GEMM_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block", "fp4": "nvfp4",
               "nvfp4": "nvfp4", "int8_wo": "int8_wo", "int4_wo": "int4_wo", "int4": "int4_wo"}
ATTN_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}
#: Our collective names -> the NCCL table's.
COMM_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "all_to_all": "alltoall"}
#: Routing skew knob -> the MoE table's token distribution (balanced; power law of exponent alpha).
MOE_ROUTING = {"balanced": "balanced", "power-law-1.01": "power_law_1.01", "power-law-1.2": "power_law_1.2"}
_MS = 1e-3


@dataclass(frozen=True)
class Family:
    """One family's lattices by categorical key, the table they came from, and the key fields' names."""

    name: str
    table: TableRef
    keys: tuple[str, ...]
    grids: dict[tuple[object, ...], Grid]
    axes: tuple[str, ...]
    choice: str = ""  # the rule that picked among rows (kernel source), for `dnnplace kernels`
    sources: tuple[tuple[str, str], ...] = ()  # (table data type, the kernel source kept for it)
    # where the source is chosen per key (MoE layouts): each grid key's kernel source
    by_key: dict[tuple[object, ...], str] = field(default_factory=dict)


def _split(cols: dict[str, np.ndarray], keys: tuple[str, ...]) -> dict[tuple[object, ...], np.ndarray]:
    """Row indices by the tuple of the ``keys`` columns (keys in order of first appearance, rows in table order).

    Vectorised (one code per row from the keys' unique values, a stable sort): the tables have up to a few
    hundred thousand rows and a Python loop over them was most of a family's build time."""
    if not keys:
        return {(): np.arange(len(next(iter(cols.values()))))}
    codes = np.zeros(len(cols[keys[0]]), dtype=np.int64)
    for k in keys:
        col = cols[k]
        if col.dtype == object:  # strings: a dict of the values is ten times faster than sorting objects
            values = col.tolist()
            index = {v: i for i, v in enumerate(dict.fromkeys(values))}
            inverse, size = np.fromiter(map(index.__getitem__, values), np.int64, len(values)), len(index)
        else:
            uniq, inverse = np.unique(col, return_inverse=True)
            size = len(uniq)
        codes = codes * size + inverse.ravel()
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    groups = sorted(np.split(order, starts[1:]), key=lambda g: int(g[0]))
    return {tuple(cols[k][g[0]:g[0] + 1].tolist()[0] for k in keys): g for g in groups}


def _kept(dtypes: np.ndarray, sources: np.ndarray, pick: dict[str, str]) -> np.ndarray:
    """Rows whose kernel source is the one ``pick`` keeps for their data type."""
    keep = np.zeros(len(dtypes), dtype=bool)
    for d, src in pick.items():
        keep |= (dtypes == d) & (sources == src)
    return keep


def _grids(cols: dict[str, np.ndarray], keys: tuple[str, ...], axes: tuple[str, ...], scale: tuple[str, ...],
           value: str = "latency") -> dict[tuple[object, ...], Grid]:
    out = {}
    for key, rows in _split(cols, keys).items():
        coords = [np.asarray(cols[a][rows], dtype=float) for a in axes]
        out[key] = Grid.from_points(coords, np.asarray(cols[value][rows], dtype=float) * _MS, scale)
    return out


def _most_rows(sources: np.ndarray, dtypes: np.ndarray, skip: str = "") -> dict[str, str]:
    """Per data type, the kernel source with the most measured rows (ties: alphabetical first)."""
    best: dict[str, str] = {}
    counts = Counter(zip(dtypes.tolist(), sources.tolist()))
    for (dt, src), _n in sorted(counts.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1])):
        if skip and skip in src:
            continue
        best.setdefault(dt, src)
    return best


def _gemm(system: str, framework: str | None) -> Family | None:
    ref = find_table(system, "gemm", "gemm_perf.parquet", framework=framework)
    if ref is None:
        return None
    cols = read_columns(ref[4], ("kernel_source", "gemm_dtype", "m", "n", "k", "latency"))
    pick = _most_rows(cols["kernel_source"], cols["gemm_dtype"])
    keep = _kept(cols["gemm_dtype"], cols["kernel_source"], pick)
    cols = {k: v[keep] for k, v in cols.items()}
    grids = _grids(cols, ("gemm_dtype",), ("m", "n", "k"), ("lin", "lin", "lin"))
    rule = "per data type, the kernel source with the most rows: " + ", ".join(f"{d} {s}" for d, s in pick.items())
    return Family("gemm", ref, ("gemm_dtype",), grids, ("m", "n", "k"), rule, tuple(pick.items()))


def _attention(system: str, framework: str | None, decode: bool) -> Family | None:
    name = "generation_attention_perf.parquet" if decode else "context_attention_perf.parquet"
    ref = find_table(system, "attention", name, framework=framework)
    if ref is None:
        return None
    cols = read_columns(ref[4], ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "window_size",
                                 "attn_dtype", "kv_cache_dtype", "step", "latency"))
    keys = ("head_dim", "window_size", "attn_dtype", "kv_cache_dtype")
    if decode:  # the KV length a decode step reads: the prompt plus the tokens generated so far
        cols = {**cols, "kv_len": cols["isl"] + cols["step"]}
        return Family("decode_attention", ref, keys, _grids(cols, keys, ("batch_size", "kv_len", "num_heads",
                                                                         "num_key_value_heads"),
                                                           ("lin", "lin", "lin", "lin")),
                      ("batch", "kv_len", "heads", "kv_heads"))
    return Family("context_attention", ref, keys,
                  _grids(cols, keys, ("batch_size", "isl", "num_heads", "num_key_value_heads"),
                         ("lin", "curve-sqrt", "lin", "lin")), ("batch", "seq", "heads", "kv_heads"))


def _nccl(system: str) -> Family | None:
    ref = find_table(system, "comm", "nccl_perf.parquet", order=COMM_ORDER[:1])
    if ref is None:
        return None
    cols = read_columns(ref[4], ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency"))
    # message_size counts elements of nccl_dtype: bytes = elements x (2 for half, 1 for int8).  Both dtypes
    # move the same bytes at the same speed, so they form one curve by bytes; where both measured a size,
    # the half row is kept.
    nbytes = cols["message_size"] * np.where(cols["nccl_dtype"] == "half", 2, 1)
    order = np.lexsort((cols["nccl_dtype"] != "half",))
    seen: set[tuple[str, int, int]] = set()
    keep = np.zeros(len(nbytes), dtype=bool)
    for i in order:
        key = (str(cols["op_name"][i]), int(cols["num_gpus"][i]), int(nbytes[i]))
        if key not in seen:
            seen.add(key)
            keep[i] = True
    c = {"op_name": cols["op_name"][keep], "num_gpus": cols["num_gpus"][keep], "bytes": nbytes[keep],
         "latency": cols["latency"][keep]}
    return Family("collective", ref, ("op_name",), _grids(c, ("op_name",), ("num_gpus", "bytes"), ("lin", "lin")),
                  ("gpus", "bytes"))


#: The custom all-reduce tables' element type -> bytes (message_size counts elements of allreduce_dtype).
_AR_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def _custom_ar(system: str, framework: str | None) -> Family | None:
    """The engine's own TP all-reduce (``comm/<framework>/<version>/custom_allreduce_perf.parquet``), newest
    version of that framework only: the collector calls the engine's all-reduce op, so the rows are what the
    engine dispatches at each size (TensorRT-LLM's AUTO one-/two-shot kernels; vLLM's and SGLang's custom
    all-reduce).  Where a table has an eager and a CUDA-graph kernel source, the graph rows are kept: both
    engines capture their decode steps in CUDA graphs, where the input is already IPC-registered (eager
    adds a copy into the registered buffer).  Rows whose ``framework`` column is another engine's (SGLang
    0.5.6.post2 on H100 holds TensorRT-LLM's rows) are dropped."""
    if framework is None:
        return None
    ref = find_table(system, "comm", "custom_allreduce_perf.parquet", framework=framework)
    if ref is None:
        return None
    cols = read_columns(ref[4], ("framework", "kernel_source", "allreduce_dtype", "num_gpus", "message_size",
                                 "latency"))
    own = np.array([str(f).lower().replace("-", "") == framework for f in cols["framework"].tolist()], dtype=bool)
    if not own.any():
        return None
    srcs = sorted({str(s) for s in cols["kernel_source"][own].tolist()})
    graph = [s for s in srcs if "graph" in s.lower()]
    pick = graph[0] if graph else srcs[0]
    keep = own & (cols["kernel_source"] == pick)
    per = np.array([_AR_BYTES.get(str(d), 2) for d in cols["allreduce_dtype"][keep].tolist()], dtype=float)
    c = {"num_gpus": cols["num_gpus"][keep], "bytes": cols["message_size"][keep] * per,
         "latency": cols["latency"][keep]}
    rule = f"the engine's own all-reduce op, kernel source {pick} (CUDA-graph rows where the table has both)"
    return Family("custom_all_reduce", ref, (), _grids(c, (), ("num_gpus", "bytes"), ("lin", "lin")),
                  ("gpus", "bytes"), rule, ((framework, pick),))


def _newest_first(parts: list[dict[str, np.ndarray]], key: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Rows of several versions of one table (newest first), one row per ``key`` tuple: the newest's."""
    cols = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
    seen: set[tuple[object, ...]] = set()
    keep = np.zeros(len(cols[key[0]]), dtype=bool)
    for i, k in enumerate(zip(*(cols[c].tolist() for c in key))):
        if k not in seen:
            seen.add(k)
            keep[i] = True
    return {c: v[keep] for c, v in cols.items()}


_MOE_COLUMNS = ("kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
                "moe_tp_size", "moe_ep_size", "distribution", "latency")


def _moe(system: str, framework: str | None) -> Family | None:
    refs = find_tables(system, "moe", "moe_perf.parquet", framework=framework)
    if not refs:
        return None
    ref = refs[0]
    parts = [read_columns(r[4], _MOE_COLUMNS) for r in refs]
    for age, part in enumerate(parts):  # 0: the newest version's rows
        part["age"] = np.full(len(part["latency"]), age)
    cols = _newest_first(parts, _MOE_COLUMNS[:-1])
    gated = np.array(["nongated" not in str(s) for s in cols["kernel_source"].tolist()], dtype=bool)
    cols = {k: v[gated] for k, v in cols.items()}
    keys = ("moe_dtype", "distribution", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
            "moe_ep_size")
    cols, kept, by_key = _per_layout(cols, keys)
    rule = ("gated experts; per layout (shape, TP, EP, routing) the rows of the kernel source the engine ran there "
            "(vLLM 0.24's block-FP8 MoE: FlashInfer CUTLASS under EP, Triton under TP), and where a layout has "
            "several, the newest version's, then the one with the most rows of its data type: " +
            ", ".join(f"{d} {s}" for d, s in kept))
    rule += "; the framework's versions merged, the newest row winning (MoE shapes are collected per model)"
    return Family("moe", ref, keys, _grids(cols, keys, ("num_tokens",), ("lin",)), ("tokens",), rule, kept, by_key)


def _per_layout(cols: dict[str, np.ndarray], keys: tuple[str, ...]
                ) -> tuple[dict[str, np.ndarray], tuple[tuple[str, str], ...], dict[tuple[object, ...], str]]:
    """The rows of one kernel source per layout (``keys``): of the sources that measured the layout, the one of
    the newest version (``age`` 0), then with the most rows of its data type.  Why per layout: an engine picks
    its MoE kernel by layout, and the collector records what it ran, so two sources of one data type can
    measure disjoint layouts; keeping one source per data type would leave the other's layouts to the
    roofline."""
    pairs = list(zip(cols["moe_dtype"].tolist(), cols["kernel_source"].tolist()))
    count = Counter(pairs)
    age: dict[tuple[str, str], int] = {}
    for pair, a in zip(pairs, cols["age"].tolist()):
        age[pair] = min(age.get(pair, a), a)
    keep = np.zeros(len(cols["kernel_source"]), dtype=bool)
    used: set[tuple[str, str]] = set()
    by_key: dict[tuple[object, ...], str] = {}
    for key, rows in _split(cols, keys).items():
        dt = str(cols["moe_dtype"][rows[0]])
        srcs = {str(s) for s in cols["kernel_source"][rows].tolist()}
        best = min(srcs, key=lambda s: (age[(dt, s)], -count[(dt, s)], s))  # noqa: B023 -- called at once
        keep[rows[cols["kernel_source"][rows] == best]] = True
        used.add((dt, best))
        by_key[key] = best
    return {k: v[keep] for k, v in cols.items()}, tuple(sorted(used)), by_key


#: The FP8 activation-quantization overheads (``quantize/<framework>/<version>/``), by family name: the file and
#: the op it measures.  TensorRT-LLM's FP8 GEMM rows are measured on weights without an input scale, so its
#: ``Linear`` runs the dynamic path and every row includes computing the activation scale (the collector's own
#: note, ``collector/trtllm/collect_gemm.py``); vLLM's include dynamic per-token quantisation.  A checkpoint with
#: static input scales (ModelOpt's FP8) pays neither: ``compute_scale`` is that difference (TensorRT-LLM: the
#: scale computation; vLLM: dynamic per-token minus static quantisation), ``scale_matrix`` the static
#: quantisation itself, which an engine fuses into the op before a GEMM whose input is already FP8.
FP8_QUANT_FILES = {"fp8_compute_scale": "computescale_perf.parquet", "fp8_scale_matrix": "scale_matrix_perf.parquet"}


def _fp8_quant(system: str, framework: str | None, name: str) -> Family | None:
    """One FP8 activation-quantization overhead (:data:`FP8_QUANT_FILES`) by (m, k): the FP8 rows, the kernel
    source with the most rows."""
    ref = find_table(system, "quantize", FP8_QUANT_FILES[name], framework=framework)
    if ref is None:
        return None
    cols = read_columns(ref[4], ("kernel_source", "quant_dtype", "m", "k", "latency"))
    fp8 = cols["quant_dtype"] == "fp8"
    if not fp8.any():
        return None
    cols = {k: v[fp8] for k, v in cols.items()}
    pick = _most_rows(cols["kernel_source"], cols["quant_dtype"])
    cols = {k: v[_kept(cols["quant_dtype"], cols["kernel_source"], pick)] for k, v in cols.items()}
    rule = "FP8 rows, kernel source " + ", ".join(pick.values())
    return Family(name, ref, (), _grids(cols, (), ("m", "k"), ("lin", "lin")), ("m", "k"), rule,
                  tuple(pick.items()))


@functools.cache
def family(system: str, name: str, framework: str | None = None) -> Family | None:
    """The measured family ``name`` of ``system`` (None when no table has it); built once per process."""
    if name == "gemm":
        return _gemm(system, framework)
    if name in ("context_attention", "decode_attention"):
        return _attention(system, framework, decode=name == "decode_attention")
    if name == "collective":
        return _nccl(system)
    if name == "moe":
        return _moe(system, framework)
    if name == "custom_all_reduce":
        return _custom_ar(system, framework)
    if name in FP8_QUANT_FILES:
        return _fp8_quant(system, framework, name)
    raise ValueError(name)
