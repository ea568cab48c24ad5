"""``dnnplace profile --format piper``: a profiled training workload in Piper's JSON format.

From the paper-format training profile (module granularity recommended) every
forward node becomes one Piper layer with ``t = 1`` only (tensor parallelism is
not measured) and two TMPCs:

* ``vanilla``: ``timePerSample`` = forward + backward seconds, ``memoryUsageA`` =
  the activation bytes kept for the backward pass (the node's output bytes),
  ``memoryUsageB`` = 4 x parameter bytes (weights, gradients, two Adam moments);
* ``activation recomp``: activations are not kept (``memoryUsageA`` = 0) and the
  forward runs again in the backward pass (``timePerSample`` = 2 x forward + backward).

``parameterSize`` = parameter bytes; each edge carries the producer's output bytes
per sample (``communicationCost``); all sync terms are 0 (``t = 1``).  Times are
seconds and ``bandwidth`` bytes/s, so the planner's sums are consistent.
"""

from __future__ import annotations

from typing import Any

from dnnplace.errors import DnnplaceError

DEFAULT_MBS_IN_BATCH = 64


def paper_training_to_piper(doc: dict[str, Any], *, batch: int = DEFAULT_MBS_IN_BATCH) -> dict[str, Any]:
    """Convert :func:`~dnnplace.frontends.torch_model.profile.build_workload_dict`'s training output."""
    meta = doc.get("dnnplace", {})
    fwd = [nd for nd in doc["nodes"] if not nd.get("isBackwardNode")]
    bwd = {nd["colorClass"]: nd for nd in doc["nodes"] if nd.get("isBackwardNode")}
    n = len(fwd)
    if not bwd:
        raise DnnplaceError("--format piper needs the backward pass: profile with training (it is implied)")
    ids = {nd["id"] for nd in fwd}
    edges = sorted({(e["sourceId"], e["destId"]) for e in doc["edges"]
                    if e["sourceId"] in ids and e["destId"] in ids})
    if not edges:
        raise DnnplaceError("--format piper: the model has a single layer at this granularity; Piper needs an edge")
    out_bytes = {nd["id"]: float(nd.get("outputBytes", 0)) for nd in fwd}
    preds: dict[int, list[int]] = {nd["id"]: [] for nd in fwd}
    succs: dict[int, list[int]] = {nd["id"]: [] for nd in fwd}
    for a, b in edges:
        preds[b].append(a)
        succs[a].append(b)
    nodes = []
    for nd in fwd:
        g = nd["id"]
        f_s = float(nd["fpgaLatency"]) / 1e3
        b_s = float(bwd[nd["colorClass"]]["fpgaLatency"]) / 1e3 if nd["colorClass"] in bwd else 0.0
        w = float(nd.get("paramBytes", 0))
        sync_fw = {str(u): 0.0 for u in preds[g]}
        sync_bw = {str(x): 0.0 for x in succs[g]}
        nodes.append({
            "id": g, "name": str(nd.get("module") or nd.get("name", g)),
            "TMPCs": {"1": [
                {"id": "vanilla", "timePerSample": f_s + b_s, "parameterSize": w,
                 "memoryUsageA": out_bytes[g], "memoryUsageB": 4.0 * w,
                 "syncTimeFw": sync_fw, "syncTimeBw": sync_bw},
                {"id": "activation recomp", "timePerSample": 2.0 * f_s + b_s, "parameterSize": w,
                 "memoryUsageA": 0.0, "memoryUsageB": 4.0 * w,
                 "syncTimeFw": dict(sync_fw), "syncTimeBw": dict(sync_bw)},
            ]},
        })
    return {
        "maxDevices": max(1, int(doc.get("maxFPGAs", 1))),
        "maxMemoryPerDevice": float(doc.get("maxSizePerFPGA", 1.0)),
        "bandwidth": float(meta.get("linkBandwidth", 25e9)),
        "mbsInBatch": int(batch),
        "nodes": nodes,
        "edges": [{"sourceId": a, "destId": b, "communicationCost": out_bytes[a]} for a, b in edges],
        "dnnplace": {**meta, "format": "piper", "timeUnit": "s", "layers": n},
    }
