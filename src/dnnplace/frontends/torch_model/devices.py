"""A small catalogue of accelerators for roofline estimates, overridable by a JSON/YAML file.

Numbers are vendor peaks (dense bf16 tensor FLOP/s, HBM bandwidth, memory,
one direction of the device-to-device link); ``efficiency`` scales the peaks
down to what real kernels reach.  The ``cpu`` entry is one host CPU core: the
``cpuLatency`` of a catalogue-device profile, which executes nothing, is its
roofline (only ``peak_flops`` and ``mem_bw``; it is not a ``--device``).
"""

from __future__ import annotations

import json
from pathlib import Path

from dnnplace.errors import DnnplaceError

CATALOGUE: dict[str, dict[str, float]] = {
    "v100": {"peak_flops": 125e12, "mem_bw": 0.9e12, "memory": 32e9, "link_bw": 150e9, "link_latency_ms": 0.01},
    "t4": {"peak_flops": 65e12, "mem_bw": 0.32e12, "memory": 16e9, "link_bw": 16e9, "link_latency_ms": 0.02},
    "a100": {"peak_flops": 312e12, "mem_bw": 2.0e12, "memory": 80e9, "link_bw": 300e9, "link_latency_ms": 0.01},
    "h100": {"peak_flops": 989e12, "mem_bw": 3.35e12, "memory": 80e9, "link_bw": 450e9, "link_latency_ms": 0.01},
    "h200": {"peak_flops": 989e12, "mem_bw": 4.8e12, "memory": 141e9, "link_bw": 450e9, "link_latency_ms": 0.01},
    # one core of a current server CPU, fp32: 2 AVX-512 FMA units, 2.3 GHz; one core's share of DRAM bandwidth.
    # x EFFICIENCY: 90 GFLOP/s and 15 GB/s, what one core of an AMD EPYC reaches in a matmul and a copy
    "cpu": {"peak_flops": 150e9, "mem_bw": 25e9},
}
CPU_CORE = "cpu"  # the catalogue entry that prices cpuLatency when nothing is executed
EFFICIENCY = 0.6
LAUNCH_MS = 0.005  # per-operator launch overhead


def load_catalogue(path: str | Path | None) -> dict[str, dict[str, float]]:
    """The built-in catalogue, updated from a JSON or YAML file of the same shape."""
    cat = {k: dict(v) for k, v in CATALOGUE.items()}
    if path is None:
        return cat
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise DnnplaceError(f"{p}: cannot read device file ({exc.strerror or exc})") from None
    try:
        if p.suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise DnnplaceError(f"{p}: YAML device files need PyYAML (or use JSON)") from None
            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except (ValueError, TypeError) as exc:
        raise DnnplaceError(f"{p}: not a valid device file: {exc}") from None
    if not isinstance(data, dict):
        raise DnnplaceError(f"{p}: expected an object of device name -> properties")
    for name, props in data.items():
        if not isinstance(props, dict):
            raise DnnplaceError(f"{p}: device '{name}' must map property names to numbers")
        entry = cat.setdefault(str(name), {})
        for key, value in props.items():
            if key not in ("peak_flops", "mem_bw", "memory", "link_bw", "link_latency_ms"):
                raise DnnplaceError(f"{p}: device '{name}': unknown property '{key}'")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise DnnplaceError(f"{p}: device '{name}': '{key}' must be a non-negative number")
            entry[key] = float(value)
        missing = {"peak_flops", "mem_bw"} - entry.keys() if name == CPU_CORE else \
            {"peak_flops", "mem_bw", "memory", "link_bw"} - entry.keys()
        if missing:
            raise DnnplaceError(f"{p}: device '{name}' lacks {', '.join(sorted(missing))}")
        if name != CPU_CORE:
            entry.setdefault("link_latency_ms", 0.01)
    return cat


def roofline_ms(flops: float, bytes_moved: float, device: dict[str, float]) -> float:
    """Estimated time of one operator: the slower of compute and memory traffic, plus a launch."""
    return 1e3 * max(flops / (device["peak_flops"] * EFFICIENCY), bytes_moved / (device["mem_bw"] * EFFICIENCY)) \
        + LAUNCH_MS
