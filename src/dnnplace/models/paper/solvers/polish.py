"""Polishing a pipeline split: move small closed groups of colour classes to the neighbouring stage.

A relaxation's split is put back by rules (a left-out unit joins a
neighbour's stage); where a stage boundary cuts a state-space scan, the best
boundary is a step or two away and moving it means moving a step together
with its read-out and the slices it reads.  Each candidate move takes a
colour class and every class of the same stage it drags along (its
descendants for a move to the next stage, its ancestors for the previous
one, at most :data:`GROUP_LIMIT` classes), and optionally the free classes
only the group reads (a slice of a tensor).  Candidates are scored in
batches by the evaluator's vectorised cost model; the best one that lowers
the max-load, or keeps it and lowers the sum of squared loads, is taken,
while time remains.  Every accepted split is checked by the evaluator.
A few moves reach the split the IP finds only after much longer (see
docs/dev/solver_policy.md).
"""

from __future__ import annotations

import time

import numpy as np

from dnnplace.models.paper.evaluation.evaluator import device_loads, evaluate
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload

GROUP_LIMIT = 48  # classes one move may carry (a scan step with its read-out and slices is a handful)
BATCH = 256  # candidate splits scored per call of the cost model


def polish(w: Workload, split: Split, deadline: float, overlap: bool = False) -> Split:
    """A split no worse than ``split`` (the same one if no move helps or it is not an accelerator pipeline)."""
    k = w.max_accelerators
    if w.max_cpus > 0 or k < 2 or split.cpus:
        return split
    ev = evaluate(w, split, overlap_comm=overlap, complete=False)
    if not ev.feasible:
        return split
    stage = _stages(w, np.asarray(ev.assignment.device))
    if stage is None:
        return split
    moves = _Moves(w)
    loads = device_loads(w, stage[None, :], k, k, overlap).load[0]
    best_max, best_sq = float(loads.max()), float((loads**2).sum())
    improved = False
    while time.perf_counter() < deadline:
        found = moves.best(stage, best_max, best_sq, overlap, deadline)
        if found is None:
            break
        new_stage, new_max, new_sq = found
        if not evaluate(w, Split.from_assignment(w.node_ids, new_stage, k, 0), overlap_comm=overlap,
                        complete=False).feasible:
            break
        stage, best_max, best_sq, improved = new_stage, new_max, new_sq, True
    return Split.from_assignment(w.node_ids, stage, k, 0) if improved else split


def _stages(w: Workload, device: np.ndarray) -> np.ndarray | None:
    """Each node's stage: its accelerator's position in the pipeline order (``None`` if there is none)."""
    from dnnplace.errors import DnnplaceError
    from dnnplace.utils.graph import order_devices

    k = w.max_accelerators
    if (device < 0).any() or (device >= k).any():
        return None
    fwd = ~w.backward
    cross = fwd[w.edge_src] & fwd[w.edge_dst] & (device[w.edge_src] != device[w.edge_dst])
    try:
        order = order_devices(k, zip(device[w.edge_src[cross]].tolist(), device[w.edge_dst[cross]].tolist(),
                                     strict=True))
    except DnnplaceError:
        return None
    pos = np.empty(k, dtype=np.int64)
    pos[order] = np.arange(k)
    return pos[device]


class _Moves:
    """The class graph along forward edges, and the candidate moves of one split."""

    def __init__(self, w: Workload) -> None:
        self.w = w
        cls = w.class_of
        self.cls = cls
        self.n_classes = int(cls.max(initial=-1)) + 1
        fwd = ~w.backward
        keep = fwd[w.edge_src] & fwd[w.edge_dst] & (cls[w.edge_src] != cls[w.edge_dst])
        self.succ: list[set[int]] = [set() for _ in range(self.n_classes)]
        self.pred: list[set[int]] = [set() for _ in range(self.n_classes)]
        for a, b in zip(cls[w.edge_src[keep]].tolist(), cls[w.edge_dst[keep]].tolist(), strict=True):
            self.succ[a].add(b)
            self.pred[b].add(a)
        order = np.argsort(cls, kind="stable")
        bounds = np.searchsorted(cls[order], np.arange(self.n_classes + 1))
        self.members = [order[bounds[g]:bounds[g + 1]] for g in range(self.n_classes)]
        self.free = np.bincount(cls, weights=w.acc_time, minlength=self.n_classes) == 0

    def _group(self, g: int, s: int, nbrs: list[set[int]], cstage: np.ndarray) -> set[int] | None:
        out = {g}
        todo = [g]
        while todo:
            for y in nbrs[todo.pop()]:
                if y not in out and cstage[y] == s:
                    out.add(y)
                    todo.append(y)
                    if len(out) > GROUP_LIMIT:
                        return None
        return out

    def candidates(self, stage: np.ndarray) -> list[tuple[frozenset[int], int]]:
        k = self.w.max_accelerators
        cstage = np.full(self.n_classes, -1, dtype=np.int64)
        cstage[self.cls] = stage
        seen: set[tuple[frozenset[int], int]] = set()
        out: list[tuple[frozenset[int], int]] = []
        for g in range(self.n_classes):
            s = int(cstage[g])
            for d, ahead, behind in ((1, self.succ, self.pred), (-1, self.pred, self.succ)):
                if not 0 <= s + d < k:
                    continue
                group = self._group(g, s, ahead, cstage)
                if group is None:
                    continue
                # free classes read only by the group (a slice read by a moved step) may go along
                extra = {y for x in group for y in behind[x]
                         if cstage[y] == s and self.free[y] and y not in group
                         and all(z in group or (cstage[z] - s) * d > 0 for z in ahead[y])}
                for option in (group, group | extra) if extra else (group,):
                    key = (frozenset(option), s + d)
                    if key not in seen:
                        seen.add(key)
                        out.append(key)
        return out

    def best(self, stage: np.ndarray, cur_max: float, cur_sq: float, overlap: bool,
             deadline: float) -> tuple[np.ndarray, float, float] | None:
        """The best improving move's split, its max-load and its sum of squared loads (``None``: none helps)."""
        k = self.w.max_accelerators
        cands = self.candidates(stage)
        best: tuple[float, float, np.ndarray] | None = None
        tol = 1e-12 * max(cur_max, 1.0)
        for lo in range(0, len(cands), BATCH):
            if time.perf_counter() > deadline:
                break
            chunk = cands[lo:lo + BATCH]
            batch = np.repeat(stage[None, :], len(chunk), axis=0)
            for i, (group, t) in enumerate(chunk):
                batch[i, np.concatenate([self.members[c] for c in group])] = t
            loads = device_loads(self.w, batch, k, k, overlap).load
            mx, sq = loads.max(axis=1), (loads**2).sum(axis=1)
            better = (mx < cur_max - tol) | ((mx <= cur_max + tol) & (sq < cur_sq - tol))
            for i in np.flatnonzero(better).tolist():
                if best is None or (mx[i], sq[i]) < (best[0], best[1]):
                    best = (float(mx[i]), float(sq[i]), batch[i].copy())
        if best is None:
            return None
        return best[2], best[0], best[1]
