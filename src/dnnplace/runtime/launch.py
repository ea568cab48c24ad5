"""Execute a split: one process per stage, torch.distributed send/recv between them.

Forward runs (:func:`run_pipeline`): rank ``r`` runs stage ``r`` (stages in
a topological order); the last stage also collects the model's outputs.
Each stage loops over microbatches: receive what it consumes (model inputs
are made locally), run its GraphModule, post a non-blocking send of every
produced value to every stage that consumes it -- fan-out and skip
connections included -- and go on (a send is waited on two microbatches
later).  ``torch.distributed.pipelining`` handles the forward
of such stage DAGs, but not a value feeding more than one stage in its
backward, and it needs module-boundary split points; a thin send/recv layer
covers any split the solvers return.  Training runs (:func:`run_training`)
are in :mod:`dnnplace.runtime.train`.

The collected outputs are compared with the unsplit model (allclose); the
steady-state time per sample is the median gap between consecutive outputs
after warm-up (the mean over the whole timed run is reported too).  Stage
processes are pinned to one core each when there are enough cores.

Processes start locally (see :mod:`dnnplace.runtime.procs`: they die with
their parent and stay on loopback) or, when ``RANK``/``WORLD_SIZE``/
``MASTER_ADDR`` are set, as ranks of a ``torchrun`` job.
"""

from __future__ import annotations

import pickle
import time

from dnnplace.errors import DnnplaceError
from dnnplace.runtime.host import microbatch, microbatch_kwargs, pin, runqueue_s
from dnnplace.runtime.machine import MachineLoad, cpu_counters
from dnnplace.runtime.payloads import ForwardPayload, TrainPayload
from dnnplace.runtime.results import ForwardRunResult, TrainingRunResult

OUTPUT_TAG = 1_000_000


def _check_backend(backend: str) -> None:
    import torch

    if backend not in ("gloo", "nccl"):
        raise DnnplaceError(f"unknown backend '{backend}'; choose gloo or nccl")
    if backend == "nccl" and not torch.cuda.is_available():
        raise DnnplaceError("--backend nccl needs GPUs; use gloo on CPUs")


def prepare(spec: str, split, workload=None):
    """Load the model, trace it and cut it by ``split``: (loaded factory, captured graph, stage plan).

    The stages take the model's inputs as the traced graph's placeholders do: positional and keyword
    inputs flattened into one tuple (``cap.inputs``), which is what they are fed per microbatch."""
    from dnnplace.frontends.torch_model.capture import capture
    from dnnplace.frontends.torch_model.loader import load_factory
    from dnnplace.runtime.stages import build_stages

    loaded = load_factory(spec)
    meta = workload.require_profile() if workload is not None else None
    cap = capture(loaded.model, loaded.args, granularity=meta.granularity if meta else "op", quiet=True,
                  kwargs=loaded.kwargs)
    ids = None
    if workload is not None and meta is not None:
        ids = [list(meta.fx_nodes[i]) for i in range(workload.n) if not workload.backward[i]]
        if not all(ids):
            raise DnnplaceError("the workload was not made by `dnnplace profile` (its nodes lack fxNodes)")
        fwd_ids = {int(workload.node_ids[i]) for i in range(workload.n) if not workload.backward[i]}
        for ids_of_device in list(split.accelerators) + list(split.cpus):
            for nid in ids_of_device:
                if nid not in workload.index_of:
                    raise DnnplaceError(f"the split does not match the model: node id {nid} is not in the workload")
        split = _forward_only(split, fwd_ids)
    plan = build_stages(cap, split, ids)
    return loaded, cap, plan


def run_pipeline(spec: str, split, *, microbatches: int = 8, backend: str = "gloo",
                 workload=None, warmup: int = 2, timeout_s: float = 600.0,
                 predicted_max_load: float | None = None) -> ForwardRunResult | None:
    """Run ``split`` of the model from ``spec``; return the measured and predicted numbers (ms).

    Under torchrun only rank 0 returns the numbers; the other ranks return None.
    """
    import torch
    from torch.utils._pytree import tree_flatten

    from dnnplace.frontends.torch_model.profile import forward_values
    from dnnplace.runtime.procs import launch

    _check_backend(backend)
    loaded, cap, plan = prepare(spec, split, workload)
    model, inputs = loaded.model, _graph_inputs(cap, loaded)
    with torch.no_grad():
        env = forward_values(cap.gm, inputs)
    shapes = {name: (tuple(env[name].shape), env[name].dtype) for name in plan.producer
              if name in env and isinstance(env[name], torch.Tensor)}
    n = len(plan.modules)
    payload = ForwardPayload(plan=plan, shapes=shapes, inputs=inputs, microbatches=microbatches, warmup=warmup)
    launch_t0, launch_cpu0 = time.perf_counter(), time.process_time()
    results = launch(_forward_worker, n, payload, backend=backend, timeout_s=timeout_s)
    if results is None:
        return None
    machine = _machine_load(results, (time.process_time() - launch_cpu0) / max(time.perf_counter() - launch_t0, 1e-9))
    result = results[n - 1]
    with torch.no_grad():
        reference = [tree_flatten(model(*microbatch(loaded.args, warmup + m),
                                        **microbatch_kwargs(loaded.kwargs, warmup + m)))[0]
                     for m in range(microbatches)]
    outputs = [[torch.from_numpy(a) for a in o] for o in result["outputs"]]
    match = len(outputs) == microbatches and all(
        len(o) == len(r) and all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(o, r))
        for o, r in zip(outputs, reference))
    predicted = predicted_max_load
    if workload is not None:
        from dnnplace.models.paper.evaluation import evaluate

        predicted = evaluate(workload, split).max_load
    gaps = sorted(b - a for a, b in zip(result["arrivals"], result["arrivals"][1:]))
    steady = 1e3 * gaps[len(gaps) // 2] if gaps else result["seconds"] * 1e3 / microbatches
    cpu = [1e3 * r.get("cpu", 0.0) / microbatches for r in results]
    runqueue = [1e3 * r.get("runqueue", 0.0) / microbatches for r in results]
    doc: ForwardRunResult = {
        "outputs_match": bool(match),
        # steady state: the median gap between consecutive outputs (robust to scheduling hiccups)
        "measured_time_per_sample": steady,
        "measured_mean_time_per_sample": result["seconds"] * 1e3 / microbatches,
        "predicted_max_load": predicted,
        "prediction_source": "workload" if workload is not None else ("split" if predicted is not None else None),
        # the busiest stage's CPU time per sample (all threads): the time per sample with a core per stage and
        # no other tenant; and the mean wall time less that stage's run-queue wait (runnable, no CPU)
        "measured_bottleneck_cpu_per_sample": max(cpu),
        "measured_mean_time_per_sample_less_runqueue_wait":
            result["seconds"] * 1e3 / microbatches - runqueue[cpu.index(max(cpu))],
        "load_average": _loadavg(),
        "machine": machine,
        "microbatches": microbatches,
        "stages": [{"device": d, "operators": len(m.graph.nodes) - len(i) - 1, "measured_cpu_ms": c,
                    "measured_runqueue_wait_ms": q}
                   for d, m, i, c, q in zip(plan.devices, plan.modules, plan.inputs, cpu, runqueue)],
        "backend": backend,
        "unit": "ms",
    }
    return doc


def _graph_inputs(cap, loaded) -> tuple:
    """The example inputs as the stages take them: the traced graph's placeholders (keywords flattened in)."""
    return tuple(cap.inputs) if cap.inputs else tuple(loaded.args)


def _forward_only(split, fwd_ids: set[int]):
    from dnnplace.models.paper.split import Split

    return Split(tuple(tuple(v for v in d if v in fwd_ids) for d in split.accelerators),
                 tuple(tuple(v for v in d if v in fwd_ids) for d in split.cpus), split.meta)


def _forward_worker(rank: int, world: int, p: ForwardPayload) -> dict | None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    plan = p.plan
    if dist.get_backend() == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    pin(rank, world)
    tags = {name: i for i, name in enumerate(sorted(plan.producer))}
    out = _stage(rank, plan, p.shapes, p.inputs, p.microbatches, p.warmup, tags)
    dist.barrier()  # a finished send is not yet a received one: nobody leaves before the last stage
    return out


def _stage(rank, plan, shapes, inputs, microbatches, warmup, tags) -> dict | None:
    """One stage's forward loop.  The last stage also collects the model's outputs (receiving those made on
    other stages) and times their arrival; sends are waited on two microbatches later, not before the next."""
    import torch
    import torch.distributed as dist

    from dnnplace.runtime.comm import Prefetcher, isend, prefetch_depth, stage_device

    device = stage_device()
    mod = plan.modules[rank].to(device)
    inputs = tuple(t.to(device) for t in inputs)
    my_in, my_out = plan.inputs[rank], plan.outputs[rank]
    last = len(plan.modules) - 1
    # what microbatch m receives, in the order its producers send: the stage's inputs, and on the last stage
    # the model outputs made elsewhere; posted ahead (see dnnplace.runtime.comm)
    receives = [(name, plan.producer[name], tags[name]) for name in my_in if plan.producer[name] >= 0]
    if rank == last:
        receives += [(name, plan.producer[name], OUTPUT_TAG + i) for i, name in enumerate(plan.model_outputs)
                     if name not in my_out and plan.producer[name] >= 0]
    total = warmup + microbatches
    prefetch = Prefetcher(lambda m: receives, total, prefetch_depth(both_directions=False), shapes, device)
    outputs, arrivals = [], []
    in_flight: list[list] = []
    t0 = time.perf_counter()
    c0, q0 = time.process_time(), runqueue_s()
    window = {"cpu0": c0, "counters0": cpu_counters()}  # the timed microbatches: this process's CPU, the machine's
    with torch.no_grad():
        for m in range(total):
            if m == warmup:
                dist.barrier()
                t0 = time.perf_counter()
                c0, q0 = time.process_time(), runqueue_s()
                window = {"cpu0": c0, "counters0": cpu_counters()}
            mine_in = prefetch.take(m)
            mb = microbatch(inputs, m)
            args = []
            for name in my_in:
                p = plan.producer[name]
                if p < 0:
                    args.append(mb[plan.model_inputs.index(name)])
                else:
                    args.append(mine_in[(name, p, tags[name])].value())
            outs = mod(*args)
            mine = dict(zip(my_out, outs))
            handles = []
            for name, value in mine.items():
                for c in plan.consumers.get(name, []):
                    if c != rank:
                        handles.append(isend(value, c, tags[name]))
                if rank != last:
                    for i, out_name in enumerate(plan.model_outputs):
                        if out_name == name:
                            handles.append(isend(value, last, OUTPUT_TAG + i))
            in_flight.append(handles)
            if len(in_flight) > 2:  # bounded: at most two microbatches of sends outstanding
                for h, _ in in_flight.pop(0):
                    h.wait()
            if rank == last:
                got = []
                for i, name in enumerate(plan.model_outputs):
                    src = plan.producer[name]
                    if name in mine:
                        got.append(mine[name])
                    elif src < 0:
                        got.append(mb[plan.model_inputs.index(name)])
                    else:
                        got.append(mine_in[(name, src, OUTPUT_TAG + i)].value())
                if m >= warmup:
                    arrivals.append(time.perf_counter() - t0)
                    outputs.append([t.cpu().numpy() for t in got])  # plain arrays: tensors would need shared memory
    for handles in in_flight:
        for h, _ in handles:
            h.wait()
    usage = {"cpu": time.process_time() - c0, "runqueue": runqueue_s() - q0,
             "window": {**window, "cpu1": time.process_time(), "counters1": cpu_counters()}}
    if rank != last:
        return usage
    return {"outputs": outputs, "seconds": time.perf_counter() - t0 if microbatches else 0.0, "arrivals": arrivals,
            **usage}


def run_training(spec: str, split, *, workload=None, schedule: str = "1f1b", microbatches: int = 8,
                 steps: int = 3, optimizer: str = "sgd", lr: float = 0.01, backend: str = "gloo",
                 timeout_s: float = 600.0, predicted_max_load: float | None = None,
                 pin: bool = True) -> TrainingRunResult | None:
    """Train ``split`` of the model for ``steps`` optimizer steps of ``microbatches`` microbatches each.

    Returns the losses, the comparison with single-process training of the
    unsplit model, measured vs predicted time per sample (ms) and activation
    memory per stage (bytes).  Under torchrun only rank 0 returns; the other
    ranks return None.
    """
    import torch
    from torch.utils._pytree import tree_flatten

    from dnnplace.core.schedule import SCHEDULES
    from dnnplace.frontends.torch_model.loader import default_loss
    from dnnplace.frontends.torch_model.profile import forward_values
    from dnnplace.runtime.procs import launch
    from dnnplace.runtime.train import (
        OPTIMIZERS,
        busy_per_stage,
        compare_params,
        reference_training,
        restore_buffers,
        saved_bytes_per_microbatch,
        shared_parameters,
        snapshot_buffers,
        stage_orders,
        steady_time_per_sample,
        train_worker,
    )

    _check_backend(backend)
    if schedule not in SCHEDULES:
        raise DnnplaceError(f"unknown schedule '{schedule}'; choose one of: {', '.join(SCHEDULES)}")
    if optimizer not in OPTIMIZERS:
        raise DnnplaceError(f"unknown optimizer '{optimizer}'; choose one of: {', '.join(OPTIMIZERS)}")
    if steps < 1 or microbatches < 1:
        raise DnnplaceError("--steps and --microbatches must be at least 1")
    loaded, cap, plan = prepare(spec, split, workload)
    model, inputs = loaded.model, _graph_inputs(cap, loaded)
    initial_buffers = snapshot_buffers([model, cap.gm, *plan.modules])
    with torch.no_grad():
        env = forward_values(cap.gm, inputs)
        out_spec = tree_flatten(model(*loaded.args, **loaded.kwargs))[1]
    with torch.enable_grad():  # which values carry a gradient
        genv = forward_values(cap.gm, inputs)
    grad_values = {k for k, v in genv.items() if isinstance(v, torch.Tensor) and v.requires_grad
                   and v.is_floating_point()}
    del genv
    if not any(p.requires_grad for p in cap.gm.parameters()):
        raise DnnplaceError("the model has no trainable parameters")
    shapes = {name: (tuple(env[name].shape), env[name].dtype) for name in plan.producer
              if name in env and isinstance(env[name], torch.Tensor)}
    order, after = stage_orders(plan, schedule, microbatches)
    n = len(plan.modules)
    loss_fn = loaded.loss_fn or default_loss
    per_mb = saved_bytes_per_microbatch(plan, env, grad_values, loss_fn, out_spec)
    restore_buffers(initial_buffers)  # the passes above moved running statistics
    in_flight = [order.in_flight(r) for r in range(len(after))]
    # parameters several stages hold (tied weights, a module called on two stages): gradients summed across them
    shared = shared_parameters(plan.modules)
    payload = TrainPayload(
        plan=plan, shapes=shapes, args=inputs, grad_values=grad_values,
        tags={name: i for i, name in enumerate(sorted(plan.producer))},
        out_spec=pickle.dumps(out_spec), loss_spec=spec if loaded.loss_fn is not None else None,
        microbatches=microbatches, steps=steps, optimizer=optimizer, lr=lr, schedule=order,
        module_training=[bool(model.training)] * n, pin=pin,
        node_index={node.name: i for i, node in enumerate(cap.gm.graph.nodes)},
        shared=shared,
    )
    launch_t0, launch_cpu0 = time.perf_counter(), time.process_time()
    results = launch(train_worker, n, payload, backend=backend, timeout_s=timeout_s)
    if results is None:
        return None
    launcher_cores = (time.process_time() - launch_cpu0) / max(time.perf_counter() - launch_t0, 1e-9)
    machine = _machine_load(results, launcher_cores)
    ref_losses, ref_params, ref_buffers = reference_training(
        model, loaded.args, loss_fn, microbatches=microbatches, steps=steps, optimizer=optimizer, lr=lr,
        kwargs=loaded.kwargs)
    losses = results[-1]["losses"]
    loss_match = len(losses) == len(ref_losses) and all(
        abs(a - b) <= 1e-5 * max(abs(b), 1e-12) + 1e-7 for a, b in zip(losses, ref_losses))
    params_match, worst, missing, worst_param = compare_params([r["params"] for r in results], ref_params)
    buffers_match, worst_buffer, missing_buffers, worst_buffer_name = compare_params(
        [r["buffers"] for r in results], ref_buffers, every_reference=False)
    timing = steady_time_per_sample(results, schedule, microbatches, max(after) + 1 if after else 1)
    busy = busy_per_stage(results)
    pred = _training_predictions(workload, split, plan, schedule, microbatches, in_flight,
                                 predicted_max_load)
    measured = 1e3 * timing["time_per_sample"]
    # the bottleneck stage's CPU time per sample: what the pipeline's time per sample would be with a core per
    # stage and nothing else running (the quantity the max-load predicts); robust to other tenants
    busy_max = max(1e3 * b["cpu"] / microbatches for b in busy)
    # the wall clock less the time the busiest stage (by wall time) sat runnable without a CPU: an estimate of
    # the time per sample without other tenants
    busiest = max(busy, key=lambda b: b["forward"] + b["backward"])
    uncontended = measured - 1e3 * busiest["runqueue"] / microbatches
    doc: TrainingRunResult = {
        "training": True, "schedule": schedule, "microbatches": microbatches, "steps": steps,
        "optimizer": optimizer, "lr": lr,
        "losses": losses, "reference_losses": ref_losses, "loss_match": bool(loss_match),
        "params_match": bool(params_match), "max_param_rel_diff": worst,
        "max_param_rel_diff_name": worst_param if worst > 0 else None,
        "params_missing": missing[:10],
        # floating-point buffers (BatchNorm's running statistics) against the unsplit model's; a module with
        # buffers that runs on two stages updates two copies, and they differ from the unsplit model's
        "buffers_match": bool(buffers_match), "max_buffer_rel_diff": worst_buffer,
        "max_buffer_rel_diff_name": worst_buffer_name if worst_buffer > 0 else None,
        "buffers_missing": missing_buffers[:10],
        # parameters held by several stages, their gradients summed across those stages before each step
        "shared_parameters": [{"name": names[ranks[0]], "stages": list(ranks)}
                              for ranks, group in shared for names in group],
        "measured_time_per_sample": measured,
        "measured_step_time_per_sample": 1e3 * timing["step_time_per_sample"],
        "measured_time_per_sample_per_step": [1e3 * t for t in timing["per_step"]],
        "predicted_max_load": pred["max_load"],
        "predicted_simulated_time_per_sample": pred["simulated"],
        "prediction_source": pred["source"],
        "error_vs_max_load": measured / pred["max_load"] - 1 if pred["max_load"] else None,
        "measured_bottleneck_cpu_per_sample": busy_max,
        "measured_time_per_sample_less_runqueue_wait": uncontended,
        "error_less_runqueue_vs_simulated": uncontended / pred["simulated"] - 1 if pred["simulated"] else None,
        "error_cpu_vs_max_load": busy_max / pred["max_load"] - 1 if pred["max_load"] else None,
        "load_average": _loadavg(),
        "machine": machine,
        "error_vs_simulated": measured / pred["simulated"] - 1 if pred["simulated"] else None,
        "stages": [
            {"device": d, "operators": len(m.graph.nodes) - len(i) - 1, "later_stages": a,
             "measured_forward_ms": 1e3 * b["forward"] / microbatches,
             "measured_backward_ms": 1e3 * b["backward"] / microbatches,
             "measured_blocked_ms": 1e3 * b["blocked"] / microbatches,
             "measured_cpu_ms": 1e3 * b["cpu"] / microbatches,
             # the main thread's CPU alone (the operators); the rest of measured_cpu_ms is gloo's threads
             "measured_compute_cpu_ms": 1e3 * b["thread_cpu"] / microbatches,
             # runnable but waiting for a CPU (main thread): time other processes took from this stage
             "measured_runqueue_wait_ms": 1e3 * b["runqueue"] / microbatches,
             "predicted_forward_ms": pf, "predicted_backward_ms": pb,
             "measured_peak_activation_bytes": r["peak_saved_bytes"],
             "measured_activation_bytes_per_microbatch": r["saved_bytes_per_microbatch"],
             "predicted_peak_activation_bytes": unit * k, "predicted_activation_bytes_per_microbatch": unit,
             "microbatches_in_flight": k, "workload_peak_activation_bytes": pm}
            for d, m, i, a, b, r, pf, pb, pm, unit, k in zip(plan.devices, plan.modules, plan.inputs, after, busy,
                                                             results, pred["forward"], pred["backward"],
                                                             pred["memory"], per_mb, in_flight)],
        "backend": backend,
        "unit": "ms",
    }
    return doc


def _machine_load(results: list[dict], launcher_cores: float) -> MachineLoad:
    """How busy the machine was during the timed steps (rank 0's counters, every stage's own CPU)."""
    from dnnplace.runtime.machine import machine_load

    windows = [r.get("window") or {} for r in results]
    first = windows[0] if windows else {}
    start, end = first.get("counters0"), first.get("counters1")
    stages_cpu = sum(w.get("cpu1", 0.0) - w.get("cpu0", 0.0) for w in windows)
    timed = end[0] - start[0] if start and end else 0.0
    return machine_load(start, end, stages_cpu, launcher_cores * timed, len(results))


def _loadavg() -> float | None:
    import os

    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover
        return None


def _training_predictions(workload, split, plan, schedule: str, microbatches: int, in_flight: list[int],
                          fallback: float | None) -> dict:
    """Predicted max-load and simulated time per sample (ms), per-stage loads and activation memory."""
    n = len(plan.modules)
    none = {"max_load": fallback, "simulated": None, "source": "split" if fallback is not None else None,
            "forward": [None] * n, "backward": [None] * n, "memory": [None] * n}
    if workload is None:
        return none
    from dnnplace.models.paper.evaluation import evaluate
    from dnnplace.models.paper.simulation import simulate

    if not workload.is_training:
        none["source"] = None
        none["max_load"] = None
        return none
    ev = evaluate(workload, split)
    sim = simulate(workload, split, schedule=schedule, microbatches=microbatches)
    by_name = {d.name: d for d in ev.devices}
    stashed = workload.profile.output_bytes if workload.profile is not None else (0,) * workload.n
    forward: list[float | None] = []
    backward: list[float | None] = []
    memory: list[int | None] = []
    for name, k in zip(plan.devices, in_flight):
        d = by_name.get(name)
        if d is None:
            forward.append(None)
            backward.append(None)
            memory.append(None)
            continue
        forward.append(float(d.forward_load))
        backward.append(float(d.backward_load))
        idx = [workload.index_of[nid] for nid in d.nodes]
        stash = sum(stashed[i] for i in idx if not workload.backward[i])
        memory.append(stash * k)
    return {"max_load": float(ev.max_load), "simulated": float(sim.time_per_sample), "source": "workload",
            "forward": forward, "backward": backward, "memory": memory}
