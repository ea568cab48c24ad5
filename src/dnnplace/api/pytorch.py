"""PyTorch: profile a model into a paper workload, run or train a split for real, export it to other runtimes.

Torch is imported only when one of these is called (``import dnnplace`` loads none of it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dnnplace.api.models import paper_instance
from dnnplace.core.limits import MAX_COUNT
from dnnplace.errors import DnnplaceError
from dnnplace.models.paper import paper_json
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload
from dnnplace.utils.params import (
    any_of,
    boolean,
    choice,
    function,
    instance_of,
    integer,
    optional,
    path_like,
    real,
    text,
    validate_params,
)

if TYPE_CHECKING:
    from dnnplace.runtime.results import RunResult

__all__ = ["export", "piper_document", "profile", "run"]

PathLike = str | Path
_SPEC = text()  # MODULE:FACTORY


@validate_params(source=text())
def piper_document(workload: Workload, *, source: str = "profile") -> dict[str, Any]:
    """A profiled training workload in Piper's format (one layer per node, t = 1, vanilla and recompute).

    The document is checked by Piper's own reader before it is returned.
    """
    from dnnplace.frontends.torch_model.piper_export import paper_training_to_piper
    from dnnplace.models.piper.piper_json import parse_piper

    workload = paper_instance(workload, "piper_document")
    doc = paper_training_to_piper(paper_json.workload_to_dict(workload))
    parse_piper(doc, source=source)
    return doc


@validate_params(model=any_of(_SPEC, function()), kwargs=optional(instance_of(dict, what="a dict of tensors")),
                 granularity=choice("op", "module"), training=boolean(), device=text(64),
                 accelerators=integer(0, MAX_COUNT), cpus=integer(0, MAX_COUNT), repeats=integer(1, 10_000),
                 devices_file=optional(path_like()))
def profile(model: Any, args: Any = (), kwargs: dict[str, Any] | None = None, *, granularity: str = "op",
            training: bool = False, device: str = "host", accelerators: int = 2, cpus: int = 0, repeats: int = 7,
            devices_file: PathLike | None = None, link: tuple[float, float] | None = None) -> Workload:
    """Trace a PyTorch model and profile it into a workload (times in ms) that every method can place.

    Parameters
    ----------
    model : torch.nn.Module or str
        The model, or ``"MODULE:FACTORY"`` (a ``.py`` file or dotted module and a
        function returning ``(model, args[, kwargs[, loss_fn]])``; ``args`` and
        ``kwargs`` are then ignored). Only a spec lets ``run`` and ``export``
        rebuild the model later.
    args, kwargs
        Example inputs (a tensor or a tuple of tensors; keyword tensors).
    granularity : {"op", "module"}
    training : bool
        Also profile the backward pass (adds backward nodes).
    device : str
        ``host`` (measured here), ``cuda``, or a catalogue device (``a100``, ``h100``, ...; deterministic).
        For a catalogue device a ``"MODULE:FACTORY"`` model is built on the meta device (no weights; the
        same costs); a factory or model that needs values is built with real weights after a note line.
    accelerators, cpus : int
        The device budget written into the workload.

    Examples
    --------
    .. lane: slow (profiles a model with torch)

    >>> import torch, dnnplace
    >>> net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    >>> w = dnnplace.profile(net, (torch.randn(16, 64),), device="a100", accelerators=2, repeats=1)
    >>> w.n, w.max_accelerators
    (3, 2)
    """
    from dnnplace.frontends.torch_model.capture import ExportFailed, capture
    from dnnplace.frontends.torch_model.loader import load_factory, meta_failure, require_torch
    from dnnplace.frontends.torch_model.profile import NoDataError, build_workload_dict

    require_torch()
    spec = ""
    loss_fn = None
    on_meta = False
    if isinstance(model, str):  # a catalogue device prices shapes: build the model on meta (docs/torch.md)
        spec = model
        loaded = load_factory(model, meta=device not in ("host", "cuda"))
        model, args, kwargs = loaded.model, loaded.args, loaded.kwargs
        loss_fn, on_meta = loaded.loss_fn, loaded.on_meta
    args = args if isinstance(args, tuple) else (args,)

    def workload_dict(model: Any, args: tuple, kwargs: dict | None, *, meta: bool) -> dict:
        cap = capture(model, args, granularity=granularity, kwargs=kwargs, export_only=meta)
        return build_workload_dict(cap, cap.inputs, training=training, device=device, accelerators=accelerators,
                                   cpus=cpus, devices_file=str(devices_file) if devices_file else None, spec=spec,
                                   repeats=repeats, link=link, loss=_training_loss(model, args, kwargs, loss_fn)
                                   if training and device == "host" else None, data=not meta)

    try:
        doc = workload_dict(model, args, kwargs, meta=on_meta)
    except (ExportFailed, NoDataError) as exc:
        if not on_meta:
            raise
        # what the meta build lacked: build it with real weights, as before
        meta_failure(spec, getattr(exc, "reason", "") or str(exc))
        loaded = load_factory(spec)
        doc = workload_dict(loaded.model, loaded.args, loaded.kwargs, meta=False)
    return paper_json.parse_workload(doc, source=spec or type(model).__name__)


def _training_loss(model: Any, args: tuple, kwargs: dict | None, loss_fn: Any) -> tuple[Any, Any] | None:
    """The loss ``run --training`` computes, as ``profile`` times it: (function, output pytree spec or None)."""
    import torch
    from torch.utils._pytree import tree_flatten

    from dnnplace.frontends.torch_model.loader import default_loss

    if loss_fn is None:
        return default_loss, None  # it takes the flattened outputs, as the last stage gives them
    with torch.no_grad():
        return loss_fn, tree_flatten(model(*args, **(kwargs or {})))[1]


@validate_params(model=_SPEC, split=any_of(instance_of(Split, what="a Split"), path_like()), training=boolean(),
                 microbatches=integer(1, 100_000), backend=choice("gloo", "nccl"), schedule=choice("1f1b", "gpipe"),
                 steps=integer(1, 1_000_000), optimizer=choice("sgd", "adam"), lr=real(0),
                 predicted_max_load=optional(real(0)))
def run(model: str, split: Split | PathLike, *, workload: Workload | None = None, training: bool = False,
        microbatches: int = 16, backend: str = "gloo", schedule: str = "1f1b", steps: int = 3,
        optimizer: str = "sgd", lr: float = 0.01, predicted_max_load: float | None = None) -> RunResult | None:
    """Run a split for real: one process per device on torch.distributed, checked against the unsplit model.

    Forward only, or ``training=True``: forward and backward per stage with exact
    gradients, ``schedule`` 1f1b or gpipe, one optimizer step per ``microbatches``.
    ``split`` may be a path: without ``workload``, the ``maxLoad`` written in the
    file is the prediction.  Returns the measured and predicted numbers (ms, bytes) and the checks
    (``outputs_match``; for training ``loss_match`` and ``params_match``); under
    torchrun only rank 0 returns, the other ranks return None.

    Examples
    --------
    .. lane: slow (profiles a model with torch)

    >>> import dnnplace
    >>> spec = "examples/mlp_skip.py:build"
    >>> w = dnnplace.profile(spec, device="a100", repeats=1)
    >>> res = dnnplace.run(spec, dnnplace.solve(w).split, workload=w, microbatches=4)
    >>> res["outputs_match"]
    True
    """
    from dnnplace.runtime.launch import run_pipeline, run_training
    from dnnplace.utils.files import read_json_file

    if workload is not None:
        workload = paper_instance(workload, "run")

    if isinstance(split, (str, os.PathLike)):  # validated above: a path, else a plan already read
        doc = read_json_file(split)
        value = doc.get("maxLoad") if isinstance(doc, dict) else None
        if workload is None and predicted_max_load is None and isinstance(value, (int, float)) \
                and not isinstance(value, bool):
            predicted_max_load = float(value)  # the maxLoad the solver wrote
        split = paper_json.parse_split(doc, source=str(split))
    if workload is None and predicted_max_load is None and split.meta.get("objective") == "throughput":
        value = split.meta.get("objectiveValue")
        predicted_max_load = float(value) if isinstance(value, (int, float)) else None
    if training:
        return run_training(model, split, workload=workload, schedule=schedule, microbatches=microbatches,
                            steps=steps, optimizer=optimizer, lr=lr, backend=backend,
                            predicted_max_load=predicted_max_load)
    return run_pipeline(model, split, microbatches=microbatches, backend=backend, workload=workload,
                        predicted_max_load=predicted_max_load)


@validate_params(split=instance_of(Split, what="a Split"), to=text(64), model=optional(_SPEC))
def export(workload: Workload, split: Split, *, to: str = "stages", model: str | None = None) -> dict | str:
    """Export a split of a profiled workload for other runtimes.

    ``to="stages"``: the stage list (device, node ids, fx nodes, modules);
    ``to="torch-pipelining"``: the split points for ``torch.distributed.pipelining``
    (chain-shaped splits); ``to="torch-pipelining-script"``: a runnable torchrun
    training script for ``model`` (default: the spec the workload was profiled from).

    Examples
    --------
    .. lane: slow (profiles a model with torch)

    >>> import dnnplace
    >>> w = dnnplace.profile("examples/mlp_skip.py:build", device="a100", repeats=1)
    >>> doc = dnnplace.export(w, dnnplace.solve(w).split)
    >>> [len(s["nodeIds"]) > 0 for s in doc["stages"]]
    [True, True]
    """
    from dnnplace.runtime.export import export_pipelining, export_stages, pipelining_script

    workload = paper_instance(workload, "export")
    if to == "stages":
        return export_stages(workload, split)
    if to == "torch-pipelining":
        return export_pipelining(workload, split)
    if to == "torch-pipelining-script":
        return pipelining_script(workload, split, model)
    raise DnnplaceError(f"unknown export format '{to}'; choose stages, torch-pipelining or torch-pipelining-script")


