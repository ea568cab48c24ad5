"""The immutable workload: a DAG of operators with costs and a device budget.

Everything downstream (preparation, evaluator, solvers, reports) reads these
numpy arrays; nothing mutates them.  Node *indices* (0..n-1) are used inside the
library, the user's original node *ids* only at the edges (files, screens).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from dnnplace.models.paper.profile_meta import ProfileMeta
from dnnplace.models.paper.shared import SharedParams
from dnnplace.utils.graph import class_index, topological_order_of_edges


@dataclass(frozen=True, eq=False)
class Workload:
    """A DNN graph to place, as the paper's JSON describes it (see SPEC.md)."""

    node_ids: np.ndarray  # int64, original ids
    acc_time: np.ndarray  # float64, "fpgaLatency"
    cpu_time: np.ndarray  # float64, "cpuLatency"
    supported: np.ndarray  # bool, "supportedOnFpga"
    size: np.ndarray  # float64, bytes on an accelerator
    backward: np.ndarray  # bool, "isBackwardNode"
    color: np.ndarray  # int64, colour class (a fresh one where the file has none)
    layer: np.ndarray  # int64, layer id (a fresh one where the file has none)
    names: tuple[str | None, ...]
    edge_src: np.ndarray  # int64 node indices
    edge_dst: np.ndarray  # int64 node indices
    edge_cost: np.ndarray  # float64
    max_accelerators: int
    max_cpus: int
    memory: float
    # What the file said beyond the model, kept so that writing back is lossless.
    extras: Mapping[str, Any] = field(default_factory=dict)
    # Parameter bytes several nodes use, held once by every accelerator running one of them (model/shared.py).
    shared: SharedParams = field(default_factory=SharedParams.empty)

    # ------------------------------------------------------------------ sizes
    @property
    def n(self) -> int:
        """Number of nodes."""
        return int(self.node_ids.shape[0])

    @property
    def m(self) -> int:
        """Number of edges."""
        return int(self.edge_src.shape[0])

    @property
    def is_training(self) -> bool:
        """True when the graph has backward nodes."""
        return bool(self.backward.any())

    # -------------------------------------------------------------- derived
    @cached_property
    def index_of(self) -> dict[int, int]:
        """Original node id -> node index."""
        return {int(v): i for i, v in enumerate(self.node_ids)}

    @cached_property
    def comm_cost(self) -> np.ndarray:
        """Per-node output transfer cost ``c_u`` (0 for nodes without out-edges)."""
        c = np.zeros(self.n)
        c[self.edge_src] = self.edge_cost
        return c

    @cached_property
    def successors(self) -> tuple[np.ndarray, ...]:
        """Distinct successor indices of every node."""
        return _adjacency(self.n, self.edge_src, self.edge_dst)

    @cached_property
    def predecessors(self) -> tuple[np.ndarray, ...]:
        """Distinct predecessor indices of every node."""
        return _adjacency(self.n, self.edge_dst, self.edge_src)

    @cached_property
    def topological_order(self) -> np.ndarray:
        """A topological order of all nodes (the graph is validated acyclic)."""
        return topological_order_of_edges(self.n, self.edge_src, self.edge_dst)

    @cached_property
    def class_of(self) -> np.ndarray:
        """Dense colour-class number ``0..n_classes-1`` of every node (a class is placed as one)."""
        return class_index(self.color)[0]

    @cached_property
    def n_classes(self) -> int:
        """Number of colour classes."""
        return class_index(self.color)[1]

    @cached_property
    def node_memory(self) -> np.ndarray:
        """Bytes an accelerator needs to run each node alone: its own size and the shared groups it uses."""
        return self.size + self.shared.bytes_by_label(np.arange(self.n), self.n)

    @cached_property
    def class_memory(self) -> np.ndarray:
        """Bytes one accelerator needs for each colour class alone (own sizes, each used group once)."""
        own = np.bincount(self.class_of, weights=self.size, minlength=self.n_classes)
        return own + self.shared.bytes_by_label(self.class_of, self.n_classes)

    def label(self, index: int) -> str:
        """Human-readable name of a node for messages."""
        name = self.names[index]
        node_id = int(self.node_ids[index])
        return f"node {node_id}" + (f" ({name})" if name else "")

    @cached_property
    def profile(self) -> ProfileMeta | None:
        """What ``dnnplace profile`` recorded of the model (spec, operators per node), or None."""
        return ProfileMeta.read(self.extras.get("top_extra", {}), self.extras.get("node_extra", ()))

    def require_profile(self) -> ProfileMeta:
        """:attr:`profile`, or a one-line error: running or exporting a split needs the model's operators."""
        meta = self.profile
        if meta is None:
            from dnnplace.errors import DnnplaceError

            raise DnnplaceError("the workload was not made by `dnnplace profile` (its nodes lack fxNodes)")
        return meta

    def with_budget(
        self,
        accelerators: int | None = None,
        cpus: int | None = None,
        memory: float | None = None,
    ) -> Workload:
        """A copy with a different device budget (``None``: keep), range-checked as the file's fields are."""
        from dnnplace.core.limits import check_budget

        check_budget(accelerators, cpus, memory)
        return replace(
            self,
            max_accelerators=self.max_accelerators if accelerators is None else int(accelerators),
            max_cpus=self.max_cpus if cpus is None else int(cpus),
            memory=self.memory if memory is None else float(memory),
        )


def _adjacency(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, ...]:
    lists: list[set[int]] = [set() for _ in range(n)]
    for u, w in zip(src.tolist(), dst.tolist(), strict=False):
        lists[u].add(w)
    return tuple(np.asarray(sorted(s), dtype=np.int64) for s in lists)
