"""torchtitan's mixture-of-experts knobs: the MoE model it builds and its expert-parallel layout.

torchtitan 0.2.2 builds a model from its own registry (``[model] name`` and ``flavor``), so an MoE
plan is exported only when one of its MoE entries (:data:`MOE_FLAVORS`, copied from torchtitan
0.2.2's ``deepseekv3_args`` and ``qwen3_args``; the tests check the table against the installed
sources) has exactly the priced experts, layers and attention.  The expert-parallel knobs go to
``[parallelism]``: ``expert_parallel_degree`` (ep), ``expert_tensor_parallel_degree`` (etp) and
``expert_parallel_comm_backend`` (``deepep`` for the flex dispatcher, ``standard`` all-to-all
otherwise).  What torchtitan cannot run as priced is refused in one line: etp other than 1 or tp
(its ``ParallelDims`` check), an expert mesh its FSDP dimension cannot hold (ep x etp must divide
dp_shard x cp x tp), the all-gather dispatcher, the all-to-all overlap, per-module recomputation
and multi-token-prediction layers (its DeepSeek-V3 has none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dnnplace.core.catalogue_moe import HYBRIDEP_NVLINK
from dnnplace.models.llm.exporters.checked import CheckedPlan, refuse
from dnnplace.models.llm.moe import MoEModel

__all__ = ["MOE_FLAVORS", "MoEFlavor", "moe_flavor_of", "moe_parallelism"]


@dataclass(frozen=True)
class MoEFlavor:
    """One MoE entry of a torchtitan train spec's registry, as the sizes it builds."""

    name: str  # [model] name: the train spec
    flavor: str
    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    vocab: int
    num_experts: int
    top_k: int
    expert_ffn: int
    shared_experts: int
    dense_layers: int  # the first layers with a dense MLP (deepseek_v3 n_dense_layers)
    dense_ffn: int  # their width (deepseek_v3 inter_dim; qwen3: none)
    mla: tuple[int, int, int, int, int] | None  # q_lora, kv_lora, qk_nope, qk_rope, v head dims
    expert_groups: int
    topk_groups: int
    router: str  # score function
    pipelining: bool

    def differences(self, m: MoEModel) -> dict[str, tuple[Any, Any]]:
        """Field -> (the priced model's value, this entry's) wherever they differ."""
        a, s, x = m.arch, m.moe, m.mla
        dense = s.num_dense_layers
        leading = all(not v for v in s.moe_layers[:dense]) and all(s.moe_layers[dense:])
        mine = {
            "num_layers": (a.num_layers, self.num_layers), "hidden": (a.hidden, self.hidden),
            "heads": (a.heads, self.heads), "vocab": (a.vocab, self.vocab),
            "num_experts": (s.num_experts, self.num_experts), "top_k": (s.top_k, self.top_k),
            "expert_ffn": (s.expert_ffn, self.expert_ffn), "shared_experts": (s.shared_experts, self.shared_experts),
            "dense_layers": (dense if leading else "not leading", self.dense_layers),
            "expert_groups": (s.expert_groups, self.expert_groups), "topk_groups": (s.topk_groups, self.topk_groups),
            "router": (s.router, self.router), "mtp_layers": (s.mtp_layers, 0),
            "mla": (None if x is None else (x.q_lora_rank, x.kv_lora_rank, x.qk_nope_head_dim, x.qk_rope_head_dim,
                                            x.v_head_dim), self.mla),
        }
        if self.dense_layers:
            mine["dense_ffn"] = (a.ffn_hidden, self.dense_ffn)
        if self.mla is None:
            mine["kv_heads"] = (a.kv_heads, self.kv_heads)
        return {k: v for k, v in mine.items() if v[0] != v[1]}


#: torchtitan 0.2.2's full-size MoE registry entries (models/deepseek_v3 and models/qwen3 ``__init__.py``).
MOE_FLAVORS: tuple[MoEFlavor, ...] = (
    MoEFlavor("deepseek_v3", "16B", 27, 2048, 16, 16, 102400, 64, 6, 1408, 2, 1, 10944, (0, 512, 128, 64, 128),
              0, 0, "softmax", True),
    MoEFlavor("deepseek_v3", "236B", 60, 5120, 128, 128, 102400, 160, 6, 1536, 2, 1, 12288,
              (1536, 512, 128, 64, 128), 8, 3, "softmax", True),
    MoEFlavor("deepseek_v3", "671B", 61, 7168, 128, 128, 129280, 256, 8, 2048, 1, 3, 18432,
              (1536, 512, 128, 64, 128), 8, 4, "sigmoid", True),
    MoEFlavor("qwen3", "30B-A3B", 48, 2048, 32, 4, 151936, 128, 8, 768, 0, 0, 0, None, 0, 0, "softmax", False),
    MoEFlavor("qwen3", "235B-A22B", 94, 4096, 64, 4, 151936, 128, 8, 1536, 0, 0, 0, None, 0, 0, "softmax", False),
)


def moe_flavor_of(m: MoEModel) -> MoEFlavor:
    """The MoE registry entry that builds exactly ``m``, or a one-line refusal naming how the nearest differs."""
    nearest = min(MOE_FLAVORS, key=lambda f: len(f.differences(m)))
    diff = nearest.differences(m)
    if not diff:
        return nearest
    shown = ", ".join(f"{k} {mine} (not {theirs})" for k, (mine, theirs) in list(diff.items())[:2])
    more = f" and {len(diff) - 2} more" if len(diff) > 2 else ""
    raise refuse("torchtitan", m.arch, f"torchtitan 0.2.2 has no such MoE model (nearest: {nearest.name} "
                                       f"{nearest.flavor}, which differs in {shown}{more})")


def moe_parallelism(plan: CheckedPlan, par: dict[str, Any]) -> dict[str, Any]:
    """The expert-parallel keys of ``[parallelism]``, checked against what torchtitan 0.2.2 runs."""
    c = plan.config
    ep, etp, tp = c["ep"], c["etp"], c["tp"]
    why = []
    if ep > 1 and etp not in (1, tp):
        why.append(f"etp={etp} (torchtitan runs etp = 1 or etp = tp={tp})")
    shard = par["data_parallel_shard_degree"] * c["cp"] * tp
    if ep > 1 and shard % (ep * etp):
        why.append(f"ep x etp = {ep * etp} does not divide dp_shard x cp x tp = {shard} (torchtitan's expert "
                   "mesh borrows those ranks)")
    if c["dispatcher"] == "allgather":
        why.append("dispatcher=allgather (torchtitan has all-to-all and DeepEP)")
    if c["dispatcher"] == "flex" and plan.problem.device.name in HYBRIDEP_NVLINK:
        why.append(f"dispatcher=flex on {plan.problem.device.name} (priced as HybridEP; torchtitan's backend is "
                   "DeepEP)")
    if c["a2a_overlap"]:
        why.append("a2a_overlap (torchtitan 0.2.2 has no such overlap)")
    if c["recompute"] == "selective" and c["recompute_modules"] != "none":
        why.append(f"recompute_modules={c['recompute_modules']} (torchtitan has no per-module recompute)")
    if why:
        raise refuse("torchtitan", plan.arch, "; ".join(why) + "; re-plan with those knobs fixed")
    return {"expert_parallel_degree": ep, "expert_tensor_parallel_degree": etp,
            "expert_parallel_comm_backend": "deepep" if c["dispatcher"] == "flex" else "standard"}
