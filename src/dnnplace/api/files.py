"""Reading and writing what dnnplace plans: workloads of every model, their plans, budgets, bundled examples.

Each reader reads its file once; :func:`load_with_plan` gives an LLM plan file's problem and plan
together, so a command judging such a file never reads it twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dnnplace.api.models import (
    Instance,
    check_declared,
    check_plan,
    model_of,
    model_of_file,
    model_of_path,
    paper_instance,
)
from dnnplace.core.limits import MAX_COUNT, MAX_VALUE
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.rules import CROSS_ENTROPIES
from dnnplace.models.llm.spec import PRECISIONS
from dnnplace.models.paper import paper_json
from dnnplace.models.paper.evaluation import Evaluation
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload
from dnnplace.utils.params import (
    boolean,
    choice,
    instance_of,
    integer,
    optional,
    path_like,
    paths,
    real,
    text,
    validate_params,
)

if TYPE_CHECKING:
    from dnnplace.models.piper.spec import PiperPlan

__all__ = ["example_path", "load", "load_plan", "load_split", "load_with_plan", "load_workload", "plan_document",
           "plan_notes", "save_plan", "save_split", "save_workload", "with_budget"]

PathLike = str | Path
_DATA = Path(__file__).resolve().parents[1] / "data"
_PATH = path_like()


@validate_params(name=text(200))
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


@validate_params(path=_PATH, check_feasible=boolean())
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


@validate_params(path=_PATH, inputs=paths())
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


@validate_params(path=_PATH)
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


@validate_params(split=instance_of(Split, what="a Split (a Piper plan: save_plan)"), path=_PATH, inputs=paths())
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


_LOAD = {"path": _PATH, "bert_layers": optional(integer(1, MAX_COUNT)), "gpus": optional(integer(1)),
         "seq_len": optional(integer(1)), "global_batch": optional(integer(1)), "gpus_per_node": optional(integer(1)),
         "device": optional(text(64)), "system": optional(text(64)), "precision": optional(choice(*PRECISIONS)),
         "cross_entropy": optional(choice(*CROSS_ENTROPIES))}


@validate_params(**_LOAD)
def load(path: PathLike, *, bert_layers: int | None = None, gpus: int | None = None, seq_len: int | None = None,
         global_batch: int | None = None, gpus_per_node: int | None = None, device: str | None = None,
         system: str | None = None, precision: str | None = None, cross_entropy: str | None = None) -> Instance:
    """Read an instance of any planned model, once, from what the file is.

    A paper workload; Piper's (its nodes carry ``TMPCs``; ``bert_layers`` builds BERT-L from
    ``bert32a100.json``); an LLM plan file (as its :class:`~dnnplace.models.llm.spec.LLMProblem`);
    or a Hugging Face ``config.json`` (a folder holding one, or ``file.py:fn``) with ``gpus``,
    ``seq_len``, ``global_batch`` and optionally ``gpus_per_node``, ``device`` or ``system``, and
    ``precision`` and ``cross_entropy`` (what :func:`~dnnplace.load_llm` takes).  An option of another model is refused
    by name.

    Examples
    --------
    >>> import dnnplace
    >>> type(dnnplace.load(dnnplace.example_path("gnmt_training"))).__name__
    'Workload'
    >>> type(dnnplace.load(dnnplace.example_path("toy_a_knapsack"))).__name__
    'PiperInstance'
    """
    return load_with_plan(path, bert_layers=bert_layers, gpus=gpus, seq_len=seq_len, global_batch=global_batch,
                          gpus_per_node=gpus_per_node, device=device, system=system, precision=precision,
                          cross_entropy=cross_entropy)[0]


@validate_params(**_LOAD)
def load_with_plan(path: PathLike, *, bert_layers: int | None = None, gpus: int | None = None,
                   seq_len: int | None = None, global_batch: int | None = None, gpus_per_node: int | None = None,
                   device: str | None = None, system: str | None = None,
                   precision: str | None = None, cross_entropy: str | None = None) -> tuple[Instance, Any]:
    """The instance a file holds and the plan it carries (an LLM plan file's; None otherwise), read once.

    A command that judges an LLM plan file alone needs both: reading the file a second time for the
    plan would parse and validate it twice.
    """
    from dnnplace.utils.files import read_json_file

    given = {"bert_layers": bert_layers, "gpus": gpus, "seq_len": seq_len, "global_batch": global_batch,
             "gpus_per_node": gpus_per_node, "device": device, "system": system, "precision": precision,
             "cross_entropy": cross_entropy}
    by_path = model_of_path(str(path))  # a folder or file.py:fn: no JSON file to decode here
    doc = None if by_path is not None else read_json_file(path)
    m = by_path or model_of_file(doc)
    options = {k: v for k, v in given.items() if v is not None}
    check_declared(m, "load_options", options)  # before the parse, as it costs
    assert m.read is not None, m.name
    return m.read(doc, str(path), **options)


@validate_params(accelerators=optional(integer(0, MAX_COUNT)), cpus=optional(integer(0, MAX_COUNT)),
                 memory=optional(real(0, MAX_VALUE)), bandwidth=optional(real(0, MAX_VALUE, lo_open=True)),
                 batch=optional(integer(1, MAX_COUNT)))
def with_budget(instance: Instance, *, accelerators: int | None = None, cpus: int | None = None,
                memory: float | None = None, bandwidth: float | None = None, batch: int | None = None) -> Instance:
    """The instance with some of its budget replaced (``None``: keep the file's); checked like the file.

    Accelerators and memory apply to both models; CPU cores to the paper's; bandwidth and the
    batch (micro-batches per batch) to Piper's.  An option the model does not have is an error.
    """
    m = model_of(instance)
    budget = {"accelerators": accelerators, "cpus": cpus, "memory": memory, "bandwidth": bandwidth, "batch": batch}
    check_declared(m, "budget_options", budget)
    return m.with_budget(instance, **budget)


@validate_params(path=_PATH)
def load_plan(instance: Instance, path: PathLike) -> tuple[Instance, Split | PiperPlan]:
    """Read a plan for ``instance``: a split (paper) or a Piper plan; one-line errors for malformed files.

    Returns the instance to judge it under and the plan: ``instance`` itself, except that a Piper
    plan made for BERT-L (``bertLayers``) builds that graph.  The devices, memory, bandwidth and
    batch a Piper plan records are not used: :func:`plan_notes` says where they differ.
    """
    from dnnplace.utils.files import read_json_file

    return model_of(instance).read_plan(instance, read_json_file(path), str(path))


@validate_params(overlap_comm=boolean())
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


@validate_params(path=_PATH, inputs=paths())
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


