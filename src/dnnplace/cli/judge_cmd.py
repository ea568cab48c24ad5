"""``dnnplace evaluate | simulate | report``: judge and show a plan of any model with that model's cost model.

A split or a Piper plan comes after its workload; an LLM plan file (from ``dnnplace plan``) names its
own model, cluster and job, so it comes alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from dnnplace.cli.common import (
    Schedule,
    accelerators_option,
    bandwidth_option,
    batch_option,
    emit_json,
    judged,
    memory_option,
    print_notes,
)
from dnnplace.cli.console import out, user_errors

_WORKLOAD = "Workload JSON (the paper's format or Piper's), or an LLM plan file alone."


def evaluate(
    workload: Path = typer.Argument(..., help=_WORKLOAD),
    split: Optional[Path] = typer.Argument(None, help="Its plan: a split (fpgas/cpus node lists) or a Piper plan"
                                                     " (an LLM plan file is the first argument alone)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    overlap_comm: bool = typer.Option(False, "--overlap-comm",
                                      help="Accelerator load = max(compute, communication) (paper workloads)."),
    accelerators: Optional[int] = accelerators_option(),
    memory: Optional[float] = memory_option(),
    bandwidth: Optional[float] = bandwidth_option(),
    batch: Optional[int] = batch_option(),
) -> None:
    """Evaluate a plan with its model's cost model: max-load, per-device loads and memory, violations, latency
    (Piper: per stage time and memory; LLM: step time, memory per GPU, MFU)."""
    with user_errors():
        from dnnplace import api
        from dnnplace.cli.render import evaluation_document, print_plan

        inst, plan = judged(workload, split, accelerators=accelerators, memory=memory, bandwidth=bandwidth,
                            batch=batch)
        ev = api.evaluate(inst, plan, overlap_comm=overlap_comm, source=str(split))
        if as_json:
            emit_json(evaluation_document(inst, ev))
        else:
            print_plan(out, inst, ev, title=f"{(split or workload).name} on {workload.name}")
        print_notes(split or workload, inst, plan, overlap_comm)


def simulate(
    workload: Path = typer.Argument(..., help=_WORKLOAD),
    split: Optional[Path] = typer.Argument(None, help="Its plan: a split or a Piper plan (an LLM plan file is the"
                                                     " first argument alone)."),
    schedule: Optional[Schedule] = typer.Option(None, "--schedule", show_default=False,
                                                help="1f1b (PipeDream) or gpipe [default: 1f1b; an LLM plan's"
                                                     " own]."),
    microbatches: Optional[int] = typer.Option(None, "--microbatches", "-n", show_default=False,
                                               help="Microbatches to stream [default: 64; an LLM plan's own]."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="Write a Chrome trace-event JSON here."),
    overlap_comm: bool = typer.Option(False, "--overlap-comm", help="Transfers overlap compute."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    rate: Optional[float] = typer.Option(None, "--rate", help="A serving plan: stream requests at this rate"
                                         " (requests/s) [default: its workload's]."),
    requests: Optional[int] = typer.Option(None, "--requests", show_default=False,
                                           help="A serving plan: how many requests to send [default: 2000]."),
    offline: bool = typer.Option(False, "--offline", help="A serving plan: send every request at once, as an"
                                 " offline benchmark (trtllm-bench, vllm bench throughput) does."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", show_default=False,
                                              help="A serving plan: send from this many closed-loop clients."),
    accelerators: Optional[int] = accelerators_option(),
    memory: Optional[float] = memory_option(),
    bandwidth: Optional[float] = bandwidth_option(),
    batch: Optional[int] = batch_option(),
) -> None:
    """Simulate the pipeline: time per sample, throughput, bubbles, per-device busy share (an LLM plan: its
    whole training step under 1F1B or interleaved 1F1B)."""
    with user_errors():
        from dnnplace import api
        from dnnplace.api.models import model_of
        from dnnplace.cli.render import print_simulation
        from dnnplace.errors import DnnplaceError
        from dnnplace.utils.files import check_outputs, write_chunks_atomic, write_json_atomic

        check_outputs([trace], [workload, split])
        inst, plan = judged(workload, split, accelerators=accelerators, memory=memory, bandwidth=bandwidth,
                            batch=batch)
        if trace is not None and model_of(inst).name == "piper":
            raise DnnplaceError("--trace applies to a paper workload or an LLM plan, not a Piper plan")
        if trace is not None and model_of(inst).name == "serving":
            raise DnnplaceError("--trace applies to a paper workload or an LLM plan, not a serving plan")
        sim = api.simulate(inst, plan, schedule=schedule.value if schedule is not None else None,
                           microbatches=microbatches, overlap_comm=overlap_comm, rate=rate, requests=requests,
                           offline=offline, concurrency=concurrency)
        if trace is not None and hasattr(sim, "trace_chunks"):  # an LLM plan's: up to 2 M events, streamed
            write_chunks_atomic(trace, sim.trace_chunks(), inputs=[workload, split])
        elif trace is not None:
            write_json_atomic(trace, sim.chrome_trace(), inputs=[workload, split])
        print_notes(split or workload, inst, plan, overlap_comm)
        if as_json:
            emit_json(sim.to_dict())
            return
        if model_of(inst).name == "serving":  # requests streamed through the engine's scheduler
            d = sim.to_dict()
            rate_s = ("all at once" if d["offline"] else f"from {d['concurrency']} clients" if d["concurrency"]
                      else f"at {d['rate']:g}/s")
            out.print(f"{workload.name}: requests {rate_s} through the plan")
            for line in sim.summary():
                out.print(line)
            return
        print_simulation(out, inst, sim, f"{workload.name} / {(split or workload).name}",
                         schedule.value if schedule is not None else "1f1b")
        if trace is not None:
            out.print(f"trace written to {trace} (open in https://ui.perfetto.dev or chrome://tracing)")


def report(
    workload: Path = typer.Argument(..., help=_WORKLOAD),
    split: Optional[Path] = typer.Argument(None, help="Its plan: a split or a Piper plan (an LLM plan file is the"
                                                     " first argument alone)."),
    output: Path = typer.Option(Path("report.html"), "-o", "--output", help="HTML file to write."),
    microbatches: Optional[int] = typer.Option(None, "--microbatches", "-n", show_default=False,
                                               help="Microbatches in the timeline [default: 8] (paper workloads)."),
    schedule: Optional[Schedule] = typer.Option(None, "--schedule", show_default=False,
                                                help="Timeline schedule [default: 1f1b] (paper workloads)."),
    accelerators: Optional[int] = accelerators_option(),
    memory: Optional[float] = memory_option(),
    bandwidth: Optional[float] = bandwidth_option(),
    batch: Optional[int] = batch_option(),
) -> None:
    """Write a self-contained HTML report: summary, devices, graph, cut tensors, timeline (Piper: stages; LLM:
    configuration, prediction and simulated schedule)."""
    with user_errors():
        from dnnplace import api
        from dnnplace.utils.files import check_outputs

        check_outputs([output], [workload, split])
        inst, plan = judged(workload, split, accelerators=accelerators, memory=memory, bandwidth=bandwidth,
                            batch=batch)
        api.write_report(inst, plan, output, title=f"{workload.stem} / {(split or workload).stem}",
                         microbatches=microbatches, schedule=schedule.value if schedule is not None else None,
                         inputs=[workload, split])
        print_notes(split or workload, inst, plan)
        out.print(f"report written to {output}")


def register_evaluate(app: typer.Typer) -> None:
    """Add ``evaluate`` to a typer app (listed first in ``--help``)."""
    app.command()(evaluate)


def register_simulate_report(app: typer.Typer) -> None:
    """Add ``simulate`` and ``report`` to a typer app (after ``solve``)."""
    app.command()(simulate)
    app.command()(report)
