"""Load ``MODULE:FACTORY`` -- a Python file or dotted module, and a function returning the model and its inputs.

The factory returns one of

* ``(model, args)``
* ``(model, args, kwargs)``
* ``(model, args, kwargs, loss_fn)``

where ``args`` is a tensor or a tuple of tensors, ``kwargs`` a dict of name ->
tensor (or None) and ``loss_fn(output) -> scalar tensor`` maps what
``model(*args, **kwargs)`` returns to the training loss.  Instead of the fourth
element the factory function may carry the loss as an attribute,
``FACTORY.loss_fn = ...``.  Without either, training uses :func:`default_loss`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.utils.guard import UserCodeError, user_code


def require_torch():
    """Import torch or explain how to get it."""
    try:
        import torch
    except ImportError:
        raise DnnplaceError("this command needs PyTorch: pip install 'dnnplace[torch]'") from None
    return torch


@dataclass
class LoadedModel:
    """What a factory returned, normalised."""

    model: Any  # torch.nn.Module
    args: tuple  # positional example inputs (tensors)
    kwargs: dict = field(default_factory=dict)  # keyword example inputs (tensors)
    loss_fn: Callable | None = None  # loss_fn(output) -> scalar tensor; None: default_loss
    on_meta: bool = False  # built inside torch.device("meta") by load_factory(meta=True): its values mean nothing

    def __iter__(self):  # ``model, args = load_factory(spec)`` keeps working
        return iter((self.model, self.args))


def default_loss(output):
    """The loss used for training when the factory gives none: the sum over the floating-point tensors
    of the model's (flattened) output of their mean square."""
    import torch
    from torch.utils._pytree import tree_flatten

    leaves = [t for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not leaves:
        raise DnnplaceError("the model's output has no floating-point tensor to train on")
    return sum(t.float().pow(2).mean() for t in leaves)


def _import(spec: str, module_name: str):
    if module_name.endswith(".py") or "/" in module_name:
        path = Path(module_name)
        if not path.exists():
            raise DnnplaceError(f"'{spec}': no such file {path}")
        name = f"dnnplace_user_{path.stem}"
        mod_spec = importlib.util.spec_from_file_location(name, path)
        if mod_spec is None or mod_spec.loader is None:
            raise DnnplaceError(f"'{spec}': cannot import {module_name}")
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[name] = module
        with user_code(f"'{spec}': importing {module_name}"):  # its errors, exits and prints: one line
            mod_spec.loader.exec_module(module)
        return module
    with user_code(f"'{spec}': importing {module_name}"):
        return importlib.import_module(module_name)


def load_factory(spec: str, *, meta: bool = False, quiet: bool = False) -> LoadedModel:
    """Call the factory named by ``spec`` and check what it returned.

    ``meta``: call it inside ``torch.device("meta")``, so no time goes into
    initialising weights, then give its tensors CPU storage nothing touches
    (:func:`_uninitialised_on_cpu`), so no memory either -- a catalogue device
    prices shapes only, on fake tensors.  A factory that fails there (it reads a value,
    copies to a device, loads a file...) is called again as usual, after one
    note line (unless ``quiet``); :attr:`LoadedModel.on_meta` says which it was.
    """
    torch = require_torch()
    if ":" not in spec:
        raise DnnplaceError(f"'{spec}': expected MODULE:FACTORY (a .py file or dotted module, a colon, a function)")
    module_name, _, func_name = spec.rpartition(":")
    module = _import(spec, module_name)
    factory = getattr(module, func_name, None)
    if not callable(factory):
        raise DnnplaceError(f"'{spec}': {module_name} has no function '{func_name}'")
    if meta:
        try:
            return _uninitialised_on_cpu(_call(spec, factory, torch, meta=True), torch)
        except _MetaFailed as exc:
            loaded = _call(spec, factory, torch, meta=False)  # failing here too: its error alone, no note
            meta_failure(spec, str(exc), quiet)
            return loaded
    return _call(spec, factory, torch, meta=False)


def _uninitialised_on_cpu(loaded: LoadedModel, torch: Any) -> LoadedModel:
    """Give a meta-built model's tensors CPU storage that is never written: its pages are never touched.

    Kernels choose output layouts by device, and torch.export records a ``contiguous`` that is a no-op
    on the CPU layout but not on meta's (SDPA): tracing the meta model would give a graph that is not
    the real model's (``run`` maps workload nodes to the real model's graph by name).  Parameters get
    ``torch.empty`` (tied weights stay one tensor), buffers and example inputs zeros (integer ids stay
    valid indices); nothing reads a value -- :func:`~dnnplace.api.profile` refuses to run the graph
    (``build_workload_dict(data=False)``).
    """
    new: dict[int, tuple[Any, Any]] = {}  # id -> (the meta tensor, kept alive; its replacement)

    def moved(t: Any, make: Callable) -> Any:
        if id(t) not in new:
            new[id(t)] = (t, make(t))
        return new[id(t)][1]

    def param(p: Any) -> Any:
        return torch.nn.Parameter(torch.empty_like(p, device="cpu"), requires_grad=p.requires_grad)

    def zeros(t: Any) -> Any:
        return torch.zeros_like(t, device="cpu") if t.is_meta else t

    slots = [(table, name, t, param if table is mod._parameters else zeros)
             for mod in loaded.model.modules() for table in (mod._parameters, mod._buffers)
             for name, t in table.items() if t is not None and t.is_meta]
    try:
        storage = [moved(t, make) for _, _, t, make in slots]
        args = tuple(zeros(t) for t in loaded.args)
        kwargs = {k: v if v is None else zeros(v) for k, v in loaded.kwargs.items()}
    except (RuntimeError, MemoryError):  # no address space for it (strict overcommit): stay on meta
        loaded.on_meta = True
        return loaded
    for (table, name, _, _), t in zip(slots, storage):
        table[name] = t
    loaded.args, loaded.kwargs, loaded.on_meta = args, kwargs, True
    return loaded


class _MetaFailed(Exception):
    """The factory raised inside ``torch.device("meta")``: call it again for real."""


def meta_failure(spec: str, reason: str, quiet: bool = False) -> None:
    """The one note line saying that ``spec`` is built with real weights after all, and why."""
    if not quiet:
        print(f"note: '{spec}' cannot be profiled on the meta device ({reason[:200]});"
              " building it with real weights", file=sys.stderr)


def _call(spec: str, factory: Callable, torch: Any, *, meta: bool) -> LoadedModel:
    """Call the factory (under ``torch.device("meta")`` if ``meta``) and normalise what it returned."""
    import contextlib

    torch.manual_seed(0)
    try:
        with user_code(f"'{spec}': the factory"), torch.device("meta") if meta else contextlib.nullcontext():
            result = factory()
    except UserCodeError as exc:
        if meta and not exc.exited:  # what meta lacked: the caller builds it for real
            raise _MetaFailed(exc.reason.removeprefix("failed: ")) from None
        raise
    usage = "the factory must return (model, args), (model, args, kwargs) or (model, args, kwargs, loss_fn)"
    if not (isinstance(result, tuple) and 2 <= len(result) <= 4 and isinstance(result[0], torch.nn.Module)):
        raise DnnplaceError(f"'{spec}': {usage}")
    model, args = result[0], result[1]
    kwargs = result[2] if len(result) >= 3 else None
    loss_fn = result[3] if len(result) == 4 else getattr(factory, "loss_fn", None)
    if isinstance(args, torch.Tensor):
        args = (args,)
    if isinstance(args, list):
        args = tuple(args)
    if not isinstance(args, tuple) or not all(isinstance(t, torch.Tensor) for t in args):
        raise DnnplaceError(f"'{spec}': example args must be a tensor or a tuple of tensors")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) and (v is None or isinstance(v, torch.Tensor))
                                               for k, v in kwargs.items()):
        raise DnnplaceError(f"'{spec}': example kwargs must be a dict of name -> tensor")
    if loss_fn is not None and not callable(loss_fn):
        raise DnnplaceError(f"'{spec}': loss_fn must be callable (output -> scalar tensor)")
    return LoadedModel(model=model, args=args, kwargs=dict(kwargs), loss_fn=loss_fn)
