"""The inference cards of the catalogue: the GPUs people serve LLMs on, and the roofline's generic fallbacks.

Datasheet peaks, memory, bandwidth and links of L40S, L4, A10G, A6000, RTX PRO 6000, RTX 3060 / 3090 / 4090 /
5090, GH200, A100 40 GB, H100 PCIe, MI300X and Arc Pro B60, each figure with its source; efficiency fractions
only where a measurement is published (the rest None: the training planner refuses the card, and the roofline of
:mod:`dnnplace.kernels` takes :data:`ROOFLINE_DEFAULTS`).  :mod:`dnnplace.core.catalogue` merges
:func:`inference_gpus` into ``CATALOGUE``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from dnnplace.core.device import (
    GIB,
    HBM_SOURCE,
    LAT_SOURCE,
    MAMF_A100,
    MAMF_SOURCE,
    MIB,
    PCIE4_X16,
    PCIE5_X16,
    DeviceSpec,
    mamf_fractions,
    pcie_source,
)

__all__ = ["DEVICE_ALIASES", "ROOFLINE_DEFAULTS", "RooflineDefaults", "inference_gpus"]

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
_DRIVER = " (the total CUDA reports moves by 0.1-0.2 GiB between driver versions)"
_NOMINAL_MEM = "nominal: no published CUDA / runtime total found, the datasheet capacity (an upper bound)"
_NO_NIC = "no NIC is part of the card: 0.0, a system entry supplies the network"
_PCIE_LAT = ("ASSUMPTION: a ring step over PCIe taken as the InfiniBand order of magnitude (" + LAT_SOURCE + "); "
             "no PCIe small-message figure gathered")
_NO_NVLINK = "no NVLink: 0.0, collectives go over PCIe (pcie_bandwidth, ROOFLINE_DEFAULTS.pcie_fraction)"
_TILE_SM80 = ("ASSUMPTION: CUTLASS's SM80-style (mma.sync) 16-bit kernels, which Ampere, Ada and the sm_120 "
              "Blackwell cards run: 128x256 output tiles at most, as the a100 entry")
_TILE_HOPPER = "CUTLASS/cuBLAS Hopper bf16 warp-specialised kernels: 128x256 output tiles (as h100)"
_MAMF_A100_40 = (MAMF_A100[0], MAMF_A100[1] + " (the row names no memory size: both SXM4 parts, same die and clocks)")
_MAMF_GH200 = mamf_fractions("NVIDIA GH200 SXM ('900W 141GiB HBM3e version')", (828.6, 989), (1535.0, 1979))
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


def inference_gpus(_a100: DeviceSpec) -> dict[str, DeviceSpec]:
    """The inference cards, ``_a100`` (the 80 GB SXM entry) the base of its 40 GB sibling."""
    gpus = {
    # Same die, clocks, links and measurements as the 80 GB SXM part (a100): only memory and bandwidth differ.
    "a100-40g": replace(
        _a100, name="a100-40g", hbm_bandwidth=1.555e12, memory_bytes=40 * GIB, usable_memory_bytes=40536 * MIB,
        gemm_fractions=_MAMF_A100_40[0],
        sources={**_a100.sources, "peak_flops": f"{_DS_A100_40}: BF16 312 TFLOP/s dense (624 sparse)",
                 "hbm_bandwidth": f"{_DS_A100_40}: 1,555 GB/s HBM2",
                 "memory_bytes": f"{_DS_A100_40}: 40 GB{_GIB_NOTE}",
                 "usable_memory_bytes": "nvidia-smi on A100-SXM4-40GB: 40536 MiB",
                 "nvlink_bandwidth": f"{_DS_A100_40}: NVLink 600 GB/s bidirectional",
                 "gemm_fraction": _MAMF_A100_40[1], "gemm_fractions": _MAMF_A100_40[1],
                 "pcie_bandwidth": pcie_source(4, 16, _DS_A100_40)}),
    "h100-pcie": _inference_gpu(
        "h100-pcie", {"bf16": 756e12, "fp16": 756e12, "fp8": 1513e12, "int8": 1513e12}, 2.0e12, 80 * GIB,
        81559 * MIB, 114, (128, 256), PCIE5_X16, nvlink="nvlink4-bridge", nvlink_bw=300e9,
        sources={"peak_flops": f"{_DS_H100_PCIE}: BF16/FP16 1,513 and FP8/INT8 3,026 sparse -> 756 / 1,513 dense",
                 "hbm_bandwidth": f"{_DS_H100_PCIE}: 2 TB/s HBM2e", "memory_bytes": f"{_DS_H100_PCIE}: 80 GB",
                 "usable_memory_bytes": "nvidia-smi on H100 PCIe: 81559 MiB",
                 "nvlink_bandwidth": f"{_DS_H100_PCIE}: NVLink bridge 600 GB/s bidirectional between 2 cards -> 300",
                 "nvlink": f"{_DS_H100_PCIE}: NVLink bridge (2 cards)", "nvlink_latency_s": LAT_SOURCE,
                 "sm_count": "NVIDIA Hopper architecture whitepaper: H100 PCIe has 114 SMs",
                 "gemm_tile": _TILE_HOPPER, "pcie_bandwidth": pcie_source(5, 16, _DS_H100_PCIE)}),
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
                     "nvlink": f"{_DS_GH200}: fourth-generation NVLink", "nvlink_latency_s": LAT_SOURCE,
                     "sm_count": "NVIDIA Hopper architecture whitepaper: H100 SXM5, 132 SMs",
                     "gemm_tile": _TILE_HOPPER,
                     "pcie_bandwidth": f"{_DS_GH200}: the GPU reaches Grace over NVLink-C2C, 900 GB/s "
                                       "bidirectional -> 450 GB/s per direction (not PCIe)"}),
        gemm_fraction=_MAMF_GH200[0]["bf16"], gemm_fractions=_MAMF_GH200[0], hbm_fraction=0.85),
    "l40s": _inference_gpu(
        "l40s", {"bf16": 362.05e12, "fp16": 362.05e12, "fp8": 733e12, "int8": 733e12}, 864e9, 48 * GIB, 44.31 * GIB,
        142, (128, 256), PCIE4_X16,
        sources={"peak_flops": f"{_DS_L40S}: BF16/FP16 362.05 (733 sparse), FP8 733 (1,466 sparse), INT8 733 TOPS "
                               "(1,466 sparse) dense",
                 "hbm_bandwidth": f"{_DS_L40S}: 864 GB/s GDDR6", "memory_bytes": f"{_DS_L40S}: 48 GB GDDR6 with ECC",
                 "usable_memory_bytes": "the total CUDA reports, as vLLM 0.7.2 logs it on an L40S (github.com/"
                                        "vllm-project/vllm/issues/15196): 44.31 GiB; nvidia-smi shows 46068 MiB "
                                        "(ECC on)" + _DRIVER,
                 "sm_count": f"{_DS_L40S}: 18,176 CUDA cores / 128 per Ada SM = 142 SMs (568 Tensor Cores / 4)",
                 "gemm_tile": _TILE_SM80, "pcie_bandwidth": pcie_source(4, 16, _DS_L40S)}),
    "l4": _inference_gpu(
        "l4", {"bf16": 121e12, "fp16": 121e12, "fp8": 242.5e12, "int8": 242.5e12}, 300e9, 24 * GIB, 22.05 * GIB,
        58, (128, 256), PCIE4_X16,
        sources={"peak_flops": f"{_DS_L4}: BF16/FP16 242 TFLOP/s and FP8/INT8 485 sparse -> 121 / 242.5 dense",
                 "hbm_bandwidth": f"{_DS_L4}: 300 GB/s GDDR6", "memory_bytes": f"{_DS_L4}: 24 GB",
                 "usable_memory_bytes": "the total CUDA reports on vLLM's CI L4 (github.com/vllm-project/vllm/issues/"
                                        "20214, PyTorch's 'total capacity of 22.05 GiB'); nvidia-smi shows 23034 MiB"
                                        + _DRIVER,
                 "sm_count": "NVIDIA L4 (AD104): 7,424 CUDA cores / 128 per Ada SM = 58 SMs "
                             "(torch.cuda multi_processor_count 58)",
                 "gemm_tile": _TILE_SM80, "pcie_bandwidth": pcie_source(4, 16, _DS_L4)}),
    "a10g": _inference_gpu(
        "a10g", {"bf16": 70e12, "fp16": 70e12, "int8": 140e12}, 600e9, 24 * GIB, 23028 * MIB, 80, (128, 256),
        PCIE4_X16,
        sources={"peak_flops": "ASSUMPTION: derived, no NVIDIA figure published: 80 SMs x 1,710 MHz boost x 256 "
                               "dense FP16 FMA per SM per clock with FP32 accumulate (the GA10x rate of the "
                               f"GeForce column of the {_WP_GA102}) x 2 = 70 TFLOP/s, INT8 twice; {_DS_A10G}: the "
                               "A10G trades the A10's tensor rate for CUDA-core throughput",
                 "hbm_bandwidth": _DS_A10G, "memory_bytes": _DS_A10G,
                 "usable_memory_bytes": "nvidia-smi on NVIDIA A10G: 23028 MiB",
                 "sm_count": "NVIDIA A10G (GA102): 10,240 CUDA cores / 128 per Ampere GA10x SM = 80 SMs",
                 "gemm_tile": _TILE_SM80, "pcie_bandwidth": pcie_source(4, 16, _DS_A10G)}),
    "a6000": _inference_gpu(
        "a6000", {"bf16": 154.8e12, "fp16": 154.8e12, "int8": 309.7e12, "int4": 619.4e12}, 768e9, 48 * GIB,
        47.54 * GIB, 84, (128, 256), PCIE4_X16, nvlink="nvlink3-bridge", nvlink_bw=112.5e9 / 2,
        sources={"peak_flops": f"{_DS_A6000}: tensor 309.7 TFLOP/s sparse -> 154.8 dense (FP16/BF16, FP32 "
                               f"accumulate at full rate on RTX A6000, {_WP_GA102}: 84 SMs x 1,800 MHz); INT8 / "
                               "INT4 twice / four times",
                 "hbm_bandwidth": f"{_DS_A6000}: 768 GB/s GDDR6", "memory_bytes": f"{_DS_A6000}: 48 GB with ECC",
                 "usable_memory_bytes": "the total CUDA reports on an RTX A6000 (github.com/vllm-project/vllm/issues/"
                                        "4417, PyTorch's 'total capacity of 47.54 GiB'; ECC off: nvidia-smi shows "
                                        "49140 MiB off, 46068 MiB on)" + _DRIVER,
                 "nvlink_bandwidth": f"{_DS_A6000}: NVLink bridge for 2 cards, 112.5 GB/s bidirectional -> 56.25",
                 "nvlink": f"{_DS_A6000}: third-generation NVLink bridge (2 cards)",
                 "sm_count": f"{_DS_A6000}: 10,752 CUDA cores / 128 = 84 SMs", "gemm_tile": _TILE_SM80,
                 "pcie_bandwidth": pcie_source(4, 16, _DS_A6000)}),
    "rtx-pro-6000": _inference_gpu(
        "rtx-pro-6000", {"bf16": 500e12, "fp16": 500e12, "fp8": 1000e12, "fp4": 2000e12, "int8": 1000e12},
        1597e9, 96 * GIB, 97887 * MIB, 188, (128, 256), PCIE5_X16,
        sources={"peak_flops": f"{_DS_PRO6000}: 4,000 AI TOPS = FP4 sparse -> FP4 2,000 dense; ASSUMPTION: FP8 / "
                               "INT8 and FP16 / BF16 at a half and a quarter of it (the 5th-generation Tensor Core "
                               "ratios of the RTX 5090 column of the " + _WP_RTX_BW + ", at the full FP32-"
                               "accumulate rate of NVIDIA's professional cards): 1,000 / 500 TFLOP/s",
                 "hbm_bandwidth": f"{_DS_PRO6000}: 1,597 GB/s GDDR7 (the Workstation Edition's 1,792 GB/s is "
                                  "another SKU)",
                 "memory_bytes": f"{_DS_PRO6000}: 96 GB GDDR7 with ECC",
                 "usable_memory_bytes": "nvidia-smi on NVIDIA RTX PRO 6000 Blackwell: 97887 MiB",
                 "sm_count": f"{_DS_PRO6000}: 24,064 CUDA cores / 128 = 188 SMs", "gemm_tile": _TILE_SM80,
                 "pcie_bandwidth": pcie_source(5, 16, _DS_PRO6000)}),
    "rtx-5090": _inference_gpu(
        "rtx-5090", {"bf16": 209.5e12, "fp16": 209.5e12, "fp8": 419e12, "fp4": 1676e12, "int8": 838e12}, 1792e9,
        32 * GIB, 32607 * MIB, 170, (128, 256), PCIE5_X16,
        sources={"peak_flops": f"{_WP_RTX_BW}: dense with FP32 accumulate: FP16/BF16 209.5 (419 with FP16 "
                               "accumulate), FP8 419 (838), FP4 1,676 (its only FP4 row; 3,352 sparse); INT8 838 TOPS",
                 "hbm_bandwidth": f"{_WP_RTX_BW}: 1,792 GB/s GDDR7", "memory_bytes": f"{_WP_RTX_BW}: 32 GB GDDR7",
                 "usable_memory_bytes": "nvidia-smi on NVIDIA GeForce RTX 5090: 32607 MiB",
                 "sm_count": f"{_WP_RTX_BW}: 170 SMs", "gemm_tile": _TILE_SM80,
                 "pcie_bandwidth": pcie_source(5, 16, _WP_RTX_BW)}),
    "rtx-4090": _inference_gpu(
        "rtx-4090", {"bf16": 165.2e12, "fp16": 165.2e12, "fp8": 330.3e12, "int8": 660.6e12, "int4": 1321.2e12},
        1008e9, 24 * GIB, 24564 * MIB, 128, (128, 256), PCIE4_X16,
        sources={"peak_flops": f"{_WP_ADA}: dense with FP32 accumulate: FP16/BF16 165.2 (330.3 with FP16 "
                               "accumulate), FP8 330.3 (660.6); INT8 660.6 / INT4 1,321.2 TOPS; sparse figures "
                               "twice these",
                 "hbm_bandwidth": f"{_WP_ADA}: 1,008 GB/s GDDR6X", "memory_bytes": f"{_WP_ADA}: 24 GB GDDR6X",
                 "usable_memory_bytes": "nvidia-smi on NVIDIA GeForce RTX 4090: 24564 MiB",
                 "sm_count": f"{_WP_ADA}: 128 SMs", "gemm_tile": _TILE_SM80,
                 "pcie_bandwidth": pcie_source(4, 16, _WP_ADA)}),
    "rtx-3090": _inference_gpu(
        "rtx-3090", {"bf16": 71e12, "fp16": 71e12, "int8": 284e12, "int4": 568e12}, 936e9, 24 * GIB, 23.58 * GIB, 82,
        (128, 256), PCIE4_X16, nvlink="nvlink3-bridge", nvlink_bw=112.5e9 / 2,
        sources={"peak_flops": f"{_WP_GA102}, GeForce RTX 3090 column: dense with FP32 accumulate FP16/BF16 71 "
                               "(142 with FP16 accumulate); INT8 284 / INT4 568 TOPS; sparse figures twice these",
                 "hbm_bandwidth": f"{_WP_GA102}: 936 GB/s GDDR6X", "memory_bytes": f"{_WP_GA102}: 24 GB GDDR6X",
                 "usable_memory_bytes": "vLLM's memory profile on an RTX 3090 (github.com/vllm-project/vllm/issues/"
                                        "10517, 2024-12-02): total_gpu_memory=23.58GiB",
                 "nvlink_bandwidth": f"{_WP_GA102}: NVLink bridge for 2 cards, 112.5 GB/s total -> 56.25",
                 "nvlink": f"{_WP_GA102}: third-generation NVLink bridge (2 cards)",
                 "sm_count": f"{_WP_GA102}: 82 SMs", "gemm_tile": _TILE_SM80,
                 "pcie_bandwidth": pcie_source(4, 16, _WP_GA102)}),
    "rtx-3060": _inference_gpu(
        "rtx-3060", {"bf16": 25.5e12, "fp16": 25.5e12, "int8": 102e12}, 360e9, 12 * GIB, 11.63 * GIB, 28, (128, 256),
        PCIE4_X16,
        sources={"peak_flops": "ASSUMPTION: derived, no whitepaper column for GA106: 28 SMs x 1,777 MHz boost "
                               f"({_SPEC_3060}) x the GA10x GeForce per-SM rates of the {_WP_GA102} (256 dense "
                               "FP16 FMA per clock with FP32 accumulate, 1,024 INT8 ops) -> 25.5 TFLOP/s, 102 TOPS",
                 "hbm_bandwidth": f"{_SPEC_3060}: 12 GB GDDR6, 192-bit, 15 Gbps = 360 GB/s",
                 "memory_bytes": f"{_SPEC_3060}: 12 GB",
                 "usable_memory_bytes": "the total CUDA reports, as vLLM logs it on an RTX 3060 12GB, driver "
                                        "580.95.05 (github.com/vllm-project/vllm/issues/27934): 11.63 GiB; "
                                        "nvidia-smi shows 12288 MiB" + _DRIVER,
                 "sm_count": f"{_SPEC_3060}: 3,584 CUDA cores / 128 = 28 SMs", "gemm_tile": _TILE_SM80,
                 "pcie_bandwidth": pcie_source(4, 16, _SPEC_3060)}),
    "mi300x": replace(
        _inference_gpu(
            "mi300x", {"bf16": 1307.4e12, "fp16": 1307.4e12, "fp8": 2614.9e12, "int8": 2614.9e12}, 5.3e12, 192 * GIB,
            192 * GIB, 304, (256, 256), PCIE5_X16, nvlink="infinity-fabric", nvlink_bw=896e9 / 2,
            sources={"peak_flops": f"{_DS_MI300X}: dense FP16/BF16 1,307.4, FP8 2,614.9 TFLOP/s, INT8 2,614.9 "
                                   "TOPS (sparse twice these)",
                     "hbm_bandwidth": f"{_DS_MI300X}: 5.3 TB/s HBM3", "memory_bytes": f"{_DS_MI300X}: 192 GB HBM3",
                     "usable_memory_bytes": _NOMINAL_MEM,
                     "nvlink_bandwidth": f"{_DS_MI300X}: 7 AMD Infinity Fabric links, 896 GB/s peak aggregate "
                                         "(bidirectional) -> 448 per direction, 64 GB/s to each of the 7 peers",
                     "nvlink": f"{_DS_MI300X}: Infinity Fabric, no NVLink", "nvlink_latency_s": LAT_SOURCE,
                     "sm_count": f"{_DS_MI300X}: 304 compute units", "pcie_bandwidth": pcie_source(5, 16, _DS_MI300X),
                     "gemm_tile": "ASSUMPTION: 256x256 macro tiles of hipBLASLt's MFMA kernels (no tile figure "
                                  "published per shape)"}),
        gemm_fraction=668.4 / 1307.4, gemm_fractions={"bf16": 668.4 / 1307.4}),
    "b60": _inference_gpu(
        "b60", {"bf16": 98.5e12, "fp16": 98.5e12, "int8": 197e12}, 456e9, 24 * GIB, 24 * GIB, 20, (256, 256),
        PCIE5_X16 / 2,
        sources={"peak_flops": f"{_SPEC_B60}: 197 peak INT8 TOPS (XMX, dense); ASSUMPTION: FP16/BF16 half of it, "
                               "the Xe2 XMX ratio (2,048 FP16 / 4,096 INT8 ops per Xe core per clock x 20 cores x "
                               "2.4 GHz = 98.3 / 196.6)",
                 "hbm_bandwidth": f"{_SPEC_B60}: 24 GB GDDR6, 192-bit, 19 Gbps = 456 GB/s",
                 "memory_bytes": f"{_SPEC_B60}: 24 GB", "usable_memory_bytes": _NOMINAL_MEM,
                 "sm_count": f"{_SPEC_B60}: 20 Xe2 cores (the SM's counterpart)",
                 "gemm_tile": "ASSUMPTION: 256x256 work-group tiles of oneDNN's XMX GEMMs (no figure published)",
                 "pcie_bandwidth": pcie_source(5, 8, _SPEC_B60) + ": x8 at Gen5 = 31.5 GB/s per direction"}),
    }
    gpus["mi300x"].sources["gemm_fraction"] = gpus["mi300x"].sources["gemm_fractions"] = (
        f"{MAMF_SOURCE}: AMD MI300X BF16 668.4 TFLOP/s (its theory column 1300; as a fraction of the datasheet's "
        "1,307.4 so the rate stays 668.4), PYTORCH_TUNABLEOP_ENABLED=1; no FP8 measurement in the table")
    gpus["gh200"].sources.update({
        "gemm_fraction": _MAMF_GH200_NOTE + _MAMF_GH200[1], "gemm_fractions": _MAMF_GH200_NOTE + _MAMF_GH200[1],
        "hbm_fraction": HBM_SOURCE})
    return gpus


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
    attn_fraction: float  # causal prefill attention (16-bit, long prompts) / dense tensor peak
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
#: aiconfigurator-core 0.12.0's measured context-attention tables (``context_attention_perf``, each system's
#: default table: TensorRT-LLM 1.0.0 on A100, 1.3.0rc20 on the others, vLLM 0.26.0 on B60), BF16, head dim 128,
#: full attention, prompts of at least 4,096 tokens: the median efficiency (causal FLOPs at the dense BF16 peak /
#: measured latency) per system.  tests/kernel_layer/test_roofline_attention_default.py recomputes them.
ATTN_TABLE_EFFICIENCY = {"a100": 0.451, "b200": 0.422, "b300": 0.496, "b60": 0.660, "gb200": 0.422, "gb300": 0.513,
                         "h100": 0.481, "h200": 0.490, "l40s": 0.374, "rtx-pro-6000": 0.399}

ROOFLINE_DEFAULTS = RooflineDefaults(
    gemm_fraction=round(_median([m / t for m, t in _MAMF_BF16_ROWS.values()]), 3),
    attn_fraction=round(_median(list(ATTN_TABLE_EFFICIENCY.values())), 3),
    hbm_fraction=0.85,
    pcie_fraction=round(28e9 / PCIE5_X16, 3),
    pcie_copy_fraction=round(55.6e9 / PCIE5_X16, 3),
    sources={
        "gemm_fraction": f"{MAMF_SOURCE}: the median efficiency of its {len(_MAMF_BF16_ROWS)} BF16 rows "
                         f"({', '.join(_MAMF_BF16_ROWS)}) = 0.781",
        "attn_fraction": "aiconfigurator-core 0.12.0's measured prefill-attention tables of its ten systems "
                         "(BF16, head dim 128, prompts >= 4,096 tokens): the median of their median efficiencies "
                         f"({', '.join(f'{k} {v}' for k, v in ATTN_TABLE_EFFICIENCY.items())}) = 0.466; "
                         "shorter prompts run below it (0.29-0.59 at >= 1,024 tokens): the roofline prices them "
                         "fast (benchmarks/results/kernels_roofline.md)",
        "hbm_fraction": "ASSUMPTION for GDDR cards: the catalogue's HBM figure (" + HBM_SOURCE + "); no BabelStream "
                        "figure for GDDR6/6X/7 cards gathered",
        "pcie_fraction": _PCIE_NCCL,
        "pcie_copy_fraction": "NVIDIA technical blog on nvbandwidth (github.com/NVIDIA/nvbandwidth): "
                              "host_to_device_memcpy_ce on a PCIe Gen5 x16 GPU ~55.6 GB/s of 63.0 -> 0.88",
    })

