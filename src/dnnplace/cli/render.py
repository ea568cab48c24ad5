"""Screen output for the CLI: rich tables of devices, loads and violations."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from dnnplace.models.llm.spec import LLMEstimate, LLMProblem
from dnnplace.models.paper.evaluation import Evaluation
from dnnplace.models.paper.workload import Workload
from dnnplace.models.piper.evaluation import PiperEvaluation, stage_rows
from dnnplace.models.piper.spec import PiperInstance
from dnnplace.utils.text import format_bytes, format_number, id_ranges, printable


def proven_text(bound: float | None, gap: float | None) -> str:
    """The ``, bound B, gap G %`` of a result's title line: what the solve proved, or nothing."""
    return "" if bound is None or gap is None else f", bound {bound:.6g}, gap {100 * gap:.2f} %"


def device_table(w: Workload, ev: Evaluation, title: str | None = None) -> Table:
    """One row per used device: load, compute, communication, memory, nodes."""
    table = Table(title=None if title is None else Text(printable(title)), title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("device", "left"), ("load", "right"), ("compute", "right"), ("comm", "right"), ("memory", "right"),
        ("nodes", "right"), ("contiguous", "center"))
    for col, just in columns:
        table.add_column(col, justify=just)
    worst = ev.bottleneck
    for d in ev.devices:
        if not d.nodes:
            continue
        mem = format_bytes(d.memory) if d.kind == "accelerator" else "-"
        if d.kind == "accelerator" and w.memory > 0:
            mem += f" ({100 * d.memory / w.memory:.0f}%)"
        style = "bold" if d is worst else None
        table.add_row(Text(printable(d.name)), format_number(d.load), format_number(d.compute),
                      format_number(d.communication), mem, str(len(d.nodes)), "yes" if d.contiguous else "no",
                      style=style)
    return table


def print_evaluation(console: Console, w: Workload, ev: Evaluation, title: str | None = None) -> None:
    """Summary lines, the device table and any violations.

    User text (titles, names in violation messages) is shown literally: styles
    come from :class:`rich.text.Text` spans, never from markup in a string.
    """
    console.print(device_table(w, ev, None if title is None else printable(title)))
    bott = ev.bottleneck
    console.print(Text.assemble(
        "max-load ", (format_number(ev.max_load), "bold"),
        f" (throughput {format_number(1 / ev.max_load if ev.max_load > 0 else math.inf)} samples per time unit)",
        f", bottleneck {printable(bott.name)}" if bott else "",
    ))
    print_shared_copies(console, w, ev)
    lat = format_number(ev.latency)
    note = f" ({printable(ev.latency_note)})" if ev.latency_note else ""
    console.print(Text(f"single-sample latency {lat}{note}"))
    if w.is_training:
        console.print(Text(f"max FW + max BW {format_number(ev.fw_plus_bw)}"))
    if ev.violations:
        console.print(Text(f"infeasible: {len(ev.violations)} violation(s)", style="red"))
        for v in ev.violations:
            console.print(Text.assemble("  ", (printable(v.kind), "red"), ": ", printable(v.message)))
    else:
        console.print(Text("feasible", style="green"))


def print_shared_copies(console: Console, w: Workload, ev: Evaluation, limit: int = 12) -> None:
    """One line per shared parameter group: its bytes and the devices holding a copy (each pays them)."""
    copies = ev.shared_copies()
    if not copies:
        return
    size = dict(zip(w.shared.names, w.shared.size.tolist()))
    total = sum(len(c["devices"]) for c in copies)
    console.print(Text(f"shared parameters: {len(copies)} group(s), {total} copies"))
    for c in copies[:limit]:
        console.print(Text(f"  {printable(c['name'])} ({format_bytes(size[c['name']])}):"
                           f" {', '.join(c['devices'])}"))
    if len(copies) > limit:
        console.print(Text(f"  ... and {len(copies) - limit} more (--json lists them all)"))


def print_piper_stages(console: Console, inst: PiperInstance, ev: PiperEvaluation, title: str) -> None:
    """Piper's plan per stage: replicas, width, micro-batches in flight, time, recomputed layers, memory."""
    table = Table(title=Text(printable(title)), title_justify="left")
    for col in ("stage", "nodes", "replicas d", "width t", "in flight y", "time/sample", "recomputed",
                "memory (GiB)", "of which in flight"):
        table.add_column(col, justify="left" if col in ("nodes", "recomputed") else "right")
    bott = ev.bottleneck
    for r in stage_rows(inst, ev):
        mark = " *" if r["stage"] == bott else ""
        table.add_row(str(r["stage"]) + mark, id_ranges(r["nodes"]), str(r["replicas"]), str(r["width"]),
                      str(r["in_flight"]), f"{r['time_per_sample']:.6g}", id_ranges(r["recomputed"]),
                      f"{r['memory'] / 2**30:.3f}" + (" OOM" if r["oom"] else ""),
                      f"{r['memory_in_flight'] / 2**30:.3f}")
    console.print(table)
    tps = "infeasible (out of memory)" if not ev.feasible else f"{ev.tps:.10g}"
    console.print(Text(f"time per sample {tps}; devices used {ev.devices} of {inst.max_devices}; "
                       f"sum of data-parallel degrees {ev.data_parallel_sum} (batch {inst.batch}); * = bottleneck"))


def _llm_plan(console: Console, inst: LLMProblem, ev: LLMEstimate, title: str) -> None:
    console.print(Text(printable(title)))
    for k, v in ev.prediction_dict().items():
        console.print(Text(f"  {k}: {format_number(v) if isinstance(v, float) else printable(v)}"))


def _llm_simulation(console: Console, inst: LLMProblem, sim: Any, title: str, schedule: str) -> None:
    doc = sim.to_dict()
    console.print(Text(f"{printable(title)}: {doc['schedule']}, pp {doc['pp']} x vp {doc['vp']},"
                       f" {doc['microbatches']} micro-batches: pipeline {doc['pipeline_s']:.4g} s, simulated step"
                       f" {doc['simulated_step_time_s']:.4g} s (predicted {doc['predicted_step_time_s']:.4g} s),"
                       f" bubble {100 * doc['bubble_fraction']:.1f}%"))


def _piper_simulation(console: Console, inst: PiperInstance, sim: Any, title: str, schedule: str) -> None:
    doc = sim.to_dict()
    print_piper_stages(console, inst, sim.evaluation, title)
    if doc["makespan"] is not None:
        console.print(Text(f"1f1b, {doc['microbatches']} microbatches: makespan {doc['makespan']:.6g},"
                           f" bubble fraction {100 * doc['bubble_fraction']:.1f}%"))


def _paper_simulation(console: Console, inst: Workload, sim: Any, title: str, schedule: str) -> None:
    doc = sim.to_dict()
    console.print(Text.assemble(
        f"{schedule}, {doc['microbatches']} microbatches: time per sample ",
        (f"{doc['time_per_sample']:.6g}", "bold"),
        f" (max-load {doc['max_load']:.6g}), throughput {doc['throughput']:.6g}, makespan {doc['makespan']:.6g},"
        f" bubble fraction {100 * doc['bubble_fraction']:.1f}%"))
    table = Table()
    for col in ("device", "busy", "busy share"):
        table.add_column(col, justify="left" if col == "device" else "right")
    for d in doc["devices"]:
        table.add_row(Text(printable(d["device"])), f"{d['busy']:.6g}", f"{100 * d['busy_share']:.1f}%")
    console.print(table)


# The views of the models that have their own (by registry name, dnnplace.api.models.MODELS); a model without
# one is shown by :func:`_document_lines` from its entry's evaluation_document: a new model needs no line here.
_PLAN: dict[str, Callable[..., None]] = {"paper": print_evaluation, "piper": print_piper_stages, "llm": _llm_plan}
_SIMULATION: dict[str, Callable[..., None]] = {"paper": _paper_simulation, "piper": _piper_simulation,
                                               "llm": _llm_simulation}


def _document_lines(console: Console, inst: object, ev: object, title: str) -> None:
    """Any model's evaluation as ``key: value`` lines (its entry's evaluation_document)."""
    console.print(Text(printable(title)))
    for k, v in evaluation_document(inst, ev).items():
        if not isinstance(v, (dict, list)):
            console.print(Text(f"  {k}: {format_number(v) if isinstance(v, float) else printable(v)}"))


def _model(inst: object) -> str:
    from dnnplace.api.models import model_of

    return model_of(inst).name


def print_plan(console: Console, inst: object, ev: object, title: str) -> None:
    """The table of a judged plan, for whichever model ``inst`` belongs to."""
    _PLAN.get(_model(inst), _document_lines)(console, inst, ev, title)


def print_solution(console: Console, inst: object, sol: Any, doc: dict, title: str) -> None:
    """What ``solve`` shows of a solution: the model's own view (an LLM plan: its table and error band)."""
    _SOLUTION.get(_model(inst), lambda c, i, s, d, t: print_plan(c, i, s.evaluation, t))(console, inst, sol, doc,
                                                                                           title)


def _llm_solution(console: Console, inst: Any, sol: Any, doc: dict, title: str) -> None:
    from dnnplace.cli.plan_cmd import band_lines
    from dnnplace.cli.plan_cmd import print_plan as print_llm_plan

    print_llm_plan(console, doc)
    for line in band_lines(inst, sol.plan.estimate.step_time_s):
        console.print(Text(line))


_SOLUTION: dict[str, Callable[..., None]] = {"llm": _llm_solution}


def evaluation_document(inst: object, ev: object) -> dict:
    """``evaluate --json``: the evaluation of any model as one JSON object (its entry's evaluation_document)."""
    from dnnplace.api.models import model_of

    return model_of(inst).evaluation_document(inst, ev)


def print_simulation(console: Console, inst: object, sim: object, title: str, schedule: str) -> None:
    """The summary line and the per-device (paper), per-stage (Piper) or per-step (LLM) view of a simulation."""
    view = _SIMULATION.get(_model(inst))
    if view is None:  # a model without its own view: the scalars of its simulation's document
        console.print(Text(printable(f"{title}: {schedule}")))
        doc = sim.to_dict() if hasattr(sim, "to_dict") else {}
        for k, v in doc.items():
            if not isinstance(v, (dict, list)):
                console.print(Text(f"  {k}: {format_number(v) if isinstance(v, float) else printable(v)}"))
        return
    view(console, inst, sim, title, schedule)
