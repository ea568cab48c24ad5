"""Export a split for other runtimes.

``stages``: per stage (devices in pipeline order) the fx node names and the
module paths they belong to.  ``torch-pipelining``: the split points in the
form ``torch.distributed.pipelining.pipeline(..., split_spec=...)`` takes --
``{module path: "BEGINNING"}`` for the first module of every stage after the
first.  A stage that does not start at a module boundary is flagged, since
pipelining can only cut there.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from dnnplace.errors import DnnplaceError
from dnnplace.evaluate import evaluate
from dnnplace.model.split import Split
from dnnplace.model.workload import Workload


def _stages(w: Workload, split: Split) -> list[tuple[str, list[int]]]:
    extra = w.extras.get("node_extra", ())
    if not extra or not any("fxNodes" in e for e in extra):
        raise DnnplaceError("the workload was not made by `dnnplace profile` (its nodes lack fxNodes)")
    ev = evaluate(w, split)
    dev = ev.assignment.device
    if (dev < 0).any():
        raise DnnplaceError("the split does not place every node of the workload")
    names = [d.name for d in ev.devices]
    g = nx.DiGraph()
    g.add_nodes_from(range(len(names)))
    fwd = ~w.backward
    for u, v in zip(w.edge_src.tolist(), w.edge_dst.tolist()):
        if fwd[u] and fwd[v] and dev[u] != dev[v]:
            g.add_edge(int(dev[u]), int(dev[v]))
    try:
        order = list(nx.topological_sort(g))
    except nx.NetworkXUnfeasible:
        raise DnnplaceError("the split's devices depend on each other in a cycle") from None
    out = []
    for d in order:
        members = [i for i in np.flatnonzero(dev == d).tolist() if fwd[i]]
        if members:
            out.append((names[d], sorted(members, key=lambda i: int(w.node_ids[i]))))
    return out


def export_stages(w: Workload, split: Split) -> dict:
    extra = w.extras["node_extra"]
    return {"stages": [
        {"device": name, "nodeIds": [int(w.node_ids[i]) for i in members],
         "fxNodes": [f for i in members for f in extra[i].get("fxNodes", [])],
         "modules": sorted({extra[i].get("module", "") for i in members} - {""})}
        for name, members in _stages(w, split)
    ]}


def export_pipelining(w: Workload, split: Split) -> dict:
    extra = w.extras["node_extra"]
    stages = _stages(w, split)
    spec: dict[str, str] = {}
    notes = []
    for k, (name, members) in enumerate(stages[1:], start=1):
        first = min(members, key=lambda i: int(w.node_ids[i]))
        module = extra[first].get("module", "")
        if not module:
            notes.append(f"stage {k} ({name}) starts at operator {extra[first]['fxNodes'][0]}, outside any submodule")
            continue
        previous = {extra[i].get("module", "") for _, ms in stages[:k] for i in ms}
        if module in previous:
            notes.append(f"stage {k} ({name}) starts inside module '{module}'; pipelining can only cut at its start")
        spec[module] = "BEGINNING"
    return {"split_spec": spec, "num_stages": len(stages), "notes": notes,
            "usage": "torch.distributed.pipelining.pipeline(model, mb_args, split_spec={k: SplitPoint.BEGINNING})"}
