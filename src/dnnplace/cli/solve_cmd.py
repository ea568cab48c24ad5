"""``dnnplace solve``: plan an instance of any model with any registered method.

Its flags are generated: one per parameter a method declares (``--max-ideals``, ``--tp``) and one per
option a model's loader declares (``--gpus``, ``--bert-layers``); each is refused by name where it
does not apply.  ``dnnplace plan`` is the LLM planner's alias (its knobs pinned with ``--fix``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import typer

from dnnplace.cli.common import Method, Objective, emit_json
from dnnplace.cli.console import out, progress_bar, user_errors
from dnnplace.cli.options import method_params, model_flags, with_model_options, with_solver_options


@with_solver_options
@with_model_options
def solve(
    workload: Path = typer.Argument(..., help="Workload JSON (the paper's format or Piper's), or an LLM"
                                              " config.json (its folder, or file.py:fn) with --gpus, --seq-len,"
                                              " --global-batch."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write the plan here."),
    method: Optional[Method] = typer.Option(None, "--method", "-m", show_default=False,
                                            help="Placement method (see `dnnplace methods`) [default: dp for the"
                                                 " paper's workloads, piper for Piper's]."),
    objective: Objective = typer.Option(Objective.throughput, "--objective",
                                        help="throughput (max-load), latency, or fw+bw."),
    accelerators: Optional[int] = typer.Option(None, "--accelerators", "-k",
                                               help="Override the file's maxFPGAs (Piper: maxDevices)."),
    cpus: Optional[int] = typer.Option(None, "--cpus", "-l", help="Override the file's maxCPUs."),
    memory: Optional[float] = typer.Option(None, "--memory",
                                           help="Override maxSizePerFPGA (Piper: maxMemoryPerDevice), bytes."),
    bandwidth: Optional[float] = typer.Option(None, "--bandwidth", help="Piper: override bandwidth (B/s)."),
    batch: Optional[int] = typer.Option(None, "--batch", help="Piper: override mbsInBatch."),
    time_limit: Optional[float] = typer.Option(None, "--time-limit",
                                               help="Seconds before giving up [default and inf: no limit]."),
    overlap_comm: bool = typer.Option(False, "--overlap-comm",
                                      help="Accelerator load = max(compute, communication)."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan JSON instead of tables."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No tables; errors only."),
    report: Optional[Path] = typer.Option(None, "--report", help="Also write an HTML report of the plan here."),
    **solver_params: object,
) -> None:
    """Find a plan: by default the optimal contiguous split for throughput (the DP); for a Piper workload
    (nodes with TMPCs) the exact Piper plan (stages x data x tensor parallelism x recomputation); for an
    LLM config.json the fastest Megatron configuration that fits (TP x PP x VP x CP x EP x DP, micro-batch,
    recomputation; pin knobs with --tp, --pp, ...; `dnnplace plan` is its alias)."""
    with user_errors():
        from dnnplace import api
        from dnnplace.utils.files import check_outputs, write_json_atomic
        from dnnplace.utils.params import check_arguments

        load_opts: dict[str, Any] = {k: solver_params.pop(k) for k in model_flags() if solver_params.get(k) is not None}
        for k in model_flags():
            solver_params.pop(k, None)
        inputs = _inputs(workload)
        check_outputs([output, report], inputs)  # refuse before the solve, not after it
        budget: dict[str, Any] = {k: v for k, v in (("accelerators", accelerators), ("cpus", cpus), ("memory", memory),
                                    ("bandwidth", bandwidth), ("batch", batch)) if v is not None}
        check_arguments(api.with_budget, **budget)  # the API's own rules, before the workload is read
        time_limit = check_arguments(api.solve, time_limit=time_limit)["time_limit"]
        check_arguments(api.load, **load_opts)  # ranges before the file is read

        started = time.perf_counter()  # runtime_s of the command: from reading the workload to the plan
        inst = api.with_budget(api.load(workload, **load_opts), **budget)
        name = str(method.value) if method is not None else api.default_method(inst)
        params = method_params(name, objective.value, solver_params)
        read_s = time.perf_counter() - started
        with progress_bar(not quiet and not as_json) as progress:
            sol = api.solve(inst, name, objective=objective.value, time_limit=time_limit,
                            overlap_comm=overlap_comm, progress=progress, **params)
        runtime = sol.runtime_s + read_s
        sol = api.with_runtime(sol, runtime)
        doc = api.plan_document(inst, sol.plan, sol.evaluation)
        if output is not None:
            write_json_atomic(output, doc, inputs=inputs)
        if report is not None:
            api.write_report(inst, sol.plan, report, title=f"{workload.stem}: {sol.method}",
                             overlap_comm=overlap_comm, inputs=[*inputs, output])
        if as_json:
            emit_json(doc)
        elif not quiet:
            from dnnplace.api.models import model_of
            from dnnplace.cli.render import print_solution, proven_text

            proven = proven_text(sol.bound, sol.gap)
            print_solution(out, inst, sol, doc,
                           title=f"{sol.method} on {workload.name}: {sol.status}{proven}, {sol.runtime_s:.3f} s")
            if output is not None:
                out.print(f"{model_of(inst).plan_noun} written to {output}")
            if report is not None:
                out.print(f"report written to {report}")


def _inputs(workload: Path) -> list[Path]:
    """The files a solve reads (never to be written over): the input, a folder's config.json, a factory's file."""
    text = str(workload)
    if ":" in text and text.rpartition(":")[0].endswith(".py"):
        return [Path(text.rpartition(":")[0])]
    try:
        inside = [workload / "config.json"] if workload.is_dir() else []
    except (OSError, ValueError):
        inside = []
    return [workload, *inside]


def register(app: typer.Typer) -> None:
    """Add ``solve`` to a typer app."""
    app.command()(solve)
