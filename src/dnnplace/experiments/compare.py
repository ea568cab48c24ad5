"""Run several methods on several workloads and tabulate what each achieves.

Every number comes from the evaluator; a method that fails on a workload
(too many ideals, no solution in time, missing tool) gets a row saying why.
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from dnnplace.errors import DnnplaceError
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload
from dnnplace.utils.text import format_number

EXPERT = "expert"
DP_SPLIT = "dp-split"
#: Rows that are not registered methods: a given expert split, and the latency of the DP's max-load split.
PSEUDO_METHODS = (EXPERT, DP_SPLIT)


@dataclass
class Row:
    """One (workload, method) result."""

    workload: str
    method: str
    objective: str
    max_load: float | None
    latency: float | None
    value: float | None  # the objective's value
    ratio: float | None  # value / best value found for this workload
    runtime_s: float | None
    feasible: bool | None
    status: str
    note: str = ""


def run_one(name: str, w: Workload, method: str, objective: str, time_limit: float | None,
            expert_split: Split | None = None) -> Row:
    """Solve (or, for ``expert``, evaluate) and describe the outcome in a row."""
    import dnnplace

    t = time.perf_counter()
    try:
        if method == EXPERT:
            if expert_split is None:
                return Row(name, method, objective, None, None, None, None, None, None, "n/a", "no expert split")
            ev = dnnplace.evaluate(w, expert_split)
            value = ev.value(objective)
            return Row(name, method, objective, ev.max_load, _finite(ev.latency), value, None,
                       time.perf_counter() - t, ev.feasible, "given")
        if method == DP_SPLIT:  # the latency of the max-load-optimal split
            sol = dnnplace.solve(w, "dp", time_limit=time_limit)
            ev = sol.evaluation
            return Row(name, method, objective, ev.max_load, _finite(ev.latency), ev.latency, None, sol.runtime_s,
                       ev.feasible, sol.status)
        sol = dnnplace.solve(w, method, objective=objective, time_limit=time_limit)
        ev = sol.evaluation
        return Row(name, method, objective, ev.max_load, _finite(ev.latency), sol.value, None, sol.runtime_s,
                   ev.feasible, sol.status, "; ".join(v.kind for v in ev.violations))
    except DnnplaceError as exc:
        return Row(name, method, objective, None, None, None, None, time.perf_counter() - t, None, "failed",
                   str(exc))


def _finite(x: float) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def add_ratios(rows: list[Row]) -> None:
    """ratio = value / the best feasible value found for the same workload and objective."""
    best: dict[tuple[str, str], float] = {}
    for r in rows:
        if r.value is not None and r.feasible:
            key = (r.workload, r.objective)
            best[key] = min(best.get(key, math.inf), r.value)
    for r in rows:
        b = best.get((r.workload, r.objective))
        if r.value is not None and b:
            r.ratio = r.value / b


def compare(
    workloads: list[tuple[str, Workload, Split | None]],
    methods: list[str],
    *,
    objective: str = "throughput",
    time_limit: float | None = 60.0,
    on_step: Callable[[str], None] | None = None,
) -> list[Row]:
    """Every method on every workload; ``workloads`` holds (name, workload, expert split or None)."""
    rows = []
    for name, w, expert in workloads:
        for m in methods:
            if on_step is not None:
                on_step(f"{name}: {m}")
            rows.append(run_one(name, w, m, objective, time_limit, expert))
    add_ratios(rows)
    return rows


def _fmt(x: float | None, digits: int = 6) -> str:
    return format_number(x, digits)


def to_markdown(rows: list[Row]) -> str:
    head = "| workload | method | max-load | ratio to best | latency | runtime s | feasible | status |\n"
    head += "|---|---|---:|---:|---:|---:|---|---|\n"
    body = "".join(
        f"| {r.workload} | {r.method} | {_fmt(r.max_load)} | {_fmt(r.ratio, 4)} | {_fmt(r.latency)} |"
        f" {_fmt(r.runtime_s, 3)} | {'-' if r.feasible is None else ('yes' if r.feasible else 'no')} |"
        f" {r.status}{(': ' + r.note) if r.note else ''} |\n"
        for r in rows
    )
    return head + body


def to_csv(rows: list[Row]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(asdict(rows[0]).keys()) if rows else ["workload"])
    writer.writeheader()
    for r in rows:
        writer.writerow(asdict(r))
    return buf.getvalue()


def to_json(rows: list[Row]) -> str:
    return json.dumps([asdict(r) for r in rows], indent=1)


def load_named(path: str | Path) -> tuple[str, Workload, Split | None]:
    """(name, workload, None) for a workload file given on the command line."""
    from dnnplace.models.paper.paper_json import load_workload

    p = Path(path)
    return p.stem, load_workload(p), None
