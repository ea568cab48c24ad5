"""What ``dnnplace profile`` records about the model behind a workload, as a typed view.

The profiler writes it into the workload file's ``dnnplace`` block and each node's extra fields
(the paper's format keeps unknown fields); the runtime and the exports read it through
:attr:`Workload.profile <dnnplace.models.paper.workload.Workload.profile>` instead of digging in dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProfileMeta:
    """The model spec, how it was traced and profiled, and per workload node its operators and module."""

    model: str | None  # MODULE:FACTORY, when profiled from a spec
    granularity: str  # "op" or "module"
    trace: str  # how the graph was captured
    device: str  # host, cuda or a catalogue device
    training: bool
    constants: tuple[str, ...]  # fx nodes evaluated once, outside the workload
    replicated_views: tuple[str, ...]  # views recomputed on every stage that reads them
    fx_nodes: tuple[tuple[str, ...], ...]  # per workload node (backward nodes: empty)
    modules: tuple[str, ...]  # per workload node: the leaf module it belongs to, or ""
    output_bytes: tuple[int, ...]  # per workload node: bytes of its output kept for backward

    @classmethod
    def read(cls, top: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> ProfileMeta | None:
        """The view of a workload's extra fields, or None when no node carries operators (not profiled)."""
        if not any("fxNodes" in e for e in nodes):
            return None
        meta = top.get("dnnplace", {}) if isinstance(top.get("dnnplace", {}), Mapping) else {}

        def names(value: Any) -> tuple[str, ...]:
            return tuple(str(x) for x in value) if isinstance(value, (list, tuple)) else ()

        def count(value: Any) -> int:
            return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

        model = meta.get("model")
        return cls(
            model=model if isinstance(model, str) and model else None,
            granularity=str(meta.get("granularity", "op")),
            trace=str(meta.get("trace", "")),
            device=str(meta.get("device", "")),
            training=bool(meta.get("training", False)),
            constants=names(meta.get("constants")),
            replicated_views=names(meta.get("replicatedViews")),
            fx_nodes=tuple(names(e.get("fxNodes")) for e in nodes),
            modules=tuple(str(e.get("module", "") or "") for e in nodes),
            output_bytes=tuple(count(e.get("outputBytes", 0)) for e in nodes),
        )
