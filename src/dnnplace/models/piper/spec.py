"""Piper's model (PIPER-SPEC): the instance, a plan, and the invariants every instance satisfies.

These are plain data, shared by the reader (:mod:`dnnplace.models.piper.piper_json`),
the evaluator (:mod:`dnnplace.models.piper.evaluation`), the planner
(:mod:`dnnplace.models.piper.solvers`), the simulation and the report.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace
from typing import Any

from dnnplace.errors import InputError
from dnnplace.utils.graph import topological_order
from dnnplace.utils.text import show_value

__all__ = ["MAX_BATCH", "MAX_K", "MAX_T", "TMPC", "PiperInstance", "PiperPlan", "PiperStage", "validate"]

MAX_T = 10000
MAX_K = 10000
MAX_BATCH = 1_000_000  # mbsInBatch: far above any real batch, far below where the kernel's integers overflow
MAX_AMOUNT = 1e100  # maxMemoryPerDevice and bandwidth (as the paper model's MAX_VALUE)


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
        """The same workload with some of K, M, BW, N replaced (``None``: keep the file's); checked as the file is."""
        for name, val, integer in (("maxDevices", devices, True), ("maxMemoryPerDevice", memory, False),
                                   ("bandwidth", bandwidth, False), ("mbsInBatch", batch, True)):
            if val is None:
                continue
            if isinstance(val, bool) or not isinstance(val, numbers.Real) \
                    or (integer and not isinstance(val, numbers.Integral)):
                kind = "a whole number" if integer else "a number"
                raise InputError(f"{self.source}: {name} must be {kind}, got {show_value(val)}")
            if not math.isfinite(val):
                raise InputError(f"{self.source}: {name} must be finite, got {val}")
        out = replace(
            self,
            max_devices=self.max_devices if devices is None else int(devices),
            memory=self.memory if memory is None else float(memory),
            bandwidth=self.bandwidth if bandwidth is None else float(bandwidth),
            batch=self.batch if batch is None else int(batch),
        )
        validate(out)
        return out


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


def validate(inst: PiperInstance) -> None:
    """PIPER-SPEC section 1.2; raises :class:`InputError` naming the first violation."""
    src = inst.source
    if isinstance(inst.max_devices, bool) or not isinstance(inst.max_devices, int) \
            or not 1 <= inst.max_devices <= MAX_K:
        raise InputError(f"{src}: maxDevices must be in [1, {MAX_K}], got {show_value(inst.max_devices)}")
    if not 1e-9 <= inst.bandwidth <= MAX_AMOUNT:
        raise InputError(f"{src}: bandwidth must be in [1e-9, {MAX_AMOUNT:g}], got {inst.bandwidth:g}")
    if not 1e-9 <= inst.memory <= MAX_AMOUNT:
        raise InputError(f"{src}: maxMemoryPerDevice must be in [1e-9, {MAX_AMOUNT:g}], got {inst.memory:g}")
    if not 1 <= inst.batch <= MAX_BATCH:
        raise InputError(f"{src}: mbsInBatch must be in [1, {MAX_BATCH:,}], got {show_value(inst.batch)}")
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
