"""The sourced roofline: kernel seconds from the catalogue's datasheet peaks and published efficiencies.

Two uses.  (1) The price of a kernel on a device (or a kernel family) without a measured table, marked
``roofline`` by the callers.  (2) The *speed of light* (:func:`sol_gemm` and the like: peaks, no efficiency
fractions) by which the measured tables extrapolate: beyond a table the nearest measured point's
efficiency ``SOL / latency`` is held and re-applied at the query's SOL.

The GEMM model (MAMF fraction of the format x tile and wave quantisation, operand traffic, epilogue) is
the one the training planner has always priced with; it lives here so every planner prices from one copy.
All functions take numpy arrays (one entry per query) so a search prices millions of candidates at once.
"""

from __future__ import annotations

import numpy as np

from dnnplace.core.catalogue import GEMM_K_BLOCK, GEMM_MIN_TILE_M, DeviceSpec

Array = np.ndarray

__all__ = ["COLLECTIVE_OPS", "DTYPE_BYTES", "bus_factor", "collective_time", "dtype_peak", "gemm_efficiency",
           "gemm_format", "gemm_time", "hbm_time", "link_figures", "sol_attention_context", "sol_attention_decode",
           "sol_collective", "sol_gemm", "sol_moe", "gemm_tile", "split_k"]

#: Bytes per element of each kernel data type the tables know (``fp8_block``: FP8 with 128-wide scales).
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "fp4": 0.5, "nvfp4": 0.5, "int8": 1.0,
               "int4": 0.5, "int8_wo": 1.0, "int4_wo": 0.5, "mxfp4": 0.5, "w4a16_mxfp4": 0.5,
               "w4a8_mxfp4_mxfp8": 0.5}


def gemm_format(dev: DeviceSpec, peak: float) -> str:
    """The tensor-core format whose dense peak ``peak`` is (BF16 when none matches): whose MAMF applies."""
    for fmt, p in dev.peak_flops.items():
        if p == peak:
            return fmt
    return "bf16"


def gemm_efficiency(m: Array, n: Array, dev: DeviceSpec, groups: Array | float = 1.0, fmt: str = "bf16",
                    sms: Array | float | None = None, k: Array | float | None = None) -> Array:
    """Fraction of peak a GEMM with an m x n output reaches: MAMF of its format x tile and wave quantisation.

    The output is cut into tiles; a partial tile costs a full one, and the last
    wave of tiles over the SMs runs partly empty (why shapes just past a multiple are slow).
    A grouped GEMM (``groups`` problems of the same shape in one kernel, the MoE experts) shares one
    wave count over the tiles of all its groups.  ``sms`` < ``sm_count``: the GEMM is limited to that many
    SMs (cuBLAS's SM count target, which Transformer Engine sets when a communication kernel overlapped
    with it keeps an SM margin): the peak scales by sms / sm_count and the waves are counted over sms.

    ``k`` given: a single GEMM whose output tiles fill at most half the SMs splits its K dimension over the
    idle ones (:func:`split_k`), so its one wave counts tiles x splits.  Why: decode GEMMs (m = the batch)
    have a few dozen output tiles; left to one wave of them they were priced far above the measured tables,
    where the libraries run them at the speed of their weight traffic (docs/kernels.md).
    """
    tm, tn = gemm_tile(m, dev, groups, k)
    used = dev.sm_count if sms is None else np.minimum(np.asarray(sms, dtype=float), dev.sm_count)
    tiles = groups * np.ceil(m / tm) * np.ceil(n / tn)
    tile_fill = groups * m * n / np.maximum(tiles * tm * tn, 1.0)
    waves = tiles * (1.0 if k is None else split_k(tiles, k, groups, used)) / used
    wave_fill = waves / np.maximum(np.ceil(waves), 1.0)
    return dev.gemm_fraction_for(fmt) * tile_fill * wave_fill * (used / dev.sm_count)


def gemm_tile(m: Array, dev: DeviceSpec, groups: Array | float = 1.0,
              k: Array | float | None = None) -> tuple[Array, float]:
    """The output tile (rows, cols) a GEMM of ``m`` rows runs with: the device's (:attr:`DeviceSpec.gemm_tile`),
    or, for a single GEMM priced with its ``k`` and fewer rows than that tile, the next power of two of at
    least :data:`GEMM_MIN_TILE_M` rows.  Why: the libraries carry small-row tile shapes for the skinny GEMMs of
    decode (CUTLASS's 16-, 32- and 64-row threadblock shapes; cuBLASLt's heuristics pick by m), so an 8-row
    GEMM does not pay the tensor-core work of 128 rows."""
    tm, tn = dev.gemm_tile
    if k is None:
        return np.asarray(float(tm)), float(tn)
    small = np.minimum(float(tm), np.maximum(GEMM_MIN_TILE_M, 2.0 ** np.ceil(np.log2(np.maximum(m, 1.0)))))
    return np.where(np.asarray(groups) == 1, small, float(tm)), float(tn)


def split_k(tiles: Array, k: Array | float, groups: Array | float, used: Array | float) -> Array:
    """How many slices a GEMM's K dimension is cut into to occupy idle SMs: ``floor(used / tiles)`` where the
    output tiles fill at most half of them, never more than K has blocks of :data:`GEMM_K_BLOCK`, and 1 for a
    grouped GEMM (one kernel over many problems schedules their tiles together; CUTLASS's grouped GEMM has
    no split-K mode).  The libraries' own rule (cuBLAS's heuristics; CUTLASS's split-K and stream-K
    decompositions, Osama et al., "Stream-K", PPoPP 2023) is not published as a formula; this one only
    says that a GEMM of few tiles is not left on a fraction of the GPU, which the tables show."""
    t = np.maximum(np.asarray(tiles, dtype=float), 1.0)
    s = np.minimum(np.floor(used / t), np.maximum(np.floor(np.asarray(k, dtype=float) / GEMM_K_BLOCK), 1.0))
    return np.where((np.asarray(groups) == 1) & (s >= 2.0), s, 1.0)


def hbm_time(nbytes: Array, dev: DeviceSpec) -> Array:
    """Seconds a streaming kernel needs to move ``nbytes`` through HBM."""
    return nbytes / (dev.hbm_bandwidth * float(dev.hbm_fraction or 0.0))


def gemm_time(m: Array, n: Array, k: Array, dev: DeviceSpec, peak: float, out_bytes: float = 2.0,
              groups: Array | float = 1.0, sms: Array | float | None = None,
              in_bytes: float = 2.0) -> Array:
    """Seconds for (m x k) @ (k x n): the main loop (slower of tensor cores and operand traffic) + epilogue.

    The epilogue writes the m x n output (``out_bytes`` per element: 2 for a 16-bit result, 8
    for Megatron's fused fp32 gradient accumulation, which reads and writes main_grad with beta = 1)
    after each tile's main loop; it is counted at streaming HBM bandwidth, not hidden.  With
    ``groups`` > 1 the same shape runs once per group in one kernel, each group reading its own
    weights: few rows per group make it bandwidth-bound (the inefficiency of small expert GEMMs).
    ``peak`` names the format too: the MAMF fraction is that of the format with this peak
    (:func:`gemm_format`).  ``sms``: the SMs the GEMM may use (:func:`gemm_efficiency`).  ``in_bytes``:
    bytes per operand element (2 for the 16-bit operands training reads; 1 for FP8, 0.5 for 4-bit weights).
    """
    hbm = dev.hbm_bandwidth * float(dev.hbm_fraction or 0.0)
    work = 2.0 * groups * m * n * k
    eff = np.maximum(gemm_efficiency(m, n, dev, groups, gemm_format(dev, peak), sms, k), 1e-12)
    compute = np.where(work > 0, work / (peak * eff), 0.0)
    operands = in_bytes * groups * (m * k + k * n) / hbm
    # a split K's FP32 partial outputs are not counted: at the few-tile sizes that split, they are a few MB
    # that stay in L2 (stream-K fixes up one partial tile per SM boundary)
    return np.maximum(compute, operands) + out_bytes * groups * m * n / hbm


def dtype_peak(dev: DeviceSpec, dtype: str) -> float:
    """Dense peak of a kernel dtype: its own format, FP8's for the FP8 variants, BF16's for weight-only."""
    key = {"fp8_block": "fp8", "nvfp4": "fp4", "mxfp4": "fp4", "int8_wo": "bf16", "int4_wo": "bf16",
           "int4": "bf16", "fp16": "bf16", "w4a16_mxfp4": "bf16", "w4a8_mxfp4_mxfp8": "fp8"}.get(dtype, dtype)
    for k in (key, "bf16", "fp16"):
        if k in dev.peak_flops:
            return float(dev.peak_flops[k])
    return float(max(dev.peak_flops.values()))


def sol_gemm(m: Array, n: Array, k: Array, dev: DeviceSpec, dtype: str = "bf16") -> Array:
    """Speed of light of a GEMM: the slower of its FLOPs at the dtype's peak and its bytes at peak HBM."""
    b = DTYPE_BYTES.get(dtype, 2.0)
    flops = 2.0 * m * n * k / dtype_peak(dev, dtype)
    traffic = (b * (m * k + k * n) + 2.0 * m * n) / dev.hbm_bandwidth
    return np.maximum(flops, traffic)


def sol_attention_context(batch: Array, seq: Array, heads: Array, kv_heads: Array, head_dim: Array | float,
                          dev: DeviceSpec, window: Array | float = 0.0, kv_bytes: float = 2.0) -> Array:
    """Speed of light of a causal prefill attention: 4 b s keys h d FLOPs at BF16 peak, or Q/K/V/O traffic."""
    keys = np.where((window > 0) & (window < seq), window - window * window / (2.0 * np.maximum(seq, 1)),
                    seq / 2.0)
    flops = 4.0 * batch * seq * keys * heads * head_dim / dtype_peak(dev, "bf16")
    traffic = batch * seq * head_dim * (4.0 * heads + 2.0 * kv_bytes * kv_heads) / dev.hbm_bandwidth
    return np.maximum(flops, traffic)


def sol_attention_decode(batch: Array, kv_len: Array, heads: Array, kv_heads: Array, head_dim: Array | float,
                         dev: DeviceSpec, window: Array | float = 0.0, kv_bytes: float = 2.0) -> Array:
    """Speed of light of one decode step's attention: reading the KV cache (K and V) once at peak HBM."""
    span = np.where((window > 0) & (window < kv_len), window, kv_len)
    traffic = batch * span * 2.0 * kv_heads * head_dim * kv_bytes / dev.hbm_bandwidth
    flops = 4.0 * batch * span * heads * head_dim / dtype_peak(dev, "bf16")
    return np.maximum(traffic, flops)


COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def bus_factor(op: str, gpus: Array) -> Array:
    """nccl-tests' bus-bandwidth factor: bytes each GPU moves per byte of message (ring algorithms).

    all_reduce 2 (n-1)/n; all_gather, reduce_scatter and all_to_all (n-1)/n (nccl-tests doc/PERFORMANCE.md).
    """
    n = np.asarray(gpus, dtype=float)
    f = (n - 1.0) / np.maximum(n, 1.0)
    return 2.0 * f if op == "all_reduce" else f


def link_figures(dev: DeviceSpec, link: str) -> tuple[float, float, float]:
    """(peak bytes/s one direction, efficiency fraction, per-step latency s) of a link kind."""
    pcie = float(dev.pcie_bandwidth)
    if link == "nvlink" and dev.nvlink_bandwidth > 0:
        return dev.nvlink_bandwidth, float(dev.nvlink_fraction or 0.0), dev.nvlink_latency_s
    if link == "network":
        return dev.internode_bandwidth, float(dev.internode_fraction or 0.0), dev.internode_latency_s
    # PCIe (or an NVLink kind on a card without NVLink): the host link.
    return (pcie or dev.nvlink_bandwidth), float(dev.nvlink_fraction or 0.0), dev.nvlink_latency_s


def sol_collective(op: str, nbytes: Array, gpus: Array, dev: DeviceSpec, link: str = "nvlink") -> Array:
    """Speed of light of a collective: the bus bytes at the link's peak, no latency."""
    bw = link_figures(dev, link)[0]
    return bus_factor(op, gpus) * nbytes / max(bw, 1.0)


def collective_time(op: str, nbytes: Array, gpus: Array, dev: DeviceSpec, link: str = "nvlink") -> Array:
    """Ring collective seconds: bus bytes at the link's measured bus bandwidth plus (n - 1) step latencies
    (2 (n - 1) for an all-reduce); 0 for one GPU."""
    bw, frac, lat = link_figures(dev, link)
    n = np.asarray(gpus, dtype=float)
    steps = (2.0 if op == "all_reduce" else 1.0) * (n - 1.0)
    t = bus_factor(op, n) * nbytes / max(bw * frac, 1.0) + steps * lat
    return np.where(n > 1, t, 0.0)


def sol_moe(tokens: Array, hidden: float, inter: float, topk: float, experts: float, tp: float, ep: float,
            dev: DeviceSpec, dtype: str = "bf16") -> Array:
    """Speed of light of a fused MoE layer on one GPU (gated experts: 3 GEMMs of hidden x inter / tp).

    Balanced routing: tokens x topk / ep expert rows per GPU; the weights of the experts it holds are
    read once (experts / ep of them, at most one per routed row).
    """
    b = DTYPE_BYTES.get(dtype, 2.0)
    rows = tokens * topk / ep
    flops = 2.0 * 3.0 * rows * hidden * inter / tp / dtype_peak(dev, dtype)
    local = np.minimum(experts / ep, np.maximum(rows, 1.0))
    traffic = (3.0 * local * hidden * inter / tp * b + 4.0 * rows * hidden) / dev.hbm_bandwidth
    return np.maximum(flops, traffic)
