"""``dnnplace profile | run``: PyTorch models -- profile one into a paper workload, run or train a split for real."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Optional

import typer

from dnnplace.cli.common import Schedule, emit_json, model_file
from dnnplace.cli.console import out, user_errors
from dnnplace.runtime.results import RunResult, TrainingRunResult


class WorkloadFormat(StrEnum):
    paper = "paper"
    piper = "piper"


class Granularity(StrEnum):
    op = "op"
    module = "module"


def profile(
    model: str = typer.Argument(..., help="MODULE:FACTORY - a .py file or dotted module, and a function"
                                          " returning (model, example_inputs)."),
    output: Path = typer.Option(..., "-o", "--output", help="Workload JSON to write."),
    granularity: Granularity = typer.Option(Granularity.op, "--granularity", help="op or module."),
    training: bool = typer.Option(False, "--training", help="Also profile the backward pass."),
    device: str = typer.Option("host", "--device",
                               help="host (worker processes here), cuda, or a catalogue device (a100, h100, ...)."),
    devices_file: Optional[Path] = typer.Option(None, "--devices-file", help="JSON/YAML device catalogue entries."),
    accelerators: int = typer.Option(2, "--accelerators", "-k", help="maxFPGAs of the workload."),
    cpus: int = typer.Option(0, "--cpus", "-l", help="maxCPUs of the workload."),
    repeats: int = typer.Option(7, "--repeats", help="Timed repetitions per operator (median)."),
    link_latency_ms: Optional[float] = typer.Option(None, "--link-latency-ms", min=0,
                                                    help="host: use this per-message latency instead of measuring."),
    link_bandwidth: Optional[float] = typer.Option(None, "--link-bandwidth", min=1,
                                                   help="host: use this bandwidth (bytes/s) instead of measuring."),
    fmt: WorkloadFormat = typer.Option(WorkloadFormat.paper, "--format",
                                       help="paper (default) or piper (training, Piper's TMPC JSON)."),
) -> None:
    """Trace a PyTorch model and profile it into a workload every solver can read (times in ms)."""
    with user_errors():
        training = training or fmt == WorkloadFormat.piper
        from dnnplace import api
        from dnnplace.utils.files import check_outputs
        from dnnplace.utils.params import check_arguments

        check_arguments(api.profile, accelerators=accelerators, cpus=cpus, repeats=repeats, device=device)
        check_outputs([output], [model_file(model), devices_file])

        w = api.profile(model, granularity=granularity.value, training=training, device=device,
                        accelerators=accelerators, cpus=cpus, repeats=repeats, devices_file=devices_file,
                        link=(link_latency_ms, link_bandwidth)
                        if link_latency_ms is not None and link_bandwidth is not None else None)
        if fmt == WorkloadFormat.piper:
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


def run(
    model: str = typer.Argument(..., help="MODULE:FACTORY, as for `profile`."),
    split: Path = typer.Argument(..., help="Split JSON (from `solve` on the profiled workload)."),
    workload: Optional[Path] = typer.Option(None, "--workload", "-w",
                                            help="The profiled workload: maps node ids to operators and gives"
                                                 " the predicted max-load (without it: the split's maxLoad)."),
    microbatches: int = typer.Option(16, "--microbatches", "-n", help="Microbatches to stream (per step)."),
    backend: Backend = typer.Option(Backend.gloo, "--backend", help="gloo (CPU) or nccl (GPU)."),
    training: bool = typer.Option(False, "--training", help="Train: forward and backward per stage, exact"
                                                             " gradients, checked against unsplit training."),
    schedule: Schedule = typer.Option(Schedule.one_f_one_b, "--schedule", help="Training: 1f1b or gpipe."),
    steps: int = typer.Option(3, "--steps", help="Training: optimizer steps (one per N microbatches)."),
    optimizer: Optimizer = typer.Option(Optimizer.sgd, "--optimizer", help="Training: sgd or adam."),
    lr: float = typer.Option(0.01, "--lr", help="Training: learning rate."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Run the split for real: one process per device, outputs (or trained parameters) checked against the
    unsplit model. Starts its own processes, or runs as one rank under torchrun."""
    with user_errors():
        from rich.markup import escape

        from dnnplace import api
        from dnnplace.utils.params import check_arguments

        check_arguments(api.run, microbatches=microbatches, steps=steps, lr=lr)  # before reading the workload
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


def register(app: typer.Typer) -> None:
    """Add ``profile`` and ``run`` to a typer app."""
    app.command()(profile)
    app.command()(run)
