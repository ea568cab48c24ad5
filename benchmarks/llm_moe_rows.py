"""The published mixture-of-experts training rows the LLM planner is checked against (issue 32), as data.

Each row: the model's config.json (tests/models/llm/fixtures/, copied from the shared LLM measurements),
the system, the published layout (TP, PP, VP, EP, ETP, dispatcher, selective-recompute modules and
the pipeline layout the recipe sets) and the measured seconds per step, with its source.
``python benchmarks/llm_moe_rows.py [--search]`` prints each row's model FLOPs (the recipes' formula,
``evaluation/llm/moe.model_flops_per_step``) and the MFU the measurement implies, then each published
layout through the evaluator (and, with ``--search``, the free search); exit 0 when every row is within
15 % and fits.

    PYTHONPATH=src python benchmarks/llm_moe_rows.py [--search]
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from dnnplace.core.systems import system_spec

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "models" / "llm" / "fixtures"

#: DeepSeek-V3's layouts (decoder layers per virtual stage; the embedding sits on the first, the MTP layer and the
#: loss on the last).  PP8 VP2: the 25.08 recipe's map_pp_vp_to_layout (NeMo scripts/performance/llm/
#: pretrain_deepseek_v3.py at the commit dgxc 25.08 pins), Et*4|(t*4|)*14|tL.  PP4: the 25.05 recipe (NeMo 25.04,
#: same script at v2.3.0) sets num_layers_in_first_pipeline_stage = 64/pp - 1 and the last 64/pp - 2.
_DS_PP8_VP2 = (4,) * 15 + (1,)
_DS_PP4 = (15, 16, 16, 14)


@dataclass(frozen=True)
class MoERow:
    model: str  # config file stem under FIXTURES
    label: str
    system: str  # catalogue device name
    gpus_per_domain: int  # GPUs per NVLink domain
    gpus: int
    precision: str
    tp: int
    pp: int
    vp: int
    ep: int
    etp: int
    global_batch: int
    seq_len: int
    measured_s: float
    source: str
    dispatcher: str = "alltoall"
    recompute_modules: tuple[str, ...] = ()
    layers_per_stage: tuple[int, ...] = ()

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)


_DGXC = "NVIDIA dgxc-benchmarking"
MOE_ROWS: tuple[MoERow, ...] = (
    MoERow("deepseek-v3", "DeepSeek-V3", "h100", 8, 1024, "bf16", 1, 8, 2, 64, 1, 8192, 4096, 36.189,
           f"{_DGXC} 25.08", dispatcher="flex", recompute_modules=("mla_up_proj", "mlp", "moe"),
           layers_per_stage=_DS_PP8_VP2),  # the 25.08 script: H100 uses DeepEP (flex), forced load balancing
    # GB200 NVL72: a job of 256 GPUs fills 64-GPU segments of its racks (the systems catalogue's NVLink group)
    MoERow("deepseek-v3", "DeepSeek-V3", "gb200", system_spec("gb200-nvl72").domain_for(256), 256, "bf16",
           2, 4, 1, 64, 1, 2048, 4096, 34.194,
           f"{_DGXC} 25.05", recompute_modules=("core_attn",), layers_per_stage=_DS_PP4),  # launch.sh RM=core_attn
    MoERow("llama-4-maverick-17b-128e", "Llama 4 Maverick", "h100", 8, 512, "bf16", 4, 1, 1, 128, 4, 1024, 8192,
           4.426, f"{_DGXC} 25.05", layers_per_stage=(48,)),
    MoERow("llama-4-maverick-17b-128e", "Llama 4 Maverick", "h100", 8, 512, "fp8", 4, 1, 1, 128, 4, 1024, 8192,
           3.855, f"{_DGXC} 25.05", layers_per_stage=(48,)),
    MoERow("qwen3-30b-a3b", "Qwen3-30B-A3B", "h100", 8, 16, "bf16", 1, 1, 1, 16, 1, 1024, 4096, 20.147,
           "Megatron-Bridge MoE performance notes", dispatcher="flex", layers_per_stage=(48,)),
)


def moe_table(search_free: bool = False) -> bool:
    """Each row's published layout through the evaluator (``--fix``), predicted against measured; the free
    search on request.  True when every priced row is within 15 % and fits."""
    import time

    import dnnplace
    from dnnplace.errors import DnnplaceError
    from dnnplace.models.llm.evaluation import evaluate
    from dnnplace.models.llm.moe_knobs import module_set
    from dnnplace.models.llm.solvers import search
    from dnnplace.models.llm.spec import ParallelConfig

    ok = True
    print("| model | system | GPUs | published config | measured s | predicted s | error | fits | memory GB |"
          " search plan | search s | runtime s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in MOE_ROWS:
        config = (f"TP{r.tp} PP{r.pp} VP{r.vp} EP{r.ep} ETP{r.etp} {r.dispatcher}"
                  + (f" {'+'.join(r.recompute_modules)}" if r.recompute_modules else ""))
        try:
            pr = dnnplace.load_llm(FIXTURES / f"{r.model}.json", gpus=r.gpus, seq_len=r.seq_len,
                                   global_batch=r.global_batch, gpus_per_node=r.gpus_per_domain, device=r.system,
                                   precision=r.precision)
            cfg = ParallelConfig(r.tp, r.pp, r.vp, 1, r.dp, 1, "selective" if r.recompute_modules else "none",
                                 r.tp > 1, True, r.layers_per_stage, ep=r.ep, etp=r.etp, dispatcher=r.dispatcher,
                                 recompute_modules=module_set(r.recompute_modules))
            est = evaluate(pr, cfg)
        except DnnplaceError as exc:
            ok = False
            print(f"| {r.label} | {r.system} {r.precision} | {r.gpus} | {config} | {r.measured_s:.3f} | - | - | - |"
                  f" - | not priced: {exc} | - | - |")
            continue
        err = est.step_time_s / r.measured_s - 1
        row_ok = abs(err) <= 0.15 and est.fits
        ok &= row_ok
        plan_text, plan_s, runtime = "-", "-", "-"
        if search_free:
            t = time.perf_counter()
            try:
                plan = search(pr, time_limit=60.0)
                c = plan.config
                plan_text = (f"TP{c.tp} PP{c.pp} VP{c.vp} CP{c.cp} EP{c.ep} ETP{c.etp} {c.dispatcher} {c.recompute}"
                             f" {c.recompute_modules} mbs{c.mbs} ({plan.status})")
                plan_s = f"{plan.estimate.step_time_s:.2f}"
            except DnnplaceError as exc:
                plan_text = f"none: {exc}"
            runtime = f"{time.perf_counter() - t:.1f}"
        print(f"| {r.label} | {r.system} {r.precision} | {r.gpus} | {config} | {r.measured_s:.3f} |"
              f" {est.step_time_s:.2f} | {100 * err:+.1f} % | {est.fits} | {est.memory_per_gpu_bytes / 1e9:.1f} |"
              f" {plan_text} | {plan_s} | {runtime} |{'' if row_ok else ' MISSED'}")
    return ok


def main() -> int:
    from dnnplace.core.catalogue import device_spec
    from dnnplace.errors import DnnplaceError
    from dnnplace.models.llm.evaluation.moe import model_flops_per_step
    from dnnplace.models.llm.moe_config import load_moe
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
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
