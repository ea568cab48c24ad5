"""The evaluator for Piper's model: one cost model that judges every Piper plan.

This is Piper's independent checker (``getTPSForResult``, PIPER-SPEC section 5),
with its aborts turned into one-line :class:`InputError`\\ s.  A plan is an
ordered list of stages, front (sources) first; each stage is a contiguous node
set with a data-parallel degree ``d``, a tensor-parallel degree ``t`` and one
TMPC per node.  Like the paper evaluator, a stage is a contiguous set; the
time per sample of a plan is the time of its slowest stage, and a stage that
exceeds the memory makes the whole plan infeasible (``INF``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dnnplace.errors import InputError
from dnnplace.models.piper.spec import PiperInstance, PiperPlan

INF = 1e30


@dataclass
class StageReport:
    index: int
    nodes: list[int]
    d: int
    t: int
    devices: int
    in_flight: int  # y = ceil(D_i / d_i)
    compute: float  # sum of p (one sample, one replica)
    edge_bytes: float
    resync_bytes: float
    time: float  # time per sample of the stage
    memory: float  # per device: sum(a*y + b)
    memory_fixed: float  # sum(b)
    memory_in_flight: float  # sum(a) * y
    recomputed: list[int]  # nodes whose TMPC is not the first of their list (e.g. "activation recomp")
    oom: bool


@dataclass
class PiperEvaluation:
    tps: float  # INF when infeasible
    stages: list[StageReport]
    devices: int
    data_parallel_sum: int
    feasible: bool

    @property
    def bottleneck(self) -> int:
        return max(range(len(self.stages)), key=lambda i: self.stages[i].time) if self.stages else -1

    @property
    def max_load(self) -> float:
        """The time per sample (Piper's objective), as the paper model's evaluation names it."""
        return self.tps

    def value(self, objective: str = "throughput") -> float:
        """The objective's value: Piper's model has one, the time per sample of the bottleneck stage."""
        return self.tps


def _find_tmpc(inst: PiperInstance, v: int, t: int, tid: str):
    opts = inst.tmpcs[v].get(t)
    if not opts:
        raise InputError(f"plan: node {inst.old_ids[v]} has no TMPCs for t={t}")
    for j, o in enumerate(opts):
        if o.id == tid:
            return j, o
    raise InputError(f"plan: node {inst.old_ids[v]} has no TMPC '{tid}' for t={t}")


def evaluate_piper(inst: PiperInstance, plan: PiperPlan) -> PiperEvaluation:
    """Judge ``plan`` exactly as Piper's checker does (PIPER-SPEC section 5).

    Violations raise :class:`InputError`; a stage over the memory makes ``tps``
    ``INF`` (the plan is infeasible, not malformed).
    """
    K, N, M, BW = inst.max_devices, inst.batch, inst.memory, inst.bandwidth
    n = inst.n
    if not plan.stages:
        raise InputError(f"plan: nodes unplaced: the plan has no stages (node {inst.old_ids[0]} is in none)")
    stage_of = [-1] * n
    dev = 0
    dsum = 0
    for i, st in enumerate(plan.stages):
        for v in st.nodes:
            if not 0 <= v < n:
                raise InputError(f"plan: stage {i} lists node {v}, which does not exist")
            if stage_of[v] != -1:
                raise InputError(f"plan: duplicate node {inst.old_ids[v]} (stages {stage_of[v]} and {i})")
            stage_of[v] = i
        if not 1 <= st.d <= K:
            raise InputError(f"plan: stage {i} has data-parallel degree {st.d} outside [1, {K}]")
        if N % st.d != 0:
            raise InputError(f"plan: stage {i} has data-parallel degree {st.d}, which does not divide the batch {N}")
        if not 1 <= st.t <= K:
            raise InputError(f"plan: stage {i} has tensor-parallel degree {st.t} outside [1, {K}]")
        dev += st.d * st.t
        dsum += st.d
    for u, v, _ in inst.edges:
        if stage_of[u] > stage_of[v] and stage_of[v] == -1:
            raise InputError(f"plan: node {inst.old_ids[v]} is in no stage (it follows node {inst.old_ids[u]})")
        if stage_of[u] > stage_of[v]:
            raise InputError(
                f"plan: edge {inst.old_ids[u]}->{inst.old_ids[v]} goes from stage {stage_of[u]} back to "
                f"stage {stage_of[v]} (stages must be contiguous and in topological order)")
    for v in range(n):
        if stage_of[v] == -1:
            raise InputError(f"plan: node {inst.old_ids[v]} is in no stage")
    if dsum > N:
        raise InputError(f"plan: the data-parallel degrees sum to {dsum}, more than the batch {N}")
    if dev > K:
        raise InputError(f"plan: the plan uses {dev} devices, more than the {K} available")
    in_e: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    out_e: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for u, v, c in inst.edges:
        out_e[u].append((v, c))
        in_e[v].append((u, c))
    D = dsum
    reports: list[StageReport] = []
    tps = 0.0
    for i, st in enumerate(plan.stages):
        d, t = st.d, st.t
        y = -(-D // d)
        D -= d
        members = set(st.nodes)
        seen: set[int] = set()
        for v in st.tmpcs:
            if not (isinstance(v, int) and 0 <= v < n) or v not in members:
                raise InputError(f"plan: stage {i} chooses a TMPC for node {v}, which is not in that stage")
            if v in seen:
                raise InputError(f"plan: stage {i} chooses a TMPC twice for node {v}")
            seen.add(v)
        if len(st.nodes) > len(st.tmpcs):
            missing = [inst.old_ids[v] for v in st.nodes if v not in st.tmpcs]
            raise InputError(f"plan: stage {i} has no TMPC for node(s) {missing[:5]}")
        compute = edge = resync = mem = fixed = a_sum = 0.0
        recomputed = []
        for v in st.nodes:
            j, o = _find_tmpc(inst, v, t, st.tmpcs[v])
            if j > 0:
                recomputed.append(v)
            compute += o.p
            for u, c in in_e[v]:
                if u not in members:
                    edge += 2.0 * (c + o.fw[u])
            for w, c in out_e[v]:
                if w not in members:
                    edge += 2.0 * (c + o.bw[w])
            if d > 1:
                resync += 4.0 * (d - 1) * o.w / (d * N)
            mem += o.a * y + o.b
            fixed += o.b
            a_sum += o.a
        time = (edge / d + resync) / BW + compute / d
        oom = mem > M
        reports.append(StageReport(i, list(st.nodes), d, t, d * t, y, compute, edge, resync, time, mem, fixed,
                                   a_sum * y, recomputed, oom))
        if oom:  # Piper's checker returns INF at the first stage out of memory
            return PiperEvaluation(INF, reports, dev, dsum, False)
        tps = max(tps, time)
    return PiperEvaluation(tps, reports, dev, dsum, True)


def piper_tps(inst: PiperInstance, plan: PiperPlan) -> float:
    """The checker's value: the time per sample of the bottleneck stage, ``INF`` if infeasible."""
    return evaluate_piper(inst, plan).tps


def stage_rows(inst: PiperInstance, ev: PiperEvaluation) -> list[dict[str, Any]]:
    """One record per stage (original node ids), for tables, JSON and reports."""
    oid = inst.old_ids
    return [{
        "stage": st.index, "nodes": [oid[v] for v in st.nodes], "replicas": st.d, "width": st.t,
        "devices": st.devices, "in_flight": st.in_flight, "time_per_sample": st.time, "compute": st.compute,
        "edge_bytes": st.edge_bytes, "resync_bytes": st.resync_bytes,
        "recomputed": [oid[v] for v in st.recomputed], "memory": st.memory, "memory_fixed": st.memory_fixed,
        "memory_in_flight": st.memory_in_flight, "memory_limit": inst.memory, "oom": st.oom,
    } for st in ev.stages]


def evaluation_dict(inst: PiperInstance, ev: PiperEvaluation) -> dict[str, Any]:
    """``evaluate --json`` of a Piper plan."""
    return {"time_per_sample": ev.tps if ev.feasible else None, "feasible": ev.feasible,
            "devices_used": ev.devices, "data_parallel_sum": ev.data_parallel_sum, "stages": stage_rows(inst, ev)}
