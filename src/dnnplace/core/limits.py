"""Ranges every numeric input is checked against, so that no sum or product a solver forms overflows.

A float64 holds 1e100 * 1e6 nodes comfortably; ids stay exact in a double (SPEC.md, "Input limits").
"""

from __future__ import annotations

import math

import numpy as np

from dnnplace.errors import InputError

MAX_VALUE = 1e100  # times, costs, sizes and maxSizePerFPGA: finite, 0 <= v <= 1e100
MAX_ID = 2**53  # node ids, colorClass, layerId: integers with |v| <= 2**53 (exact in a double)
MAX_COUNT = 1_000_000  # maxFPGAs, maxCPUs
MAX_STRING = 4096  # characters in a node name


def check_budget(accelerators: int | None = None, cpus: int | None = None, memory: float | None = None,
                 source: str = "budget", prefix: str = "") -> None:
    """Range-check budget overrides as the loader checks the file's fields (SPEC.md, "Input limits").

    Whole numbers of devices (not ``True``, ``"2"`` or ``2.7``) and a finite, non-negative memory.
    Messages name ``prefix + name`` (the CLI passes ``"--"``: its flags are the option names).
    """
    for name, v in ((prefix + "accelerators", accelerators), (prefix + "cpus", cpus)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise InputError(f"{source}: {name} must be a whole number, got {v!r}")
        if not 0 <= v <= MAX_COUNT:
            raise InputError(f"{source}: {name} {v} is outside 0..{MAX_COUNT:,}")
    if memory is None:
        return
    if isinstance(memory, bool) or not isinstance(memory, (int, float, np.integer, np.floating)):
        raise InputError(f"{source}: {prefix}memory must be a number of bytes, got {memory!r}")
    if not (math.isfinite(memory) and 0 <= memory <= MAX_VALUE):
        raise InputError(f"{source}: {prefix}memory {memory:g} must be finite, non-negative and at most"
                         f" {MAX_VALUE:g}")


# The LLM planner's input limits, declared once: the config reader, the problem builder, the plan-file
# reader and the search all check against this table before any enumeration or arithmetic, so that no
# product overflows int64/float64 and no enumeration (divisors, layer splits) grows past what finishes in
# seconds.  Each upper bound sits far above the largest published model or cluster of its kind.
LLM_LIMITS: dict[str, tuple[int, int]] = {
    "num_layers": (1, 1_024),  # the deepest published LLMs have ~130 layers
    "hidden": (1, 1 << 20),
    "ffn_hidden": (1, 1 << 22),
    "heads": (1, 1 << 14),
    "kv_heads": (1, 1 << 14),
    "head_dim": (1, 1 << 14),
    "vocab": (1, 1 << 24),
    "max_position": (1, 1 << 26),
    "num_experts": (1, 1 << 14),
    "top_k": (1, 1 << 14),
    "seq_len": (1, 1 << 24),
    "gpus": (1, 1 << 20),
    "gpus_per_node": (1, 1 << 10),
    "global_batch": (1, 1 << 24),
    # The parallel configuration's counts (model/llm_config.py): a degree never exceeds the GPUs, a
    # virtual-stage count the layers, a micro-batch the global batch.
    "tp": (1, 1 << 20),
    "pp": (1, 1 << 20),
    "vp": (1, 1_024),
    "cp": (1, 1 << 20),
    "dp": (1, 1 << 20),
    "mbs": (1, 1 << 24),
    "ep": (1, 1 << 20),
    "etp": (1, 1 << 20),
    "offload_layers": (0, 1_024),  # layers whose activations go to host memory: fewer than num_layers
}
LLM_NAME_CHARS = 256  # a model's name (a file stem) or architecture class in a plan file
LLM_SOURCE_CHARS = 4_096  # where its config came from (a path: Hugging Face caches sit deep)


def shown(value: object, limit: int = 40) -> str:
    """A short rendering of any value for a message: never a 300-digit number, never a whole list."""
    from dnnplace.utils.text import clip

    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and abs(int(value)) >= 10**15:
        big = abs(int(value))
        digits = len(str(big)) if big.bit_length() < 13_000 else int(big.bit_length() * 0.30103) + 1
        return f"a {digits}-digit number"
    if isinstance(value, float) and math.isfinite(value) and abs(value) >= 1e15:
        return f"{value:.3g}"
    if isinstance(value, (list, tuple, dict)):
        return f"a {type(value).__name__} of {len(value)} items" if len(value) > 8 else clip(repr(value), limit)
    return clip(repr(value), limit)


def check_llm_count(name: str, value: object, where: str, key: str | None = None) -> int:
    """``value`` as a whole number inside :data:`LLM_LIMITS` ``[name]``, or a one-line error naming ``key``."""
    lo, hi = LLM_LIMITS[name]
    name_shown = key or name
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{where}: {name_shown} must be a whole number, got {shown(value)}")
    if not lo <= value <= hi:
        raise InputError(f"{where}: {name_shown} {shown(value) if abs(int(value)) >= 10**15 else f'{value:,}'} is "
                         f"outside {lo:,}..{hi:,}")
    return int(value)
