"""What a catalogue device is (:class:`DeviceSpec`, :class:`AttentionTable`) and the figures several catalogue
modules cite: units, PCIe link rates, the MAMF table's reader, the HBM and NCCL-latency sources.

Split from :mod:`dnnplace.core.catalogue` so the datacenter entries there and the inference cards of
:mod:`dnnplace.core.catalogue_inference` build on one definition without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dnnplace.errors import DnnplaceError

__all__ = ["GB", "GIB", "HBM_SOURCE", "LAT_SOURCE", "MAMF_A100", "MAMF_SOURCE", "MIB", "PCIE3_X16", "PCIE4_X16",
           "PCIE5_X16",
           "AttentionTable", "DeviceSpec", "mamf_fractions", "pcie_source"]

GB = 1e9
MIB = 2**20
GIB = 2**30


@dataclass(frozen=True)
class AttentionTable:
    """Measured fused-attention throughput of one device by mask, pass and sequence length.

    ``rates[(mask, pass)][seq]`` in FLOP/s, ``mask`` "causal" or "full", ``pass`` "fwd" or "bwd", for square
    (q = kv = seq) BF16 kernels at head dim 128.  The FLOP/s count useful work only (a causal kernel's
    FLOPs are half the full one's), so the causal rates already carry the cost of the diagonal tiles.
    Kept as a table (not one fraction) because context parallelism hands the kernel shorter and
    unmasked pieces (``evaluation/llm/attention_shape.py``).
    """

    rates: dict[tuple[str, str], dict[int, float]]
    source: str


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator: peaks, capacities, links and the efficiency model's constants.

    Bandwidths are bytes/s in ONE direction per GPU.  ``gemm_fraction`` etc. are
    fractions of the matching peak that real kernels sustain; ``None`` means no
    published figure, and the planner refuses the device rather than guess.
    """

    name: str
    peak_flops: dict[str, float]  # dense tensor-core FLOP/s per precision ("bf16", "fp8")
    hbm_bandwidth: float  # bytes/s
    memory_bytes: float  # nominal capacity, as marketed (the old catalogue's "memory")
    usable_memory_bytes: float  # what CUDA reports as total memory: the planner's fit limit
    nvlink_bandwidth: float  # bytes/s per GPU, one direction, inside a node
    internode_bandwidth: float  # bytes/s per GPU, one direction, between nodes (one NIC per GPU)
    nvlink_latency_s: float  # per ring step of a collective inside a node
    internode_latency_s: float  # per ring step across nodes
    sm_count: int  # streaming multiprocessors: the wave-quantisation denominator
    gemm_tile: tuple[int, int]  # output tile (rows, cols) of the library GEMM: tile quantisation
    gemm_fraction: float | None  # best-shape large GEMM / peak (MAMF)
    attn_fwd_fraction: float | None  # fused (flash) attention forward / peak
    attn_bwd_fraction: float | None  # fused attention backward / peak
    hbm_fraction: float | None  # streaming (element-wise) kernels / HBM peak
    nvlink_fraction: float | None  # NCCL bus bandwidth / NVLink peak
    internode_fraction: float | None  # NCCL bus bandwidth / NIC line rate
    legacy_link_latency_ms: float = 0.01  # the old catalogue's one link latency (ms)
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    # MAMF fraction per tensor-core format where one is published ("bf16", "fp8", ...); a format missing
    # here uses ``gemm_fraction`` (the BF16 figure).
    gemm_fractions: dict[str, float] = field(default_factory=dict)
    # Measured fused-attention rates by mask and length; None: ``attn_*_fraction`` at every shape.
    attention: AttentionTable | None = None
    # Price GEMMs and attention from the measured kernel tables (dnnplace.kernels) instead of the fractions
    # above: the training planner's one switch per device (benchmarks print both columns).
    measured_kernels: bool = False
    # The card's host link, bytes/s in ONE direction (PCIe Gen3 / Gen4 / Gen5 x16: 15.75 / 31.5 / 63.0 GB/s after
    # 128b/130b encoding; NVLink-C2C on the Grace superchips); 0.0: not given.
    pcie_bandwidth: float = 0.0
    # GPU-to-GPU link: "" for none (collectives then go over PCIe and nvlink_bandwidth is 0.0), else its
    # generation ("nvlink4"), "-bridge" for a 2-card bridge, or another vendor's fabric ("infinity-fabric").
    nvlink: str = ""

    def gemm_fraction_for(self, fmt: str) -> float:
        """MAMF fraction of the GEMMs of format ``fmt``: its own measured figure; FP4 (no MAMF row anywhere)
        FP8's; else BF16's (``gemm_fraction``)."""
        for key in (fmt, "fp8" if fmt == "fp4" else fmt):
            if key in self.gemm_fractions:
                return float(self.gemm_fractions[key])
        return float(self.gemm_fraction or 0.0)

    @property
    def plannable(self) -> bool:
        """Has every efficiency constant a published source (else the planner refuses it)?"""
        return None not in (self.gemm_fraction, self.attn_fwd_fraction, self.attn_bwd_fraction,
                            self.hbm_fraction, self.nvlink_fraction, self.internode_fraction)

    def peak(self, precision: str) -> float:
        """Dense tensor-core FLOP/s at ``precision``; one-line error when the device has none."""
        try:
            return self.peak_flops[precision]
        except KeyError:
            have = ", ".join(sorted(self.peak_flops))
            raise DnnplaceError(f"device {self.name}: no {precision} tensor cores (has {have})") from None


#: PCIe x16, one direction: GT/s per lane x 16 lanes x 128b/130b encoding / 8 bits (Gen3 8, Gen4 16, Gen5 32 GT/s).
PCIE3_X16 = 8e9 * 16 * (128 / 130) / 8
PCIE4_X16 = 16e9 * 16 * (128 / 130) / 8
PCIE5_X16 = 32e9 * 16 * (128 / 130) / 8
_PCIE_SIG = ("PCI-SIG PCI Express base specifications 3.0 / 4.0 / 5.0: 8 / 16 / 32 GT/s per lane, 128b/130b "
             "encoding -> 15.75 / 31.5 / 63.0 GB/s per direction for x16")


def pcie_source(gen: int, lanes: int, ds: str) -> str:
    return f"{ds}: PCIe Gen{gen} x{lanes}; {_PCIE_SIG}"



MAMF_SOURCE = ("Maximum Achievable Matmul FLOPS comparison table, S. Bekman, github.com/stas00/ml-engineering "
         "compute/accelerator/README.md (mamf-finder.py; mean of 100 iterations, best shape of its sweep)")


def mamf_fractions(row: str, bf16: tuple[float, float],
                   fp8: tuple[float, float] | None = None) -> tuple[dict[str, float], str]:
    """Per-format MAMF fractions from one accelerator's rows of Bekman's table: (TFLOP/s, theory) each."""
    fr = {"bf16": bf16[0] / bf16[1]}
    text = f"{MAMF_SOURCE}: {row} BF16 {bf16[0]} of {bf16[1]} TFLOP/s"
    if fp8 is not None:
        fr["fp8"] = fp8[0] / fp8[1]
        text += f", FP8 (float8_e4m3fn) {fp8[0]} of {fp8[1]}"
    return fr, text


MAMF_A100 = mamf_fractions("NVIDIA A100 SXM", (271.2, 312))
HBM_SOURCE = ("BabelStream/STREAM triad on HBM GPUs sustains ~85-90% of peak (e.g. Deakin et al., BabelStream; "
        "NVIDIA nvbandwidth); 0.85 used for PyTorch/TE element-wise kernels")
LAT_SOURCE = "NCCL ring step latency: a few microseconds over NVLink, ~10 us over InfiniBand (nccl-tests small sizes)"
