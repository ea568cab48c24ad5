"""How busy the machine was while a run was timed: other tenants' CPU, steal, processes per core.

A measured time per sample is the prediction's to compare only when every stage had a core to itself.
The stage processes read the whole machine's CPU counters (``/proc/stat``) and their own CPU time at the
start and the end of the timed steps; what the machine's CPUs did beyond the stages' (and the launcher's)
own time was other processes' work, and ``steal`` is time the hypervisor gave to other guests.
"""

from __future__ import annotations

import os
import time
from typing import TypedDict

#: Steal above this share of the machine's CPU time, or other work of more cores than the stages leave
#: free, marks a run as loaded.
STEAL_SHARE = 0.05


class MachineLoad(TypedDict):
    """Where the timed steps' CPU went (cores: CPU seconds per wall second)."""

    cores: int  # CPUs of the machine (those /proc/stat counts)
    usable_cores: int  # CPUs this process may run on
    stages: int  # stage processes (one per core is what the cost model assumes)
    timed_s: float  # wall seconds of the timed steps
    stages_cores: float  # the stage processes' own CPU (all their threads)
    launcher_cores: float  # the launching process's CPU while the workers ran
    other_cores: float  # everything else the machine's CPUs did meanwhile: other tenants
    steal_share: float  # of the machine's CPU time, taken by the hypervisor for other guests
    load_average: float | None
    loaded: bool
    note: str


def cpu_counters() -> tuple[float, float, float] | None:
    """(wall seconds, busy CPU seconds of the whole machine, steal seconds) now; None without /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = fh.readline().split()
    except OSError:  # pragma: no cover - not Linux
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:]]
    hz = float(os.sysconf("SC_CLK_TCK"))
    user, nice, system, _idle, _iowait, irq, softirq = (ticks + [0] * 7)[:7]
    steal = ticks[7] if len(ticks) > 7 else 0
    return time.perf_counter(), (user + nice + system + irq + softirq) / hz, steal / hz


def machine_load(start: tuple[float, float, float] | None, end: tuple[float, float, float] | None,
                 stages_cpu_s: float, launcher_cpu_s: float, stages: int) -> MachineLoad:
    """The :class:`MachineLoad` of a timed window from its counters and the run's own CPU seconds."""
    cores = os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    try:
        load: float | None = os.getloadavg()[0]
    except OSError:  # pragma: no cover
        load = None
    if start is None or end is None or end[0] <= start[0]:
        return {"cores": cores, "usable_cores": usable, "stages": stages, "timed_s": 0.0, "stages_cores": 0.0,
                "launcher_cores": 0.0, "other_cores": 0.0, "steal_share": 0.0, "load_average": load,
                "loaded": stages > usable, "note": "the machine's CPU counters are not readable here"}
    wall = end[0] - start[0]
    busy, steal = end[1] - start[1], end[2] - start[2]
    own = stages_cpu_s / wall
    launcher = launcher_cpu_s / wall
    # the counters tick at 100 Hz: a few ticks of difference are no tenant
    other = max(0.0, busy / wall - own - launcher)
    other = other if other * wall > 0.05 * cores else 0.0
    steal_share = max(0.0, steal / (wall * cores))
    free = usable - stages  # cores the stages leave to anything else
    reasons = []
    if stages > usable:
        reasons.append(f"{stages} stage processes share {usable} cores")
    if other > max(free, 0) + 0.25:
        reasons.append(f"other processes used {other:.2f} cores beside the stages")
    if steal_share > STEAL_SHARE:
        reasons.append(f"the hypervisor took {100 * steal_share:.0f}% of the CPU time (steal)")
    note = ("loaded: " + "; ".join(reasons) + " -- the measured time includes time the stages waited for a"
            " CPU; compare the bottleneck stage's CPU time with the prediction") if reasons else \
        f"quiet: a core per stage, other processes used {other:.2f} cores"
    return {"cores": cores, "usable_cores": usable, "stages": stages, "timed_s": wall, "stages_cores": own,
            "launcher_cores": launcher, "other_cores": other, "steal_share": steal_share, "load_average": load,
            "loaded": bool(reasons), "note": note}
