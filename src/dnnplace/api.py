"""The public Python API: everything the ``dnnplace`` command does, as functions.

The CLI (:mod:`dnnplace.cli`) is a thin layer over these; each takes and returns
plain objects (:class:`~dnnplace.Workload`, :class:`~dnnplace.Split`,
:class:`Solution`, :class:`~dnnplace.Evaluation`, :class:`~dnnplace.Simulation`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dnnplace.errors import DnnplaceError
from dnnplace.evaluation import Evaluation
from dnnplace.evaluation import evaluate as _evaluate
from dnnplace.evaluation.piper import PiperEvaluation, PiperPlan
from dnnplace.frontends import paper_json
from dnnplace.frontends.piper_json import PiperInstance
from dnnplace.model.split import Split
from dnnplace.model.validate import check_feasibility
from dnnplace.model.workload import Workload
from dnnplace.simulation.pipeline import Simulation
from dnnplace.solvers import RunContext, Solver, make_solver, resolve_method
from dnnplace.solvers import methods as _methods
from dnnplace.solvers.base import ProgressFn
from dnnplace.solvers.dp.lattice_info import LatticeStep

if TYPE_CHECKING:
    from dnnplace.solvers.piper.solver import PiperResult

__all__ = ["LatticeStep", "Solution", "WorkloadInfo", "evaluate", "evaluate_piper", "example_path", "export", "info",
           "load_piper", "load_piper_plan", "load_split", "load_workload", "methods", "profile", "run",
           "save_piper_plan", "save_split", "save_workload", "simulate", "solve", "solve_piper", "write_report"]

PathLike = str | Path
_DATA = Path(__file__).resolve().parent / "data"


# ------------------------------------------------------------------------ files
def example_path(name: str) -> Path:
    """The path of a workload bundled with dnnplace (the paper's inputs), by file stem.

    Parameters
    ----------
    name : str
        A file stem such as ``"bert24_inference"`` (layer graphs are found
        before operator graphs of the same name).

    Returns
    -------
    pathlib.Path

    Examples
    --------
    >>> import dnnplace
    >>> dnnplace.example_path("gnmt_training").name
    'gnmt_training.json'
    """
    for folder in ("LayerGraphs", "OperatorGraphs"):
        p = _DATA / "paper" / "throughput-inputs" / folder / f"{name}.json"
        if p.is_file():
            return p
    found = sorted(_DATA.glob(f"**/{name}.json"))
    if not found:
        raise DnnplaceError(f"no bundled workload named '{name}'")
    return found[0]


def load_workload(path: PathLike, *, check_feasible: bool = True) -> Workload:
    """Read and validate a workload in the paper's JSON format.

    Parameters
    ----------
    path : str or Path
        The JSON file (msr-fiddle/dnn-partitioning format, see ``SPEC.md``).
    check_feasible : bool, default True
        Also refuse workloads that no split can fit (one line naming why).

    Returns
    -------
    Workload

    Raises
    ------
    InputError
        Malformed input: the message names the file, the node or edge, and the field.

    Examples
    --------
    >>> import dnnplace
    >>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    >>> w.n, w.max_accelerators, w.is_training
    (192, 6, True)
    """
    return paper_json.load_workload(path, check_feasible=check_feasible)


def save_workload(workload: Workload, path: PathLike, *, inputs: Iterable[PathLike | None] = ()) -> None:
    """Write a workload in the paper's format, atomically and losslessly (never over one of ``inputs``).

    Examples
    --------
    >>> import dnnplace, tempfile, os
    >>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    >>> out = os.path.join(tempfile.mkdtemp(), "w.json")
    >>> dnnplace.save_workload(w, out)
    >>> dnnplace.load_workload(out).n
    192
    """
    paper_json.save_workload(workload, path, inputs=tuple(inputs))


def load_split(path: PathLike) -> Split:
    """Read a split (the paper's ``fpgas`` / ``cpus`` lists, plus dnnplace's metadata).

    Examples
    --------
    >>> import dnnplace, tempfile, os
    >>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    >>> out = os.path.join(tempfile.mkdtemp(), "split.json")
    >>> dnnplace.save_split(dnnplace.solve(w, "single").split, out)
    >>> len(dnnplace.load_split(out).accelerators)
    1
    """
    return paper_json.load_split(path)


def save_split(split: Split, path: PathLike, evaluation: Evaluation | None = None, *,
               inputs: Iterable[PathLike | None] = ()) -> None:
    """Write a split atomically in the paper's format (per-device loads from ``evaluation`` when given).

    ``inputs`` are files the output must never replace (the workload it was
    solved from): writing over one of them is refused.

    Examples
    --------
    >>> import dnnplace, tempfile, os
    >>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    >>> sol = dnnplace.solve(w)
    >>> dnnplace.save_split(sol.split, os.path.join(tempfile.mkdtemp(), "s.json"), sol.evaluation)
    """
    paper_json.save_split(split, path, evaluation, inputs=tuple(inputs))


# ----------------------------------------------------------------------- solve
@dataclass(frozen=True)
class Solution:
    """A solved placement: the split (with its metadata) and the evaluator's verdict on it.

    ``value`` is the evaluator's value of the objective; ``status`` says what
    was proven (``optimal``, ``bounded``: within ``gap`` of the proven
    ``bound``, ``time_limit``, ``feasible``, ``heuristic``).
    """

    split: Split
    evaluation: Evaluation
    method: str
    objective: str
    value: float
    status: str
    bound: float | None
    gap: float | None
    runtime_s: float
    stats: dict[str, Any] = field(default_factory=dict)


def methods() -> dict[str, type[Solver]]:
    """The registered placement methods, name -> solver class.

    Each class carries ``objectives``, a one-line ``summary`` and its own
    parameters (:meth:`~dnnplace.solvers.Solver.param_names`).

    Examples
    --------
    >>> import dnnplace
    >>> list(dnnplace.methods())[:3]
    ['dp', 'ip', 'ip-noncontig']
    >>> dnnplace.methods()["local-search"].param_names()
    ('seed', 'restarts')
    """
    return _methods()


def solve(
    workload: Workload,
    method: str | Solver = "dp",
    *,
    objective: str = "throughput",
    time_limit: float | None = None,
    overlap_comm: bool = False,
    progress: ProgressFn | None = None,
    **params: Any,
) -> Solution:
    """Place ``workload`` with a method; the split is re-checked by the evaluator.

    Parameters
    ----------
    workload : Workload
    method : str or Solver, default "dp"
        A name from :func:`methods` or a configured solver instance.
    objective : {"throughput", "latency", "fw+bw"}
        Max-load (pipeline throughput), single-sample latency, or max forward + max backward load.
    time_limit : float, optional
        Seconds; the best split found so far is returned with ``status`` ``time_limit``.
    overlap_comm : bool, default False
        Accelerator load = max(compute, communication) instead of their sum.
    progress : callable, optional
        ``progress(done, total, description)``, called now and then.
    **params
        The method's own parameters (e.g. ``max_ideals`` and ``gap`` for ``dp``);
        one it does not take is an error naming those it does.

    Returns
    -------
    Solution

    Examples
    --------
    >>> import dnnplace
    >>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    >>> sol = dnnplace.solve(w)
    >>> sol.status, round(sol.value, 3), len(sol.split.accelerators)
    ('optimal', 107.004, 6)
    >>> dnnplace.solve(w, "local-search", max_ideals=10)
    Traceback (most recent call last):
    ...
    dnnplace.errors.DnnplaceError: method 'local-search' does not take max_ideals; its parameters: seed, restarts
    """
    if isinstance(method, Solver):
        if resolve_method(method.name, objective) != method.name:
            raise DnnplaceError(f"method '{method.name}' does not optimise '{objective}'")
        method.check_names(params)
        solver = type(method)(**{**method.get_params(), **params})
    else:
        name = resolve_method(method, objective)
        solver = make_solver(name, **params)  # unknown parameters: an error naming the valid ones
    if objective == "latency":
        # the latency model has as many CPU cores as it needs; maxCPUs does not bind
        workload = workload.with_budget(cpus=max(workload.max_cpus, workload.n))
    solver.warm_up()  # loading compiled code is start-up cost, not solving time
    t0 = time.perf_counter()
    check_feasibility(workload)
    out = solver.solve(workload, RunContext(objective=objective, time_limit=time_limit, overlap_comm=overlap_comm,
                                            progress=progress))
    ev = _evaluate(workload, out.split, overlap_comm=overlap_comm, complete=False)
    value = ev.value(objective)
    bound = out.bound
    if bound is not None and out.status == "optimal":
        bound = min(bound, value)  # the evaluator's exact sum is the optimum's value
    gap = None
    if bound is not None and np.isfinite(value) and value > 0:
        gap = max(0.0, (value - bound) / value)
    runtime = time.perf_counter() - t0
    meta: dict[str, Any] = {"method": solver.name if isinstance(method, Solver) else method,
                            "objective": objective, "objectiveValue": value, "status": out.status,
                            "feasible": ev.feasible, "runtime_s": round(runtime, 6)}
    if objective == "latency":
        meta["totalLatency"] = value
    if bound is not None:
        meta["bound"] = bound
        meta["gap"] = gap
    if overlap_comm:
        meta["overlapComm"] = True
    return Solution(out.split.with_meta(**meta), ev, meta["method"], objective, value, out.status, bound, gap,
                    runtime, dict(out.stats))


@dataclass(frozen=True)
class WorkloadInfo:
    """What ``dnnplace info`` prints: the lattice at each reduction and the path ``solve`` will take."""

    steps: tuple[LatticeStep, ...]
    default_path: str


def info(workload: Workload, *, max_ideals: int = 200_000, cap: int = 1_000_000) -> WorkloadInfo:
    """Ideal counts of the raw graph and after each reduction (None: more than ``cap``), and the DP's path.

    Examples
    --------
    >>> import dnnplace
    >>> rep = dnnplace.info(dnnplace.load_workload(dnnplace.example_path("gnmt_training")))
    >>> [s.step for s in rep.steps]
    ['raw graph', 'reference reductions', 'exact reductions']
    >>> rep.default_path.startswith("exact DP")
    True
    """
    from dnnplace.solvers.dp.lattice_info import default_path, lattice_steps

    steps = lattice_steps(workload, max(cap, max_ideals))
    return WorkloadInfo(tuple(steps), default_path(steps, max_ideals))


# -------------------------------------------------------------- judge and show
def evaluate(workload: Workload, split: Split, *, overlap_comm: bool = False, source: str = "split") -> Evaluation:
    """Judge a split with the one cost model: per-device loads and memory, max-load, latency, violations.

    ``source`` names the split in error messages (a node it places that the workload lacks).

    Examples
    --------
    >>> import dnnplace
    >>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    >>> ev = dnnplace.evaluate(w, dnnplace.solve(w).split)
    >>> round(ev.max_load, 3), ev.feasible
    (107.004, True)
    """
    return _evaluate(workload, split, overlap_comm=overlap_comm, source=source)


def simulate(workload: Workload, split: Split, *, schedule: str = "1f1b", microbatches: int = 32,
             overlap_comm: bool = False) -> Simulation:
    """Simulate microbatches through the pipeline (``1f1b`` or ``gpipe``): time per sample, bubbles, trace.

    Examples
    --------
    >>> import dnnplace
    >>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    >>> sim = dnnplace.simulate(w, dnnplace.solve(w).split, microbatches=16)
    >>> round(sim.time_per_sample, 3)
    107.004
    """
    from dnnplace.simulation.pipeline import simulate as _simulate

    return _simulate(workload, split, schedule=schedule, microbatches=microbatches, overlap_comm=overlap_comm)


def write_report(workload: Workload, split: Split, path: PathLike, *, title: str | None = None,
                 microbatches: int = 8, schedule: str = "1f1b", overlap_comm: bool = False,
                 inputs: Iterable[PathLike | None] = ()) -> Path:
    """Write a self-contained HTML report (summary, devices, graph, cut tensors, timeline), atomically.

    Examples
    --------
    >>> import dnnplace, tempfile, os
    >>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    >>> p = dnnplace.write_report(w, dnnplace.solve(w).split, os.path.join(tempfile.mkdtemp(), "r.html"))
    >>> p.read_text().startswith("<!DOCTYPE html>")
    True
    """
    from dnnplace.report.html import write_report as _write_report

    return _write_report(workload, split, path, title=title, microbatches=microbatches, schedule=schedule,
                         overlap_comm=overlap_comm, inputs=inputs)


# --------------------------------------------------------------------- PyTorch
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
    accelerators, cpus : int
        The device budget written into the workload.

    Examples
    --------
    >>> import torch, dnnplace
    >>> net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    >>> w = dnnplace.profile(net, (torch.randn(16, 64),), device="a100", accelerators=2, repeats=1)
    >>> w.n, w.max_accelerators
    (3, 2)
    """
    from dnnplace.frontends.torch_model.capture import capture
    from dnnplace.frontends.torch_model.loader import load_factory, require_torch
    from dnnplace.frontends.torch_model.profile import build_workload_dict

    require_torch()
    spec = ""
    if isinstance(model, str):
        spec = model
        loaded = load_factory(model)
        model, args, kwargs = loaded.model, loaded.args, loaded.kwargs
    args = args if isinstance(args, tuple) else (args,)
    cap = capture(model, args, granularity=granularity, kwargs=kwargs)
    doc = build_workload_dict(cap, cap.inputs, training=training, device=device, accelerators=accelerators,
                              cpus=cpus, devices_file=str(devices_file) if devices_file else None, spec=spec,
                              repeats=repeats, link=link)
    return paper_json.parse_workload(doc, source=spec or type(model).__name__)


def run(model: str, split: Split | PathLike, *, workload: Workload | None = None, training: bool = False,
        microbatches: int = 16, backend: str = "gloo", schedule: str = "1f1b", steps: int = 3,
        optimizer: str = "sgd", lr: float = 0.01, predicted_max_load: float | None = None) -> dict[str, Any] | None:
    """Run a split for real: one process per device on torch.distributed, checked against the unsplit model.

    Forward only, or ``training=True``: forward and backward per stage with exact
    gradients, ``schedule`` 1f1b or gpipe, one optimizer step per ``microbatches``.
    ``split`` may be a path: without ``workload``, the ``maxLoad`` written in the
    file is the prediction.  Returns the measured and predicted numbers (ms, bytes) and the checks
    (``outputs_match``; for training ``loss_match`` and ``params_match``); under
    torchrun only rank 0 returns, the other ranks return None.

    Examples
    --------
    >>> import dnnplace
    >>> spec = "examples/mlp_skip.py:build"
    >>> w = dnnplace.profile(spec, device="a100", repeats=1)
    >>> res = dnnplace.run(spec, dnnplace.solve(w).split, workload=w, microbatches=4)
    >>> res["outputs_match"]
    True
    """
    from dnnplace.runtime.launch import run_pipeline, run_training
    from dnnplace.utils.files import read_json_file

    if not isinstance(split, Split):
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


def export(workload: Workload, split: Split, *, to: str = "stages", model: str | None = None) -> dict | str:
    """Export a split of a profiled workload for other runtimes.

    ``to="stages"``: the stage list (device, node ids, fx nodes, modules);
    ``to="torch-pipelining"``: the split points for ``torch.distributed.pipelining``
    (chain-shaped splits); ``to="torch-pipelining-script"``: a runnable torchrun
    training script for ``model`` (default: the spec the workload was profiled from).

    Examples
    --------
    >>> import dnnplace
    >>> w = dnnplace.profile("examples/mlp_skip.py:build", device="a100", repeats=1)
    >>> doc = dnnplace.export(w, dnnplace.solve(w).split)
    >>> [len(s["nodeIds"]) > 0 for s in doc["stages"]]
    [True, True]
    """
    from dnnplace.runtime.export import export_pipelining, export_stages, pipelining_script

    if to == "stages":
        return export_stages(workload, split)
    if to == "torch-pipelining":
        return export_pipelining(workload, split)
    if to == "torch-pipelining-script":
        return pipelining_script(workload, split, model)
    raise DnnplaceError(f"unknown export format '{to}'; choose stages, torch-pipelining or torch-pipelining-script")


# ---------------------------------------------------------------- Piper's model
def load_piper(path: PathLike, *, bert_layers: int | None = None) -> PiperInstance:
    """Read a workload in Piper's format (recognised by its ``TMPCs``); ``bert_layers`` builds BERT-L from BERT-32.

    Examples
    --------
    >>> import dnnplace
    >>> inst = dnnplace.load_piper(dnnplace.example_path("toy_a_knapsack"))
    >>> inst.n > 0
    True
    """
    from dnnplace.frontends.piper_json import bert_l
    from dnnplace.frontends.piper_json import load_piper as _load

    inst = _load(path)
    return bert_l(inst, bert_layers) if bert_layers is not None else inst


def solve_piper(instance: PiperInstance, *, accelerators: int | None = None, memory: float | None = None,
                bandwidth: float | None = None, batch: int | None = None, time_limit: float | None = None,
                progress: ProgressFn | None = None) -> PiperResult:
    """The exact optimum of Piper's model: stages x data x tensor parallelism x TMPCs (recomputation).

    The keyword arguments override the instance's ``maxDevices``, ``maxMemoryPerDevice``,
    ``bandwidth`` and ``mbsInBatch``.  The plan is judged by Piper's evaluator
    (``result.evaluation``); an infeasible instance raises :class:`~dnnplace.InfeasibleError`
    naming the binding constraint.  A run stopped by ``time_limit`` (seconds)
    returns the best plan found with ``status`` ``"time_limit"`` and a proven
    lower ``bound``, or raises :class:`~dnnplace.errors.SolverTimeout` (a
    :class:`~dnnplace.DnnplaceError`) if it found none;
    ``progress(done, total, what)`` is called about every 50 ms of a DP run.

    Examples
    --------
    >>> import dnnplace
    >>> res = dnnplace.solve_piper(dnnplace.load_piper(dnnplace.example_path("toy_a_knapsack")))
    >>> res.status, res.tps
    ('optimal', 5.0)
    """
    from dnnplace.solvers.piper.solver import solve_piper as _solve
    from dnnplace.solvers.piper.solver import warm_up

    warm_up()  # loading the compiled kernels is start-up cost, not solving time
    inst = instance.with_overrides(devices=accelerators, memory=memory, bandwidth=bandwidth, batch=batch)
    return _solve(inst, time_limit=time_limit, progress=progress)


def evaluate_piper(instance: PiperInstance, plan: PiperPlan) -> PiperEvaluation:
    """Piper's checker (PIPER-SPEC section 5) on a plan: time per sample, per-stage memory, feasibility."""
    from dnnplace.evaluation.piper import evaluate_piper as _evaluate_piper

    return _evaluate_piper(instance, plan)


def save_piper_plan(instance: PiperInstance, plan: PiperPlan, path: PathLike) -> None:
    """Write a Piper plan (stages with replicas, width and TMPCs), atomically."""
    from dnnplace.evaluation.piper import save_plan

    save_plan(instance, plan, path)


def load_piper_plan(instance: PiperInstance, path: PathLike) -> PiperPlan:
    """Read a Piper plan for ``instance`` (one-line errors for malformed plans)."""
    from dnnplace.evaluation.piper import load_plan

    return load_plan(instance, path)
