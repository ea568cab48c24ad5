"""Measured times for the ``host`` and ``cuda`` devices: operator clocks, links and a busy machine.

Only these measurements execute the model; they are apart from :mod:`.values` because a catalogue
device never calls them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.frontends.torch_model.capture import Captured
from dnnplace.frontends.torch_model.values import _run_node, forward_values, group_flops


def measure(cap: Captured, inputs: tuple, *, training: bool, repeats: int = 7, warmup: int = 2,
            device: str = "cpu", grad: set[str] | None = None) -> dict[str, Any]:
    """Median forward (and backward) milliseconds per group, FLOPs and bytes (``grad``: :func:`grad_nodes`)."""
    import torch

    gm = cap.gm
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    # CPU: this thread's CPU time (one intra-op thread), so other tenants of the machine do not inflate the
    # profile; neighbours' cache and memory-bandwidth pressure still shows.  GPU: wall time after a sync.
    clock = time.perf_counter if device == "cuda" else time.thread_time
    if device == "cuda":
        gm = gm.to("cuda")
        inputs = tuple(t.to("cuda") for t in inputs)
    with torch.no_grad():
        env = forward_values(gm, inputs)
    nodes = {n.name: n for n in gm.graph.nodes}
    n_groups = len(cap.groups)
    fwd: list[list[float]] = [[] for _ in range(n_groups)]
    with torch.no_grad():
        for rep in range(warmup + repeats):
            for g, members in enumerate(cap.groups):
                local = dict(env)
                sync()
                t0 = clock()
                for node in members:
                    local[node.name] = _run_node(gm, node, local)
                sync()
                if rep >= warmup:
                    fwd[g].append(1e3 * (clock() - t0))
    flops = group_flops(cap, env)
    bwd = [0.0] * n_groups
    if training:
        for g, members in enumerate(cap.groups):
            bwd[g] = _backward_ms(gm, members, env, nodes, repeats, warmup, sync, clock, grad)
    return {"fwd_ms": [statistics.median(t) for t in fwd], "bwd_ms": bwd, "flops": flops, "env": env}


def _backward_ms(gm, members, env, nodes, repeats, warmup, sync, clock=time.perf_counter,
                 grad: set[str] | None = None) -> float:
    """Time the gradient of one group's operators, its inputs made leaves.

    With ``grad`` (:func:`grad_nodes`) only the inputs that carry a gradient in
    training become leaves, and a group whose outputs carry none has no backward.
    """
    import torch

    names = {n.name for n in members}
    if grad is not None and not any(n.name in grad for n in members):
        return 0.0
    local = dict(env)
    leaves = []
    for node in members:
        for inp in node.all_input_nodes:
            if inp.name in names or inp.op == "get_attr":
                continue
            v = env[inp.name]
            if grad is not None and inp.name not in grad:
                continue
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                leaf = v.detach().requires_grad_(True)
                local[inp.name] = leaf
                leaves.append(leaf)
    with torch.enable_grad():
        for node in members:
            local[node.name] = _run_node(gm, node, local)
        params = [p for p in gm.parameters() if p.requires_grad]
        outs = [local[n.name] for n in members if isinstance(local[n.name], torch.Tensor)
                and local[n.name].requires_grad and local[n.name].is_floating_point()]
        if not outs:
            return 0.0
        wrt = leaves + params
        times = []
        for rep in range(warmup + repeats):
            sync()
            t0 = clock()
            torch.autograd.grad(outs, wrt, grad_outputs=[torch.ones_like(o) for o in outs], retain_graph=True,
                                allow_unused=True)
            sync()
            if rep >= warmup:
                times.append(1e3 * (clock() - t0))
    return statistics.median(times)


def loss_ms(cap: Captured, env: dict, loss: tuple[Callable, Any], repeats: int, warmup: int = 2,
            clock: Callable[[], float] = time.thread_time) -> tuple[float, float]:
    """Median (forward, backward) milliseconds of the training loss on the model's outputs.

    The captured graph ends at the model's output, but a training run's last stage computes the loss and
    its backward every microbatch (``runtime.train``): without this, that stage is under-predicted by as
    much (e.g. a 1024-token vocabulary's logits of a tiny GPT-2: about a third of its stage)."""
    import torch
    from torch.fx.node import map_arg
    from torch.utils._pytree import tree_unflatten

    loss_fn, out_spec = loss
    out_node = next(n for n in cap.gm.graph.nodes if n.op == "output")
    names: list[str] = []
    map_arg(out_node.args, lambda n: names.append(n.name))
    fwd, bwd = [], []
    for rep in range(warmup + repeats):
        leaves = [env[v].detach().requires_grad_(True) if isinstance(env[v], torch.Tensor)
                  and env[v].is_floating_point() else env[v] for v in names]
        with torch.enable_grad():
            t0 = clock()
            value = loss_fn(leaves if out_spec is None else tree_unflatten(leaves, out_spec))
            t1 = clock()
            if isinstance(value, torch.Tensor) and value.requires_grad:
                value.backward()
            t2 = clock()
        if rep >= warmup:
            fwd.append(1e3 * (t1 - t0))
            bwd.append(1e3 * (t2 - t1))
    return statistics.median(fwd), statistics.median(bwd)


def ping_pong(size_bytes: int = 8 << 20, rounds: int = 20) -> tuple[float, float]:
    """(per-message cost in ms, bandwidth in bytes/s) of gloo between two processes here.

    Measured in CPU time of the two processes (all threads), per message and side: a pipeline stage posts its
    sends asynchronously, so what a transfer takes from a stage's time is the work of sending or receiving it,
    not the wake-up latency of a blocking round trip -- which on a busy machine is mostly other tenants' time.
    """
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    port = _free_port()
    procs = [ctx.Process(target=_pp_worker, args=(r, port, size_bytes, rounds, q)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    if q.empty():
        raise DnnplaceError("the torch.distributed ping-pong between two processes failed")
    return q.get()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pp_worker(rank: int, port: int, size: int, rounds: int, q) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        def trip(t: torch.Tensor, n: int) -> float:
            dist.barrier()
            t0 = time.process_time()
            for _ in range(n):
                if rank == 0:
                    dist.send(t, 1)
                    dist.recv(t, 1)
                else:
                    dist.recv(t, 0)
                    dist.send(t, 0)
            return (time.process_time() - t0) / (2 * n)  # this side's CPU per message it sent or received

        small = torch.zeros(1)
        big = torch.zeros(size // 4)
        trip(small, 5)
        # the median of several batches: one batch's CPU time swings by a factor of several here
        # (gloo's polling threads, the other tenants), and every cut edge of the workload pays it
        lat = statistics.median(trip(small, rounds) for _ in range(7))
        trip(big, 2)
        one_way = statistics.median(trip(big, max(2, rounds // 4)) for _ in range(7))
        if rank == 0:
            q.put((1e3 * lat, size / max(one_way - lat, 1e-9)))
    finally:
        dist.destroy_process_group()


class _neighbours:
    """While profiling for ``--device host``, keep the other cores as busy as a running pipeline would.

    Pipeline stages share this machine's caches, memory bandwidth and (with
    SMT) cores; timing an operator on an otherwise idle machine would
    under-predict.  ``k - 1`` helper processes (one per other stage, at most
    one per spare core) run the model's forward pass in a loop meanwhile.
    """

    def __init__(self, inputs: tuple, stages: int) -> None:
        import os

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.count = max(0, min(stages - 1, cores - 1))
        self.inputs = inputs
        self.procs: list = []

    def __enter__(self):
        if self.count:
            import torch.multiprocessing as mp

            ctx = mp.get_context("spawn")
            self.stop = ctx.Event()
            ready = ctx.Barrier(self.count + 1)
            for _ in range(self.count):
                p = ctx.Process(target=_busy_loop, args=(self.inputs, self.stop, ready), daemon=True)
                p.start()
                self.procs.append(p)
            ready.wait(120)
        return self

    def __exit__(self, *exc) -> None:
        if self.procs:
            self.stop.set()
            for p in self.procs:
                p.join(30)
                if p.is_alive():
                    p.terminate()


def _busy_loop(inputs, stop, ready) -> None:
    """Stand-in for a neighbouring stage: dense single-thread work on tensors of the model's size."""
    import torch

    torch.set_num_threads(1)
    n = max(256, min(1024, int(sum(t.numel() for t in inputs) ** 0.5)))
    a = torch.randn(n, n)
    ready.wait(120)
    while not stop.is_set():
        a = torch.tanh(a @ a.T / n)


def _host_memory() -> int:
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover
        return 16 << 30
