"""``dnnplace plan MODEL``: plan an LLM training run (TP x PP x VP x CP x DP, micro-batch, recomputation).

:func:`register` adds the command to a typer app; errors end in one line, exit 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from dnnplace.errors import DnnplaceError
from dnnplace.utils.text import clip


def parse_fix(text: str | None) -> dict[str, Any]:
    """``"tp=4,pp=4,recompute=selective"`` -> {"tp": 4, "pp": 4, "recompute": "selective"}: typed by the
    knobs' declarations (model/llm_config.py), each key once, nonsense values refused naming the key."""
    from dnnplace.models.llm.config import parse_pins

    return parse_pins(text, "--fix")


def parse_pins_of(text: str) -> dict[str, Any]:
    """``--compare``'s pins, typed and checked as ``--fix``'s are; none at all would compare the plan with itself."""
    from dnnplace.models.llm.config import parse_pins

    pins = parse_pins(text, "--compare")
    if not pins:
        raise DnnplaceError("--compare: give the configuration to compare as KEY=VALUE pins (as --fix), got none")
    return pins


def plan(
    model: str = typer.Argument(..., help="Hugging Face config.json (or its folder), or file.py:fn."),
    gpus: int = typer.Option(..., "--gpus", help="Number of GPUs."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="GPUs per node (NVLink domain);"
                                                " default 8."),
    device: Optional[str] = typer.Option(None, "--device", help="Catalogue device: h100 (default), h200, a100,"
                                         " b200, gb200, b300, gb300."),
    system: Optional[str] = typer.Option(None, "--system", help="A whole system instead of --device and"
                                         " --gpus-per-node: dgx-h100, dgx-h200, dgx-b200, dgx-b300,"
                                         " gb200-nvl72, gb300-nvl72 (NVLink domain from the system)."),
    seq_len: int = typer.Option(..., "--seq-len", help="Sequence length."),
    global_batch: int = typer.Option(..., "--global-batch", help="Global batch (sequences per step)."),
    precision: str = typer.Option("bf16", "--precision", help="Precision recipe: bf16, fp8 (delayed"
                                     " scaling), fp8-cs (current scaling), fp8-cs-all (every layer FP8),"
                                     " mxfp8, nvfp4, nvfp4-all (every layer NVFP4) or nvfp4-fp4p (and FP4"
                                     " parameters) (Blackwell)."),
    cross_entropy: str = typer.Option("megatron", "--cross-entropy", help="Cross-entropy implementation:"
                                      " megatron (an fp32 copy of the logits) or te (Transformer Engine's, 16-bit"
                                      " logits only; Megatron-Bridge's recipes set it)."),
    kernels: str = typer.Option("catalogue", "--kernels", help="Price GEMMs, attention and in-node collectives"
                                " from the catalogue (datasheet x published efficiencies) or from the measured"
                                " silicon tables where the device has them (measured; docs/kernels-training.md)."),
    fix: Optional[str] = typer.Option(None, "--fix", help='Pin knobs, e.g. "tp=4,pp=4,cp=2,vp=5,mbs=1".'),
    compare: Optional[str] = typer.Option(None, "--compare", help='Also price this configuration (pins as in'
                                          ' --fix) and say whether the error band can tell it from the plan.'),
    runner_ups: int = typer.Option(3, "--runner-ups", help="Also list this many fastest other configurations"
                                   " (0-20), each against the plan and the error band."),
    calibrate: Optional[Path] = typer.Option(None, "--calibrate", help="MEASURED.json of your own step times"
                                             " ({\"runs\": [{\"config\": {pins}, \"step_time_s\": s}]}): scale"
                                             " the compute efficiencies to them before planning."),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", help="Seconds; best plan so far after."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write the plan JSON here."),
    report: Optional[Path] = typer.Option(None, "--report", help="Also write an HTML report (with the simulated"
                                                                 " schedule) here."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan JSON instead of a table."),
) -> None:
    """Plan an LLM training run: the fastest configuration that fits, with its predicted step time."""
    from dnnplace.cli.console import out, progress_bar, user_errors

    with user_errors():
        from dnnplace import api
        from dnnplace.utils.files import check_outputs, write_json_atomic
        from dnnplace.utils.params import check_arguments

        factory = model.rpartition(":")[0]
        inputs = [Path(factory) if factory.endswith(".py") else Path(model)]
        inputs += [inputs[0] / "config.json"] if _is_dir(inputs[0]) else []
        inputs += [calibrate] if calibrate is not None else []
        check_outputs([output, report], inputs)
        time_limit = check_arguments(api.solve, time_limit=time_limit)["time_limit"]  # solve's one rule
        from dnnplace.models.llm.load import machine

        device, gpus_per_node = machine(system, device, gpus_per_node, gpus)
        problem = api.load_llm(model, gpus=gpus, seq_len=seq_len, global_batch=global_batch,
                               gpus_per_node=gpus_per_node, device=device, precision=precision,
                               cross_entropy=cross_entropy)
        if kernels not in ("catalogue", "measured"):
            from dnnplace.errors import InputError

            raise InputError(f"--kernels must be catalogue or measured, got {kernels[:40]!r}")
        if kernels == "measured":
            from dataclasses import replace as with_field

            problem = with_field(problem, device=with_field(problem.device, measured_kernels=True))
        calibration = None
        if calibrate is not None:  # the user's own runs scale the compute efficiencies (solvers/llm/calibrate.py)
            from dnnplace.models.llm.solvers.calibrate import calibrate as fit
            from dnnplace.models.llm.solvers.calibrate import read_measured, scaled_problem

            calibration = fit(problem, read_measured(calibrate))
            problem = scaled_problem(problem, calibration.scale)
        if isinstance(runner_ups, bool) or not 0 <= runner_ups <= 20:
            raise DnnplaceError(f"--runner-ups must be a whole number in 0..20, got {runner_ups}")
        pins, rival_pins = parse_fix(fix), (None if compare is None else parse_pins_of(compare))
        from dnnplace.models.llm.rules import check_pin_set

        check_pin_set(problem, pins, "--fix")
        if rival_pins is not None:
            check_pin_set(problem, rival_pins, "--compare")
        with progress_bar(not as_json) as progress:
            sol = api.solve(problem, "llm-search", time_limit=time_limit, progress=progress,
                            runner_ups=runner_ups, **pins)
        result = sol.plan
        from dnnplace.models.llm.plan_doc import calibrated_band_doc, plan_document, runner_up_doc

        doc = plan_document(result, sol.stats.get("runner_ups", []))
        if calibration is not None:  # the user's own residuals replace the published band
            doc["error_band"] = calibrated_band_doc(calibration.errors(True), result.estimate.step_time_s)
        rival = None
        if rival_pins is not None:
            from dnnplace.models.llm.solvers.search import price_pins

            try:  # fitting or not, the compared configuration is an answer beside the plan
                rival = price_pins(problem, rival_pins, time_limit)
            except DnnplaceError as exc:
                raise DnnplaceError(f"--compare {clip(compare, 60)}: {exc}") from None
            doc["compared"] = runner_up_doc(problem, result.estimate.step_time_s, rival)
        if output is not None:
            write_json_atomic(output, doc, inputs=inputs)
        if report is not None:  # the page shows what the screen does: runner-ups, the compared layout, the band
            from dataclasses import replace

            from dnnplace.models.llm.report import write_llm_report

            write_llm_report(replace(result, problem=problem), report, title=f"{problem.arch.name} on {gpus} x"
                             f" {device}", inputs=[*inputs, output], runner_ups=sol.stats.get("runner_ups", []),
                             compared=[] if rival is None else [rival],
                             error_band=doc["error_band"] if calibration is not None else None)
        if as_json:
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        else:
            print_plan(out, doc)
            if calibration is not None:
                out.print(calibration.text())
                out.print("the plan file records the catalogue's device: `dnnplace evaluate` re-prices it uncalibrated")
            for line in band_lines(problem, result.estimate.step_time_s, rival)[calibration is not None:]:
                out.print(line)  # calibrated: its own residuals above replace the held-in band's range
            for line in runner_up_lines(problem, result.estimate.step_time_s, sol.stats.get("runner_ups", [])):
                out.print(line)
            from dnnplace.models.llm.plan_doc import host_lines

            for line in host_lines(doc["host"]):
                out.print(line)
            from dnnplace.models.llm.evaluation.kernel_ledger import ledger_lines

            for line in ledger_lines(doc["kernel_sources"]):
                out.print(line)
            if output is not None:
                out.print(f"plan written to {output}")
            if report is not None:
                out.print(f"report written to {report}")


def band_lines(problem: Any, predicted_s: float, rival: Any = None) -> list[str]:
    """What the model's measured error band for this kind of run says of a prediction, and of a configuration
    to compare with."""
    from dnnplace.models.llm.plan_doc import band_of

    band = band_of(problem)
    if band is not None:
        lo, hi = band.measured_range(predicted_s)
        lines = [f"{band.text()}: a measured step of {lo:.2f}-{hi:.2f} s"]
    elif problem.device.measured_kernels:
        lines = ["no error band with --kernels measured: the bands were measured with catalogue pricing"
                 " (its errors on the published rows: benchmarks/results/kernels_training.md)"]
    else:
        moe = getattr(problem, "moe", None) is not None
        what = f"mixture-of-experts {problem.job.precision}" if moe else problem.job.precision
        lines = [f"no measured error band for {what} on {problem.device.name} (no published run of this kind is"
                 " evaluated in a band; docs/dev/fidelity.md and docs/moe.md list how far such runs fall off)"]
    if rival is not None:
        t = rival.estimate.step_time_s
        fits = "fits" if rival.estimate.fits else "does not fit"
        verdict = ("" if band is None else "; within the error band of each other: the model cannot order them"
                   if band.indistinguishable(predicted_s, t) else "; further apart than the error band")
        lines.append(f"compared configuration: {t:.3f} s ({fits}), {100 * (t / predicted_s - 1):+.1f} % against"
                     f" the plan{verdict}")
    return lines


def runner_up_lines(problem: Any, predicted_s: float, others: list[Any]) -> list[str]:
    """The next fastest configurations that fit, each with its time, memory and whether the error band can tell
    it from the plan (where a band covers the run)."""
    from dnnplace.models.llm.plan_doc import band_of

    if not others:
        return []
    band = band_of(problem)
    lines = ["runner-ups (the next fastest configurations that fit, each with its best layer split):"]
    close = 0
    for n, r in enumerate(others, 1):
        t, c = r.estimate.step_time_s, r.config
        knobs = (f"tp={c.tp} pp={c.pp} vp={c.vp} cp={c.cp} dp={c.dp} mbs={c.mbs} recompute={c.recompute} "
                 f"zero={c.zero}" + (f" grad_dtype={c.grad_dtype}" if c.grad_dtype != "fp32" else "")
                 + (f" ep={c.ep} etp={c.etp} dispatcher={c.dispatcher} a2a_overlap={c.a2a_overlap}"
                    f" recompute_modules={c.recompute_modules} routing={c.routing}"
                    if getattr(problem, "moe", None) is not None else "")
                 + (f" offload_layers={c.offload_layers}" if c.offload_layers else ""))
        same = band is not None and band.indistinguishable(predicted_s, t)
        close += same
        verdict = "; within the error band of the plan" if same else ""
        lines.append(f"  {n}. {knobs}: {t:.3f} s ({100 * (t / predicted_s - 1):+.2f} %), "
                     f"{r.estimate.memory_per_gpu_bytes / 1e9:.1f} GB{verdict}")
    if band is None:
        lines.append("  (no measured error band for this run: how far apart these are in practice is unknown)")
    elif close:
        lines.append(f"  the plan is within the error band of {close} of them: the model cannot order those "
                     "(measure them, or take the one easiest to run)")
    else:
        lines.append("  every runner-up is further from the plan than the error band")
    return lines


def _is_dir(p: Path) -> bool:
    """``p.is_dir()`` that answers False for a name the system refuses (too long, a NUL): the reader
    then says what is wrong with it in one line, instead of an OSError escaping here."""
    try:
        return p.is_dir()
    except (OSError, ValueError):
        return False


def print_plan(console: object, doc: dict) -> None:
    """A readable table of a plan document."""
    from rich.table import Table

    c, p = doc["config"], doc["prediction"]
    t = Table(title=f"{doc['model']['name']} on {doc['cluster']['gpus']} x {doc['cluster']['device']}: "
                    f"{doc['status']} (bound {doc['bound']:.3f} s, gap {100 * doc['gap']:.2f} %)")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    for k in ("tp", "pp", "vp", "cp", "dp", "mbs", "num_microbatches", "recompute", "sequence_parallel",
              "distributed_optimizer", "zero", "grad_dtype", "offload_layers", "cuda_graphs", "first_stage_layers",
              "last_stage_layers"):
        t.add_row(k, str(c.get(k, "none" if k == "cuda_graphs" else 0)))  # absent from older plan files
    if doc["model"].get("num_experts", 1) > 1:  # older plan files were priced balanced
        t.add_row("routing", str(c.get("routing", "balanced")))
    t.add_row("step time (s)", f"{p['step_time_s']:.3f}")
    t.add_row("tokens/s", f"{p['tokens_per_s']:.0f}")
    t.add_row("MFU", f"{100 * p['mfu']:.1f} %")
    for k, v in p["time_breakdown"].items():
        t.add_row(f"  time: {k} (s)", f"{v:.3f}")
    t.add_row("memory per GPU (GB)", f"{p['memory_per_gpu_bytes'] / 1e9:.1f}")
    for k, v in p["memory_breakdown"].items():
        t.add_row(f"  memory: {k} (GB)", f"{v / 1e9:.1f}")
    if p.get("host_memory_bytes"):  # activation offloading: the host memory it takes per GPU
        t.add_row("host memory per GPU (GB)", f"{p['host_memory_bytes'] / 1e9:.1f} of "
                                               f"{p.get('host_capacity_bytes', 0.0) / 1e9:.1f}")
    t.add_row("fits", str(p["fits"]))
    t.add_row("runtime (s)", f"{doc['runtime_s']:.2f}")
    console.print(t)  # type: ignore[attr-defined]


def register(app: typer.Typer) -> None:
    """Add ``plan`` to a typer app."""
    app.command("plan")(plan)
