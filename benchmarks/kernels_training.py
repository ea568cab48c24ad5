"""Which source prices each term family of a training step better: the measured kernel tables or the catalogue.

Issue 44 item 1: for each term family -- dense GEMMs, expert GEMMs, attention, collectives -- the published
configuration of every row of ``benchmarks/llm_plans.py`` (and the MoE rows) is priced with the catalogue,
with that family alone from aiconfigurator-core's measured tables (``DeviceSpec.measured_kernels`` narrowed by
``kernel_ledger.tables_for``), and with every family from the tables.  The decision is made on the *held-in*
rows only (the BF16 H100 Llama runs the model was built against, ``evaluation/band.HELD_IN``); the others are
printed as checks.  Per family and setting: the step-time error against the measured step, and the share of
the family's kernel seconds each source priced (a family the tables cannot price on a row says so: the
setting changes nothing there).

    PYTHONPATH=src python benchmarks/kernels_training.py [--out benchmarks/results/kernels_training.md]
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llm_moe_rows import MOE_ROWS  # noqa: E402
from llm_plans import ROWS, arch_of, machine, make_problem, published_config  # noqa: E402

from dnnplace.models.llm.evaluation import evaluate  # noqa: E402
from dnnplace.models.llm.evaluation.kernel_ledger import FAMILIES, ledger_doc, recording, tables_for  # noqa: E402
from dnnplace.models.llm.spec import LLMProblem, ParallelConfig  # noqa: E402

SETTINGS = ("catalogue", *FAMILIES, "all")


def price(pr: LLMProblem, cfg: ParallelConfig, setting: str) -> tuple[float, dict[str, dict[str, float]]]:
    """Step seconds with ``setting``'s families from the tables, and per family the share of its priced kernel
    entries each source gave (by count: a family's seconds are dominated by its longest kernel)."""
    on = setting != "catalogue"
    fams = FAMILIES if setting in ("all", "catalogue") else (setting,)
    p = dataclasses.replace(pr, device=dataclasses.replace(pr.device, measured_kernels=on))
    with tables_for(fams), recording() as led:
        est = evaluate(p, cfg)
    doc = ledger_doc(led, on)
    counts = {f: doc["families"][f]["counts"] for f in FAMILIES}
    return est.step_time_s, {f: {k: v / sum(c.values()) for k, v in c.items()} for f, c in counts.items()}


def rows() -> list[tuple[str, bool, float, Callable[[], tuple[LLMProblem, ParallelConfig]]]]:
    """(label, held in, measured s, problem and published configuration) of every row."""
    out = []
    for r in ROWS:
        def build(r=r):  # type: ignore[no-untyped-def]
            arch = arch_of(r.model)
            dev, gpn = machine(r)
            return make_problem(arch, r.gpus, r.gbs, r.precision, dev, gpn), published_config(arch, r)
        out.append((f"{r.label} {r.gpus}", r.held_in, r.measured, build))
    for m in MOE_ROWS:
        out.append((f"{m.label} {m.system} {m.precision} {m.gpus}", False, m.measured_s,
                    lambda m=m: (m.problem(), m.config())))
    return out


def main() -> int:
    out = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else None
    head = " | ".join(f"{s} error" for s in SETTINGS)
    lines = [f"| row | held in | measured s | {head} | entries from the tables (all) |",
             "|---|---|---|" + "---|" * (len(SETTINGS) + 1)]
    errors: dict[tuple[bool, str], list[float]] = {}
    for label, held, measured, build in rows():
        pr, cfg = build()
        cells, reach = [], ""
        for s in SETTINGS:
            t, shares = price(pr, cfg, s)
            err = t / measured - 1
            errors.setdefault((held, s), []).append(err)
            cells.append(f"{100 * err:+.1f} %")
            if s == "all":  # which families the tables actually reached on this row
                reach = ", ".join(f"{f} {100 * (1 - v.get('catalogue', 0.0)):.0f} %" for f, v in shares.items() if v)
        lines.append(f"| {label} | {'yes' if held else 'no'} | {measured:.2f} | " + " | ".join(cells) + f" | {reach} |")
    lines += ["", "| rows | " + " | ".join(f"{s} mean abs error" for s in SETTINGS) + " |",
              "|---|" + "---|" * len(SETTINGS)]
    for held in (True, False):
        cells = [f"{100 * statistics.fmean(abs(e) for e in errors[(held, s)]):.1f} %" for s in SETTINGS]
        lines.append(f"| {'held in' if held else 'held out (checks)'} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if out is not None:
        from dnnplace.utils.files import write_text_atomic

        write_text_atomic(out, "# `python benchmarks/kernels_training.py`\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
