"""A captured graph's values and FLOPs: run for real, on fake tensors, or with metadata only.

Profiling needs each node's outputs (their bytes, shapes and whether they carry gradients) and its
FLOPs; a catalogue device must get them without executing anything (fake tensors), the host and
CUDA devices by running the graph.  Kept apart from the timing so that the runtime can reuse the
graph walk without the clocks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.frontends.torch_model.capture import Captured, mutating


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
