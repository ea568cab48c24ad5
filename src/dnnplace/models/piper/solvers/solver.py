"""Exact planner for Piper's model (PIPER-SPEC sections 2-3): stages x data x tensor parallelism x TMPCs.

Steps:

1. Lower bound ``LB`` = device-seconds of the work over ``K`` devices.
2. The exact DP with a bound ``tau`` that starts just above ``LB`` and grows
   until a plan is found (a run with bound ``tau`` is exact for every instance
   whose optimum is ``<= tau``, and lets the walk skip stages that are too slow
   or too big).  On a small lattice of tails these runs are over all tails and
   the first plan found is the answer; otherwise they are over the *chain* of
   one topological order (n + 1 tails), whose plan bounds the optimum, and
3. the exact DP over all tails of the DAG runs once with ``tau`` = that bound.
4. Reconstruction, then the exact TMPC choice per stage at its true number of
   micro-batches in flight, then the evaluator (:mod:`dnnplace.models.piper.evaluation`)
   judges the plan: its value is the one reported.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from dnnplace.core.solver import ProgressFn
from dnnplace.errors import InfeasibleError, SolverTimeout
from dnnplace.models.paper.solvers.dp.ideals import enumerate_ideals
from dnnplace.models.piper.evaluation import PiperEvaluation, evaluate_piper
from dnnplace.models.piper.solvers import kernel
from dnnplace.models.piper.solvers.bundles import Graph, Limits, Options, Points, Tails
from dnnplace.models.piper.solvers.knapsack import INF, min_cover_choice
from dnnplace.models.piper.spec import TMPC, PiperInstance, PiperPlan, PiperStage
from dnnplace.utils.graph import topological_order


@dataclass
class Arrays:
    K: int
    N: int
    M: float
    BW: float
    S: int
    tvals: np.ndarray
    divs: np.ndarray
    dmax_t: np.ndarray
    nopt: np.ndarray
    pp: np.ndarray
    ww: np.ndarray
    aa: np.ndarray
    bb: np.ndarray
    esrc: np.ndarray
    edst: np.ndarray
    ecost: np.ndarray
    fwe: np.ndarray
    bwe: np.ndarray
    in_ptr: np.ndarray
    in_edge: np.ndarray
    out_ptr: np.ndarray
    out_edge: np.ndarray
    node_miss: np.ndarray
    node_pmin: np.ndarray
    node_mmin: np.ndarray
    fast: np.ndarray  # per (node, t): the option that is fastest in every stage and for every d (0 if none)
    node_nonstatic: np.ndarray  # 1 where neither option is always the fastest
    node_wp: np.ndarray  # per node: (least device-seconds over t, least compute over t)
    node_mmin2: np.ndarray  # per (node, t): least memory with 2 micro-batches in flight


@dataclass
class Lattice:
    down_ptr: np.ndarray
    down_ideal: np.ndarray
    down_unit: np.ndarray
    miss_sum: np.ndarray
    nonstatic_sum: np.ndarray
    pmin_sum: np.ndarray
    mmin_sum: np.ndarray
    wp_sum: np.ndarray
    mmin2_sum: np.ndarray

    @property
    def n_ideals(self) -> int:
        return self.down_ptr.shape[0] - 1


@dataclass
class PiperResult:
    plan: PiperPlan
    evaluation: PiperEvaluation
    tps: float
    status: str
    bound: float
    runtime_s: float
    stats: dict = field(default_factory=dict)


def build_arrays(inst: PiperInstance) -> Arrays:
    K, N = inst.max_devices, inst.batch
    n = inst.n
    tvals = sorted({t for per in inst.tmpcs for t, opts in per.items() if opts and t <= K})
    nt = max(1, len(tvals))
    tix = {t: i for i, t in enumerate(tvals)}
    nopt = np.zeros((n, nt), dtype=np.int64)
    pp = np.zeros((n, nt, 2))
    ww = np.zeros((n, nt, 2))
    aa = np.zeros((n, nt, 2))
    bb = np.zeros((n, nt, 2))
    for v in range(n):
        for t, opts in inst.tmpcs[v].items():
            if t not in tix:
                continue
            ti = tix[t]
            nopt[v, ti] = len(opts)
            for lo, o in enumerate(opts):
                pp[v, ti, lo], ww[v, ti, lo], aa[v, ti, lo], bb[v, ti, lo] = o.p, o.w, o.a, o.b
    E = len(inst.edges)
    esrc = np.array([u for u, _, _ in inst.edges], dtype=np.int64)
    edst = np.array([v for _, v, _ in inst.edges], dtype=np.int64)
    ecost = np.array([c for _, _, c in inst.edges], dtype=np.float64)
    fwe = np.zeros((E, nt, 2))
    bwe = np.zeros((E, nt, 2))
    for e, (u, v, _) in enumerate(inst.edges):
        for t, ti in tix.items():
            for lo, o in enumerate(inst.tmpcs[v].get(t, [])):
                fwe[e, ti, lo] = o.fw.get(u, 0.0)
            for lo, o in enumerate(inst.tmpcs[u].get(t, [])):
                bwe[e, ti, lo] = o.bw.get(v, 0.0)

    def csr(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(keys, kind="stable")
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
        return ptr, order.astype(np.int64)

    in_ptr, in_edge = csr(edst)
    out_ptr, out_edge = csr(esrc)
    S = min(N, K)
    divs = np.array([d for d in range(1, S + 1) if N % d == 0], dtype=np.int64)
    dmax_t = np.zeros(nt, dtype=np.int64)
    for ti, t in enumerate(tvals):
        ok = [d for d in divs if d * t <= K]
        dmax_t[ti] = max(ok) if ok else 0
    node_miss = (nopt == 0).astype(np.int64)
    node_pmin = np.where(nopt > 0, np.minimum(pp[:, :, 0], np.where(nopt == 2, pp[:, :, 1], np.inf)), 0.0)
    msum = aa + bb
    node_mmin = np.where(nopt > 0, np.minimum(msum[:, :, 0], np.where(nopt == 2, msum[:, :, 1], np.inf)), 0.0)
    msum2 = 2 * aa + bb
    node_mmin2 = np.where(nopt > 0, np.minimum(msum2[:, :, 0], np.where(nopt == 2, msum2[:, :, 1], np.inf)), 0.0)
    fast = np.zeros((n, nt), dtype=np.int64)
    nonstatic = np.zeros((n, nt), dtype=np.int64)
    for v in range(n):
        for ti in range(nt):
            if nopt[v, ti] != 2:
                continue
            o0, o1 = inst.tmpcs[v][tvals[ti]]

            def dominates(f, o):
                return (f.p <= o.p and f.w <= o.w and all(f.fw[u] <= o.fw[u] for u in f.fw)
                        and all(f.bw[x] <= o.bw[x] for x in f.bw))

            if dominates(o0, o1):
                fast[v, ti] = 0
            elif dominates(o1, o0):
                fast[v, ti] = 1
            else:
                nonstatic[v, ti] = 1
    node_wp = np.zeros((n, 2))
    for v in range(n):
        ok = [ti for ti in range(nt) if nopt[v, ti] > 0]
        if ok:
            node_wp[v, 0] = min(tvals[ti] * node_pmin[v, ti] for ti in ok)
            node_wp[v, 1] = min(node_pmin[v, ti] for ti in ok)
    return Arrays(K, N, inst.memory, inst.bandwidth, S, np.array(tvals, dtype=np.int64), divs, dmax_t, nopt,
                  pp, ww, aa, bb, esrc, edst, ecost, fwe, bwe, in_ptr, in_edge, out_ptr, out_edge,
                  node_miss, node_pmin, node_mmin, fast, nonstatic, node_wp, node_mmin2)


def _with_sums(ar: Arrays, down_ptr, down_ideal, down_unit) -> Lattice:
    return Lattice(
        down_ptr, down_ideal, down_unit,
        kernel.ideal_sums(down_ptr, down_ideal, down_unit, ar.node_miss),
        kernel.ideal_sums(down_ptr, down_ideal, down_unit, ar.node_nonstatic),
        kernel.ideal_sums(down_ptr, down_ideal, down_unit, ar.node_pmin),
        kernel.ideal_sums(down_ptr, down_ideal, down_unit, ar.node_mmin),
        kernel.ideal_sums(down_ptr, down_ideal, down_unit, ar.node_wp),
        kernel.ideal_sums(down_ptr, down_ideal, down_unit, ar.node_mmin2),
    )


def tail_lattice(inst: PiperInstance, ar: Arrays, max_ideals: int) -> Lattice:
    """All tails (closed under successors), via the shared ideal enumeration on the reversed graph."""
    n = inst.n
    rev = SimpleNamespace(
        n_units=n, edge_src=ar.edst, edge_dst=ar.esrc,
        acc_time=np.zeros(n), cpu_time=np.zeros(n), size=np.zeros(n), supported=np.ones(n, dtype=bool),
    )
    lat = enumerate_ideals(rev, budget=max_ideals)  # type: ignore[arg-type]
    return _with_sums(ar, lat.down_ptr, lat.down_ideal, lat.down_unit)


def topo_order(inst: PiperInstance) -> list[int]:
    """A topological order that visits node 0's chain first (sources by index, successors in edge order)."""
    succ: list[list[int]] = [[] for _ in range(inst.n)]
    for u, v, _ in inst.edges:
        succ[u].append(v)
    # the shared Kahn pops the last source pushed and the last successor listed first: push both reversed
    return topological_order(inst.n, [s[::-1] for s in succ], range(inst.n - 1, -1, -1)).tolist()


def chain_lattice(inst: PiperInstance, ar: Arrays) -> Lattice:
    """The tails that are suffixes of one topological order: ideal i = the last i nodes."""
    order = topo_order(inst)
    n = inst.n
    down_ptr = np.concatenate([[0, 0], np.arange(1, n + 1)]).astype(np.int64)
    down_ideal = np.arange(0, n, dtype=np.int64)
    down_unit = np.array([order[n - i] for i in range(1, n + 1)], dtype=np.int64)
    return _with_sums(ar, down_ptr, down_ideal, down_unit)


class _Stopped(Exception):
    """A DP run was stopped by the deadline before it finished its tables."""


@dataclass
class _Limits:
    """When to stop (``time.perf_counter()`` deadline) and whom to tell how far a run is."""

    deadline: float | None = None
    progress: ProgressFn | None = None


def _run_stoppable(args: tuple, n_tails: int, limits: _Limits) -> tuple:
    """``kernel.run_dp`` in a thread (it holds no GIL), so Ctrl-C and the deadline stop it within ~50 ms.

    The main thread waits in short slices, reports progress, and on Ctrl-C or
    the deadline asks the kernel to stop before its next tail; Ctrl-C is
    re-raised once the kernel has returned, the deadline becomes :class:`_Stopped`.
    """
    ctl = np.zeros(3, dtype=np.int64)
    box: dict = {}

    def work() -> None:
        try:
            box["out"] = kernel.run_dp(*args, ctl)  # type: ignore[call-arg]
        except BaseException as exc:  # noqa: BLE001 -- handed to the waiting thread
            box["exc"] = exc

    worker = threading.Thread(target=work, name="piper-dp", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.05)
            if limits.progress is not None:
                limits.progress(int(ctl[1]), n_tails, "Piper DP over tails")
            if limits.deadline is not None and time.perf_counter() > limits.deadline:
                ctl[0] = 1
    except KeyboardInterrupt:
        ctl[0] = 1
        worker.join()
        raise
    if "exc" in box:
        raise box["exc"]
    if ctl[2]:
        raise _Stopped
    return box["out"]


class _DP:
    """F tables for one lattice and one bound."""

    def __init__(self, ar: Arrays, lat: Lattice, tau: float, limits: _Limits | None = None) -> None:
        self.ar, self.lat, self.tau = ar, lat, tau
        nI = lat.n_ideals
        self.row_ptr = np.empty((nI, ar.K + 2), dtype=np.int64)
        self.kmin = np.empty(nI, dtype=np.int64)
        self.pairs, self.tables, self.pts_s, self.pts_v, self.npts = _run_stoppable(
            (*self._common(), self.row_ptr, self.kmin), nI, limits or _Limits())

    def _common(self) -> tuple:
        """The kernel's bundles for this lattice and bound: (tails, graph, TMPC options, limits)."""
        ar, lat = self.ar, self.lat
        tails = Tails(down_ptr=lat.down_ptr, down_ideal=lat.down_ideal, down_unit=lat.down_unit,
                      miss_sum=lat.miss_sum, nonstatic_sum=lat.nonstatic_sum, pmin_sum=lat.pmin_sum,
                      mmin_sum=lat.mmin_sum, mmin2_sum=lat.mmin2_sum, wp_sum=lat.wp_sum)
        graph = Graph(in_ptr=ar.in_ptr, in_edge=ar.in_edge, out_ptr=ar.out_ptr, out_edge=ar.out_edge,
                      esrc=ar.esrc, edst=ar.edst, ecost=ar.ecost, fwe=ar.fwe, bwe=ar.bwe)
        opts = Options(nopt=ar.nopt, pp=ar.pp, ww=ar.ww, aa=ar.aa, bb=ar.bb, fast=ar.fast, tvals=ar.tvals,
                       divs=ar.divs, dmax_t=ar.dmax_t)
        limits = Limits(K=ar.K, big_n=ar.N, bw=ar.BW, memory=ar.M, tau=self.tau, S=ar.S)
        return tails, graph, opts, limits

    @property
    def full(self) -> int:
        return self.lat.n_ideals - 1

    def _full_points(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        f = self.full
        ks, ss, vs = [], [], []
        for k in range(self.ar.K + 1):
            lo, hi = self.row_ptr[f, k], self.row_ptr[f, k + 1]
            ks.extend([k] * (hi - lo))
            ss.extend(self.pts_s[lo:hi].tolist())
            vs.extend(self.pts_v[lo:hi].tolist())
        return np.array(ks, dtype=np.int64), np.array(ss, dtype=np.int64), np.array(vs)

    @property
    def value(self) -> float:
        _, _, vs = self._full_points()
        return float(vs.min()) if len(vs) else INF

    def reconstruct(self) -> list[tuple[list[int], int, int]]:
        """Stages front first as (nodes, t, d); the rest of the plan is fixed afterwards."""
        ar = self.ar
        ks, ss, vs = self._full_points()
        best = float(vs.min())
        at = [(int(k), int(s)) for k, s, v in zip(ks, ss, vs) if v <= best]
        ck, cs = min(at)  # fewest devices, then the smallest sum of data-parallel degrees
        cur = self.full
        out_nodes = np.empty(len(ar.in_ptr), dtype=np.int64)
        stages = []
        while cur != 0:
            J, ti, d, s1, cnt = kernel.find_step(  # type: ignore[call-arg]
                cur, ck, cs, best, *self._common(), Points(self.row_ptr, self.kmin, self.pts_s, self.pts_v), out_nodes)
            if J < 0:
                raise RuntimeError("internal error: Piper DP reconstruction found no stage")
            t = int(ar.tvals[ti])
            stages.append((sorted(int(v) for v in out_nodes[:cnt]), t, int(d)))
            ck -= t * int(d)
            cs = int(s1) - int(d)
            cur = int(J)
        return stages


def stage_options(inst: PiperInstance, nodes: list[int], t: int, d: int) -> list[list[float]]:
    """Per node, the time per sample of each TMPC in this stage (PIPER-SPEC 4.3's P)."""
    members = set(nodes)
    N, BW = inst.batch, inst.bandwidth
    out = []
    for v in nodes:
        costs = []
        for o in inst.tmpcs[v][t]:
            e = 0.0
            for u, x, c in inst.edges:
                if x == v and u not in members:
                    e += 2.0 * (c + o.fw[u])
                if u == v and x not in members:
                    e += 2.0 * (c + o.bw[x])
            if d == 1:
                costs.append(e / BW + o.p)
            else:
                costs.append((e / d + 4.0 * (d - 1) * o.w / (d * N)) / BW + o.p / d)
        out.append(costs)
    return out


def choose_tmpcs(inst: PiperInstance, nodes: list[int], t: int, d: int, y: int) -> dict[int, str] | None:
    """The exact best TMPC per node of a stage with ``y`` micro-batches in flight (None: does not fit)."""
    costs = stage_options(inst, nodes, t, d)
    choice: dict[int, int] = {}
    items: list[tuple[int, int, float, float]] = []
    mem = 0.0
    for v, cs in zip(nodes, costs):
        opts = inst.tmpcs[v][t]
        f = min(range(len(opts)), key=lambda lo: (cs[lo], opts[lo].a, opts[lo].b))
        choice[v] = f
        mem += opts[f].a * y + opts[f].b
        for lo in range(len(opts)):
            if lo == f:
                continue
            sav = (opts[f].a * y + opts[f].b) - (opts[lo].a * y + opts[lo].b)
            if sav > 0:
                items.append((v, lo, cs[lo] - cs[f], sav))
    need = mem - inst.memory
    if need > 0:
        res = min_cover_choice([c for _, _, c, _ in items], [s for _, _, _, s in items], need)
        if res is None:
            return None
        for i in res[1]:
            choice[items[i][0]] = items[i][1]
    return {v: inst.tmpcs[v][t][lo].id for v, lo in choice.items()}


def _lower_bound(inst: PiperInstance, ar: Arrays) -> float:
    work = 0.0
    for v in range(inst.n):
        best = INF
        for t, opts in inst.tmpcs[v].items():
            if opts and t <= ar.K:
                best = min(best, t * min(o.p for o in opts))
        work += best
    return work / ar.K


def _max_stage_time(inst: PiperInstance, ar: Arrays) -> float:
    """No stage of any plan is slower than this (every cost term at its maximum, d = 1)."""
    tot = 0.0
    for v in range(inst.n):
        best = 0.0
        for opts in inst.tmpcs[v].values():
            for o in opts:
                e = sum(2.0 * (c + o.fw.get(u, 0.0)) for u, x, c in inst.edges if x == v)
                e += sum(2.0 * (c + o.bw.get(x, 0.0)) for u, x, c in inst.edges if u == v)
                best = max(best, e / ar.BW + o.p + 4.0 * o.w / ar.BW)
        tot += best
    return tot * (1.0 + 1e-6) + 1e-300


def _obviously_infeasible(inst: PiperInstance, ar: Arrays) -> str | None:
    """A node no stage can hold (no TMPCs within K devices, or over the memory alone)."""
    K, M = ar.K, ar.M
    for v in range(inst.n):
        ts = [t for t, opts in inst.tmpcs[v].items() if opts and t <= K]
        if not ts:
            return (f"infeasible: node {inst.old_ids[v]} ({inst.names[v]}) has no TMPCs for any tensor-parallel "
                    f"degree <= {K} devices")
    for v in range(inst.n):
        need = min(o.a + o.b for t, opts in inst.tmpcs[v].items() if t <= K for o in opts)
        if need > M:
            return (f"infeasible: memory: node {inst.old_ids[v]} ({inst.names[v]}) alone needs {need:.6g} bytes "
                    f"(fixed + one micro-batch in flight) > maxMemoryPerDevice {M:.6g}")
    return None


def _explain_infeasible(inst: PiperInstance, ar: Arrays) -> str:
    K, M = ar.K, ar.M
    obvious = _obviously_infeasible(inst, ar)
    if obvious is not None:
        return obvious
    relaxed = Arrays(**{**ar.__dict__, "M": 1e300})
    if _DP(relaxed, chain_lattice(inst, relaxed), INF).value < INF:
        return (f"infeasible: memory: no split into stages keeps every device within maxMemoryPerDevice {M:.6g} "
                f"bytes (fixed bytes + activations of ceil(D_i/d_i) micro-batches in flight) on {K} devices with "
                f"mbsInBatch {ar.N}")
    return (f"infeasible: devices: no plan fits {K} devices (every stage needs d*t devices and one tensor-parallel "
            f"degree that all its nodes support)")


def solve_piper(inst: PiperInstance, *, max_ideals: int = 2_000_000, time_limit: float | None = None,
                progress: ProgressFn | None = None) -> PiperResult:
    """The optimal plan for Piper's model; raises :class:`InfeasibleError` (one line) if there is none.

    With ``time_limit`` (seconds) a run stopped by it returns the best plan found
    so far with status ``time_limit`` and a proven lower ``bound``; if it has no
    plan yet it raises :class:`~dnnplace.errors.SolverTimeout`.
    """
    start = time.perf_counter()
    limits = _Limits(None if time_limit is None else start + time_limit, progress)
    ar = build_arrays(inst)
    stats: dict = {"nodes": inst.n, "edges": len(inst.edges)}
    why = _obviously_infeasible(inst, ar)
    if why is not None:
        raise InfeasibleError(why)
    lb = _lower_bound(inst, ar)
    top = _max_stage_time(inst, ar)
    chain = chain_lattice(inst, ar)
    lat = tail_lattice(inst, ar, max_ideals)
    stats["ideals"] = lat.n_ideals
    found = _SoFar(proven_lb=lb)
    final: _DP | None = None
    try:
        final = _exact_tables(inst, ar, lat, chain, lb, top, limits, stats, found)
    except _Stopped:
        if found.dp is None:
            raise SolverTimeout(f"piper: time limit reached before any plan was found (after"
                                f" {stats['search_rounds']} bound rounds); raise --time-limit") from None
    dp = final if final is not None else found.dp
    assert dp is not None
    stats["pairs"] = int(dp.pairs)
    stats["stage_tables"] = int(dp.tables)
    if dp.value >= INF:
        raise InfeasibleError(_explain_infeasible(inst, ar))
    best = dp.value
    plan = _plan_of(inst, dp)
    ev = evaluate_piper(inst, plan)
    if not ev.feasible or ev.tps > best * (1.0 + 1e-6) + 1e-12:
        raise RuntimeError(f"internal error: the evaluator gives {ev.tps} for a plan the DP valued {best}")
    runtime = time.perf_counter() - start
    stats["dp_value"] = best
    if final is not None:
        status, bound = "optimal", ev.tps
    else:
        status, bound = "time_limit", min(found.proven_lb, ev.tps)
    gap = (ev.tps - bound) / ev.tps if ev.tps > 0 else 0.0
    plan.meta = {"status": status, "bound": bound, "gap": gap, "runtime_s": runtime}
    return PiperResult(plan, ev, ev.tps, status, bound, runtime, stats)


@dataclass
class _SoFar:
    """What a deadline falls back on: the tables of the best plan found, and the best proven bound."""

    dp: _DP | None = None
    proven_lb: float = 0.0


def _exact_tables(inst: PiperInstance, ar: Arrays, lat: Lattice, chain: Lattice, lb: float, top: float,
                  limits: _Limits, stats: dict, found: _SoFar) -> _DP:
    """Steps 2-3: the bound search, then the exact DP over all tails (its tables, maybe infeasible).

    Keeps ``found`` up to date as plans and bounds are proven; a deadline raises :class:`_Stopped`.
    """
    # On a small lattice the search for a bound runs on all tails directly: a run that finds a
    # plan is then the answer, and failing runs cost little more than on the chain.
    direct = lat.n_ideals <= 3 * chain.n_ideals
    search = lat if direct else chain
    stats["bound_search"] = "all tails" if direct else "chain"
    tau = lb * 1.25 if lb > 0 else INF
    ub = INF
    rounds = 0
    growth = 1.15
    ub1 = None
    final = None
    while True:
        rounds += 1
        stats["search_rounds"] = rounds
        if tau >= top:
            tau = INF
        dp = _DP(ar, search, tau, limits)
        if dp.value < INF:
            ub = dp.value
            found.dp = dp
            if direct:
                final = dp  # exact: its value is <= tau
            break
        if tau >= INF:
            if direct:
                final = dp  # proven infeasible
            break
        if direct:
            found.proven_lb = max(found.proven_lb, tau)  # no plan over all tails is within tau
        if ub1 is None:
            # a cheap real plan: the chain with one replica per stage, within 2.5 tau (else none)
            # (its sum of d is the number of stages, at most n)
            one = Arrays(**{**ar.__dict__, "divs": ar.divs[:1], "dmax_t": np.minimum(ar.dmax_t, 1),
                            "S": min(ar.S, inst.n)})
            dp1 = _DP(one, chain, 2.5 * tau, limits)
            ub1 = dp1.value
            stats["one_replica_ub"] = ub1
            if ub1 < INF:
                found.dp = dp1
            if ub1 <= 2.5 * tau:
                ub = ub1  # close enough: that plan's value bounds the full DP
                break
        tau *= growth
        growth = 1.0 + (growth - 1.0) * 1.5  # small steps first: a run's cost grows quickly with tau
        if ub1 < INF and tau * growth >= ub1:
            ub = ub1
            break
    stats["search_ub"] = ub
    if final is None:
        tau = INF if ub >= INF else ub * (1.0 + 1e-9)
        final = _DP(ar, lat, tau, limits)
    return final


def _plan_of(inst: PiperInstance, dp: _DP) -> PiperPlan:
    """Reconstruction, then the exact TMPC choice per stage at its true micro-batches in flight."""
    stages: list[PiperStage] = []
    raw = dp.reconstruct()
    D = sum(d for _, _, d in raw)
    for nodes, t, d in raw:
        y = -(-D // d)
        D -= d
        tm = choose_tmpcs(inst, nodes, t, d, y)
        if tm is None:
            raise RuntimeError("internal error: a reconstructed Piper stage does not fit in memory")
        stages.append(PiperStage(nodes, d, t, tm))
    return PiperPlan(stages)


def warm_up() -> None:
    """Compile (or load from the cache) the kernels on a tiny instance, so timings exclude it."""
    ar = "activation recomp"
    opts = [TMPC("vanilla", 1.0, 0.0, 1.0, 1.0, {}, {1: 0.0}), TMPC(ar, 2.0, 0.0, 0.0, 1.0, {}, {1: 0.0})]
    opts2 = [TMPC("vanilla", 1.0, 0.0, 1.0, 1.0, {0: 0.0}, {}), TMPC(ar, 2.0, 0.0, 0.0, 1.0, {0: 0.0}, {})]
    inst = PiperInstance(2, 3.0, 1.0, 2, ["a", "b"], [0, 1], [(0, 1, 1.0)], [{1: opts}, {1: opts2}])
    solve_piper(inst)
