"""Read and write the paper's JSON (msr-fiddle/dnn-partitioning format): workloads and splits.

Every way a file can be wrong becomes an :class:`InputError` whose one-line
message names the culprit.  Writing is lossless: optional fields that were
absent stay absent, unknown keys are carried through, booleans keep their
style (``true``/``false`` or ``0``/``1``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from dnnplace.core.limits import MAX_COUNT, MAX_ID, MAX_STRING, MAX_VALUE
from dnnplace.errors import InputError
from dnnplace.models.paper import shared_json
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.validate import validate_structure
from dnnplace.models.paper.workload import Workload
from dnnplace.utils.files import read_json_file, write_json_atomic
from dnnplace.utils.graph import sorted_distinct
from dnnplace.utils.text import clip, show_value

__all__ = ["MAX_COUNT", "MAX_ID", "MAX_STRING", "MAX_VALUE", "NUMERIC_META", "load_split", "load_workload",
           "parse_split", "parse_workload", "save_split", "save_workload", "split_to_dict", "workload_from_records",
           "workload_to_dict"]


NODE_KEYS = ("id", "name", "supportedOnFpga", "cpuLatency", "fpgaLatency", "isBackwardNode",
             "colorClass", "size", "layerId")
EDGE_KEYS = ("sourceId", "destId", "cost")
TOP_KEYS = ("maxSizePerFPGA", "maxFPGAs", "maxCPUs", "nodes", "edges", shared_json.KEY)


def load_workload(path: str | Path, *, check_feasible: bool = True) -> Workload:
    """Load and validate a workload file in the paper's format."""
    from dnnplace.models.paper.validate import check_feasibility

    doc = read_json_file(path)
    if isinstance(doc, dict) and "mbsInBatch" in doc and "maxDevices" in doc and "maxSizePerFPGA" not in doc:
        raise InputError(f"{clip(path)}: a Piper workload (maxDevices, mbsInBatch, TMPCs), not the paper's format;"
                         " this command takes the paper's format -- Piper workloads go to solve, evaluate,"
                         " simulate and report")
    w = parse_workload(doc, source=str(path))
    if check_feasible:
        check_feasibility(w, source=clip(path))
    return w


def save_workload(workload: Workload, path: str | Path, *, inputs: tuple[str | Path | None, ...] = ()) -> None:
    """Write a workload in the paper's format (atomically, never over one of ``inputs``)."""
    write_json_atomic(path, workload_to_dict(workload), inputs=inputs)


# ---------------------------------------------------------------- field checks
class _Fields:
    """Typed accessors that name the offending field in their errors."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, what: str) -> InputError:
        return InputError(f"{self.source}: {where}: {what}")

    def number(self, obj: dict, key: str, where: str, default: float | None = None) -> float:
        if key not in obj:
            if default is None:
                raise self.fail(where, f"missing field '{key}'")
            return default
        v = obj[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(where, f"'{key}' must be a number, got {show_value(v)}")
        if isinstance(v, float) and math.isnan(v):
            raise self.fail(where, f"'{key}' is NaN")
        if v < 0:
            raise self.fail(where, f"'{key}' is negative ({show_value(v)})")
        if isinstance(v, int) and v > MAX_VALUE:  # an integer may be too large for a float
            raise self.fail(where, f"'{key}' is {show_value(v)}, larger than the limit {MAX_VALUE:g}")
        v = float(v)
        if math.isinf(v):
            raise self.fail(where, f"'{key}' is infinite")
        if v > MAX_VALUE:
            raise self.fail(where, f"'{key}' is {v:g}, larger than the limit {MAX_VALUE:g}")
        return v

    def integer(self, obj: dict, key: str, where: str, *, nonneg: bool = False, limit: int = MAX_ID) -> int:
        if key not in obj:
            raise self.fail(where, f"missing field '{key}'")
        v = obj[key]
        ok = isinstance(v, int) and not isinstance(v, bool)
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            v, ok = int(v), True
        if not ok:
            raise self.fail(where, f"'{key}' must be an integer, got {show_value(v)}")
        if nonneg and v < 0:
            raise self.fail(where, f"'{key}' is negative ({show_value(v)})")
        if abs(v) > limit:
            raise self.fail(where, f"'{key}' is {show_value(v)}, outside the limit of {limit:,} in magnitude")
        return int(v)

    def flag(self, obj: dict, key: str, where: str, nodes: _Nodes) -> bool:
        if key not in obj:
            raise self.fail(where, f"missing field '{key}'")
        v = obj[key]
        nodes.flags += 1
        if isinstance(v, bool):
            nodes.bool_flags += 1
            return v
        if isinstance(v, (int, float)) and v in (0, 1):
            return bool(v)
        raise self.fail(where, f"'{key}' must be true/false or 0/1, got {show_value(v)}")


def parse_workload(obj: Any, source: str = "workload") -> Workload:
    """Build a validated :class:`Workload` from the parsed paper JSON."""
    source = clip(source)
    f = _Fields(source)
    if not isinstance(obj, dict):
        raise InputError(f"{source}: top level must be a JSON object with 'nodes' and 'edges'")
    memory = f.number(obj, "maxSizePerFPGA", "top level")
    k = f.integer(obj, "maxFPGAs", "top level", nonneg=True, limit=MAX_COUNT)
    cpus = f.integer(obj, "maxCPUs", "top level", nonneg=True, limit=MAX_COUNT)
    for key in ("nodes", "edges"):
        if key not in obj:
            raise f.fail("top level", f"missing field '{key}'")
        if not isinstance(obj[key], list):
            raise f.fail("top level", f"'{key}' must be a list")
    if not obj["nodes"]:
        raise f.fail("top level", "'nodes' is empty")
    nodes = _parse_nodes_fast(obj["nodes"]) or _parse_nodes(f, obj["nodes"])
    edges = _parse_edges_fast(obj["edges"], nodes.ids) or _parse_edges(f, obj["edges"], nodes.id_index())
    extras = {
        "bool_style": "bool" if nodes.flags and nodes.bool_flags * 2 >= nodes.flags else "int",
        "has_color": nodes.has_color,
        "has_layer": nodes.has_layer,
        "has_size": nodes.has_size,
        "node_extra": tuple(nodes.extra),
        "edge_extra": tuple(edges.extra),
        "top_extra": {key: v for key, v in obj.items() if key not in TOP_KEYS},
    }
    w = Workload(
        node_ids=nodes.ids, acc_time=nodes.acc, cpu_time=nodes.cpu, supported=nodes.sup, size=nodes.size,
        backward=nodes.bwd, color=nodes.color, layer=nodes.layer, names=tuple(nodes.names), edge_src=edges.src,
        edge_dst=edges.dst, edge_cost=edges.cost, max_accelerators=k, max_cpus=cpus, memory=memory, extras=extras,
        shared=shared_json.parse_shared(f, obj.get(shared_json.KEY),
                                        nodes.id_index() if shared_json.KEY in obj else {}),
    )
    validate_structure(w, source=source)
    return w


class _Nodes:
    """The node columns being read, and what writing back needs (which optional fields were present)."""

    def __init__(self, n: int) -> None:
        self.ids = np.zeros(n, dtype=np.int64)
        self.acc, self.cpu, self.size = np.zeros(n), np.zeros(n), np.zeros(n)
        self.sup, self.bwd = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        self.color, self.layer = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        self.has_color, self.has_layer, self.has_size = (np.zeros(n, dtype=bool) for _ in range(3))
        self.names: list[str | None] = []
        self.extra: list[Mapping] = []
        self.flags = self.bool_flags = 0  # booleans read, and how many were written true/false (not 0/1)
        self.index: dict[int, int] = {}  # node id -> position (filled by the per-node reader)

    def id_index(self) -> dict[int, int]:
        """Node id -> position (built here when the vectorised reader left it empty)."""
        if not self.index:
            self.index = dict(zip(self.ids.tolist(), range(self.ids.size), strict=True))
        return self.index


def _parse_nodes(f: _Fields, raw: list) -> _Nodes:
    out = _Nodes(len(raw))
    for i, node in enumerate(raw):
        where = f"nodes[{i}]"
        if not isinstance(node, dict):
            raise f.fail(where, "must be an object")
        nid = f.integer(node, "id", where)
        where = f"node {nid}"
        if nid in out.index:
            raise f.fail(where, f"duplicate node id (nodes[{out.index[nid]}] and nodes[{i}])")
        out.index[nid] = i
        out.ids[i] = nid
        out.acc[i] = f.number(node, "fpgaLatency", where)
        out.cpu[i] = f.number(node, "cpuLatency", where)
        out.sup[i] = f.flag(node, "supportedOnFpga", where, out)
        out.bwd[i] = f.flag(node, "isBackwardNode", where, out)
        if "size" in node:
            out.size[i] = f.number(node, "size", where)
            out.has_size[i] = True
        if "colorClass" in node:
            out.color[i] = f.integer(node, "colorClass", where)
            out.has_color[i] = True
        if "layerId" in node:
            out.layer[i] = f.integer(node, "layerId", where)
            out.has_layer[i] = True
        name = node.get("name")
        if name is not None and not isinstance(name, str):
            raise f.fail(where, f"'name' must be a string, got {show_value(name)}")
        if name is not None and len(name) > MAX_STRING:
            raise f.fail(where, f"'name' has {len(name):,} characters, more than the limit {MAX_STRING:,}")
        out.names.append(name)
        out.extra.append({k: v for k, v in node.items() if k not in NODE_KEYS})
    _fill_fresh(out.color, out.has_color)
    _fill_fresh(out.layer, out.has_layer)
    return out


@dataclass
class _Edges:
    src: np.ndarray
    dst: np.ndarray
    cost: np.ndarray
    extra: list[Mapping]


def _parse_edges(f: _Fields, raw: list, index: dict[int, int]) -> _Edges:
    m = len(raw)
    out = _Edges(np.zeros(m, dtype=np.int64), np.zeros(m, dtype=np.int64), np.zeros(m), [])
    out_cost: dict[int, tuple[float, int]] = {}
    for j, edge in enumerate(raw):
        where = f"edges[{j}]"
        if not isinstance(edge, dict):
            raise f.fail(where, "must be an object")
        s = f.integer(edge, "sourceId", where)
        d = f.integer(edge, "destId", where)
        where = f"edge {s}->{d}"
        c = f.number(edge, "cost", where)
        for end in (s, d):
            if end not in index:
                raise f.fail(where, f"unknown node id {end}")
        if s == d:
            raise f.fail(where, "self-loop")
        if s in out_cost and abs(out_cost[s][0] - c) > 1e-6 * max(1.0, abs(c)):
            prev_c, prev_j = out_cost[s]
            raise f.fail(
                f"node {s}",
                f"out-edges have different costs ({prev_c:g} on edges[{prev_j}], {c:g} on edges[{j}]);"
                " the cost of an edge is its source's output transfer time",
            )
        out_cost.setdefault(s, (c, j))
        out.src[j], out.dst[j], out.cost[j] = index[s], index[d], c
        out.extra.append({k: v for k, v in edge.items() if k not in EDGE_KEYS})
    return out


# ---------------------------------------------------------------- the vectorised readers
# A file of millions of nodes is read column by column with numpy.  These readers only *accept*: on
# anything unusual (a wrong type, a missing field, a value out of range, a duplicate or unknown id)
# they return None and the per-node readers above run, so every error message stays theirs, word for
# word, naming the first culprit in file order.
_MISSING = object()
_NO_EXTRA: Mapping = MappingProxyType({})  # shared by every node or edge without unknown keys (read-only)


def _column(raw: list, key: str) -> tuple[list, set[type]]:
    """The values of ``key`` in every object (``_MISSING`` where absent) and their types."""
    col = [d.get(key, _MISSING) for d in raw]
    return col, set(map(type, col))


def _ints(col: list, types: set[type]) -> np.ndarray | None:
    """int64 values, or None unless every value is a JSON integer within the id limit."""
    if not types <= {int}:
        return None
    try:
        arr = np.array(col, dtype=np.int64)
    except OverflowError:
        return None
    return arr if arr.size == 0 or (arr.min() >= -MAX_ID and arr.max() <= MAX_ID) else None


def _numbers(col: list, types: set[type]) -> np.ndarray | None:
    """float64 values, or None unless every value is a finite, non-negative number below the limit."""
    if not types <= {int, float}:
        return None
    try:
        arr = np.array(col, dtype=np.float64)
    except OverflowError:
        return None
    # ``< MAX_VALUE``, not ``<=``: an integer just above the limit may round down to it
    return arr if np.isfinite(arr).all() and (arr >= 0).all() and (arr < MAX_VALUE).all() else None


def _optional(raw: list, key: str, read: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """(values with 0 where absent, present mask), or None when a present value is not clean."""
    col, types = _column(raw, key)
    present = np.fromiter((v is not _MISSING for v in col), dtype=bool, count=len(col))
    if not present.all():
        col = [v for v in col if v is not _MISSING]
        types.discard(object)
    vals = read(col, types)
    if vals is None:
        return None
    full = np.zeros(len(raw), dtype=vals.dtype)
    full[present] = vals
    return full, present


def _extras(raw: list, known: np.ndarray, keys: tuple[str, ...]) -> list[Mapping]:
    """Each object's unknown keys (``known``: how many of ``keys`` it has)."""
    lengths = np.fromiter(map(len, raw), dtype=np.int64, count=len(raw))
    out: list[Mapping] = [_NO_EXTRA] * len(raw)
    for i in np.flatnonzero(lengths != known).tolist():
        out[i] = {k: v for k, v in raw[i].items() if k not in keys}
    return out


def _parse_nodes_fast(raw: list) -> _Nodes | None:
    n = len(raw)
    if set(map(type, raw)) != {dict}:
        return None
    out = _Nodes(0)
    ids = _ints(*_column(raw, "id"))
    if ids is None or sorted_distinct(ids).size != n:
        return None
    out.ids = ids
    for attr, key in (("acc", "fpgaLatency"), ("cpu", "cpuLatency")):
        vals = _numbers(*_column(raw, key))
        if vals is None:
            return None
        setattr(out, attr, vals)
    for attr, key in (("sup", "supportedOnFpga"), ("bwd", "isBackwardNode")):
        col, types = _column(raw, key)
        if not types <= {bool, int, float}:
            return None
        vals = np.array(col, dtype=np.float64)
        if not ((vals == 0) | (vals == 1)).all():
            return None
        setattr(out, attr, vals == 1)
        out.flags += n
        out.bool_flags += list(map(type, col)).count(bool)
    size, color, layer = (_optional(raw, "size", _numbers), _optional(raw, "colorClass", _ints),
                          _optional(raw, "layerId", _ints))
    if size is None or color is None or layer is None:
        return None
    (out.size, out.has_size), (out.color, out.has_color), (out.layer, out.has_layer) = size, color, layer
    col, types = _column(raw, "name")
    if not types <= {str, type(None), object}:
        return None
    has_name = np.fromiter((v is not _MISSING for v in col), dtype=bool, count=n)
    if str in types and max(len(v) for v in col if type(v) is str) > MAX_STRING:
        return None
    out.names = [None if v is _MISSING else v for v in col] if object in types else col
    known = 5 + has_name.astype(np.int64) + out.has_size + out.has_color + out.has_layer
    out.extra = _extras(raw, known, NODE_KEYS)
    _fill_fresh(out.color, out.has_color)
    _fill_fresh(out.layer, out.has_layer)
    return out


def _parse_edges_fast(raw: list, ids: np.ndarray) -> _Edges | None:
    m = len(raw)
    if m == 0 or set(map(type, raw)) != {dict}:
        return None
    s, d, cost = _ints(*_column(raw, "sourceId")), _ints(*_column(raw, "destId")), _numbers(*_column(raw, "cost"))
    if s is None or d is None or cost is None or (s == d).any():
        return None
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    ends = []
    for e in (s, d):
        pos = np.minimum(np.searchsorted(sorted_ids, e), ids.size - 1)
        if (sorted_ids[pos] != e).any():
            return None  # an unknown id
        ends.append(order[pos])
    # every out-edge of a node costs what its first one (in file order) costs
    by_src = np.argsort(s, kind="stable")
    ss, cs = s[by_src], cost[by_src]
    first = np.r_[True, ss[1:] != ss[:-1]]
    first_cost = cs[np.flatnonzero(first)[np.cumsum(first) - 1]]
    if (np.abs(first_cost - cs) > 1e-6 * np.maximum(1.0, np.abs(cs))).any():
        return None
    return _Edges(ends[0], ends[1], cost, _extras(raw, np.full(m, 3), EDGE_KEYS))


def _fill_fresh(values: np.ndarray, given: np.ndarray) -> None:
    """Give every node without an explicit class its own, never-used number."""
    missing = np.flatnonzero(~given)
    if missing.size:
        start = int(values[given].max()) + 1 if given.any() else 0
        values[missing] = np.arange(start, start + missing.size)


def workload_to_dict(w: Workload) -> dict[str, Any]:
    """The paper-format JSON object for ``w`` (inverse of :func:`parse_workload`)."""
    ex = w.extras
    as_bool = ex.get("bool_style", "int") == "bool"
    has_color = ex.get("has_color", np.ones(w.n, dtype=bool))
    has_layer = ex.get("has_layer", np.zeros(w.n, dtype=bool))
    has_size = ex.get("has_size", np.ones(w.n, dtype=bool))
    node_extra = ex.get("node_extra", ({},) * w.n)
    edge_extra = ex.get("edge_extra", ({},) * w.m)

    def flag(b: bool) -> bool | int:
        return bool(b) if as_bool else int(b)

    nodes = []
    for i in range(w.n):
        node: dict[str, Any] = {}
        if w.names[i] is not None:
            node["name"] = w.names[i]
        node["id"] = int(w.node_ids[i])
        node["supportedOnFpga"] = flag(w.supported[i])
        node["cpuLatency"] = float(w.cpu_time[i])
        node["fpgaLatency"] = float(w.acc_time[i])
        node["isBackwardNode"] = flag(w.backward[i])
        if has_color[i]:
            node["colorClass"] = int(w.color[i])
        if has_size[i]:
            node["size"] = float(w.size[i])
        if has_layer[i]:
            node["layerId"] = int(w.layer[i])
        node.update(node_extra[i])
        nodes.append(node)
    edges = []
    for j in range(w.m):
        edge: dict[str, Any] = {
            "sourceId": int(w.node_ids[w.edge_src[j]]),
            "destId": int(w.node_ids[w.edge_dst[j]]),
            "cost": float(w.edge_cost[j]),
        }
        edge.update(edge_extra[j])
        edges.append(edge)
    out: dict[str, Any] = {
        "maxSizePerFPGA": float(w.memory),
        "maxFPGAs": int(w.max_accelerators),
        "maxCPUs": int(w.max_cpus),
        "nodes": nodes,
        "edges": edges,
    }
    if w.shared.count:
        out[shared_json.KEY] = shared_json.shared_to_json(w)
    out.update(ex.get("top_extra", {}))
    return out


def workload_from_records(
    nodes: list[dict[str, Any]],
    edges: list[tuple[int, int, float]],
    *,
    accelerators: int,
    cpus: int,
    memory: float = float(1 << 62),
    shared: list[dict[str, Any]] | None = None,
) -> Workload:
    """Convenience constructor for Python users and tests.

    ``nodes`` are dicts with the paper's keys (``id``, ``fpgaLatency``,
    ``cpuLatency``; ``supportedOnFpga`` and ``isBackwardNode`` default to
    true / false here), ``edges`` are ``(source id, dest id, cost)`` triples.
    """
    full = [{"supportedOnFpga": True, "isBackwardNode": False, **nd} for nd in nodes]
    obj = {
        "maxSizePerFPGA": memory,
        "maxFPGAs": accelerators,
        "maxCPUs": cpus,
        "nodes": full,
        "edges": [{"sourceId": s, "destId": d, "cost": c} for s, d, c in edges],
    }
    if shared is not None:
        obj[shared_json.KEY] = shared
    return parse_workload(obj, source="workload")


# ---------------------------------------------------------------- splits
#: Metadata a split may carry that dnnplace reads as numbers (null, or a JSON number, Infinity and NaN included).
NUMERIC_META = ("gap", "bound", "runtime_s", "objectiveValue", "totalLatency")


def parse_split(obj: Any, source: str = "split") -> Split:
    """Read the paper's split format (``fpgas``/``cpus`` lists of ``{"nodes": [...]}``).

    Node ids are checked as a workload's are (integers within 2**53 in
    magnitude); metadata that dnnplace reads must have the right type and
    strings are bounded, so nothing downstream trips over a hostile value.
    """
    source = clip(source)
    if not isinstance(obj, dict):
        raise InputError(f"{source}: top level must be a JSON object with 'fpgas' and 'cpus'")
    if "fpgas" not in obj and "cpus" not in obj:
        raise InputError(f"{source}: missing field 'fpgas' (and 'cpus')")
    lists: dict[str, list[tuple[int, ...]]] = {}
    for key in ("fpgas", "cpus"):
        devices = obj.get(key, [])
        if not isinstance(devices, list):
            raise InputError(f"{source}: '{key}' must be a list")
        out = []
        for i, dev in enumerate(devices):
            where = f"{source}: {key}[{i}]"
            if not isinstance(dev, dict) or "nodes" not in dev:
                raise InputError(f"{where}: must be an object with a 'nodes' list")
            nodes = dev["nodes"]
            if not isinstance(nodes, list):
                raise InputError(f"{where}: 'nodes' must be a list")
            ids = []
            for v in nodes:
                if isinstance(v, float) and math.isfinite(v) and v.is_integer():
                    v = int(v)
                if isinstance(v, bool) or not isinstance(v, int):
                    raise InputError(f"{where}: node id {show_value(v, 30)} is not an integer")
                if abs(v) > MAX_ID:
                    raise InputError(f"{where}: node id {show_value(v, 30)} is outside the limit of {MAX_ID:,}"
                                     " in magnitude")
                ids.append(v)
            if len(set(ids)) != len(ids):
                seen: set[int] = set()
                twice = next(v for v in ids if v in seen or seen.add(v))  # type: ignore[func-returns-value]
                raise InputError(f"{where}: node id {twice} is listed twice on this device")
            out.append(tuple(ids))
        lists[key] = out
    meta = {k: v for k, v in obj.items() if k not in ("fpgas", "cpus", "maxLoad")}
    for k, v in meta.items():
        if k in NUMERIC_META and v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise InputError(f"{source}: '{clip(k, 40)}' must be a number, got {show_value(v)}")
        if k in NUMERIC_META and isinstance(v, int) and abs(v) > MAX_ID:
            raise InputError(f"{source}: '{clip(k, 40)}' is {show_value(v)}, outside the limit of {MAX_ID:,}")
        if isinstance(v, str) and len(v) > MAX_STRING:
            raise InputError(f"{source}: '{clip(k, 40)}' has {len(v):,} characters, more than the limit"
                             f" {MAX_STRING:,}")
    return Split(tuple(lists["fpgas"]), tuple(lists["cpus"]), meta)


def load_split(path: str | Path) -> Split:
    """Load a split file."""
    return parse_split(read_json_file(path), source=str(path))


def split_to_dict(split: Split, evaluation: Any | None = None) -> dict[str, Any]:
    """Paper-compatible JSON; loads come from the evaluator when given."""
    out: dict[str, Any] = {}
    if evaluation is not None:
        out["maxLoad"] = evaluation.max_load
        acc_loads = [d.load for d in evaluation.devices if d.kind == "accelerator"]
        cpu_loads = [d.load for d in evaluation.devices if d.kind == "cpu"]
    else:
        acc_loads = [-1.0] * len(split.accelerators)
        cpu_loads = [-1.0] * len(split.cpus)
    out["fpgas"] = [{"load": ld, "nodes": list(nodes)} for ld, nodes in zip(acc_loads, split.accelerators)]
    out["cpus"] = [{"load": ld, "nodes": list(nodes)} for ld, nodes in zip(cpu_loads, split.cpus)]
    if evaluation is not None:  # the shared parameter groups each device holds a copy of (an extra key)
        for entry, d in zip(out["fpgas"] + out["cpus"], [d for d in evaluation.devices if d.kind == "accelerator"]
                            + [d for d in evaluation.devices if d.kind == "cpu"]):
            if d.shared:
                entry["sharedParameters"] = list(d.shared)
    for k, v in split.meta.items():
        out.setdefault(k, v)
    return out


def save_split(split: Split, path: str | Path, evaluation: Any | None = None, *,
               inputs: tuple[str | Path | None, ...] = ()) -> None:
    """Write a split in the paper's format, atomically (loads from ``evaluation`` when given)."""
    write_json_atomic(path, split_to_dict(split, evaluation), inputs=inputs)
