"""Graph partitioners as baselines: Scotch (its ``gpart`` tool) and METIS (``pymetis``).

Both see the colour-class graph with vertex weight = accelerator time and edge
weight = communication cost (each producer counted once per neighbouring
class), and cut it into ``k`` balanced parts.  Weights are scaled to integers,
as both tools require.  Classes no accelerator can take go to a CPU core.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dnnplace.core.solver import RunContext, Solver, SolverOutput
from dnnplace.errors import DnnplaceError, InfeasibleError
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload

SCALE = 1e6


def class_graph(w: Workload) -> tuple[np.ndarray, int, np.ndarray, dict[tuple[int, int], float], np.ndarray]:
    """Class of each node, class count, vertex weights, symmetric edge weights, acc-capable mask."""
    cls, G = w.class_of, w.n_classes
    vw = np.bincount(cls, weights=w.acc_time, minlength=G)
    size = np.bincount(cls, weights=w.size, minlength=G)
    ok = (np.bincount(cls, weights=~w.supported, minlength=G) == 0) & (size <= w.memory)
    producers: dict[tuple[int, int], set[int]] = {}
    for u, v in zip(w.edge_src.tolist(), w.edge_dst.tolist()):
        a, b = int(cls[u]), int(cls[v])
        if a != b:
            producers.setdefault((a, b), set()).add(u)
    ew: dict[tuple[int, int], float] = {}
    for (a, b), us in producers.items():
        c = float(sum(w.comm_cost[u] for u in us))
        for key in ((a, b), (b, a)):
            ew[key] = ew.get(key, 0.0) + c
    return cls, G, vw, ew, ok


def partition_input(w: Workload) -> tuple[np.ndarray, np.ndarray, list[int], list[list[tuple[int, int]]], np.ndarray]:
    """Class of each node, vertex weights, the classes to partition, their integer-weighted adjacency, mask."""
    cls, _, vw, ew, ok = class_graph(w)
    verts = np.flatnonzero(ok).tolist()
    index = {g: i for i, g in enumerate(verts)}
    adj: list[list[tuple[int, int]]] = [[] for _ in verts]
    for (a, b), c in ew.items():
        if a in index and b in index:
            adj[index[a]].append((index[b], _weights(c)))
    return cls, vw, verts, adj, ok


def _finish(w: Workload, cls: np.ndarray, part_of: dict[int, int], ok: np.ndarray) -> Split:
    k = w.max_accelerators
    if not ok.all() and w.max_cpus == 0:
        raise InfeasibleError("some colour class cannot go on an accelerator and maxCPUs is 0")
    dev_of_class = np.array([part_of.get(g, k) for g in range(ok.size)], dtype=np.int64)
    return Split.from_assignment(w.node_ids, dev_of_class[cls], k, 1)


def _weights(x: float) -> int:
    return max(1, int(round(SCALE * x)))


@dataclass
class Scotch(Solver):
    """Scotch's gpart on the colour-class graph (the paper's partitioner baseline)."""

    name = "scotch"
    objectives = ("throughput",)
    summary = "Scotch graph partitioner (gpart), k balanced parts"

    def solve(self, workload: Workload, run: RunContext) -> SolverOutput:
        w = workload
        exe = shutil.which("gpart") or shutil.which("scotch_gpart")
        if exe is None:
            raise DnnplaceError("Scotch's gpart is not installed (Debian: apt-get install scotch; `make` does it)")
        cls, vw, verts, adj, ok = partition_input(w)
        if w.max_accelerators <= 1 or len(verts) <= 1:  # nothing to partition (gpart needs a graph)
            return SolverOutput(plan=_finish(w, cls, dict.fromkeys(verts, 0), ok), status="heuristic")
        lines = ["0", f"{len(verts)} {sum(len(x) for x in adj)}", "0 011"]
        for i, g in enumerate(verts):
            nbrs = " ".join(f"{wt} {j}" for j, wt in sorted(adj[i]))
            lines.append(f"{_weights(vw[g])} {len(adj[i])} {nbrs}".rstrip())
        with tempfile.TemporaryDirectory() as tmp:
            grf, mp = Path(tmp) / "g.grf", Path(tmp) / "g.map"
            grf.write_text("\n".join(lines) + "\n")
            proc = subprocess.run([exe, str(max(1, w.max_accelerators)), str(grf), str(mp)],
                                  capture_output=True, text=True, timeout=run.time_limit or 600)
            if proc.returncode != 0:
                raise DnnplaceError(f"gpart failed: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
            rows = mp.read_text().split()
        n = int(rows[0])
        pairs = np.array(rows[1:1 + 2 * n], dtype=np.int64).reshape(n, 2)
        part_of = {verts[int(v)]: int(p) for v, p in pairs}
        return SolverOutput(plan=_finish(w, cls, part_of, ok), status="heuristic")


@dataclass
class Metis(Solver):
    """METIS on the colour-class graph."""

    name = "metis"
    objectives = ("throughput",)
    summary = "METIS graph partitioner (pymetis), k balanced parts"

    def solve(self, workload: Workload, run: RunContext) -> SolverOutput:
        try:
            import pymetis
        except ImportError:
            raise DnnplaceError("METIS needs pymetis: pip install pymetis") from None
        w = workload
        cls, vw, verts, adj, ok = partition_input(w)
        k = max(1, w.max_accelerators)
        if k == 1 or len(verts) <= 1:
            parts: list[int] = [0] * len(verts)
        else:
            xadj = np.cumsum([0] + [len(x) for x in adj])
            adjncy = [j for x in adj for j, _ in sorted(x)]
            eweights = [wt for x in adj for _, wt in sorted(x)]
            _, found = pymetis.part_graph(k, adjacency=pymetis.CSRAdjacency(xadj.tolist(), adjncy),
                                          vweights=[_weights(vw[g]) for g in verts], eweights=eweights)
            parts = list(found)
        part_of = {g: int(p) for g, p in zip(verts, parts)}
        return SolverOutput(plan=_finish(w, cls, part_of, ok), status="heuristic")
