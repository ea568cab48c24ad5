"""Train with a split: forward and backward of every stage, on any stage DAG, with exact gradients.

Every stage process runs its own GraphModule with autograd on its own
parameters.  Per microbatch, the forward receives what the stage consumes
(received floating-point values become leaves that require grad), runs the
module and posts a non-blocking send of every produced value to every stage
that consumes it.  The backward receives, for each produced value that
carries a gradient, one gradient from each consuming stage and sums them,
runs ``torch.autograd.backward`` from those outputs (and from the loss on the
last stage) and sends each received input's gradient back to its producer.
A value that feeds several stages -- a skip connection across stages -- thus
gets the sum of its gradient contributions, which ``torch.distributed.
pipelining`` cannot do.

The last stage (in topological order) receives every model output produced
elsewhere and computes the loss; each microbatch's loss is divided by the
number of microbatches N, so one optimizer step per N microbatches equals one
step on the mean loss.  The order of forward and backward tasks per stage is
the :class:`~dnnplace.core.schedule.Schedule` the simulator times (1F1B:
``after`` warm-up forwards, then one forward one backward; GPipe: all
forwards, then all backwards), handed to every worker.  Sends are never waited on before the next task, and a stage
posts the receives of its next tasks before computing the current one
(:func:`~dnnplace.runtime.comm.prefetch_depth`), so transfers overlap compute; waiting for a task's receives is
the only synchronisation, so a stage runs its tasks as the simulated task
graph allows.

Measured per task: start and end (time.perf_counter, comparable across
processes of one machine), time blocked in receives; per stage: the peak of
the tensor bytes kept for backward (``saved_tensors_hooks``, parameters
excluded, each storage counted once per microbatch).

Shared parameters: a parameter used by operators on several stages (a tied
embedding and output projection, a module called twice) is held by each of
those stages.  Each holder's backward gives only its own uses' part of the
gradient, so after a batch's backward the holders sum their gradients
(``all_reduce`` on a process group of exactly the holding ranks, one group
per set of holders, created in the same order on every rank) and then step
identically: every copy stays equal to the single parameter of the unsplit
model.
"""

from __future__ import annotations

import copy
import math
import pickle
import statistics
import time
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np

from dnnplace.errors import DnnplaceError
from dnnplace.runtime.comm import Prefetcher, isend, prefetch_depth, stage_device
from dnnplace.runtime.host import microbatch, microbatch_kwargs, pin, runqueue_s
from dnnplace.runtime.machine import cpu_counters
from dnnplace.runtime.payloads import TrainPayload

if TYPE_CHECKING:
    from dnnplace.core.schedule import Schedule

OPTIMIZERS = ("sgd", "adam")


def _keep(t: Any) -> Any:
    """The unpack hook of the memory count: the saved tensor itself."""
    return t


def shared_parameters(modules: list) -> list[tuple[tuple[int, ...], list[dict[int, str]]]]:
    """Trainable parameters held by more than one stage module (same tensor: storage, offset, shape, stride).

    Returns, per set of holding ranks (sorted, in a fixed order), the shared
    parameters as ``{rank: name in that rank's module}``, in a fixed order --
    the same on every rank, so each rank can create the process groups and
    flatten the gradients identically.
    """
    holders: dict[tuple, dict[int, str]] = {}
    for r, mod in enumerate(modules):
        for name, q in mod.named_parameters():
            if not q.requires_grad:
                continue
            key = (q.untyped_storage().data_ptr(), q.storage_offset(), tuple(q.shape), tuple(q.stride()))
            holders.setdefault(key, {}).setdefault(r, name)
    groups: dict[tuple[int, ...], list[dict[int, str]]] = {}
    for names in holders.values():
        if len(names) > 1:
            groups.setdefault(tuple(sorted(names)), []).append(dict(names))
    return sorted(groups.items())


def sum_shared_gradients(mod, groups: list) -> None:
    """Sum the gradients of the parameters this stage shares with other stages (one all_reduce per group)."""
    import torch
    import torch.distributed as dist

    params = dict(mod.named_parameters())
    for handle, names in groups:
        tensors = [params[name] for name in names]
        grads = [q.grad if q.grad is not None else torch.zeros_like(q) for q in tensors]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=handle)
        offset = 0
        for q in tensors:
            q.grad = flat[offset:offset + q.numel()].view_as(q).clone()
            offset += q.numel()


def stage_orders(plan, schedule: str, microbatches: int) -> tuple[Schedule, list[int]]:
    """The schedule the simulator would time for these stages, and each stage's count of later stages."""
    from dnnplace.core.schedule import by_name
    from dnnplace.utils.graph import stage_depths

    n = len(plan.modules)
    deps = {(plan.producer[v], c) for v, cs in plan.consumers.items() for c in cs
            if plan.producer.get(v, -1) >= 0 and plan.producer[v] != c}
    deps |= {(plan.producer[v], n - 1) for v in plan.model_outputs if 0 <= plan.producer.get(v, -1) != n - 1}
    depth = stage_depths(n, deps)
    stages = int(depth.max()) + 1 if n else 0
    after = [stages - 1 - int(depth[r]) for r in range(n)]
    return by_name(schedule, n, microbatches, after=after), after


def make_optimizer(name: str, params, lr: float):
    import torch

    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise DnnplaceError(f"unknown optimizer '{name}'; choose one of: {', '.join(OPTIMIZERS)}")


def train_worker(rank: int, world: int, p: TrainPayload) -> dict:
    """One stage of a training run (runs in its own process)."""
    import torch
    import torch.distributed as dist
    from torch.utils._pytree import tree_unflatten

    torch.set_num_threads(p.threads)
    if p.pin:
        pin(rank, world)
    torch.manual_seed(0)
    plan = p.plan
    device = stage_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    n = len(plan.modules)
    last = n - 1
    # tensors reach a spawned process in shared memory: train a private copy, not the parent's parameters
    mod = copy.deepcopy(plan.modules[rank]).to(device)
    mod.train(p.module_training[rank])
    inputs = tuple(t.to(device) for t in p.args)
    shapes: dict[str, tuple[Any, Any]] = p.shapes
    grad_values, tags = p.grad_values, p.tags
    N, steps = p.microbatches, p.steps
    my_in, my_out = plan.inputs[rank], plan.outputs[rank]
    # the loss stage also receives the model outputs made elsewhere
    extra_in = [v for v in dict.fromkeys(plan.model_outputs)
                if rank == last and v not in my_in and 0 <= plan.producer.get(v, -1) != last]
    # receive in graph order: the order the producers send in (nccl matches messages by order, not tag)
    recv_order = sorted(my_in + extra_in, key=lambda v: p.node_index.get(v, -1))
    consumers = {v: [c for c in cs if c != rank] for v, cs in plan.consumers.items()}
    for v in plan.model_outputs:
        if rank != last and plan.producer.get(v) == rank and last not in consumers.get(v, []):
            consumers.setdefault(v, []).append(last)
    loss_fn: Any = None
    if rank == last:
        if p.loss_spec is not None:
            from dnnplace.frontends.torch_model.loader import load_factory

            loss_fn = load_factory(p.loss_spec).loss_fn
            # the output's structure, for the factory's loss: unpickled only now that the factory's module
            # (which may define the output's class) is loaded; pytree's JSON form cannot name classes it was
            # not told about (e.g. transformers' ModelOutput)
            out_spec = pickle.loads(p.out_spec)
        else:
            from dnnplace.frontends.torch_model.loader import default_loss

            loss_fn = default_loss
            out_spec = None  # the default loss only needs the output's tensors, in flattened order
    params = [q for q in mod.parameters() if q.requires_grad]
    opt = make_optimizer(p.optimizer, params, p.lr) if params else None
    frozen = {t.untyped_storage().data_ptr() for t in list(mod.parameters()) + list(mod.buffers())}
    order = p.schedule.ranks[rank]
    # one process group per set of stages sharing parameters; every rank creates every group, in the same order
    shared_groups = []
    for ranks, shared in p.shared:
        handle = dist.new_group(list(ranks))
        if rank in ranks:
            shared_groups.append((handle, [names[rank] for names in shared]))

    def fwd_tag(v):
        return 2 * tags[v]

    def bwd_tag(v):
        return 2 * tags[v] + 1

    # what each task receives, in the order its producers send: activations for a forward, one gradient per
    # consuming stage for each produced value that carries one for a backward
    recv_of = {"F": [(v, plan.producer[v], fwd_tag(v)) for v in recv_order if plan.producer[v] >= 0],
               "B": [(v, c, bwd_tag(v)) for v in my_out if v in grad_values for c in consumers.get(v, [])]}
    depth = prefetch_depth(both_directions=True)

    pending: list = []  # (work, tensor): sends in flight, waited on at the end of a step
    stash: dict[int, tuple] = {}
    saved_bytes: dict[int, int] = {}
    live = peak = per_mb = 0
    tasks: list[list] = []
    losses: list[float] = []
    window: dict[str, Any] = {}  # the timed steps (after the warm-up step): this process's CPU, the machine's
    for step in range(steps):
        dist.barrier()
        if step == min(1, steps - 1):
            window.update(cpu0=time.process_time(), counters0=cpu_counters())
        step_start = time.perf_counter()
        step_loss = 0.0
        prefetch = Prefetcher(lambda i: recv_of[order[i].kind], len(order), depth, shapes, device)
        for i, (kind, m, _) in enumerate(order):
            t0 = time.perf_counter()
            c0, th0, q0 = time.process_time(), time.thread_time(), runqueue_s()
            recv_s = 0.0
            mine = prefetch.take(i)
            if kind == "F":
                mb = microbatch(inputs, step * N + m)
                leaves = []
                got: dict[str, Any] = {}
                for v in recv_order:
                    src = plan.producer[v]
                    if src < 0:
                        val = mb[plan.model_inputs.index(v)]
                    else:
                        r0 = time.perf_counter()
                        val = mine[(v, src, fwd_tag(v))].value()
                        recv_s += time.perf_counter() - r0
                        if v in grad_values:
                            val.requires_grad_(True)
                            leaves.append((v, val))
                    got[v] = val
                args = [got[v] for v in my_in]
                seen: set[int] = set()
                count = [0]

                def pack(t, seen=seen, count=count):
                    key = t.untyped_storage().data_ptr()
                    if key not in frozen and key not in seen:
                        seen.add(key)
                        count[0] += t.untyped_storage().nbytes()
                    return t

                # the bytes kept for backward are counted in the first step only (the warm-up step, not timed;
                # every step runs the same schedule): a Python hook per saved tensor would slow the timed ones
                hooks = torch.autograd.graph.saved_tensors_hooks(pack, _keep) if step == 0 else nullcontext()
                with torch.enable_grad(), hooks:
                    outs = mod(*args)
                    if rank == last:
                        values = dict(got)
                        values.update(zip(my_out, outs))
                        leaves_out = [values[v] if plan.producer.get(v, -1) >= 0 else
                                      mb[plan.model_inputs.index(v)] for v in plan.model_outputs]
                        output = leaves_out if out_spec is None else tree_unflatten(leaves_out, out_spec)
                        loss = loss_fn(output) / N
                    else:
                        loss = None
                saved_bytes[m] = count[0]
                per_mb = max(per_mb, count[0])
                live += count[0]
                peak = max(peak, live)
                for v, val in zip(my_out, outs):
                    for c in consumers.get(v, []):
                        pending.append(isend(val, c, fwd_tag(v)))
                stash[m] = (outs, leaves, loss)
            else:
                outs, leaves, loss = stash.pop(m)
                roots, grads = [], []
                for v, val in zip(my_out, outs):
                    if v not in grad_values:
                        continue
                    total = None
                    for c in consumers.get(v, []):
                        r0 = time.perf_counter()
                        g = mine[(v, c, bwd_tag(v))].value()
                        recv_s += time.perf_counter() - r0
                        total = g if total is None else total + g
                    if not isinstance(val, torch.Tensor) or not val.requires_grad:
                        continue  # (a gradient its consumers sent all the same is dropped)
                    if total is not None:
                        roots.append(val)
                        grads.append(total)
                if loss is not None:
                    roots.append(loss)
                    grads.append(None)
                    step_loss += float(loss.detach())
                if roots:
                    torch.autograd.backward(roots, grads)
                for v, leaf in leaves:
                    g = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
                    pending.append(isend(g, plan.producer[v], bwd_tag(v)))
                live -= saved_bytes.pop(m)
                del outs, leaves, loss, roots, grads
            tasks.append([step, kind, m, t0, time.perf_counter(), recv_s, time.process_time() - c0,
                          time.thread_time() - th0, runqueue_s() - q0])
        for work, _ in pending:
            work.wait()
        pending.clear()
        t_opt = time.perf_counter()
        sum_shared_gradients(mod, shared_groups)
        if opt is not None:
            opt.step()
            opt.zero_grad(set_to_none=True)
        tasks.append([step, "O", -1, t_opt, time.perf_counter(), 0.0, 0.0, 0.0, 0.0])
        if rank == last:
            losses.append(step_loss)
        del step_start
    dist.barrier()
    window.update(cpu1=time.process_time(), counters1=cpu_counters())
    state = {k: v.detach().cpu().numpy().copy() for k, v in mod.named_parameters()}
    buffers = {k: v.detach().cpu().numpy().copy() for k, v in mod.named_buffers() if v.is_floating_point()}
    return {"tasks": tasks, "losses": losses, "params": state, "buffers": buffers, "peak_saved_bytes": peak,
            "saved_bytes_per_microbatch": per_mb, "device": plan.devices[rank], "window": window}


def saved_bytes_per_microbatch(plan, env: dict, grad_values: set, loss_fn, out_spec) -> list[int]:
    """Per stage: the tensor bytes its forward keeps for backward for one microbatch (parameters excluded, each
    storage once), from one forward of each stage module on the example inputs -- the per-microbatch unit of
    the activation-memory prediction (times the microbatches a schedule keeps in flight)."""
    import torch
    from torch.utils._pytree import tree_unflatten

    out = []
    n = len(plan.modules)
    values: dict[str, Any] = {}
    for r, mod in enumerate(plan.modules):
        frozen = {t.untyped_storage().data_ptr() for t in list(mod.parameters()) + list(mod.buffers())}
        seen: set[int] = set()
        count = [0]

        def pack(t, seen=seen, count=count, frozen=frozen):
            key = t.untyped_storage().data_ptr()
            if key not in frozen and key not in seen:
                seen.add(key)
                count[0] += t.untyped_storage().nbytes()
            return t

        args = []
        for v in plan.inputs[r]:
            val: Any = env[v]
            if v in grad_values and plan.producer.get(v, -1) >= 0:
                val = val.detach().clone().requires_grad_(True)
            args.append(val)
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            outs = mod(*args)
            values.update(zip(plan.outputs[r], outs))
            if r == n - 1:
                leaves = []
                for v in plan.model_outputs:
                    val = values.get(v, env.get(v))
                    if val is not values.get(v) and v in grad_values:  # received from another stage
                        val = val.detach().clone().requires_grad_(True)
                    leaves.append(val)
                loss_fn(tree_unflatten(leaves, out_spec))
        out.append(count[0])
    return out


def reference_training(model, args: tuple, loss_fn, *, microbatches: int, steps: int, optimizer: str,
                       lr: float, kwargs: dict | None = None) -> tuple[list[float], dict, dict]:
    """Single-process training of the unsplit model on the same microbatches: (per-step losses, parameters,
    floating-point buffers such as BatchNorm's running statistics).

    The parameters are keyed by every name they have (a tied parameter under each of its names, the same
    array object for all of them), since a stage may hold it under any of them; buffers likewise."""

    model = copy.deepcopy(model)
    kwargs = kwargs or {}
    params = [q for q in model.parameters() if q.requires_grad]
    opt = make_optimizer(optimizer, params, lr)
    losses = []
    for step in range(steps):
        total = 0.0
        for m in range(microbatches):
            k = step * microbatches + m
            loss = loss_fn(model(*microbatch(args, k), **microbatch_kwargs(kwargs, k))) / microbatches
            loss.backward()
            total += float(loss.detach())
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total)
    arrays: dict[int, Any] = {}
    out = {}
    for name, q in model.named_parameters(remove_duplicate=False):
        if id(q) not in arrays:
            arrays[id(q)] = q.detach().numpy().copy()
        out[name] = arrays[id(q)]
    buffers = {}
    for name, b in model.named_buffers(remove_duplicate=False):
        if b.is_floating_point():
            if id(b) not in arrays:
                arrays[id(b)] = b.detach().numpy().copy()
            buffers[name] = arrays[id(b)]
    return losses, out, buffers


def snapshot_buffers(modules: list) -> list[tuple[Any, Any]]:
    """Every distinct buffer of ``modules`` with a copy of its value, for :func:`restore_buffers`."""
    seen: dict[int, tuple[Any, Any]] = {}
    for mod in modules:
        for b in mod.buffers():
            if id(b) not in seen:
                seen[id(b)] = (b, b.detach().clone())
    return list(seen.values())


def restore_buffers(snapshot: list[tuple[Any, Any]]) -> None:
    """Put the buffers back as :func:`snapshot_buffers` found them.

    Why: the launcher runs the model and its stages a few times to learn shapes, which values carry
    gradients and the bytes kept for backward; in training mode each run moves BatchNorm's running
    statistics, and the stages and the reference must both start from the model as the factory built it."""
    import torch

    with torch.no_grad():
        for b, saved in snapshot:
            b.copy_(saved)


def steady_time_per_sample(results: list[dict], schedule: str, microbatches: int, stages: int) -> dict:
    """Measured seconds per sample, the way the simulator measures its timeline, median over steps after the first."""
    steps = max(t[0] for r in results for t in r["tasks"]) + 1
    per_step_sim, per_step_wall = [], []
    for step in range(steps):
        done = np.zeros(microbatches)
        first_start, last_end = np.inf, -np.inf
        for r in results:
            for s, kind, m, t0, t1, *_ in r["tasks"]:
                if s != step or kind == "O":
                    continue
                first_start, last_end = min(first_start, t0), max(last_end, t1)
                if kind == "B":
                    done[m] = max(done[m], t1)
        if schedule == "gpipe" or microbatches == 1:
            tps = (last_end - first_start) / microbatches
        else:
            edge = min(stages, (microbatches - 1) // 2)
            first, last = edge, microbatches - 1 - edge
            if last <= first:
                first, last = 0, microbatches - 1
            tps = (done[last] - done[first]) / (last - first)
        per_step_sim.append(tps)
        opt_end = max(t[4] for r in results for t in r["tasks"] if t[0] == step)
        per_step_wall.append((opt_end - first_start) / microbatches)
    use = slice(1, None) if steps > 1 else slice(None)
    return {"time_per_sample": statistics.median(per_step_sim[use]),
            "step_time_per_sample": statistics.median(per_step_wall[use]),
            "per_step": per_step_sim}


def busy_per_stage(results: list[dict]) -> list[dict]:
    """Per stage, per step after the first: seconds of forward and backward tasks, of that blocked receiving, and
    the CPU seconds the stage process used meanwhile (all its threads: compute and gloo's transfers)."""
    steps = max(t[0] for r in results for t in r["tasks"]) + 1
    out = []
    for r in results:
        use = [t for t in r["tasks"] if (t[0] >= 1 or steps == 1) and t[1] != "O"]
        k = max(1, steps - 1)
        out.append({"forward": sum(t[4] - t[3] for t in use if t[1] == "F") / k,
                    "backward": sum(t[4] - t[3] for t in use if t[1] == "B") / k,
                    "blocked": sum(t[5] for t in use) / k,
                    "cpu": sum(t[6] for t in use) / k, "thread_cpu": sum(t[7] for t in use) / k,
                    "runqueue": sum(t[8] for t in use) / k})
    return out


def compare_params(stage_params: list[dict], reference: dict, *,
                   every_reference: bool = True) -> tuple[bool, float, list[str], str | None]:
    """(all match within 1e-5 relative, the largest relative difference, names not found, the worst name).

    The difference of each parameter is taken relative to its reference norm, floored at an RMS of 1e-3
    per element (so 1e-5 relative means at most 1e-8 RMS for a parameter that stays near zero).

    Every stage's copy of a parameter is compared (a shared parameter once per holding stage).  Names in
    ``reference`` that map to the same array object are one parameter: it is found if any of them is.
    With ``every_reference`` false (buffers: one no stage reads is none of the run's business), only the
    stages' names must be found."""
    worst = 0.0
    worst_name: str | None = None
    missing = []
    seen: set[int] = set()
    for params in stage_params:
        for name, value in params.items():
            ref = reference.get(name)
            if ref is None:
                missing.append(name)
                continue
            seen.add(id(ref))
            diff = float(np.linalg.norm((value.astype(np.float64) - ref.astype(np.float64)).ravel()))
            # relative to the reference's norm, floored at an RMS of 1e-3 per element: a parameter that stays
            # at ~0 (a zero-initialised attention key bias gets an analytically zero gradient, since softmax
            # ignores a shift common to all keys) is float noise in both runs, and noise / ~0 is no measure
            scale = max(float(np.linalg.norm(ref.astype(np.float64).ravel())), 1e-3 * math.sqrt(max(ref.size, 1)))
            rel = diff / scale
            if rel > worst:
                worst, worst_name = rel, name
    if every_reference:
        missing += [name for name, ref in reference.items() if id(ref) not in seen]
    return worst <= 1e-5 and not missing, worst, missing, worst_name
