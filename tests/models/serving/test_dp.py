"""The split DP equals brute force on random small instances (every contiguous split enumerated), and the
recursion on built cost matrices entry by entry (the oracle below, the form the DP had before it read prefix
sums in place)."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dnnplace.models.serving.dp import Split, split_prefix_dp


def range_costs(prefix, fixed, ok=None):
    """``C[i][j] = prefix[j] - prefix[i] + fixed`` for ``i < j`` (+inf elsewhere and where ``ok`` is False)."""
    c = prefix[None, :] - prefix[:, None] + fixed
    c[np.tril_indices(len(prefix))] = np.inf
    if ok is not None:
        c[~ok] = np.inf
    return c


def split_dp(costs):
    """The recursion on built matrices: ``costs[s][i][j]`` is stage ``s`` running layers ``[i, j)``."""
    S = len(costs)
    n = costs[0].shape[0] - 1
    if S == 0 or n < S:
        return Split((), float("inf"), "infeasible", float("inf"), 0.0)
    f = costs[0][0].copy()  # f[j]: best over stage 0 holding [0, j)
    choice = np.zeros((S, n + 1), dtype=np.int64)
    for s in range(1, S):
        cand = np.maximum(f[:, None], costs[s])  # [i, j]
        choice[s] = np.argmin(cand, axis=0)
        f = cand[choice[s], np.arange(n + 1)]
    value = float(f[n])
    if not np.isfinite(value):
        return Split((), float("inf"), "infeasible", float("inf"), 0.0)
    cuts = [n]
    j = n
    for s in range(S - 1, 0, -1):
        j = int(choice[s][j])
        cuts.append(j)
    cuts.append(0)
    cuts.reverse()
    return Split(tuple(int(b - a) for a, b in zip(cuts, cuts[1:])), value, "optimal", value, 0.0)


def brute(per_layer, fixed, cap, n, total=False):
    """The best contiguous split by enumeration: the smallest largest stage cost, or (``total``) the smallest sum
    of stage costs (a replica run stage by stage)."""
    best = (np.inf, None)
    S = len(per_layer)
    for cuts in itertools.combinations(range(1, n), S - 1):
        b = (0, *cuts, n)
        if any(b[s + 1] - b[s] > cap[s] for s in range(S)):
            continue
        costs = [per_layer[s][b[s]:b[s + 1]].sum() + fixed[s] for s in range(S)]
        value = sum(costs) if total else max(costs)
        if value < best[0]:
            best = (value, tuple(b[s + 1] - b[s] for s in range(S)))
    return best


#: random fleets of up to 6 GPUs: (stages, layers, GPU speeds, layers each holds, first/last extras, layer work)
FLEETS = st.integers(1, 6).flatmap(lambda S: st.tuples(
    st.just(S), st.integers(S, 12),
    st.lists(st.floats(0.1, 5.0), min_size=S, max_size=S),  # GPU speed (time per unit of layer work)
    st.lists(st.integers(1, 12), min_size=S, max_size=S),  # memory: layers a stage holds
    st.lists(st.floats(0.0, 3.0), min_size=S, max_size=S),  # first/last extras
    st.lists(st.floats(0.5, 2.0), min_size=12, max_size=12)))  # layer work (non-uniform layers)


@settings(max_examples=150, deadline=None)
@given(FLEETS)
def test_the_dp_equals_brute_force_on_random_fleets_of_up_to_6_gpus(args):
    S, n, speed, cap, fixed, work = args
    w = np.array(work[:n])
    per_layer = [w * sp for sp in speed]
    costs = []
    for s in range(S):
        prefix = np.concatenate([[0.0], np.cumsum(per_layer[s])])
        lo, hi = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
        costs.append(range_costs(prefix, fixed[s], (hi - lo) <= cap[s]))
    # the DP the search runs, the cap as its fit check: cap - (j - i) >= 0 * KV (a weight of 1 per layer)
    prefixes = np.stack([np.concatenate([[0.0], np.cumsum(pl)]) for pl in per_layer])
    layer_count = np.tile(np.arange(n + 1, dtype=float), (S, 1))
    prefix_dp = split_prefix_dp(prefixes, np.array(fixed), np.array(cap, dtype=float), layer_count, 1.0,
                                np.zeros((S, n + 1)), 0.0)
    want, layers = brute(per_layer, fixed, cap, n)
    for got in (split_dp(costs), prefix_dp):
        if not np.isfinite(want):
            assert got.status == "infeasible"
            continue
        assert got.status == "optimal" and got.gap == 0 and got.bound == got.value
        assert abs(got.value - want) <= 1e-9 * max(1.0, want)
        assert sum(got.layers) == n and min(got.layers) >= 1 and len(got.layers) == S


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8).flatmap(lambda S: st.tuples(
    st.just(S), st.integers(1, 14),
    st.lists(st.floats(0.0, 5.0), min_size=14 * S, max_size=14 * S),  # layer times per stage
    st.lists(st.floats(0.0, 3.0), min_size=S, max_size=S),  # fixed: head, send
    st.lists(st.floats(-2.0, 30.0), min_size=S, max_size=S),  # KV room with no layer
    st.lists(st.floats(0.0, 2.0), min_size=14, max_size=14),  # weight bytes per layer
    st.lists(st.floats(0.0, 1.0), min_size=14, max_size=14),  # KV bytes per token per layer
    st.sampled_from([0.9, 1.0]), st.floats(0.0, 10.0), st.integers(1, 3), st.booleans())))
def test_the_prefix_dp_equals_the_matrix_dp_value_and_split(args):
    """The compiled DP the search runs is the matrix DP entry by entry: the same value and the same split
    (ties at the first index), feasible or not, on stages of equal and unequal TP, each with its own times or
    stages alike sharing one row (``rows``, as the search passes them)."""
    S, n, times, fixed_own, free0, wb, kb, slope, need, tps, shared = args
    rows = np.array([min(s, 1) if shared else s for s in range(S)], dtype=np.int64)  # first, then all alike
    # one row per kind of stage, as the search passes them; the matrix DP gets each stage's own expanded row
    own = np.stack([np.concatenate([[0.0], np.cumsum(times[s * 14:s * 14 + n])]) for s in range(S)])
    tp = [1 + (s % tps) for s in range(S)]
    w_own = np.stack([np.concatenate([[0.0], np.cumsum(wb[:n])]) / t for t in tp])
    k_own = np.stack([np.concatenate([[0.0], np.cumsum(kb[:n])]) / t for t in tp])
    prefix, wpre, kpre = own[rows], w_own[rows], k_own[rows]
    fixed = [fixed_own[r] for r in rows]
    free = [free0[r] for r in rows]
    lo, hi = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    costs = []
    for s in range(S):
        c = prefix[s][None, :] - prefix[s][:, None] + fixed[s]
        ok = (lo < hi) & ((free[s] - slope * (wpre[s][hi] - wpre[s][lo])) >= need * (kpre[s][hi] - kpre[s][lo]))
        c[~ok] = np.inf
        costs.append(c)
    want = split_dp(costs)
    got = split_prefix_dp(own, np.array(fixed_own), np.array(free0), w_own, slope, k_own, need, rows)
    assert got.status == want.status
    if want.status == "optimal":
        assert got.value == want.value and got.layers == want.layers


@settings(max_examples=150, deadline=None)
@given(FLEETS)
def test_the_total_dp_equals_brute_force_on_random_fleets_of_up_to_6_gpus(args):
    """``total=True`` (llama.cpp's layer split, a Hugging Face device_map: a step runs the stages in turn) is the
    smallest sum of stage times over every contiguous split that fits, against enumeration."""
    S, n, speed, cap, fixed, work = args
    w = np.array(work[:n])
    per_layer = [w * sp for sp in speed]
    prefixes = np.stack([np.concatenate([[0.0], np.cumsum(pl)]) for pl in per_layer])
    layer_count = np.tile(np.arange(n + 1, dtype=float), (S, 1))
    got = split_prefix_dp(prefixes, np.array(fixed), np.array(cap, dtype=float), layer_count, 1.0,
                          np.zeros((S, n + 1)), 0.0, total=True)
    want, layers = brute(per_layer, fixed, cap, n, total=True)
    if not np.isfinite(want):
        assert got.status == "infeasible"
        return
    assert got.status == "optimal" and abs(got.value - want) <= 1e-9 * max(1.0, want)
    assert sum(got.layers) == n and min(got.layers) >= 1 and len(got.layers) == S
    b = np.concatenate([[0], np.cumsum(got.layers)])
    again = sum(per_layer[s][b[s]:b[s + 1]].sum() + fixed[s] for s in range(S))
    assert abs(again - got.value) <= 1e-9 * max(1.0, want)
