"""Throughput integer programs (SPEC "Integer programs"; paper Sections 4-5) on HiGHS.

Binaries ``x[g, d]`` put colour class ``g`` on device ``d``; communication
variables are per *producer* (original node, merged when two feed the same
classes from the same class) and accelerator, so a device pays each crossing
output once.  The contiguous variant adds SPEC's ``z`` constraints per device.
The DP's split warm-starts the search; identical devices are symmetry-broken.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from dnnplace.core.solver import RunContext, Solver, SolverOutput, param
from dnnplace.errors import InfeasibleError
from dnnplace.models.paper.solvers.ip.builder import BuildTimeout, MipBuilder
from dnnplace.models.paper.solvers.ip.common import (
    Groups,
    add_contiguity,
    add_memory,
    break_symmetry,
    class_devices,
    warm_start_dp,
)
from dnnplace.models.paper.solvers.prepare import CommSources, comm_sources
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload


@dataclass
class NonContiguousIP(Solver):
    """The throughput IP without contiguity: any split (a bound on what contiguity costs)."""

    name = "ip-noncontig"
    objectives = ("throughput", "fw+bw")
    summary = "integer program on HiGHS, any split"
    contiguous: ClassVar[bool] = False

    gap: float = param(0.01, "relative MIP gap to prove", minimum=0, maximum=1)
    threads: int | None = param(None, "HiGHS threads", minimum=1, maximum=256)

    def solve(self, workload: Workload, run: RunContext) -> SolverOutput:
        # the method's one conversion from seconds: the algorithm below reads only the absolute deadline
        deadline = None if run.time_limit is None else time.perf_counter() + run.time_limit
        return solve_throughput_ip(workload, run, deadline=deadline, contiguous=self.contiguous, gap=self.gap,
                                   threads=self.threads, contiguous_cpus=self.cpus_contiguous())

    def cpus_contiguous(self) -> bool:
        """Whether CPU cores must hold contiguous sets too (never without contiguity)."""
        return False


@dataclass
class ContiguousIP(NonContiguousIP):
    """The paper's throughput IP with SPEC's contiguity constraints (max-load or max FW + max BW)."""

    name = "ip"
    summary = "integer program on HiGHS, contiguous per device"
    contiguous: ClassVar[bool] = True

    contiguous_cpus: bool = param(True, "also force contiguity on CPU cores")

    def cpus_contiguous(self) -> bool:
        return self.contiguous_cpus


def build_throughput_model(w: Workload, groups: Groups, *, contiguous: bool, contiguous_cpus: bool,
                           objective: str, overlap: bool, relax: str = "",
                           deadline: float | None = None) -> tuple[MipBuilder, np.ndarray]:
    """The MIP; ``relax`` names constraint families to drop ("memory", "support") for diagnosis."""
    k, l = w.max_accelerators, w.max_cpus
    D = k + l
    G = groups.count
    m = MipBuilder(deadline)
    x = m.add_vars(G * D, 0.0, 1.0, integer=True).reshape(G, D)
    fwbw = objective == "fw+bw"
    if fwbw:
        max_fw = m.add_vars(1, cost=1.0)[0]
        max_bw = m.add_vars(1, cost=1.0)[0]
    else:
        max_load = m.add_vars(1, cost=1.0)[0]
    for g in range(G):
        m.row(x[g], np.ones(D), lo=1.0, hi=1.0)
        if groups.unsupported[g] and "support" not in relax:
            m.fix(x[g, :k], 0.0)
        if groups.memory[g] > w.memory and "memory" not in relax:
            m.fix(x[g, :k], 0.0)
    break_symmetry(m, x, range(0, k), groups)
    break_symmetry(m, x, range(k, D), groups)
    if "memory" not in relax:
        for d in range(k):
            add_memory(m, x[:, d], groups, w)
    families: list[tuple[CommSources, np.ndarray, np.ndarray]] = []
    if fwbw:
        families.append((comm_sources(w, groups.of_node, ~w.backward), groups.acc_fw, groups.cpu_fw))
        families.append((comm_sources(w, groups.of_node, w.backward), groups.acc_bw, groups.cpu_bw))
    else:
        families.append((comm_sources(w, groups.of_node), groups.acc_fw + groups.acc_bw,
                         groups.cpu_fw + groups.cpu_bw))
    for fam, (src, acc_t, cpu_t) in enumerate(families):
        target = (max_fw if fam == 0 else max_bw) if fwbw else max_load
        s = src.home.size
        for d in range(k):
            cin = m.add_vars(s, 0.0, 1.0)
            cout = m.add_vars(s, 0.0, 1.0)
            for i in range(s):
                h = int(src.home[i])
                for t in src.target_idx[src.target_ptr[i]: src.target_ptr[i + 1]].tolist():
                    m.row([cout[i], x[h, d], x[t, d]], [1.0, -1.0, 1.0], lo=0.0)
                    m.row([cin[i], x[t, d], x[h, d]], [1.0, -1.0, 1.0], lo=0.0)
            comm_idx = np.concatenate([cin, cout])
            comm_val = np.concatenate([src.cost, src.cost])
            if overlap:
                m.row(np.append(x[:, d], target), np.append(acc_t, -1.0), hi=0.0)
                m.row(np.append(comm_idx, target), np.append(comm_val, -1.0), hi=0.0)
            else:
                m.row(np.concatenate([x[:, d], comm_idx, [target]]), np.concatenate([acc_t, comm_val, [-1.0]]),
                      hi=0.0)
        for d in range(k, D):
            m.row(np.append(x[:, d], target), np.append(cpu_t, -1.0), hi=0.0)
    if contiguous:
        for d in range(k):
            add_contiguity(m, x[:, d], groups)
        if contiguous_cpus:
            for d in range(k, D):
                add_contiguity(m, x[:, d], groups)
    return m, x


def solve_throughput_ip(w: Workload, run: RunContext, *, deadline: float | None, contiguous: bool, gap: float,
                        threads: int | None, contiguous_cpus: bool) -> SolverOutput:
    """Build, warm-start and solve the throughput MIP by ``deadline``; name the binding constraints when infeasible.

    ``deadline`` is absolute (``time.perf_counter()`` seconds; None: no limit); ``run.time_limit`` is not read.
    """
    groups = Groups.of(w)
    k, l = w.max_accelerators, w.max_cpus
    warm = warm_start_dp(w, deadline) if not run.overlap_comm else None
    try:
        m, x = build_throughput_model(w, groups, contiguous=contiguous, contiguous_cpus=contiguous_cpus,
                                      objective=run.objective, overlap=run.overlap_comm, deadline=deadline)
        start = None
        if warm is not None:
            dev = class_devices(groups, w, warm, k)
            if dev is not None:
                start = {int(x[g, d]): float(dev[g] == d) for g in range(groups.count) for d in range(k + l)}
        res = m.solve(time_limit=None, gap=gap, threads=threads, start=start, progress=run.progress,
                      label="throughput IP")
    except BuildTimeout:
        if warm is None:
            raise
        return SolverOutput(plan=warm, status="time_limit", bound=None,
                            stats={"note": "the time limit ran out while building the IP; the DP's split"})
    if res.status == "infeasible":
        why = _diagnose(w, groups, contiguous, contiguous_cpus, threads)
        raise InfeasibleError(f"the throughput IP is infeasible: {why}")
    if res.values is None:
        if warm is not None:
            return SolverOutput(plan=warm, status="time_limit", bound=None,
                                stats={"note": "no IP solution in time; the DP's split is returned"})
        raise InfeasibleError("the throughput IP found no split within the time limit; raise --time-limit")
    xv = res.values[x]
    dev_of_class = np.argmax(xv, axis=1)
    split = Split.from_assignment(w.node_ids, dev_of_class[groups.of_node], k, l)
    return SolverOutput(plan=split, status=res.status, bound=res.bound,
                        stats={"ip_objective": res.objective, "ip_seconds": res.seconds,
                               "warm_start": start is not None})


def _diagnose(w: Workload, groups: Groups, contiguous: bool, contiguous_cpus: bool, threads: int | None) -> str:
    """Name the binding constraint family by re-solving with families dropped."""
    for relax, family in (("memory", "memory (maxSizePerFPGA)"), ("support", "support (supportedOnFpga)"),
                          ("memory,support", "memory and support together")):
        m, _ = build_throughput_model(w, groups, contiguous=contiguous, contiguous_cpus=contiguous_cpus,
                                      objective="throughput", overlap=False, relax=relax)
        if m.solve(time_limit=10.0, gap=1.0, threads=threads).status != "infeasible":
            return f"the {family} constraints are binding"
    return f"the device count ({w.max_accelerators} accelerators, {w.max_cpus} CPU cores) is too small"
