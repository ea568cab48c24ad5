"""The ideal lattice against brute force: every down-closed set once, covers and prefix sums right."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from strategies import examples, small_workloads

from dnnplace.errors import TooManyIdealsError
from dnnplace.models.paper.solvers.dp.ideals import enumerate_ideals
from dnnplace.models.paper.solvers.prepare import prepare


def _down_closed(n: int, src: list[int], dst: list[int]) -> set[int]:
    out = set()
    for bits in itertools.product((0, 1), repeat=n):
        mask = sum(b << i for i, b in enumerate(bits))
        if all(not (mask >> b) & 1 or (mask >> a) & 1 for a, b in zip(src, dst)):
            out.add(mask)
    return out


@settings(max_examples=examples(60), deadline=None)
@given(small_workloads(max_nodes=8))
def test_lattice_is_every_ideal_once_with_its_covers_and_sums(w):
    p = prepare(w, merge_trivial=False)
    lat = enumerate_ideals(p, 1 << 20)
    assert len(set(lat.masks)) == lat.n_ideals
    assert set(lat.masks) == _down_closed(p.n_units, p.edge_src.tolist(), p.edge_dst.tolist())
    assert lat.masks[0] == 0 and lat.masks[lat.full] == (1 << p.n_units) - 1
    index = {m: i for i, m in enumerate(lat.masks)}
    for i, mask in enumerate(lat.masks):
        units = [u for u in range(p.n_units) if mask >> u & 1]
        assert lat.acc_sum[i] == pytest.approx(p.acc_time[units].sum())
        assert lat.size_sum[i] == pytest.approx(p.size[units].sum())
        lo, hi = lat.down_ptr[i], lat.down_ptr[i + 1]
        covers = {(int(lat.down_ideal[j]), int(lat.down_unit[j])) for j in range(lo, hi)}
        # J = I - {x} for every x in I whose removal leaves an ideal
        expect = {(index[mask & ~(1 << x)], x) for x in units if mask & ~(1 << x) in index}
        assert covers == expect


def test_budget_is_enforced():
    from dnnplace import workload_from_records

    w = workload_from_records([{"id": i, "fpgaLatency": 1.0, "cpuLatency": 1.0} for i in range(12)], [],
                              accelerators=2, cpus=0)
    with pytest.raises(TooManyIdealsError):
        enumerate_ideals(prepare(w, merge_trivial=False), 100)
    assert enumerate_ideals(prepare(w, merge_trivial=False), 5000).n_ideals == 2 ** 12
    assert np.all(np.diff(enumerate_ideals(prepare(w, merge_trivial=False), 5000).down_ptr) >= 0)


@settings(max_examples=examples(60), deadline=None)
@given(small_workloads(max_nodes=12))
def test_surely_more_ideals_never_refuses_a_lattice_that_fits(w):
    """The greedy-antichain test only says "too many" when the enumeration would indeed pass the budget."""
    from dnnplace.models.paper.solvers.dp.relax import surely_more_ideals

    p = prepare(w, merge_trivial=False)
    count = enumerate_ideals(p, 1 << 20).n_ideals
    for budget in range(1, count + 2):
        if surely_more_ideals(p, budget):
            assert count > budget, (count, budget)
    assert not surely_more_ideals(p, count)
