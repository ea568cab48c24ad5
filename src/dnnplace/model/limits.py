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
}


def check_llm_count(name: str, value: object, where: str, key: str | None = None) -> int:
    """``value`` as a whole number inside :data:`LLM_LIMITS` ``[name]``, or a one-line error naming ``key``."""
    lo, hi = LLM_LIMITS[name]
    shown = key or name
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{where}: {shown} must be a whole number, got {value!r:.60}")
    if not lo <= value <= hi:
        text = f"{value:,}" if abs(value) < 10**15 else f"a {len(str(abs(value)))}-digit number"
        raise InputError(f"{where}: {shown} {text} is outside {lo:,}..{hi:,}")
    return int(value)
