"""The optional top-level ``sharedParameters`` list of a paper-format workload (SPEC "Shared parameters").

``[{"name": "embed.weight", "size": 65536, "nodes": [0, 12]}, ...]``: a group of
parameter bytes and the ids of the nodes that use it.  Files without the key
read and write exactly as before.
"""

from __future__ import annotations

from typing import Any, Protocol

from dnnplace.core.limits import MAX_STRING
from dnnplace.models.paper.shared import SharedParams
from dnnplace.models.paper.workload import Workload
from dnnplace.utils.text import show_value

KEY = "sharedParameters"


class _FieldChecks(Protocol):
    """What :func:`parse_shared` needs of the paper reader's field checks (``paper_json._Fields``)."""

    def fail(self, where: str, what: str) -> Exception: ...

    def number(self, obj: dict, key: str, where: str, default: float | None = None) -> float: ...

    def integer(self, obj: dict, key: str, where: str, *, nonneg: bool = False, limit: int = ...) -> int: ...


def parse_shared(f: _FieldChecks, raw: Any, index: dict[int, int]) -> SharedParams:
    """Read the list (``raw``; None when the key is absent), naming the culprit of any error."""
    if raw is None:
        return SharedParams.empty()
    if not isinstance(raw, list):
        raise f.fail("top level", f"'{KEY}' must be a list")
    groups: list[tuple[str, float, list[int]]] = []
    seen: dict[str, int] = {}
    for g, item in enumerate(raw):
        where = f"{KEY}[{g}]"
        if not isinstance(item, dict):
            raise f.fail(where, "must be an object with 'name', 'size' and 'nodes'")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise f.fail(where, f"'name' must be a non-empty string, got {show_value(name)}")
        if len(name) > MAX_STRING:
            raise f.fail(where, f"'name' has {len(name):,} characters, more than the limit {MAX_STRING:,}")
        if name in seen:
            raise f.fail(where, f"duplicate name (also {KEY}[{seen[name]}])")
        seen[name] = g
        size = f.number(item, "size", where)
        nodes = item.get("nodes")
        if not isinstance(nodes, list) or not nodes:
            raise f.fail(where, "'nodes' must be a non-empty list of node ids")
        members: list[int] = []
        for j in range(len(nodes)):
            nid = f.integer({"nodes": nodes[j]}, "nodes", f"{where}.nodes[{j}]")
            if nid not in index:
                raise f.fail(where, f"unknown node id {nid}")
            members.append(index[nid])
        groups.append((name, size, members))
    return SharedParams.of(groups)


def shared_to_json(w: Workload) -> list[dict[str, Any]]:
    """The list to write (empty: write no key)."""
    sh = w.shared
    return [{"name": sh.names[g], "size": float(sh.size[g]), "nodes": [int(w.node_ids[i]) for i in sh.members(g)]}
            for g in range(sh.count)]
