"""Single-sample latency of a split (SPEC "Integer programs", latency model).

CPU cores are unlimited: a CPU node starts when its predecessors are done and
takes ``cpuLatency``.  An accelerator runs its set as contiguous *pieces*, one
call each, in order: a piece starts when its inputs are ready and the previous
piece on that accelerator has finished, and takes incoming transfers + compute
+ outgoing transfers.  A set that is not contiguous is cut into the fewest
pieces: a node's piece index is the largest number of times a path from the
same accelerator leaves it before reaching the node.
"""

from __future__ import annotations

import numpy as np

from dnnplace.models.paper.workload import Workload
from dnnplace.utils.graph import topological_order


def single_sample_latency(w: Workload, dev: np.ndarray, n_acc: int) -> tuple[float, str | None]:
    """Latency of one sample, or ``(inf, reason)`` when no schedule exists."""
    if (dev < 0).any():
        return float("nan"), "some nodes are not placed"
    order = w.topological_order.tolist()
    preds = w.predecessors
    piece = np.zeros(w.n, dtype=np.int64)
    # reach[v, d]: the highest piece of accelerator d with a path to v (-1 none)
    reach = np.full((w.n, max(n_acc, 1)), -1, dtype=np.int64)
    for v in order:
        d = int(dev[v])
        pv = preds[v]
        if pv.size:
            r = reach[pv].max(axis=0)
        else:
            r = np.full(max(n_acc, 1), -1, dtype=np.int64)
        if d < n_acc:
            p = 0
            for u in pv.tolist():
                if dev[u] == d:
                    p = max(p, int(piece[u]))
                elif reach[u, d] >= 0:
                    p = max(p, int(reach[u, d]) + 1)
            piece[v] = p
            r[d] = max(r[d], p)
        reach[v] = r
    # tasks: one per accelerator piece, one per CPU node
    task_of = np.empty(w.n, dtype=np.int64)
    keys: dict[tuple[int, int], int] = {}
    for v in range(w.n):
        d = int(dev[v])
        key = (d, int(piece[v])) if d < n_acc else (-1 - v, 0)
        task_of[v] = keys.setdefault(key, len(keys))
    n_tasks = len(keys)
    duration = np.zeros(n_tasks)
    is_acc_task = np.zeros(n_tasks, dtype=bool)
    for (d, _), t in keys.items():
        is_acc_task[t] = d >= 0
    np.add.at(duration, task_of, np.where(dev < n_acc, w.acc_time, w.cpu_time))
    ts, td = task_of[w.edge_src], task_of[w.edge_dst]
    cross = ts != td
    c = w.comm_cost
    # outgoing: each producing node once per piece; incoming: once per (node, piece)
    senders = np.unique(w.edge_src[cross])
    np.add.at(duration, task_of[senders], c[senders] * is_acc_task[task_of[senders]])
    pairs = np.unique(np.stack([w.edge_src[cross], td[cross]], axis=1), axis=0)
    if pairs.size:
        np.add.at(duration, pairs[:, 1], c[pairs[:, 0]] * is_acc_task[pairs[:, 1]])
    deps: set[tuple[int, int]] = set(zip(ts[cross].tolist(), td[cross].tolist(), strict=False))
    for (d, p), t in keys.items():
        if d >= 0 and p > 0:
            deps.add((keys[(d, p - 1)], t))
    finish = _longest_path(n_tasks, deps, duration)
    if finish is None:
        return float("inf"), "the device sets depend on each other in a cycle, so no schedule exists"
    return float(finish.max(initial=0.0)), None


def _longest_path(n: int, deps: set[tuple[int, int]], duration: np.ndarray) -> np.ndarray | None:
    """Finish time of every task (each starts when all its predecessors finish), None on a cycle."""
    succ: list[list[int]] = [[] for _ in range(n)]
    for a, b in deps:
        succ[a].append(b)
    order = topological_order(n, succ)
    if len(order) < n:
        return None
    start = np.zeros(n)
    finish = np.zeros(n)
    for t in order.tolist():
        finish[t] = start[t] + duration[t]
        for b in succ[t]:
            start[b] = max(start[b], finish[t])
    return finish
