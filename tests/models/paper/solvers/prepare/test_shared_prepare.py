"""Preparation carries shared parameter groups through every merge (SPEC "Shared parameters")."""

from __future__ import annotations

import numpy as np

from dnnplace.models.paper.paper_json import workload_from_records
from dnnplace.models.paper.solvers.dp.relax import inert_units, relax
from dnnplace.models.paper.solvers.prepare import merge_free_units, prepare


def _chain(shared, colours=None, times=None, memory=100.0):
    times = times or [1.0, 0.0, 1.0, 1.0]
    nodes = [{"id": i, "fpgaLatency": t, "cpuLatency": t, "size": 0.0 if t == 0 else 1.0,
              "colorClass": (colours or {}).get(i, i)} for i, t in enumerate(times)]
    edges = [(i, i + 1, 0.0) for i in range(len(times) - 1)]  # free transfers: every free unit could fold
    return workload_from_records(nodes, edges, accelerators=2, cpus=0, memory=memory, shared=shared)


def _groups_of_units(p):
    return [sorted(p.shared.group[p.shared.ptr[u]: p.shared.ptr[u + 1]].tolist()) for u in range(p.n_units)]


def test_a_unit_uses_the_groups_of_all_its_nodes_once():
    w = _chain([{"name": "a", "size": 5.0, "nodes": [0, 3]}, {"name": "b", "size": 2.0, "nodes": [2, 3]}],
               colours={3: 2})
    p = prepare(w)
    unit = p.unit_of
    assert unit[2] == unit[3]
    assert _groups_of_units(p)[unit[2]] == [0, 1] and _groups_of_units(p)[unit[0]] == [0]
    assert p.shared.unit_bytes()[unit[2]] == 7.0


def test_a_free_node_using_a_group_is_not_folded_away_where_memory_binds():
    plain = merge_free_units(prepare(_chain(None, memory=7.0)))
    using = merge_free_units(prepare(_chain([{"name": "a", "size": 5.0, "nodes": [1]}], memory=7.0)))
    assert plain.n_units == 3  # the free node 1 joins a neighbour
    assert using.n_units == 4  # it holds a group's bytes: moving it could change a device's memory
    assert not inert_units(using)[using.unit_of[1]]


def test_a_free_node_using_a_group_folds_where_memory_cannot_bind():
    # 3 bytes of nodes + 5 of the group fit one accelerator: no memory limit can change any split's value
    using = merge_free_units(prepare(_chain([{"name": "a", "size": 5.0, "nodes": [1]}])))
    assert using.n_units == 3


def test_relaxation_keeps_the_groups_of_the_kept_units():
    w = _chain([{"name": "a", "size": 5.0, "nodes": [0, 3]}])
    p = prepare(w)
    drop = np.zeros(p.n_units, dtype=bool)
    drop[p.unit_of[0]] = True  # node 0 left out: its use of the group is forgotten, node 3's kept
    rel = relax(p, drop)
    kept_groups = _groups_of_units(rel.prepared)
    assert kept_groups[rel.prepared.unit_of[3]] == [0] and sum(map(len, kept_groups)) == 1
