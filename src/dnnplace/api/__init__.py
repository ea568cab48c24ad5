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

from dnnplace.api.models import MODELS, check_plan, model_of, paper_instance, refuse
from dnnplace.errors import DnnplaceError
from dnnplace.evaluation import Evaluation
from dnnplace.evaluation import evaluate as _evaluate
from dnnplace.frontends import paper_json
from dnnplace.model.llm import LLMProblem
from dnnplace.model.piper import PiperInstance
from dnnplace.model.split import Split
from dnnplace.model.validate import check_feasibility
from dnnplace.model.workload import Workload
from dnnplace.solvers import RunContext, Solver, make_solver, resolve_method
from dnnplace.solvers import methods as _methods
from dnnplace.solvers.base import ProgressFn
from dnnplace.solvers.dp.lattice_info import LatticeStep

if TYPE_CHECKING:
    from dnnplace.model.piper import PiperPlan
    from dnnplace.runtime.results import RunResult

__all__ = ["Instance", "LatticeStep", "Solution", "WorkloadInfo", "default_method", "evaluate", "example_path",
           "export", "export_llm_plan", "info", "load", "load_llm", "load_plan", "load_split", "load_workload",
           "methods", "piper_document", "plan_document", "plan_notes", "profile", "run", "save_plan", "save_split",
           "save_workload", "simulate", "solve", "with_budget", "with_runtime", "write_report"]

#: An instance of a model dnnplace plans: the paper's workload, Piper's, or an LLM training problem.
Instance = Workload | PiperInstance | LLMProblem

PathLike = str | Path
_DATA = Path(__file__).resolve().parents[1] / "data"
OPTIMAL_GAP = 1e-9  # a solution is "optimal" only when its relative gap to the proven bound is at most this
SOLVER_TOLERANCE = 1e-6  # a solver's own "gap zero" differs from the evaluator's exact sums by at most this


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
    paper_json.save_workload(paper_instance(workload, "save_workload"), path, inputs=tuple(inputs))


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
    if not isinstance(split, Split):
        raise DnnplaceError(f"save_split expects a Split, got {type(split).__name__} (a Piper plan: save_plan)")
    paper_json.save_split(split, path, evaluation, inputs=tuple(inputs))


def load(path: PathLike, *, bert_layers: int | None = None) -> Instance:
    """Read a workload of any planned model, once: Piper's (its nodes carry ``TMPCs``) or the paper's.

    ``bert_layers`` builds BERT-L from Piper's ``bert32a100.json`` (Piper workloads only).

    Examples
    --------
    >>> import dnnplace
    >>> type(dnnplace.load(dnnplace.example_path("gnmt_training"))).__name__
    'Workload'
    >>> type(dnnplace.load(dnnplace.example_path("toy_a_knapsack"))).__name__
    'PiperInstance'

    An LLM plan file (from ``dnnplace plan``) loads as its :class:`~dnnplace.model.llm.LLMProblem`.
    """
    from dnnplace.frontends.piper_json import bert_l, is_piper_json, parse_piper
    from dnnplace.utils.files import read_json_file

    doc = read_json_file(path)
    if isinstance(doc, dict) and doc.get("format") == "dnnplace.llm-plan":
        from dnnplace.frontends.llm_plan import read_llm_plan

        refuse("bert_layers", bert_layers, None, "piper")
        return read_llm_plan(doc, str(path)).problem
    if is_piper_json(doc):
        inst = parse_piper(doc, source=str(path))
        return bert_l(inst, bert_layers) if bert_layers is not None else inst
    refuse("bert_layers", bert_layers, None, "piper")
    return paper_json.parse_workload(doc, source=str(path))


def load_llm(model: PathLike, *, gpus: int, seq_len: int, global_batch: int, gpus_per_node: int = 8,
             device: str = "h100", precision: str = "bf16") -> LLMProblem:
    """An LLM training problem: a Hugging Face ``config.json`` (or its folder, or ``file.py:fn``) on a cluster.

    The architecture is read without weights; the device's figures come from the catalogue
    (``docs/catalogue.md``).

    Examples
    --------
    >>> import dnnplace
    >>> pr = dnnplace.load_llm("examples/llm/llama3.1-8b.json", gpus=8, seq_len=8192, global_batch=128)
    >>> sol = dnnplace.solve(pr, cp=2, tp=1, pp=1, mbs=1, recompute="none")
    >>> sol.plan.config.dp, sol.status, round(sol.value, 1) > 0
    (4, 'optimal', True)
    """
    from dnnplace.frontends.hf_config import load_arch
    from dnnplace.frontends.moe_config import is_moe_config, load_moe
    from dnnplace.model.catalogue import device_spec
    from dnnplace.model.llm import Cluster, TrainingJob

    moe = load_moe(str(model)) if is_moe_config(str(model)) else None
    return LLMProblem(moe.arch if moe else load_arch(str(model)), Cluster(device.lower(), gpus, gpus_per_node),
                      TrainingJob(seq_len, global_batch, precision), device_spec(device), moe=moe)


def with_budget(instance: Instance, *, accelerators: int | None = None, cpus: int | None = None,
                memory: float | None = None, bandwidth: float | None = None, batch: int | None = None) -> Instance:
    """The instance with some of its budget replaced (``None``: keep the file's); checked like the file.

    Accelerators and memory apply to both models; CPU cores to the paper's; bandwidth and the
    batch (micro-batches per batch) to Piper's.  An option the model does not have is an error.
    """
    from dnnplace.model.limits import check_budget

    model_of(instance)
    check_budget(accelerators, cpus, memory)
    if isinstance(instance, LLMProblem):
        if any(v is not None for v in (accelerators, cpus, memory, bandwidth, batch)):
            raise DnnplaceError("an LLM training problem takes its GPUs and batch from load_llm (--gpus,"
                                " --global-batch), not budget overrides")
        return instance
    if isinstance(instance, PiperInstance):
        refuse("cpus", cpus, None, "paper")
        return instance.with_overrides(devices=accelerators, memory=memory, bandwidth=bandwidth, batch=batch)
    refuse("bandwidth", bandwidth, None, "piper")
    refuse("batch", batch, None, "piper")
    return instance.with_budget(accelerators, cpus, memory)


def load_plan(instance: Instance, path: PathLike) -> tuple[Instance, Split | PiperPlan]:
    """Read a plan for ``instance``: a split (paper) or a Piper plan; one-line errors for malformed files.

    Returns the instance to judge it under and the plan: ``instance`` itself, except that a Piper
    plan made for BERT-L (``bertLayers``) builds that graph.  The devices, memory, bandwidth and
    batch a Piper plan records are not used: :func:`plan_notes` says where they differ.
    """
    from dnnplace.utils.files import read_json_file

    return model_of(instance).read_plan(instance, read_json_file(path), str(path))


def plan_notes(instance: Instance, plan: Split | PiperPlan, *, overlap_comm: bool = False) -> list[str]:
    """What the plan file records but the judgement does not use, one line each (empty when nothing).

    A Piper plan records the devices, memory, bandwidth and batch it was made for; it is judged under
    the instance's (the workload file's, with any overrides).  A split may record ``overlapComm``.
    """
    return check_plan(instance, plan).plan_notes(instance, plan, overlap_comm=overlap_comm)


def plan_document(instance: Instance, plan: Split | PiperPlan, evaluation: Any = None) -> dict[str, Any]:
    """The plan file's content (the paper's split format, or dnnplace's Piper plan format)."""
    m = check_plan(instance, plan)
    return m.plan_document(instance, plan, evaluation if evaluation is not None else m.evaluate(instance, plan))


def save_plan(instance: Instance, plan: Split | PiperPlan, path: PathLike, evaluation: Any = None, *,
              inputs: Iterable[PathLike | None] = ()) -> None:
    """Write a plan atomically (never over one of ``inputs``, never through a link).

    Examples
    --------
    >>> import dnnplace, tempfile, os
    >>> inst = dnnplace.load(dnnplace.example_path("toy_a_knapsack"))
    >>> sol = dnnplace.solve(inst)
    >>> out = os.path.join(tempfile.mkdtemp(), "plan.json")
    >>> dnnplace.save_plan(inst, sol.plan, out, sol.evaluation)
    >>> _, plan = dnnplace.load_plan(inst, out)
    >>> dnnplace.evaluate(inst, plan).tps
    5.0
    """
    from dnnplace.utils.files import write_json_atomic

    write_json_atomic(path, plan_document(instance, plan, evaluation), inputs=tuple(inputs))


# ----------------------------------------------------------------------- solve
@dataclass(frozen=True)
class Solution:
    """A solved instance: the plan (with its metadata) and the evaluator's verdict on it.

    ``plan`` is a :class:`~dnnplace.Split` for the paper's model, a Piper plan for Piper's
    (``split`` is its name in the paper's model).  ``value`` is the evaluator's value of the
    objective; ``status`` says what was proven (``optimal``, ``bounded``: within ``gap`` of
    the proven ``bound``, ``time_limit``, ``feasible``, ``heuristic``).
    """

    plan: Any
    evaluation: Any  # an Evaluation, or a PiperEvaluation
    method: str
    objective: str
    value: float
    status: str
    bound: float | None
    gap: float | None
    runtime_s: float
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def split(self) -> Split:
        """The plan of a paper workload: which accelerator or CPU core runs each node."""
        if not isinstance(self.plan, Split):
            raise DnnplaceError(f"this solution holds a {type(self.plan).__name__}, not a split; use .plan")
        return self.plan


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
    workload: Instance,
    method: str | Solver | None = None,
    *,
    objective: str = "throughput",
    time_limit: float | None = None,
    overlap_comm: bool = False,
    progress: ProgressFn | None = None,
    **params: Any,
) -> Solution:
    """Plan ``workload`` with a method; the plan is re-checked by its model's evaluator.

    Parameters
    ----------
    workload : Workload or PiperInstance
    method : str or Solver, optional
        A name from :func:`methods` (one that plans this model) or a configured solver
        instance; by default ``dp`` for the paper's workloads, ``piper`` for Piper's.
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
    >>> dnnplace.solve(dnnplace.load(dnnplace.example_path("toy_a_knapsack"))).value
    5.0
    """
    model = model_of(workload)
    if method is None:
        method = model.default_method
    if isinstance(method, Solver):
        if resolve_method(method.name, objective) != method.name:
            raise DnnplaceError(f"method '{method.name}' does not optimise '{objective}'")
        method.check_names(params)
        solver = type(method)(**{**method.get_params(), **params})
    else:
        name = resolve_method(method, objective)
        solver = make_solver(name, **params)  # unknown parameters: an error naming the valid ones
    if solver.model != model.name:
        others = ", ".join(n for n, c in _methods().items() if c.model == model.name)
        raise DnnplaceError(f"method '{solver.name}' plans {MODELS[solver.model].describe}, not"
                            f" {model.describe}; methods for it: {others}")
    if not isinstance(workload, Workload):
        refuse("overlap_comm", overlap_comm, False, "paper")
    elif objective == "latency":
        # the latency model has as many CPU cores as it needs; maxCPUs does not bind
        workload = workload.with_budget(cpus=max(workload.max_cpus, workload.n))
    solver.warm_up()  # loading compiled code is start-up cost, not solving time
    t0 = time.perf_counter()
    if isinstance(workload, Workload):
        check_feasibility(workload)
    out = solver.solve(workload, RunContext(objective=objective, time_limit=time_limit, overlap_comm=overlap_comm,
                                            progress=progress))
    if isinstance(workload, Workload):
        ev = _evaluate(workload, out.plan, overlap_comm=overlap_comm, complete=False)
    else:
        ev = model.evaluate(workload, out.plan)
    value = ev.value(objective)
    bound = out.bound
    if bound is not None and not np.isfinite(bound):
        bound = None  # e.g. HiGHS stopped before its root LP: nothing was proven
    if bound is not None and out.status == "optimal":
        bound = min(bound, value)  # the evaluator's exact sum is the optimum's value
        if np.isfinite(value) and value - bound <= SOLVER_TOLERANCE * max(abs(value), 1.0):
            # the solver proved a zero gap on its own numbers (HiGHS's feasibility tolerance is 1e-6
            # absolute): the evaluator's exact value is the optimum
            bound = value
    gap = None
    if bound is not None and np.isfinite(value) and value > 0:
        gap = max(0.0, (value - bound) / value)
    status = out.status
    if status == "optimal" and gap is not None and gap > OPTIMAL_GAP:
        status = "bounded"  # "optimal" within a tolerance is not optimal: say what was proven
    runtime = time.perf_counter() - t0
    meta: dict[str, Any] = {"method": solver.name if isinstance(method, Solver) else method,
                            "objective": objective, "objectiveValue": value, "status": status,
                            "feasible": ev.feasible, "runtime_s": round(runtime, 6)}
    if objective == "latency":
        meta["totalLatency"] = value
    if bound is not None:
        meta["bound"] = bound
        meta["gap"] = gap
    if overlap_comm:
        meta["overlapComm"] = True
    if isinstance(out.plan, Split):
        plan: Any = out.plan.with_meta(**meta)
    else:
        plan = out.plan
        if hasattr(plan, "meta"):  # an LLM plan records its own status, bound and gap
            plan.meta.update(meta)
    return Solution(plan, ev, meta["method"], objective, value, status, bound, gap, runtime, dict(out.stats))


def default_method(instance: Instance) -> str:
    """The method ``solve`` uses for ``instance`` when none is named (``dp``, or ``piper`` for Piper's model)."""
    return model_of(instance).default_method


def with_runtime(solution: Solution, runtime_s: float) -> Solution:
    """The solution with its ``runtime_s`` (and the plan's) replaced: a command counts its reading time too."""
    from dataclasses import replace

    plan = solution.plan
    if isinstance(plan, Split):
        plan = plan.with_meta(runtime_s=round(runtime_s, 6))
    elif hasattr(plan, "meta"):
        plan.meta["runtime_s"] = runtime_s
    else:
        plan = replace(plan, runtime_s=runtime_s)
    return replace(solution, plan=plan, runtime_s=runtime_s)


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

    workload = paper_instance(workload, "info")
    steps = lattice_steps(workload, max(cap, max_ideals))
    return WorkloadInfo(tuple(steps), default_path(steps, max_ideals))


# -------------------------------------------------------------- judge and show
def evaluate(workload: Instance, split: Any, *, overlap_comm: bool = False, source: str = "split") -> Any:
    """Judge a plan with its model's one cost model.

    A split of a paper workload: per-device loads and memory, max-load, latency, violations
    (an :class:`~dnnplace.Evaluation`).  A Piper plan: Piper's checker (per stage time and
    memory, time per sample).

    ``source`` names the split in error messages (a node it places that the workload lacks).

    Examples
    --------
    >>> import dnnplace
    >>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    >>> ev = dnnplace.evaluate(w, dnnplace.solve(w).split)
    >>> round(ev.max_load, 3), ev.feasible
    (107.004, True)
    """
    return check_plan(workload, split).evaluate(workload, split, overlap_comm=overlap_comm, source=source)


def simulate(workload: Instance, split: Any, *, schedule: str = "1f1b", microbatches: int = 32,
             overlap_comm: bool = False) -> Any:
    """Simulate microbatches through the pipeline (``1f1b`` or ``gpipe``): time per sample, bubbles, trace.

    A Piper plan streams under 1F1B: the fill, then the bottleneck stage's period per microbatch.

    Examples
    --------
    >>> import dnnplace
    >>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    >>> sim = dnnplace.simulate(w, dnnplace.solve(w).split, microbatches=16)
    >>> round(sim.time_per_sample, 3)
    107.004
    """
    _check_stream(schedule, microbatches)
    return check_plan(workload, split).simulate(workload, split, schedule=schedule, microbatches=microbatches,
                                       overlap_comm=overlap_comm)


def _check_stream(schedule: Any, microbatches: Any) -> None:
    """The schedule and microbatch count of a simulation or a report's timeline, checked up front
    (``None`` microbatches: the plan's own, an LLM plan's; other models refuse it)."""
    if microbatches is None:
        return
    if schedule not in ("1f1b", "gpipe"):
        raise DnnplaceError(f"schedule must be '1f1b' or 'gpipe', got {schedule!r:.40}")
    if isinstance(microbatches, bool) or not isinstance(microbatches, (int, np.integer)) or microbatches < 1:
        raise DnnplaceError(f"microbatches must be a whole number >= 1, got {microbatches!r:.40}")


def write_report(workload: Instance, split: Any, path: PathLike, *, title: str | None = None,
                 microbatches: int = 8, schedule: str = "1f1b", overlap_comm: bool = False,
                 inputs: Iterable[PathLike | None] = ()) -> Path:
    """Write a self-contained HTML report atomically (never over one of ``inputs``, never through a link).

    A split: summary, devices, graph, cut tensors, timeline.  A Piper plan: per stage replicas,
    width, time and memory.

    Examples
    --------
    >>> import dnnplace, tempfile, os
    >>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    >>> p = dnnplace.write_report(w, dnnplace.solve(w).split, os.path.join(tempfile.mkdtemp(), "r.html"))
    >>> p.read_text().startswith("<!DOCTYPE html>")
    True
    """
    _check_stream(schedule, microbatches)
    options: dict[str, Any] = {"microbatches": microbatches, "schedule": schedule, "overlap_comm": overlap_comm}
    return check_plan(workload, split).write_report(workload, split, path, title=title, inputs=inputs, **options)


# --------------------------------------------------------------------- PyTorch
def piper_document(workload: Workload, *, source: str = "profile") -> dict[str, Any]:
    """A profiled training workload in Piper's format (one layer per node, t = 1, vanilla and recompute).

    The document is checked by Piper's own reader before it is returned.
    """
    from dnnplace.frontends.piper_json import parse_piper
    from dnnplace.frontends.torch_model.piper_export import paper_training_to_piper

    workload = paper_instance(workload, "piper_document")
    doc = paper_training_to_piper(paper_json.workload_to_dict(workload))
    parse_piper(doc, source=source)
    return doc



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

    workload = paper_instance(workload, "export")
    if not isinstance(split, Split):
        raise DnnplaceError(f"export expects a Split, got {type(split).__name__}")
    if to == "stages":
        return export_stages(workload, split)
    if to == "torch-pipelining":
        return export_pipelining(workload, split)
    if to == "torch-pipelining-script":
        return pipelining_script(workload, split, model)
    raise DnnplaceError(f"unknown export format '{to}'; choose stages, torch-pipelining or torch-pipelining-script")


def export_llm_plan(path: PathLike, to: str) -> str:
    """An LLM plan file in the format of a trainer: ``megatron``, ``torchtitan`` or ``deepspeed``.

    The plan is validated first (every value written into the output is checked or escaped).
    """
    from dnnplace.exporters import export as _export
    from dnnplace.frontends.llm_plan import load_plan as _load_llm_plan

    return _export(_load_llm_plan(path), to)
