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

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dnnplace.errors import InputError
from dnnplace.frontends.piper_json import PiperInstance

INF = 1e30


@dataclass
class PiperStage:
    nodes: list[int]  # new (renumbered) ids, in the order given
    d: int  # data-parallel degree (replicas)
    t: int  # tensor-parallel degree (width of one replica)
    tmpcs: dict[int, str]  # node -> TMPC id


@dataclass
class PiperPlan:
    stages: list[PiperStage]
    meta: dict[str, Any] = field(default_factory=dict)  # status, bound, gap, runtime_s, ...


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
        return PiperEvaluation(INF, [], 0, 0, False)
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


# --------------------------------------------------------------------------------------------
# Plan files


def plan_to_dict(inst: PiperInstance, plan: PiperPlan, ev: PiperEvaluation | None = None) -> dict[str, Any]:
    """The plan file: stages front first (old node ids) plus the evaluator's ``timePerSample``."""
    ev = ev or evaluate_piper(inst, plan)
    oid = inst.old_ids
    out: dict[str, Any] = {
        "format": "dnnplace-piper-plan",
        "stages": [
            {
                "nodes": [oid[v] for v in st.nodes],
                "dataParallelDegree": st.d,
                "tensorParallelDegree": st.t,
                "tmpcs": {str(oid[v]): st.tmpcs[v] for v in st.nodes},
            }
            for st in plan.stages
        ],
        "timePerSample": ev.tps if ev.feasible else None,
        "instance": {"maxDevices": inst.max_devices, "maxMemoryPerDevice": inst.memory,
                     "bandwidth": inst.bandwidth, "mbsInBatch": inst.batch, "nodes": inst.n,
                     **({"bertLayers": inst.bert_layers} if inst.bert_layers else {})},
        "devicesUsed": ev.devices,
        "dataParallelSum": ev.data_parallel_sum,
    }
    for key in ("status", "bound", "gap", "runtime_s"):
        if key in plan.meta:
            out[key] = plan.meta[key]
    for key, val in plan.meta.items():
        if key not in out:
            out[key] = val
    return out


def plan_from_dict(inst: PiperInstance, obj: Any, source: str = "<plan>") -> PiperPlan:
    """Parse a plan file (old node ids) into a :class:`PiperPlan` (new ids)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("stages"), list):
        raise InputError(f"{source}: a Piper plan must be an object with a 'stages' list")
    pos = {o: i for i, o in enumerate(inst.old_ids)}
    stages = []
    for i, s in enumerate(obj["stages"]):
        where = f"{source}: stage {i}"
        if not isinstance(s, dict):
            raise InputError(f"{where} is not an object")
        try:
            nodes_raw = s["nodes"]
            d = s["dataParallelDegree"]
            t = s["tensorParallelDegree"]
            tm = s["tmpcs"]
        except KeyError as exc:
            raise InputError(f"{where}: missing field {exc.args[0]!r}") from None
        if not isinstance(nodes_raw, list) or not isinstance(tm, dict):
            raise InputError(f"{where}: 'nodes' must be a list and 'tmpcs' an object")
        for name, val in (("dataParallelDegree", d), ("tensorParallelDegree", t)):
            if isinstance(val, bool) or not isinstance(val, int):
                raise InputError(f"{where}: '{name}' must be an integer, got {val!r}")
        nodes = []
        for x in nodes_raw:
            if isinstance(x, bool) or not isinstance(x, int) or x not in pos:
                raise InputError(f"{where}: node {x!r} does not exist")
            nodes.append(pos[x])
        tmpcs: dict[int, str] = {}
        for key, val in tm.items():
            try:
                k = int(key)
            except ValueError:
                raise InputError(f"{where}: tmpcs key {key!r} is not a node id") from None
            if k not in pos:
                raise InputError(f"{where}: tmpcs names node {k}, which does not exist")
            if not isinstance(val, str):
                raise InputError(f"{where}: tmpcs[{key}] must be a TMPC id string")
            tmpcs[pos[k]] = val
        stages.append(PiperStage(nodes, d, t, tmpcs))
    meta = {k: v for k, v in obj.items() if k not in ("stages",)}
    return PiperPlan(stages, meta)


def load_plan(inst: PiperInstance, path: str | Path) -> PiperPlan:
    from dnnplace.utils.files import read_json_file

    return plan_from_dict(inst, read_json_file(path), source=str(path))


def save_plan(inst: PiperInstance, plan: PiperPlan, path: str | Path, ev: PiperEvaluation | None = None) -> None:
    from dnnplace.utils.files import write_json_atomic

    write_json_atomic(path, plan_to_dict(inst, plan, ev))


def plan_json(inst: PiperInstance, plan: PiperPlan, ev: PiperEvaluation | None = None) -> str:
    return json.dumps(plan_to_dict(inst, plan, ev), indent=1)
