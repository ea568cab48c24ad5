"""Megatron-LM arguments for a mixture-of-experts model and its expert-parallel layout.

:func:`moe_model_args` spells out what makes Megatron build exactly the priced experts (count,
top-k, expert and shared ffn widths, which layers are sparse, router score function and group-limited
routing, multi-latent attention, MTP layers); :func:`moe_parallel_args` the expert-parallel knobs
(EP, ETP, the token dispatcher, grouped GEMMs, the overlaps, selective recomputation by module).
Each flag is Megatron-LM's name for a megatron-core ``TransformerConfig`` field (``--num-experts``
is ``num_moe_experts``); the tests build that config from them and let megatron-core validate it.
The exporter (``exporters/megatron.py``) appends these groups for an MoE plan.
"""

from __future__ import annotations

from collections.abc import Iterable

from dnnplace.models.llm.moe import DISPATCHERS, RECOMPUTE_MODULES, MoEModel

__all__ = ["layer_freq", "moe_model_args", "moe_parallel_args"]


def layer_freq(moe_layers: tuple[bool, ...]) -> str:
    """``--moe-layer-freq``: ``1`` when every layer has experts, else Megatron's list expression run by run
    (``([0]*3+[1]*58)``, which its ``moe_freq_type`` evaluates to the per-layer pattern)."""
    if all(moe_layers):
        return "1"
    runs: list[tuple[int, int]] = []
    for v in moe_layers:
        bit = int(v)
        if runs and runs[-1][0] == bit:
            runs[-1] = (bit, runs[-1][1] + 1)
        else:
            runs.append((bit, 1))
    period = _period(moe_layers)
    if period and len(moe_layers) // period > 2:
        unit = ",".join(str(int(v)) for v in moe_layers[:period])
        return f"([{unit}]*{len(moe_layers) // period})"
    return "(" + "+".join(f"[{b}]*{n}" for b, n in runs) + ")"


def _period(pattern: tuple[bool, ...]) -> int:
    """The shortest p (< len) with the pattern p-periodic and a whole number of periods, else 0."""
    n = len(pattern)
    for p in range(1, n // 2 + 1):
        if n % p == 0 and all(pattern[i] == pattern[i % p] for i in range(n)):
            return p
    return 0


def moe_model_args(m: MoEModel) -> list[list[str]]:
    """The model's MoE and MLA options, one option (with its values) per list."""
    s = m.moe
    out = [["--num-experts", str(s.num_experts)], ["--moe-router-topk", str(s.top_k)],
           ["--moe-ffn-hidden-size", str(s.expert_ffn)], ["--moe-layer-freq", layer_freq(s.moe_layers)],
           ["--moe-router-score-function", s.router]]
    if s.shared_ffn:
        out.append(["--moe-shared-expert-intermediate-size", str(s.shared_ffn)])
    if s.expert_groups:
        out += [["--moe-router-num-groups", str(s.expert_groups)], ["--moe-router-group-topk", str(s.topk_groups)]]
    if s.router == "softmax" and s.top_k == 1:
        out.append(["--moe-router-pre-softmax"])  # Megatron refuses a softmax after a top-1 (zero gradient)
    if m.mla is not None:
        x = m.mla
        out.append(["--multi-latent-attention"])
        if x.q_lora_rank:
            out.append(["--q-lora-rank", str(x.q_lora_rank)])
        out += [["--kv-lora-rank", str(x.kv_lora_rank)], ["--qk-head-dim", str(x.qk_nope_head_dim)],
                ["--qk-pos-emb-head-dim", str(x.qk_rope_head_dim)], ["--v-head-dim", str(x.v_head_dim)]]
    if s.mtp_layers:
        out.append(["--mtp-num-layers", str(s.mtp_layers)])
    return out


def moe_parallel_args(*, ep: int, etp: int, dispatcher: str, recompute_modules: Iterable[str] = (),
                      grouped_gemm: bool = True, a2a_overlap: bool = False,
                      shared_expert_overlap: bool = False, flex_backend: str = "deepep",
                      selective: bool = False, routing: str = "balanced") -> list[list[str]]:
    """The expert-parallel options of a plan (the rules in ``model/moe_rules.py`` hold already).

    ``flex`` is Megatron's flex dispatcher with the backend priced (``--moe-flex-dispatcher-backend``: deepep,
    or hybridep where the cost model prices HybridEP). The router runs in fp32 and permutation is fused, as in
    the recipes the cost model follows.  ``selective``: selective recompute of exactly ``recompute_modules``,
    written even when empty (Megatron-Core runs ``[]`` as no module; left out, it would run ``core_attn``).
    ``routing`` balanced is ``--moe-router-force-load-balancing`` (TransformerConfig.moe_router_force_load_balancing:
    random router logits, the even load priced); a power-law routing is the trained router left as it is.
    """
    if flex_backend not in ("deepep", "hybridep"):
        raise ValueError(f"unknown flex backend {flex_backend!r}")
    if dispatcher not in DISPATCHERS:
        raise ValueError(f"unknown dispatcher {dispatcher!r}")
    modules = [mod for mod in RECOMPUTE_MODULES if mod in set(recompute_modules)]
    out = [["--expert-model-parallel-size", str(ep)], ["--expert-tensor-parallel-size", str(etp)],
           ["--moe-token-dispatcher-type", dispatcher]]
    if dispatcher == "flex":
        out.append(["--moe-flex-dispatcher-backend", flex_backend])
    if grouped_gemm:
        out.append(["--moe-grouped-gemm"])
    out += [["--moe-router-dtype", "fp32"], ["--moe-permute-fusion"]]
    if routing == "balanced":
        out.append(["--moe-router-force-load-balancing"])
    if a2a_overlap:
        out.append(["--overlap-moe-expert-parallel-comm"])
    if shared_expert_overlap:
        out.append(["--moe-shared-expert-overlap"])
    if selective or modules:  # an empty --recompute-modules is Megatron's [] (nothing), not its default core_attn
        out += [["--recompute-granularity", "selective"], ["--recompute-modules", *modules]]
    return out
