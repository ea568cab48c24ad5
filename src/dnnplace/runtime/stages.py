"""Cut a traced model into one fx GraphModule per device of a split.

Each stage graph takes, as placeholders, the values it consumes from other
stages (or the model's inputs) and returns the values that other stages or
the model's output need; it holds only the parameters its operators use.
Values that skip stages travel straight from producer to every consumer, so
the stage graph may be any DAG, not only a chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.frontends.torch_model.capture import Captured
from dnnplace.models.paper.split import Split
from dnnplace.utils.graph import order_devices


@dataclass
class StagePlan:
    """Stages in a topological order, with what flows between them."""

    modules: list  # torch.fx.GraphModule per stage
    devices: list[str]  # device name per stage (acc0, cpu0, ...)
    inputs: list[list[str]]  # value names each stage consumes, in its placeholder order
    outputs: list[list[str]]  # value names each stage returns, in order
    producer: dict[str, int]  # value name -> producing stage (-1: a model input)
    consumers: dict[str, list[int]]  # value name -> consuming stages
    model_inputs: list[str]  # placeholder names of the original graph
    model_outputs: list[str]  # value names of the model's (flattened) output


def assign_groups(cap: Captured, split: Split, workload_ids: list[list[str]] | None = None) -> list[tuple[str, set]]:
    """Per device of the split: (device name, set of fx node names).

    Node ids are workload node ids: with the profiled workload at hand,
    ``workload_ids[id]`` lists the fx nodes of that id; otherwise ids are the
    captured groups in order (operator granularity).  Operators that no
    workload node lists (constants and replicated views, which ``profile``
    leaves out of the workload) are placed by :func:`build_stages`, not here.
    """
    n = len(cap.groups)
    if workload_ids is None:
        workload_ids = [[m.name for m in members] for members in cap.groups]
    known = {name for members in cap.groups for name in (m.name for m in members)}
    devices = [(f"acc{i}", ids) for i, ids in enumerate(split.accelerators)]
    devices += [(f"cpu{i}", ids) for i, ids in enumerate(split.cpus)]
    out = []
    placed: dict[str, str] = {}
    for name, ids in devices:
        members: set[str] = set()
        for nid in ids:
            if nid < 0 or nid >= len(workload_ids):
                raise DnnplaceError(f"the split does not match the model: node id {nid} is not one of its"
                                    f" {len(workload_ids)} workload nodes")
            for fx_name in workload_ids[nid]:
                if fx_name not in known:
                    raise DnnplaceError(f"the split does not match the model: fx node '{fx_name}' (id {nid})"
                                        " is not in the traced graph")
                if fx_name in placed and placed[fx_name] != name:
                    raise DnnplaceError(f"the split places fx node '{fx_name}' on {placed[fx_name]} and {name}")
                placed[fx_name] = name
                members.add(fx_name)
        if members:
            out.append((name, members))
    listed = known if workload_ids is None else {name for ids in workload_ids for name in ids}
    missing = [m.name for members in cap.groups for m in members if m.name not in placed and m.name in listed]
    if missing:
        raise DnnplaceError(f"the split does not match the model: {len(missing)} operator(s) are not placed,"
                            f" e.g. '{missing[0]}' ({n} groups in the model)")
    return out


def build_stages(cap: Captured, split: Split, workload_ids: list[list[str]] | None = None) -> StagePlan:
    """Cut ``cap``'s graph into stage GraphModules ordered by their data dependencies."""
    from torch.fx.node import map_arg

    gm = cap.gm
    assigned = assign_groups(cap, split, workload_ids)
    stage_of: dict[str, int] = {}
    for s, (_, members) in enumerate(assigned):
        for name in members:
            stage_of[name] = s
    hoisted = {m.name for members in cap.groups for m in members} - set(stage_of)
    const_values = _constants(gm, hoisted)
    # a hoisted operator that is not a constant (a view) is recomputed by every stage that reads it
    members_of = [_with_recomputed(gm, set(members), hoisted, const_values) for _, members in assigned]
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    model_outputs: list[str] = []
    map_arg(output_node.args, lambda n: model_outputs.append(n.name))
    nodes = list(gm.graph.nodes)
    # which stages consume each value
    consumers: dict[str, set[int]] = {}
    for s, members in enumerate(members_of):
        for node in nodes:
            if node.name not in members:
                continue
            for inp in node.all_input_nodes:
                if inp.op == "get_attr" or inp.name in members or inp.name in const_values:
                    continue
                consumers.setdefault(inp.name, set()).add(s)
    lost = [v for v in model_outputs if v in hoisted]
    if lost:
        raise DnnplaceError(f"the model output '{lost[0]}' is computed by no stage (the workload does not list it)")
    deps = [(stage_of[v], c) for v, cs in consumers.items() if v in stage_of for c in cs]
    order = order_devices(len(assigned), deps)
    rank = {s: r for r, s in enumerate(order)}
    position = {n.name: i for i, n in enumerate(nodes)}
    modules, inputs, outputs = [], [], []
    for s in order:
        members = members_of[s]
        ins = sorted({inp.name for node in nodes if node.name in members for inp in node.all_input_nodes
                      if inp.op != "get_attr" and inp.name not in members and inp.name not in const_values},
                     key=lambda name: position[name])
        outs = [name for name in (n.name for n in nodes if stage_of.get(n.name) == s)
                if consumers.get(name, set()) - {s} or name in model_outputs]
        modules.append(_stage_module(gm, nodes, members, ins, outs, const_values))
        inputs.append(ins)
        outputs.append(outs)
    producer = {name: rank[stage_of[name]] for name in stage_of}
    for name in placeholders:
        producer[name] = -1
    return StagePlan(
        modules=modules,
        devices=[assigned[s][0] for s in order],
        inputs=inputs,
        outputs=outputs,
        producer=producer,
        consumers={v: sorted(rank[c] for c in cs) for v, cs in consumers.items()},
        model_inputs=placeholders,
        model_outputs=model_outputs,
    )


def _stage_module(gm: Any, nodes: list, members: set[str], ins: list[str], outs: list[str],
                  const_values: dict) -> Any:
    """One stage's GraphModule: placeholders for what it receives, its operators copied in graph order, the
    parameters and constants it reads as attributes, the values it hands on as outputs."""
    import torch

    graph = torch.fx.Graph()
    env: dict[str, Any] = {}
    root: dict[str, object] = {}
    for name in ins:
        env[name] = graph.placeholder(name)
    for node in nodes:
        if node.name not in members:
            continue
        for inp in node.all_input_nodes:
            if inp.op == "get_attr" and inp.name not in env:
                root[str(inp.target)] = _attr(gm, str(inp.target))
                env[inp.name] = graph.get_attr(str(inp.target))
            elif inp.name in const_values and inp.name not in env:
                target = f"_dnnplace_constant_{inp.name}"
                root[target] = const_values[inp.name]
                env[inp.name] = graph.get_attr(target)
        if node.op == "call_module":
            root[str(node.target)] = gm.get_submodule(node.target)
        env[node.name] = graph.node_copy(node, env_lookup(env))
    graph.output(tuple(env[name] for name in outs))
    return torch.fx.GraphModule(root, graph)


def _constants(gm, hoisted: set[str]) -> dict:
    """Values of the hoisted operators that are constants (tensors), evaluated once, in graph order."""
    import torch

    from dnnplace.frontends.torch_model.capture import constant_nodes
    from dnnplace.frontends.torch_model.profile import _run_node

    if not hoisted:
        return {}
    const = constant_nodes(gm)
    wanted = hoisted & const
    if not wanted:
        return {}
    env: dict = {}
    with torch.no_grad():
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                env[node.name] = _attr(gm, str(node.target))
            elif node.name in const:
                env[node.name] = _run_node(gm, node, env)
    return {name: env[name].detach().clone() for name in wanted if isinstance(env[name], torch.Tensor)}


def _with_recomputed(gm, members: set[str], hoisted: set[str], const_values: dict) -> set[str]:
    """A stage's operators plus the hoisted ones it reads that are not constant tensors (views), transitively."""
    by_name = {n.name: n for n in gm.graph.nodes}
    out = set(members)
    stack = list(members)
    while stack:
        for inp in by_name[stack.pop()].all_input_nodes:
            if inp.name in hoisted and inp.name not in const_values and inp.name not in out:
                out.add(inp.name)
                stack.append(inp.name)
    return out


def env_lookup(env: dict):
    """Map an old fx node to its copy in the stage graph."""
    return lambda n: env[n.name]


def _attr(gm, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
