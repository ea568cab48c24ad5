"""Where measured training time exceeds the profile's prediction: each term on one core, one process.

    python benchmarks/training_bias.py examples/hf_transformers.py:gpt2_tiny examples/unet.py:make ...

For each model (N microbatches of its example input, SGD), all in this process's thread CPU time with one
intra-op thread, as ``profile --device host`` and the stage processes use:

* ``profile fwd`` / ``profile bwd``: the sums of the per-operator medians ``profile`` records (forward timed
  under ``no_grad``; backward by ``autograd.grad`` of each operator group alone);
* ``graph fwd (no grad)``: the captured graph run as one call, no grad -- the per-operator timing's own
  overhead or saving, and the Python dispatch between operators;
* ``graph fwd (grad)``: the same with autograd recording, as a training stage runs it;
* ``loss`` / ``loss backward``: the loss's forward and its own backward (to the model's outputs): the
  profile's graph ends at the model's output, the last stage computes both every microbatch;
* ``backward``: ``torch.autograd.backward`` of the loss, gradients accumulated into ``.grad`` as a stage does;
* ``optimizer``: ``step`` + ``zero_grad`` once per N microbatches, per microbatch.

Medians over repeats; ms per microbatch.  The run-time terms that need several processes (processes per
core, the launcher's CPU, other tenants) are in ``dnnplace run --training --json``'s ``machine`` block.
"""

from __future__ import annotations

import argparse
import statistics
import time


def _clock_ms(fn) -> float:
    t0 = time.thread_time()
    fn()
    return 1e3 * (time.thread_time() - t0)


def terms(spec: str, microbatches: int, rounds: int) -> dict[str, float]:
    """Each term's median over ``rounds``; every round measures every term once (interleaved, so that the
    machine's drift -- other tenants, frequency -- moves all terms alike)."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    from dnnplace.frontends.torch_model.capture import capture
    from dnnplace.frontends.torch_model.loader import default_loss, load_factory
    from dnnplace.frontends.torch_model.profile import _backward_ms, _run_node, forward_values
    from dnnplace.models.paper.split import Split
    from dnnplace.runtime.stages import build_stages

    torch.set_num_threads(1)
    loaded = load_factory(spec)
    cap = capture(loaded.model, loaded.args, granularity="op", quiet=True, kwargs=loaded.kwargs)
    inputs = tuple(cap.inputs) if cap.inputs else tuple(loaded.args)
    with torch.no_grad():
        env = forward_values(cap.gm, inputs)
    nodes = {n.name: n for n in cap.gm.graph.nodes}
    # the whole graph as one stage, built as ``run`` builds its stages (the same generated code)
    plan = build_stages(cap, Split((tuple(range(len(cap.groups))),), ()))
    gm = plan.modules[0]
    gm.train(bool(loaded.model.training))
    loss_fn = loaded.loss_fn or default_loss
    out_spec = tree_flatten(loaded.model(*loaded.args, **loaded.kwargs))[1]
    params = [q for q in gm.parameters() if q.requires_grad]
    opt = torch.optim.SGD(params, lr=1e-9)

    def loss_of(outs):
        values = dict(zip(plan.outputs[0], outs))
        leaves = [values[v] if v in values else inputs[plan.model_inputs.index(v)] for v in plan.model_outputs]
        return loss_fn(tree_unflatten(leaves, out_spec) if loaded.loss_fn is not None else leaves)

    def op_forward(members, grad: bool) -> float:
        """One group's forward as ``profile`` times it; with ``grad``, on inputs that require grad."""
        local = dict(env)
        if grad:
            for node in members:
                for inp in node.all_input_nodes:
                    v = local.get(inp.name)
                    if isinstance(v, torch.Tensor) and v.is_floating_point() and inp.op != "get_attr":
                        local[inp.name] = v.detach().requires_grad_(True)
        with torch.enable_grad() if grad else torch.no_grad():
            t0 = time.thread_time()
            for node in members:
                local[node.name] = _run_node(cap.gm, node, local)
            return 1e3 * (time.thread_time() - t0)

    def backward() -> float:
        loss = loss_of(gm(*inputs)) / microbatches
        return _clock_ms(loss.backward)

    def step() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    backward()  # .grad exists from here on: later microbatches accumulate, as in a step
    groups = range(len(cap.groups))
    per_op: dict[str, list[list[float]]] = {k: [[] for _ in groups] for k in ("fwd", "fwd grad", "bwd")}
    samples: dict[str, list[float]] = {k: [] for k in ("graph fwd (no grad)", "graph fwd (grad)", "loss",
                                                       "loss backward", "backward", "optimizer")}
    for _ in range(rounds):
        for g, members in enumerate(cap.groups):  # each timed right after one untimed run (warm, as profile's)
            per_op["fwd"][g].append(op_forward(members, False) * 0 + op_forward(members, False))
            per_op["fwd grad"][g].append(op_forward(members, True) * 0 + op_forward(members, True))
            per_op["bwd"][g].append(_backward_ms(cap.gm, members, env, nodes, 1, 1, lambda: None, time.thread_time))
        with torch.no_grad():
            samples["graph fwd (no grad)"].append(_clock_ms(lambda: gm(*inputs)))
        samples["graph fwd (grad)"].append(_clock_ms(lambda: gm(*inputs)))
        outs = gm(*inputs)
        samples["loss"].append(_clock_ms(lambda outs=outs: loss_of(outs)))
        cut = [o.detach().requires_grad_(True) if isinstance(o, torch.Tensor) and o.is_floating_point() else o
               for o in outs]
        samples["loss backward"].append(_clock_ms((loss_of(cut) / microbatches).backward))
        del outs, cut
        samples["backward"].append(backward())
        samples["optimizer"].append(_clock_ms(step) / microbatches)
        backward()  # the next step's first microbatch (its .grad assigned, not accumulated)
    out = {"profile fwd": sum(statistics.median(t) for t in per_op["fwd"]),
           "profile bwd": sum(statistics.median(t) for t in per_op["bwd"]),
           "per-op fwd with grad": sum(statistics.median(t) for t in per_op["fwd grad"])}
    out.update({k: statistics.median(v) for k, v in samples.items()})
    out["measured total"] = out["graph fwd (grad)"] + out["loss"] + out["backward"] + out["optimizer"]
    out["predicted total"] = out["profile fwd"] + out["profile bwd"]
    out["params (M)"] = sum(q.numel() for q in params) / 1e6
    out["operators"] = sum(len(g) for g in cap.groups)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("-n", "--microbatches", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    for spec in args.models:
        t = terms(spec, args.microbatches, args.rounds)
        total = t["predicted total"]
        print(f"{spec}: {t['operators']:.0f} operators, {t['params (M)']:.2f} M parameters")
        for k, v in t.items():
            if k not in ("params (M)", "operators"):
                print(f"  {k:22s} {v:9.3f} ms  {100 * v / total:6.1f} % of predicted")


if __name__ == "__main__":
    main()
