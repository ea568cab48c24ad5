"""The relaxation that passes inputs on and anchors left-out compute, against brute force.

Leaving units out with :func:`relax` (``pass_on``) and charging a piece the
compute of the left-out units it must hold (:func:`anchors`) has to stay a
*lower bound*: its DP optimum, and every cap the fluid test certifies, never
exceed the brute-force optimum of the whole graph -- whatever units are left
out.  The instances add Mamba's shape in miniature to small random graphs: a
scan chain whose every step is read out (``y_t = h_t @ C_t``) into one join.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import brute_force_contiguous_optimum
from strategies import examples, small_workloads

from dnnplace.models.paper.paper_json import workload_from_records
from dnnplace.models.paper.solvers.dp.exact import run_dp
from dnnplace.models.paper.solvers.dp.fluid import fluid_certifies
from dnnplace.models.paper.solvers.dp.ideals import enumerate_ideals
from dnnplace.models.paper.solvers.dp.relax import anchors, gathering_units, passed_inputs, receivers, relax
from dnnplace.models.paper.solvers.prepare import merge_free_units, prepare

SETTINGS = settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def scans(draw, training: bool):
    """``x -> C``; a chain ``h_0 .. h_m`` fed by ``x``; read-outs ``y_t(h_t, C)``; a join of all ``y_t``."""
    steps = draw(st.integers(1, 3))
    times = st.floats(0.0, 4.0, allow_nan=False).map(lambda v: round(v, 2))
    costs = st.floats(0.0, 3.0, allow_nan=False).map(lambda v: round(v, 2))
    nodes: list[dict] = []
    edges: list[tuple[int, int]] = []

    def add() -> int:
        i = len(nodes)
        acc = draw(times)
        nodes.append({"id": i, "fpgaLatency": acc, "cpuLatency": round(acc * 2, 2), "supportedOnFpga": True,
                      "size": 0.0, "isBackwardNode": False, "colorClass": i})
        return i

    x = add()
    c = add()
    edges.append((x, c))
    prev = x
    reads = []
    for _ in range(steps):
        h = add()
        edges.append((prev, h))
        y = add()
        edges += [(h, y), (c, y)]
        reads.append(y)
        prev = h
    join = add()
    edges += [(y, join) for y in reads]
    if draw(st.booleans()):
        edges.append((prev, join))
    n = len(nodes)
    cost = {i: draw(costs) for i in range(n)}
    edge_list = [(a, b, cost[a]) for a, b in edges]
    if training:
        for i in range(n):
            bt = draw(times)
            nodes.append({"id": n + i, "fpgaLatency": bt, "cpuLatency": round(bt * 2, 2), "supportedOnFpga": True,
                          "size": 0.0, "isBackwardNode": True, "colorClass": i})
        bcost = {b: max(cost[a] for a, bb in edges if bb == b) for _, b in edges}
        edge_list += [(n + b, n + a, bcost[b]) for a, b in edges]
    k = draw(st.integers(1, 3))
    return workload_from_records(nodes, edge_list, accelerators=k, cpus=draw(st.integers(0, 1)), memory=1e9)


@st.composite
def sliced_scans(draw):
    """``x -> D``; steps ``h_t(h_{t-1}, s_t)`` each reading its own slice ``s_t`` of ``D`` (free, or nearly);
    read-outs ``y_t(h_t)`` or none; a join.  Left out, the slices make ``D`` a sliced source (contract.CommSources):
    a device with ``m`` steps pays ``min(c_D, m * c_s)``, never more than the whole graph would."""
    steps = draw(st.integers(2, 3))
    times = st.floats(0.0, 3.0, allow_nan=False).map(lambda v: round(v, 2))
    costs = st.floats(0.0, 2.0, allow_nan=False).map(lambda v: round(v, 2))
    nodes: list[dict] = []
    edges: list[tuple[int, int]] = []

    def add(t: float) -> int:
        nodes.append({"id": len(nodes), "fpgaLatency": t, "cpuLatency": t, "supportedOnFpga": True, "size": 0.0,
                      "isBackwardNode": False, "colorClass": len(nodes)})
        return len(nodes) - 1

    x = add(draw(times))
    d = add(draw(times))
    edges.append((x, d))
    prev, ends, slices = x, [], []
    for _ in range(steps):
        s = add(draw(st.sampled_from([0.0, 0.0, 0.01])))
        slices.append(s)
        h = add(draw(times))
        edges += [(d, s), (s, h), (prev, h)]
        if draw(st.booleans()):
            y = add(draw(times))
            edges.append((h, y))
            ends.append(y)
        prev = h
    join = add(draw(times))
    edges += [(e, join) for e in ends] + [(prev, join)]
    cost = {i: draw(costs) for i in range(len(nodes))}
    for s in slices:  # a slice costs most of the tensor (a latency-bound transfer), so it passes the tensor on
        cost[s] = round(cost[d] * draw(st.sampled_from([0.75, 0.9, 1.0])), 3)
    return workload_from_records(nodes, [(a, b, cost[a]) for a, b in edges], accelerators=draw(st.integers(2, 3)),
                                 cpus=0, memory=1e9)


def _graphs():
    return st.one_of(scans(training=False), scans(training=True), sliced_scans(),
                     small_workloads(max_nodes=7, max_acc=3, max_cpu=1))


def _check(w, data) -> None:
    expected = brute_force_contiguous_optimum(w)
    if not np.isfinite(expected):
        return
    p = merge_free_units(prepare(w))
    drop = np.array(data.draw(st.lists(st.booleans(), min_size=p.n_units, max_size=p.n_units)), dtype=bool)
    if drop.all():
        drop[0] = False
    rel = relax(p, drop, pass_on=True, receive=data.draw(st.booleans()))
    lattice = enumerate_ideals(rel.prepared, 10_000)
    anchored = anchors(p, rel)
    relaxed = run_dp(rel.prepared, lattice, w, anchored=anchored).value
    assert relaxed <= expected + 1e-9, (relaxed, expected)
    # the fluid test never certifies a cap the optimum meets
    assert not fluid_certifies(rel, lattice, expected * (1 + 1e-9) + 1e-12, False, None, anchored)


@SETTINGS
@given(data=st.data())
def test_anchored_relaxation_is_a_lower_bound(data):
    _check(data.draw(_graphs()), data)


@SETTINGS
@given(data=st.data())
def test_passed_inputs_choose_a_predecessor(data):
    """Every left-out node passes on one of its own inputs, or none."""
    w = data.draw(_graphs())
    p = merge_free_units(prepare(w))
    drop = np.array(data.draw(st.lists(st.booleans(), min_size=p.n_units, max_size=p.n_units)), dtype=bool)
    via = passed_inputs(p, drop)
    for x in range(w.n):
        if via[x] >= 0:
            assert drop[p.unit_of[x]]
            assert via[x] in w.predecessors[x].tolist()


def test_anchors_charge_a_scan_read_out_to_the_piece_that_holds_its_ends():
    """A read-out left out between a step and the join is charged where both are: the relaxed optimum of a
    one-device budget is the whole graph's compute, not the compute without it."""
    nodes = [{"id": i, "fpgaLatency": t, "cpuLatency": t, "size": 0.0, "colorClass": i}
             for i, t in enumerate([1.0, 1.0, 5.0, 1.0])]  # x, h, y (the read-out), join
    w = workload_from_records(nodes, [(0, 1, 0.1), (1, 2, 0.1), (0, 2, 0.1), (2, 3, 0.1)], accelerators=1, cpus=0,
                              memory=1e9)
    p = merge_free_units(prepare(w))
    y = int(p.unit_of[2])
    drop = np.zeros(p.n_units, dtype=bool)
    drop[y] = True
    rel = relax(p, drop, pass_on=True)
    lattice = enumerate_ideals(rel.prepared, 100)
    assert run_dp(rel.prepared, lattice, w).value == 3.0
    assert run_dp(rel.prepared, lattice, w, anchored=anchors(p, rel)).value == 8.0


def _relaxed_optimum(nodes, edges, k, left_out, anchored=True):
    w = workload_from_records(nodes, edges, accelerators=k, cpus=0, memory=1e9)
    p = merge_free_units(prepare(w))
    drop = np.zeros(p.n_units, dtype=bool)
    drop[[int(p.unit_of[i]) for i in left_out]] = True
    rel = relax(p, drop, pass_on=True)
    lattice = enumerate_ideals(rel.prepared, 100)
    value = run_dp(rel.prepared, lattice, w, anchored=anchors(p, rel) if anchored else None).value
    return value, brute_force_contiguous_optimum(w)


def test_a_read_out_is_charged_only_where_both_its_ends_are():
    """x -> h -> y -> join, y left out: on two devices the optimum puts y with the join (6); a piece holding
    only h (or only the join) must not be charged y's compute."""
    nodes = [{"id": i, "fpgaLatency": t, "cpuLatency": t, "size": 0.0, "colorClass": i}
             for i, t in enumerate([1.0, 1.0, 5.0, 1.0])]
    value, expected = _relaxed_optimum(nodes, [(0, 1, 0.0), (1, 2, 0.0), (2, 3, 0.0)], 2, [2])
    assert expected == 6.0
    assert value <= expected


def test_an_input_passed_on_costs_the_cheaper_of_the_two_transfers():
    """q (sends 0.12) -> x (sends 0.1) -> t, x left out: the optimum sends x's 0.1, so the relaxed transfer from q
    to t may cost no more than 0.1."""
    nodes = [{"id": i, "fpgaLatency": t, "cpuLatency": t, "size": 0.0, "colorClass": i}
             for i, t in enumerate([1.0, 0.01, 1.0])]
    value, expected = _relaxed_optimum(nodes, [(0, 1, 0.12), (1, 2, 0.1)], 2, [1])
    assert abs(expected - 1.11) < 1e-9
    assert value <= expected + 1e-9


def _one_left_out(nodes, edges, k, left_out):
    w = workload_from_records(nodes, edges, accelerators=k, cpus=0, memory=1e9)
    p = merge_free_units(prepare(w))
    drop = np.zeros(p.n_units, dtype=bool)
    drop[[int(p.unit_of[i]) for i in left_out]] = True
    rel = relax(p, drop, pass_on=True)
    return w, p, rel, enumerate_ideals(rel.prepared, 100)


def test_the_fluid_test_keeps_left_out_work_between_the_pieces_of_its_ends():
    """a (2) -> y (1.5) -> b (2) -> c (0.1) on three devices, y left out: the optimum is 2.1 ({a}, {y}, {b, c}).
    Spread anywhere, y's work would fit beside c and no cap above the largest unit (2) be certain; kept between
    a's piece and b's it fits neither, so every cap below 2.1 is certified."""
    nodes = [{"id": i, "fpgaLatency": t, "cpuLatency": t, "size": 0.0, "colorClass": i}
             for i, t in enumerate([2.0, 1.5, 2.0, 0.1])]
    w, p, rel, lattice = _one_left_out(nodes, [(0, 1, 0.0), (1, 2, 0.0), (2, 3, 0.0)], 3, [1])
    assert brute_force_contiguous_optimum(w) == 2.1
    anchored = anchors(p, rel)
    assert fluid_certifies(rel, lattice, 2.09, False, None, anchored)
    assert not fluid_certifies(rel, lattice, 2.1 + 1e-9, False, None, anchored)
    assert not fluid_certifies(rel, lattice, 2.05, False, None, None)  # y spread anywhere: it fits beside c


def test_the_fluid_test_lets_left_out_work_fill_an_accelerator_of_its_own():
    """The left-out unit after the last kept one (or before the first) may run alone on a device."""
    nodes = [{"id": i, "fpgaLatency": 1.0, "cpuLatency": 1.0, "size": 0.0, "colorClass": i} for i in range(2)]
    for left_out in ([0], [1]):
        w, p, rel, lattice = _one_left_out(nodes, [(0, 1, 0.0)], 2, left_out)
        assert not fluid_certifies(rel, lattice, 1.0 + 1e-9, False, None, anchors(p, rel))
        assert fluid_certifies(rel, lattice, 0.99, False, None, anchors(p, rel))


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=sliced_scans(), data=st.data())
def test_a_tensor_read_through_slices_left_out_is_charged_a_lower_bound(w, data):
    """The slices of ``D`` left out (and perhaps ``D`` and read-outs with them): ``D`` becomes a sliced source, and
    the relaxed optimum and the fluid test stay at or below the brute-force optimum."""
    expected = brute_force_contiguous_optimum(w)
    p = merge_free_units(prepare(w))
    slices = [x for x in range(w.n) if w.predecessors[x].tolist() == [1]]
    drop = np.zeros(p.n_units, dtype=bool)
    drop[p.unit_of[slices]] = True
    if data.draw(st.booleans()):
        drop[p.unit_of[1]] = True
    extra = data.draw(st.lists(st.booleans(), min_size=p.n_units, max_size=p.n_units))
    drop |= np.array(extra) & np.array(data.draw(st.lists(st.booleans(), min_size=p.n_units, max_size=p.n_units)))
    if drop.all():
        drop[p.unit_of[0]] = False
    rel = relax(p, drop, pass_on=True, receive=data.draw(st.booleans()))
    lattice = enumerate_ideals(rel.prepared, 10_000)
    anchored = anchors(p, rel)
    assert run_dp(rel.prepared, lattice, w, anchored=anchored).value <= expected + 1e-9
    assert not fluid_certifies(rel, lattice, expected * (1 + 1e-9) + 1e-12, False, None, anchored)


def _three_slices(times: list[float], slice_cost: float):
    """x -> D (sends 1.0) -> three slices ``s_t`` (each sending ``slice_cost``) -> steps ``h_t`` -> join, the slices
    left out: the workload, its units and the relaxation."""
    pairs = [(0, 1), (1, 2), (2, 3), (0, 3), (1, 4), (4, 5), (3, 5), (1, 6), (6, 7), (5, 7), (7, 8)]
    cost = {0: 0.1, 1: 1.0, 2: slice_cost, 3: 0.1, 4: slice_cost, 5: 0.1, 6: slice_cost, 7: 0.1, 8: 0.0}
    nodes = [{"id": i, "fpgaLatency": t, "cpuLatency": t, "size": 0.0, "colorClass": i} for i, t in enumerate(times)]
    w = workload_from_records(nodes, [(a, b, cost[a]) for a, b in pairs], accelerators=2, cpus=0, memory=1e9)
    p = prepare(w)
    drop = np.zeros(p.n_units, dtype=bool)
    drop[p.unit_of[[2, 4, 6]]] = True
    return w, p, relax(p, drop, pass_on=True)


def test_slices_of_one_tensor_make_it_a_sliced_source():
    """D (costs 1.0 to send) read by three steps through slices costing 0.8: a device holding two of the steps pays
    min(1.0, 2 * 0.8) = 1.0 for D, not the 0.8 of one slice."""
    _, _, rel = _three_slices([1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0], 0.8)
    src = rel.prepared.comm
    sliced = np.flatnonzero(np.isfinite(src.slice_cost))
    assert sliced.size == 1
    s = int(sliced[0])
    assert (src.slice_cost[s], src.trunk_cost[s], src.cost[s]) == (0.8, 1.0, 0.8)


def test_a_sliced_source_costs_the_whole_tensor_at_most():
    """x -> D (heavy, sends 1.0) -> three slices (0.9 each) -> steps: the optimum sends D once (4.2 on two devices);
    with the slices left out, a piece receiving three steps pays min(1.0, 3 * 0.9), not 2.7."""
    w, _, rel = _three_slices([0.1, 3.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0], 0.9)
    expected = brute_force_contiguous_optimum(w)
    assert abs(expected - 4.2) < 1e-9
    relaxed = run_dp(rel.prepared, enumerate_ideals(rel.prepared, 100), w).value
    assert expected - 0.05 <= relaxed <= expected + 1e-9  # the slices' own transfers are all it may forget


def _fan_out(k: int):
    """q -> x1, x2 -> r1, r2 (x_t read by r_t), everything costing 1 to send and 1 to run; x1, x2 left out."""
    nodes = [{"id": i, "fpgaLatency": 1.0, "cpuLatency": 1.0, "size": 0.0, "colorClass": i} for i in range(5)]
    w = workload_from_records(nodes, [(0, 1, 1.0), (0, 2, 1.0), (1, 3, 1.0), (2, 4, 1.0)], accelerators=k, cpus=0,
                              memory=1e9)
    p = prepare(w)
    drop = np.zeros(p.n_units, dtype=bool)
    drop[p.unit_of[[1, 2]]] = True
    return w, p, drop


def test_receivers_charge_a_left_out_unit_to_its_reader_and_stop_its_pass_on():
    """Both x_t pass q on, so q stands for both: each r_t's device holds x_t or receives it, and is charged
    min(t_x, c_x) = 1, while x_t passes nothing on any more (both charges would stand for receiving x_t)."""
    w, p, drop = _fan_out(3)
    via, moved, extra = receivers(p, drop, passed_inputs(p, drop))
    assert via[1] == via[2] == -1
    assert moved[p.unit_of[[1, 2]]].tolist() == [1.0, 1.0]
    assert extra[p.unit_of[[3, 4]]].tolist() == [1.0, 1.0]
    rel = relax(p, drop, pass_on=True, receive=True)
    assert rel.left_out_compute(p)[p.unit_of[[1, 2]]].tolist() == [0.0, 0.0]


def _fluid_bound(w, p, drop, receive: bool) -> float:
    rel = relax(p, drop, pass_on=True, receive=receive)
    lattice = enumerate_ideals(rel.prepared, 1000)
    anchored = anchors(p, rel)
    lo, hi = 0.0, brute_force_contiguous_optimum(w)
    assert not fluid_certifies(rel, lattice, hi * (1 + 1e-9), False, None, anchored)
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if fluid_certifies(rel, lattice, mid, False, None, anchored) else (lo, mid)
    return lo


def test_receivers_keep_the_bound_a_lower_bound_and_may_raise_it():
    """q -> x1..x3 (each 2 to run) -> r1 -> r2 -> r3 (r_t reads x_t), the x_t left out, three devices (optimum 5.1).
    Passing q on, the three x_t stand for one transfer of q; charged to their readers, each r_t pays for its x_t
    (run or received): the fluid bound rises from 4.0 to 4.1.  Neither form bounds better everywhere (on two devices
    it falls), which is why the spine tries both."""
    nodes = [{"id": i, "fpgaLatency": 2.0 if 1 <= i <= 3 else 1.0, "cpuLatency": 1.0, "size": 0.0, "colorClass": i}
             for i in range(7)]
    edges = [(0, i, 1.0) for i in (1, 2, 3)] + [(i, 3 + i, 1.0) for i in (1, 2, 3)] + [(4, 5, 0.1), (5, 6, 0.1)]
    for k, without, with_ in ((3, 4.0, 4.1), (2, 6.0, 5.1)):
        w = workload_from_records(nodes, edges, accelerators=k, cpus=0, memory=1e9)
        p = prepare(w)
        drop = np.zeros(p.n_units, dtype=bool)
        drop[p.unit_of[[1, 2, 3]]] = True
        assert abs(_fluid_bound(w, p, drop, False) - without) < 1e-6
        assert abs(_fluid_bound(w, p, drop, True) - with_) < 1e-6


def test_gathering_units_are_those_reading_many_tensors():
    """A join of eight read-outs gathers; the steps and the read-outs do not."""
    nodes = [{"id": i, "fpgaLatency": 1.0, "cpuLatency": 1.0, "size": 0.0, "colorClass": i} for i in range(10)]
    edges = [(0, i, 0.1) for i in range(1, 9)] + [(i, 9, 0.1) for i in range(1, 9)]
    w = workload_from_records(nodes, edges, accelerators=2, cpus=0, memory=1e9)
    p = prepare(w)
    gather = gathering_units(p)
    assert gather[p.unit_of[9]] and gather.sum() == 1


def test_a_charged_reader_no_longer_receives_the_passed_input():
    """q (0.1) -> x1, x2 (1 each, sending 1) -> r (10), q sending 1, two devices: the optimum (12) keeps x1, x2 with q
    and r receives both outputs.  Charged to r (1 each), the x_t must stop passing q on: r would pay for receiving
    them twice (13 > 12), and the relaxed optimum would pass the optimum (12.1, one device)."""
    nodes = [{"id": i, "fpgaLatency": t, "cpuLatency": t, "size": 0.0, "colorClass": i}
             for i, t in enumerate([0.1, 1.0, 1.0, 10.0])]
    w = workload_from_records(nodes, [(0, 1, 1.0), (0, 2, 1.0), (1, 3, 1.0), (2, 3, 1.0)], accelerators=2, cpus=0,
                              memory=1e9)
    assert abs(brute_force_contiguous_optimum(w) - 12.0) < 1e-9
    p = prepare(w)
    drop = np.zeros(p.n_units, dtype=bool)
    drop[p.unit_of[[1, 2]]] = True
    rel = relax(p, drop, pass_on=True, receive=True)
    lattice = enumerate_ideals(rel.prepared, 100)
    assert run_dp(rel.prepared, lattice, w, anchored=anchors(p, rel)).value <= 12.0 + 1e-9
    assert not fluid_certifies(rel, lattice, 12.0 + 1e-9, False, None, anchors(p, rel))
