"""What the command groups share: text output on stdout, the choices they parse, and reading a plan to judge.

The CLI only parses text: every value is checked by the API function it reaches (or, where work
comes before that call, by that function's own declaration through
:func:`~dnnplace.utils.params.check_arguments`), and an error names the command's flag.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from dnnplace.api.methods import METHODS
from dnnplace.cli.console import err, flag_name
from dnnplace.errors import DnnplaceError
from dnnplace.utils.text import printable

# The registry's names (dnnplace.api.methods.METHODS): the CLI never lists methods itself.
Method = StrEnum("Method", {name: name for name in METHODS})  # type: ignore[misc]


class Objective(StrEnum):
    throughput = "throughput"
    latency = "latency"
    fw_bw = "fw+bw"


class Schedule(StrEnum):
    one_f_one_b = "1f1b"
    gpipe = "gpipe"


def emit_json(doc: object) -> None:
    """Print one JSON document on stdout: independent of the console width, ASCII-only, no NaN/Infinity."""
    from dnnplace.utils.text import json_safe

    emit_text(json.dumps(json_safe(doc), indent=2, ensure_ascii=True, allow_nan=False) + "\n")


def emit_text(text: str) -> None:
    """Print text (a CSV or markdown table) on stdout as it is: no wrapping, control characters escaped."""
    from dnnplace.utils.text import OutputError, encodable

    stream = sys.stdout
    if stream is None:
        raise OutputError("standard output is closed; nothing can be shown")
    text = encodable(printable(text.replace("\r\n", "\n"), keep_newlines=True), getattr(stream, "encoding", None))
    try:
        stream.write(text if text.endswith("\n") else text + "\n")
        stream.flush()
    except (OSError, ValueError) as exc:
        raise OutputError(f"cannot write to standard output ({getattr(exc, 'strerror', None) or exc})") from None


def model_file(spec: str) -> Path | None:
    """The .py file of a MODULE:FACTORY spec, when it names one (an input the outputs must not replace)."""
    module = spec.rpartition(":")[0] or spec
    try:
        return Path(module) if Path(module).is_file() else None
    except (OSError, ValueError):
        return None


def accelerators_option() -> Any:
    return typer.Option(None, "--accelerators", "-k", help="Piper: judge under this maxDevices.")


def memory_option() -> Any:
    return typer.Option(None, "--memory", help="Piper: judge under this maxMemoryPerDevice (bytes).")


def bandwidth_option() -> Any:
    return typer.Option(None, "--bandwidth", help="Piper: judge under this bandwidth (B/s).")


def batch_option() -> Any:
    return typer.Option(None, "--batch", help="Piper: judge under this mbsInBatch.")


def judged(workload: Path, split: Path | None, **overrides: Any) -> tuple[Any, Any]:
    """The instance and plan to judge: the workload file's parameters with the command line's overrides.

    Each file is read once: an LLM plan file names its own problem, so it may come alone, and its
    plan comes from that one reading.  A Piper plan's own record of the parameters it was made for
    is never used; where it differs, :func:`print_notes` says which once the plan was judged.
    """
    from dnnplace import api
    from dnnplace.api.models import check_declared, model_of
    from dnnplace.utils.params import check_arguments

    given = {k: v for k, v in overrides.items() if v is not None}
    check_arguments(api.with_budget, **given)  # before reading: a typo costs no load
    inst, own_plan = api.load_with_plan(workload)
    m = model_of(inst)
    check_declared(m, "judge_overrides", given, name=flag_name)
    if m.judge_overrides:
        inst = api.with_budget(inst, **given)
    if split is None:
        if own_plan is None:
            raise DnnplaceError(f"{workload}: name the plan to judge after the workload")
        return inst, own_plan
    return api.load_plan(inst, split)


def print_notes(split: Path, inst: object, plan: object, overlap_comm: bool = False) -> None:
    """After a plan was judged (an error prints only its own line): what it records but was not used."""
    from dnnplace import api

    for note in api.plan_notes(inst, plan, overlap_comm=overlap_comm):  # type: ignore[arg-type]
        err.print(f"note: {split}: {note}", soft_wrap=True)
