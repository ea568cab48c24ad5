"""Profile a captured model into a paper-format workload (times in ms, sizes in bytes).

Per workload node: FLOPs (``torch.utils.flop_counter``), output activation
bytes and parameter bytes, and its times.  ``--device host``/``cuda`` measure
them: forward time on this machine's CPU (one intra-op thread, warm-up, median
of repeats) and, for ``--training``, the backward time of the same operators
(measured in isolation with ``torch.autograd.grad``; none for operators whose
outputs carry no gradient, :func:`grad_nodes`).  A catalogue device
executes nothing: the values are fake tensors (:func:`fake_values`), so a
model built on the meta device costs exactly what it costs built on the CPU.

Accelerator times (``fpgaLatency``):
* ``host`` -- each worker process on this machine is an accelerator: the
  measured CPU time; links are measured by a gloo ping-pong between two
  processes, and every transfer pays the per-message latency plus bytes /
  bandwidth;
* ``cuda`` -- measured on the local GPU;
* a catalogue name (``a100``, ``h100``, ...) -- a roofline estimate from FLOPs
  and bytes moved; ``cpuLatency`` is then the roofline of the catalogue's
  ``cpu`` entry (one core).

Memory of a node (``size``): parameter and buffer bytes for inference; for
training, parameters x 4 (weights, gradients, two Adam moments) plus the
output activation stashed for the backward pass.  Training graphs get one
backward node per forward node, in its colour class, with the gradient edges
mirrored -- the shape of the paper's training graphs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.frontends.torch_model.capture import Captured
from dnnplace.frontends.torch_model.devices import CPU_CORE, load_catalogue, roofline_ms
from dnnplace.frontends.torch_model.shared import parameter_use
from dnnplace.frontends.torch_model.timing import _host_memory, _neighbours, loss_ms, measure, ping_pong
from dnnplace.frontends.torch_model.values import (  # noqa: F401  (the runtime and tests import these from here)
    NoDataError,
    _flop_counter,
    _metadata_only,
    _nbytes,
    _run_node,
    estimate_values,
    fake_values,
    forward_values,
    grad_nodes,
    has_no_data,
    hoisted_groups,
)


def build_workload_dict(cap: Captured, inputs: tuple, *, training: bool, device: str, accelerators: int,
                        cpus: int, devices_file: str | None = None, spec: str = "", repeats: int = 7,
                        link: tuple[float, float] | None = None, loss: tuple[Callable, Any] | None = None,
                        data: bool = True) -> dict:
    """Profile and assemble the paper-format JSON object (plus a ``dnnplace`` metadata block).

    ``data=False``: the model's values mean nothing (built on meta, then given uninitialised storage,
    :func:`~dnnplace.frontends.torch_model.loader.load_factory`): nothing may run on them.
    ``loss`` (training on the host): the loss function and the output's pytree spec (None: it takes the
    flattened outputs); its time is added to the last operator group, whose stage computes it."""
    import torch

    torch.set_num_threads(1)
    catalogue = load_catalogue(devices_file)
    executed = device in ("host", "cuda")
    if not executed and (device not in catalogue or device == CPU_CORE):
        accelerators_known = ", ".join(sorted(set(catalogue) - {CPU_CORE}))
        raise DnnplaceError(f"unknown device '{device}'; choose host, cuda or one of: {accelerators_known}")
    if device == "cuda" and not torch.cuda.is_available():
        raise DnnplaceError("--device cuda: no GPU is available here; use host or a catalogue device")
    inputs = cap.inputs or inputs
    if executed and (not data or has_no_data(cap, inputs)):
        raise DnnplaceError(f"--device {device} runs the model to time it, but it is on the meta device (no data);"
                            " profile it for a catalogue device (--device a100, ...) or build it with real weights")
    host = acc = None
    grad = grad_nodes(cap.gm, inputs) if training else None
    timed_loss: tuple[float, float] | None = None
    if executed:
        with _neighbours(inputs, accelerators if device == "host" else 0):
            host = measure(cap, inputs, training=training, repeats=repeats, grad=grad)
            if training and loss is not None and device == "host":
                try:
                    timed_loss = loss_ms(cap, host["env"], loss, repeats)
                except DnnplaceError:  # no loss on these outputs: `run --training` says so itself
                    timed_loss = None
        acc = measure(cap, inputs, training=training, repeats=repeats, device="cuda", grad=grad) \
            if device == "cuda" else host
        env, flops = host["env"], host["flops"]
    else:
        env, flops = estimate_values(cap, inputs, data)
    n = len(cap.groups)
    param_bytes = _param_bytes(cap, env)
    lat_ms, bw, memory = _device_model(device, catalogue, link)

    metadata = [all(_metadata_only(node, env) for node in members) for members in cap.groups]
    const, views = hoisted_groups(cap, env, metadata, replicate_views=not executed)
    kept = [g for g in range(n) if g not in const and g not in views]
    new_id = {g: i for i, g in enumerate(kept)}
    m = len(kept)
    if host is not None and timed_loss is not None and kept:  # the last stage computes the loss
        host["fwd_ms"][kept[-1]] += timed_loss[0]
        host["bwd_ms"][kept[-1]] += timed_loss[1]

    def consumers(node, seen: set) -> set[int]:
        """Kept groups reading ``node``'s value, through replicated views (which every consumer recomputes)."""
        out: set[int] = set()
        for user in node.users:
            h = cap.group_of.get(user.name)
            if h is None or user.name in seen:
                continue
            if h in views:
                seen.add(user.name)
                out |= consumers(user, seen)
            else:
                out.add(h)
        return out

    # parameters several workload nodes read (tied weights, a module called twice): groups held once per device
    shared = parameter_use(cap, kept, {g: set().union(*(consumers(x, set()) for x in cap.groups[g])) for g in views})
    out_bytes = [0] * n
    edges: set[tuple[int, int]] = set()
    const_bytes = [0] * n  # constants a group reads: each device holding a reader keeps a copy
    for g in kept:
        for node in cap.groups[g]:
            targets = consumers(node, set()) - {g}
            edges.update((g, h) for h in targets)
            if targets:
                out_bytes[g] += _nbytes(env[node.name])
            for inp in dict.fromkeys(node.all_input_nodes):
                if cap.group_of.get(inp.name) in const:
                    const_bytes[g] += _nbytes(env[inp.name])

    def estimate_ms(g: int, backward: bool, figures: dict[str, float]) -> float:
        """Roofline time of group ``g`` on a device with these figures; nothing is executed."""
        if metadata[g]:
            return 0.0  # a view launches no kernel and moves no bytes (its gradient is a view too)
        if backward and grad is not None and not any(x.name in grad for x in cap.groups[g]):
            return 0.0  # nothing to differentiate (integer routing, masks from token ids): no backward kernel
        inp = sum(_nbytes(env[i.name]) for node in cap.groups[g] for i in node.all_input_nodes)
        moved = inp + out_bytes[g] + param_bytes[g]
        factor = 2.0 if backward else 1.0  # backward does about twice the forward's work
        return roofline_ms(factor * flops[g], factor * moved, figures)

    def acc_ms(g: int, backward: bool) -> float:
        if acc is not None:
            return (acc["bwd_ms"] if backward else acc["fwd_ms"])[g]
        return estimate_ms(g, backward, catalogue[device])

    def cpu_ms(g: int, backward: bool) -> float:
        if host is not None:
            return (host["bwd_ms"] if backward else host["fwd_ms"])[g]
        return estimate_ms(g, backward, catalogue[CPU_CORE])

    def cost(nbytes: int) -> float:
        return lat_ms + 1e3 * nbytes / bw if nbytes else 0.0

    modules = sorted(set(cap.module_of[g] for g in kept))
    layer = {mod: i for i, mod in enumerate(modules)}
    nodes = []
    for g in kept:
        members = cap.groups[g]
        stash = out_bytes[g] if training and not metadata[g] else 0  # a view keeps its input's storage alive
        size = shared.own[g] * (4 if training else 1) + stash + const_bytes[g]
        nodes.append({
            "id": new_id[g], "name": members[0].name, "fpgaLatency": acc_ms(g, False),
            "cpuLatency": cpu_ms(g, False), "supportedOnFpga": 1, "isBackwardNode": 0, "colorClass": new_id[g],
            "size": float(size), "layerId": layer[cap.module_of[g]], "fxNodes": [x.name for x in members],
            "module": cap.module_of[g], "flops": flops[g], "outputBytes": out_bytes[g],
            "paramBytes": param_bytes[g], "constantBytes": const_bytes[g], "metadataOnly": metadata[g],
        })
    edge_list: list[dict[str, Any]] = [{"sourceId": new_id[a], "destId": new_id[b], "cost": cost(out_bytes[a])}
                                       for a, b in sorted(edges)]
    if training:
        for g in kept:
            nodes.append({"id": m + new_id[g], "name": f"{cap.groups[g][0].name}_grad",
                          "fpgaLatency": acc_ms(g, True), "cpuLatency": cpu_ms(g, True), "supportedOnFpga": 1,
                          "isBackwardNode": 1, "colorClass": new_id[g], "size": 0.0,
                          "layerId": layer[cap.module_of[g]]})
        for a, b in sorted(edges):
            # the gradient of a's output flows from b's backward to a's backward
            edge_list.append({"sourceId": m + new_id[b], "destId": m + new_id[a], "cost": cost(out_bytes[a])})
        for g in kept:
            edge_list.append({"sourceId": new_id[g], "destId": m + new_id[g], "cost": cost(out_bytes[g])})
    _one_cost_per_source(edge_list)
    return {
        "maxSizePerFPGA": memory, "maxFPGAs": accelerators, "maxCPUs": cpus, "nodes": nodes, "edges": edge_list,
        **shared.to_json(new_id, 4 if training else 1),
        "dnnplace": {"model": spec, "granularity": cap.granularity, "trace": cap.method, "device": device,
                     "training": training, "timeUnit": "ms", "linkLatencyMs": lat_ms, "linkBandwidth": bw,
                     "threads": 1,
                     **({"lossMs": list(timed_loss)} if timed_loss is not None else {}),
                     "constants": sorted(x.name for g in const for x in cap.groups[g]),
                     "replicatedViews": sorted(x.name for g in views for x in cap.groups[g])},
    }


def _param_bytes(cap: Captured, env: dict) -> list[int]:
    """Bytes of the parameters and buffers each group reads (each charged to its first reader)."""
    charged: set[str] = set()
    out = [0] * len(cap.groups)
    for g, members in enumerate(cap.groups):
        for node in members:
            for inp in node.all_input_nodes:
                if inp.op == "get_attr" and inp.name not in charged:
                    charged.add(inp.name)
                    out[g] += _nbytes(env[inp.name])
        if cap.method == "symbolic_trace":
            for node in members:
                if node.op == "call_module":
                    state = cap.gm.get_submodule(node.target).state_dict()
                    out[g] += int(sum(_nbytes(p) for p in state.values()))
    return out


def _device_model(device: str, catalogue: dict, link: tuple[float, float] | None) -> tuple[float, float, float]:
    """(link latency ms, link bandwidth B/s, accelerator memory bytes) of the device the workload is for."""
    import torch

    if device == "host":
        lat_ms, bw = link if link is not None else ping_pong()
        return lat_ms, bw, float(_host_memory())
    if device == "cuda":
        return 0.01, 25e9, float(torch.cuda.get_device_properties(0).total_memory)
    d = catalogue[device]
    return d["link_latency_ms"], d["link_bw"], d["memory"]


def _one_cost_per_source(edge_list: list[dict[str, Any]]) -> None:
    """A producer pays for all its outputs, whichever consumer they go to: every out-edge gets the largest cost."""
    per_source: dict[int, float] = {}
    for e in edge_list:
        per_source[e["sourceId"]] = max(per_source.get(e["sourceId"], 0.0), e["cost"])
    for e in edge_list:
        e["cost"] = per_source[e["sourceId"]]
