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
from dnnplace.core.catalogue_inference import DEVICE_ALIASES, ROOFLINE_DEFAULTS, RooflineDefaults, inference_gpus
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
from dnnplace.core.device import (
    HBM_SOURCE,
    LAT_SOURCE,
    MAMF_A100,
    MIB,
    PCIE3_X16,
    PCIE4_X16,
    PCIE5_X16,
    AttentionTable,
    DeviceSpec,
    mamf_fractions,
    pcie_source,
)
from dnnplace.errors import DnnplaceError

__all__ = ["CATALOGUE", "DEEPEP", "DEVICE_ALIASES", "HOST_OVERHEAD", "ROOFLINE_DEFAULTS", "HostOverhead",
           "RooflineDefaults", "device_names", "resolve_device_name", "HOST_LINKS", "HYBRIDEP_NVLINK",
           "MLA_ATTENTION", "SLIDING_WINDOW_ATTENTION",
           "TRAINING_STACK", "AttentionTable", "DeepEPFigures", "DeviceSpec", "FlexNVLinkTable", "HostLink",
           "MLAAttentionTable", "TrainingStack", "WindowAttentionTable", "device_spec", "host_link", "legacy_view"]

_DS_H100 = "NVIDIA H100 Tensor Core GPU datasheet (SXM5 column), nvidia.com/en-us/data-center/h100"
_DS_H200 = "NVIDIA H200 Tensor Core GPU datasheet (SXM column), nvidia.com/en-us/data-center/h200"
_DS_A100 = "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM column), nvidia.com/en-us/data-center/a100"
_DS_B200 = "NVIDIA DGX B200 datasheet (per-GPU share of the 8-GPU system), nvidia.com/en-us/data-center/dgx-b200"


_MAMF_H100 = mamf_fractions("NVIDIA H100 SXM", (794.5, 989), (1402.6, 1979))
# The BF16 table's H100 row says "H200 is the same"; the FP8 table has an H200 row of its own.
_MAMF_H200 = mamf_fractions("NVIDIA H100 SXM ('H200 is the same') / NVIDIA H200 SXM", (794.5, 989), (1453.4, 1979))
_MAMF_B200 = mamf_fractions("NVIDIA B200 SXM", (1745.0, 2250), (3432.5, 4500))
_MAMF_GB200 = mamf_fractions("NVIDIA GB200 SXM", (1822.0, 2500), (3615.6, 5000))
_MAMF_B300 = mamf_fractions("NVIDIA B300 SXM", (1769.0, 2250), (3353.3, 4500))

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
_NCCL_NVL = ("nccl-tests on DGX H100 (8 GPUs, NVLink4, ring, no NVLS): all_reduce bus bandwidth ~360 GB/s "
             "of 450 GB/s per direction -> 0.8 (nccl-tests doc/PERFORMANCE.md defines busBW)")
_NCCL_IB = ("nccl-tests across nodes with one 400 Gb/s NDR NIC per GPU: ~45 GB/s bus bandwidth per NIC "
            "of 50 GB/s line rate -> 0.9")
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
        gemm_fractions=mamf[0], attention=_SDPA_H200, pcie_bandwidth=PCIE5_X16, nvlink="nvlink4",
        sources={
            "peak_flops": f"{ds}: BF16 989 TFLOP/s, FP8 1979 TFLOP/s dense (half the sparse figures)",
            "pcie_bandwidth": pcie_source(5, 16, ds), "nvlink": f"{ds}: fourth-generation NVLink",
            "hbm_bandwidth": ds, "memory_bytes": ds, "usable_memory_bytes": _SMI,
            "nvlink_bandwidth": f"{ds}: NVLink 900 GB/s bidirectional -> 450 GB/s one direction",
            "internode_bandwidth": "DGX H100/H200: one ConnectX-7 400 Gb/s NIC per GPU = 50 GB/s",
            "nvlink_latency_s": LAT_SOURCE, "internode_latency_s": LAT_SOURCE,
            "sm_count": "NVIDIA Hopper architecture whitepaper: H100 SXM5 has 132 SMs",
            "gemm_tile": "CUTLASS/cuBLAS Hopper bf16 warp-specialised kernels: 128x256 output tiles",
            "gemm_fraction": mamf[1], "gemm_fractions": mamf[1],
            "attention": sdpa_note + _SDPA_H200.source,
            "attn_fwd_fraction": f"{sdpa_note}{_SDPA_H200.source}: causal 8k forward",
            "attn_bwd_fraction": f"{sdpa_note}{_SDPA_H200.source}: causal 8k backward", "hbm_fraction": HBM_SOURCE,
            "nvlink_fraction": _NCCL_NVL, "internode_fraction": _NCCL_IB,
        })


#: K extent of one GEMM main-loop block (CUTLASS's 16-bit tensor-core tiles: 128x256x64 on Ampere and Hopper,
#: cutlass/include/cutlass/gemm/device/default_gemm_configuration.h): the finest slice split-K cuts K into.
GEMM_K_BLOCK = 64
#: Fewest output rows of a library GEMM tile: the tensor-core MMA's M (mma.sync m16n8k16 since Ampere; CUTLASS's
#: smallest 16-bit threadblock shapes are 16 x N, cutlass/include/cutlass/gemm/warp/default_mma_tensor_op.h).
GEMM_MIN_TILE_M = 16.0

CATALOGUE: dict[str, DeviceSpec] = {
    "h100": _h100_like("h100", 3.35e12, 80e9, 81559 * MIB, _DS_H100, _MAMF_H100, _H200_FOR_H100),
    "h200": _h100_like("h200", 4.8e12, 141e9, 143771 * MIB, _DS_H200, _MAMF_H200, ""),
    "a100": DeviceSpec(
        name="a100", peak_flops={"bf16": 312e12}, hbm_bandwidth=2.0e12, memory_bytes=80e9,
        usable_memory_bytes=79.15 * 2**30, nvlink_bandwidth=300e9, internode_bandwidth=25e9,
        nvlink_latency_s=5e-6, internode_latency_s=10e-6, sm_count=108, gemm_tile=(128, 256),
        gemm_fraction=MAMF_A100[0]["bf16"], attn_fwd_fraction=0.70, attn_bwd_fraction=0.55, hbm_fraction=0.85,
        nvlink_fraction=0.8, internode_fraction=0.9, gemm_fractions=MAMF_A100[0],
        pcie_bandwidth=PCIE4_X16, nvlink="nvlink3",
        sources={"peak_flops": f"{_DS_A100}: BF16 312 TFLOP/s dense",
                 "pcie_bandwidth": pcie_source(4, 16, _DS_A100), "nvlink": f"{_DS_A100}: third-generation NVLink",
                 "hbm_bandwidth": f"{_DS_A100}: 2,039 GB/s (the old catalogue's rounded 2.0 TB/s kept)",
                 "memory_bytes": _DS_A100,
                 "usable_memory_bytes": "the total CUDA reports on an 80 GB A100, as vLLM's memory profile logs "
                                        "it (github.com/vllm-project/vllm/issues/10533: total_gpu_memory=79.15GiB);"
                                        " nvidia-smi shows 81920 MiB",
                 "nvlink_bandwidth": f"{_DS_A100}: NVLink 600 GB/s bidirectional",
                 "internode_bandwidth": "DGX A100: one 200 Gb/s HDR NIC per GPU = 25 GB/s",
                 "nvlink_latency_s": LAT_SOURCE, "internode_latency_s": LAT_SOURCE,
                 "sm_count": "NVIDIA A100 whitepaper: 108 SMs", "gemm_tile": "CUTLASS Ampere bf16 128x256 tiles",
                 "gemm_fraction": MAMF_A100[1], "gemm_fractions": MAMF_A100[1],
                 "attn_fwd_fraction": _FA2, "attn_bwd_fraction": _FA2, "hbm_fraction": HBM_SOURCE,
                 "nvlink_fraction": "nccl-tests DGX A100 all_reduce ~230-240 GB/s of 300 -> 0.8",
                 "internode_fraction": "nccl-tests HDR 200 Gb/s: ~22-23 GB/s of 25 -> 0.9"}),
    "b200": DeviceSpec(
        name="b200", peak_flops={"bf16": 2.25e15, "fp8": 4.5e15, "fp4": 9e15}, hbm_bandwidth=7.7e12,
        memory_bytes=180e9, usable_memory_bytes=183359 * MIB, nvlink_bandwidth=900e9, internode_bandwidth=50e9,
        nvlink_latency_s=5e-6, internode_latency_s=10e-6, sm_count=148, gemm_tile=(256, 256),
        gemm_fraction=_MAMF_B200[0]["bf16"], attn_fwd_fraction=_attn_fractions(_SDPA_B200, 2.25e15)[0],
        attn_bwd_fraction=_attn_fractions(_SDPA_B200, 2.25e15)[1],
        hbm_fraction=0.85, nvlink_fraction=0.8, internode_fraction=0.9,
        gemm_fractions=_MAMF_B200[0], attention=_SDPA_B200, pcie_bandwidth=PCIE5_X16, nvlink="nvlink5",
        sources={"pcie_bandwidth": pcie_source(5, 16, "NVIDIA DGX B200 datasheet / user guide (GPU to host)"),
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
                 "hbm_fraction": HBM_SOURCE, "nvlink_fraction": "ASSUMPTION: H100's NCCL fraction",
                 "internode_fraction": _NCCL_IB}),
    # Only for the old roofline view: no sourced efficiency figures, so the LLM planner refuses them.
    "v100": DeviceSpec(
        name="v100", peak_flops={"fp16": 125e12}, hbm_bandwidth=0.9e12, memory_bytes=32e9,
        usable_memory_bytes=32e9, nvlink_bandwidth=150e9, internode_bandwidth=12.5e9,
        nvlink_latency_s=1e-5, internode_latency_s=1e-5, sm_count=80, gemm_tile=(128, 128),
        gemm_fraction=None, attn_fwd_fraction=None, attn_bwd_fraction=None, hbm_fraction=None,
        nvlink_fraction=None, internode_fraction=None, pcie_bandwidth=PCIE3_X16, nvlink="nvlink2",
        sources={"peak_flops": "NVIDIA V100 datasheet (SXM2): 125 TFLOP/s tensor",
                 "pcie_bandwidth": pcie_source(3, 16, "NVIDIA V100 datasheet"),
                 "nvlink": "NVIDIA V100 datasheet: second-generation NVLink",
                 "hbm_bandwidth": "V100 datasheet: 900 GB/s", "nvlink_bandwidth": "V100: NVLink 300 GB/s total"}),
    "t4": DeviceSpec(
        name="t4", peak_flops={"fp16": 65e12}, hbm_bandwidth=0.32e12, memory_bytes=16e9,
        usable_memory_bytes=16e9, nvlink_bandwidth=16e9, internode_bandwidth=3e9,
        nvlink_latency_s=2e-5, internode_latency_s=2e-5, sm_count=40, gemm_tile=(128, 128),
        gemm_fraction=None, attn_fwd_fraction=None, attn_bwd_fraction=None, hbm_fraction=None,
        nvlink_fraction=None, internode_fraction=None, legacy_link_latency_ms=0.02, pcie_bandwidth=PCIE3_X16,
        sources={"peak_flops": "NVIDIA T4 datasheet: 65 TFLOP/s FP16 tensor", "hbm_bandwidth": "T4: 320 GB/s",
                 "pcie_bandwidth": pcie_source(3, 16, "NVIDIA T4 datasheet"), "nvlink": "T4 has no NVLink",
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
                            "pcie_bandwidth": host[1] if host else pcie_source(5, 16, ds),
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


CATALOGUE.update(inference_gpus(CATALOGUE["a100"]))


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

