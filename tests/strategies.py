"""Hypothesis strategies for small random placement instances (tests only)."""

from __future__ import annotations

from hypothesis import strategies as st

from dnnplace.models.paper.paper_json import workload_from_records


@st.composite
def small_workloads(draw, max_nodes: int = 7, training: bool | None = None, zero_times: bool = True,
                    max_acc: int = 3, max_cpu: int = 2, shared: bool = False):
    """A random DAG (chains, branches, residual skips), optionally with backward mirror nodes.

    ``shared``: one to three shared parameter groups over random nodes (SPEC "Shared parameters").
    """
    n = draw(st.integers(2, max_nodes))
    shape = draw(st.sampled_from(["random", "chain", "residual"]))
    edges: set[tuple[int, int]] = set()
    if shape == "chain":
        edges = {(i, i + 1) for i in range(n - 1)}
    elif shape == "residual":
        edges = {(i, i + 1) for i in range(n - 1)}
        for i in range(n - 2):
            if draw(st.booleans()):
                edges.add((i, draw(st.integers(i + 2, n - 1))))
    else:
        for j in range(1, n):
            preds = draw(st.sets(st.integers(0, j - 1), max_size=2))
            edges |= {(i, j) for i in preds}
    times = st.floats(0.5, 10.0, allow_nan=False).map(lambda x: round(x, 2))
    is_training = draw(st.booleans()) if training is None else training
    # Zero-cost forward nodes only in inference: there the reference's merge of
    # zero-cost leaves is exact; with backward work attached it is a restriction.
    nodes = []
    for i in range(n):
        zero = zero_times and not is_training and draw(st.integers(0, 5)) == 0
        acc = 0.0 if zero else draw(times)
        cpu = 0.0 if zero else round(acc * draw(st.sampled_from([0.5, 2.0, 5.0, 10.0])), 3)
        nodes.append({
            "id": i, "fpgaLatency": acc, "cpuLatency": cpu,
            "supportedOnFpga": True if zero else draw(st.integers(0, 6)) > 0,
            "size": 0.0 if zero else float(draw(st.integers(1, 4))),
            "isBackwardNode": False,
        })
    # occasionally colocate two forward nodes
    for node in nodes:
        node["colorClass"] = node["id"]
    if n >= 3 and draw(st.booleans()):
        a, b = draw(st.sampled_from([(i, j) for i in range(n) for j in range(i + 1, n)]))
        if nodes[a]["fpgaLatency"] > 0 and nodes[b]["fpgaLatency"] > 0:
            nodes[b]["colorClass"] = nodes[a]["colorClass"]
    cost = {i: round(draw(st.floats(0.0, 3.0)), 2) for i in range(n)}
    edge_list = [(i, j, cost[i]) for i, j in sorted(edges)]
    if is_training:
        for i in range(n):
            f = nodes[i]
            zero = f["fpgaLatency"] == 0
            bt = 0.0 if zero else draw(times)
            nodes.append({
                "id": n + i, "fpgaLatency": bt, "cpuLatency": 0.0 if zero else round(bt * 3, 3),
                "supportedOnFpga": True, "size": 0.0 if zero else float(draw(st.integers(0, 2))),
                "isBackwardNode": True, "colorClass": f["colorClass"],
            })
        bcost = {n + i: round(draw(st.floats(0.0, 3.0)), 2) for i in range(n)}
        for i, j in sorted(edges):
            edge_list.append((n + j, n + i, bcost[n + j]))  # gradient flows backwards
        for i in range(n):
            if draw(st.integers(0, 2)) == 0 and cost[i] > 0:
                edge_list.append((i, n + i, cost[i]))  # stashed activation
    k = draw(st.integers(1, max_acc))
    cpus = draw(st.integers(0, max_cpu))
    total = sum(nd.get("size", 0.0) for nd in nodes)
    groups = None
    if shared:
        ids = [nd["id"] for nd in nodes]
        groups = [{"name": f"g{g}", "size": float(draw(st.integers(1, 6))),
                   "nodes": sorted(draw(st.sets(st.sampled_from(ids), min_size=1, max_size=len(ids))))}
                  for g in range(draw(st.integers(1, 3)))]
        total += sum(g["size"] for g in groups)
        memory = float(draw(st.sampled_from([total, max(4.0, total / 2), 8.0, 12.0, 1e9])))
    else:
        memory = float(draw(st.sampled_from([total, max(4.0, total / 2), 6.0, 1e9])))
    return workload_from_records(nodes, edge_list, accelerators=k, cpus=cpus, memory=memory, shared=groups)


def examples(n: int) -> int:
    """How many examples a property test runs: ``n`` in the full profile (CI, ``make test-all``), else ``n // 4``."""
    import os

    full = os.environ.get("HYPOTHESIS_PROFILE") == "full" or bool(os.environ.get("CI"))
    return n if full else max(10, n // 4)
