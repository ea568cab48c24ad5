"""Execute a split: one process per stage, torch.distributed send/recv between them.

Rank ``r`` runs stage ``r`` (stages in a topological order); one more rank,
the sink, receives the model's outputs.  Each stage loops over microbatches:
receive what it consumes (model inputs are made locally), run its GraphModule,
post a non-blocking send of every produced value to every stage that consumes
it -- fan-out and skip connections included -- and wait for those sends
before the next microbatch.  ``torch.distributed.pipelining`` handles the
forward of such stage DAGs, but not a value feeding more than one stage in
its backward, and it needs module-boundary split points; a thin send/recv
layer covers any split the solvers return.

The sink's outputs are compared with the unsplit model (allclose); the
steady-state time per sample is the median gap between consecutive outputs
after warm-up (the mean over the whole timed run is reported too).  Stage
processes are pinned to one core each when there are enough cores.
"""

from __future__ import annotations

import time
from typing import Any

from dnnplace.errors import DnnplaceError

OUTPUT_TAG = 1_000_000


def microbatch(inputs: tuple, m: int) -> tuple:
    """Deterministic, distinct inputs for microbatch ``m``."""
    return tuple(t + 0.01 * m if t.is_floating_point() else t for t in inputs)


def run_pipeline(spec: str, split, *, microbatches: int = 8, backend: str = "gloo",
                 workload=None, warmup: int = 2, timeout_s: float = 600.0) -> dict[str, Any]:
    """Run ``split`` of the model from ``spec``; return the measured and predicted numbers (ms)."""
    import torch
    import torch.multiprocessing as mp
    from torch.utils._pytree import tree_flatten

    from dnnplace.frontends.torch_model.capture import capture
    from dnnplace.frontends.torch_model.loader import load_factory
    from dnnplace.frontends.torch_model.profile import _free_port, forward_values
    from dnnplace.runtime.stages import build_stages

    if backend not in ("gloo", "nccl"):
        raise DnnplaceError(f"unknown backend '{backend}'; choose gloo or nccl")
    if backend == "nccl" and not torch.cuda.is_available():
        raise DnnplaceError("--backend nccl needs GPUs; use gloo on CPUs")
    model, inputs = load_factory(spec)
    meta = (workload.extras.get("top_extra", {}).get("dnnplace", {}) if workload is not None else {})
    cap = capture(model, inputs, granularity=meta.get("granularity", "op"), quiet=True)
    ids = None
    if workload is not None:
        extra = workload.extras.get("node_extra", ())
        ids = [list(extra[i].get("fxNodes", [])) for i in range(workload.n) if not workload.backward[i]]
        if not all(ids):
            raise DnnplaceError("the workload was not made by `dnnplace profile` (its nodes lack fxNodes)")
        fwd_ids = {int(workload.node_ids[i]) for i in range(workload.n) if not workload.backward[i]}
        for ids_of_device in list(split.accelerators) + list(split.cpus):
            for nid in ids_of_device:
                if nid not in workload.index_of:
                    raise DnnplaceError(f"the split does not match the model: node id {nid} is not in the workload")
        split = _forward_only(split, fwd_ids)
    plan = build_stages(cap, split, ids)
    with torch.no_grad():
        env = forward_values(cap.gm, inputs)
        reference = [tree_flatten(model(*microbatch(inputs, warmup + m)))[0] for m in range(microbatches)]
    shapes = {name: (tuple(env[name].shape), env[name].dtype) for name in plan.producer
              if name in env and isinstance(env[name], torch.Tensor)}
    n = len(plan.modules)
    port = _free_port()
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()  # carries numpy arrays only
    args = (n, port, backend, plan, shapes, inputs, microbatches, warmup, queue)
    procs = [ctx.Process(target=_worker, args=(r, *args), daemon=True) for r in range(n + 1)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    result = None
    # read the result while the workers run: a large message blocks its sender until it is read
    while time.monotonic() < deadline:
        if not queue.empty():
            result = queue.get()
            break
        if not any(p.is_alive() for p in procs):
            break
        time.sleep(0.02)
    for p in procs:
        p.join(max(1.0, deadline - time.monotonic()))
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.terminate()
    if result is None and not queue.empty():
        result = queue.get()
    if result is None:
        codes = [p.exitcode for p in procs]
        raise DnnplaceError(f"the pipeline processes did not finish in {timeout_s:g} s (exit codes {codes})")
    if "error" in result:
        raise DnnplaceError(f"pipeline stage failed: {result['error']}")
    outputs = [[torch.from_numpy(a) for a in o] for o in result["outputs"]]
    match = len(outputs) == microbatches and all(
        len(o) == len(r) and all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(o, r))
        for o, r in zip(outputs, reference))
    predicted = None
    if workload is not None:
        from dnnplace.evaluate import evaluate

        predicted = evaluate(workload, split).max_load
    gaps = sorted(b - a for a, b in zip(result["arrivals"], result["arrivals"][1:]))
    steady = 1e3 * gaps[len(gaps) // 2] if gaps else result["seconds"] * 1e3 / microbatches
    return {
        "outputs_match": bool(match),
        # steady state: the median gap between consecutive outputs (robust to scheduling hiccups)
        "measured_time_per_sample": steady,
        "measured_mean_time_per_sample": result["seconds"] * 1e3 / microbatches,
        "predicted_max_load": predicted,
        "microbatches": microbatches,
        "stages": [{"device": d, "operators": len(m.graph.nodes) - len(i) - 1}
                   for d, m, i in zip(plan.devices, plan.modules, plan.inputs)],
        "backend": backend,
        "unit": "ms",
    }


def _forward_only(split, fwd_ids: set[int]):
    from dnnplace.model.split import Split

    return Split(tuple(tuple(v for v in d if v in fwd_ids) for d in split.accelerators),
                 tuple(tuple(v for v in d if v in fwd_ids) for d in split.cpus), split.meta)


def _worker(rank, n, port, backend, plan, shapes, inputs, microbatches, warmup, queue) -> None:
    import os

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if backend == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if rank < n and n <= len(cores):
        os.sched_setaffinity(0, {cores[rank]})  # one core per stage, as the cost model assumes
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n + 1)
    try:
        tags = {name: i for i, name in enumerate(sorted(plan.producer))}
        if rank == n:
            _sink(plan, shapes, microbatches, warmup, queue, tags)
        else:
            _stage(rank, plan, shapes, inputs, microbatches + warmup, warmup, tags)
        dist.barrier()  # a finished send is not yet a received one: nobody leaves before the sink
    except Exception as exc:  # report the first failure to the parent in one line
        if rank == n or queue.empty():
            queue.put({"error": f"rank {rank}: {exc.__class__.__name__}: {exc}"})
        raise
    finally:
        dist.destroy_process_group()


def _device():
    """Where this rank's tensors live: its GPU under nccl, else the CPU."""
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", dist.get_rank() % torch.cuda.device_count())
    return torch.device("cpu")


def _recv(name, src, shapes, tag):
    import torch
    import torch.distributed as dist

    shape, dtype = shapes[name]
    wire = torch.uint8 if dtype == torch.bool else dtype
    buf = torch.empty(shape, dtype=wire, device=_device())
    dist.recv(buf, src=src, tag=tag)
    return buf.to(torch.bool) if dtype == torch.bool else buf


def _send(value, dst, tag):
    import torch
    import torch.distributed as dist

    if value.dtype == torch.bool:
        value = value.to(torch.uint8)
    return dist.isend(value.contiguous(), dst=dst, tag=tag)


def _stage(rank, plan, shapes, inputs, total, warmup, tags) -> None:
    import torch
    import torch.distributed as dist

    device = _device()
    mod = plan.modules[rank].to(device)
    inputs = tuple(t.to(device) for t in inputs)
    my_in, my_out = plan.inputs[rank], plan.outputs[rank]
    sink = len(plan.modules)
    with torch.no_grad():
        for m in range(total):
            if m == warmup:
                dist.barrier()
            mb = microbatch(inputs, m)
            args = []
            for name in my_in:
                p = plan.producer[name]
                if p < 0:
                    args.append(mb[plan.model_inputs.index(name)])
                else:
                    args.append(_recv(name, p, shapes, tags[name]))
            outs = mod(*args)
            handles = []
            for name, value in zip(my_out, outs):
                for c in plan.consumers.get(name, []):
                    if c != rank:
                        handles.append(_send(value, c, tags[name]))
                for i, out_name in enumerate(plan.model_outputs):
                    if out_name == name:
                        handles.append(_send(value, sink, OUTPUT_TAG + i))
            for h in handles:
                h.wait()


def _sink(plan, shapes, microbatches, warmup, queue, tags) -> None:
    import torch.distributed as dist

    outputs = []
    arrivals = []
    for m in range(warmup + microbatches):
        if m == warmup:
            dist.barrier()
            t0 = time.perf_counter()
        got = [_recv(name, plan.producer[name], shapes, OUTPUT_TAG + i) for i, name in enumerate(plan.model_outputs)]
        if m >= warmup:
            arrivals.append(time.perf_counter())
            outputs.append([t.cpu().numpy() for t in got])  # plain arrays: tensors would need shared memory
    seconds = time.perf_counter() - t0 if microbatches else 0.0
    queue.put({"outputs": outputs, "seconds": seconds, "arrivals": [a - t0 for a in arrivals]})
