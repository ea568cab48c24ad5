"""A split: which device runs which node, in the paper's output format.

Accelerators and CPU cores are numbered separately, as in the paper's files
(``fpgas`` and ``cpus`` lists).  ``meta`` carries what a solver knows beyond
the assignment (method, objective, bound, gap, runtime) and is written as
extra top-level keys, which the paper's tools ignore.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dnnplace.errors import InputError


@dataclass(frozen=True)
class Split:
    """Node ids per accelerator and per CPU core."""

    accelerators: tuple[tuple[int, ...], ...]
    cpus: tuple[tuple[int, ...], ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)

    @staticmethod
    def of(
        accelerators: Sequence[Sequence[int]],
        cpus: Sequence[Sequence[int]] = (),
        **meta: Any,
    ) -> Split:
        """Build a split from plain lists of node ids."""
        return Split(
            tuple(tuple(int(v) for v in d) for d in accelerators),
            tuple(tuple(int(v) for v in d) for d in cpus),
            dict(meta),
        )

    @staticmethod
    def from_assignment(node_ids: np.ndarray, device: np.ndarray, n_acc: int, n_cpu: int,
                        **meta: Any) -> Split:
        """Build from a per-node device array (0..n_acc-1 accelerators, then CPUs)."""
        groups: list[list[int]] = [[] for _ in range(n_acc + n_cpu)]
        for nid, d in zip(node_ids.tolist(), device.tolist(), strict=False):
            groups[d].append(int(nid))
        accs = [sorted(g) for g in groups[:n_acc] if g]
        cpus = [sorted(g) for g in groups[n_acc:] if g]
        return Split.of(accs, cpus, **meta)

    def with_meta(self, **meta: Any) -> Split:
        """A copy with more metadata."""
        return Split(self.accelerators, self.cpus, {**self.meta, **meta})


#: Metadata a split may carry that dnnplace reads as numbers (null, or a JSON number, Infinity and NaN included).
NUMERIC_META = ("gap", "bound", "runtime_s", "objectiveValue", "totalLatency")


def parse_split(obj: Any, source: str = "split") -> Split:
    """Read the paper's split format (``fpgas``/``cpus`` lists of ``{"nodes": [...]}``).

    Node ids are checked as a workload's are (integers within 2**53 in
    magnitude); metadata that dnnplace reads must have the right type and
    strings are bounded, so nothing downstream trips over a hostile value.
    """
    from dnnplace.frontends.paper_json import MAX_ID, MAX_STRING, show_value
    from dnnplace.safe_text import clip

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
    from dnnplace.frontends.paper_json import read_json_file

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
    for k, v in split.meta.items():
        out.setdefault(k, v)
    return out
