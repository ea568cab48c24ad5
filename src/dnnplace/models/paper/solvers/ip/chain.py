"""The throughput IP over chains of ideals: the DP's own search space, on the units the DP works on.

Why a second formulation beside :mod:`dnnplace.models.paper.solvers.ip.throughput`: the
assignment IP lets any class go to any device, so it needs SPEC's contiguity
rows and a symmetry break, and its branch and bound spends its time on
relabelled copies of one split.  A pipeline is a chain of ideals
``I_0 <= I_1 <= ... <= I_{k-1} = all``; with binaries ``y[u, j]`` ("unit ``u``
is in ``I_j``") precedence is ``y[v, j] <= y[u, j]`` along every edge, stage
``j`` holds ``x[u, j] = y[u, j] - y[u, j-1]``, and no two splits share a
solution.  HiGHS closes gaps on wide graphs far sooner this way than with the
assignment IP (figures in docs/dev/solver_policy.md).

Every stage is an accelerator (budgets with CPU cores use the assignment IP).
The loads are the DP's: compute plus each crossing source once per stage
that sends or receives it (SPEC "Throughput"), or their maximum with
overlapped communication.

``fluid``: the compute of units a relaxation left out (see
:mod:`dnnplace.models.paper.solvers.dp.relax`).  It is spread over the stages as
continuous amounts -- every split of the whole graph runs it somewhere -- so
the IP's bound on the relaxed units still bounds the whole graph.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from dnnplace.models.paper.solvers.ip.builder import BuildTimeout, MipBuilder
from dnnplace.models.paper.solvers.ip.certify import aim_before, certified_bound
from dnnplace.models.paper.solvers.prepare import Prepared

#: HiGHS options of the chain IP (measurements in docs/dev/solver_policy.md):
#: - pseudo-costs trusted at once (``mip_pscost_minreliable`` 0): the columns are many and alike (ideal
#:   memberships), and strong-branching each of them first took most of the IP's time;
#: - one thread: the same bound on every run, and it runs beside the DP, which has the other core.
HIGHS_OPTIONS: dict[str, object] = {"mip_pscost_minreliable": 0, "threads": 1}


@dataclass(frozen=True)
class ChainIP:
    """What the chain IP found by its deadline: a stage per unit (or None) and a certified lower bound."""

    stage: np.ndarray | None  # stage (pipeline position) of every unit of the prepared graph
    bound: float  # 0 when nothing was proven
    stats: dict


def chain_ip_applies(p: Prepared) -> bool:
    """Only accelerators, and every unit may run on one (else the assignment IP handles the budget)."""
    w = p.workload
    return w.max_cpus == 0 and w.max_accelerators >= 1 and bool(p.supported.all())


def solve_chain_ip(p: Prepared, start: np.ndarray | None, *, deadline: float, gap: float, overlap: bool,
                   lower_bound: float = 0.0, fluid: float = 0.0, threads: int | None = None,
                   stop: threading.Event | None = None) -> ChainIP:
    """Min max-load over pipelines of ``p``'s units, warm-started with ``start`` (a stage per unit), by ``deadline``.

    ``lower_bound``, proven for these units by the caller, floors the max-load
    column: HiGHS stops once its incumbent is within ``gap`` of it, and its
    dual bound (the optimum of "max-load at least ``lower_bound``") still
    bounds every pipeline of the units.  Setting ``stop`` ends HiGHS early
    with what it has (a caller running this beside other work).
    """
    t0 = time.perf_counter()
    aim = aim_before(deadline, t0)
    # more stages than units help only to spread the fluid (a relaxation of one unit still has k devices)
    k = max(1, p.workload.max_accelerators if fluid > 0 else min(p.workload.max_accelerators, p.n_units))
    try:
        m, y, x, target = _build(p, k, overlap=overlap, fluid=fluid, deadline=aim)
        m.lb[int(target)] = max(0.0, float(lower_bound))
        warm = None
        if start is not None and start.shape == (p.n_units,) and start.size and 0 <= start.min() and start.max() < k:
            stage = _stages_in_order(p, start)
            warm = {int(y[u, j]): float(stage[u] <= j) for u in range(p.n_units) for j in range(k)}
            warm.update({int(x[u, j]): float(stage[u] == j) for u in range(p.n_units) for j in range(k)})
        res = m.solve(time_limit=None, gap=gap, threads=None, start=warm, label="chain IP", stop=stop,
                      highs_options=HIGHS_OPTIONS if threads is None else {**HIGHS_OPTIONS, "threads": threads})
    except BuildTimeout:
        return ChainIP(None, 0.0, {"ip_phase": "no time left after building the model"})
    stats = {"ip_phase_s": round(time.perf_counter() - t0, 3), "ip_allotted_s": round(deadline - t0, 3),
             "ip_status": res.status, "ip_solve_s": round(res.seconds, 3), "ip_units": p.n_units}
    bound = certified_bound(res.bound)
    stats["ip_bound"] = bound
    if res.values is None:
        return ChainIP(None, bound, stats)
    stats["ip_objective"] = float(res.objective)
    inside = res.values[y] > 0.5  # (units, k): in I_j
    return ChainIP(np.argmax(inside, axis=1).astype(np.int64), bound, stats)


def _stages_in_order(p: Prepared, stage: np.ndarray) -> np.ndarray:
    """A warm start's stages renumbered so that every edge goes forward (a pipeline's devices, in its order).

    The caller's device numbers need not follow the pipeline; the quotient of
    a pipeline is acyclic, so its devices sorted topologically are the chain.
    """
    from dnnplace.utils.graph import order_devices

    n = int(stage.max()) + 1
    cross = stage[p.edge_src] != stage[p.edge_dst]
    order = order_devices(n, zip(stage[p.edge_src[cross]].tolist(), stage[p.edge_dst[cross]].tolist()))
    pos = np.empty(n, dtype=np.int64)
    pos[np.asarray(order, dtype=np.int64)] = np.arange(n)
    return pos[stage]


def _build(p: Prepared, k: int, *, overlap: bool, fluid: float,
           deadline: float | None) -> tuple[MipBuilder, np.ndarray, np.ndarray, int]:
    """The model: ``y`` (units x k, the last column fixed to 1), stage shares ``x``, and the max-load column."""
    from dnnplace.models.paper.solvers.prepare import memory_binds

    w = p.workload
    n = p.n_units
    m = MipBuilder(deadline)
    target = int(m.add_vars(1, cost=1.0)[0])
    y = m.add_vars(n * k, 0.0, 1.0, integer=True).reshape(n, k)
    m.fix(y[:, k - 1], 1.0)
    x = m.add_vars(n * k, 0.0, 1.0).reshape(n, k)
    for u in range(n):
        m.row([x[u, 0], y[u, 0]], [1.0, -1.0], lo=0.0, hi=0.0)
        for j in range(1, k):
            m.row([x[u, j], y[u, j], y[u, j - 1]], [1.0, -1.0, 1.0], lo=0.0, hi=0.0)
            m.row([y[u, j - 1], y[u, j]], [1.0, -1.0], hi=0.0)  # nested ideals
    for a, b in zip(p.edge_src.tolist(), p.edge_dst.tolist(), strict=False):
        for j in range(k - 1):
            m.row([y[b, j], y[a, j]], [1.0, -1.0], hi=0.0)  # b in I_j only with a
    share = m.add_vars(k, 0.0, max(fluid, 0.0)) if fluid > 0 else None
    if share is not None:
        m.row(share, np.ones(k), lo=fluid, hi=fluid)
    src = p.comm
    s = src.home.size
    binds = memory_binds(w)
    for j in range(k):
        comm_idx, comm_val = [], []
        if s:
            cin = m.add_vars(s, 0.0, 1.0)
            cout = m.add_vars(s, 0.0, 1.0)
            for i in range(s):
                h = int(src.home[i])
                for t in src.target_idx[src.target_ptr[i]: src.target_ptr[i + 1]].tolist():
                    m.row([cout[i], x[h, j], x[t, j]], [1.0, -1.0, 1.0], lo=0.0)  # sent from stage j
                    m.row([cin[i], x[t, j], x[h, j]], [1.0, -1.0, 1.0], lo=0.0)  # received by stage j
            comm_idx, comm_val = [cin, cout], [src.cost, src.cost]
        compute_idx, compute_val = [x[:, j]], [p.acc_time]
        if share is not None:
            compute_idx.append(share[j: j + 1])
            compute_val.append(np.ones(1))
        if overlap:
            m.row(np.concatenate([*compute_idx, [target]]), np.concatenate([*compute_val, [-1.0]]), hi=0.0)
            if comm_idx:
                m.row(np.concatenate([*comm_idx, [target]]), np.concatenate([*comm_val, [-1.0]]), hi=0.0)
        else:
            m.row(np.concatenate([*compute_idx, *comm_idx, [target]]),
                  np.concatenate([*compute_val, *comm_val, [-1.0]]), hi=0.0)
        if binds:
            _memory_row(m, p, x[:, j])
    return m, y, x, target


def _memory_row(m: MipBuilder, p: Prepared, cols: np.ndarray) -> None:
    """One stage's memory: its units' bytes and one copy of every shared group one of them uses."""
    sh = p.shared
    idx, val = [cols], [p.size]
    if sh.size.size:
        held = m.add_vars(sh.size.size, 0.0, 1.0)  # continuous: only a positive weight in this row
        for u in range(p.n_units):
            for q in sh.group[sh.ptr[u]: sh.ptr[u + 1]].tolist():
                m.row([held[q], cols[u]], [1.0, -1.0], lo=0.0)
        idx.append(held)
        val.append(sh.size)
    m.row(np.concatenate(idx), np.concatenate(val), hi=float(p.workload.memory))
