"""The incumbent of a DP solve, and turning the DP's chains of pieces into splits of the workload."""

from __future__ import annotations

import numpy as np

from dnnplace.core.solver import SolverOutput
from dnnplace.models.paper.solvers.dp.exact import DPResult
from dnnplace.models.paper.solvers.dp.relax import Relaxed, reinsert
from dnnplace.models.paper.solvers.prepare import Prepared
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload


class Incumbent:
    """The incumbent split (valued by the evaluator) and the best proven lower bound.

    The portfolio creates one per solve; the algorithms it calls offer splits to it and prove bounds on it
    (and read its value to prune), all in the portfolio's thread: the second phase gets a snapshot.
    """

    def __init__(self, workload: Workload, overlap: bool) -> None:
        self.workload = workload
        self.overlap = overlap
        self.split: Split | None = None
        self.value = np.inf
        self.bound = 0.0  # on the workload itself
        self.deficit = 0.0  # Prepared.deficit of the units the DP works on
        self.timed_out = False

    def prove(self, bound: float) -> None:
        """Record a lower bound proven on the (folded) units: less their deficit on the workload."""
        self.bound = max(self.bound, bound - self.deficit)

    def offer(self, split: Split) -> None:
        from dnnplace.models.paper.evaluation import evaluate

        ev = evaluate(self.workload, split, overlap_comm=self.overlap, complete=False)
        if ev.feasible and ev.max_load < self.value:
            self.split, self.value = split, float(ev.max_load)

    def cutoff(self) -> float:
        """A pruning bound for the DP: nothing worse than the incumbent matters."""
        return self.value * (1 + 1e-9) + 1e-12 if np.isfinite(self.value) else np.inf

    def gap(self) -> float:
        if not np.isfinite(self.value) or self.value <= 0:
            return 0.0 if self.value == 0 else np.inf
        return max(0.0, (self.value - self.bound) / self.value)

    def output(self, stats: dict) -> SolverOutput:
        assert self.split is not None
        bound = min(self.bound, self.value)
        if self.timed_out:
            status = "time_limit"
        elif bound >= self.value * (1 - 1e-9):
            status, bound = "optimal", self.value
        else:
            status = "bounded"
        stats["dp_value"] = self.value
        return SolverOutput(plan=self.split, status=status, bound=float(bound), stats=stats)



def split_of(p: Prepared, result: DPResult, rel: Relaxed | None, lazy: np.ndarray | None = None,
              follow: np.ndarray | None = None) -> Split:
    """The DP's chain as a split of the workload; left-out units are put back (:func:`reinsert`)."""
    w = p.workload
    if rel is not None and not result.chain:  # everything left out was inert: one device holds it all
        on_acc = w.max_accelerators > 0
        return Split.from_assignment(w.node_ids, np.zeros(w.n, dtype=np.int64), int(on_acc), int(not on_acc))
    if rel is None:
        device = result.unit_device[p.unit_of]
    else:
        position = np.empty(len(result.chain), dtype=np.int64)
        kept_pos = np.zeros(rel.kept.size, dtype=np.int64)
        chain_pos = {d: i for i, d in enumerate(result.chain)}
        for u in range(rel.kept.size):
            kept_pos[u] = chain_pos[int(result.unit_device[u])]
        position[:] = result.chain
        unit_pos = reinsert(p, rel, kept_pos, max(1, len(result.chain)), lazy, follow)
        device = position[unit_pos][p.unit_of]
    return Split.from_assignment(w.node_ids, device, result.n_acc_used, result.n_cpu_used)


def trivial_bound(p: Prepared) -> float:
    """Every unit runs somewhere, at its cheaper kind's speed: a lower bound without any search."""
    w = p.workload
    fits = p.size + p.shared.unit_bytes() <= w.memory
    acc = np.where(p.supported & fits & (w.max_accelerators > 0), p.acc_time, np.inf)
    cheapest = np.minimum(acc, p.cpu_time if w.max_cpus > 0 else np.inf)
    if not np.isfinite(cheapest).all():
        return 0.0
    devices = w.max_accelerators + w.max_cpus
    return float(max(cheapest.max(initial=0.0), cheapest.sum() / max(devices, 1)))


def infeasible_message(workload: Workload) -> str:
    return (f"no contiguous split fits: with {workload.max_accelerators} accelerators of"
            f" {workload.memory:.6g} bytes and {workload.max_cpus} CPU cores some contiguous"
            " piece always exceeds memory or holds an unsupported node")


def is_pipeline(w: Workload, split: Split) -> bool:
    """Do the split's devices form a pipeline: no two of them feed each other through forward edges?"""
    from dnnplace.errors import DnnplaceError
    from dnnplace.models.paper.evaluation import evaluate
    from dnnplace.utils.graph import order_devices

    dev = evaluate(w, split, complete=False).assignment.device
    fwd = ~w.backward
    crossing = fwd[w.edge_src] & fwd[w.edge_dst] & (dev[w.edge_src] != dev[w.edge_dst])
    try:
        order_devices(int(dev.max(initial=-1)) + 1,
                      zip(dev[w.edge_src[crossing]].tolist(), dev[w.edge_dst[crossing]].tolist()))
    except DnnplaceError:
        return False
    return True

