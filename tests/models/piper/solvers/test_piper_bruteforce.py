"""The Piper planner against brute force on tiny random instances.

The brute force below is written from PIPER-SPEC sections 2-3 alone (it shares no
code with the product): every ordered partition of the nodes into stages that
respects the edges, every (t, d) per stage with d | N, sum d <= N and sum d*t <= K,
and every TMPC choice, with y = ceil(D_i / d_i).
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples

from dnnplace.errors import InfeasibleError
from dnnplace.models.piper.evaluation import evaluate_piper
from dnnplace.models.piper.piper_json import parse_piper
from dnnplace.models.piper.solvers.solver import solve_piper


def brute_force(doc: dict) -> float | None:
    K, M, BW, N = doc["maxDevices"], doc["maxMemoryPerDevice"], doc["bandwidth"], doc["mbsInBatch"]
    nodes = doc["nodes"]
    n = len(nodes)
    edges = [(e["sourceId"], e["destId"], e["communicationCost"]) for e in doc["edges"]]
    best = None
    # ordered set partitions: a stage label per node, labels 0..m-1 all used, edges go forward
    for m in range(1, n + 1):
        for labels in itertools.product(range(m), repeat=n):
            if len(set(labels)) != m:
                continue
            if any(labels[u] > labels[v] for u, v, _ in edges):
                continue
            stages = [[v for v in range(n) if labels[v] == i] for i in range(m)]
            per_stage = []
            for S in stages:
                combos = []
                ts = set.intersection(*(set(int(t) for t, lst in nodes[v]["TMPCs"].items() if lst) for v in S))
                for t in sorted(ts):
                    for d in range(1, N + 1):
                        if N % d == 0 and d * t <= K:
                            combos.append((t, d))
                per_stage.append(combos)
            for choice in itertools.product(*per_stage):
                if sum(d * t for t, d in choice) > K or sum(d for _, d in choice) > N:
                    continue
                D = sum(d for _, d in choice)
                worst = 0.0
                ok = True
                for S, (t, d) in zip(stages, choice):
                    y = math.ceil(D / d)
                    D -= d
                    opts = [nodes[v]["TMPCs"][str(t)] for v in S]
                    stage_best = None
                    for pick in itertools.product(*[range(len(o)) for o in opts]):
                        mem = sum(opts[i][pick[i]]["memoryUsageA"] * y + opts[i][pick[i]]["memoryUsageB"]
                                  for i in range(len(S)))
                        if mem > M:
                            continue
                        eb = comp = rs = 0.0
                        for i, v in enumerate(S):
                            o = opts[i][pick[i]]
                            comp += o["timePerSample"]
                            rs += 4 * (d - 1) * o["parameterSize"] / (d * N)
                            for u, x, c in edges:
                                if x == v and u not in S:
                                    eb += 2 * (c + o["syncTimeFw"][str(u)])
                                if u == v and x not in S:
                                    eb += 2 * (c + o["syncTimeBw"][str(x)])
                        tm = (eb / d + rs) / BW + comp / d
                        if stage_best is None or tm < stage_best:
                            stage_best = tm
                    if stage_best is None:
                        ok = False
                        break
                    worst = max(worst, stage_best)
                if ok and (best is None or worst < best):
                    best = worst
    return best


@st.composite
def tiny_instances(draw, compute_only_switches=False):
    """Random tiny instances; with ``compute_only_switches`` the second TMPC of a node differs from
    the first only in time and memory (same weights and syncs, as in all shipped inputs), which
    is the planner's fast path (one exact cover per stage and y for every d, bounded lazily)."""
    n = draw(st.integers(1, 4))
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n)]
    edges = [p for p in pairs if draw(st.booleans())]
    if not edges:
        if n == 1:
            n = 2
            pairs = [(0, 1)]
        edges = [pairs[0]]
    K = draw(st.integers(1, 4))
    N = draw(st.sampled_from([1, 2, 3, 4, 6]))
    tsets = draw(st.sampled_from([[1], [1], [1, 2], [2]]))
    small = st.sampled_from([0.0, 1.0, 2.0, 3.0, 5.0])
    nodes = []
    preds = {v: [u for u, x in edges if x == v] for v in range(n)}
    succs = {v: [x for u, x in edges if u == v] for v in range(n)}
    for v in range(n):
        tm = {}
        for t in tsets:
            if draw(st.integers(0, 9)) == 0:
                continue  # sometimes a node lacks this t
            k = draw(st.integers(1, 2))
            lst = []
            for j in range(k):
                lst.append({
                    "id": ["vanilla", "activation recomp"][j],
                    "timePerSample": draw(st.sampled_from([0.5, 1.0, 2.0, 3.0, 4.0])),
                    "parameterSize": draw(small),
                    "memoryUsageA": draw(small),
                    "memoryUsageB": draw(small),
                    "syncTimeFw": {str(u): draw(st.sampled_from([0.0, 1.0])) for u in preds[v]},
                    "syncTimeBw": {str(w): draw(st.sampled_from([0.0, 1.0])) for w in succs[v]},
                })
            if compute_only_switches and len(lst) == 2:
                for key in ("parameterSize", "syncTimeFw", "syncTimeBw"):
                    lst[1][key] = lst[0][key]
                # memory that binds with several micro-batches in flight, and partial savings
                lst[0]["memoryUsageA"] = draw(st.sampled_from([1.0, 2.0, 3.0, 5.0]))
                lst[1]["memoryUsageA"] = draw(st.sampled_from([0.0, 0.5, 1.0]))
                lst[1]["timePerSample"] = lst[0]["timePerSample"] + draw(st.sampled_from([0.25, 0.5, 1.0, 1.5]))
            tm[str(t)] = lst
        nodes.append({"id": v, "name": f"n{v}", "TMPCs": tm})
    return {
        "maxDevices": K, "maxMemoryPerDevice": float(draw(st.sampled_from([4.0, 6.0, 8.0, 12.0, 30.0]))),
        "bandwidth": draw(st.sampled_from([1.0, 2.0, 8.0])), "mbsInBatch": N, "nodes": nodes,
        "edges": [{"sourceId": u, "destId": v, "communicationCost": draw(small)} for u, v in edges],
    }


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_instances())
def test_solver_matches_brute_force(doc):
    check_against_brute_force(doc)


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_instances(compute_only_switches=True))
def test_solver_matches_brute_force_compute_only_switches(doc):
    check_against_brute_force(doc)


def check_against_brute_force(doc):
    inst = parse_piper(doc)
    want = brute_force(doc)
    try:
        res = solve_piper(inst)
    except InfeasibleError:
        assert want is None
        return
    assert want is not None, "solver found a plan where brute force found none"
    assert res.tps == pytest.approx(want, rel=1e-9, abs=1e-12)
    ev = evaluate_piper(inst, res.plan)  # the plan itself is valid and worth what is reported
    assert ev.feasible and ev.tps == res.tps


def test_toys_exact_optimum():
    from pathlib import Path

    import dnnplace
    from dnnplace.models.piper.piper_json import load_piper

    toys = Path(dnnplace.__file__).parent / "data" / "piper" / "toys"
    for name, opt in (("toy_a_knapsack.json", 5.0), ("toy_b_monotone.json", 1.95)):
        inst = load_piper(toys / name)
        import json

        assert brute_force(json.loads((toys / name).read_text())) == pytest.approx(opt)
        assert solve_piper(inst).tps == pytest.approx(opt, rel=1e-12)
