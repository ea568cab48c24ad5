"""The forward unit DAG the DP and IPs work on: per-unit costs, transfers and shared groups."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dnnplace.models.paper.solvers.prepare.comm import CommSources, comm_sources
from dnnplace.models.paper.workload import Workload


@dataclass(frozen=True)
class UnitShared:
    """The shared parameter groups each unit uses (CSR), and each group's bytes.

    A set of units holds ``size[g]`` once for every group ``g`` used by at
    least one of its units (SPEC "Shared parameters").
    """

    ptr: np.ndarray  # int64 (units+1,)
    group: np.ndarray  # int64 group indices; unit u uses group[ptr[u]:ptr[u+1]]
    size: np.ndarray  # float64 (groups,)

    @staticmethod
    def of(w: Workload, unit_of: np.ndarray, n_units: int) -> UnitShared:
        """From a node -> unit map (unit -1: a node left out of the problem)."""
        ptr, group = w.shared.by_label(unit_of, n_units)
        return UnitShared(ptr, group, w.shared.size)

    @property
    def uses(self) -> np.ndarray:
        """Per unit: does it use any shared group?"""
        return np.diff(self.ptr) > 0

    def unit_bytes(self) -> np.ndarray:
        """Per unit: the bytes of the groups it uses (a device holding it alone keeps them)."""
        n = self.ptr.size - 1
        return np.bincount(np.repeat(np.arange(n), np.diff(self.ptr)), weights=self.size[self.group], minlength=n)

    def kept(self, kept: np.ndarray) -> UnitShared:
        """The same groups for a subset of the units, renumbered in the order of ``kept``."""
        counts = np.diff(self.ptr)[kept]
        ptr = np.zeros(kept.size + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        parts = [self.group[self.ptr[u]: self.ptr[u + 1]] for u in kept.tolist()]
        group = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return UnitShared(ptr, group.astype(np.int64), self.size)


@dataclass(frozen=True)
class Prepared:
    """The forward unit DAG with per-unit costs and exact communication sources."""

    workload: Workload
    unit_of: np.ndarray  # node index -> unit
    acc_time: np.ndarray  # per unit, forward + backward nodes
    cpu_time: np.ndarray
    size: np.ndarray
    supported: np.ndarray
    edge_src: np.ndarray  # unit DAG edges (deduplicated, acyclic)
    edge_dst: np.ndarray
    comm: CommSources
    shared: UnitShared
    #: how much the optimum of these units may exceed the workload's (folds that may raise a load, see
    #: :func:`merge_free_units`): a bound proven on them minus this is a bound on the workload
    deficit: float = 0.0

    @property
    def n_units(self) -> int:
        return int(self.acc_time.shape[0])

    @staticmethod
    def of(w: Workload, unit_of: np.ndarray, src: np.ndarray, dst: np.ndarray) -> Prepared:
        """Units from a node -> unit map and the unit edges: per-unit sums and the exact transfer sources."""
        n = int(unit_of.max()) + 1 if unit_of.size else 0
        return Prepared(
            workload=w,
            unit_of=unit_of.astype(np.int64),
            acc_time=np.bincount(unit_of, weights=w.acc_time, minlength=n),
            cpu_time=np.bincount(unit_of, weights=w.cpu_time, minlength=n),
            size=np.bincount(unit_of, weights=w.size, minlength=n),
            supported=np.bincount(unit_of, weights=~w.supported, minlength=n) == 0,
            edge_src=np.asarray(src, dtype=np.int64),
            edge_dst=np.asarray(dst, dtype=np.int64),
            comm=comm_sources(w, unit_of),
            shared=UnitShared.of(w, unit_of, n),
        )

    def members(self) -> list[np.ndarray]:
        """Node indices of every unit."""
        order = np.argsort(self.unit_of, kind="stable")
        bounds = np.searchsorted(self.unit_of[order], np.arange(self.n_units + 1))
        return [order[bounds[u]: bounds[u + 1]] for u in range(self.n_units)]


def memory_binds(w: Workload) -> bool:
    """Can an accelerator's memory limit ever bind?  Not when the whole workload fits on one.

    Then a unit's size changes nothing any split is judged by, so a unit that
    only stores something (a norm's weight read by a metadata check) counts as
    free in the exact reductions.
    """
    return bool(float(w.size.sum()) + float(w.shared.size.sum()) > float(w.memory))

