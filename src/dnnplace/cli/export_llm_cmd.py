"""``dnnplace export PLAN.json --to TARGET``: the steps behind the command, kept out of app.py.

Load and validate the plan, render it for the chosen exporter, and write the
text atomically with :mod:`dnnplace.utils.files` (never through a link, never
over the plan itself); without an output path the text is returned for stdout.
"""

from __future__ import annotations

from pathlib import Path

from dnnplace.exporters import get_exporter
from dnnplace.exporters.plan_file import load_plan
from dnnplace.utils.files import check_outputs, write_text_atomic


def export_plan(plan_path: str | Path, to: str, output: str | Path | None = None) -> str:
    """Export the plan at ``plan_path`` for target ``to``; write it to ``output`` when given. Returns the text.

    Every failure (unknown target, unreadable or invalid plan, an output that is
    the plan or not a regular file) is a one-line :class:`~dnnplace.errors.DnnplaceError`,
    raised before anything is written.
    """
    exporter = get_exporter(to)
    if output is not None:
        check_outputs([output], [plan_path])
    text = exporter.render(load_plan(plan_path))
    if output is not None:
        write_text_atomic(output, text, inputs=[plan_path])
    return text
