"""The serving planner's entry points: a problem from a Hugging Face config and a fleet, a plan for an engine.

The problem is then solved, evaluated, simulated and reported by the same functions as every model;
these two are what the serving model alone has (its inputs, and its exports to five engines).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dnnplace.models.serving.spec import ServingProblem
from dnnplace.utils.params import path_like, text, validate_params

__all__ = ["export_serving_plan", "load_serving", "serving_export_note"]

PathLike = str | Path


@validate_params(model=path_like())
def load_serving(model: PathLike, **options: Any) -> ServingProblem:
    """A serving problem: a Hugging Face ``config.json`` (or its folder) on a fleet under a workload.

    ``options`` are :func:`dnnplace.models.serving.load.problem`'s: ``gpus="2xa100-80g+2xl40s"`` or
    ``fleet="fleet.toml"``, ``isl``, ``osl``, ``rate`` or ``concurrency``, ``ttft_ms``, ``tpot_ms`` (with
    ``ttft_stat`` / ``tpot_stat``: ``mean``, ``p50`` or ``p99``),
    ``engine``, ``precision``, ``kv_dtype``, ``max_model_len``, ``lengths`` (a request-length distribution file
    instead of ``isl`` / ``osl``); each checked there, one line naming it.

    Examples
    --------
    >>> import dnnplace
    >>> pr = dnnplace.load_serving("examples/serving/llama3.1-8b.json", gpus="2xa100-80g+2xl40s")
    >>> sol = dnnplace.solve(pr, tp=1)
    >>> sol.plan.config.replicas[0].tp, sol.evaluation.fits
    (1, True)
    """
    from dnnplace.models.serving.load import problem

    return problem(model, **options)


@validate_params(path=path_like(), to=text(64), model=text(4096))
def export_serving_plan(path: PathLike, to: str, model: str = "MODEL", disaggregated: bool = False) -> str:
    """A serving plan file as the engine ``to`` takes it: ``vllm``, ``sglang``, ``trtllm``, ``llama.cpp`` or ``hf``
    (``model``: the checkpoint the command names; ``disaggregated``: the plan's prefill/decode what-if)."""
    from dnnplace.models.serving.exporters import export
    from dnnplace.models.serving.plan_file import read_serving_plan
    from dnnplace.utils.files import read_json_file

    problem, plan = read_serving_plan(read_json_file(path), str(path))
    return export(problem, plan, to, model, disaggregated)


@validate_params(path=path_like(), to=text(64))
def serving_export_note(path: PathLike, to: str) -> str | None:
    """The line to show beside exporting the serving plan file ``path`` to engine ``to`` (None: nothing to say):
    a plan priced for another engine says its figures are not ``to``'s."""
    from dnnplace.models.serving.exporters import priced_for_another
    from dnnplace.models.serving.plan_file import read_serving_plan
    from dnnplace.utils.files import read_json_file

    problem, _ = read_serving_plan(read_json_file(path), str(path))
    return priced_for_another(problem, to)
