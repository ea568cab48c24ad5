"""``dnnplace export``: a plan in the format another trainer reads (LLM plans: Megatron-LM, torchtitan,
DeepSpeed; splits of a profiled workload: torch.distributed.pipelining, stage lists)."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Optional

import typer

from dnnplace.cli.console import err, user_errors
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.exporters import EXPORTERS, get_exporter
from dnnplace.models.serving.exporters import EXPORTERS as SERVING_EXPORTERS

# The export registries' names (dnnplace.models.llm.exporters.EXPORTERS, and the serving engines of
# dnnplace.models.serving.exporters.EXPORTERS): the CLI never lists targets itself.
ExportTarget = StrEnum("ExportTarget", {name: name for name in (*EXPORTERS, *SERVING_EXPORTERS)})  # type: ignore[misc]
_TO_HELP = ("Target: " + "; ".join(f"{target.name}: {target.summary}" for target in EXPORTERS.values())
            + "; " + ", ".join(SERVING_EXPORTERS) + ": a serving plan (from `serve`) as that engine's command or"
            " options [default: stages, for a split with -w].")


def export_plan(
    plan: Path = typer.Argument(..., help="An LLM plan (from `plan`), a serving plan (from `serve`), or a split"
                                          " of a profiled workload."),
    to: Optional[ExportTarget] = typer.Option(None, "--to", show_default=False, help=_TO_HELP),
    workload: Optional[Path] = typer.Option(None, "--workload", "-w",
                                            help="Split targets: the profiled workload (from `profile`)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write here instead of stdout."),
    as_json: bool = typer.Option(False, "--json", help="torch-pipelining: the split points as JSON instead of"
                                                       " a runnable training script."),
    disaggregated: bool = typer.Option(False, "--disaggregated", help="Serving plans from `serve --disaggregate`:"
                                       " its prefill/decode deployment (vLLM, SGLang) and the router."),
    model: Optional[str] = typer.Option(None, "--model", help="torch-pipelining: MODULE:FACTORY for the script"
                                                              " (default: the one the workload was profiled from);"
                                                              " serving targets: the checkpoint the engine loads"
                                                              " (default: MODEL)."),
) -> None:
    """Export a plan in the format another trainer reads: Megatron-LM arguments, a torchtitan TOML or a DeepSpeed
    config (LLM plans); a torch.distributed.pipelining training script or stage lists (splits); the vLLM, SGLang,
    TensorRT-LLM, llama.cpp or Hugging Face command or options (serving plans)."""
    with user_errors():
        from dnnplace import api
        from dnnplace.utils.files import check_outputs, write_text_atomic

        check_outputs([output], [plan, workload])
        if to is None and workload is None:
            raise DnnplaceError(f"name an export target with --to: {', '.join((*EXPORTERS, *SERVING_EXPORTERS))}")
        if to is not None and str(to.value) in SERVING_EXPORTERS:
            for flag, given in (("-w/--workload", workload is not None), ("--json", as_json)):
                if given:
                    raise DnnplaceError(f"{flag} does not apply to --to {to.value}")
            text = api.export_serving_plan(plan, str(to.value), model if model is not None else "MODEL",
                                           disaggregated)
            note = None if disaggregated else api.serving_export_note(plan, str(to.value))
            if output is not None:
                write_text_atomic(output, text, inputs=[plan])
            else:
                sys.stdout.write(text)
            if note is not None:
                err.print(note, markup=False, highlight=False)
            return
        if disaggregated:
            raise DnnplaceError("--disaggregated applies to serving plans exported --to vllm or sglang")
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


def register(app: typer.Typer) -> None:
    """Add ``export`` to a typer app."""
    app.command("export")(export_plan)
