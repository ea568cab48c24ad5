"""The CLI for Piper's workloads (``TMPCs`` JSON): ``solve``, ``simulate`` and ``report`` dispatch here."""

from __future__ import annotations

import html
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from dnnplace.errors import InputError
from dnnplace.evaluation.piper import PiperEvaluation, PiperPlan, evaluate_piper, load_plan, plan_to_dict
from dnnplace.frontends.piper_json import PiperInstance, bert_l, is_piper_file, load_piper
from dnnplace.model.workload import Workload
from dnnplace.solvers.base import ProgressFn


def is_piper_input(path: Path) -> bool:
    """Is this workload file in Piper's format (recognised by its ``TMPCs``)?"""
    return path.suffix.lower() == ".json" and path.is_file() and is_piper_file(path)


def load_instance(path: Path, *, accelerators: int | None = None, memory: float | None = None,
                  bandwidth: float | None = None, batch: int | None = None,
                  bert_layers: int | None = None) -> PiperInstance:
    inst = load_piper(path)
    if bert_layers is not None:
        inst = bert_l(inst, bert_layers)
    return inst.with_overrides(devices=accelerators, memory=memory, bandwidth=bandwidth, batch=batch)


def stage_rows(inst: PiperInstance, ev: PiperEvaluation) -> list[dict[str, Any]]:
    oid = inst.old_ids
    rows = []
    for st in ev.stages:
        rows.append({
            "stage": st.index,
            "nodes": [oid[v] for v in st.nodes],
            "replicas": st.d,
            "width": st.t,
            "devices": st.devices,
            "in_flight": st.in_flight,
            "time_per_sample": st.time,
            "compute": st.compute,
            "edge_bytes": st.edge_bytes,
            "resync_bytes": st.resync_bytes,
            "recomputed": [oid[v] for v in st.recomputed],
            "memory": st.memory,
            "memory_fixed": st.memory_fixed,
            "memory_in_flight": st.memory_in_flight,
            "memory_limit": inst.memory,
            "oom": st.oom,
        })
    return rows


def _ranges(ids: list[int]) -> str:
    ids = sorted(ids)
    parts = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts) if parts else "-"


def print_stages(out: Console, inst: PiperInstance, ev: PiperEvaluation, title: str) -> None:
    table = Table(title=title)
    for col in ("stage", "nodes", "replicas d", "width t", "in flight y", "time/sample", "recomputed",
                "memory (GiB)", "of which in flight"):
        table.add_column(col, justify="left" if col in ("nodes", "recomputed") else "right")
    bott = ev.bottleneck
    for r in stage_rows(inst, ev):
        mark = " *" if r["stage"] == bott else ""
        table.add_row(str(r["stage"]) + mark, _ranges(r["nodes"]), str(r["replicas"]), str(r["width"]),
                      str(r["in_flight"]), f"{r['time_per_sample']:.6g}", _ranges(r["recomputed"]),
                      f"{r['memory'] / 2**30:.3f}" + (" OOM" if r["oom"] else ""),
                      f"{r['memory_in_flight'] / 2**30:.3f}")
    out.print(table)
    tps = "infeasible (out of memory)" if not ev.feasible else f"{ev.tps:.10g}"
    out.print(f"time per sample {tps}; devices used {ev.devices} of {inst.max_devices}; "
              f"sum of data-parallel degrees {ev.data_parallel_sum} (batch {inst.batch}); * = bottleneck")


def solve_cmd(out: Console, workload: Path, *, output: Path | None, accelerators: int | None,
              memory: float | None, bandwidth: float | None, batch: int | None, bert_layers: int | None,
              as_json: bool, quiet: bool, time_limit: float | None = None,
              progress: ProgressFn | None = None) -> None:
    from dnnplace import api
    from dnnplace.utils.files import write_json_atomic

    read = time.perf_counter()
    inst = load_instance(workload, accelerators=accelerators, memory=memory, bandwidth=bandwidth, batch=batch,
                         bert_layers=bert_layers)
    read_s = time.perf_counter() - read
    res = api.solve_piper(inst, time_limit=time_limit, progress=progress)  # kernels load before its clock starts
    res.plan.meta["runtime_s"] = res.runtime_s + read_s  # the command's time: reading the file to the plan
    doc = plan_to_dict(inst, res.plan, res.evaluation)
    if output is not None:
        write_json_atomic(output, doc)
    if as_json:
        out.print_json(json.dumps(doc))
    elif not quiet:
        from dnnplace.cli.render import proven_text

        proven = "" if res.status == "optimal" else proven_text(res.bound, res.plan.meta["gap"])
        print_stages(out, inst, res.evaluation,
                     f"piper plan for {workload.name}: {res.status}{proven}, {doc['runtime_s']:.3f} s")
        if output is not None:
            out.print(f"plan written to {output}")


def _load_both(workload: Path, plan: Path, bert_layers: int | None) -> tuple[PiperInstance, PiperPlan]:
    from dnnplace.utils.files import read_json_file

    raw = read_json_file(plan)
    params = raw.get("instance", {}) if isinstance(raw, dict) else {}
    if not isinstance(params, dict):
        params = {}
    if bert_layers is None and isinstance(params.get("bertLayers"), int):
        bert_layers = params["bertLayers"]
    inst = load_instance(workload, bert_layers=bert_layers)
    p = load_plan(inst, plan)
    # the plan was made for some K, M, BW, N: take them from the plan file when recorded
    if params:
        inst = inst.with_overrides(devices=params.get("maxDevices"), memory=params.get("maxMemoryPerDevice"),
                                   bandwidth=params.get("bandwidth"), batch=params.get("mbsInBatch"))
    return inst, p


def simulate_cmd(out: Console, workload: Path, plan: Path, *, microbatches: int, as_json: bool,
                 bert_layers: int | None = None) -> None:
    """Per stage: replicas, width, recomputed layers, memory with its in-flight term; 1F1B timing."""
    inst, p = _load_both(workload, plan, bert_layers)
    ev = evaluate_piper(inst, p)
    rows = stage_rows(inst, ev)
    m = len(rows)
    tps = ev.tps if ev.feasible else None
    # 1F1B with every stage streaming at its own rate: after the fill, the bottleneck sets the pace
    fill = sum(r["time_per_sample"] for r in rows)
    makespan = None if tps is None else fill + (microbatches - 1) * tps
    doc = {"time_per_sample": tps, "throughput": None if not tps else 1.0 / tps, "stages": rows,
           "microbatches": microbatches, "makespan": makespan,
           "bubble_fraction": None if not makespan or tps is None else 1.0 - microbatches * tps / makespan,
           "devices_used": ev.devices, "pipeline_depth": m}
    if as_json:
        out.print_json(json.dumps(doc))
        return
    print_stages(out, inst, ev, f"{workload.name} / {plan.name}")
    bubble = doc["bubble_fraction"]
    if makespan is not None and isinstance(bubble, float):
        out.print(f"1f1b, {microbatches} microbatches: makespan {makespan:.6g}, bubble fraction {100 * bubble:.1f}%")


def report_cmd(out: Console, workload: Path, plan: Path, output: Path, bert_layers: int | None = None) -> None:
    inst, p = _load_both(workload, plan, bert_layers)
    ev = evaluate_piper(inst, p)
    rows = stage_rows(inst, ev)
    limit = inst.memory
    esc = html.escape
    body = []
    body.append(f"<h1>{esc(workload.stem)} / {esc(plan.stem)}</h1>")
    tps = f"{ev.tps:.10g}" if ev.feasible else "infeasible (out of memory)"
    body.append(f"<p>Time per sample <b>{tps}</b>; {ev.devices} of {inst.max_devices} devices; "
                f"batch {inst.batch} micro-batches; memory {limit / 2**30:.3f} GiB per device; "
                f"bandwidth {inst.bandwidth:.4g} B/s.</p>")
    body.append("<table><tr><th>stage</th><th>nodes</th><th>replicas d</th><th>width t</th><th>in flight y</th>"
                "<th>time/sample</th><th>recomputed</th><th>memory (fixed + in flight)</th></tr>")
    tmax = max((r["time_per_sample"] for r in rows), default=1.0) or 1.0
    for r in rows:
        fixed = 100 * r["memory_fixed"] / limit
        fl = 100 * r["memory_in_flight"] / limit
        bar = (f"<div class='bar'><span style='width:{min(fixed, 100):.1f}%;background:#4a7'></span>"
               f"<span style='width:{min(fl, 100 - min(fixed, 100)):.1f}%;background:#e94'></span></div>")
        tw = 100 * r["time_per_sample"] / tmax
        tbar = f"<div class='bar'><span style='width:{tw:.1f}%;background:#47c'></span></div>"
        body.append(
            f"<tr><td>{r['stage']}</td><td>{_ranges(r['nodes'])}</td><td>{r['replicas']}</td><td>{r['width']}</td>"
            f"<td>{r['in_flight']}</td><td>{r['time_per_sample']:.6g}{tbar}</td><td>{_ranges(r['recomputed'])}</td>"
            f"<td>{r['memory'] / 2**30:.3f} GiB = {r['memory_fixed'] / 2**30:.3f} + "
            f"{r['memory_in_flight'] / 2**30:.3f}{' OOM' if r['oom'] else ''}{bar}</td></tr>")
    body.append("</table><p>Memory bars: green = fixed (weights, optimizer state), orange = activations of the "
                "micro-batches in flight under 1F1B (y = ceil(D/d)), against the per-device limit.</p>")
    doc = ("<!doctype html><html><head><meta charset='utf-8'><title>Piper plan</title><style>"
           "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
           "padding:4px 8px;text-align:right}.bar{width:200px;height:8px;background:#eee;display:flex}"
           ".bar span{display:block;height:8px}</style></head><body>" + "\n".join(body) + "</body></html>")
    try:
        output.write_text(doc, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{output}: cannot write ({exc})") from None
    out.print(f"report written to {output}")


def profile_to_piper(out: Console, workload: Workload, output: Path, model: str,
                     inputs: tuple[Path | None, ...] = ()) -> None:
    """Write a training profile in Piper's format (one layer per node, t = 1, vanilla and recompute)."""
    from dnnplace.frontends.paper_json import workload_to_dict
    from dnnplace.frontends.piper_json import parse_piper
    from dnnplace.frontends.torch_model.piper_export import paper_training_to_piper
    from dnnplace.utils.files import write_json_atomic

    pdoc = paper_training_to_piper(workload_to_dict(workload))
    parse_piper(pdoc, source=str(output))  # the result must be a valid Piper workload
    write_json_atomic(output, pdoc, inputs=inputs)
    tot = sum(nd["TMPCs"]["1"][0]["timePerSample"] for nd in pdoc["nodes"])
    out.print(f"{model}: {len(pdoc['nodes'])} layers, {len(pdoc['edges'])} edges, forward+backward {tot:.6g} s "
              f"per sample (t = 1; vanilla and activation recomp); Piper format written to {output}")


def evaluate_cmd(out: Console, workload: Path, plan: Path, *, as_json: bool) -> None:
    """Piper's checker on a plan file: time per sample and the per-stage breakdown."""
    inst, p = _load_both(workload, plan, None)
    ev = evaluate_piper(inst, p)
    if as_json:
        out.print_json(json.dumps({"time_per_sample": ev.tps if ev.feasible else None, "feasible": ev.feasible,
                                   "devices_used": ev.devices, "data_parallel_sum": ev.data_parallel_sum,
                                   "stages": stage_rows(inst, ev)}))
        return
    print_stages(out, inst, ev, f"{plan.name} on {workload.name}")
