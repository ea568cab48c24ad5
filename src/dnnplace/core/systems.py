"""The systems catalogue: whole machines a plan runs on, each figure with its datasheet source.

A GPU's peaks live in :mod:`dnnplace.core.catalogue`; a *system* says how many of them share one
NVLink domain (8 in a DGX, 72 in an NVL72 rack, whose compute trays hold 4), how fast each GPU reaches
the others over NVLink and over its NICs, and how much of its memory a job can use.  The LLM planner
prices a collective on NVLink when its group fits in ``nvlink_domain`` -- not in ``gpus_per_node``,
which on an NVL72 rack is the tray (a host), not the domain.

Bandwidths are bytes/s per GPU in ONE direction (datasheets quote NVLink bidirectionally: 900 GB/s
NVLink4 = 450 GB/s each way; 1.8 TB/s NVLink5 = 900 GB/s each way).  NIC figures are the compute
fabric only (the storage / in-band NICs carry no training traffic).

Every system's GPU is a device-catalogue entry (the GB200, B300 and GB300 ones carry their own
datasheet peaks and memory, their own MAMF and cuDNN attention measurements where published -- a
sibling's, marked ASSUMPTION, where not -- and B200's other efficiency constants).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from dnnplace.core.catalogue import CATALOGUE, MIB, DeviceSpec
from dnnplace.errors import DnnplaceError

__all__ = ["GPU_GENERATIONS", "SYSTEMS", "SystemSpec", "system_device", "system_spec"]

GBIT = 1e9 / 8  # bytes/s in one Gb/s

#: GPU generation of each catalogue / system GPU: what decides the GEMM layouts and the precision
#: recipes Transformer Engine runs on it.
GPU_GENERATIONS: dict[str, str] = {"a100": "ampere", "a100-40g": "ampere", "h100": "hopper", "h200": "hopper",
                                   "b200": "blackwell", "gb200": "blackwell", "b300": "blackwell", "gb300": "blackwell"}


@dataclass(frozen=True)
class SystemSpec:
    """One machine: its GPU, how they are grouped and linked, and the memory a job may use per GPU."""

    name: str
    gpu: str  # a device-catalogue name
    gpus_per_node: int  # GPUs under one host OS: a DGX's 8, an NVL72 compute tray's 4
    nvlink_domain: int  # GPUs that reach each other over NVLink/NVSwitch
    nvlink_bandwidth: float  # bytes/s per GPU, one direction
    nics_per_gpu: float  # compute-fabric NICs per GPU
    nic_bandwidth: float  # bytes/s of one NIC, one direction
    usable_memory_bytes: float  # what CUDA reports per GPU (nominal where no reading is published)
    segment_gpus: int = 0  # GPUs of one NVLink domain a large job is placed on (0: the whole domain)
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def job_domain(self) -> int:
        """GPUs per NVLink domain a large job's ranks fill, consecutively: what the comm model's domain is."""
        return self.segment_gpus or self.nvlink_domain

    def domain_for(self, gpus: int) -> int:
        """The NVLink group a job of ``gpus`` GPUs sees: the whole domain when it fits in one, else the segment."""
        return self.nvlink_domain if gpus <= self.nvlink_domain else self.job_domain

    @property
    def internode_bandwidth(self) -> float:
        """Bytes/s per GPU, one direction, leaving the NVLink domain."""
        return self.nics_per_gpu * self.nic_bandwidth


_DGX_H100 = ("NVIDIA DGX H100 datasheet / DGX H100 user guide (nvidia.com/en-us/data-center/dgx-h100): 8x H100 "
             "SXM5 80GB, 640 GB total; 4x NVSwitch, 18 NVLink4 links per GPU = 900 GB/s GPU-to-GPU; 4x OSFP "
             "ports serving 8x single-port ConnectX-7, 400 Gb/s InfiniBand/Ethernet (compute fabric)")
_DGX_H200 = ("NVIDIA DGX H200 datasheet (nvidia.com/en-us/data-center/dgx-h200): 8x H200 141GB, 1,128 GB total; "
             "18 NVLink4 links per GPU, 900 GB/s GPU-to-GPU; 4x OSFP ports serving 8x single-port ConnectX-7, "
             "400 Gb/s")
_DGX_B200 = ("NVIDIA DGX B200 datasheet (nvidia.com/en-us/data-center/dgx-b200): 8x B200, 1,440 GB total HBM3e, "
             "64 TB/s; 2x NVSwitch, 14.4 TB/s aggregate NVLink = 1.8 TB/s per GPU; 4x OSFP ports serving 8x "
             "single-port ConnectX-7, 400 Gb/s; FP8 training 72 PFLOPS (sparse), FP4 inference 144 PFLOPS "
             "(sparse)")
_DGX_B300 = ("NVIDIA DGX B300 datasheet (nvidia.com/en-us/data-center/dgx-b300): 8x B300 (Blackwell Ultra), 2.3 TB "
             "total HBM3e; 14.4 TB/s aggregate NVLink5 = 1.8 TB/s per GPU; 8x OSFP ports serving 8x ConnectX-8 "
             "SuperNIC, 800 Gb/s; FP8 training 72 PFLOPS, FP4 inference 144 PFLOPS (sparse) / 108 PFLOPS dense")
_GB200 = ("NVIDIA GB200 NVL72 product page and datasheet (nvidia.com/en-us/data-center/gb200-nvl72): 72 Blackwell "
          "GPUs, 36 Grace CPUs, 18 compute trays of 2 Grace + 4 GPUs; one NVLink domain, 130 TB/s aggregate = "
          "1.8 TB/s per GPU; up to 13.4 TB HBM3e, 576 TB/s; FP8 720 PFLOPS, BF16 360 PFLOPS, FP4 1,440 PFLOPS "
          "(all sparse)")
_GB200_NIC = ("NVIDIA DGX SuperPOD GB200 reference architecture (docs.nvidia.com/dgx-superpod): each compute tray "
              "has 4x ConnectX-7 400 Gb/s for the compute fabric, one per GPU (plus 2x BlueField-3 for storage "
              "and in-band); MLPerf system descriptions list 4 GPUs per node, 186 GB HBM3e each")
_GB300 = ("NVIDIA GB300 NVL72 product page (nvidia.com/en-us/data-center/gb300-nvl72): 72 Blackwell Ultra GPUs, "
          "36 Grace CPUs, 18 trays of 4 GPUs; 130 TB/s NVLink = 1.8 TB/s per GPU; up to 21 TB HBM3e (288 GB per "
          "GPU), 576 TB/s; FP4 1,440 PFLOPS sparse / 1,080 dense, FP8 720 PFLOPS, BF16 360 PFLOPS (sparse); "
          "ConnectX-8 SuperNIC 800 Gb/s per GPU")
_SMI_B200 = ("nvidia-smi on DGX B200 reports 183359 MiB per GPU (a NeMo performance-script log of "
             "pretrain_llama3_8b -g b200 shows 'NVIDIA B200 | ... / 183359 MB')")
_SMI_GB200 = ("nvidia-smi on GB200 NVL72 compute trays reports 189471 MiB per GPU and a 1200 W power limit "
              "(nvidia-smi listings in public repositories); the datasheet's '186 GB' is this total in GiB")
#: Compute trays of one NVL72 rack a large job is placed on (Slurm --segment), the rest left for spares.
_SEGMENT_TRAYS = 16
_SEGMENT = ("NVIDIA technical blog, 'Unlock Exascale Performance on NVIDIA GB200 NVL72 with Slurm Topology-Aware "
            "Job Scheduling': segment size 16 nodes (64 GPUs per NVL72 domain) recommended for large jobs of "
            "128+ GPUs; crossing a domain drops to ~50 GB/s (400 Gb/s) per GPU")
_NOMINAL = "no CUDA-reported total found: the datasheet's nominal capacity (an upper bound on what a job gets)"


def _system(name: str, gpu: str, gpn: int, domain: int, nvlink_bidir: float, nic_gbit: float, usable: float,
            src: str, usable_src: str, nic_src: str | None = None) -> SystemSpec:
    rack = domain > gpn
    return SystemSpec(
        name=name, gpu=gpu, gpus_per_node=gpn, nvlink_domain=domain, nvlink_bandwidth=nvlink_bidir / 2,
        nics_per_gpu=1.0, nic_bandwidth=nic_gbit * GBIT, usable_memory_bytes=usable,
        segment_gpus=_SEGMENT_TRAYS * gpn if rack else domain,
        sources={"gpu": src, "gpus_per_node": src, "nvlink_domain": src,
                 "nvlink_bandwidth": f"{src} (bidirectional figure halved)",
                 "nics_per_gpu": nic_src or src, "nic_bandwidth": nic_src or src,
                 "usable_memory_bytes": usable_src, "segment_gpus": _SEGMENT if rack else src})


SYSTEMS: dict[str, SystemSpec] = {
    "dgx-h100": _system("dgx-h100", "h100", 8, 8, 900e9, 400, 81559 * MIB, _DGX_H100,
                        "nvidia-smi / torch.cuda total memory of H100 80GB HBM3: 81559 MiB"),
    "dgx-h200": _system("dgx-h200", "h200", 8, 8, 900e9, 400, 143771 * MIB, _DGX_H200,
                        "nvidia-smi total memory of H200 141GB: 143771 MiB"),
    "dgx-b200": _system("dgx-b200", "b200", 8, 8, 1.8e12, 400, 183359 * MIB, _DGX_B200, _SMI_B200),
    "dgx-b300": _system("dgx-b300", "b300", 8, 8, 1.8e12, 800, 288e9, _DGX_B300,
                        f"{_NOMINAL}: 288 GB per GPU (2.3 TB / 8)"),
    "gb200-nvl72": _system("gb200-nvl72", "gb200", 4, 72, 1.8e12, 400, 189471 * MIB, _GB200, _SMI_GB200,
                           _GB200_NIC),
    "gb300-nvl72": _system("gb300-nvl72", "gb300", 4, 72, 1.8e12, 800, 288e9, _GB300,
                           f"{_NOMINAL}: 288 GB per GPU"),
}


def system_spec(name: str) -> SystemSpec:
    """The system ``name``; one-line error naming the known systems otherwise."""
    try:
        return SYSTEMS[name.lower()]
    except (KeyError, AttributeError):
        raise DnnplaceError(f"unknown system {name!r}; the systems catalogue has: {', '.join(SYSTEMS)}") from None


def system_device(system: SystemSpec) -> DeviceSpec:
    """The DeviceSpec a plan on ``system`` is priced with: the catalogue's GPU, whose links and usable memory
    are the system's (a test keeps the two catalogues equal, so ``--system dgx-h100`` and ``--device h100
    --gpus-per-node 8`` price alike and a plan file, which names the GPU, reads back to the same device)."""
    try:
        base = CATALOGUE[system.gpu]
    except KeyError:
        raise DnnplaceError(f"system {system.name}: GPU {system.gpu!r} is not in the device catalogue") from None
    return replace(base, usable_memory_bytes=system.usable_memory_bytes, nvlink_bandwidth=system.nvlink_bandwidth,
                   internode_bandwidth=system.internode_bandwidth)
