"""``dnnplace methods | info``: the registered methods of every model, and what a paper workload looks like."""

from __future__ import annotations

from pathlib import Path

import typer

from dnnplace.api.methods import ROUTES
from dnnplace.cli.console import out, user_errors
from dnnplace.cli.options import flag_of


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


def info(
    workload: Path = typer.Argument(..., help="Workload JSON (paper format)."),
    max_ideals: int = typer.Option(200_000, "--max-ideals", help="The exact DP's lattice budget."),
) -> None:
    """Describe a workload: size, budget, its ideal lattice at each reduction, and what `solve` will do."""
    with user_errors():
        from dnnplace import api
        from dnnplace.utils.params import check_arguments

        check_arguments(api.info, max_ideals=max_ideals)  # before reading the workload
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


def register(app: typer.Typer) -> None:
    """Add ``methods`` and ``info`` to a typer app."""
    app.command()(methods)
    app.command()(info)
