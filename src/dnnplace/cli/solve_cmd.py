"""``dnnplace solve``: plan a paper or Piper workload with any registered method (flags generated per method)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import typer

from dnnplace.cli.common import Method, Objective, emit_json
from dnnplace.cli.console import out, progress_bar, user_errors
from dnnplace.cli.options import method_params, with_solver_options


@with_solver_options
def solve(
    workload: Path = typer.Argument(..., help="Workload JSON (the paper's format or Piper's)."),
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
    bert_layers: Optional[int] = typer.Option(None, "--bert-layers", help="Piper: BERT-L from bert32a100.json."),
    time_limit: Optional[float] = typer.Option(None, "--time-limit",
                                               help="Seconds before giving up [default and inf: no limit]."),
    overlap_comm: bool = typer.Option(False, "--overlap-comm",
                                      help="Accelerator load = max(compute, communication)."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan JSON instead of tables."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No tables; errors only."),
    report: Optional[Path] = typer.Option(None, "--report", help="Also write an HTML report of the plan here."),
    **solver_params: object,
) -> None:
    """Find a plan: by default the optimal contiguous split for throughput (the DP), or for a Piper workload
    (nodes with TMPCs) the exact Piper plan (stages x data x tensor parallelism x recomputation). An LLM
    config.json is planned by `dnnplace plan`."""
    with user_errors():
        from dnnplace import api
        from dnnplace.utils.files import check_outputs, write_json_atomic
        from dnnplace.utils.params import check_arguments

        check_outputs([output, report], [workload])  # refuse before the solve, not after it
        budget: dict[str, Any] = {k: v for k, v in (("accelerators", accelerators), ("cpus", cpus), ("memory", memory),
                                    ("bandwidth", bandwidth), ("batch", batch)) if v is not None}
        check_arguments(api.with_budget, **budget)  # the API's own rules, before the workload is read
        time_limit = check_arguments(api.solve, time_limit=time_limit)["time_limit"]

        started = time.perf_counter()  # runtime_s of the command: from reading the workload to the plan
        inst = api.with_budget(api.load(workload, bert_layers=bert_layers), **budget)
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
            write_json_atomic(output, doc, inputs=[workload])
        if report is not None:
            api.write_report(inst, sol.plan, report, title=f"{workload.stem}: {sol.method}",
                             overlap_comm=overlap_comm, inputs=[workload, output])
        if as_json:
            emit_json(doc)
        elif not quiet:
            from dnnplace.api.models import model_of
            from dnnplace.cli.render import print_plan, proven_text

            proven = proven_text(sol.bound, sol.gap)
            print_plan(out, inst, sol.evaluation,
                       title=f"{sol.method} on {workload.name}: {sol.status}{proven}, {sol.runtime_s:.3f} s")
            if output is not None:
                out.print(f"{model_of(inst).plan_noun} written to {output}")
            if report is not None:
                out.print(f"report written to {report}")


def register(app: typer.Typer) -> None:
    """Add ``solve`` to a typer app."""
    app.command()(solve)
