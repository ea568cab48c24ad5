"""THE hardware catalogue: every figure the LLM planner prices with, each with its source.

One frozen :class:`DeviceSpec` per accelerator.  Vendor peaks come from datasheets;
the efficiency constants (what real kernels reach against those peaks) come from
published microbenchmarks, chosen from their sources *before* any comparison with
training measurements and never tuned per model (docs/catalogue.md, section
"The LLM planner's catalogue", lists each one).

:func:`legacy_view` returns the old five-field dictionaries of
``frontends/torch_model/devices.py`` (peak_flops, mem_bw, memory, link_bw,
link_latency_ms) with exactly the values that module uses, so it can read from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from dnnplace.core.catalogue_host import HOST_OVERHEAD, HostOverhead  # the host side of a step: part of it
from dnnplace.core.catalogue_moe import (  # the MoE and special-attention tables: part of this catalogue
    DEEPEP,
    HYBRIDEP_NVLINK,
    MLA_ATTENTION,
    SLIDING_WINDOW_ATTENTION,
    DeepEPFigures,
    FlexNVLinkTable,
    MLAAttentionTable,
    WindowAttentionTable,
)
from dnnplace.errors import DnnplaceError

__all__ = ["CATALOGUE", "DEEPEP", "DEVICE_ALIASES", "HOST_OVERHEAD", "ROOFLINE_DEFAULTS", "HostOverhead",
           "RooflineDefaults", "device_names", "resolve_device_name", "HOST_LINKS", "HYBRIDEP_NVLINK",
           "MLA_ATTENTION", "SLIDING_WINDOW_ATTENTION",
           "TRAINING_STACK", "AttentionTable", "DeepEPFigures", "DeviceSpec", "FlexNVLinkTable", "HostLink",
           "MLAAttentionTable", "TrainingStack", "WindowAttentionTable", "device_spec", "host_link", "legacy_view"]

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
_PCIE3_X16 = 8e9 * 16 * (128 / 130) / 8
_PCIE4_X16 = 16e9 * 16 * (128 / 130) / 8
_PCIE5_X16_LINK = 32e9 * 16 * (128 / 130) / 8
_PCIE_SIG = ("PCI-SIG PCI Express base specifications 3.0 / 4.0 / 5.0: 8 / 16 / 32 GT/s per lane, 128b/130b "
             "encoding -> 15.75 / 31.5 / 63.0 GB/s per direction for x16")


def _pcie_src(gen: int, lanes: int, ds: str) -> str:
    return f"{ds}: PCIe Gen{gen} x{lanes}; {_PCIE_SIG}"


_DS_H100 = "NVIDIA H100 Tensor Core GPU datasheet (SXM5 column), nvidia.com/en-us/data-center/h100"
_DS_H200 = "NVIDIA H200 Tensor Core GPU datasheet (SXM column), nvidia.com/en-us/data-center/h200"
_DS_A100 = "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM column), nvidia.com/en-us/data-center/a100"
_DS_B200 = "NVIDIA DGX B200 datasheet (per-GPU share of the 8-GPU system), nvidia.com/en-us/data-center/dgx-b200"
_MAMF = ("Maximum Achievable Matmul FLOPS comparison table, S. Bekman, github.com/stas00/ml-engineering "
         "compute/accelerator/README.md (mamf-finder.py; mean of 100 iterations, best shape of its sweep)")


def _mamf(row: str, bf16: tuple[float, float], fp8: tuple[float, float] | None = None) -> tuple[dict[str, float],
                                                                                             str]:
    """Per-format MAMF fractions from one accelerator's rows of Bekman's table: (TFLOP/s, theory) each."""
    fr = {"bf16": bf16[0] / bf16[1]}
    text = f"{_MAMF}: {row} BF16 {bf16[0]} of {bf16[1]} TFLOP/s"
    if fp8 is not None:
        fr["fp8"] = fp8[0] / fp8[1]
        text += f", FP8 (float8_e4m3fn) {fp8[0]} of {fp8[1]}"
    return fr, text


_MAMF_H100 = _mamf("NVIDIA H100 SXM", (794.5, 989), (1402.6, 1979))
# The BF16 table's H100 row says "H200 is the same"; the FP8 table has an H200 row of its own.
_MAMF_H200 = _mamf("NVIDIA H100 SXM ('H200 is the same') / NVIDIA H200 SXM", (794.5, 989), (1453.4, 1979))
_MAMF_A100 = _mamf("NVIDIA A100 SXM", (271.2, 312))
_MAMF_B200 = _mamf("NVIDIA B200 SXM", (1745.0, 2250), (3432.5, 4500))
_MAMF_GB200 = _mamf("NVIDIA GB200 SXM", (1822.0, 2500), (3615.6, 5000))
_MAMF_B300 = _mamf("NVIDIA B300 SXM", (1769.0, 2250), (3353.3, 4500))

_SDPA = ("cuDNN sdpa training benchmark, github.com/NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training "
         "(head dim 128, GQA, batch 1, BF16, non-deterministic backward; TFLOP/s of useful work: a causal "
         "kernel counts half the FLOPs)")


def _sdpa(causal_fwd: dict[int, float], causal_bwd: dict[int, float], full_fwd: dict[int, float] | None,
          full_bwd: dict[int, float] | None, where: str) -> AttentionTable:
    """An :class:`AttentionTable` from TFLOP/s columns of one cuDNN results file."""
    def flops(col: dict[int, float]) -> dict[int, float]:
        return {k: v * 1e12 for k, v in col.items()}

    rates = {("causal", "fwd"): flops(causal_fwd), ("causal", "bwd"): flops(causal_bwd)}
    if full_fwd is not None and full_bwd is not None:
        rates.update({("full", "fwd"): flops(full_fwd), ("full", "bwd"): flops(full_bwd)})
    return AttentionTable(rates, f"{_SDPA}: {where}")


_SEQ = (2048, 4096, 8192, 16384, 32768)
#: H200, cuDNN 9.19 (results/h200_919_only_cudnn/llama3.1_20260227_034703.csv, 64 q / 8 kv heads).
_SDPA_H200 = _sdpa(dict(zip(_SEQ, (484, 591, 644, 673, 688))), dict(zip(_SEQ, (370, 474, 541, 579, 581))),
                   dict(zip(_SEQ, (633, 671, 691, 702, 693))), dict(zip(_SEQ, (504, 560, 594, 612, 572))),
                   "results/h200_919_only_cudnn/llama3.1_20260227_034703.csv (H200, cuDNN 9.19)")
#: GB200, cuDNN 9.22 (results/llama3.1/gb200/llama3.1_20260424_100750.csv).
_SDPA_GB200 = _sdpa(dict(zip(_SEQ, (1097, 1408, 1574, 1708, 1622))), dict(zip(_SEQ, (885, 1148, 1332, 1328, 1226))),
                    dict(zip(_SEQ, (1433, 1599, 1771, 1697, 1634))), dict(zip(_SEQ, (1124, 1350, 1404, 1374, 1262))),
                    "results/llama3.1/gb200/llama3.1_20260424_100750.csv (GB200, cuDNN 9.22)")
#: GB300, same run (results/llama3.1/gb300/llama3.1_20260424_100757.csv).
_SDPA_GB300 = _sdpa(dict(zip(_SEQ, (1373, 1703, 1856, 1915, 1953))), dict(zip(_SEQ, (967, 1248, 1435, 1507, 1490))),
                    dict(zip(_SEQ, (1805, 1900, 2017, 2014, 1836))), dict(zip(_SEQ, (1213, 1429, 1531, 1536, 1427))),
                    "results/llama3.1/gb300/llama3.1_20260424_100757.csv (GB300, cuDNN 9.22)")
#: B200: causal only, the BF16 rows of artifacts/sdpa_fp8_benchmark_results_NVIDIA_B200.csv (cuDNN frontend
#: called directly, as Transformer Engine does; 128 q / 8 kv heads; cudnn-frontend v1.15 release).
_SEQ_B200 = (512, 1024, 2048, 4096, 8192, 16384, 32768)
_SDPA_B200 = _sdpa(dict(zip(_SEQ_B200, (244.143, 561.287, 907.547, 1141.140, 1384.231, 1475.253, 1514.764))),
                   dict(zip(_SEQ_B200, (200.594, 376.937, 545.088, 832.907, 994.850, 1151.690, 1180.250))),
                   None, None, "artifacts/sdpa_fp8_benchmark_results_NVIDIA_B200.csv, its bf16 rows (B200, "
                   "causal only: unmasked pieces priced at the causal rates)")
_FA2 = "FlashAttention-2 (Dao, 2023, arXiv:2307.08691): A100 forward up to 73% of peak, backward ~ 55-63%"
_HBM = ("BabelStream/STREAM triad on HBM GPUs sustains ~85-90% of peak (e.g. Deakin et al., BabelStream; "
        "NVIDIA nvbandwidth); 0.85 used for PyTorch/TE element-wise kernels")
_NCCL_NVL = ("nccl-tests on DGX H100 (8 GPUs, NVLink4, ring, no NVLS): all_reduce bus bandwidth ~360 GB/s "
             "of 450 GB/s per direction -> 0.8 (nccl-tests doc/PERFORMANCE.md defines busBW)")
_NCCL_IB = ("nccl-tests across nodes with one 400 Gb/s NDR NIC per GPU: ~45 GB/s bus bandwidth per NIC "
            "of 50 GB/s line rate -> 0.9")
_LAT = "NCCL ring step latency: a few microseconds over NVLink, ~10 us over InfiniBand (nccl-tests small sizes)"
_SMI = "total memory CUDA reports (torch.cuda.get_device_properties / nvidia-smi), 81559 MiB for H100 80GB HBM3"


_H200_FOR_H100 = ("ASSUMPTION for H100: the H200 measurement (same GH100 die, 132 SMs, same clocks and 700 W; "
                  "attention is compute-bound, H200's faster HBM barely matters). ")


def _attn_fractions(table: AttentionTable, peak: float) -> tuple[float, float]:
    """The causal 8k rates as fractions of the BF16 peak: the reference shape where no table is consulted."""
    return table.rates[("causal", "fwd")][8192] / peak, table.rates[("causal", "bwd")][8192] / peak


def _h100_like(name: str, hbm_bw: float, memory: float, usable: float, ds: str,
               mamf: tuple[dict[str, float], str], sdpa_note: str) -> DeviceSpec:
    fwd, bwd = _attn_fractions(_SDPA_H200, 989e12)
    return DeviceSpec(
        name=name, peak_flops={"bf16": 989e12, "fp8": 1979e12}, hbm_bandwidth=hbm_bw, memory_bytes=memory,
        usable_memory_bytes=usable, nvlink_bandwidth=450e9, internode_bandwidth=50e9,
        nvlink_latency_s=5e-6, internode_latency_s=10e-6, sm_count=132, gemm_tile=(128, 256),
        gemm_fraction=mamf[0]["bf16"], attn_fwd_fraction=fwd, attn_bwd_fraction=bwd,
        hbm_fraction=0.85, nvlink_fraction=0.8, internode_fraction=0.9,
        gemm_fractions=mamf[0], attention=_SDPA_H200, pcie_bandwidth=_PCIE5_X16_LINK, nvlink="nvlink4",
        sources={
            "peak_flops": f"{ds}: BF16 989 TFLOP/s, FP8 1979 TFLOP/s dense (half the sparse figures)",
            "pcie_bandwidth": _pcie_src(5, 16, ds), "nvlink": f"{ds}: fourth-generation NVLink",
            "hbm_bandwidth": ds, "memory_bytes": ds, "usable_memory_bytes": _SMI,
            "nvlink_bandwidth": f"{ds}: NVLink 900 GB/s bidirectional -> 450 GB/s one direction",
            "internode_bandwidth": "DGX H100/H200: one ConnectX-7 400 Gb/s NIC per GPU = 50 GB/s",
            "nvlink_latency_s": _LAT, "internode_latency_s": _LAT,
            "sm_count": "NVIDIA Hopper architecture whitepaper: H100 SXM5 has 132 SMs",
            "gemm_tile": "CUTLASS/cuBLAS Hopper bf16 warp-specialised kernels: 128x256 output tiles",
            "gemm_fraction": mamf[1], "gemm_fractions": mamf[1],
            "attention": sdpa_note + _SDPA_H200.source,
            "attn_fwd_fraction": f"{sdpa_note}{_SDPA_H200.source}: causal 8k forward",
            "attn_bwd_fraction": f"{sdpa_note}{_SDPA_H200.source}: causal 8k backward", "hbm_fraction": _HBM,
            "nvlink_fraction": _NCCL_NVL, "internode_fraction": _NCCL_IB,
        })


CATALOGUE: dict[str, DeviceSpec] = {
    "h100": _h100_like("h100", 3.35e12, 80e9, 81559 * MIB, _DS_H100, _MAMF_H100, _H200_FOR_H100),
    "h200": _h100_like("h200", 4.8e12, 141e9, 143771 * MIB, _DS_H200, _MAMF_H200, ""),
    "a100": DeviceSpec(
        name="a100", peak_flops={"bf16": 312e12}, hbm_bandwidth=2.0e12, memory_bytes=80e9,
        usable_memory_bytes=81920 * MIB, nvlink_bandwidth=300e9, internode_bandwidth=25e9,
        nvlink_latency_s=5e-6, internode_latency_s=10e-6, sm_count=108, gemm_tile=(128, 256),
        gemm_fraction=_MAMF_A100[0]["bf16"], attn_fwd_fraction=0.70, attn_bwd_fraction=0.55, hbm_fraction=0.85,
        nvlink_fraction=0.8, internode_fraction=0.9, gemm_fractions=_MAMF_A100[0],
        pcie_bandwidth=_PCIE4_X16, nvlink="nvlink3",
        sources={"peak_flops": f"{_DS_A100}: BF16 312 TFLOP/s dense",
                 "pcie_bandwidth": _pcie_src(4, 16, _DS_A100), "nvlink": f"{_DS_A100}: third-generation NVLink",
                 "hbm_bandwidth": f"{_DS_A100}: 2,039 GB/s (the old catalogue's rounded 2.0 TB/s kept)",
                 "memory_bytes": _DS_A100, "usable_memory_bytes": "nvidia-smi: 81920 MiB",
                 "nvlink_bandwidth": f"{_DS_A100}: NVLink 600 GB/s bidirectional",
                 "internode_bandwidth": "DGX A100: one 200 Gb/s HDR NIC per GPU = 25 GB/s",
                 "nvlink_latency_s": _LAT, "internode_latency_s": _LAT,
                 "sm_count": "NVIDIA A100 whitepaper: 108 SMs", "gemm_tile": "CUTLASS Ampere bf16 128x256 tiles",
                 "gemm_fraction": _MAMF_A100[1], "gemm_fractions": _MAMF_A100[1],
                 "attn_fwd_fraction": _FA2, "attn_bwd_fraction": _FA2, "hbm_fraction": _HBM,
                 "nvlink_fraction": "nccl-tests DGX A100 all_reduce ~230-240 GB/s of 300 -> 0.8",
                 "internode_fraction": "nccl-tests HDR 200 Gb/s: ~22-23 GB/s of 25 -> 0.9"}),
    "b200": DeviceSpec(
        name="b200", peak_flops={"bf16": 2.25e15, "fp8": 4.5e15, "fp4": 9e15}, hbm_bandwidth=7.7e12,
        memory_bytes=180e9, usable_memory_bytes=183359 * MIB, nvlink_bandwidth=900e9, internode_bandwidth=50e9,
        nvlink_latency_s=5e-6, internode_latency_s=10e-6, sm_count=148, gemm_tile=(256, 256),
        gemm_fraction=_MAMF_B200[0]["bf16"], attn_fwd_fraction=_attn_fractions(_SDPA_B200, 2.25e15)[0],
        attn_bwd_fraction=_attn_fractions(_SDPA_B200, 2.25e15)[1],
        hbm_fraction=0.85, nvlink_fraction=0.8, internode_fraction=0.9,
        gemm_fractions=_MAMF_B200[0], attention=_SDPA_B200, pcie_bandwidth=_PCIE5_X16_LINK, nvlink="nvlink5",
        sources={"pcie_bandwidth": _pcie_src(5, 16, "NVIDIA DGX B200 datasheet / user guide (GPU to host)"),
                 "nvlink": f"{_DS_B200}: fifth-generation NVLink",
                 "peak_flops": f"{_DS_B200}: 72 PF FP8 training / 8 GPUs = 9 PF sparse -> 4.5 PF dense FP8, "
                               "2.25 PF dense BF16; FP4 144 PF sparse / 8 -> 9 PF dense",
                 "hbm_bandwidth": "NVIDIA HGX B200 specification (HGX B200 column, per GPU): 7.7 TB/s HBM3e, "
                                  "as NVIDIA's H200 / HGX B200 comparison table gives it (hpc-ai.com, 'NVIDIA B200 "
                                  f"GPU: Architecture, GB200 Comparison'); the DGX table's 64 TB/s / 8 = 8 TB/s "
                                  f"({_DS_B200}) is the rounded system total",
                 "memory_bytes": f"{_DS_B200}: 1,440 GB / 8",
                 "usable_memory_bytes": "nvidia-smi on DGX B200: 183359 MiB per GPU (NeMo performance-script "
                                        "log, pretrain_llama3_8b -g b200)",
                 "nvlink_bandwidth": f"{_DS_B200}: NVLink5 1.8 TB/s bidirectional per GPU",
                 "internode_bandwidth": f"{_DS_B200}: 8x ConnectX-7 400 Gb/s",
                 "sm_count": "Blackwell B200: 148 SMs", "gemm_tile": "CUTLASS Blackwell 2-SM 256x256 tiles",
                 "gemm_fraction": _MAMF_B200[1], "gemm_fractions": _MAMF_B200[1] + "; FP4: no row, FP8's "
                                                                                    "fraction (ASSUMPTION)",
                 "attention": _SDPA_B200.source,
                 "attn_fwd_fraction": f"{_SDPA_B200.source}: causal 8k forward",
                 "attn_bwd_fraction": f"{_SDPA_B200.source}: causal 8k backward",
                 "hbm_fraction": _HBM, "nvlink_fraction": "ASSUMPTION: H100's NCCL fraction",
                 "internode_fraction": _NCCL_IB}),
    # Only for the old roofline view: no sourced efficiency figures, so the LLM planner refuses them.
    "v100": DeviceSpec(
        name="v100", peak_flops={"fp16": 125e12}, hbm_bandwidth=0.9e12, memory_bytes=32e9,
        usable_memory_bytes=32e9, nvlink_bandwidth=150e9, internode_bandwidth=12.5e9,
        nvlink_latency_s=1e-5, internode_latency_s=1e-5, sm_count=80, gemm_tile=(128, 128),
        gemm_fraction=None, attn_fwd_fraction=None, attn_bwd_fraction=None, hbm_fraction=None,
        nvlink_fraction=None, internode_fraction=None, pcie_bandwidth=_PCIE3_X16, nvlink="nvlink2",
        sources={"peak_flops": "NVIDIA V100 datasheet (SXM2): 125 TFLOP/s tensor",
                 "pcie_bandwidth": _pcie_src(3, 16, "NVIDIA V100 datasheet"),
                 "nvlink": "NVIDIA V100 datasheet: second-generation NVLink",
                 "hbm_bandwidth": "V100 datasheet: 900 GB/s", "nvlink_bandwidth": "V100: NVLink 300 GB/s total"}),
    "t4": DeviceSpec(
        name="t4", peak_flops={"fp16": 65e12}, hbm_bandwidth=0.32e12, memory_bytes=16e9,
        usable_memory_bytes=16e9, nvlink_bandwidth=16e9, internode_bandwidth=3e9,
        nvlink_latency_s=2e-5, internode_latency_s=2e-5, sm_count=40, gemm_tile=(128, 128),
        gemm_fraction=None, attn_fwd_fraction=None, attn_bwd_fraction=None, hbm_fraction=None,
        nvlink_fraction=None, internode_fraction=None, legacy_link_latency_ms=0.02, pcie_bandwidth=_PCIE3_X16,
        sources={"peak_flops": "NVIDIA T4 datasheet: 65 TFLOP/s FP16 tensor", "hbm_bandwidth": "T4: 320 GB/s",
                 "pcie_bandwidth": _pcie_src(3, 16, "NVIDIA T4 datasheet"), "nvlink": "T4 has no NVLink",
                 "nvlink_bandwidth": "T4 has no NVLink: PCIe Gen3 x16 16 GB/s"}),
}


_LIKE_B200 = "ASSUMPTION: B200's constant (no published figure of its own)"
_GB200 = ("NVIDIA GB200 NVL72 datasheet (per GPU of 72): BF16 5 / FP8 10 / FP4 20 PF sparse -> 2.5 / 5 / 10 PF "
          "dense at up to 1,200 W; 13.4 TB and 576 TB/s HBM3e; one 400 Gb/s ConnectX-7 per GPU")
_B300 = ("NVIDIA DGX B300 datasheet (per GPU of 8): FP8 72 PF sparse / 8 -> 4.5 PF dense, FP4 108 PF dense / 8, "
         "BF16 half of FP8; 2.3 TB HBM3e / 8; HGX B300 up to 8 TB/s; one 800 Gb/s ConnectX-8 per GPU")
_GB300 = ("NVIDIA GB300 NVL72 datasheet (per GPU of 72): BF16 5 / FP8 10 PF sparse -> 2.5 / 5 dense, FP4 1,080 "
          "PF dense / 72; 288 GB HBM3e, 576 TB/s / 72; one 800 Gb/s ConnectX-8 per GPU")


def _blackwell(name: str, peaks: dict[str, float], memory: float, usable: float, internode: float, ds: str,
               usable_src: str, mamf: tuple[dict[str, float], str], sdpa: AttentionTable,
               sdpa_note: str = "", host: tuple[float, str] | None = None) -> DeviceSpec:
    """A Blackwell GPU of the NVL72 / B300 systems (model/systems.py): its datasheet figures, its own MAMF and
    cuDNN attention rows where published (``sdpa_note`` says when a sibling's are used), B200's other constants."""
    b200 = CATALOGUE["b200"]
    own = {k: ds for k in ("peak_flops", "hbm_bandwidth", "memory_bytes", "internode_bandwidth")}
    assumed = {k: _LIKE_B200 for k in ("sm_count", "gemm_tile", "nvlink_fraction")}
    fwd, bwd = _attn_fractions(sdpa, peaks["bf16"])
    measured = {"gemm_fraction": mamf[1], "gemm_fractions": mamf[1], "attention": sdpa_note + sdpa.source,
                "attn_fwd_fraction": f"{sdpa_note}{sdpa.source}: causal 8k forward",
                "attn_bwd_fraction": f"{sdpa_note}{sdpa.source}: causal 8k backward"}
    return replace(b200, name=name, peak_flops=peaks, hbm_bandwidth=8e12, memory_bytes=memory,
                   usable_memory_bytes=usable, internode_bandwidth=internode, gemm_fraction=mamf[0]["bf16"],
                   gemm_fractions=mamf[0], attention=sdpa, attn_fwd_fraction=fwd, attn_bwd_fraction=bwd,
                   pcie_bandwidth=host[0] if host else b200.pcie_bandwidth,
                   sources={**b200.sources, **assumed, **own, **measured, "usable_memory_bytes": usable_src,
                            "pcie_bandwidth": host[1] if host else _pcie_src(5, 16, ds),
                            "nvlink": f"{ds}: fifth-generation NVLink"})


_GB200_FOR_GB300 = "ASSUMPTION: GB200's MAMF rows (no GB300 row in the table); "
_GB300_FOR_B300 = "ASSUMPTION for B300: the GB300 measurement (both Blackwell Ultra, no B300 run published). "
#: The NVL72 GPUs reach their Grace host over NVLink-C2C, not PCIe: 900 GB/s bidirectional per superchip, taken as
#: shared by its 2 GPUs (the HOST_LINKS figure below).
_C2C_HOST = (900e9 / 2 / 2, "GB200 / GB300 NVL72 product pages, Blackwell architecture technical brief: NVLink-C2C "
                            "900 GB/s bidirectional per superchip, shared by its 2 GPUs -> 225 GB/s per GPU per "
                            "direction (the host link is C2C, not PCIe)")


CATALOGUE.update({
    "gb200": _blackwell("gb200", {"bf16": 2.5e15, "fp8": 5e15, "fp4": 10e15}, 186e9, 189471 * MIB, 50e9, _GB200,
                        "nvidia-smi on GB200 NVL72 trays: 189471 MiB per GPU (1200 W limit)", _MAMF_GB200,
                        _SDPA_GB200, host=_C2C_HOST),
    "b300": _blackwell("b300", {"bf16": 2.25e15, "fp8": 4.5e15, "fp4": 13.5e15}, 288e9, 288e9, 100e9, _B300,
                       "no CUDA-reported total found: nominal (an upper bound)", _MAMF_B300, _SDPA_GB300,
                       _GB300_FOR_B300),
    "gb300": _blackwell("gb300", {"bf16": 2.5e15, "fp8": 5e15, "fp4": 15e15}, 288e9, 288e9, 100e9, _GB300,
                        "no CUDA-reported total found: nominal (an upper bound)",
                        (_MAMF_GB200[0], _GB200_FOR_GB300 + _MAMF_GB200[1]), _SDPA_GB300, host=_C2C_HOST),
})


# --- Inference GPUs (the serving planner's mixed fleets; the measured-kernel layer's roofline fallback) ----------
# Dense tensor peaks only: where a datasheet quotes sparse figures they are halved (said in each source).  GeForce
# cards: NVIDIA's whitepapers give two rates; the catalogue keeps the one with FP32 accumulate (what cuBLAS and
# PyTorch run for 16-bit GEMMs), half the FP16-accumulate figure.  A PCIe-only card has nvlink_bandwidth 0.0 and
# nvlink "": its collectives go over PCIe (priced with ROOFLINE_DEFAULTS.pcie_fraction of pcie_bandwidth).  No
# NIC is part of a card, so internode_bandwidth is 0.0 there (a system entry supplies it).  Efficiency fractions
# are set only where a published measurement exists; the rest stay None (the LLM training planner refuses the
# device) and the roofline takes ROOFLINE_DEFAULTS.

_DS_A100_40 = "NVIDIA A100 Tensor Core GPU datasheet (40GB SXM column), nvidia.com/en-us/data-center/a100"
_DS_H100_PCIE = "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe column), nvidia.com/en-us/data-center/h100"
_DS_GH200 = ("NVIDIA GH200 Grace Hopper Superchip datasheet (96GB HBM3 version), "
             "nvidia.com/en-us/data-center/grace-hopper-superchip")
_DS_L40S = "NVIDIA L40S datasheet, nvidia.com/en-us/data-center/l40s"
_DS_L4 = "NVIDIA L4 Tensor Core GPU datasheet, nvidia.com/en-us/data-center/l4"
_DS_A10G = ("Amazon EC2 G5 instances (docs.aws.amazon.com, accelerated computing instances): NVIDIA A10G, 24 GB "
            "GDDR6; NVIDIA publishes no A10G datasheet; Baseten, 'NVIDIA A10 vs A10G for ML model inference' "
            "(baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference): 24 GB GDDR6 at 600 GB/s like the A10")
_WP_GA102 = ("NVIDIA Ampere GA102 GPU Architecture whitepaper, images.nvidia.com/aem-dam/en-zz/Solutions/geforce/"
             "ampere/pdf/NVIDIA-ampere-GA102-GPU-Architecture-Whitepaper-V1.pdf")
_DS_A6000 = "NVIDIA RTX A6000 datasheet, nvidia.com/en-us/design-visualization/rtx-a6000"
_DS_PRO6000 = ("NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet, "
               "nvidia.com/en-us/data-center/rtx-pro-6000-blackwell-server-edition")
_WP_RTX_BW = ("NVIDIA RTX Blackwell GPU Architecture whitepaper, Appendix A (GeForce RTX 5090), images.nvidia.com/"
              "aem-dam/Solutions/geforce/blackwell/nvidia-rtx-blackwell-gpu-architecture.pdf")
_WP_ADA = ("NVIDIA Ada GPU Architecture whitepaper v2.1, Appendix A (GeForce RTX 4090), images.nvidia.com/aem-dam/"
           "Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf")
_SPEC_3060 = "NVIDIA GeForce RTX 3060 family specifications, nvidia.com/en-us/geforce/graphics-cards/30-series/rtx-3060"
_DS_MI300X = "AMD Instinct MI300X data sheet, amd.com/en/products/accelerators/instinct/mi300/mi300x.html"
_SPEC_B60 = "Intel Arc Pro B60 specifications, intel.com/content/www/us/en/products/sku/243916 (Arc Pro B-Series)"
#: Card memory is sized in binary units (16 Gbit GDDR chips, 8 / 16 / 24 GiB HBM stacks): a datasheet's "24 GB" is
#: 24 GiB, what nvidia-smi's MiB totals sit just below; the new entries' memory_bytes count it so.
_GIB_NOTE = " (datasheet GB = GiB: memory is sized in binary units)"
_NOMINAL_MEM = "nominal: no published CUDA / runtime total found, the datasheet capacity (an upper bound)"
_NO_NIC = "no NIC is part of the card: 0.0, a system entry supplies the network"
_PCIE_LAT = ("ASSUMPTION: a ring step over PCIe taken as the InfiniBand order of magnitude (" + _LAT + "); "
             "no PCIe small-message figure gathered")
_NO_NVLINK = "no NVLink: 0.0, collectives go over PCIe (pcie_bandwidth, ROOFLINE_DEFAULTS.pcie_fraction)"
_TILE_SM80 = ("ASSUMPTION: CUTLASS's SM80-style (mma.sync) 16-bit kernels, which Ampere, Ada and the sm_120 "
              "Blackwell cards run: 128x256 output tiles at most, as the a100 entry")
_TILE_HOPPER = "CUTLASS/cuBLAS Hopper bf16 warp-specialised kernels: 128x256 output tiles (as h100)"
_MAMF_A100_40 = (_MAMF_A100[0], _MAMF_A100[1] + " (the row names no memory size: both SXM4 parts, same die and clocks)")
_MAMF_GH200 = _mamf("NVIDIA GH200 SXM ('900W 141GiB HBM3e version')", (828.6, 989), (1535.0, 1979))
_MAMF_GH200_NOTE = ("ASSUMPTION for the 96 GB HBM3 GH200: the table's GH200 row measured the 141 GiB HBM3e version "
                    "(same H100 die, 132 SMs; a large GEMM is compute-bound). ")


def _inference_gpu(name: str, peaks: dict[str, float], bw: float, memory: float, usable: float, sms: int,
                   tile: tuple[int, int], pcie: float, sources: dict[str, str], nvlink: str = "",
                   nvlink_bw: float = 0.0, nvlink_lat: float = 1e-5) -> DeviceSpec:
    """A card with no published efficiency figures: every fraction None (the roofline takes ROOFLINE_DEFAULTS)."""
    return DeviceSpec(
        name=name, peak_flops=peaks, hbm_bandwidth=bw, memory_bytes=memory, usable_memory_bytes=usable,
        nvlink_bandwidth=nvlink_bw, internode_bandwidth=0.0, nvlink_latency_s=nvlink_lat, internode_latency_s=1e-5,
        sm_count=sms, gemm_tile=tile, gemm_fraction=None, attn_fwd_fraction=None, attn_bwd_fraction=None,
        hbm_fraction=None, nvlink_fraction=None, internode_fraction=None, pcie_bandwidth=pcie, nvlink=nvlink,
        sources={"nvlink_bandwidth": _NO_NVLINK, "nvlink": "no NVLink", "nvlink_latency_s": _PCIE_LAT,
                 "internode_bandwidth": _NO_NIC, "internode_latency_s": _PCIE_LAT, **sources,
                 "memory_bytes": sources["memory_bytes"] + _GIB_NOTE})


_a100 = CATALOGUE["a100"]
CATALOGUE.update({
    # Same die, clocks, links and measurements as the 80 GB SXM part (a100): only memory and bandwidth differ.
    "a100-40g": replace(
        _a100, name="a100-40g", hbm_bandwidth=1.555e12, memory_bytes=40 * GIB, usable_memory_bytes=40536 * MIB,
        gemm_fractions=_MAMF_A100_40[0],
        sources={**_a100.sources, "peak_flops": f"{_DS_A100_40}: BF16 312 TFLOP/s dense (624 sparse)",
                 "hbm_bandwidth": f"{_DS_A100_40}: 1,555 GB/s HBM2", "memory_bytes": f"{_DS_A100_40}: 40 GB{_GIB_NOTE}",
                 "usable_memory_bytes": "nvidia-smi on A100-SXM4-40GB: 40536 MiB",
                 "nvlink_bandwidth": f"{_DS_A100_40}: NVLink 600 GB/s bidirectional",
                 "gemm_fraction": _MAMF_A100_40[1], "gemm_fractions": _MAMF_A100_40[1],
                 "pcie_bandwidth": _pcie_src(4, 16, _DS_A100_40)}),
    "h100-pcie": _inference_gpu(
        "h100-pcie", {"bf16": 756e12, "fp16": 756e12, "fp8": 1513e12, "int8": 1513e12}, 2.0e12, 80 * GIB, 81559 * MIB,
        114, (128, 256), _PCIE5_X16_LINK, nvlink="nvlink4-bridge", nvlink_bw=300e9,
        sources={"peak_flops": f"{_DS_H100_PCIE}: BF16/FP16 1,513 and FP8/INT8 3,026 sparse -> 756 / 1,513 dense",
                 "hbm_bandwidth": f"{_DS_H100_PCIE}: 2 TB/s HBM2e", "memory_bytes": f"{_DS_H100_PCIE}: 80 GB",
                 "usable_memory_bytes": "nvidia-smi on H100 PCIe: 81559 MiB",
                 "nvlink_bandwidth": f"{_DS_H100_PCIE}: NVLink bridge 600 GB/s bidirectional between 2 cards -> 300",
                 "nvlink": f"{_DS_H100_PCIE}: NVLink bridge (2 cards)", "nvlink_latency_s": _LAT,
                 "sm_count": "NVIDIA Hopper architecture whitepaper: H100 PCIe has 114 SMs",
                 "gemm_tile": _TILE_HOPPER, "pcie_bandwidth": _pcie_src(5, 16, _DS_H100_PCIE)}),
    "gh200": replace(
        _inference_gpu(
            "gh200", {"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12, "int8": 1979e12}, 4.0e12, 96 * GIB, 97871 * MIB,
            132, (128, 256), 900e9 / 2, nvlink="nvlink4", nvlink_bw=450e9,
            sources={"peak_flops": f"{_DS_GH200}: the H100 GPU's BF16 1,979 / FP8 3,958 TFLOP/s sparse -> 989 / "
                                   "1,979 dense",
                     "hbm_bandwidth": f"{_DS_GH200}: 96 GB HBM3, 4 TB/s", "memory_bytes": f"{_DS_GH200}: 96 GB",
                     "usable_memory_bytes": "nvidia-smi on 'NVIDIA GH200 480GB' (96 GB HBM3 + 480 GB LPDDR5X): "
                                            "97871 MiB",
                     "nvlink_bandwidth": f"{_DS_GH200}: NVLink 900 GB/s bidirectional (NVL2 / NVL32) -> 450",
                     "nvlink": f"{_DS_GH200}: fourth-generation NVLink", "nvlink_latency_s": _LAT,
                     "sm_count": "NVIDIA Hopper architecture whitepaper: H100 SXM5, 132 SMs",
                     "gemm_tile": _TILE_HOPPER,
                     "pcie_bandwidth": f"{_DS_GH200}: the GPU reaches Grace over NVLink-C2C, 900 GB/s "
                                       "bidirectional -> 450 GB/s per direction (not PCIe)"}),
        gemm_fraction=_MAMF_GH200[0]["bf16"], gemm_fractions=_MAMF_GH200[0], hbm_fraction=0.85),
    "l40s": _inference_gpu(
        "l40s", {"bf16": 362.05e12, "fp16": 362.05e12, "fp8": 733e12, "int8": 733e12}, 864e9, 48 * GIB, 46068 * MIB,
        142, (128, 256), _PCIE4_X16,
        sources={"peak_flops": f"{_DS_L40S}: BF16/FP16 362.05 (733 sparse), FP8 733 (1,466 sparse), INT8 733 TOPS "
                               "(1,466 sparse) dense",
                 "hbm_bandwidth": f"{_DS_L40S}: 864 GB/s GDDR6", "memory_bytes": f"{_DS_L40S}: 48 GB GDDR6 with ECC",
                 "usable_memory_bytes": "nvidia-smi on NVIDIA L40S (ECC on): 46068 MiB",
                 "sm_count": f"{_DS_L40S}: 18,176 CUDA cores / 128 per Ada SM = 142 SMs (568 Tensor Cores / 4)",
                 "gemm_tile": _TILE_SM80, "pcie_bandwidth": _pcie_src(4, 16, _DS_L40S)}),
    "l4": _inference_gpu(
        "l4", {"bf16": 121e12, "fp16": 121e12, "fp8": 242.5e12, "int8": 242.5e12}, 300e9, 24 * GIB, 23034 * MIB,
        58, (128, 256), _PCIE4_X16,
        sources={"peak_flops": f"{_DS_L4}: BF16/FP16 242 TFLOP/s and FP8/INT8 485 sparse -> 121 / 242.5 dense",
                 "hbm_bandwidth": f"{_DS_L4}: 300 GB/s GDDR6", "memory_bytes": f"{_DS_L4}: 24 GB",
                 "usable_memory_bytes": "nvidia-smi on NVIDIA L4: 23034 MiB",
                 "sm_count": "NVIDIA L4 (AD104): 7,424 CUDA cores / 128 per Ada SM = 58 SMs "
                             "(torch.cuda multi_processor_count 58)",
                 "gemm_tile": _TILE_SM80, "pcie_bandwidth": _pcie_src(4, 16, _DS_L4)}),
    "a10g": _inference_gpu(
        "a10g", {"bf16": 70e12, "fp16": 70e12, "int8": 140e12}, 600e9, 24 * GIB, 23028 * MIB, 80, (128, 256),
        _PCIE4_X16,
        sources={"peak_flops": "ASSUMPTION: derived, no NVIDIA figure published: 80 SMs x 1,710 MHz boost x 256 "
                               "dense FP16 FMA per SM per clock with FP32 accumulate (the GA10x rate of the "
                               f"GeForce column of the {_WP_GA102}) x 2 = 70 TFLOP/s, INT8 twice; {_DS_A10G}: the "
                               "A10G trades the A10's tensor rate for CUDA-core throughput",
                 "hbm_bandwidth": _DS_A10G, "memory_bytes": _DS_A10G,
                 "usable_memory_bytes": "nvidia-smi on NVIDIA A10G: 23028 MiB",
                 "sm_count": "NVIDIA A10G (GA102): 10,240 CUDA cores / 128 per Ampere GA10x SM = 80 SMs",
                 "gemm_tile": _TILE_SM80, "pcie_bandwidth": _pcie_src(4, 16, _DS_A10G)}),
    "a6000": _inference_gpu(
        "a6000", {"bf16": 154.8e12, "fp16": 154.8e12, "int8": 309.7e12, "int4": 619.4e12}, 768e9, 48 * GIB,
        49140 * MIB, 84, (128, 256), _PCIE4_X16, nvlink="nvlink3-bridge", nvlink_bw=112.5e9 / 2,
        sources={"peak_flops": f"{_DS_A6000}: tensor 309.7 TFLOP/s sparse -> 154.8 dense (FP16/BF16, FP32 "
                               f"accumulate at full rate on RTX A6000, {_WP_GA102}: 84 SMs x 1,800 MHz); INT8 / "
                               "INT4 twice / four times",
                 "hbm_bandwidth": f"{_DS_A6000}: 768 GB/s GDDR6", "memory_bytes": f"{_DS_A6000}: 48 GB with ECC",
                 "usable_memory_bytes": "nvidia-smi on NVIDIA RTX A6000: 49140 MiB with ECC off (46068 MiB on)",
                 "nvlink_bandwidth": f"{_DS_A6000}: NVLink bridge for 2 cards, 112.5 GB/s bidirectional -> 56.25",
                 "nvlink": f"{_DS_A6000}: third-generation NVLink bridge (2 cards)",
                 "sm_count": f"{_DS_A6000}: 10,752 CUDA cores / 128 = 84 SMs", "gemm_tile": _TILE_SM80,
                 "pcie_bandwidth": _pcie_src(4, 16, _DS_A6000)}),
    "rtx-pro-6000": _inference_gpu(
        "rtx-pro-6000", {"bf16": 500e12, "fp16": 500e12, "fp8": 1000e12, "fp4": 2000e12, "int8": 1000e12},
        1597e9, 96 * GIB, 97887 * MIB, 188, (128, 256), _PCIE5_X16_LINK,
        sources={"peak_flops": f"{_DS_PRO6000}: 4,000 AI TOPS = FP4 sparse -> FP4 2,000 dense; ASSUMPTION: FP8 / "
                               "INT8 and FP16 / BF16 at a half and a quarter of it (the 5th-generation Tensor Core "
                               "ratios of the RTX 5090 column of the " + _WP_RTX_BW + ", at the full FP32-"
                               "accumulate rate of NVIDIA's professional cards): 1,000 / 500 TFLOP/s",
                 "hbm_bandwidth": f"{_DS_PRO6000}: 1,597 GB/s GDDR7 (the Workstation Edition's 1,792 GB/s is "
                                  "another SKU)",
                 "memory_bytes": f"{_DS_PRO6000}: 96 GB GDDR7 with ECC",
                 "usable_memory_bytes": "nvidia-smi on NVIDIA RTX PRO 6000 Blackwell: 97887 MiB",
                 "sm_count": f"{_DS_PRO6000}: 24,064 CUDA cores / 128 = 188 SMs", "gemm_tile": _TILE_SM80,
                 "pcie_bandwidth": _pcie_src(5, 16, _DS_PRO6000)}),
    "rtx-5090": _inference_gpu(
        "rtx-5090", {"bf16": 209.5e12, "fp16": 209.5e12, "fp8": 419e12, "fp4": 1676e12, "int8": 838e12}, 1792e9,
        32 * GIB, 32607 * MIB, 170, (128, 256), _PCIE5_X16_LINK,
        sources={"peak_flops": f"{_WP_RTX_BW}: dense with FP32 accumulate: FP16/BF16 209.5 (419 with FP16 "
                               "accumulate), FP8 419 (838), FP4 1,676 (its only FP4 row; 3,352 sparse); INT8 838 TOPS",
                 "hbm_bandwidth": f"{_WP_RTX_BW}: 1,792 GB/s GDDR7", "memory_bytes": f"{_WP_RTX_BW}: 32 GB GDDR7",
                 "usable_memory_bytes": "nvidia-smi on NVIDIA GeForce RTX 5090: 32607 MiB",
                 "sm_count": f"{_WP_RTX_BW}: 170 SMs", "gemm_tile": _TILE_SM80,
                 "pcie_bandwidth": _pcie_src(5, 16, _WP_RTX_BW)}),
    "rtx-4090": _inference_gpu(
        "rtx-4090", {"bf16": 165.2e12, "fp16": 165.2e12, "fp8": 330.3e12, "int8": 660.6e12, "int4": 1321.2e12},
        1008e9, 24 * GIB, 24564 * MIB, 128, (128, 256), _PCIE4_X16,
        sources={"peak_flops": f"{_WP_ADA}: dense with FP32 accumulate: FP16/BF16 165.2 (330.3 with FP16 "
                               "accumulate), FP8 330.3 (660.6); INT8 660.6 / INT4 1,321.2 TOPS; sparse figures "
                               "twice these",
                 "hbm_bandwidth": f"{_WP_ADA}: 1,008 GB/s GDDR6X", "memory_bytes": f"{_WP_ADA}: 24 GB GDDR6X",
                 "usable_memory_bytes": "nvidia-smi on NVIDIA GeForce RTX 4090: 24564 MiB",
                 "sm_count": f"{_WP_ADA}: 128 SMs", "gemm_tile": _TILE_SM80,
                 "pcie_bandwidth": _pcie_src(4, 16, _WP_ADA)}),
    "rtx-3090": _inference_gpu(
        "rtx-3090", {"bf16": 71e12, "fp16": 71e12, "int8": 284e12, "int4": 568e12}, 936e9, 24 * GIB, 24 * GIB, 82,
        (128, 256), _PCIE4_X16, nvlink="nvlink3-bridge", nvlink_bw=112.5e9 / 2,
        sources={"peak_flops": f"{_WP_GA102}, GeForce RTX 3090 column: dense with FP32 accumulate FP16/BF16 71 "
                               "(142 with FP16 accumulate); INT8 284 / INT4 568 TOPS; sparse figures twice these",
                 "hbm_bandwidth": f"{_WP_GA102}: 936 GB/s GDDR6X", "memory_bytes": f"{_WP_GA102}: 24 GB GDDR6X",
                 "usable_memory_bytes": _NOMINAL_MEM,
                 "nvlink_bandwidth": f"{_WP_GA102}: NVLink bridge for 2 cards, 112.5 GB/s total -> 56.25",
                 "nvlink": f"{_WP_GA102}: third-generation NVLink bridge (2 cards)",
                 "sm_count": f"{_WP_GA102}: 82 SMs", "gemm_tile": _TILE_SM80,
                 "pcie_bandwidth": _pcie_src(4, 16, _WP_GA102)}),
    "rtx-3060": _inference_gpu(
        "rtx-3060", {"bf16": 25.5e12, "fp16": 25.5e12, "int8": 102e12}, 360e9, 12 * GIB, 12288 * MIB, 28, (128, 256),
        _PCIE4_X16,
        sources={"peak_flops": "ASSUMPTION: derived, no whitepaper column for GA106: 28 SMs x 1,777 MHz boost "
                               f"({_SPEC_3060}) x the GA10x GeForce per-SM rates of the {_WP_GA102} (256 dense "
                               "FP16 FMA per clock with FP32 accumulate, 1,024 INT8 ops) -> 25.5 TFLOP/s, 102 TOPS",
                 "hbm_bandwidth": f"{_SPEC_3060}: 12 GB GDDR6, 192-bit, 15 Gbps = 360 GB/s",
                 "memory_bytes": f"{_SPEC_3060}: 12 GB", "usable_memory_bytes": "nvidia-smi on NVIDIA GeForce "
                                                                                 "RTX 3060 (12 GB): 12288 MiB",
                 "sm_count": f"{_SPEC_3060}: 3,584 CUDA cores / 128 = 28 SMs", "gemm_tile": _TILE_SM80,
                 "pcie_bandwidth": _pcie_src(4, 16, _SPEC_3060)}),
    "mi300x": replace(
        _inference_gpu(
            "mi300x", {"bf16": 1307.4e12, "fp16": 1307.4e12, "fp8": 2614.9e12, "int8": 2614.9e12}, 5.3e12, 192 * GIB,
            192 * GIB, 304, (256, 256), _PCIE5_X16_LINK, nvlink="infinity-fabric", nvlink_bw=896e9 / 2,
            sources={"peak_flops": f"{_DS_MI300X}: dense FP16/BF16 1,307.4, FP8 2,614.9 TFLOP/s, INT8 2,614.9 "
                                   "TOPS (sparse twice these)",
                     "hbm_bandwidth": f"{_DS_MI300X}: 5.3 TB/s HBM3", "memory_bytes": f"{_DS_MI300X}: 192 GB HBM3",
                     "usable_memory_bytes": _NOMINAL_MEM,
                     "nvlink_bandwidth": f"{_DS_MI300X}: 7 AMD Infinity Fabric links, 896 GB/s peak aggregate "
                                         "(bidirectional) -> 448 per direction, 64 GB/s to each of the 7 peers",
                     "nvlink": f"{_DS_MI300X}: Infinity Fabric, no NVLink", "nvlink_latency_s": _LAT,
                     "sm_count": f"{_DS_MI300X}: 304 compute units", "pcie_bandwidth": _pcie_src(5, 16, _DS_MI300X),
                     "gemm_tile": "ASSUMPTION: 256x256 macro tiles of hipBLASLt's MFMA kernels (no tile figure "
                                  "published per shape)"}),
        gemm_fraction=668.4 / 1307.4, gemm_fractions={"bf16": 668.4 / 1307.4}),
    "b60": _inference_gpu(
        "b60", {"bf16": 98.5e12, "fp16": 98.5e12, "int8": 197e12}, 456e9, 24 * GIB, 24 * GIB, 20, (256, 256),
        _PCIE5_X16_LINK / 2,
        sources={"peak_flops": f"{_SPEC_B60}: 197 peak INT8 TOPS (XMX, dense); ASSUMPTION: FP16/BF16 half of it, "
                               "the Xe2 XMX ratio (2,048 FP16 / 4,096 INT8 ops per Xe core per clock x 20 cores x "
                               "2.4 GHz = 98.3 / 196.6)",
                 "hbm_bandwidth": f"{_SPEC_B60}: 24 GB GDDR6, 192-bit, 19 Gbps = 456 GB/s",
                 "memory_bytes": f"{_SPEC_B60}: 24 GB", "usable_memory_bytes": _NOMINAL_MEM,
                 "sm_count": f"{_SPEC_B60}: 20 Xe2 cores (the SM's counterpart)",
                 "gemm_tile": "ASSUMPTION: 256x256 work-group tiles of oneDNN's XMX GEMMs (no figure published)",
                 "pcie_bandwidth": _pcie_src(5, 8, _SPEC_B60) + ": x8 at Gen5 = 31.5 GB/s per direction"}),
})
CATALOGUE["mi300x"].sources["gemm_fraction"] = CATALOGUE["mi300x"].sources["gemm_fractions"] = (
    f"{_MAMF}: AMD MI300X BF16 668.4 TFLOP/s (its theory column 1300; as a fraction of the datasheet's 1,307.4 "
    "so the rate stays 668.4), PYTORCH_TUNABLEOP_ENABLED=1; no FP8 measurement in the table")
CATALOGUE["gh200"].sources.update({
    "gemm_fraction": _MAMF_GH200_NOTE + _MAMF_GH200[1], "gemm_fractions": _MAMF_GH200_NOTE + _MAMF_GH200[1],
    "hbm_fraction": _HBM})

#: Other names of catalogue devices: the canonical key each resolves to.
DEVICE_ALIASES: dict[str, str] = {
    "a100-80g": "a100", "h100-sxm": "h100", "h200-sxm": "h200", "rtx-a6000": "a6000",
    "rtx-pro-6000-server": "rtx-pro-6000",
}


@dataclass(frozen=True)
class RooflineDefaults:
    """Generic efficiency fractions for a device whose own fraction is None (no published measurement): what the
    roofline of the measured-kernel layer and the serving planner fall back to, each with its source."""

    gemm_fraction: float  # large 16-bit GEMM / dense tensor peak
    hbm_fraction: float  # streaming kernels / memory bandwidth (HBM or GDDR)
    pcie_fraction: float  # NCCL all-reduce bus bandwidth / PCIe link, for cards without NVLink
    pcie_copy_fraction: float  # one pinned host <-> device copy / PCIe link
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def fraction(self, field_name: str, device: DeviceSpec) -> float:
        """The device's own fraction where published, else this fallback."""
        own = getattr(device, field_name, None)
        return float(own) if own is not None else float(getattr(self, field_name))


#: Bekman's BF16 MAMF table, every row with a figure: (measured, theory) TFLOP/s.
_MAMF_BF16_ROWS = {"Intel Gaudi 2": (418.7, 432), "NVIDIA A100 SXM": (271.2, 312), "NVIDIA GH200 SXM": (828.6, 989),
                   "NVIDIA A100 PCIe": (252.9, 312), "NVIDIA H100 SXM": (794.5, 989),
                   "NVIDIA B300 SXM": (1769.0, 2250), "NVIDIA B200 SXM": (1745.0, 2250),
                   "Intel Gaudi 3": (1243.0, 1677), "NVIDIA GB200 SXM": (1822.0, 2500),
                   "AMD MI355X": (1565.0, 2300), "AMD MI325X": (784.9, 1300), "AMD MI300X": (668.4, 1300)}


def _median(values: list[float]) -> float:
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


_PCIE_NCCL = ("NVIDIA/nccl issue #1639 (github.com/NVIDIA/nccl/issues/1639): 8x GeForce RTX 5090 on PCIe Gen5 "
              "x16, nccl-tests all_reduce_perf up to 8 GB, bus bandwidth 28 GB/s at 8 GPUs (35 GB/s at 4); the "
              "maintainer: on PCI systems the CPU and memory bound it -> 28 / 63.0 = 0.44 of the link")
ROOFLINE_DEFAULTS = RooflineDefaults(
    gemm_fraction=round(_median([m / t for m, t in _MAMF_BF16_ROWS.values()]), 3),
    hbm_fraction=0.85,
    pcie_fraction=round(28e9 / _PCIE5_X16_LINK, 3),
    pcie_copy_fraction=round(55.6e9 / _PCIE5_X16_LINK, 3),
    sources={
        "gemm_fraction": f"{_MAMF}: the median efficiency of its {len(_MAMF_BF16_ROWS)} BF16 rows "
                         f"({', '.join(_MAMF_BF16_ROWS)}) = 0.781",
        "hbm_fraction": "ASSUMPTION for GDDR cards: the catalogue's HBM figure (" + _HBM + "); no BabelStream "
                        "figure for GDDR6/6X/7 cards gathered",
        "pcie_fraction": _PCIE_NCCL,
        "pcie_copy_fraction": "NVIDIA technical blog on nvbandwidth (github.com/NVIDIA/nvbandwidth): "
                              "host_to_device_memcpy_ce on a PCIe Gen5 x16 GPU ~55.6 GB/s of 63.0 -> 0.88",
    })


def device_names(aliases: bool = False) -> tuple[str, ...]:
    """The catalogue's device keys, in catalogue order; with ``aliases`` the other accepted names after them."""
    return tuple(CATALOGUE) + (tuple(DEVICE_ALIASES) if aliases else ())


def resolve_device_name(name: str) -> str:
    """The catalogue key ``name`` (or an alias of it) stands for; the lower-cased name itself when unknown."""
    key = name.lower()
    return DEVICE_ALIASES.get(key, key)


def device_spec(name: str) -> DeviceSpec:
    """The catalogue entry ``name``; one-line error naming the known devices otherwise."""
    try:
        return CATALOGUE[resolve_device_name(name)]
    except KeyError:
        # catalogue keys only (aliases: DEVICE_ALIASES), so the line stays short enough for plan-file errors
        raise DnnplaceError(f"unknown device '{name}'; the catalogue has: {', '.join(CATALOGUE)}") from None


@dataclass(frozen=True)
class HostLink:
    """How one GPU of a system reaches its host's memory: what activation CPU offloading is priced with.

    ``bandwidth``: bytes/s per GPU in ONE direction (a link shared by several GPUs already divided);
    ``fraction``: what a pinned-memory copy-engine transfer sustains of it; ``memory_bytes``: host memory per
    GPU (the system's memory over the GPUs that share it)."""

    link: str  # "pcie-gen5-x16" | "nvlink-c2c"
    bandwidth: float
    fraction: float
    memory_bytes: float
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def copy_bandwidth(self) -> float:
        """Bytes/s one device-to-host (or host-to-device) copy of this GPU sustains."""
        return self.bandwidth * self.fraction


#: PCIe 5.0: 32 GT/s per lane, 128b/130b encoding -> 3.94 GB/s per lane per direction, 63.0 GB/s for x16.
_PCIE5_X16 = 32e9 * 16 * (128 / 130) / 8
_PCIE5 = ("PCI-SIG PCI Express 5.0 base specification: 32 GT/s per lane, 128b/130b encoding -> 63.0 GB/s per "
          "direction for x16; DGX datasheets / user guides: each GPU reaches the host CPUs over PCIe Gen5 x16 "
          "(PCIe switches)")
_NVBW = ("NVIDIA technical blog on nvbandwidth (github.com/NVIDIA/nvbandwidth): host_to_device_memcpy_ce example "
         "on a PCIe Gen5 x16 GPU, ~55.6 GB/s -> 55.6 / 63.0 = 0.88 of the link")
_C2C = ("NVIDIA GB200 NVL72 / GB300 NVL72 product pages and the Blackwell architecture technical brief: each "
        "superchip joins one Grace CPU to two Blackwell GPUs over NVLink-C2C at 900 GB/s bidirectional; taken "
        "as shared by the two GPUs -> 450 GB/s bidirectional = 225 GB/s per GPU per direction")
_C2C_FRACTION = "ASSUMPTION: the PCIe copy-engine fraction of the nvbandwidth example (no C2C figure published)"
_GRACE_MEM = ("NVIDIA GB200 NVL72 / GB300 NVL72 product pages: up to 17 TB LPDDR5X per rack = 480 GB per Grace CPU "
              "(Grace datasheet: up to 480 GB LPDDR5X), shared by the superchip's 2 GPUs -> 240 GB per GPU")


def _pcie(system_memory: float, ds: str) -> HostLink:
    return HostLink("pcie-gen5-x16", _PCIE5_X16, 55.6e9 / _PCIE5_X16, system_memory / 8,
                    sources={"bandwidth": _PCIE5, "fraction": _NVBW,
                             "memory_bytes": f"{ds}: {system_memory / 1e12:g} TB system memory / 8 GPUs"})


def _c2c() -> HostLink:
    return HostLink("nvlink-c2c", 900e9 / 2 / 2, 55.6e9 / _PCIE5_X16, 480e9 / 2,
                    sources={"bandwidth": _C2C, "fraction": _C2C_FRACTION, "memory_bytes": _GRACE_MEM})


#: Host links of the systems each GPU ships in (core/systems.py): the DGX systems' PCIe Gen5 x16 to 2 TB of
#: system memory, the NVL72 racks' NVLink-C2C to Grace's LPDDR5X.  A GPU without an entry (a100: no offload
#: figures gathered) is refused activation offloading in one line.
HOST_LINKS: dict[str, HostLink] = {
    "h100": _pcie(2e12, "NVIDIA DGX H100 datasheet: 2 TB system memory"),
    "h200": _pcie(2e12, "NVIDIA DGX H200 datasheet: 2 TB system memory"),
    "b200": _pcie(2e12, "NVIDIA DGX B200 datasheet: 2 TB system memory (configurable to 4 TB)"),
    "b300": _pcie(2e12, "NVIDIA DGX B300 datasheet: 2 TB system memory (configurable to 4 TB)"),
    "gb200": _c2c(),
    "gb300": _c2c(),
}


def host_link(name: str) -> HostLink | None:
    """The host link of GPU ``name``'s system, or None where the catalogue has none."""
    return HOST_LINKS.get(name.lower())


#: One host CPU core, for the ``cpuLatency`` of a catalogue-device profile (nothing is executed there):
#: peak FLOP/s and memory bandwidth one core of a current x86 server reaches with AVX2/AVX-512 FMA
#: (about 150 GFLOP/s fp32) and a single-stream copy (about 25 GB/s) -- see docs/catalogue.md.
CPU_CORE: dict[str, float] = {"peak_flops": 150e9, "mem_bw": 25e9}


def legacy_view() -> dict[str, dict[str, float]]:
    """The profiler's roofline entries (frontends/torch_model/devices.py): five fields per accelerator,
    same values as before the LLM catalogue, plus the ``cpu`` core entry."""
    view: dict[str, dict[str, float]] = {}
    for name in ("v100", "t4", "a100", "h100", "h200"):
        d = CATALOGUE[name]
        view[name] = {"peak_flops": next(iter(d.peak_flops.values())), "mem_bw": d.hbm_bandwidth,
                      "memory": d.memory_bytes, "link_bw": d.nvlink_bandwidth,
                      "link_latency_ms": d.legacy_link_latency_ms}
    view["cpu"] = dict(CPU_CORE)
    return view


@dataclass(frozen=True)
class TrainingStack:
    """Figures of the training software (Megatron-Core / NeMo / Transformer Engine) the LLM planner prices
    with, beside the hardware's: byte counts and kernel facts, each with its source; the same for every model."""

    weight_bytes: float = 2.0  # bf16 weights
    grad_bytes: float = 4.0  # fp32 main gradients (NeMo's grad_reduce_in_fp32)
    optimizer_bytes: float = 12.0  # fp32 master copy + Adam's two fp32 moments
    buffer_fixed_bytes: float = 2e9  # CUDA context, cuBLAS workspaces, NCCL and TE comm-overlap buffers
    fragmentation: float = 0.05  # share of activation memory the caching allocator cannot hand out
    bucket_params: float = 40e6  # Megatron's DDP bucket
    wgrad_out_bytes: float = 8.0  # fp32 main_grad read + written by the weight-gradient GEMM epilogue
    flash_bwd_ratio: float = 2.5  # flash attention backward FLOPs / forward FLOPs
    ce_bytes_fwd: float = 18.0  # bytes per logit, vocab-parallel cross entropy forward
    ce_bytes_bwd: float = 6.0  # and backward
    # SMs the pipelined reduce-scatter overlapped with the out projection's and fc2's forward GEMMs takes
    # from them (set_sm_margin), by (GPU generation, GEMM format): (proj_fprop, fc2_fprop).
    tp_overlap_sm_margin: dict[tuple[str, str], tuple[int, int]] = field(default_factory=lambda: {
        ("hopper", "bf16"): (24, 16), ("hopper", "fp8"): (24, 16),
        ("blackwell", "bf16"): (32, 16), ("blackwell", "fp8"): (1, 1), ("blackwell", "fp4"): (1, 1)})
    fsdp_prefetch: int = 1  # FSDP units gathered ahead of the one computing (ZeRO-3)
    attn_query_tile: int = 128  # query rows per thread block of a fused attention kernel
    bf16_grad_bytes: float = 2.0  # a bf16 main-gradient buffer (the grad_dtype knob)
    # Bytes per logit live at the memory peak (the end of the forward) by cross-entropy implementation
    # (TrainingJob.cross_entropy): Megatron-Core's own (a 16-bit logit + its fp32 copy) or TE's (16-bit only).
    ce_logit_bytes: dict[str, float] = field(default_factory=lambda: {"megatron": 6.0, "te": 2.0})
    sources: dict[str, str] = field(default_factory=lambda: {
        "weight_bytes": "Megatron-LM theoretical_memory_usage.py: 18 bytes/param without the distributed "
                        "optimizer, 6 + 12/dp with it (bf16 weight 2, fp32 grad 4, fp32 master + 2 moments 12)",
        "grad_bytes": "NeMo llama31 recipes: DistributedDataParallelConfig(grad_reduce_in_fp32=True)",
        "optimizer_bytes": "Megatron-LM theoretical_memory_usage.py (as weight_bytes)",
        "buffer_fixed_bytes": "CUDA context ~0.5 GB (CUDA programming guide, lazy loading notes) plus cuBLAS "
                              "workspaces and NCCL / TE userbuffers channel buffers: an allowance, not a "
                              "measurement of any one run",
        "fragmentation": "PyTorch CUDA semantics notes: the caching allocator rounds and splits blocks, so "
                         "live bytes stay below reserved bytes; an allowance",
        "bucket_params": "megatron.core.distributed.DistributedDataParallelConfig.bucket_size default (40M)",
        "wgrad_out_bytes": "Megatron gradient_accumulation_fusion: the wgrad GEMM accumulates into fp32 "
                           "main_grad (beta = 1): read 4 + write 4 bytes per element",
        "flash_bwd_ratio": "FlashAttention (Dao 2022), Sec. 3.1: the backward runs 5 matmuls of the "
                           "forward's size against its 2 (it recomputes QK^T)",
        "ce_bytes_fwd": "Megatron vocab_parallel_cross_entropy passes: read 16-bit logits, write fp32, "
                        "read for the max, read + write for exp, read for the sum",
        "ce_bytes_bwd": "its backward reads the fp32 softmax and writes the 16-bit gradient",
        "tp_overlap_sm_margin": "NeMo recipes/tp_overlap_configs/userbuffers.py, the Llama 3 / 3.1 pretraining "
                                "configs (h8192 tp4 H100, h8192 tp2 B200, h16384 tp8 cp2 H100, h16384 tp4 cp2 "
                                "B200): proj_fprop / fc2_fprop as PipelineOverlapCfg(num_sm=N, set_sm_margin="
                                "True) -- H100 BF16 and FP8 proj 24, B200 BF16 proj 32 -- or, B200 FP8, "
                                "RingExchangeOverlapCfg(num_sm=1, set_sm_margin=True); fc2, where the configs "
                                "differ (16 vs 8), TE's default pipeline num_sm=16 (transformer_engine/pytorch/"
                                "module/base.py initialize_ub); TE comm_gemm_overlap.cpp: _math_sms = sm_count - "
                                "num_comm_sm when set_sm_margin. FP4 GEMMs: FP8's (no NVFP4 config published)",
        "attn_query_tile": "FlashAttention-2 (Dao 2023, arXiv:2307.08691): one thread block per block of query "
                           "rows, block sizes of 64 or 128 rows tuned per head dim; FlashAttention-3 (Shah et al. "
                           "2024, arXiv:2407.08608): 128-row query tiles at head dim 128 on Hopper. Extends a "
                           "measured attention table below its shortest length (evaluation/attention_shape.py)",
        "fsdp_prefetch": "torch.distributed.fsdp.fully_shard (FSDP2): implicit forward prefetch of the next "
                         "module and explicit backward prefetch of one (set_modules_to_backward_prefetch); "
                         "Megatron-FSDP's default prefetches one bucket ahead",
        "bf16_grad_bytes": "Megatron-LM --grad-reduce-in-bf16 (accumulate_allreduce_grads_in_fp32=False); NeMo "
                           "performance scripts grad_reduce_in_fp32=False; launcher grad_sync_dtype=bf16",
        "ce_logit_bytes": "megatron: Megatron-Core tensor_parallel/cross_entropy.py (_VocabParallelCrossEntropy) and "
                          "fusions/fused_cross_entropy.py (cross_entropy_fusion_impl='native'): "
                          "calculate_logits_max casts the 16-bit logits to an fp32 copy (4 bytes) while GPTModel "
                          "still holds the 16-bit output_layer output (2), and the fp32 softmax is what is saved; "
                          "te: language_module.compute_language_model_loss with cross_entropy_fusion_impl='te' "
                          "calls TE's parallel_cross_entropy (transformer_engine/pytorch/cross_entropy.py, "
                          "triton/cross_entropy.py): it reads the 16-bit logits with an online softmax, saves them "
                          "and 3 fp32 values per token (m, d, X_y), and writes the gradient in place in the "
                          "16-bit logits -- no fp32 copy",
    }, compare=False)

    def sm_margin(self, generation: str, fmt: str) -> tuple[int, int]:
        """(proj, fc2) forward-GEMM SM margins under TP comm overlap; (0, 0) where no config is published
        (Ampere)."""
        return self.tp_overlap_sm_margin.get((generation, fmt), (0, 0))


#: The training stack every LLM plan is priced for (one set of figures, never per model).
TRAINING_STACK = TrainingStack()

