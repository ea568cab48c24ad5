"""The spine relaxation (a longest path kept, the rest left out) and how its left-out units are put back."""

from __future__ import annotations

import numpy as np

from dnnplace.models.paper.paper_json import workload_from_records
from dnnplace.models.paper.solvers.dp.relax import follow_roots, spine
from dnnplace.models.paper.solvers.prepare import prepare


def _scan(steps: int = 3):
    """``A -> h_1 .. h_m`` (each step reads its slice ``s_t`` of ``A``), read-outs ``y_t = f(h_t)``, a stack."""
    times: list[float] = []
    pairs: list[tuple[int, int]] = []
    cost: dict[int, float] = {}

    def add(t: float, c: float) -> int:
        times.append(t)
        cost[len(times) - 1] = c
        return len(times) - 1

    a = add(1.0, 0.4)
    prev, reads, roles = a, [], {}
    for _ in range(steps):
        s = add(0.0, 0.2)
        h = add(1.0, 0.3)
        y = add(0.5, 0.1)
        pairs += [(a, s), (s, h), (prev, h), (h, y)]
        roles[s], roles[h], roles[y] = "slice", "step", "read"
        reads.append(y)
        prev = h
    stack = add(0.5, 0.0)
    pairs += [(y, stack) for y in reads] + [(prev, stack)]
    edges = [(u, v, cost[u]) for u, v in pairs]
    nodes = [{"id": i, "fpgaLatency": t, "cpuLatency": t, "size": 0.0, "colorClass": i} for i, t in enumerate(times)]
    return workload_from_records(nodes, edges, accelerators=2, cpus=0, memory=1e9), roles


def test_the_spine_is_the_scan_and_the_rest_follows_its_steps():
    w, roles = _scan()
    p = prepare(w)
    unit = p.unit_of
    on = spine(p)
    assert all(on[unit[i]] for i, r in roles.items() if r == "step")
    reads = [i for i, r in roles.items() if r == "read"]
    assert not any(on[unit[i]] for i in reads[:-1])  # the last read-out lies on a longest path too
    root = follow_roots(p, ~on)
    for i, r in roles.items():
        if r == "slice" and not on[unit[i]]:  # with the step that reads it: A crosses once, not once per slice
            step = next(j for j in range(w.n) if (i, j) in set(zip(w.edge_src.tolist(), w.edge_dst.tolist())))
            assert root[unit[i]] == unit[step]
        if r == "read" and not on[unit[i]]:  # with its step
            step = int(w.predecessors[i][0])
            assert root[unit[i]] == unit[step]
    assert np.all(root[on] == np.flatnonzero(on))
