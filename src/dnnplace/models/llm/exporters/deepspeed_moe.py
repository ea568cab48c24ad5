"""DeepSpeed-MoE: the arguments of ``deepspeed.moe.layer.MoE`` for each sparse layer of a plan.

DeepSpeed takes the model from the user's code, so an MoE plan's export adds ``moe``: which decoder
layers are sparse, the expert's shape, and ``layer_args`` -- the keyword arguments of DeepSpeed's
``MoE(hidden_size, expert, num_experts, ep_size, k, ...)`` (the tests construct that layer from them,
DeepSpeed's own checks included).  ``drop_tokens`` is false and the capacity factor 1: the planner
prices dropless routing.  Expert tensor parallelism is DeepSpeed's ``enable_expert_tensor_parallelism``
(the experts split over the model's tp group).  What DeepSpeed-MoE cannot run as priced is refused in
one line: expert-parallel groups are carved out of the data-parallel ranks (``ep_size`` must divide dp),
etp must equal tp, its all-to-all is the only dispatcher, it has no
all-to-all overlap, and its residual MoE is not a shared expert.
"""

from __future__ import annotations

from typing import Any

from dnnplace.models.llm.exporters.checked import CheckedPlan, refuse

__all__ = ["moe_section"]


def moe_section(plan: CheckedPlan) -> dict[str, Any]:
    """The export's ``moe`` object, or a one-line refusal of what DeepSpeed-MoE cannot express."""
    moe = plan.problem.moe
    assert moe is not None
    c, s, a = plan.config, moe.moe, plan.arch
    ep, etp, tp, dp = c["ep"], c["etp"], c["tp"], c["dp"]
    why = []
    if dp % ep:
        why.append(f"ep={ep} does not divide dp={dp} (DeepSpeed's expert groups split the data-parallel ranks)")
    if etp != tp:
        why.append(f"etp={etp} with tp={tp} (DeepSpeed splits experts over the whole tp group or not at all: "
                   "etp = tp)")
    if c["dispatcher"] != "alltoall":
        why.append(f"dispatcher={c['dispatcher']} (DeepSpeed-MoE has its own all-to-all only)")
    if c["a2a_overlap"]:
        why.append("a2a_overlap (DeepSpeed-MoE has no such overlap)")
    if s.shared_ffn:
        why.append("shared experts (DeepSpeed's use_residual is a residual MoE, not a shared expert)")
    if why:
        raise refuse("deepspeed", a, "; ".join(why) + "; re-plan with those knobs fixed")
    return {
        "sparse_layers": [i for i, v in enumerate(s.moe_layers) if v],
        "expert": {"kind": "gated_mlp" if a.gated else "mlp", "hidden_size": a.hidden, "ffn_hidden_size": s.expert_ffn,
                   "bias": s.expert_bias},
        "layer_args": {"hidden_size": a.hidden, "num_experts": s.num_experts, "ep_size": ep, "k": s.top_k,
                       "capacity_factor": 1.0, "eval_capacity_factor": 1.0, "drop_tokens": False,
                       "use_residual": False, "enable_expert_tensor_parallelism": etp > 1},
    }
