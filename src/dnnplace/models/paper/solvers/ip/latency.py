"""The single-sample latency integer program (SPEC latency model; paper Appendix A).

CPU cores are unlimited (one assignment column stands for all of them).  Each
accelerator offers ``q`` subgraph slots run one after another; a slot starts
when every input it receives is ready and takes incoming transfers + compute +
outgoing transfers.  The big-M constants are the latency of the best split
known (greedy, DP, all-on-CPU) -- every variable is bounded by it once the
objective is capped there -- rather than the sum of all CPU times.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from dnnplace.core.solver import RunContext, Solver, SolverOutput, param
from dnnplace.errors import InfeasibleError
from dnnplace.models.paper.evaluation import evaluate
from dnnplace.models.paper.solvers.ip.builder import BuildTimeout, MipBuilder
from dnnplace.models.paper.solvers.ip.common import Groups, add_contiguity, add_memory, class_devices, warm_start_dp
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload


def best_known_latency_split(w: Workload, deadline: float | None = None) -> tuple[Split, float]:
    """The best of greedy, the throughput DP split and all-on-CPU, by the evaluator's latency."""
    from dnnplace.models.paper.solvers.baselines.greedy import greedy_split

    candidates = [greedy_split(w)]
    # the latency model lets CPUs run free; for the DP a few cores are plenty (and keep it fast)
    dp = warm_start_dp(w.with_budget(cpus=min(w.max_cpus, 8)), deadline)
    if dp is not None:
        candidates.append(dp)
    candidates.append(Split.of([], [list(map(int, w.node_ids))]))  # CPUs are unlimited here
    best, best_lat = None, np.inf
    for s in candidates:
        ev = evaluate(w, s, complete=False)
        if not [v for v in ev.violations if v.kind != "devices"] and ev.latency < best_lat:
            best, best_lat = s, ev.latency
    assert best is not None
    return best, float(best_lat)


@dataclass
class LatencyIP(Solver):
    """The paper's single-sample latency IP (Appendix A); ``ip`` with the latency objective runs it."""

    name = "ip-latency"
    objectives = ("latency",)
    summary = "latency integer program on HiGHS (q contiguous subgraphs per accelerator)"

    gap: float = param(0.01, "relative MIP gap to prove", minimum=0, maximum=1)
    threads: int | None = param(None, "HiGHS threads", minimum=1, maximum=256)
    subgraphs_per_accelerator: int = param(1, "contiguous pieces per accelerator (q)", minimum=1, maximum=64)

    def solve(self, workload: Workload, run: RunContext) -> SolverOutput:
        # the method's one conversion from seconds: the algorithm below reads only the absolute deadline
        deadline = None if run.time_limit is None else time.perf_counter() + run.time_limit
        return solve_latency_ip(workload, run, self, deadline)


@dataclass(frozen=True)
class _LatencyModel:
    m: MipBuilder
    x: np.ndarray  # x[g, 0]: class g on the CPUs; x[g, 1 + f*q + j]: slot j of accelerator f
    q: int


def solve_latency_ip(w: Workload, run: RunContext, params: LatencyIP, deadline: float | None) -> SolverOutput:
    """Warm-start from the best known split, solve by ``deadline``, decode; fall back to the start when better.

    ``deadline`` is absolute (``time.perf_counter()`` seconds; None: no limit); ``run.time_limit`` is not read.
    """
    k = w.max_accelerators
    groups = Groups.of(w)
    warm, ub = best_known_latency_split(w, deadline)
    try:
        model = _build_latency_model(w, groups, params.subgraphs_per_accelerator, ub * (1 + 1e-6) + 1e-6,
                                     deadline)
    except BuildTimeout:
        return SolverOutput(plan=warm, status="time_limit", bound=None,
                            stats={"note": "the time limit ran out while building the IP; the best known split"})
    m, x, q = model.m, model.x, model.q
    G, S = groups.count, q * k
    cls = groups.of_node
    start_values = None
    dev = class_devices(groups, w, warm, k)
    if dev is not None:
        column = np.where(dev < k, 1 + dev * q, 0)  # accelerator f -> its first slot; CPUs -> 0
        start_values = {int(x[g, j]): float(column[g] == j) for g in range(G) for j in range(S + 1)}
    try:
        res = m.solve(time_limit=None, gap=params.gap, threads=params.threads, start=start_values,
                      progress=run.progress, label="latency IP")
    except BuildTimeout:
        return SolverOutput(plan=warm, status="time_limit", bound=None,
                            stats={"note": "the time limit ran out before HiGHS started; the best known split"})
    if res.values is None:
        if res.status == "infeasible":
            raise InfeasibleError("the latency IP is infeasible (memory or support constraints)")
        return SolverOutput(plan=warm, status="time_limit", bound=None,
                            stats={"note": "no IP solution in time; the best known split is returned"})
    column = np.argmax(res.values[x], axis=1)
    device = np.where(column == 0, k, (column - 1) // q)
    split = Split.from_assignment(w.node_ids, device[cls], k, 1)
    # the IP value can only improve on the start; keep the start if rounding made it worse
    if evaluate(w, split, complete=False).latency > ub:
        split = warm
    return SolverOutput(plan=split, status=res.status, bound=res.bound,
                        stats={"ip_objective": res.objective, "ip_seconds": res.seconds, "start_latency": ub})


def _build_latency_model(w: Workload, groups: Groups, q: int, big: float,
                         deadline: float | None = None) -> _LatencyModel:
    """The MIP of SPEC's latency model with ``q`` slots per accelerator; ``big`` bounds every time."""
    k = w.max_accelerators
    G = groups.count
    S = q * k
    m = MipBuilder(deadline)
    x = m.add_vars(G * (S + 1), 0.0, 1.0, integer=True).reshape(G, S + 1)  # column 0: CPUs
    lat = m.add_vars(w.n, 0.0, big)
    start = m.add_vars(S, 0.0, big)
    finish = m.add_vars(S, 0.0, big)
    total = m.add_vars(1, 0.0, big, cost=1.0)[0]
    for g in range(G):
        m.row(x[g], np.ones(S + 1), lo=1.0, hi=1.0)
        if groups.unsupported[g] or groups.memory[g] > w.memory:
            m.fix(x[g, 1:], 0.0)
    # identical accelerators: class g may only use the first g+1 of them
    for f in range(k):
        for g in range(min(f, G)):
            m.fix(x[g, 1 + f * q: 1 + (f + 1) * q], 0.0)
    for f in range(k):
        cols = x[:, 1 + f * q: 1 + (f + 1) * q]
        add_memory(m, cols, groups, w)
        for j in range(1, q):
            m.row([start[f * q + j], finish[f * q + j - 1]], [1.0, -1.0], lo=0.0)
    cls = groups.of_node
    # producers whose output reaches another class: they can cross a slot boundary
    succ_cls = [sorted({int(cls[t]) for t in w.successors[u].tolist()} - {int(cls[u])}) for u in range(w.n)]
    producers = [u for u in range(w.n) if succ_cls[u]]
    c = w.comm_cost
    for s in range(S):
        col = 1 + s
        add_contiguity(m, x[:, col], groups)
        cin = m.add_vars(len(producers), 0.0, 1.0)
        cout = m.add_vars(len(producers), 0.0, 1.0)
        for i, u in enumerate(producers):
            h = int(cls[u])
            for t in succ_cls[u]:
                m.row([cout[i], x[h, col], x[t, col]], [1.0, -1.0, 1.0], lo=0.0)
                m.row([cin[i], x[t, col], x[h, col]], [1.0, -1.0, 1.0], lo=0.0)
            # the slot starts after u is ready when it receives u's output
            m.row([start[s], lat[u], cin[i]], [1.0, -1.0, -big], lo=-big)
        costs = np.array([c[u] for u in producers])
        acc = groups.acc_fw + groups.acc_bw
        m.row(np.concatenate([[finish[s], start[s]], x[:, col], cin, cout]),
              np.concatenate([[1.0, -1.0], -acc, -costs, -costs]), lo=0.0, hi=0.0)
        m.row([finish[s], total], [1.0, -1.0], hi=0.0)
        for v in range(w.n):
            m.row([lat[v], finish[s], x[cls[v], col]], [1.0, -1.0, -big], lo=-big)
    for v in range(w.n):
        m.row([lat[v], x[cls[v], 0]], [1.0, -float(w.cpu_time[v])], lo=0.0)
        m.row([total, lat[v]], [1.0, -1.0], lo=0.0)
    for u, v in zip(w.edge_src.tolist(), w.edge_dst.tolist()):
        m.row([lat[v], lat[u], x[cls[v], 0]], [1.0, -1.0, -float(w.cpu_time[v])], lo=0.0)
    return _LatencyModel(m, x, q)
