"""The published mixture-of-experts training rows the LLM planner is checked against (issue 32), as data.

Each row: the model's config.json (src/dnnplace/models/llm/published/, copied from the shared LLM measurements),
the system, the published layout (TP, PP, VP, EP, ETP, dispatcher, selective-recompute modules and
the pipeline layout the recipe sets) and the measured seconds per step, with its source.
``python benchmarks/llm_moe_rows.py [--search]`` prints each row's model FLOPs (the recipes' formula,
``evaluation/llm/moe.model_flops_per_step``) and the MFU the measurement implies, then each published
layout through the evaluator (and, with ``--search``, the free search); exit 0 when every row is within
15 % and fits (and every search fits, is no slower than the published layout and takes at most 10 s).
``benchmarks/llm_plans.py`` prints this table with the searches (``--no-moe-search`` leaves them out).

    PYTHONPATH=src python benchmarks/llm_moe_rows.py [--search]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llm_plans import MAX_RUNTIME, TOLERANCE  # noqa: E402  the targets of every LLM benchmark row

from dnnplace.models.llm.evaluation.band import MOE_PUBLISHED, PublishedMoERow  # noqa: E402
from dnnplace.models.llm.published import CONFIGS  # noqa: E402

FIXTURES = CONFIGS

#: The rows live with the error bands that are measured on them (``evaluation/band.py``).
MoERow = PublishedMoERow
MOE_ROWS: tuple[PublishedMoERow, ...] = MOE_PUBLISHED


def moe_table(search_free: bool = False) -> bool:
    """Each row's published layout through the evaluator (``--fix``), predicted against measured, and with
    ``search_free`` the free search.  True when every priced row is within 15 % and fits and every search
    found a plan that fits, is no slower than the published layout and took at most ``MAX_RUNTIME``."""
    import time

    from dnnplace.errors import DnnplaceError
    from dnnplace.models.llm.evaluation import evaluate
    from dnnplace.models.llm.solvers import search

    ok = True
    print("| model | system | GPUs | published config | measured s | predicted s | error | fits | memory GB |"
          " search plan | search s | runtime s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in MOE_ROWS:
        config = (f"TP{r.tp} PP{r.pp} VP{r.vp} EP{r.ep} ETP{r.etp} {r.dispatcher}"
                  + (f" {'+'.join(r.recompute_modules)}" if r.recompute_modules else ""))
        try:
            pr = r.problem()
            est = evaluate(pr, r.config())
        except DnnplaceError as exc:
            ok = False
            print(f"| {r.label} | {r.system} {r.precision} | {r.gpus} | {config} | {r.measured_s:.3f} | - | - | - |"
                  f" - | not priced: {exc} | - | - |")
            continue
        err = est.step_time_s / r.measured_s - 1
        row_ok = abs(err) <= TOLERANCE and est.fits
        plan_text, plan_s, runtime = "-", "-", "-"
        if search_free:
            t = time.perf_counter()
            try:
                plan = search(pr, time_limit=60.0)
                c = plan.config
                plan_text = (f"TP{c.tp} PP{c.pp} VP{c.vp} CP{c.cp} EP{c.ep} ETP{c.etp} {c.dispatcher} {c.recompute}"
                             f" {c.recompute_modules} mbs{c.mbs} ({plan.status})")
                plan_s = f"{plan.estimate.step_time_s:.2f}"
                # the search's targets: a plan that fits, no slower than the published layout, within 10 s
                row_ok &= (plan.estimate.fits and plan.runtime_s <= MAX_RUNTIME
                           and plan.estimate.step_time_s <= est.step_time_s * (1 + 1e-12))
            except DnnplaceError as exc:
                plan_text, row_ok = f"none: {exc}", False
            runtime = f"{time.perf_counter() - t:.1f}"
        ok &= row_ok
        print(f"| {r.label} | {r.system} {r.precision} | {r.gpus} | {config} | {r.measured_s:.3f} |"
              f" {est.step_time_s:.2f} | {100 * err:+.1f} % | {est.fits} | {est.memory_per_gpu_bytes / 1e9:.1f} |"
              f" {plan_text} | {plan_s} | {runtime} |{'' if row_ok else ' MISSED'}")
    return ok


#: Megatron-MoE-ModelZoo's Qwen3-235B-A22B layouts on 256 H100 (seq 4096, GBS 2048; issue 44): routers trained with
#: an auxiliary loss and not forced to balance, so priced at ``moe_knobs.UNFORCED_ROUTING``; measured seconds/step.
MODELZOO = (("tp=2,pp=8,vp=4,ep=32,mbs=1", 17.6), ("tp=4,pp=8,vp=4,ep=8,mbs=1", 29.0),
            ("tp=2,pp=32,vp=3,ep=8,mbs=1", 24.2))


def modelzoo_table() -> None:
    """The ModelZoo layouts (the search fills the knobs the layout leaves) priced balanced and at the unforced
    router's default skew, against the measured step; a check, listed only (not in the exit status)."""
    import dataclasses

    import dnnplace
    from dnnplace.models.llm.evaluation import evaluate
    from dnnplace.models.llm.moe_knobs import UNFORCED_ROUTING
    from dnnplace.models.llm.solvers import search

    pr = dnnplace.load_llm(FIXTURES / "qwen3-235b-a22b.json", gpus=256, seq_len=4096, global_batch=2048)
    print(f"\n| ModelZoo Qwen3-235B-A22B, 256 H100 | measured s | balanced s | error | {UNFORCED_ROUTING} s | error |")
    print("|---|---|---|---|---|---|")
    for pins, measured in MODELZOO:
        fixed = {k: int(v) for k, v in (p.split("=") for p in pins.split(","))}
        c = search(pr, fixed, time_limit=60.0).config
        bal = evaluate(pr, dataclasses.replace(c, routing="balanced")).step_time_s
        skew = evaluate(pr, dataclasses.replace(c, routing=UNFORCED_ROUTING)).step_time_s
        print(f"| {pins} {c.dispatcher} {c.recompute} | {measured:.1f} | {bal:.2f} |"
              f" {100 * (bal / measured - 1):+.1f} % | {skew:.2f} | {100 * (skew / measured - 1):+.1f} % |")


def main() -> int:
    from dnnplace.arch.moe_config import load_moe
    from dnnplace.core.catalogue import device_spec
    from dnnplace.errors import DnnplaceError
    from dnnplace.models.llm.evaluation.moe import model_flops_per_step
    from dnnplace.models.llm.moe_rules import check_moe_config, moe_columns

    print("| model | system | GPUs | config | measured s | model PFLOP/step | measured MFU | rules |")
    print("|---|---|---|---|---|---|---|---|")
    for r in MOE_ROWS:
        m = load_moe(FIXTURES / f"{r.model}.json")
        mf = model_flops_per_step(m, r.seq_len, r.global_batch)
        try:
            peak = device_spec(r.system).peak("bf16")  # the recipes' denominator for every precision
            mfu = f"{100 * mf / (r.measured_s * r.gpus * peak):.1f} %"
        except DnnplaceError:
            mfu = "- (no catalogue entry)"
        try:
            check_moe_config(m, r.gpus, moe_columns(tp=r.tp, pp=r.pp, vp=r.vp, dp=r.dp, ep=r.ep, etp=r.etp,
                                                    dispatcher=r.dispatcher,
                                                    recompute="selective" if r.recompute_modules else "none",
                                                    recompute_modules=r.recompute_modules))
            rules = "kept"
        except DnnplaceError as exc:
            rules = str(exc)
        config = (f"TP{r.tp} PP{r.pp} VP{r.vp} EP{r.ep} ETP{r.etp} {r.dispatcher}"
                  + (f" recompute {','.join(r.recompute_modules)}" if r.recompute_modules else ""))
        print(f"| {r.label} | {r.system} {r.precision} | {r.gpus} | {config} | {r.measured_s:.3f} | "
              f"{mf / 1e15:.1f} | {mfu} | {rules} |")
    ok = moe_table(search_free="--search" in sys.argv)
    modelzoo_table()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
