"""The contiguous throughput IP as a second phase: improve a given split and prove a bound, by a deadline.

The default DP hands over here when its relaxation leaves a gap (wide
operator graphs whose lattice stays above the ideal budget).  HiGHS starts
from the DP's split; whatever it proves is certified on its own:

* its dual bound is a lower bound on every split whose device sets are
  contiguous, and the DP's chains of ideals are such splits, so it bounds
  the DP's optimum too;
* its incumbent is re-valued by the evaluator by the caller, and kept only when
  the devices form a pipeline (no two devices feed each other), as the DP's do.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from dnnplace.models.paper.solvers.ip.builder import BuildTimeout
from dnnplace.models.paper.solvers.ip.common import Groups, class_devices
from dnnplace.models.paper.solvers.ip.throughput import build_throughput_model
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload

BOUND_TOLERANCE = 1e-6  # HiGHS's bound is on its own (tolerance-limited) numbers: claim a hair less
HIGHS_LATE_SECONDS = 0.5  # at most this much of the time left is kept back for HiGHS overrunning its limit
#                           (builder._run_interruptibly cancels it 0.2 s past its limit)


def aim_before(deadline: float, now: float) -> float:
    """When to stop HiGHS: it checks its clock between steps and was seen a second late (under load)."""
    return deadline - min(HIGHS_LATE_SECONDS, 0.3 * max(deadline - now, 0.0))


def certified_bound(raw: float) -> float:
    """HiGHS's dual bound as a claim: 0 when none, and a hair less (it is on tolerance-limited numbers)."""
    bound = float(raw) if np.isfinite(raw) else 0.0
    return max(0.0, bound - BOUND_TOLERANCE * abs(bound))


@dataclass(frozen=True)
class IPPhase:
    """What the IP found by the deadline: a split (or None) and a certified lower bound (0 when none)."""

    split: Split | None
    bound: float
    stats: dict


def improve_with_ip(w: Workload, start: Split, *, gap: float, overlap: bool, deadline: float,
                    lower_bound: float = 0.0, threads: int | None = None,
                    stop: threading.Event | None = None) -> IPPhase:
    """The throughput IP (contiguous, CPUs too) warm-started with ``start``, stopped at ``deadline``.

    ``lower_bound``, a bound the caller proved for the splits it accepts (the
    DP's, for pipelines), floors the max-load column: HiGHS then stops as soon
    as its incumbent is within ``gap`` of it, and its dual bound -- the
    optimum of "max-load at least ``lower_bound``" -- still bounds every split
    the caller accepts.
    """
    t0 = time.perf_counter()
    allotted = deadline - t0
    aim = aim_before(deadline, t0)
    groups = Groups.of(w)
    k, l = w.max_accelerators, w.max_cpus
    try:
        m, x = build_throughput_model(w, groups, contiguous=True, contiguous_cpus=True, objective="throughput",
                                      overlap=overlap, deadline=aim)
        objective_cols = np.flatnonzero(np.asarray(m.cost) != 0.0)
        if objective_cols.size == 1 and lower_bound > 0:
            m.lb[int(objective_cols[0])] = float(lower_bound)
        warm = None
        dev = class_devices(groups, w, start, k)
        if dev is not None:
            warm = {int(x[g, d]): float(dev[g] == d) for g in range(groups.count) for d in range(k + l)}
        res = m.solve(time_limit=None, gap=gap, threads=threads, start=warm, label="throughput IP", stop=stop)
    except BuildTimeout:
        return IPPhase(None, 0.0, {"ip_phase": "no time left after building the model"})
    stats = {"ip_phase_s": round(time.perf_counter() - t0, 3), "ip_allotted_s": round(allotted, 3),
             "ip_status": res.status, "ip_solve_s": round(res.seconds, 3)}
    bound = certified_bound(res.bound)
    stats["ip_bound"] = bound
    if res.values is None:
        return IPPhase(None, bound, stats)
    dev_of_class = np.argmax(res.values[x], axis=1)
    split = Split.from_assignment(w.node_ids, dev_of_class[groups.of_node], k, l)
    stats["ip_objective"] = float(res.objective)
    return IPPhase(split, bound, stats)
