"""A small catalogue of accelerators for roofline estimates, overridable by a JSON/YAML file.

Numbers are vendor peaks (dense bf16 tensor FLOP/s, HBM bandwidth, memory,
one direction of the device-to-device link); ``efficiency`` scales the peaks
down to what real kernels reach.  The ``cpu`` entry is one host CPU core: the
``cpuLatency`` of a catalogue-device profile, which executes nothing, is its
roofline (only ``peak_flops`` and ``mem_bw``; it is not a ``--device``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from dnnplace.core.catalogue import legacy_view
from dnnplace.core.limits import MAX_VALUE
from dnnplace.errors import DnnplaceError
from dnnplace.utils.text import clip

# The one hardware catalogue (model/catalogue.py) holds these figures with their sources; this is its
# roofline view: five fields per accelerator, and the ``cpu`` core (one core of a current server CPU, fp32:
# 2 AVX-512 FMA units at 2.3 GHz; one core's share of DRAM bandwidth).
CATALOGUE: dict[str, dict[str, float]] = legacy_view()
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
    except UnicodeDecodeError as exc:
        raise DnnplaceError(f"{p}: not a valid device file: not UTF-8 text (byte {exc.start})") from None
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
            # rates divide the work: they must be positive; memory and latency may be zero; all finite
            rate = key in ("peak_flops", "mem_bw", "link_bw")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not (value > 0 if rate else value >= 0) or value > MAX_VALUE:
                raise DnnplaceError(f"{p}: device '{clip(str(name), 40)}': '{key}' must be a "
                                    f"{'positive' if rate else 'non-negative'} finite number up to {MAX_VALUE:g}")
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
