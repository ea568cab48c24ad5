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
