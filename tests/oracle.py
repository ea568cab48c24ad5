"""Independent brute-force oracles written straight from SPEC.md (tests only).

Nothing here imports the product's evaluator, preparation or solvers.
"""

from __future__ import annotations

import itertools
import math

from dnnplace.models.paper.workload import Workload


def nodes_of(w: Workload) -> list[int]:
    return list(range(w.n))


def edges_of(w: Workload) -> list[tuple[int, int, float]]:
    return [(int(u), int(v), float(c)) for u, v, c in zip(w.edge_src, w.edge_dst, w.edge_cost)]


def device_load(w: Workload, members: set[int], accelerator: bool, overlap: bool = False) -> float:
    """SPEC: accelerator = sum of fpgaLatency + c_u for every u whose output crosses S once."""
    if not accelerator:
        return sum(float(w.cpu_time[v]) for v in members)
    compute = sum(float(w.acc_time[v]) for v in members)
    crossing = set()
    for u, v, _ in edges_of(w):
        if (u in members) != (v in members):
            crossing.add(u)
    cost = {}
    for u, _, c in edges_of(w):
        cost[u] = c
    comm = sum(cost[u] for u in crossing)
    return max(compute, comm) if overlap else compute + comm


def device_memory(w: Workload, members) -> float:
    """SPEC: the members' own sizes plus one copy of every shared group any member uses."""
    own = sum(float(w.size[v]) for v in members)
    sh = w.shared
    return own + sum(float(sh.size[g]) for g in range(sh.count) if set(sh.members(g).tolist()) & set(members))


def max_load(w: Workload, acc_sets: list[set[int]], cpu_sets: list[set[int]], overlap: bool = False) -> float:
    loads = [device_load(w, s, True, overlap) for s in acc_sets] + [device_load(w, s, False) for s in cpu_sets]
    return max(loads, default=0.0)


def reachable(w: Workload, forward_only: bool = True) -> dict[int, set[int]]:
    """All nodes reachable from each node by a path of length >= 1."""
    succ: dict[int, set[int]] = {v: set() for v in nodes_of(w)}
    for u, v, _ in edges_of(w):
        if forward_only and (w.backward[u] or w.backward[v]):
            continue
        succ[u].add(v)
    out = {}
    for s in nodes_of(w):
        seen, stack = set(), list(succ[s])
        while stack:
            x = stack.pop()
            if x not in seen:
                seen.add(x)
                stack.extend(succ[x])
        out[s] = seen
    return out


def is_contiguous(w: Workload, members: set[int], forward_only: bool = True) -> bool:
    """No path leaves the set and comes back (forward part only, or the whole graph)."""
    part = {v for v in members if not (forward_only and w.backward[v])}
    reach = reachable(w, forward_only)
    for u in part:
        for x in reach[u]:
            if x not in part and reach[x] & part:
                return False
    return True


def is_ideal_chain(w: Workload, device_of: dict[int, int]) -> bool:
    """Forward sets can be ordered so that every prefix is down-closed."""
    g: dict[int, set[int]] = {}
    for u, v, _ in edges_of(w):
        if w.backward[u] or w.backward[v]:
            continue
        a, b = device_of[u], device_of[v]
        if a != b:
            g.setdefault(a, set()).add(b)
    state: dict[int, int] = {}

    def cyclic(x: int) -> bool:
        state[x] = 1
        for y in g.get(x, ()):
            if state.get(y) == 1 or (state.get(y) is None and cyclic(y)):
                return True
        state[x] = 2
        return False

    return not any(state.get(x) is None and cyclic(x) for x in list(g))


def brute_force_contiguous_optimum(w: Workload, overlap: bool = False) -> float:
    """Min max-load over all splits whose device sets form a chain of ideals."""
    classes: dict[int, list[int]] = {}
    for v in nodes_of(w):
        classes.setdefault(int(w.color[v]), []).append(v)
    groups = list(classes.values())
    k, l = w.max_accelerators, w.max_cpus
    best = math.inf
    for labels in itertools.product(range(k + l), repeat=len(groups)):
        device_of = {v: d for g, d in zip(groups, labels) for v in g}
        sets = [set() for _ in range(k + l)]
        for v, d in device_of.items():
            sets[d].add(v)
        ok = True
        for d in range(k):
            if any(not w.supported[v] for v in sets[d]) or device_memory(w, sets[d]) > w.memory:
                ok = False
                break
        if not ok or not is_ideal_chain(w, device_of):
            continue
        best = min(best, max_load(w, sets[:k], sets[k:], overlap))
    return best


def oracle_latency(w, labels, n_acc):
    """Least fixpoint of SPEC's latency constraints for splits with contiguous accelerator sets."""
    edges = edges_of(w)
    cost = {u: c for u, _, c in edges}
    groups = {d: {v for v in range(w.n) if labels[v] == d} for d in range(n_acc)}
    dur = {}
    for d, s in groups.items():
        if not s:
            continue
        inc = {u for u, v, _ in edges if u not in s and v in s}
        out = {u for u, v, _ in edges if u in s and v not in s}
        dur[d] = sum(cost[u] for u in inc) + sum(float(w.acc_time[v]) for v in s) + sum(cost[u] for u in out)
    finish = {v: 0.0 for v in range(w.n)}
    for _ in range(4 * w.n + 4):
        changed = False
        new = {}
        for d, s in groups.items():
            if s:
                start = max((finish[u] for u, v, _ in edges if u not in s and v in s), default=0.0)
                for v in s:
                    new[v] = start + dur[d]
        for v in range(w.n):
            if labels[v] >= n_acc:
                new[v] = max((finish[u] for u, x, _ in edges if x == v), default=0.0) + float(w.cpu_time[v])
        for v in range(w.n):
            if not math.isclose(new[v], finish[v]):
                changed = True
        finish = new
        if not changed:
            return max(finish.values())
    return math.inf


def brute_force_assignments(w: Workload, n_labels: int):
    """Every assignment of colour classes to ``n_labels`` labelled devices, as node -> label lists."""
    classes: dict[int, list[int]] = {}
    for v in nodes_of(w):
        classes.setdefault(int(w.color[v]), []).append(v)
    groups = list(classes.values())
    for labels in itertools.product(range(n_labels), repeat=len(groups)):
        out = [0] * w.n
        for g, d in zip(groups, labels):
            for v in g:
                out[v] = d
        yield out


def fits(w: Workload, labels: list[int], n_acc: int) -> bool:
    for d in range(n_acc):
        members = [v for v in range(w.n) if labels[v] == d]
        if any(not w.supported[v] for v in members) or device_memory(w, members) > w.memory:
            return False
    return True


def fw_bw_objective(w: Workload, labels: list[int], n_acc: int, n_dev: int) -> float:
    """max FW + max BW, communication attributed to the producing node's direction."""
    edges = edges_of(w)
    cost = {u: c for u, _, c in edges}
    fw_max = bw_max = 0.0
    for d in range(n_dev):
        members = {v for v in range(w.n) if labels[v] == d}
        fw = bw = 0.0
        for v in members:
            t = float(w.acc_time[v] if d < n_acc else w.cpu_time[v])
            if w.backward[v]:
                bw += t
            else:
                fw += t
        if d < n_acc:
            crossing = {u for u, v, _ in edges if (u in members) != (v in members)}
            for u in crossing:
                if w.backward[u]:
                    bw += cost[u]
                else:
                    fw += cost[u]
        fw_max, bw_max = max(fw_max, fw), max(bw_max, bw)
    return fw_max + bw_max
