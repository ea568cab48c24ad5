"""Parameters shared between nodes (tied embeddings, ALBERT's one layer used by every layer).

A *group* is a block of bytes (weights, and for training their gradients and
optimizer state) that several nodes read.  Every accelerator holding at least
one of a group's nodes keeps a copy, so a device's memory is its nodes' own
``size`` plus the bytes of every group that one of its nodes uses -- once per
device, however many of its nodes use it (SPEC "Shared parameters").  The
nodes' own ``size`` does not include a group's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True, eq=False)
class SharedParams:
    """Groups of shared parameter bytes and the node indices that use each (CSR)."""

    names: tuple[str, ...]
    size: np.ndarray  # float64 (g,): bytes of one copy
    ptr: np.ndarray  # int64 (g+1,): group g uses nodes[ptr[g]:ptr[g+1]]
    nodes: np.ndarray  # int64 node indices, sorted and distinct within a group

    @staticmethod
    def empty() -> SharedParams:
        return SharedParams((), np.zeros(0), np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64))

    @staticmethod
    def of(groups: list[tuple[str, float, list[int]]]) -> SharedParams:
        """From ``(name, bytes, node indices)`` triples."""
        members = [np.unique(np.asarray(nodes, dtype=np.int64)) for _, _, nodes in groups]
        ptr = np.zeros(len(groups) + 1, dtype=np.int64)
        np.cumsum([m.size for m in members], out=ptr[1:])
        return SharedParams(
            tuple(name for name, _, _ in groups),
            np.asarray([float(b) for _, b, _ in groups], dtype=np.float64),
            ptr,
            np.concatenate(members) if members else np.zeros(0, dtype=np.int64),
        )

    @property
    def count(self) -> int:
        return int(self.size.shape[0])

    def members(self, g: int) -> np.ndarray:
        """Node indices using group ``g``."""
        return self.nodes[self.ptr[g]: self.ptr[g + 1]]

    @cached_property
    def group_of_entry(self) -> np.ndarray:
        """The group of every entry of :attr:`nodes`."""
        return np.repeat(np.arange(self.count, dtype=np.int64), np.diff(self.ptr))

    def by_label(self, label: np.ndarray, n_labels: int) -> tuple[np.ndarray, np.ndarray]:
        """Groups used per label (``label`` per node, e.g. a unit or colour class; -1: none), as CSR.

        Returns ``(ptr, groups)``: label ``u`` uses ``groups[ptr[u]:ptr[u+1]]``, each group once.
        """
        lab = label[self.nodes]
        keep = lab >= 0
        pairs = np.unique(np.stack([lab[keep], self.group_of_entry[keep]], axis=1), axis=0).reshape(-1, 2)
        ptr = np.zeros(n_labels + 1, dtype=np.int64)
        np.cumsum(np.bincount(pairs[:, 0], minlength=n_labels), out=ptr[1:])
        return ptr, pairs[:, 1].astype(np.int64)

    def bytes_by_label(self, label: np.ndarray, n_labels: int) -> np.ndarray:
        """Per label: the bytes of the groups it uses (what one device holding that label alone must keep)."""
        ptr, groups = self.by_label(label, n_labels)
        owner = np.repeat(np.arange(n_labels), np.diff(ptr))
        return np.bincount(owner, weights=self.size[groups], minlength=n_labels)

    def held(self, device: np.ndarray, n_dev: int) -> np.ndarray:
        """``(B, g, n_dev)`` booleans: does device ``d`` hold a copy of group ``g`` under assignment ``b``?

        ``device`` is ``(B, n)``: a device index per node, ``n_dev`` or more (or negative) for none.
        """
        B = device.shape[0]
        out = np.zeros((B, self.count, n_dev + 1), dtype=bool)
        if self.count:
            dev = device[:, self.nodes]
            dev = np.where((dev >= 0) & (dev < n_dev), dev, n_dev)
            out[np.arange(B)[:, None], self.group_of_entry[None, :], dev] = True
        return out[:, :, :n_dev]
