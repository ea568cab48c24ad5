"""Turn a :class:`Split` into a per-node device array, noting what is wrong.

Devices are numbered accelerators first (0..A-1), then CPU cores (A..A+C-1).
Training splits that list only forward nodes are completed by colour class,
as the paper's tools do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dnnplace.errors import InputError
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload


@dataclass(frozen=True)
class Assignment:
    """Per-node device index (-1: unplaced) and placement problems found."""

    device: np.ndarray
    n_acc: int
    n_cpu: int
    twice_placed: tuple[int, ...]  # node indices listed on more than one device
    completed: int  # nodes placed by colour-class completion

    @property
    def n_devices(self) -> int:
        return self.n_acc + self.n_cpu

    def is_accelerator(self, d: int) -> bool:
        return d < self.n_acc


def assign(w: Workload, split: Split, *, complete: bool = True, source: str = "split") -> Assignment:
    """Map split node ids to indices; unknown ids are an input error."""
    groups = list(split.accelerators) + list(split.cpus)
    device = np.full(w.n, -1, dtype=np.int64)
    twice: list[int] = []
    index_of = w.index_of
    for d, ids in enumerate(groups):
        for nid in ids:
            i = index_of.get(int(nid))
            if i is None:
                kind = "fpgas" if d < len(split.accelerators) else "cpus"
                pos = d if d < len(split.accelerators) else d - len(split.accelerators)
                raise InputError(f"{source}: {kind}[{pos}] lists node id {nid}, which is not in the workload")
            if device[i] >= 0 and device[i] != d:
                twice.append(i)
            device[i] = d
    completed = 0
    if complete and (device < 0).any():
        completed = _complete_by_colour(w, device)
    return Assignment(device, len(split.accelerators), len(split.cpus), tuple(sorted(set(twice))), completed)


def _complete_by_colour(w: Workload, device: np.ndarray) -> int:
    """Place each unplaced node with its colour-mates when they agree on one device."""
    placed_of_class: dict[int, set[int]] = {}
    for c, d in zip(w.color.tolist(), device.tolist(), strict=False):
        if d >= 0:
            placed_of_class.setdefault(c, set()).add(d)
    count = 0
    for i in np.flatnonzero(device < 0).tolist():
        where = placed_of_class.get(int(w.color[i]), set())
        if len(where) == 1:
            device[i] = next(iter(where))
            count += 1
    return count
