"""The training planner's side of mixture-of-experts: the MoE software figures and the plan file's ``moe`` object.

The architecture itself (:class:`MoEModel`, :class:`MoESpec`, :class:`MLA`) lives in
:mod:`dnnplace.arch.moe`, below every planner, and is re-exported here.  :data:`MOE_STACK` holds the few
software figures the MoE cost model uses, each with its source, the same for every model (as
``TRAINING_STACK`` does); ``evaluation/moe.py`` prices them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dnnplace.arch.dense import TransformerArch
from dnnplace.arch.moe import MLA, MoEModel, MoESpec, moe_doc
from dnnplace.models.llm.moe_knobs import DISPATCHERS, RECOMPUTE_MODULES

__all__ = ["DISPATCHERS", "MLA", "MOE_STACK", "RECOMPUTE_MODULES", "MoEModel", "MoESpec", "MoEStack"]


@dataclass(frozen=True)
class MoEStack:
    """Figures of the MoE software path, each with its source; the same for every model."""

    router_bytes_per_score: float = 4.0  # the router's logits and probabilities are fp32
    permute_passes: float = 2.0  # permute reads and writes each dispatched token once
    sources: dict[str, str] = field(default_factory=lambda: {
        "router_bytes_per_score": "Megatron-Core moe_router_dtype='fp32' in the DeepSeek-V3 / Qwen3 recipes "
                                  "(router logits, scores and top-k probabilities in fp32)",
        "permute_passes": "Megatron-Core moe_permute_fusion (TE fused permute/unpermute): one read and one "
                          "write of each token copy; the unpermute of the combine likewise",
        "load_balance": "Megatron-Bridge performance recipes set moe_router_force_load_balancing=True "
                        "(router logits replaced by random ones: every token picks top-k experts "
                        "uniformly), so the slowest rank's excess is the fluctuation of a uniform "
                        "multinomial: the expected maximum of n loads of mean mu, standard deviation "
                        "sqrt(mu), ~ mu + sqrt(2 ln n) sqrt(mu) (Gaussian extreme value; no fitted constant)",
        "routing_skew": "unforced routers (routing=power-law-1.01 / power-law-1.2): the slowest ep rank's expert "
                        "compute times the measured skewed / balanced fused-MoE layer time at the row's shapes "
                        "(aiconfigurator-core 0.12.0 moe_perf tables, distributions power_law_<alpha>, drawn by "
                        "aiconfigurator collector/helper.py _generate_power_law_distribution with the most loaded "
                        "ep rank measured); without a table, that generator's expected max-rank load over the mean "
                        "(evaluation/moe_skew.py, seed 0). Default for an unforced router: power-law-1.2, "
                        "aiconfigurator's MOEModel default (sdk/config.py workload_distribution='power_law', "
                        "sdk/models/moe.py _power_law_alpha=1.2)",
    }, compare=False)


#: The MoE software stack every MoE plan is priced for.
MOE_STACK = MoEStack()


def moe_from_doc(doc: object, arch: TransformerArch, where: str) -> MoEModel:
    """Read a plan file's ``moe`` object back (one-line error naming the key)."""
    from dnnplace.errors import InputError

    keys = tuple(moe_doc(MoEModel(arch, MoESpec(2, 1, 1, (True,)))))
    if not isinstance(doc, dict) or set(doc) != set(keys):
        missing = sorted(set(keys) - set(doc)) if isinstance(doc, dict) else ["(an object)"]
        extra = sorted(set(doc) - set(keys)) if isinstance(doc, dict) else []
        raise InputError(f"{where}: moe: {'missing ' + missing[0] if missing else 'unknown key ' + extra[0]}")

    def whole(v: object, key: str, low: int = 0) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= 1 << 24:
            raise InputError(f"{where}: moe.{key} must be a whole number >= {low}, got {v!r}"[:200])
        return v

    def flag(v: object, key: str) -> bool:
        if not isinstance(v, bool):
            raise InputError(f"{where}: moe.{key} must be true or false")
        return v

    layers = doc["moe_layers"]
    if not (isinstance(layers, list) and len(layers) == arch.num_layers and all(v in (0, 1) for v in layers)
            and not any(isinstance(v, bool) for v in layers) and any(layers)):
        raise InputError(f"{where}: moe.moe_layers must list 0 or 1 for each of the {arch.num_layers} layers, "
                         "with at least one 1")
    if doc["router"] not in ("softmax", "sigmoid"):
        raise InputError(f"{where}: moe.router must be softmax or sigmoid")
    spec = MoESpec(num_experts=whole(doc["num_experts"], "num_experts", 2), top_k=whole(doc["top_k"], "top_k", 1),
                   expert_ffn=whole(doc["expert_ffn"], "expert_ffn", 1), moe_layers=tuple(bool(v) for v in layers),
                   shared_experts=whole(doc["shared_experts"], "shared_experts"),
                   shared_ffn=whole(doc["shared_ffn"], "shared_ffn"), mtp_layers=whole(doc["mtp_layers"], "mtp_layers"),
                   router=str(doc["router"]), expert_groups=whole(doc["expert_groups"], "expert_groups"),
                   topk_groups=whole(doc["topk_groups"], "topk_groups"),
                   expert_bias=flag(doc["expert_bias"], "expert_bias"))
    if spec.top_k > spec.num_experts:
        raise InputError(f"{where}: moe.top_k {spec.top_k} exceeds the {spec.num_experts} experts")
    mla = None
    if doc["mla"] is not None:
        d = doc["mla"]
        names = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        if not isinstance(d, dict) or set(d) != set(names):
            raise InputError(f"{where}: moe.mla must be null or an object of {', '.join(names)}")
        mla = MLA(*(whole(d[k], f"mla.{k}", 0 if k == "q_lora_rank" else 1) for k in names))
    return MoEModel(arch, spec, mla, attention_sinks=flag(doc["attention_sinks"], "attention_sinks"),
                    attention_chunk=whole(doc["attention_chunk"], "attention_chunk"),
                    chunk_global_every=whole(doc["chunk_global_every"], "chunk_global_every"))
