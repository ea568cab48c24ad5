"""``dnnplace compare | reproduce``: several methods on several paper workloads, and the paper's evaluation."""

from __future__ import annotations

import time
from enum import StrEnum
from pathlib import Path
from typing import Optional

import typer

from dnnplace.api.methods import METHODS
from dnnplace.cli.common import Objective, emit_text
from dnnplace.cli.console import err, out, progress_bar, user_errors
from dnnplace.errors import DnnplaceError, ParamError


class Format(StrEnum):
    markdown = "markdown"
    csv = "csv"
    json = "json"


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
        import dnnplace
        from dnnplace.experiments.compare import PSEUDO_METHODS, load_named, to_csv, to_json, to_markdown
        from dnnplace.experiments.compare import compare as run_compare
        from dnnplace.utils.files import check_outputs
        from dnnplace.utils.params import check_arguments

        check_outputs([output], workloads)
        limit = check_arguments(dnnplace.solve, time_limit=time_limit)["time_limit"]  # solve's own rule
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


def reproduce(
    output: Path = typer.Option(Path("docs/results.md"), "--out", "-o", help="Markdown file to write."),
    time_limit: float = typer.Option(20.0, "--time-limit", help="Seconds per throughput IP / local-search run."),
    latency_time_limit: float = typer.Option(30.0, "--latency-time-limit", help="Seconds per latency IP run."),
    only: str = typer.Option("", "--only", help="Only workloads whose name contains this."),
) -> None:
    """Reproduce the paper's evaluation on the bundled workloads (tables + a PNG figure)."""
    with user_errors():
        import io

        import dnnplace
        from dnnplace.experiments.reproduce import figure, to_markdown
        from dnnplace.experiments.reproduce import reproduce as run_reproduce
        from dnnplace.utils.files import check_outputs, write_bytes_atomic, write_text_atomic
        from dnnplace.utils.params import check_arguments

        for name, value in (("time_limit", time_limit), ("latency_time_limit", latency_time_limit)):
            try:  # solve's own rule for its time limit, each named by its flag
                check_arguments(dnnplace.solve, time_limit=value)
            except ParamError as exc:
                raise ParamError(name, exc.requirement, value) from None
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


def register(app: typer.Typer) -> None:
    """Add ``compare`` and ``reproduce`` to a typer app."""
    app.command()(compare)
    app.command()(reproduce)
