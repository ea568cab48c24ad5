"""The LLM planner against Megatron-Bridge's published dense Llama pre-training rows (a check, not held in).

Every dense Llama row of Megatron-Bridge's ``docs/performance-summary.md`` and
``docs/performance-summary-archive.md`` (releases 25.09 .. 26.06; 26.06.01 and 26.08 list no Llama
pre-training row; the SFT / LoRA rows are out of scope), each priced with the published parallel
configuration and the knobs the release's own performance recipe set (``scripts/performance/configs/llama*``
at the commit of the release's table; from 2026-06 ``src/megatron/bridge/perf_recipes/llama``):

* precision: "FP8" of the 26.x tables and "FP8-CS" of 25.11 are the recipes' ``fp8_cs``
  (``get_precision_config``: current scaling with ``first_last_layers_bf16 = False``, every layer in FP8,
  ``fp8_param_gather = True``) on Hopper and Blackwell alike -- the recipes have no delayed-scaling entry
  from 25.11 on; the 25.09 tables name no precision: the first figure is ``fp8_cs``, the one in parentheses
  ``fp8_mx`` (the table's footnote: 32-element quantization blocks), as the 25.09 yaml lists them;
* NVFP4 is ``bf16_with_nvfp4_mixed()`` unchanged: every layer in NVFP4 (``nvfp4-all``), with FP4 parameters
  (``fp4_param_gather``, ``nvfp4-fp4p``) from 26.04.01 on;
* gradients reduced in BF16 (every script sets ``grad_reduce_in_fp32 = False``);
* Transformer Engine's cross entropy (``cross_entropy_fusion_impl = "te"``: the 25.09 yaml configs, then
  ``scripts/performance/utils/overrides.py`` and ``perf_recipes/_common.py`` ``_benchmark_common``), which keeps
  the 16-bit logits only (the planner's ``cross_entropy="te"``);
* FSDP (the table's FSDP column) = Megatron-FSDP ``optim_grads_params``: ZeRO 3 over dp x cp;
* no recomputation unless the recipe sets it; CUDA graphs where the recipe sets them (the planner prices no
  launch overhead, so they change nothing here and are only listed).

Activation CPU offloading of N layers (the recipes' ``cpu_offloading_num_layers``) is priced with the planner's
``offload_layers`` knob; a row whose recipe uses a knob the planner lacks (recomputation of N layers) is priced
without it and printed "not expressible" with the reason, never dropped.  Layers split as
Megatron-Bridge's 405B recipe splits them (account_for_embedding / account_for_loss_in_pipeline_split: the
embedding and the loss each count as a layer, so pp 16 x vp 8 leaves the first and last virtual stage without
a transformer layer).  Step time from the tables: GBS x seq / (tokens/s/GPU x GPUs).  Exit 0 only when
every row is within 15 % and fits.

    PYTHONPATH=src python benchmarks/llm_bridge_rows.py
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from dnnplace.arch.hf_config import load_arch
from dnnplace.core.systems import system_device, system_spec
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.config import ParallelConfig
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.evaluation.band import LLAMA_405B, published_split
from dnnplace.models.llm.spec import Cluster, LLMEstimate, LLMProblem, TrainingJob, TransformerArch

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "llm"
TOLERANCE = 0.15
SEQ = 8192
SYSTEMS = {"GB300": "gb300-nvl72", "GB200": "gb200-nvl72", "B200": "dgx-b200", "H100": "dgx-h100"}
#: The planner's recipe for each published precision name (module docstring).
RECIPE = {"FP8": "fp8-cs-all", "FP8-CS": "fp8-cs-all", "MXFP8": "mxfp8", "FP8-MX": "mxfp8", "NVFP4": "nvfp4-all"}
#: Releases whose NVFP4 recipe keeps FP4 parameters (Megatron-Bridge #3364, 2026-04-21: fp4_param_gather=True).
FP4_PARAMS = ("26.04.01", "26.06")
#: The recipes' cross entropy: TE's parallel_cross_entropy in every release (module docstring).
CROSS_ENTROPY = "te"

_MB = "Megatron-Bridge docs/performance-summary-archive.md"


@dataclass(frozen=True)
class BridgeRow:
    """One published pre-training row and the knobs its release's performance recipe set."""

    release: str
    system: str  # DGX-<system> of the table: GB300, GB200, B200, H100
    model: str  # "8b" | "70b" | "405b"
    precision: str  # as the table names it
    gpus: int
    gbs: int
    mbs: int
    fsdp: bool
    tp: int
    pp: int
    cp: int
    vp: int
    tokens_per_gpu: float  # the table's tokens / s / GPU
    offload_layers: int = 0  # the recipe's cpu_offloading_num_layers (activations; weights not offloaded)
    recompute_layers: int = 0  # the recipe's recompute_num_layers (full, block method)
    cuda_graphs: str = ""  # the recipe's cuda_graph_impl / scope, listed only
    note: str = ""
    source: str = _MB

    @property
    def measured_s(self) -> float:
        return self.gbs * SEQ / (self.tokens_per_gpu * self.gpus)

    @property
    def recipe(self) -> str:
        if self.precision == "NVFP4" and self.release in FP4_PARAMS:
            return "nvfp4-fp4p"
        return RECIPE[self.precision]

    @property
    def not_expressible(self) -> str:
        """Why the planner cannot run this row as the recipe did ('' when it can)."""
        why = []
        if self.recompute_layers:
            why.append(f"full recompute of {self.recompute_layers} layers per stage")
        return "; ".join(why)


def _r(release: str, system: str, model: str, precision: str, gpus: int, gbs: int, mbs: int, fsdp: int, tp: int,
       pp: int, cp: int, vp: int, tok: float, **kw: object) -> BridgeRow:
    return BridgeRow(release, system, model, precision, gpus, gbs, mbs, bool(fsdp), tp, pp, cp, vp, tok,
                     **kw)  # type: ignore[arg-type]


_CG8 = "local full_iteration"
_GB200_70B_FP8 = {"offload_layers": 40}  # LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS(_V2): cpu_offloading_num_layers=40
_GB300_70B_FP8 = {"offload_layers": 20}  # LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_CS(_V2): cpu_offloading_num_layers=20

# fsdp, tp, pp, cp, vp as the table prints them (VP n/a = 1).
ROWS: tuple[BridgeRow, ...] = (
    # 26.06 (table: performance-summary-archive.md "26.06 NeMo Container"; recipes at 63b08b397, V2 configs)
    _r("26.06", "GB300", "405b", "FP8", 256, 1536, 1, 0, 4, 8, 1, 4, 1048),
    _r("26.06", "GB300", "405b", "MXFP8", 256, 1536, 1, 0, 2, 8, 2, 4, 952),
    _r("26.06", "GB300", "405b", "NVFP4", 256, 1536, 1, 0, 4, 8, 1, 4, 1413),
    _r("26.06", "GB200", "405b", "FP8", 256, 1536, 1, 0, 4, 16, 1, 4, 843),
    _r("26.06", "GB200", "405b", "MXFP8", 256, 1536, 1, 0, 4, 16, 1, 8, 783),
    _r("26.06", "GB200", "405b", "NVFP4", 256, 1536, 1, 0, 4, 16, 1, 8, 1166),
    _r("26.06", "H100", "405b", "FP8", 1024, 1536, 1, 0, 8, 8, 2, 8, 326),
    # 26.04.01 (recipes at 21d102f5e)
    _r("26.04.01", "GB300", "70b", "FP8", 64, 256, 2, 1, 1, 1, 1, 1, 5248, **_GB300_70B_FP8),
    _r("26.04.01", "GB300", "70b", "MXFP8", 64, 256, 1, 0, 1, 4, 1, 5, 4864),
    _r("26.04.01", "GB300", "70b", "NVFP4", 64, 256, 1, 0, 1, 4, 1, 5, 7296),
    _r("26.04.01", "GB200", "70b", "FP8", 64, 256, 2, 1, 1, 1, 1, 1, 4224, **_GB200_70B_FP8),
    _r("26.04.01", "GB200", "70b", "MXFP8", 64, 256, 1, 0, 2, 4, 1, 5, 3712),
    _r("26.04.01", "GB200", "70b", "NVFP4", 64, 256, 1, 0, 2, 4, 1, 5, 4864),
    _r("26.04.01", "H100", "70b", "FP8", 64, 256, 1, 0, 4, 8, 1, 5, 1664),
    _r("26.04.01", "GB300", "405b", "FP8", 256, 1536, 1, 0, 4, 8, 1, 4, 1024),
    _r("26.04.01", "GB300", "405b", "MXFP8", 256, 1536, 1, 0, 2, 8, 2, 4, 960),
    _r("26.04.01", "GB300", "405b", "NVFP4", 256, 1536, 1, 0, 4, 8, 1, 4, 1440),
    _r("26.04.01", "GB200", "405b", "FP8", 256, 1536, 1, 0, 4, 16, 1, 4, 864),
    _r("26.04.01", "GB200", "405b", "MXFP8", 256, 1536, 1, 0, 4, 16, 1, 8, 800),
    _r("26.04.01", "GB200", "405b", "NVFP4", 256, 1536, 1, 0, 4, 16, 1, 8, 1184),
    _r("26.04.01", "H100", "405b", "FP8", 1024, 1536, 1, 0, 8, 8, 2, 8, 328),
    # 26.04 (recipes at 74695a06d)
    _r("26.04", "GB300", "70b", "NVFP4", 64, 256, 1, 0, 1, 4, 1, 5, 7397),
    _r("26.04", "GB200", "70b", "NVFP4", 64, 256, 1, 0, 2, 4, 1, 5, 4898),
    _r("26.04", "GB300", "70b", "MXFP8", 64, 256, 1, 0, 1, 4, 1, 5, 4742),
    _r("26.04", "GB200", "70b", "MXFP8", 64, 256, 1, 0, 2, 4, 1, 5, 3828),
    _r("26.04", "GB300", "70b", "FP8", 64, 256, 2, 1, 1, 1, 1, 1, 5243, **_GB300_70B_FP8),
    _r("26.04", "GB200", "70b", "FP8", 64, 256, 2, 1, 1, 1, 1, 1, 4143, **_GB200_70B_FP8),
    _r("26.04", "H100", "70b", "FP8", 64, 256, 1, 0, 4, 8, 1, 5, 1633),
    _r("26.04", "GB300", "405b", "NVFP4", 256, 1536, 1, 0, 4, 8, 1, 4, 1424),
    _r("26.04", "GB200", "405b", "NVFP4", 256, 1536, 1, 0, 4, 16, 1, 8, 1136),
    _r("26.04", "GB300", "405b", "MXFP8", 256, 1536, 1, 0, 2, 8, 2, 4, 968),
    _r("26.04", "GB200", "405b", "MXFP8", 256, 1536, 1, 0, 4, 16, 1, 8, 793),
    _r("26.04", "GB300", "405b", "FP8", 256, 1536, 1, 0, 4, 8, 1, 4, 1036),
    _r("26.04", "GB200", "405b", "FP8", 256, 1536, 1, 0, 4, 16, 1, 4, 842),
    # 26.02.01 (recipes at cfeddcd94)
    _r("26.02.01", "GB300", "70b", "NVFP4", 64, 256, 2, 0, 1, 1, 1, 1, 7002,
       note="the table prints FSDP 0 with TP1 PP1: 70B unsharded over 64 GPUs (the recipes of the time shard "
            "nothing for this row either way)"),
    _r("26.02.01", "GB200", "70b", "NVFP4", 64, 256, 1, 0, 2, 4, 1, 5, 4557),
    _r("26.02.01", "GB300", "70b", "MXFP8", 64, 256, 2, 0, 1, 4, 1, 1, 4798),
    _r("26.02.01", "GB200", "70b", "MXFP8", 64, 256, 1, 0, 2, 4, 1, 5, 3837),
    _r("26.02.01", "GB300", "70b", "FP8", 64, 256, 2, 1, 1, 1, 1, 1, 5243, **_GB300_70B_FP8),
    _r("26.02.01", "GB200", "70b", "FP8", 64, 256, 2, 1, 1, 1, 1, 1, 4357, **_GB200_70B_FP8),
    _r("26.02.01", "H100", "70b", "FP8", 64, 256, 1, 0, 4, 8, 1, 5, 1639),
    _r("26.02.01", "GB300", "405b", "NVFP4", 256, 1536, 1, 0, 4, 8, 1, 4, 1358),
    _r("26.02.01", "GB200", "405b", "NVFP4", 256, 1536, 1, 0, 4, 16, 1, 4, 1083),
    _r("26.02.01", "GB300", "405b", "MXFP8", 256, 1536, 1, 0, 2, 8, 2, 4, 949),
    _r("26.02.01", "GB200", "405b", "MXFP8", 256, 1536, 1, 0, 4, 16, 1, 8, 775),
    _r("26.02.01", "GB300", "405b", "FP8", 256, 1536, 1, 0, 2, 8, 2, 4, 1024),
    _r("26.02.01", "GB200", "405b", "FP8", 256, 1536, 1, 0, 4, 16, 1, 4, 818),
    # 26.02 (recipes at c0b9a0003)
    _r("26.02", "GB300", "70b", "NVFP4", 64, 256, 1, 0, 1, 4, 1, 5, 6798),
    _r("26.02", "GB200", "70b", "NVFP4", 64, 256, 1, 0, 2, 4, 1, 5, 4458),
    _r("26.02", "GB300", "70b", "MXFP8", 64, 256, 1, 0, 1, 4, 1, 5, 4596),
    _r("26.02", "GB200", "70b", "MXFP8", 64, 256, 1, 0, 2, 4, 1, 5, 3613),
    _r("26.02", "GB300", "70b", "FP8", 64, 256, 2, 1, 1, 1, 1, 1, 5003, **_GB300_70B_FP8),
    _r("26.02", "GB200", "70b", "FP8", 64, 256, 2, 1, 1, 1, 1, 1, 4040, **_GB200_70B_FP8),
    _r("26.02", "H100", "70b", "FP8", 64, 256, 1, 0, 4, 8, 1, 5, 1621),
    _r("26.02", "GB300", "405b", "NVFP4", 256, 1536, 1, 0, 4, 8, 1, 4, 1333),
    _r("26.02", "GB200", "405b", "NVFP4", 256, 1536, 1, 0, 4, 16, 1, 8, 1076),
    _r("26.02", "GB300", "405b", "MXFP8", 256, 1536, 1, 0, 2, 8, 2, 4, 931),
    _r("26.02", "GB200", "405b", "MXFP8", 256, 1536, 1, 0, 4, 16, 1, 8, 786),
    _r("26.02", "GB300", "405b", "FP8", 256, 1536, 1, 0, 4, 8, 1, 4, 988),
    _r("26.02", "GB200", "405b", "FP8", 256, 1536, 1, 0, 4, 16, 1, 4, 793),
    _r("26.02", "H100", "405b", "FP8", 1024, 1536, 1, 0, 8, 8, 2, 8, 311),
    # 25.11 (recipes at 97ad8cc6f)
    _r("25.11", "GB300", "8b", "FP8-CS", 8, 128, 2, 0, 1, 1, 1, 1, 37556, cuda_graphs=_CG8,
       note="recipe mbs 4; the table's mbs 2 priced"),
    _r("25.11", "GB300", "8b", "FP8-MX", 8, 128, 2, 0, 1, 1, 1, 1, 36108, cuda_graphs=_CG8,
       note="recipe mbs 4; the table's mbs 2 priced"),
    _r("25.11", "GB300", "70b", "FP8-CS", 64, 256, 2, 1, 1, 1, 1, 1, 4520, **_GB300_70B_FP8),
    _r("25.11", "GB300", "405b", "FP8-CS", 256, 1536, 1, 0, 2, 8, 2, 4, 999),
    _r("25.11", "GB200", "8b", "FP8-CS", 8, 128, 2, 0, 1, 1, 1, 1, 31508, cuda_graphs=_CG8),
    _r("25.11", "GB200", "8b", "FP8-MX", 8, 128, 2, 0, 1, 1, 1, 1, 29789, cuda_graphs=_CG8),
    _r("25.11", "GB200", "70b", "FP8-CS", 64, 256, 2, 1, 1, 1, 1, 1, 4312, **_GB200_70B_FP8),
    _r("25.11", "GB200", "405b", "FP8-CS", 256, 1536, 1, 0, 4, 16, 1, 4, 813),
    _r("25.11", "B200", "8b", "FP8-CS", 8, 128, 2, 0, 1, 1, 1, 1, 30624, cuda_graphs=_CG8),
    _r("25.11", "B200", "8b", "FP8-MX", 8, 128, 2, 0, 1, 1, 1, 1, 29521, cuda_graphs=_CG8),
    _r("25.11", "B200", "405b", "FP8-CS", 128, 64, 1, 0, 4, 8, 2, 8, 661),
    _r("25.11", "B200", "405b", "FP8-MX", 128, 64, 1, 0, 4, 8, 2, 8, 624),
    _r("25.11", "H100", "8b", "FP8-CS", 8, 128, 1, 1, 1, 1, 1, 1, 14451,
       note="the recipe of the time has no FSDP and recompute_num_layers=5; the table's FSDP run is priced, "
            "without recomputation"),
    _r("25.11", "H100", "70b", "FP8-CS", 64, 128, 1, 0, 4, 8, 1, 5, 1602),
    _r("25.11", "H100", "405b", "FP8-CS", 1024, 512, 1, 0, 8, 8, 2, 8, 292),
    # 25.09 (table: fa0315ae2; recipes: scripts/performance/configs/llama3*/..._llm_pretrain.yaml there)
    _r("25.09", "GB200", "8b", "FP8-CS", 8, 128, 2, 0, 1, 1, 1, 1, 31357, cuda_graphs="true"),
    _r("25.09", "GB200", "8b", "FP8-MX", 8, 128, 2, 0, 1, 1, 1, 1, 29925, cuda_graphs="true"),
    _r("25.09", "GB200", "70b", "FP8-CS", 64, 128, 2, 1, 1, 1, 1, 1, 3986, **_GB200_70B_FP8),
    _r("25.09", "GB200", "70b", "FP8-MX", 64, 128, 1, 0, 2, 4, 1, 5, 3546,
       note="mbs 1 (the yaml's fp8_mx entry; the table's GA 16 = 128 / (8 dp x 1))"),
    _r("25.09", "GB200", "405b", "FP8-CS", 128, 64, 1, 1, 2, 1, 1, 1, 729, offload_layers=95),
    _r("25.09", "GB200", "405b", "FP8-MX", 128, 64, 1, 0, 4, 8, 2, 8, 578),
    _r("25.09", "B200", "8b", "FP8-CS", 8, 128, 2, 0, 1, 1, 1, 1, 29994, cuda_graphs="true"),
    _r("25.09", "B200", "8b", "FP8-MX", 8, 128, 2, 0, 1, 1, 1, 1, 29388, cuda_graphs="true"),
    _r("25.09", "B200", "405b", "FP8-CS", 128, 64, 1, 0, 4, 8, 2, 8, 664),
    _r("25.09", "B200", "405b", "FP8-MX", 128, 64, 1, 0, 4, 8, 2, 8, 622),
    _r("25.09", "H100", "8b", "FP8-CS", 8, 128, 1, 1, 1, 1, 1, 1, 14079),
    _r("25.09", "H100", "70b", "FP8-CS", 64, 128, 1, 0, 4, 8, 1, 5, 1619),
    _r("25.09", "H100", "405b", "FP8-CS", 1024, 512, 1, 0, 8, 8, 2, 8, 302),
)


def arch_of(model: str) -> TransformerArch:
    return LLAMA_405B if model == "405b" else load_arch(EXAMPLES / f"llama3.1-{model}.json")


def problem_of(row: BridgeRow) -> LLMProblem:
    system = system_spec(SYSTEMS[row.system])
    dev = system_device(system)
    return LLMProblem(arch_of(row.model), Cluster(dev.name, row.gpus, system.domain_for(row.gpus)),
                      TrainingJob(SEQ, row.gbs, row.recipe, cross_entropy=CROSS_ENTROPY), dev)


def config_of(row: BridgeRow, arch: TransformerArch) -> ParallelConfig:
    """The published knobs; layers in equal virtual stages, or the first and last virtual stage one layer
    short when they do not divide (Megatron's account_for_embedding / account_for_loss split)."""
    split = published_split(arch.num_layers, row.pp * row.vp)
    dp = row.gpus // (row.tp * row.pp * row.cp)
    return ParallelConfig(row.tp, row.pp, row.vp, row.cp, dp, row.mbs, "none", row.tp > 1, True, split,
                          zero=3 if row.fsdp else 1, grad_dtype="bf16", offload_layers=row.offload_layers,
                          cuda_graphs=graphs_of(row.cuda_graphs))


def graphs_of(recipe: str) -> str:
    """The planner's cuda_graphs knob for the recipe's setting: ``local full_iteration`` is the whole
    iteration; 25.09's ``enable_cuda_graph=True`` is the local implementation's layer-wise capture (Megatron-Core:
    'enable_cuda_graph is deprecated, use cuda_graph_impl=local instead', with the default scope, the layer)."""
    return {"": "none", _CG8: "full_iteration", "true": "layer"}[recipe]


def config_text(row: BridgeRow) -> str:
    parts = [f"TP{row.tp} PP{row.pp} CP{row.cp} VP{row.vp} mbs{row.mbs} GBS{row.gbs}"]
    if row.fsdp:
        parts.append("FSDP")
    if row.offload_layers:
        parts.append(f"offload {row.offload_layers}")
    if row.cuda_graphs:
        parts.append(f"CG {row.cuda_graphs}")
    return " ".join(parts)


def price(row: BridgeRow) -> tuple[LLMProblem, LLMEstimate]:
    pr = problem_of(row)
    return pr, evaluate(pr, config_of(row, pr.arch))


def offload_text(est: LLMEstimate) -> str:
    """The host memory the offloaded activations take, and the offload copies' exposed seconds ('' without)."""
    if not est.host_memory_bytes:
        return ""
    return (f"; host {est.host_memory_bytes / 1e9:.1f} / {est.host_capacity_bytes / 1e9:.0f} GB, offload exposed "
            f"{est.time_breakdown['offload_exposed']:.2f} s")


def run_row(row: BridgeRow) -> tuple[str, bool, float | None]:
    """The row's table line, whether it is within the tolerance and fits, and its error (None: not priced)."""
    head = (f"| {row.release} | {row.system} | {row.model.upper()} | {row.precision} ({row.recipe}) | {row.gpus} |"
            f" {config_text(row)} | {row.measured_s:.2f} |")
    try:
        pr, est = price(row)
    except DnnplaceError as exc:
        return f"{head} - | - | - | MISSED: {exc} |", False, None
    err = est.step_time_s / row.measured_s - 1
    cap = pr.device.usable_memory_bytes
    fits = f"{'yes' if est.fits else 'NO'} ({est.memory_per_gpu_bytes / 1e9:.1f} / {cap / 1e9:.1f}{offload_text(est)})"
    why = [w for w, bad in (("error", abs(err) > TOLERANCE), ("does not fit", not est.fits)) if bad]
    if row.not_expressible:
        why.append("not expressible: " + row.not_expressible)
    ok = not why
    notes = ("MISSED: " + ", ".join(why) if why else "") + (("; " if why else "") + row.note if row.note else "")
    return f"{head} {est.step_time_s:.2f} | {100 * err:+.1f} % | {fits} | {notes} |", ok, err


def main() -> int:
    print("| release | system | model | precision (recipe) | GPUs | config | measured s | predicted s | error |"
          " fits (GB / capacity) | |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ok, errs, missed = True, [], 0
    for row in ROWS:
        line, row_ok, err = run_row(row)
        ok &= row_ok
        missed += not row_ok
        if err is not None and not row.not_expressible:
            errs.append(err)
        print(line)
    within = sum(abs(e) <= TOLERANCE for e in errs)
    print(f"{len(ROWS)} rows; {len(errs)} expressible and priced, {within} of them within "
          f"{TOLERANCE:.0%}; error {100 * min(errs):+.1f} % .. {100 * max(errs):+.1f} %; {missed} rows missed")
    print("all rows within tolerance and fit" if ok else "some rows missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
