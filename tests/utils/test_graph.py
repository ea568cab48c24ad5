"""The shared graph helpers: topological order, colour classes, the device DAG."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

from dnnplace.errors import DnnplaceError
from dnnplace.utils.graph import class_index, order_devices, stage_depths, topological_order


@settings(max_examples=examples(60), deadline=None)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.just(n), st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30))))
def test_topological_order_matches_networkx(case):
    n, pairs = case
    succ = [[b for a, b in pairs if a == v] for v in range(n)]
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(pairs)
    order = topological_order(n, succ).tolist()
    if nx.is_directed_acyclic_graph(g):
        assert sorted(order) == list(range(n))
        pos = {v: i for i, v in enumerate(order)}
        assert all(pos[a] < pos[b] for a, b in pairs)
    else:
        assert len(order) < n
        left = set(range(n)) - set(order)  # every node on or after a cycle is left out
        assert any(len(c) > 1 or (c[0], c[0]) in pairs for c in nx.simple_cycles(g.subgraph(left)))


def test_class_index_is_dense_and_ordered():
    idx, count = class_index(np.array([5, 5, -2, 9, -2]))
    assert idx.tolist() == [1, 1, 0, 2, 0] and count == 3


def test_device_order_and_depths():
    assert order_devices(4, [(3, 1), (1, 0), (3, 0), (2, 2)]) == [2, 3, 1, 0]
    assert stage_depths(4, [(3, 1), (1, 0), (3, 0)]).tolist() == [2, 1, 0, 0]
    with pytest.raises(DnnplaceError, match="cycle"):
        order_devices(2, [(0, 1), (1, 0)])


def test_topological_order_of_edges_is_topological_order():
    """The edge-array form (and its compiled loop for large graphs) orders as the list form does."""
    import numpy as np

    from dnnplace.utils._graph_kernels import kahn_stack
    from dnnplace.utils.graph import distinct_edges, topological_order, topological_order_of_edges

    rng = np.random.default_rng(0)
    for t in range(200):
        n = int(rng.integers(1, 30))
        s, d = rng.integers(0, n, 3 * n), rng.integers(0, n, 3 * n)
        if t % 2:  # acyclic half the time
            s, d = np.minimum(s, d), np.maximum(s, d)
            s, d = s[s != d], d[s != d]
        expected = topological_order(n, [sorted(set(d[s == v].tolist())) for v in range(n)]).tolist()
        assert topological_order_of_edges(n, s, d).tolist() == expected
        assert kahn_stack(n, *distinct_edges(n, s, d)).tolist() == expected
