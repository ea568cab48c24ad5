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

import statistics
import time
from collections.abc import Callable
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.frontends.torch_model.capture import Captured, mutating
from dnnplace.frontends.torch_model.devices import CPU_CORE, load_catalogue, roofline_ms
from dnnplace.frontends.torch_model.shared import parameter_use


def _nbytes(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    return 0


def _run_node(gm, node, env: dict, convert: Callable[[Any], Any] | None = None) -> Any:
    """Execute one fx node on the values in ``env``; in-place operators work on copies, so replays repeat.

    ``convert`` maps what the node holds itself -- an attribute's tensor, a
    literal argument such as ``device=`` -- before it is used.
    """
    from torch.fx.node import map_arg
    from torch.utils._pytree import tree_map

    get = (lambda n: _copy(env[n.name])) if mutating(node) else (lambda n: env[n.name])
    args = map_arg(node.args, get)
    kwargs = map_arg(node.kwargs, get)
    if convert is not None and node.op != "get_attr":
        args, kwargs = tree_map(convert, (args, kwargs))
    if node.op == "get_attr":
        obj = gm
        for part in str(node.target).split("."):
            obj = getattr(obj, part)
        return convert(obj) if convert is not None else obj
    if node.op == "call_function":
        return node.target(*args, **kwargs)
    if node.op == "call_module":
        return gm.get_submodule(node.target)(*args, **kwargs)
    if node.op == "call_method":
        return getattr(args[0], node.target)(*args[1:], **kwargs)
    raise DnnplaceError(f"cannot execute fx node {node.name} ({node.op})")


def _copy(value: Any) -> Any:
    import torch

    return value.clone() if isinstance(value, torch.Tensor) else value


def _tensors(value: Any) -> list:
    """The non-empty tensors in a value (a tensor or nested tuples/lists)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value] if value.numel() else []
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _metadata_only(node, env: dict) -> bool:
    """Does this operator only re-describe memory it was given (view, transpose, expand, eval dropout...)?

    Decided from what it did, not from a list of names: every tensor it
    returns shares storage with one of its tensor inputs (torch.export's
    graphs are functional, so an aliasing output is a view, never an in-place
    write), or it returns no tensor at all (shape asserts).  Such an operator
    launches no kernel on a GPU and moves no bytes through its memory.
    Storage identity (``torch._C._is_alias_of``), not data pointers: a meta or
    fake tensor has no data, and every one of its pointers is 0.
    """
    import torch

    if mutating(node):
        return False
    outs = _tensors(env.get(node.name))
    if not outs:
        return _nbytes(env.get(node.name)) == 0
    ins = [t for i in node.all_input_nodes for t in _tensors(env.get(i.name))]
    return all(any(torch._C._is_alias_of(o, i) for i in ins) for o in outs)  # type: ignore[attr-defined]


def hoisted_groups(cap: Captured, env: dict, metadata: list[bool], *,
                   replicate_views: bool) -> tuple[set[int], set[int]]:
    """Operator groups that are not workload nodes: (constants, replicated views).

    * A *constant* depends on no model input and no trainable parameter
      (:func:`~dnnplace.frontends.torch_model.capture.constant_nodes`: masks,
      position ids, rotary tables, position buckets): the pipeline computes it
      once, and every stage reading it keeps the value as a buffer.
    * A *replicated view* is a metadata-only operator (one tensor input, a
      compute node) whose bytes are at least its base's: every stage that reads
      it recomputes it from its base for free, so its consumers read the base
      directly, and a transfer moves the base -- never more bytes than moving
      the view would.  Views feeding the model's output stay nodes.

    Only operator-level exports; views only where the device prices them at zero
    (catalogue devices).
    """
    if cap.granularity != "op" or cap.method != "export":
        return set(), set()
    import torch

    from dnnplace.frontends.torch_model.capture import constant_nodes

    gm = cap.gm
    const_nodes = constant_nodes(gm)
    output = next(x for x in gm.graph.nodes if x.op == "output")
    out_names = {x.name for x in output.all_input_nodes}
    const = {g for g, members in enumerate(cap.groups)
             if all(x.name in const_nodes and x.name not in out_names for x in members)}
    views: set[int] = set()
    if not replicate_views:
        return const, views
    base_of: dict[str, Any] = {}  # replicated view -> the kept node whose storage it reads
    for g, members in enumerate(cap.groups):
        if g in const or len(members) != 1 or not metadata[g]:
            continue
        x = members[0]
        if x.op != "call_function" or mutating(x) or not isinstance(env.get(x.name), torch.Tensor):
            continue
        ins = x.all_input_nodes
        if len(ins) != 1 or cap.group_of.get(ins[0].name) is None or cap.group_of[ins[0].name] in const:
            continue
        base = base_of.get(ins[0].name, ins[0])
        if _nbytes(env[x.name]) < _nbytes(env.get(base.name)):
            continue
        if x.name in out_names or not x.users or any(cap.group_of.get(u.name) is None for u in x.users):
            continue
        if any(mutating(u) for u in base.users):
            continue
        views.add(g)
        base_of[x.name] = base
    return const, views


def forward_values(gm, inputs: tuple, convert: Callable[[Any], Any] | None = None) -> dict:
    """Run the graph once and keep every value by fx node name (``convert``: see :func:`_run_node`)."""
    env: dict = {}
    it = iter(inputs)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node.name] = next(it)
        elif node.op != "output":
            env[node.name] = _run_node(gm, node, env, convert)
    return env


def has_no_data(cap: Captured, inputs: tuple) -> bool:
    """Does the model or its input hold a meta or fake tensor (shapes only, nothing a kernel could read)?"""
    import itertools

    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    gm = cap.gm
    attrs = [_run_node(gm, x, {}) for x in gm.graph.nodes if x.op == "get_attr"]
    tensors = itertools.chain(gm.parameters(), gm.buffers(), inputs, attrs)
    return any(isinstance(t, torch.Tensor) and (t.is_meta or isinstance(t, FakeTensor)) for t in tensors)


def fake_values(gm, inputs: tuple, grad: bool = False) -> tuple[dict, Any, Callable[[Any], Any]]:
    """Every fx node's value as a fake tensor -- shape, dtype, strides, storage sharing -- with no kernel run.

    Returns the values, the ``FakeTensorMode`` they live in and the conversion
    of the graph's own tensors and literals (operators re-run on the values
    must use both).  A meta tensor becomes a fake *CPU* tensor, and a
    ``device=meta`` argument ``cpu``: kernels choose output layouts by device
    (SDPA's CPU kernel returns the layout that makes the next ``contiguous`` a
    no-op; meta decomposes it), so a meta-built model takes exactly the CPU
    model's path and gets its costs.  ``grad``: run with autograd on, so each
    value's ``requires_grad`` says whether training differentiates it.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    cpu = torch.device("cpu")
    fakes: dict[int, Any] = {}  # by id: a tensor held twice (tied weights) stays one storage

    def convert(value: Any) -> Any:
        if isinstance(value, torch.device) and value.type == "meta":
            return cpu
        if not isinstance(value, torch.Tensor) or isinstance(value, FakeTensor):
            return value
        if id(value) not in fakes:
            fakes[id(value)] = (mode.fake_tensor_converter.from_meta_and_device(mode, value, cpu)
                                if value.is_meta else mode.from_tensor(value, static_shapes=True))
        return fakes[id(value)]

    with (torch.enable_grad() if grad else torch.no_grad()), mode:
        env = forward_values(gm, tuple(convert(t) for t in inputs), convert)
    return env, mode, convert


def grad_nodes(gm, inputs: tuple) -> set[str] | None:
    """The fx nodes whose value carries a gradient in training; None where autograd cannot run on fake tensors.

    Autograd decides, on fake tensors (no kernel runs): a value needs a gradient
    when it is differentiable and depends on a trainable parameter.  Integer
    values and what is computed from them -- a router's expert ids, their
    ``sort``, ``histc`` and offsets (mixture-of-experts), masks built from token
    ids -- have none: their operators have no backward work, and timing one
    with a gradient would fail (``Autograd not support dtype: Int``).
    """
    try:
        env, _, _ = fake_values(gm, inputs, grad=True)
    except Exception:
        return None
    return {name for name, value in env.items() if any(t.requires_grad for t in _tensors(value))}


def _flop_counter():
    """``torch.utils.flop_counter`` that also counts SDPA's CPU kernel and grouped (mixture-of-experts) matmuls.

    On CPU tensors SDPA dispatches to ``_scaled_dot_product_flash_attention_for_cpu``,
    which torch's registry lacks (0 FLOPs); on meta tensors it decomposes into
    counted matmuls.  Its formula is that of the GPU kernels, so every device
    counts the same.
    """
    import torch
    from torch.utils import flop_counter

    from dnnplace.frontends.torch_model.moe import flop_formulas

    cpu_sdpa = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu  # the registry keys packets
    return flop_counter.FlopCounterMode(display=False, custom_mapping={cpu_sdpa: _sdpa_flops, **flop_formulas()})


def _sdpa_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """torch's count for the GPU SDPA kernels (two matmuls), from the argument shapes."""
    from torch.utils import flop_counter

    return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)


def group_flops(cap: Captured, env: dict, mode: Any = None, convert: Callable[[Any], Any] | None = None
                ) -> list[float]:
    """FLOPs of each group (``torch.utils.flop_counter``), re-running its operators on ``env``.

    Fake values (:func:`fake_values`) re-run under their ``mode`` and ``convert``.
    """
    import contextlib

    import torch

    flops = []
    with torch.no_grad(), (mode if mode is not None else contextlib.nullcontext()):
        for members in cap.groups:
            local = dict(env)
            with _flop_counter() as fc:
                for node in members:
                    local[node.name] = _run_node(cap.gm, node, local, convert)
            flops.append(float(fc.get_total_flops()))
    return flops


class NoDataError(DnnplaceError):
    """A model on the meta device needs data to be costed (an operator whose output shape depends on values)."""

    reason = ""  # what failed, for the note of a meta build that falls back to real weights


def estimate_values(cap: Captured, inputs: tuple, data: bool = True) -> tuple[dict, list[float]]:
    """Values and FLOPs per group without executing a kernel (fake tensors), for catalogue devices.

    An operator whose output's shape depends on data (``nonzero``) cannot run
    on fake tensors: a model with real weights is then run once for real (no
    timing); a model on the meta device, or one whose values mean nothing
    (``data=False``), is refused in one line (:class:`NoDataError`).
    """
    try:
        env, mode, convert = fake_values(cap.gm, inputs)
        return env, group_flops(cap, env, mode, convert)
    except Exception as exc:
        if not data or has_no_data(cap, inputs):
            reason = str(exc).splitlines()[0][:160] if str(exc) else ""
            err = NoDataError("cannot estimate the model on fake tensors and it has no data to run on"
                              f" (meta device): {exc.__class__.__name__}: {reason}")
            err.reason = f"fake tensors cannot cost it: {exc.__class__.__name__}: {reason}"
            raise err from None
    import torch

    with torch.no_grad():
        env = forward_values(cap.gm, inputs)
    return env, group_flops(cap, env)


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
