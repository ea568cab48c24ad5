"""Judging and showing a plan: its model's evaluator, its simulator and its HTML report.

Options a model does not have are refused by its entry's declarations (:func:`~dnnplace.api.models.check_declared`);
an option left at None takes that model's default (an LLM plan brings its own schedule and
micro-batches), so each function works with its default arguments on every model.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dnnplace.api.models import Instance, check_declared, check_plan
from dnnplace.utils.params import boolean, choice, integer, optional, path_like, paths, real, text, validate_params

__all__ = ["evaluate", "simulate", "write_report"]

PathLike = str | Path
_SCHEDULE = optional(choice("1f1b", "gpipe"))
_MICROBATCHES = optional(integer(1))


def _given(defaults: Any, **options: Any) -> dict[str, Any]:
    """The options the caller set, over the model's defaults for those left at None."""
    return {**defaults, **{k: v for k, v in options.items() if v is not None}}


@validate_params(overlap_comm=boolean(), source=text())
def evaluate(workload: Instance, split: Any, *, overlap_comm: bool = False, source: str = "split") -> Any:
    """Judge a plan with its model's one cost model.

    A split of a paper workload: per-device loads and memory, max-load, latency, violations
    (an :class:`~dnnplace.Evaluation`).  A Piper plan: Piper's checker (per stage time and
    memory, time per sample).  An LLM plan: the step time, memory and MFU of its configuration.

    ``source`` names the split in error messages (a node it places that the workload lacks).

    Examples
    --------
    >>> import dnnplace
    >>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    >>> ev = dnnplace.evaluate(w, dnnplace.solve(w).split)
    >>> round(ev.max_load, 3), ev.feasible
    (107.004, True)
    """
    m = check_plan(workload, split)
    check_declared(m, "evaluate_options", {"overlap_comm": overlap_comm or None})
    return m.evaluate(workload, split, overlap_comm=overlap_comm, source=source)


@validate_params(schedule=_SCHEDULE, microbatches=_MICROBATCHES, overlap_comm=boolean(),
                 rate=optional(real(0, 1e9, lo_open=True)), requests=optional(integer(1, 10_000_000)),
                 offline=boolean(), concurrency=optional(integer(1, 1_000_000)))
def simulate(workload: Instance, split: Any, *, schedule: str | None = None, microbatches: int | None = None,
             overlap_comm: bool = False, rate: float | None = None, requests: int | None = None,
             offline: bool = False, concurrency: int | None = None) -> Any:
    """Simulate microbatches through the pipeline (``1f1b`` or ``gpipe``): time per sample, bubbles, trace.

    ``None`` takes the model's default: 1F1B over 64 microbatches for a split or a Piper plan
    (a Piper plan streams under 1F1B only: the fill, then the bottleneck stage's period per
    microbatch); an LLM plan's own schedule (1F1B or interleaved) and number of micro-batches.
    A serving plan streams ``requests`` requests (None: 2,000) at ``rate`` requests/s (None: its
    workload's rate), with ``offline`` all at once, as an offline benchmark runs them, or from
    ``concurrency`` closed-loop clients (None: its workload's concurrency where it has one and no rate).

    Examples
    --------
    >>> import dnnplace
    >>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    >>> sim = dnnplace.simulate(w, dnnplace.solve(w).split, microbatches=16)
    >>> round(sim.time_per_sample, 3)
    107.004
    """
    m = check_plan(workload, split)
    check_declared(m, "simulate_options", {"schedule": schedule, "microbatches": microbatches,
                                           "overlap_comm": overlap_comm or None, "rate": rate,
                                           "requests": requests, "offline": offline or None,
                                           "concurrency": concurrency})
    options = _given(m.simulate_defaults, schedule=schedule, microbatches=microbatches, rate=rate,
                     requests=requests, offline=offline or None, concurrency=concurrency)
    return m.simulate(workload, split, overlap_comm=overlap_comm, **options)


@validate_params(path=path_like(), title=optional(text()), microbatches=_MICROBATCHES, schedule=_SCHEDULE,
                 overlap_comm=boolean(), inputs=paths())
def write_report(workload: Instance, split: Any, path: PathLike, *, title: str | None = None,
                 microbatches: int | None = None, schedule: str | None = None, overlap_comm: bool = False,
                 inputs: Iterable[PathLike | None] = ()) -> Path:
    """Write a self-contained HTML report atomically (never over one of ``inputs``, never through a link).

    A split: summary, devices, graph, cut tensors, timeline (``None``: 8 microbatches under 1F1B).
    A Piper plan: per stage replicas, width, time and memory.  An LLM plan: its configuration,
    prediction and simulated schedule.

    Examples
    --------
    >>> import dnnplace, tempfile, os
    >>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
    >>> p = dnnplace.write_report(w, dnnplace.solve(w).split, os.path.join(tempfile.mkdtemp(), "r.html"))
    >>> p.read_text().startswith("<!DOCTYPE html>")
    True
    """
    m = check_plan(workload, split)
    check_declared(m, "report_options", {"schedule": schedule, "microbatches": microbatches,
                                         "overlap_comm": overlap_comm or None})
    options = _given(m.report_defaults, microbatches=microbatches, schedule=schedule)
    return m.write_report(workload, split, path, title=title, inputs=inputs, overlap_comm=overlap_comm, **options)
