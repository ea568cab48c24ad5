"""Read Piper's workload JSON (the format of *Piper: Multidimensional Planner for DNN Parallelization*).

A file is recognised by the ``TMPCs`` of its nodes.  Parsing renumbers the nodes
to their positions in the ``nodes`` array (the old ids are kept for output) and
runs the validation of PIPER-SPEC section 1.2; every failure is an
:class:`InputError` with a one-line message.  :func:`bert_l` builds BERT-L from
``bert32a100.json`` exactly as Piper's ``insertTransformerLayer`` does (section 1.4).
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from dnnplace.errors import InputError
from dnnplace.models.piper.spec import MAX_T, TMPC, PiperInstance, PiperPlan, PiperStage, validate
from dnnplace.utils.files import read_json_file
from dnnplace.utils.text import show_value

TRANSFORMER = "ParallelTransformerLayer"


def is_piper_json(obj: Any) -> bool:
    """Does this parsed JSON look like Piper's format (nodes carrying ``TMPCs``)?"""
    if not isinstance(obj, dict):
        return False
    nodes = obj.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        return "mbsInBatch" in obj and "maxDevices" in obj
    return isinstance(nodes[0], dict) and "TMPCs" in nodes[0]


def is_piper_file(path: str | Path) -> bool:
    """Is the file at ``path`` a Piper workload (cheap sniff; errors left to the real reader)?"""
    try:
        return is_piper_json(read_json_file(path))
    except InputError:
        return False


def _int(obj: dict, key: str, where: str) -> int:
    """An integer field (a float with no fraction is accepted), or a one-line error."""
    return int(_num(obj, key, where, integer=True))


def _num(obj: dict, key: str, where: str, *, integer: bool = False) -> float:
    if key not in obj:
        raise InputError(f"{where}: missing field '{key}'")
    val = obj[key]
    if isinstance(val, bool) or not isinstance(val, (int, float)):
        raise InputError(f"{where}: field '{key}' must be a number, got {show_value(val)}")
    if isinstance(val, int) and abs(val) > 2**64:  # math.isfinite and float() overflow on longer integers
        raise InputError(f"{where}: field '{key}' is out of range, got {show_value(val)}")
    if not math.isfinite(val):
        raise InputError(f"{where}: field '{key}' must be finite, got {val!r}")
    if integer:
        if float(val) != int(val):
            raise InputError(f"{where}: field '{key}' must be an integer, got {val!r}")
        return int(val)
    return float(val)


def _int_key(key: Any, where: str) -> int:
    try:
        k = str(key).strip()
        if not k.lstrip("-").isdigit():
            raise ValueError
        return int(k)
    except ValueError:
        raise InputError(f"{where}: key {key!r} is not an integer") from None


def parse_piper(obj: Any, source: str = "<piper>") -> PiperInstance:
    """Parse and validate a decoded Piper JSON object."""
    if not isinstance(obj, dict):
        raise InputError(f"{source}: a Piper workload must be a JSON object")
    K = _int(obj, "maxDevices", source)
    M = _num(obj, "maxMemoryPerDevice", source)
    BW = _num(obj, "bandwidth", source)
    N = _int(obj, "mbsInBatch", source)
    nodes = obj.get("nodes")
    edges = obj.get("edges")
    if not isinstance(nodes, list):
        raise InputError(f"{source}: 'nodes' must be a list")
    if not isinstance(edges, list):
        raise InputError(f"{source}: 'edges' must be a list")
    old_ids: list[int] = []
    names: list[str] = []
    pos: dict[int, int] = {}
    for i, nd in enumerate(nodes):
        if not isinstance(nd, dict):
            raise InputError(f"{source}: node #{i} is not an object")
        nid = _int(nd, "id", f"{source}: node #{i}")
        if nid in pos:
            raise InputError(f"{source}: duplicate node id {nid}")
        pos[nid] = i
        old_ids.append(nid)
        name = nd.get("name", "")
        names.append(str(name) if name is not None else "")
    elist: list[tuple[int, int, float]] = []
    for i, e in enumerate(edges):
        where = f"{source}: edge #{i}"
        if not isinstance(e, dict):
            raise InputError(f"{where} is not an object")
        u = _int(e, "sourceId", where)
        v = _int(e, "destId", where)
        c = _num(e, "communicationCost", where)
        for end in (u, v):
            if end not in pos:
                raise InputError(f"{where} ({u}->{v}): node {end} does not exist")
        elist.append((pos[u], pos[v], c))
    tmpcs: list[dict[int, list[TMPC]]] = []
    for i, nd in enumerate(nodes):
        where = f"{source}: node {old_ids[i]}"
        raw = nd.get("TMPCs")
        if not isinstance(raw, dict):
            raise InputError(f"{where}: 'TMPCs' must be an object keyed by tensor-parallel degree")
        per_t: dict[int, list[TMPC]] = {}
        for tkey, lst in raw.items():
            t = _int_key(tkey, f"{where}: TMPCs")
            if not 1 <= t <= MAX_T:
                raise InputError(f"{where}: tensor-parallel degree {t} is outside [1, {MAX_T}]")
            if t in per_t:
                raise InputError(f"{where}: tensor-parallel degree {t} listed twice")
            if not isinstance(lst, list):
                raise InputError(f"{where}: TMPCs[{tkey!r}] must be a list")
            opts: list[TMPC] = []
            for j, o in enumerate(lst):
                ow = f"{where} t={t} TMPC #{j}"
                if not isinstance(o, dict):
                    raise InputError(f"{ow} is not an object")
                oid = o.get("id")
                if not isinstance(oid, str) or not oid:
                    raise InputError(f"{ow}: 'id' must be a non-empty string")
                fw_raw = o.get("syncTimeFw")
                bw_raw = o.get("syncTimeBw")
                if not isinstance(fw_raw, dict) or not isinstance(bw_raw, dict):
                    raise InputError(f"{ow} ({oid}): 'syncTimeFw' and 'syncTimeBw' must be objects")
                fw: dict[int, float] = {}
                bw: dict[int, float] = {}
                for raw_d, dst, kind in ((fw_raw, fw, "syncTimeFw"), (bw_raw, bw, "syncTimeBw")):
                    for key, val in raw_d.items():
                        k = _int_key(key, f"{ow} ({oid}) {kind}")
                        if k not in pos:
                            raise InputError(f"{ow} ({oid}): {kind} names node {k}, which does not exist")
                        if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val):
                            raise InputError(f"{ow} ({oid}): {kind}[{k}] must be a finite number")
                        dst[pos[k]] = float(val)
                opts.append(TMPC(
                    id=oid,
                    p=_num(o, "timePerSample", f"{ow} ({oid})"),
                    w=_num(o, "parameterSize", f"{ow} ({oid})"),
                    a=_num(o, "memoryUsageA", f"{ow} ({oid})"),
                    b=_num(o, "memoryUsageB", f"{ow} ({oid})"),
                    fw=fw, bw=bw,
                ))
            per_t[t] = opts
        tmpcs.append(per_t)
    inst = PiperInstance(max_devices=K, memory=M, bandwidth=BW, batch=N, names=names, old_ids=old_ids,
                         edges=elist, tmpcs=tmpcs, source=source)
    validate(inst)
    return inst


def load_piper(path: str | Path) -> PiperInstance:
    """Load and validate a Piper workload file."""
    obj = read_json_file(path)
    if not is_piper_json(obj):
        raise InputError(f"{path}: not a Piper workload (its nodes have no 'TMPCs')")
    return parse_piper(obj, source=str(path))


def piper_to_dict(inst: PiperInstance) -> dict[str, Any]:
    """The instance back in Piper's JSON format (old ids)."""
    oid = inst.old_ids

    def tm(o: TMPC) -> dict[str, Any]:
        return {"id": o.id, "timePerSample": o.p, "parameterSize": o.w, "memoryUsageA": o.a,
                "memoryUsageB": o.b, "syncTimeFw": {str(oid[k]): v for k, v in o.fw.items()},
                "syncTimeBw": {str(oid[k]): v for k, v in o.bw.items()}}

    return {
        "maxDevices": inst.max_devices, "maxMemoryPerDevice": inst.memory, "bandwidth": inst.bandwidth,
        "mbsInBatch": inst.batch,
        "nodes": [{"id": oid[v], "name": inst.names[v],
                   "TMPCs": {str(t): [tm(o) for o in opts] for t, opts in inst.tmpcs[v].items()}}
                  for v in range(inst.n)],
        "edges": [{"sourceId": oid[u], "destId": oid[v], "communicationCost": c} for u, v, c in inst.edges],
    }


# --------------------------------------------------------------------------------------------
# BERT-L (PIPER-SPEC 1.4)


def _insert_transformer(inst: PiperInstance, v: int, s: int, old_id: int) -> None:
    """Insert a clone ``x`` of transformer ``v`` between ``v`` and ``s = next(v)`` (in place)."""
    x = inst.n
    trans = {i for i in range(inst.n) if inst.names[i] == TRANSFORMER}
    prev_v = [u for u, w, _ in inst.edges if w == v and u in trans]
    if len(prev_v) != 1:
        raise InputError(f"{inst.source}: transformer {inst.old_ids[v]} has no unique previous transformer")
    pv = prev_v[0]
    idx = next((i for i, (a, b, _) in enumerate(inst.edges) if a == v and b == s), None)
    if idx is None:
        raise InputError(f"{inst.source}: no edge {inst.old_ids[v]}->{inst.old_ids[s]} to split")
    c = inst.edges[idx][2]
    inst.edges[idx] = (v, x, c)
    inst.edges.append((x, s, c))
    old_bw: dict[tuple[int, int], float] = {}
    for t, opts in inst.tmpcs[v].items():
        for j, o in enumerate(opts):
            old_bw[(t, j)] = o.bw[s]
            o.bw = {(x if k == s else k): val for k, val in o.bw.items()}
    for opts in inst.tmpcs[s].values():
        for o in opts:
            o.fw = {(x if k == v else k): val for k, val in o.fw.items()}
    clone: dict[int, list[TMPC]] = {}
    for t, opts in inst.tmpcs[v].items():
        clone[t] = [replace(o, fw={v: o.fw[pv]}, bw={s: old_bw[(t, j)]}) for j, o in enumerate(opts)]
    inst.tmpcs.append(clone)
    inst.names.append(TRANSFORMER)
    inst.old_ids.append(old_id)


def bert_l(inst: PiperInstance, layers: int) -> PiperInstance:
    """BERT-L from BERT-32 (``bert32a100.json``), as Piper builds BERT-48/64/96 (PIPER-SPEC 1.4)."""
    n_trans = sum(1 for nm in inst.names if nm == TRANSFORMER)
    if n_trans != 32 or inst.n != 37:
        raise InputError(f"{inst.source}: --bert-layers needs bert32a100.json (37 nodes, 32 transformers)")
    if layers < 32:
        raise InputError(f"--bert-layers must be >= 32, got {layers}")
    if layers > 96:
        raise InputError(f"--bert-layers must be <= 96 (the insertion order is pinned up to BERT-96), got {layers}")
    out = copy.deepcopy(inst)
    out.source = f"{inst.source} (BERT-{layers})"
    out.bert_layers = layers
    prev_clone = -1
    for L in range(33, layers + 1):
        if L == 33:
            v, s = 34, 35
        elif L <= 58:
            v, s = prev_clone, 35
        elif L == 59:
            v, s = 61, 62
        else:
            v, s = prev_clone, 62
        x = out.n
        _insert_transformer(out, v, s, 123456790 + (L - 33))
        prev_clone = x
        validate(out)
    return out


# --------------------------------------------------------------------------------------------
# Plan files (the evaluator's figures are passed in: a front end does not judge)


class PlanFigures(Protocol):
    """What a plan file records of the evaluator's verdict (a :class:`~.evaluation.PiperEvaluation`)."""

    tps: float
    feasible: bool
    devices: int
    data_parallel_sum: int


def plan_to_dict(inst: PiperInstance, plan: PiperPlan, ev: PlanFigures) -> dict[str, Any]:
    """The plan file: stages front first (old node ids) plus the evaluator's ``timePerSample``."""
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
    """Read a plan file for ``inst`` (one-line errors for malformed plans)."""
    return plan_from_dict(inst, read_json_file(path), source=str(path))
