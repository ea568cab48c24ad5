"""Local search over colour classes (the paper's baseline).

Each restart assigns every colour class to a random accelerator (first fit in
random order, so memory holds), then repeatedly applies the best single move
of one class to another accelerator while it lowers the max-load.  Candidate
moves are scored in batches by the evaluator's vectorised cost model.
Classes no accelerator can take go to one CPU core (if there is one).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from dnnplace.core.solver import RunContext, Solver, SolverOutput, param
from dnnplace.errors import InfeasibleError
from dnnplace.models.paper.evaluation.evaluator import max_loads
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload

BATCH = 256


@dataclass
class LocalSearch(Solver):
    """The paper's local-search baseline over colour classes."""

    name = "local-search"
    objectives = ("throughput",)
    summary = "random class assignment + best single move, with restarts"

    seed: int = param(0, "random seed", minimum=0, maximum=2**32 - 1)
    restarts: int = param(10, "independent restarts", minimum=1, maximum=1_000_000)

    def solve(self, workload: Workload, run: RunContext) -> SolverOutput:
        w = workload
        k = w.max_accelerators
        rng = np.random.default_rng(self.seed)
        cls, G = w.class_of, w.n_classes
        size = np.bincount(cls, weights=w.size, minlength=G)
        ok_acc = (np.bincount(cls, weights=~w.supported, minlength=G) == 0) & (size <= w.memory)
        cpu_col = k  # one CPU core for classes no accelerator can take
        if k == 0 or (not ok_acc.all() and w.max_cpus == 0):
            raise InfeasibleError("local search needs accelerators for every colour class, or a CPU core")
        n_dev = k + (1 if not ok_acc.all() else 0)
        deadline = None if run.time_limit is None else time.perf_counter() + run.time_limit
        best_dev, best_val = None, np.inf
        status = "heuristic"
        movable = np.flatnonzero(ok_acc)
        for restart in range(max(1, self.restarts)):
            dev = _random_start(rng, G, k, size, ok_acc, w.memory, cpu_col)
            if dev is None:
                continue
            first, _ = max_loads(w, dev[cls][None, :], k, n_dev, run.overlap_comm)
            cur = float(first[0])
            while True:
                cand_g = np.repeat(movable, k)
                cand_d = np.tile(np.arange(k), movable.size)
                keep = cand_d != dev[cand_g]
                cand_g, cand_d = cand_g[keep], cand_d[keep]
                best_move, best_move_val = -1, np.inf
                for lo in range(0, cand_g.size, BATCH):
                    g, d = cand_g[lo:lo + BATCH], cand_d[lo:lo + BATCH]
                    batch = np.repeat(dev[None, :], g.size, axis=0)
                    batch[np.arange(g.size), g] = d
                    vals, fits = max_loads(w, batch[:, cls], k, n_dev, run.overlap_comm)
                    vals = np.where(fits, vals, np.inf)
                    i = int(np.argmin(vals))
                    if vals[i] < best_move_val:
                        best_move, best_move_val = lo + i, float(vals[i])
                if best_move < 0 or best_move_val > cur - 1e-5:
                    break
                dev[cand_g[best_move]] = cand_d[best_move]
                cur = best_move_val
                if deadline is not None and time.perf_counter() > deadline:
                    status = "time_limit"
                    break
            if run.progress is not None:
                run.progress(restart + 1, self.restarts, f"local search: best {min(best_val, cur):.6g}")
            if cur < best_val:
                best_dev, best_val = dev.copy(), cur
            if status == "time_limit":
                break
        if best_dev is None:
            raise InfeasibleError("local search found no assignment that fits accelerator memory")
        split = Split.from_assignment(w.node_ids, best_dev[cls], k, n_dev - k)
        return SolverOutput(plan=split, status=status, stats={"restarts": self.restarts})


def _random_start(rng: np.random.Generator, G: int, k: int, size: np.ndarray, ok_acc: np.ndarray, memory: float,
                  cpu_col: int) -> np.ndarray | None:
    """Each class on a random accelerator, first fit in random order so memory holds (None: no fit)."""
    dev = np.full(G, cpu_col, dtype=np.int64)
    free = np.full(k, memory, dtype=float)
    for g in rng.permutation(G).tolist():
        if not ok_acc[g]:
            continue
        for d in rng.permutation(k).tolist():
            if size[g] <= free[d]:
                dev[g] = d
                free[d] -= size[g]
                break
        else:
            return None
    return dev
