"""The ``dnnplace`` command line (typer + rich): a thin layer over :mod:`dnnplace.api`.

Every failure the user can cause ends in one line on stderr and exit code 2.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Any, Optional

import typer

from dnnplace.api import Instance
from dnnplace.cli.console import OneLineUsageErrors, err, install_signal_handlers, out, progress_bar, user_errors
from dnnplace.cli.options import flag_of, method_params, with_solver_options
from dnnplace.errors import DnnplaceError
from dnnplace.exporters import EXPORTERS, get_exporter
from dnnplace.model.llm import LLMProblem
from dnnplace.model.piper import PiperInstance
from dnnplace.model.split import Split
from dnnplace.model.workload import Workload
from dnnplace.runtime.results import RunResult, TrainingRunResult
from dnnplace.solvers import METHODS, ROUTES
from dnnplace.utils.text import printable

app = typer.Typer(
    name="dnnplace",
    help=(
        "Place the operators of a DNN graph on accelerators and CPU cores for the best pipeline"
        " throughput or single-sample latency (Tarnawski et al., NeurIPS 2020).\n\n"
        "Workloads and splits use the paper's JSON format. Start with:\n\n"
        "  dnnplace solve WORKLOAD.json -o split.json\n\n"
        "  dnnplace evaluate WORKLOAD.json split.json"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=OneLineUsageErrors,
)


# The registry's names (dnnplace.solvers.METHODS): the CLI never lists methods itself.
Method = StrEnum("Method", {name: name for name in METHODS})  # type: ignore[misc]


class Objective(StrEnum):
    throughput = "throughput"
    latency = "latency"
    fw_bw = "fw+bw"


def plan_arguments(workload: Path, plan: Path | None) -> tuple[Instance, Path]:
    """The instance and the plan file: an LLM plan names its own problem, so it may come alone."""
    from dnnplace import api
    from dnnplace.model.llm import LLMProblem

    inst = api.load(workload)
    if plan is None:
        if not isinstance(inst, LLMProblem):
            raise DnnplaceError(f"{workload}: name the plan to judge after the workload")
        return inst, workload
    return inst, plan


def emit_json(doc: object) -> None:
    """Print one JSON document on stdout: independent of the console width, ASCII-only, no NaN/Infinity."""
    from dnnplace.utils.text import json_safe

    emit_text(json.dumps(json_safe(doc), indent=2, ensure_ascii=True, allow_nan=False) + "\n")


def emit_text(text: str) -> None:
    """Print text (a CSV or markdown table) on stdout as it is: no wrapping, control characters escaped."""
    from dnnplace.utils.text import OutputError, encodable

    stream = sys.stdout
    if stream is None:
        raise OutputError("standard output is closed; nothing can be shown")
    text = encodable(printable(text.replace("\r\n", "\n"), keep_newlines=True), getattr(stream, "encoding", None))
    try:
        stream.write(text if text.endswith("\n") else text + "\n")
        stream.flush()
    except (OSError, ValueError) as exc:
        raise OutputError(f"cannot write to standard output ({getattr(exc, 'strerror', None) or exc})") from None


def finite_option(name: str, value: float | None, *, inf_is_none: bool = False) -> float | None:
    """Reject NaN (and infinity unless it means "no limit") in a float option."""
    if value is None or math.isfinite(value):
        return value
    if inf_is_none and value > 0:
        return None
    raise DnnplaceError(f"{name} must be a finite number, got {value}")


MAX_SECONDS = 1e9  # a --time-limit above this (about 30 years) is a typo; inf means no limit


def time_limit_option(name: str, value: float | None) -> float | None:
    """A time limit in seconds: NaN refused, inf (or none given) means no limit, at most MAX_SECONDS."""
    value = finite_option(name, value, inf_is_none=True)
    if value is not None and not 0 <= value <= MAX_SECONDS:
        raise DnnplaceError(f"{name} must be between 0 and {MAX_SECONDS:g} seconds (inf: no limit), got {value:g}")
    return value


def at_most(name: str, value: int | None, maximum: int) -> None:
    """One line for a count option above its sane maximum (typer checks only the minimum)."""
    if value is not None and value > maximum:
        raise DnnplaceError(f"{name} must be at most {maximum:,}, got {value:,}")


def model_file(spec: str) -> Path | None:
    """The .py file of a MODULE:FACTORY spec, when it names one (an input the outputs must not replace)."""
    module = spec.rpartition(":")[0] or spec
    try:
        return Path(module) if Path(module).is_file() else None
    except (OSError, ValueError):
        return None


def _accelerators_option() -> object:
    return typer.Option(None, "--accelerators", "-k", min=0, help="Piper: judge under this maxDevices.")


def _memory_option() -> object:
    return typer.Option(None, "--memory", help="Piper: judge under this maxMemoryPerDevice (bytes).")


def _bandwidth_option() -> object:
    return typer.Option(None, "--bandwidth", help="Piper: judge under this bandwidth (B/s).")


def _batch_option() -> object:
    return typer.Option(None, "--batch", min=1, help="Piper: judge under this mbsInBatch.")


def judged(workload: Path, split: Path | None, *, accelerators: int | None, memory: float | None,
           bandwidth: float | None, batch: int | None, overlap_comm: bool = False) -> tuple[Instance, Any]:
    """The instance and plan to judge: the workload file's parameters with the command line's overrides.

    A Piper plan's own record of the parameters it was made for is never used; where it differs,
    :func:`print_notes` says which, the plan's value and the one used, once the plan was judged.  An
    LLM plan file names its own problem, so it may come alone.
    """
    from dnnplace import api
    from dnnplace.api.models import refuse
    from dnnplace.model.limits import check_budget

    check_budget(accelerators, None, finite_option("--memory", memory), source="command line", prefix="--")
    finite_option("--bandwidth", bandwidth)
    inst, split = plan_arguments(workload, split)
    if isinstance(inst, (Workload, LLMProblem)):
        for flag, value in (("--accelerators", accelerators), ("--memory", memory), ("--bandwidth", bandwidth),
                            ("--batch", batch)):
            refuse(flag, value, None, "piper")
    else:
        inst = api.with_budget(inst, accelerators=accelerators, memory=memory, bandwidth=bandwidth, batch=batch)
    inst, plan = api.load_plan(inst, split)
    return inst, plan


def print_notes(split: Path, inst: object, plan: object, overlap_comm: bool = False) -> None:
    """After a plan was judged (an error prints only its own line): what it records but was not used."""
    from dnnplace import api

    for note in api.plan_notes(inst, plan, overlap_comm=overlap_comm):  # type: ignore[arg-type]
        err.print(f"note: {split}: {note}", soft_wrap=True)


@app.command()
def evaluate(
    workload: Path = typer.Argument(..., help="Workload JSON (the paper's format or Piper's)."),
    split: Optional[Path] = typer.Argument(None, help="Its plan: a split (fpgas/cpus node lists) or a Piper plan"
                                                     " (an LLM plan file is the first argument alone)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    overlap_comm: bool = typer.Option(False, "--overlap-comm",
                                      help="Accelerator load = max(compute, communication) (paper workloads)."),
    accelerators: Optional[int] = _accelerators_option(),  # type: ignore[assignment]
    memory: Optional[float] = _memory_option(),  # type: ignore[assignment]
    bandwidth: Optional[float] = _bandwidth_option(),  # type: ignore[assignment]
    batch: Optional[int] = _batch_option(),  # type: ignore[assignment]
) -> None:
    """Evaluate a plan with its model's cost model: max-load, per-device loads and memory, violations, latency."""
    with user_errors():
        from dnnplace import api
        from dnnplace.cli.render import evaluation_document, print_plan

        inst, plan = judged(workload, split, accelerators=accelerators, memory=memory, bandwidth=bandwidth,
                            batch=batch, overlap_comm=overlap_comm)
        ev = api.evaluate(inst, plan, overlap_comm=overlap_comm, source=str(split))
        if as_json:
            emit_json(evaluation_document(inst, ev))
        else:
            print_plan(out, inst, ev, title=f"{(split or workload).name} on {workload.name}")
        print_notes(split or workload, inst, plan, overlap_comm)


@app.command()
@with_solver_options
def solve(
    workload: Path = typer.Argument(..., help="Workload JSON (the paper's format or Piper's)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write the plan here."),
    method: Optional[Method] = typer.Option(None, "--method", "-m", show_default=False,
                                            help="Placement method (see `dnnplace methods`) [default: dp for the"
                                                 " paper's workloads, piper for Piper's]."),
    objective: Objective = typer.Option(Objective.throughput, "--objective",
                                        help="throughput (max-load), latency, or fw+bw."),
    accelerators: Optional[int] = typer.Option(None, "--accelerators", "-k", min=0,
                                               help="Override the file's maxFPGAs (Piper: maxDevices)."),
    cpus: Optional[int] = typer.Option(None, "--cpus", "-l", min=0, help="Override the file's maxCPUs."),
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
    (nodes with TMPCs) the exact Piper plan (stages x data x tensor parallelism x recomputation)."""
    with user_errors():
        from dnnplace import api
        from dnnplace.model.limits import check_budget
        from dnnplace.utils.files import check_outputs, write_json_atomic

        check_outputs([output, report], [workload])  # refuse before the solve, not after it
        time_limit = time_limit_option("--time-limit", time_limit)
        check_budget(accelerators, cpus, finite_option("--memory", memory), source="command line", prefix="--")
        finite_option("--bandwidth", bandwidth)
        gap = solver_params.get("gap")
        finite_option("--gap", gap if isinstance(gap, float) else None)

        started = time.perf_counter()  # runtime_s of the command: from reading the workload to the plan
        inst = api.with_budget(api.load(workload, bert_layers=bert_layers), accelerators=accelerators, cpus=cpus,
                               memory=memory, bandwidth=bandwidth, batch=batch)
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
            from dnnplace.cli.render import print_plan, proven_text

            proven = proven_text(sol.bound, sol.gap)
            print_plan(out, inst, sol.evaluation,
                       title=f"{sol.method} on {workload.name}: {sol.status}{proven}, {sol.runtime_s:.3f} s")
            if output is not None:
                out.print(f"{'split' if isinstance(sol.plan, Split) else 'plan'} written to {output}")
            if report is not None:
                out.print(f"report written to {report}")


class Schedule(StrEnum):
    one_f_one_b = "1f1b"
    gpipe = "gpipe"


@app.command()
def simulate(
    workload: Path = typer.Argument(..., help="Workload JSON (the paper's format or Piper's)."),
    split: Optional[Path] = typer.Argument(None, help="Its plan: a split or a Piper plan (an LLM plan file is the"
                                                     " first argument alone)."),
    schedule: Schedule = typer.Option(Schedule.one_f_one_b, "--schedule", help="1f1b (PipeDream) or gpipe."),
    microbatches: Optional[int] = typer.Option(None, "--microbatches", "-n", min=1, show_default=False,
                                               help="Microbatches to stream [default: 64; an LLM plan's own]."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="Write a Chrome trace-event JSON here."),
    overlap_comm: bool = typer.Option(False, "--overlap-comm", help="Transfers overlap compute."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    accelerators: Optional[int] = _accelerators_option(),  # type: ignore[assignment]
    memory: Optional[float] = _memory_option(),  # type: ignore[assignment]
    bandwidth: Optional[float] = _bandwidth_option(),  # type: ignore[assignment]
    batch: Optional[int] = _batch_option(),  # type: ignore[assignment]
) -> None:
    """Simulate the pipeline: time per sample, throughput, bubbles, per-device busy share."""
    with user_errors():
        from dnnplace import api
        from dnnplace.cli.render import print_simulation
        from dnnplace.utils.files import check_outputs, write_json_atomic

        check_outputs([trace], [workload, split])
        inst, plan = judged(workload, split, accelerators=accelerators, memory=memory, bandwidth=bandwidth,
                            batch=batch, overlap_comm=overlap_comm)
        if trace is not None and isinstance(inst, PiperInstance):
            raise DnnplaceError("--trace applies to a paper workload or an LLM plan, not a Piper plan")
        if microbatches is None and not isinstance(inst, LLMProblem):
            microbatches = 64
        sim = api.simulate(inst, plan, schedule=schedule.value, microbatches=microbatches,  # type: ignore[arg-type]
                           overlap_comm=overlap_comm)
        if trace is not None:
            write_json_atomic(trace, sim.chrome_trace(), inputs=[workload, split])
        print_notes(split or workload, inst, plan, overlap_comm)
        if as_json:
            emit_json(sim.to_dict())
            return
        print_simulation(out, inst, sim, f"{workload.name} / {(split or workload).name}", schedule.value)
        if trace is not None:
            out.print(f"trace written to {trace} (open in https://ui.perfetto.dev or chrome://tracing)")


@app.command()
def report(
    workload: Path = typer.Argument(..., help="Workload JSON (the paper's format or Piper's)."),
    split: Optional[Path] = typer.Argument(None, help="Its plan: a split or a Piper plan (an LLM plan file is the"
                                                     " first argument alone)."),
    output: Path = typer.Option(Path("report.html"), "-o", "--output", help="HTML file to write."),
    microbatches: int = typer.Option(8, "--microbatches", "-n", min=1, help="Microbatches in the timeline."),
    schedule: Schedule = typer.Option(Schedule.one_f_one_b, "--schedule", help="Timeline schedule."),
    accelerators: Optional[int] = _accelerators_option(),  # type: ignore[assignment]
    memory: Optional[float] = _memory_option(),  # type: ignore[assignment]
    bandwidth: Optional[float] = _bandwidth_option(),  # type: ignore[assignment]
    batch: Optional[int] = _batch_option(),  # type: ignore[assignment]
) -> None:
    """Write a self-contained HTML report: summary, devices, graph, cut tensors, timeline (Piper: stages)."""
    with user_errors():
        from dnnplace import api
        from dnnplace.utils.files import check_outputs

        check_outputs([output], [workload, split])
        inst, plan = judged(workload, split, accelerators=accelerators, memory=memory, bandwidth=bandwidth,
                            batch=batch)
        api.write_report(inst, plan, output, title=f"{workload.stem} / {(split or workload).stem}",
                         microbatches=microbatches, schedule=schedule.value, inputs=[workload, split])
        print_notes(split or workload, inst, plan)
        out.print(f"report written to {output}")


class Granularity(StrEnum):
    op = "op"
    module = "module"


@app.command()
def profile(
    model: str = typer.Argument(..., help="MODULE:FACTORY - a .py file or dotted module, and a function"
                                          " returning (model, example_inputs)."),
    output: Path = typer.Option(..., "-o", "--output", help="Workload JSON to write."),
    granularity: Granularity = typer.Option(Granularity.op, "--granularity", help="op or module."),
    training: bool = typer.Option(False, "--training", help="Also profile the backward pass."),
    device: str = typer.Option("host", "--device",
                               help="host (worker processes here), cuda, or a catalogue device (a100, h100, ...)."),
    devices_file: Optional[Path] = typer.Option(None, "--devices-file", help="JSON/YAML device catalogue entries."),
    accelerators: int = typer.Option(2, "--accelerators", "-k", min=0, help="maxFPGAs of the workload."),
    cpus: int = typer.Option(0, "--cpus", "-l", min=0, help="maxCPUs of the workload."),
    repeats: int = typer.Option(7, "--repeats", min=1, help="Timed repetitions per operator (median)."),
    link_latency_ms: Optional[float] = typer.Option(None, "--link-latency-ms", min=0,
                                                    help="host: use this per-message latency instead of measuring."),
    link_bandwidth: Optional[float] = typer.Option(None, "--link-bandwidth", min=1,
                                                   help="host: use this bandwidth (bytes/s) instead of measuring."),
    fmt: str = typer.Option("paper", "--format", help="paper (default) or piper (training, Piper's TMPC JSON)."),
) -> None:
    """Trace a PyTorch model and profile it into a workload every solver can read (times in ms)."""
    with user_errors():
        if fmt not in ("paper", "piper"):
            raise DnnplaceError(f"--format must be paper or piper, got '{fmt}'")
        training = training or fmt == "piper"
        from dnnplace.model.limits import check_budget
        from dnnplace.utils.files import check_outputs

        check_budget(accelerators, cpus, source="command line", prefix="--")
        at_most("--repeats", repeats, 10_000)

        check_outputs([output], [model_file(model), devices_file])
        from dnnplace import api

        w = api.profile(model, granularity=granularity.value, training=training, device=device,
                        accelerators=accelerators, cpus=cpus, repeats=repeats, devices_file=devices_file,
                        link=(link_latency_ms, link_bandwidth)
                        if link_latency_ms is not None and link_bandwidth is not None else None)
        if fmt == "piper":
            from dnnplace.utils.files import write_json_atomic

            pdoc = api.piper_document(w, source=str(output))
            write_json_atomic(output, pdoc, inputs=(model_file(model), devices_file))
            tot = sum(nd["TMPCs"]["1"][0]["timePerSample"] for nd in pdoc["nodes"])
            out.print(f"{model}: {len(pdoc['nodes'])} layers, {len(pdoc['edges'])} edges, forward+backward"
                      f" {tot:.6g} s per sample (t = 1; vanilla and activation recomp); Piper format written to"
                      f" {output}")
            return
        api.save_workload(w, output, inputs=[model_file(model), devices_file])
        meta = w.require_profile()
        n_fwd = int((~w.backward).sum())
        out.print(f"{model}: {n_fwd} {meta.granularity}-level nodes ({meta.trace}),"
                  f" {w.n - n_fwd} backward nodes, {w.m} edges;"
                  f" forward {w.cpu_time[~w.backward].sum():.3f} ms on this CPU; written to {output}")


class Backend(StrEnum):
    gloo = "gloo"
    nccl = "nccl"


class Optimizer(StrEnum):
    sgd = "sgd"
    adam = "adam"


@app.command()
def run(
    model: str = typer.Argument(..., help="MODULE:FACTORY, as for `profile`."),
    split: Path = typer.Argument(..., help="Split JSON (from `solve` on the profiled workload)."),
    workload: Optional[Path] = typer.Option(None, "--workload", "-w",
                                            help="The profiled workload: maps node ids to operators and gives"
                                                 " the predicted max-load (without it: the split's maxLoad)."),
    microbatches: int = typer.Option(16, "--microbatches", "-n", min=1, help="Microbatches to stream (per step)."),
    backend: Backend = typer.Option(Backend.gloo, "--backend", help="gloo (CPU) or nccl (GPU)."),
    training: bool = typer.Option(False, "--training", help="Train: forward and backward per stage, exact"
                                                             " gradients, checked against unsplit training."),
    schedule: Schedule = typer.Option(Schedule.one_f_one_b, "--schedule", help="Training: 1f1b or gpipe."),
    steps: int = typer.Option(3, "--steps", min=1, help="Training: optimizer steps (one per N microbatches)."),
    optimizer: Optimizer = typer.Option(Optimizer.sgd, "--optimizer", help="Training: sgd or adam."),
    lr: float = typer.Option(0.01, "--lr", min=0.0, help="Training: learning rate."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Run the split for real: one process per device, outputs (or trained parameters) checked against the
    unsplit model. Starts its own processes, or runs as one rank under torchrun."""
    with user_errors():
        import math

        from rich.markup import escape

        from dnnplace import api

        if not math.isfinite(lr):
            raise DnnplaceError("--lr must be a finite number")
        at_most("--microbatches", microbatches, 100_000)
        at_most("--steps", steps, 1_000_000)
        w = api.load_workload(workload, check_feasible=False) if workload is not None else None
        res = api.run(model, split, workload=w, training=training, microbatches=microbatches,
                      backend=backend.value, schedule=schedule.value, steps=steps, optimizer=optimizer.value, lr=lr)
        if res is None:  # a rank other than 0 under torchrun: rank 0 reports
            return
        if "params_match" in res:  # a TrainingRunResult
            ok = res["params_match"] and res["loss_match"]
        else:
            ok = res["outputs_match"]
        if as_json:
            emit_json(res)
        elif "params_match" in res:
            _print_training(res, backend.value)
        else:
            pred = res["predicted_max_load"]
            out.print(f"{len(res['stages'])} stages ({escape(', '.join(s['device'] for s in res['stages']))}), "
                      f"{microbatches} microbatches on {backend.value}: outputs match the unsplit model: "
                      f"{'[green]yes[/green]' if res['outputs_match'] else '[red]NO[/red]'}", markup=True)
            out.print(f"measured time per sample {res['measured_time_per_sample']:.3f} ms"
                      + (f", predicted max-load {pred:.3f} ms" if pred is not None else ""))
            _print_machine(res)
        if not ok:
            raise typer.Exit(1)


def _print_machine(res: RunResult) -> None:
    """The line that says whether the machine was quiet while the run was timed (beside the prediction)."""
    from rich.markup import escape

    machine = res.get("machine")
    if machine is not None:
        colour = "yellow" if machine["loaded"] else "green"
        out.print(f"machine: [{colour}]{escape(machine['note'])}[/{colour}]", markup=True)


def _print_training(res: TrainingRunResult, backend: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    yes = "[green]yes[/green]"
    no = "[red]NO[/red]"
    out.print(f"{len(res['stages'])} stages ({', '.join(s['device'] for s in res['stages'])}), {res['schedule']},"
              f" {res['steps']} steps x {res['microbatches']} microbatches, {res['optimizer']} lr {res['lr']:g}"
              f" on {backend}")
    out.print(f"losses {escape(', '.join(f'{x:.6g}' for x in res['losses']))}: match unsplit training"
              f" {yes if res['loss_match'] else no}; parameters match {yes if res['params_match'] else no}"
              f" (max relative difference {res['max_param_rel_diff']:.2e})", markup=True)
    if not res.get("buffers_match", True):
        out.print("[yellow]buffers (running statistics) differ from unsplit training[/yellow] (max relative"
                  f" difference {res['max_buffer_rel_diff']:.2e}): a module with buffers runs on several stages,"
                  " each updating its own copy", markup=True)
    shared = res.get("shared_parameters") or []
    if shared:
        out.print(f"{len(shared)} parameter(s) held by several stages, gradients summed across the holders: "
                  + ", ".join(f"{s['name']} (stages {', '.join(map(str, s['stages']))})" for s in shared[:5])
                  + (" ..." if len(shared) > 5 else ""))
    line = f"measured time per sample {res['measured_time_per_sample']:.3f} ms"
    if res["predicted_max_load"] is not None:
        err_ml = res["error_vs_max_load"] or 0.0
        line += f", predicted max-load {res['predicted_max_load']:.3f} ms ({100 * err_ml:+.1f}%)"
    if res["predicted_simulated_time_per_sample"] is not None:
        line += (f", simulated {res['predicted_simulated_time_per_sample']:.3f} ms"
                 f" ({100 * (res['error_vs_simulated'] or 0.0):+.1f}%)")
    out.print(line)
    _print_machine(res)
    if res["predicted_max_load"] is not None:
        out.print(f"bottleneck stage CPU time per sample {res['measured_bottleneck_cpu_per_sample']:.3f} ms"
                  f" ({100 * (res['error_cpu_vs_max_load'] or 0.0):+.1f}% vs max-load);"
                  f" load average {res['load_average']}")
    table = Table()
    for col in ("stage", "fwd ms", "bwd ms", "blocked ms", "cpu ms", "pred fwd", "pred bwd", "peak act. MB",
                "pred MB"):
        table.add_column(col, justify="left" if col == "stage" else "right")

    def f(x: float | None, scale: float = 1.0) -> str:
        return "-" if x is None else f"{x / scale:.3f}"

    for st in res["stages"]:
        table.add_row(st["device"], f(st["measured_forward_ms"]), f(st["measured_backward_ms"]),
                      f(st["measured_blocked_ms"]), f(st["measured_cpu_ms"]), f(st["predicted_forward_ms"]),
                      f(st["predicted_backward_ms"]),
                      f(st["measured_peak_activation_bytes"], 1e6), f(st["predicted_peak_activation_bytes"], 1e6))
    out.print(table)


# The export registry's names (dnnplace.exporters.EXPORTERS): the CLI never lists targets itself.
ExportTarget = StrEnum("ExportTarget", {name: name for name in EXPORTERS})  # type: ignore[misc]


@app.command("export")
def export_plan(
    plan: Path = typer.Argument(..., help="An LLM plan (from `plan`), or a split of a profiled workload."),
    to: Optional[ExportTarget] = typer.Option(None, "--to", show_default=False, help="Target: " + "; ".join(
        f"{e.name}: {e.summary}" for e in EXPORTERS.values()) + " [default: stages, for a split with -w]."),
    workload: Optional[Path] = typer.Option(None, "--workload", "-w",
                                            help="Split targets: the profiled workload (from `profile`)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write here instead of stdout."),
    as_json: bool = typer.Option(False, "--json", help="torch-pipelining: the split points as JSON instead of"
                                                       " a runnable training script."),
    model: Optional[str] = typer.Option(None, "--model", help="torch-pipelining: MODULE:FACTORY for the script"
                                                              " (default: the one the workload was profiled from)."),
) -> None:
    """Export a plan in the format another trainer reads: Megatron-LM arguments, a torchtitan TOML or a DeepSpeed
    config (LLM plans); a torch.distributed.pipelining training script or stage lists (splits)."""
    with user_errors():
        from dnnplace import api
        from dnnplace.utils.files import check_outputs, write_text_atomic

        check_outputs([output], [plan, workload])
        if to is None and workload is None:
            raise DnnplaceError(f"name an export target with --to: {', '.join(EXPORTERS)}")
        target = get_exporter(str(to.value) if to is not None else "stages")
        if target.takes == "split":
            if workload is None:
                raise DnnplaceError(f"--to {target.name} exports a split: name its profiled workload with -w")
            if as_json and target.name == "torch-pipelining":
                target = get_exporter("torch-pipelining-points")
            text = target.render(api.load_workload(workload, check_feasible=False), api.load_split(plan),
                                 model=model)
        else:
            for flag, given in (("-w/--workload", workload is not None), ("--model", model is not None),
                                ("--json", as_json)):
                if given:
                    raise DnnplaceError(f"{flag} applies to split targets only, not --to {target.name}")
            text = api.export_llm_plan(plan, target.name)
        if output is not None:
            write_text_atomic(output, text, inputs=[plan, workload])
        else:
            sys.stdout.write(text)


class Format(StrEnum):
    markdown = "markdown"
    csv = "csv"
    json = "json"


@app.command()
def compare(
    workloads: list[Path] = typer.Argument(..., help="Workload JSON files."),
    methods_: str = typer.Option("dp,ip,ip-noncontig,pipedream,local-search,single", "--methods",
                                 help="Comma-separated methods (see `dnnplace methods`)."),
    objective: Objective = typer.Option(Objective.throughput, "--objective"),
    time_limit: float = typer.Option(60.0, "--time-limit", help="Seconds per run (inf: no limit)."),
    fmt: Format = typer.Option(Format.markdown, "--format", help="markdown, csv or json."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write the table here."),
) -> None:
    """Run several methods on several workloads: max-load, ratio to best, latency, runtime, feasibility."""
    with user_errors():
        from dnnplace.experiments.compare import PSEUDO_METHODS, load_named, to_csv, to_json, to_markdown
        from dnnplace.experiments.compare import compare as run_compare
        from dnnplace.utils.files import check_outputs

        check_outputs([output], workloads)
        limit = time_limit_option("--time-limit", time_limit)
        names = [m.strip() for m in methods_.split(",") if m.strip()]
        known = set(METHODS) | set(PSEUDO_METHODS)
        for m in names:
            if m not in known:
                raise DnnplaceError(f"unknown method '{m}'; choose from: {', '.join(sorted(known))}")
        loaded = [load_named(p) for p in workloads]
        total = len(loaded) * len(names)
        with progress_bar(True) as progress:
            done = [0]

            def step(desc: str) -> None:
                if progress is not None:
                    progress(done[0], total, desc)
                done[0] += 1

            rows = run_compare(loaded, names, objective=objective.value, time_limit=limit, on_step=step)
        text = {"markdown": to_markdown, "csv": to_csv, "json": to_json}[fmt.value](rows)
        if output is not None:
            from dnnplace.utils.files import write_text_atomic

            write_text_atomic(output, text, inputs=workloads)
        emit_text(text)


@app.command()
def reproduce(
    output: Path = typer.Option(Path("docs/results.md"), "--out", "-o", help="Markdown file to write."),
    time_limit: float = typer.Option(20.0, "--time-limit", min=0,
                                     help="Seconds per throughput IP / local-search run."),
    latency_time_limit: float = typer.Option(30.0, "--latency-time-limit", min=0,
                                             help="Seconds per latency IP run."),
    only: str = typer.Option("", "--only", help="Only workloads whose name contains this."),
) -> None:
    """Reproduce the paper's evaluation on the bundled workloads (tables + a PNG figure)."""
    with user_errors():
        import io

        from dnnplace.experiments.reproduce import figure, to_markdown
        from dnnplace.experiments.reproduce import reproduce as run_reproduce
        from dnnplace.utils.files import check_outputs, write_bytes_atomic, write_text_atomic

        png = output.with_name(output.stem + "_throughput.png")
        check_outputs([output, png])

        t0 = time.perf_counter()
        with progress_bar(True) as progress:
            def step(desc: str, i: int, n: int) -> None:
                if progress is not None:
                    progress(i, n, desc)
                else:
                    err.print(f"[{i + 1}/{n}] {desc}" if i < n else "done")

            tp, lat = run_reproduce(time_limit, latency_time_limit, only, on_step=step)
        output.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        figure(tp, buf)  # PNG bytes, written atomically like every other output
        write_bytes_atomic(png, buf.getvalue())
        text = to_markdown(tp, lat, time_limit, latency_time_limit, time.perf_counter() - t0, png.name)
        write_text_atomic(output, text)
        out.print(f"wrote {output} and {png}")


@app.command()
def methods() -> None:
    """List the placement methods and what they optimise."""
    with user_errors():
        from rich.table import Table

        from dnnplace import api

        table = Table()
        for col in ("method", "plans", "objectives", "what it does", "parameters"):
            table.add_column(col)
        for name, m in api.methods().items():
            params = ", ".join(flag_of(p) for p in m.param_names()) or "-"
            routed = [f"{obj} (runs {target})" for (src, obj), target in ROUTES.items() if src == name]
            table.add_row(name, m.model, ", ".join([*m.objectives, *routed]), m.summary, params)
        out.print(table)


@app.command()
def info(
    workload: Path = typer.Argument(..., help="Workload JSON (paper format)."),
    max_ideals: int = typer.Option(200_000, "--max-ideals", min=1, help="The exact DP's lattice budget."),
) -> None:
    """Describe a workload: size, budget, its ideal lattice at each reduction, and what `solve` will do."""
    with user_errors():
        from dnnplace import api

        at_most("--max-ideals", max_ideals, 10**9)
        w = api.load_workload(workload, check_feasible=False)
        cap = max(1_000_000, min(max_ideals, 10_000_000))  # counting is bounded whatever the DP's budget
        out.print(f"{workload.name}: {w.n} nodes ({int(w.backward.sum())} backward), {w.m} edges, "
                  f"{w.n_classes} colour classes")
        out.print(f"budget: {w.max_accelerators} accelerators of {w.memory:.6g} bytes, {w.max_cpus} CPU cores")
        if w.shared.count:
            out.print(f"shared parameters: {w.shared.count} group(s) of {w.shared.size.sum():.6g} bytes in all,"
                      " one copy on every accelerator using a group")
        report = api.info(w, max_ideals=max_ideals, cap=cap)
        for st in report.steps:
            ideals = f"{st.ideals:,}" if st.ideals is not None else f"more than {cap:,}"
            out.print(f"{st.step}: {st.units} units, {ideals} ideals")
        out.print(f"solve (dp): {report.default_path}")
        out.print(f"single accelerator time {w.acc_time.sum():.6g}, all on one CPU {w.cpu_time.sum():.6g}")


from dnnplace.cli import plan_cmd  # noqa: E402  (the command imports this module's helpers)

plan_cmd.register(app)


def _flush_stdout() -> str | None:
    """Flush stdout now, while an error can still be reported; the reason it failed, or None."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except (OSError, ValueError) as exc:
        try:  # the interpreter's own flush at exit must not fail again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
        return getattr(exc, "strerror", None) or str(exc)
    return None


def main() -> None:
    """Console-script entry point."""
    install_signal_handlers()
    try:
        try:
            app(prog_name="dnnplace")
        except KeyboardInterrupt:  # Ctrl-C outside a command's guard (a lazy import, typer's own code)
            try:
                err.print("interrupted")
            except Exception:  # noqa: BLE001 - stderr gone: the exit code still says it
                pass
            raise SystemExit(130) from None
    except SystemExit as exc:
        failed = _flush_stdout()
        if failed is not None and exc.code in (0, None):
            try:
                err.print(f"error: cannot write to standard output ({failed})", soft_wrap=True)
            except Exception:  # noqa: BLE001 - stderr gone too: the exit code still says it
                pass
            raise SystemExit(2) from None
        if exc.code in (130, 128 + 1, 128 + 15):  # SIGINT, SIGHUP, SIGTERM
            import threading

            if any(t is not threading.main_thread() and t.is_alive() for t in threading.enumerate()):
                # Ctrl-C: a solver thread (HiGHS in its root LP) may not poll for cancellation for
                # seconds; nothing is left to write, so do not wait for it at interpreter exit.
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(int(exc.code))
        raise


if __name__ == "__main__":  # pragma: no cover
    main()
