"""A split: which device runs which node, in the paper's output format.

Accelerators and CPU cores are numbered separately, as in the paper's files
(``fpgas`` and ``cpus`` lists).  ``meta`` carries what a solver knows beyond
the assignment (method, objective, bound, gap, runtime) and is written as
extra top-level keys, which the paper's tools ignore.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


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
