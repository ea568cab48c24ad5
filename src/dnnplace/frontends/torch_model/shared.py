"""Parameters that several workload nodes read: the shared groups of a profiled model (SPEC "Shared parameters").

A tied embedding and LM head read one tensor from two nodes; ALBERT's one
layer is called by every layer, so each of its weights is read by one node per
layer.  Tensors are told apart by identity (a tied weight has two names, one
object), whether an operator reads them (``get_attr``) or a module call owns
them (``symbolic_trace``'s ``call_module``).  A tensor that two or more
workload nodes read becomes a shared group, charged to no node's own size;
tensors read by the same nodes form one group.  Every other tensor is charged
to its first reader, as before.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParameterUse:
    """Per capture group the bytes of the unshared tensors charged to it; the shared groups."""

    own: list[int]
    groups: list[tuple[str, int, tuple[int, ...]]]  # (name, bytes of one copy, capture groups reading it)

    def to_json(self, new_id: dict[int, int], factor: int) -> dict[str, Any]:
        """The workload's ``sharedParameters`` key (none without groups); ``factor`` as for node sizes."""
        if not self.groups:
            return {}
        return {"sharedParameters": [{"name": name, "size": float(nbytes * factor),
                                      "nodes": sorted(new_id[g] for g in readers)}
                                     for name, nbytes, readers in self.groups]}


def _tensor_bytes(t: Any) -> int:
    return int(t.numel() * t.element_size())


def _attr(gm: Any, target: str) -> Any:
    obj = gm
    for part in str(target).split("."):
        obj = getattr(obj, part, None)
    return obj


def _reads(cap: Any, members: list) -> list[tuple[int, str, int]]:
    """The tensors a capture group reads: (identity, name, bytes); attributes that are not tensors weigh nothing."""
    import torch

    out = []
    for node in members:
        for inp in node.all_input_nodes:
            if inp.op == "get_attr":
                t = _attr(cap.gm, inp.target)
                if isinstance(t, torch.Tensor):
                    out.append((id(t), str(inp.target), _tensor_bytes(t)))
        if cap.method == "symbolic_trace" and node.op == "call_module":
            sub = cap.gm.get_submodule(node.target)
            for name, t in sub.state_dict(keep_vars=True).items():
                out.append((id(t), f"{node.target}.{name}", _tensor_bytes(t)))
    return out


def parameter_use(cap: Any, kept: Collection[int], stand_in: dict[int, set[int]] | None = None) -> ParameterUse:
    """Who reads which parameter and buffer; ``kept``: the capture groups that become workload nodes.

    ``stand_in`` maps a capture group that is not kept but recomputed by its
    readers (a replicated view, e.g. a tied weight's transpose) to those kept readers.
    """
    keep = set(kept)
    through = stand_in or {}
    readers: dict[int, list[int]] = {}
    names: dict[int, list[str]] = {}
    size: dict[int, int] = {}
    for g, members in enumerate(cap.groups):
        for key, name, nbytes in _reads(cap, members):
            readers.setdefault(key, [])
            if g not in readers[key]:
                readers[key].append(g)
            names.setdefault(key, [])
            if name not in names[key]:
                names[key].append(name)
            size[key] = nbytes
    own = [0] * len(cap.groups)
    by_readers: dict[tuple[int, ...], list[int]] = {}
    for key, gs in readers.items():
        holders = tuple(sorted({h for g in gs for h in ({g} if g in keep else through.get(g, set()))}))
        if len(holders) >= 2:
            by_readers.setdefault(holders, []).append(key)
        else:  # its one reader (through a view its reader recomputes), else its first reader, as before
            own[holders[0] if holders else gs[0]] += size[key]
    groups: list[tuple[str, int, tuple[int, ...]]] = []
    taken: set[str] = set()
    for holders, keys in sorted(by_readers.items()):
        name = _common_name([names[k][0] for k in keys])
        base, i = name, 1
        while name in taken:
            i += 1
            name = f"{base}#{i}"
        taken.add(name)
        groups.append((name, sum(size[k] for k in keys), holders))
    return ParameterUse(own, groups)


def _common_name(names: list[str]) -> str:
    """The dotted module path the tensors share (``layer.attention.query`` for its weight and bias)."""
    if len(names) == 1:
        return names[0]
    parts = [n.split(".") for n in names]
    prefix = os.path.commonprefix(parts)
    return ".".join(prefix) if prefix else names[0]
