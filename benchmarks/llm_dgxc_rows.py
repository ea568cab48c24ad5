"""Every training row of the dgxc-benchmarking release the issue rows come from (25.05), priced: a check.

Issues #31 and #32 each took a few rows from NVIDIA's dgxc-benchmarking 25.05 READMEs (Llama 3.1 405B on
GB200 NVL72, DeepSeek-V3 on GB200, Llama 4 Maverick on H100).  The same READMEs publish more runs of the same
models with the same software: 405B on 512 H100s, DeepSeek-V3 on 512 / 1,024 H100s and 128 / 512 GB200s,
Maverick on 128-512 GB200s.  They are not held in and not targets: this script prices each published
configuration as its launch script sets it (``deepseek_v3/pretraining/launch.sh``, ``llama4/launch.sh``,
``llama3.1/README.md`` at tag v25.05.05) and prints measured, predicted, error and fits, then the per-GPU
speed of GB200 over H100 for 405B, measured against the model's.  It separates what a row's miss is made of:
a system (the same model and release within 15 % on one system, not on the other) or a release (every row
of one release off in the same direction, a later release of the same model and system within 15 %).

    PYTHONPATH=src python benchmarks/llm_dgxc_rows.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llm_plans import Row, arch_of, machine, make_problem, published_config  # noqa: E402

from dnnplace.core.systems import system_spec  # noqa: E402
from dnnplace.models.llm.evaluation import evaluate  # noqa: E402
from dnnplace.models.llm.evaluation.band import CHECKED, DS_PP4_SPLIT, MOE_PUBLISHED, PublishedMoERow  # noqa: E402
from dnnplace.models.llm.spec import LLMEstimate  # noqa: E402

_SRC = "dgxc-benchmarking v25.05.05"
_L31, _DS, _L4 = (f"{_SRC} llama3.1/README.md", f"{_SRC} deepseek_v3/pretraining/README.md",
                  f"{_SRC} llama4/README.md")

#: Llama 3.1 405B, seq 8192, mbs 1, no recomputation (the README's tables and NeMo's recommended_model_configs
#: CSVs at the pinned commit; FP8 = delayed scaling; bf16 gradient reduction at both precisions, as
#: evaluation/band.py has the GB200 rows).
DENSE: tuple[Row, ...] = tuple(
    Row("405b", system, precision, gpus, tp, 8, 2, 8, gbs, measured, _L31, False, "bf16")
    for system, precision, gpus, tp, gbs, measured in (
        ("gb200-nvl72", "bf16", 128, 4, 64, 9.347), ("gb200-nvl72", "bf16", 256, 4, 128, 9.484),
        ("gb200-nvl72", "bf16", 512, 4, 256, 9.508), ("gb200-nvl72", "fp8", 128, 4, 64, 6.131),
        ("gb200-nvl72", "fp8", 256, 4, 128, 6.183), ("gb200-nvl72", "fp8", 512, 4, 256, 6.244),
        ("h100", "bf16", 512, 8, 256, 19.810), ("h100", "fp8", 512, 8, 256, 13.020)))


def _gb200(gpus: int) -> int:
    return system_spec("gb200-nvl72").domain_for(gpus)


#: DeepSeek-V3's PP splits as NeMo 25.04's pretrain_deepseek_v3.py sets them (first stage 64/pp - 1 layers,
#: last 64/pp - 2, the rest even; PP4 is the issue row's, from band.py); Maverick's PP2 VP12 puts 2 of its 48
#: layers on each virtual stage.
_DS_PP8, _DS_PP16 = (7,) + (8,) * 6 + (6,), (3,) + (4,) * 14 + (2,)
MOE: tuple[PublishedMoERow, ...] = (
    PublishedMoERow("deepseek-v3", "DeepSeek-V3", "h100", 8, 512, "bf16", 2, 8, 1, 64, 1, 4096, 4096, 48.948,
                    _DS, recompute_modules=("mla_up_proj",), layers_per_stage=_DS_PP8),
    PublishedMoERow("deepseek-v3", "DeepSeek-V3", "h100", 8, 1024, "bf16", 2, 16, 1, 64, 1, 8192, 4096, 52.04,
                    _DS, recompute_modules=("mla_up_proj",), layers_per_stage=_DS_PP16),
    *(PublishedMoERow("deepseek-v3", "DeepSeek-V3", "gb200", _gb200(g), g, "bf16", 2, 4, 1, ep, 1, 8 * g, 4096, t,
                      _DS, recompute_modules=("core_attn",), layers_per_stage=DS_PP4_SPLIT)
      for g, ep, t in ((128, 32, 34.168), (256, 64, 34.194), (512, 64, 34.274))),
    *(PublishedMoERow("llama-4-maverick-17b-128e", "Llama 4 Maverick", "gb200", _gb200(g), g, p, 1, 2, 12, 64, 1,
                      8 * g, 8192, t, _L4, layers_per_stage=(2,) * 24)
      for p, g, t in (("bf16", 128, 7.781), ("bf16", 256, 7.859), ("bf16", 512, 7.992),
                      ("fp8", 128, 6.093), ("fp8", 256, 6.223), ("fp8", 512, 6.327))),
)

#: The issue rows among them (marked in the tables): (system, GPUs, precision, measured seconds).
_ISSUE = {(r.system, r.gpus, r.precision, r.measured_s) for r in (*CHECKED, *MOE_PUBLISHED)}


def price_dense(r: Row) -> LLMEstimate:
    """A dense row's published configuration through the evaluator, priced as llm_plans.py prices its rows."""
    arch = arch_of(r.model)
    dev, gpn = machine(r)
    return evaluate(make_problem(arch, r.gpus, r.gbs, r.precision, dev, gpn), published_config(arch, r))


def dense_rows() -> dict[tuple[str, str], tuple[float, float]]:
    """Print the dense rows; per (system, precision) the (measured, predicted) tokens/s/GPU of the 128/512-GPU row."""
    speed: dict[tuple[str, str], tuple[float, float]] = {}
    print("| model | system | precision | GPUs | TP PP CP VP | GBS | measured s | predicted s | error | fits |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in DENSE:
        est = price_dense(r)
        err = est.step_time_s / r.measured - 1
        issue = " (issue #31)" if (r.system, r.gpus, r.precision, r.measured) in _ISSUE else ""
        print(f"| Llama 3.1 405B{issue} | {r.system} | {r.precision} | {r.gpus} | {r.tp} {r.pp} {r.cp} {r.vp} |"
              f" {r.gbs} | {r.measured:.3f} | {est.step_time_s:.3f} | {err:+.1%} | {est.fits} |")
        if r.gpus in (128, 512) and (r.system, r.precision) not in speed:
            tokens = r.gbs * 8192 / r.gpus
            speed[(r.system, r.precision)] = (tokens / r.measured, tokens / est.step_time_s)
    return speed


def moe_rows() -> list[float]:
    errors = []
    print("\n| model | system | precision | GPUs | TP PP VP EP ETP | GBS | measured s | predicted s | error | fits |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in MOE:
        est = evaluate(r.problem(), r.config())
        err = est.step_time_s / r.measured_s - 1
        errors.append(err)
        issue = " (issue #32)" if (r.system, r.gpus, r.precision, r.measured_s) in _ISSUE else ""
        print(f"| {r.label}{issue} | {r.system} | {r.precision} | {r.gpus} | {r.tp} {r.pp} {r.vp} {r.ep} {r.etp} |"
              f" {r.global_batch} | {r.measured_s:.3f} | {est.step_time_s:.2f} | {err:+.1%} | {est.fits} |")
    return errors


def main() -> int:
    speed = dense_rows()
    print("\nLlama 3.1 405B, GB200 over H100 per GPU (tokens/s/GPU, same release):")
    for p in ("bf16", "fp8"):
        (gm, gp), (hm, hp) = speed[("gb200-nvl72", p)], speed[("h100", p)]
        print(f"  {p}: measured {gm / hm:.2f}x, model {gp / hp:.2f}x")
    errors = moe_rows()
    later = MOE_PUBLISHED[0]
    err = evaluate(later.problem(), later.config()).step_time_s / later.measured_s - 1
    print(f"\nMoE rows of this release: {min(errors):+.1%} .. {max(errors):+.1%} ({len(errors)} rows);"
          f" DeepSeek-V3 H100 at the next release ({later.source}, TP{later.tp} PP{later.pp} VP{later.vp}"
          f" EP{later.ep} {later.dispatcher}): {err:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
