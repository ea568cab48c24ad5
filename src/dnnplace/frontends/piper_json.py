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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dnnplace.errors import InputError
from dnnplace.utils.files import read_json_file
from dnnplace.utils.graph import topological_order

TRANSFORMER = "ParallelTransformerLayer"
MAX_T = 10000
MAX_K = 10000


@dataclass
class TMPC:
    """One tensor-model-parallel configuration of a node for one tensor-parallel degree ``t``."""

    id: str
    p: float  # timePerSample
    w: float  # parameterSize (bytes per device)
    a: float  # memoryUsageA: bytes per in-flight micro-batch
    b: float  # memoryUsageB: fixed bytes
    fw: dict[int, float] = field(default_factory=dict)  # predecessor (new id) -> bytes
    bw: dict[int, float] = field(default_factory=dict)  # successor (new id) -> bytes


@dataclass
class PiperInstance:
    """A Piper workload: a DAG of layers, each with TMPCs per tensor-parallel degree."""

    max_devices: int  # K
    memory: float  # M, bytes per device
    bandwidth: float  # BW, bytes per second
    batch: int  # N, micro-batches per batch (mbsInBatch)
    names: list[str]
    old_ids: list[int]
    edges: list[tuple[int, int, float]]  # (u, v, communicationCost) in input order, new ids
    tmpcs: list[dict[int, list[TMPC]]]  # node -> t -> options (list order kept)
    source: str = "<piper>"
    bert_layers: int | None = None  # set when built by :func:`bert_l`

    @property
    def n(self) -> int:
        return len(self.names)

    def preds(self, v: int) -> list[int]:
        return [u for u, x, _ in self.edges if x == v]

    def succs(self, v: int) -> list[int]:
        return [x for u, x, _ in self.edges if u == v]

    def with_overrides(self, *, devices: int | None = None, memory: float | None = None,
                       bandwidth: float | None = None, batch: int | None = None) -> PiperInstance:
        """The same workload with some of K, M, BW, N replaced (``None``: keep the file's)."""
        out = replace(
            self,
            max_devices=self.max_devices if devices is None else int(devices),
            memory=self.memory if memory is None else float(memory),
            bandwidth=self.bandwidth if bandwidth is None else float(bandwidth),
            batch=self.batch if batch is None else int(batch),
        )
        validate(out)
        return out


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
        raise InputError(f"{where}: field '{key}' must be a number, got {val!r}")
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


def validate(inst: PiperInstance) -> None:
    """PIPER-SPEC section 1.2; raises :class:`InputError` naming the first violation."""
    src = inst.source
    if not 1 <= inst.max_devices <= MAX_K:
        raise InputError(f"{src}: maxDevices must be in [1, {MAX_K}], got {inst.max_devices}")
    if not inst.bandwidth >= 1e-9:
        raise InputError(f"{src}: bandwidth must be >= 1e-9, got {inst.bandwidth}")
    if not inst.memory >= 1e-9:
        raise InputError(f"{src}: maxMemoryPerDevice must be >= 1e-9, got {inst.memory}")
    if inst.batch < 1:
        raise InputError(f"{src}: mbsInBatch must be >= 1, got {inst.batch}")
    n = inst.n
    if n == 0:
        raise InputError(f"{src}: 'nodes' is empty")
    if not inst.edges:
        raise InputError(f"{src}: 'edges' is empty (Piper requires at least one edge)")
    oid = inst.old_ids
    seen: set[tuple[int, int]] = set()
    preds: list[set[int]] = [set() for _ in range(n)]
    succs: list[set[int]] = [set() for _ in range(n)]
    for u, v, c in inst.edges:
        if not c >= 0:
            raise InputError(f"{src}: edge {oid[u]}->{oid[v]} has negative communicationCost {c}")
        if (u, v) in seen:
            raise InputError(f"{src}: duplicate edge {oid[u]}->{oid[v]}")
        seen.add((u, v))
        preds[v].add(u)
        succs[u].add(v)
    order = topological_order(n, succs)
    if len(order) != n:
        bad = min(set(range(n)) - set(order.tolist()))
        raise InputError(f"{src}: the graph has a cycle (through node {oid[bad]})")
    for v in range(n):
        for t, opts in inst.tmpcs[v].items():
            where = f"{src}: node {oid[v]} t={t}"
            if not 1 <= t <= MAX_T:
                raise InputError(f"{where}: tensor-parallel degree outside [1, {MAX_T}]")
            if len(opts) > 2:
                raise InputError(f"{where}: {len(opts)} TMPCs; at most 2 per (node, t) are allowed")
            ids = set()
            for o in opts:
                if not o.id:
                    raise InputError(f"{where}: a TMPC has an empty id")
                if o.id in ids:
                    raise InputError(f"{where}: TMPC id '{o.id}' listed twice")
                ids.add(o.id)
                for name, val in (("timePerSample", o.p), ("parameterSize", o.w), ("memoryUsageA", o.a),
                                  ("memoryUsageB", o.b)):
                    if not (val >= 0 and math.isfinite(val)):
                        raise InputError(f"{where} TMPC '{o.id}': {name} must be >= 0, got {val}")
                for kind, dct, want in (("syncTimeFw", o.fw, preds[v]), ("syncTimeBw", o.bw, succs[v])):
                    for val in dct.values():
                        if not val >= 0:
                            raise InputError(f"{where} TMPC '{o.id}': {kind} has a negative value {val}")
                    if set(dct) != want:
                        missing = sorted(oid[x] for x in want - set(dct))
                        extra = sorted(oid[x] for x in set(dct) - want)
                        rel = "predecessors" if kind == "syncTimeFw" else "successors"
                        raise InputError(
                            f"{where} TMPC '{o.id}': {kind} keys must be exactly the node's {rel}"
                            + (f"; missing {missing}" if missing else "") + (f"; extra {extra}" if extra else ""))


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
