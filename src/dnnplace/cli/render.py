"""Screen output for the CLI: rich tables of devices, loads and violations."""

from __future__ import annotations

import math

from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from dnnplace.evaluation import Evaluation
from dnnplace.model.workload import Workload
from dnnplace.utils.text import format_bytes, format_number, printable


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
