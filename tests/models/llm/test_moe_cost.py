"""evaluation/llm/moe: MoE FLOPs against the recipes' formulas, dispatch volumes, grouped GEMMs and expert
memory against hand-computed values."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest

from dnnplace.arch.moe_config import load_moe, moe_from_dict
from dnnplace.core.catalogue import device_spec
from dnnplace.kernels import roofline
from dnnplace.models.llm.evaluation import flops, moe_dispatch
from dnnplace.models.llm.evaluation import moe as M
from dnnplace.models.llm.published import CONFIGS

FIXTURES = CONFIGS
H100 = device_spec("h100")
A = np.array


def ds3():
    return load_moe(FIXTURES / "deepseek-v3.json")


def nemo_deepseekv3(gbs: int, seq: int) -> float:
    """NeMo's flops_formulas.deepseekv3, written out with DeepSeek-V3's figures (the recipe's MFU formula)."""
    hs, layers, heads, vocab = 7168, 61, 128, 129280
    qk, rope, v, q_lora, kv_lora = 128, 64, 128, 1536, 512
    ffn, moe_ffn, shared, topk, mtp = 18432, 2048, 2048, 8, 1
    bmm1 = 0.5 * (qk + rope) * heads * seq ** 2
    bmm2 = 0.5 * v * heads * seq ** 2
    attention = 6 * (bmm1 + bmm2) * layers + 6 * (bmm1 + bmm2) * mtp
    mla = hs * q_lora + q_lora * (qk + rope) * heads + hs * rope + hs * kv_lora + kv_lora * (qk + v) * heads
    mla += v * heads * hs
    mla_params = mla * (layers + mtp)
    pattern = [0, 0, 0] + [1] * 58
    ffn_params = sum(hs * ffn * 3 if p == 0 else hs * shared * 3 + hs * moe_ffn * 3 * topk for p in pattern)
    ffn_params += mtp * (hs * shared * 3 + hs * moe_ffn * 3 * topk)
    linear = 6 * (mla_params + ffn_params) * seq
    vocab_flops = 6 * vocab * hs * seq * (1 + mtp) + mtp * 6 * hs * 2 * hs * seq
    return (attention + linear + vocab_flops) * gbs


def test_deepseek_v3_model_flops_equal_nemo_recipe_formula() -> None:
    ours = M.model_flops_per_step(ds3(), 4096, 8192)
    assert ours == pytest.approx(nemo_deepseekv3(8192, 4096), rel=1e-12)


def test_mixtral_model_flops_equal_nemo_mixtral_formula() -> None:
    cfg = dict(model_type="mixtral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
               vocab_size=32000)
    m = moe_from_dict(cfg, "mixtral.json")
    gbs, s, L, h, qg, a, f, k, V = 256, 4096, 32, 4096, 8, 32, 14336, 2, 32000
    # NeMo flops_formulas.mixtral (causal_self_attn = True)
    nemo = gbs * s * L * h * h * (12 + 12 * qg / a + 18 * k * f / h + 12 * s / h * 0.5 + 6 * V / (L * h))
    assert M.model_flops_per_step(m, s, gbs) == pytest.approx(nemo, rel=1e-12)


def test_qwen3_moe_flops_follow_megatron_bridge_with_its_true_query_width() -> None:
    m = load_moe(FIXTURES / "qwen3-30b-a3b.json")
    s, h, L, V = 4096, 2048, 48, 151936
    q, kv = 32 * 128, 4 * 128  # query width 4096 != hidden: Megatron-Bridge uses kv_channels x heads
    attn = 3 * 2 * L * (h * (q + 2 * kv) + q * h + q * s / 2 * 2)
    mlp = 3 * 2 * h * (768 * 8 * 3) * L
    expected = s * (attn + mlp + 3 * 2 * h * V)
    assert M.model_flops_per_step(m, s, 1) == pytest.approx(expected, rel=1e-12)


def test_sliding_window_flops_use_the_exact_causal_window_mean() -> None:
    cfg = dict(model_type="gpt_oss", hidden_size=64, intermediate_size=32, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
               num_experts_per_tok=2, sliding_window=8, vocab_size=100,
               layer_types=["sliding_attention", "full_attention"])
    m = moe_from_dict(cfg, "oss.json")
    s, h, q, kv = 32, 64, 64, 32
    proj = 6 * (2 * h * q + 2 * h * kv)
    window_ctx = 8 - 8 * 7 / (2 * 32)  # 7.125 keys per query: W(W+1)/2 + (T-W)W over T
    assert window_ctx == pytest.approx((8 * 9 / 2 + (32 - 8) * 8) / 32)
    attn = 2 * proj + 12 * q * window_ctx + 12 * q * s / 2
    expected = attn + 2 * 6 * 3 * h * 32 * 2 + 6 * 100 * h
    assert M.model_flops_per_token(m, s) == pytest.approx(expected, rel=1e-12)


def test_mla_projection_gemms_carry_exactly_the_formulas_parameters() -> None:
    m = ds3()
    T = A([4096.0])
    gemm_flops = sum(2 * mm * n * k for mm, n, k in M.mla_gemms(m, T, A([1.0])))
    x, h, heads = m.mla, 7168, 128
    params = (h * x.q_lora_rank + x.q_lora_rank * heads * 192 + h * (x.kv_lora_rank + 64)
              + x.kv_lora_rank * heads * 256 + heads * 128 * h)
    assert gemm_flops[0] == pytest.approx(2 * 4096 * params)
    # TP 2: the up / output projections split over heads, the down projections run on half the tokens each
    half = sum(2 * mm * n * k for mm, n, k in M.mla_gemms(m, T, A([2.0])))
    assert half[0] == pytest.approx(gemm_flops[0] / 2)
    assert M.mla_attention_fwd_flops(m, T, 4096, A([2.0]))[0] == pytest.approx(4096 * 4096 * 128 * 320 / 2)


def small(experts: int = 8, top_k: int = 2, hidden: int = 4, ffn: int = 6, shared: int = 0):
    cfg = dict(model_type="qwen2_moe", hidden_size=hidden, intermediate_size=ffn, moe_intermediate_size=ffn,
               num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, num_experts=experts,
               num_experts_per_tok=top_k, vocab_size=10, shared_expert_intermediate_size=shared)
    return moe_from_dict(cfg, "small.json")


def test_dispatch_volumes_hand_computed() -> None:
    m = small()  # 8 experts, top-2, hidden 4: a token is 2 x 4 = 8 bytes
    t = A([10.0])
    # alltoall, ep 4, etp 1, 2 GPUs per NVLink domain: of 20 copies (160 B) 1/4 stay, 1/4 NVLink, 2/4 NIC
    nvl, nic = M.dispatch_volumes(m, t, A([4.0]), A([1.0]), 2, "alltoall")
    assert (nvl[0], nic[0]) == pytest.approx((40.0, 80.0))
    # etp 2, domain 4: the EP group has stride 2, so 2 of its 4 members per domain; then the ETP all-gather of
    # the 20 received copies to the other ETP rank (160 B more on NVLink)
    nvl, nic = M.dispatch_volumes(m, t, A([4.0]), A([2.0]), 4, "alltoall")
    assert (nvl[0], nic[0]) == pytest.approx((40.0 + 160.0, 80.0))
    # allgather over etp x ep = 4 ranks, domain 2: 10 tokens (80 B) to 1 NVLink peer and 2 remote ones
    nvl, nic = M.dispatch_volumes(m, t, A([4.0]), A([1.0]), 2, "allgather")
    assert (nvl[0], nic[0]) == pytest.approx((80.0, 160.0))
    # flex: two domains of 4 experts; P(a token's 2 experts touch the other domain) = 1 - C(4,2)/C(8,2) = 22/28
    nvl, nic = M.dispatch_volumes(m, t, A([4.0]), A([1.0]), 2, "flex")
    remote = 80.0 * 22 / 28
    assert nic[0] == pytest.approx(remote)
    # NVLink: a rank (2 experts) is hit with p = 1 - C(6,2)/C(8,2) = 13/28; the other rank of the own domain and
    # the non-landing rank of the remote one take the 80 B token over NVLink each with probability p
    assert nvl[0] == pytest.approx(2 * 80.0 * 13 / 28)
    # everything inside one domain: no NIC traffic
    for disp in ("alltoall", "allgather", "flex"):
        assert M.dispatch_volumes(m, t, A([4.0]), A([1.0]), 8, disp)[1][0] == 0.0


def test_etp_collective_runs_after_the_all_to_all() -> None:
    """Megatron-Core's alltoall dispatcher runs the EP all-to-all, then the ETP all-gather (the combine: the
    reduce-scatter, then the all-to-all): the ring's seconds add to the all-to-all's, hand-computed."""
    m = small()  # a rank's t x top_k = 20 received copies of 8 bytes: a 160 B block
    t = A([10.0])
    nvl_bw = H100.nvlink_bandwidth * H100.nvlink_fraction
    nic_bw = H100.internode_bandwidth * H100.internode_fraction
    # etp 2 inside a 4-GPU domain: one block over NVLink, one ring step
    assert M.etp_collective_time(m, t, A([2.0]), 4, H100)[0] == pytest.approx(160.0 / nvl_bw + H100.nvlink_latency_s)
    # etp 4 over 2-GPU domains: three blocks at the NIC's rate, three steps
    assert M.etp_collective_time(m, t, A([4.0]), 2, H100)[0] == pytest.approx(
        480.0 / nic_bw + 3 * H100.internode_latency_s)
    assert M.etp_collective_time(m, t, A([1.0]), 4, H100)[0] == 0.0
    # ep 4, etp 2, domain 4 (the volumes of test_dispatch_volumes_hand_computed): the all-to-all moves 40 B on
    # NVLink and 80 B on the NIC at once, and the 160 B all-gather comes after it
    one = M.dispatch_times(m, t, A([4.0]), A([2.0]), A([0]), 4, H100)[0]
    a2a = max(40.0 / nvl_bw, 80.0 / nic_bw) + H100.internode_latency_s
    assert one == pytest.approx(a2a + 160.0 / nvl_bw + H100.nvlink_latency_s)
    # etp 1: the all-to-all alone, as before
    nvl, nic = M.dispatch_volumes(m, t, A([4.0]), A([1.0]), 4, "alltoall")
    assert M.dispatch_times(m, t, A([4.0]), A([1.0]), A([0]), 4, H100)[0] == pytest.approx(
        M.dispatch_time(nvl, nic, H100)[0])


def test_distinct_groups_against_enumeration() -> None:
    for experts, k, g in ((8, 2, 2), (8, 3, 4), (12, 4, 3), (6, 1, 3)):
        per = experts // g
        combos = list(itertools.combinations(range(experts), k))
        mean = sum(len({e // per for e in c}) for c in combos) / len(combos)
        assert M.distinct_groups(experts, k, A([float(g)]))[0] == pytest.approx(mean)
    assert comb(8, 2) == 28


def test_dispatch_time_runs_nvlink_and_nic_at_once() -> None:
    nvl_bw = H100.nvlink_bandwidth * H100.nvlink_fraction
    nic_bw = H100.internode_bandwidth * H100.internode_fraction
    t = M.dispatch_time(A([nvl_bw * 1e-3]), A([nic_bw * 2e-3]), H100)
    assert t[0] == pytest.approx(2e-3 + H100.internode_latency_s)
    t = M.dispatch_time(A([nvl_bw * 3e-3]), A([0.0]), H100)
    assert t[0] == pytest.approx(3e-3 + H100.nvlink_latency_s)
    assert M.dispatch_time(A([0.0]), A([0.0]), H100)[0] == 0.0


def test_load_factor_is_the_gaussian_extreme_of_uniform_routing() -> None:
    assert M.load_factor(A([10000.0]), A([1.0]))[0] == 1.0
    assert M.load_factor(A([10000.0]), A([64.0]))[0] == pytest.approx(1 + np.sqrt(2 * np.log(64) / 10000))
    # fewer tokens per rank: relatively larger excess
    assert M.load_factor(A([100.0]), A([64.0]))[0] > M.load_factor(A([10000.0]), A([64.0]))[0]


def test_grouped_gemm_is_one_gemm_for_one_group_and_small_gemms_are_slow() -> None:
    peak = H100.peak("bf16")
    for m_, n, k in ((4096, 4096, 7168), (1000, 300, 2048), (64, 4096, 4096)):
        one = M.grouped_gemm_time(A([m_]), A([n]), A([k]), A([1.0]), H100, peak)
        assert one[0] == pytest.approx(roofline.gemm_time(A([m_]), A([n]), A([k]), H100, peak)[0], rel=1e-12)
    # the same rows split over more experts: each expert re-reads its own weights -> slower per row
    rows = 8192
    t1 = M.grouped_gemm_time(A([rows / 1]), A([4096.0]), A([7168.0]), A([1.0]), H100, peak)[0]
    t64 = M.grouped_gemm_time(A([rows / 64]), A([4096.0]), A([7168.0]), A([64.0]), H100, peak)[0]
    assert t64 > 1.5 * t1


def test_expert_memory_by_part_hand_computed() -> None:
    m = load_moe(FIXTURES / "qwen3-30b-a3b.json")
    # 48 MoE layers, EP 16 of 128 experts: 8 local experts of 3 x 2048 x 768 parameters each
    p = M.expert_params(m, A([48.0]), A([16.0]), A([1.0]))
    assert p[0] == 48 * 8 * 3 * 2048 * 768 == 1_811_939_328
    mem = M.expert_memory(p, A([1.0]), A([True]))
    assert (mem["weights"][0], mem["gradients"][0], mem["optimizer"][0]) == (2 * p[0], 4 * p[0], 12 * p[0])
    d = ds3()  # 1024 GPUs, pp 8, ep 64, etp 1: edp = 2; 8 MoE layers on a rank, 4 local experts
    p = M.expert_params(d, A([8.0]), A([64.0]), A([1.0]))
    assert p[0] == 8 * 4 * 3 * 7168 * 2048
    mem = M.expert_memory(p, A([1024 / (8 * 64 * 1)]), A([True]), fp8=True)
    assert mem["optimizer"][0] == 12 * p[0] / 2 and mem["weights"][0] == 3 * p[0]
    assert M.expert_memory(p, A([2.0]), A([False]))["optimizer"][0] == 12 * p[0]
    # ETP 2 halves each expert's shard
    assert M.expert_params(d, A([8.0]), A([64.0]), A([2.0]))[0] == p[0] / 2


def test_activation_parts_and_recompute_modules_hand_computed() -> None:
    m = small(shared=6)  # hidden 4, 8 experts top-2, expert ffn 6, one shared expert of 6; GQA 2 heads of 2
    t, tp, etp = A([10.0]), A([1.0]), A([1.0])
    parts = M.activation_parts(m, t, tp, etp, moe_layer=True)
    copies = 10 * 2  # t x top_k x etp
    assert parts["moe"][0] == copies * (2 * (4 + 2 * 6) + 4)  # fc1 input and output, fp32 prob; no expert output
    assert parts["moe_act"][0] == 2 * copies * 6
    assert parts["shared_experts"][0] == 2 * 10 * 3 * 6
    assert parts["layernorm"][0] == 2 * 2 * 10 * 4
    assert parts["core_attn"][0] == 4 * 10 * 2
    q, kv = 4, 2  # query width 2 x 2, kv width 1 x 2
    assert parts["kept"][0] == 2 * 2 * 10 * 4 + 2 * (10 * (q + 2 * kv) + 10 * q) + 4 * 10 * (8 + 2)
    full = M.activation_bytes(parts, ())
    assert full[0] == sum(v[0] for v in parts.values())
    assert M.activation_bytes(parts, ("moe_act",))[0] == full[0] - parts["moe_act"][0]
    # recomputing the whole MoE layer frees its activation and shared-expert parts too
    assert M.activation_bytes(parts, ("moe",))[0] == full[0] - parts["moe"][0] - parts["moe_act"][0] \
        - parts["shared_experts"][0]
    dense = M.activation_parts(m, t, tp, etp, moe_layer=False)
    assert dense["mlp"][0] == 2 * 10 * (2 * 6 + 6) and dense["moe"][0] == 0
    assert M.recompute_reruns(("moe", "layernorm")) >= {"dispatch", "experts", "layernorm"}


def test_mla_activation_parts_hand_computed() -> None:
    m = ds3()
    t, tp = A([2048.0]), A([2.0])
    parts = M.activation_parts(m, t, tp, A([1.0]), moe_layer=True)
    T = 4096
    assert parts["mla_up_proj"][0] == 2 * (T * (1536 + 512 + 64) + T * 128 * (2 * 192 + 128) / 2)
    assert parts["moe"][0] == 2048 * 8 * (2 * (7168 + 2 * 2048) + 4)  # fc1 input and output, fp32 prob


def test_permute_and_router_bytes_hand_computed() -> None:
    m = small()  # hidden 4, top-2, 8 experts
    t = A([10.0])
    # permute: read 10 tokens, write 20 copies; unpermute: read 20, write 10 -> 2 B x 4 x (2 x 30)
    assert M.permute_bytes(m, t, A([1.0]))[0] == 2 * 4 * 2 * 30
    # etp 2: the 40 gathered copies are sorted and unsorted once more (read + write each)
    assert M.permute_bytes(m, t, A([2.0]))[0] == 2 * 4 * 2 * 30 + 2 * 4 * 2 * 2 * 40
    fwd, bwd = M.router_bytes(m, t)
    assert (fwd[0], bwd[0]) == (3 * 4 * 10 * 8, 3 * 4 * 10 * 8)
    assert M.router_gemm(m, t)[1][0] == 8 and M.router_gemm(m, t)[2][0] == 4
    rf, rb = M.router_times(m, t, H100, H100.peak("bf16"))
    assert rf[0] > 0 and rb[0] > rf[0]


def test_permute_bytes_by_dispatcher_hand_computed() -> None:
    """Megatron-Core's dispatchers: alltoall sorts the received copies by local expert only when the rank holds
    more than one; DeepEP's flex path permutes one received row per (token, destination rank) into the copies."""
    m = small()  # hidden 4, top-2, 8 experts
    t, etp = A([10.0]), A([1.0])
    row = 2 * 4 * 2  # bytes of one row read and written (bf16, hidden 4)
    # alltoall at ep 4 (2 local experts): permute 1 + unpermute 1 (10 + 20 rows), sort + unsort of the 20 copies
    assert M.permute_bytes(m, t, etp, ep=A([4.0]), dispatcher=A([0]))[0] == row * 30 + 2 * row * 20
    # ep 8: one expert per rank, no sort
    assert M.permute_bytes(m, t, etp, ep=A([8.0]), dispatcher=A([0]))[0] == row * 30
    # etp 2 at ep 8: the 40 gathered copies still need no sort (one local expert)
    assert M.permute_bytes(m, t, A([2.0]), ep=A([8.0]), dispatcher=A([0]))[0] == row * (10 + 20)
    # flex at ep 4: a token's 2 distinct experts fall on distinct ranks with 1 - C(6,2)/C(8,2) per rank of
    # 2 experts -> 4 x (1 - 15/28) = 13/7 ranks: 10 x 13/7 received rows permuted into the 20 copies and back
    ranks = 4 * (1 - comb(6, 2) / comb(8, 2))
    flex = M.permute_bytes(m, t, etp, ep=A([4.0]), dispatcher=A([2]))[0]
    assert flex == pytest.approx(row * (10 * ranks + 20), rel=1e-12)
    # the search's relaxation (negative index) takes the fewest bytes of the dispatchers
    lo = M.permute_bytes(m, t, etp, ep=A([4.0]), dispatcher=A([-1]))[0]
    assert lo == pytest.approx(min(flex, row * 30 + 2 * row * 20, row * 30), rel=1e-12)


def test_expert_gemm_times_scale_with_routed_tokens() -> None:
    m = ds3()
    peak = H100.peak("bf16")
    f1, b1 = M.expert_gemm_times(m, A([4096.0]), A([64.0]), A([1.0]), H100, peak)
    f2, b2 = M.expert_gemm_times(m, A([8192.0]), A([64.0]), A([1.0]), H100, peak)
    assert 1.8 < f2[0] / f1[0] < 2.1 and b1[0] > 1.8 * f1[0]
    # lower bound: the executed FLOPs of 4 local experts x 8192 rows at the MAMF peak
    rows = 64 * 4096 * 8 / 256
    work = 2 * 4 * rows * (2 * 2048 * 7168 + 7168 * 2048)
    assert f1[0] >= work / (peak * H100.gemm_fraction)


def test_expert_gemms_price_the_slowest_rank_of_uniform_routing() -> None:
    m = ds3()
    peak = H100.peak("bf16")
    fwd, _ = M.expert_gemm_times(m, A([4096.0]), A([64.0]), A([1.0]), H100, peak)
    rows = 64 * 4096 * 8 / 256 * (1 + np.sqrt(2 * np.log(64) / (4096 * 8)))  # 4 local experts hold 32768 rows
    expected = (M.grouped_gemm_time(A([rows]), A([4096.0]), A([7168.0]), A([4.0]), H100, peak)
                + M.grouped_gemm_time(A([rows]), A([7168.0]), A([2048.0]), A([4.0]), H100, peak))
    assert fwd[0] == pytest.approx(expected[0], rel=1e-12)


def _costs(m, modules=(), disp="alltoall", **kw):
    from dnnplace.models.llm.moe import DISPATCHERS
    from dnnplace.models.llm.moe_rules import modules_mask

    t, tp, ep, etp = A([4096.0]), A([1.0]), A([64.0]), A([1.0])
    return M.moe_layer_costs(m, t, tp, ep, etp, A([DISPATCHERS.index(disp)]), A([modules_mask(modules)]), 8, H100,
                             H100.peak("bf16"), **kw)


def _ds3_forward_parts(m, t, ep, etp, router_peak, peak, dev=H100):
    """DeepSeek-V3's MoE-layer forward on ``dev`` (H100) at 4096 tokens, EP64, alltoall, part by part (router,
    permutations, experts, SwiGLU over the copies with the routing-imbalance allowance, shared expert):
    (sum, act, shared)."""
    rf, _ = M.router_times(m, t, dev, router_peak)
    ef, _ = M.expert_gemm_times(m, t, ep, etp, dev, peak)
    (sf1, sf2), _ = flops.fwd_bwd_gemm_times(M.shared_expert_gemms(m, t, A([1.0])), dev, peak)
    perm = roofline.hbm_time(M.permute_bytes(m, t, etp, ep=ep, dispatcher=A([0])), dev)
    copies = 4096 * 8 * (1 + np.sqrt(2 * np.log(64) / (4096 * 8)))
    act = roofline.hbm_time(A([2.0 * copies * 3 * 2048]), dev)
    return (rf + perm + ef + act + sf1 + sf2)[0], act, sf1 + sf2


def test_moe_layer_costs_add_up_their_parts() -> None:
    m, peak = ds3(), H100.peak("bf16")
    t, ep, etp = A([4096.0]), A([64.0]), A([1.0])
    c = _costs(m)
    nvl, nic = M.dispatch_volumes(m, t, ep, etp, 8, "alltoall")
    one = M.dispatch_time(nvl, nic, H100)
    assert c["ep"][0][0] == pytest.approx(2 * one[0]) and c["ep"][1][0] == pytest.approx(2 * one[0])
    total, act, shared = _ds3_forward_parts(m, t, ep, etp, peak, peak)
    assert c["compute"][0][0] == pytest.approx(total, rel=1e-12)
    # recomputing the MoE layer reruns its forward, all-to-alls included
    r = _costs(m, ("moe",))
    assert r["compute"][1][0] == pytest.approx(c["compute"][1][0] + c["compute"][0][0])
    assert r["ep"][1][0] == pytest.approx(c["ep"][1][0] + c["ep"][0][0])
    a = _costs(m, ("moe_act",))
    assert a["compute"][1][0] == pytest.approx(c["compute"][1][0] + act[0]) and a["ep"] == c["ep"]
    # overlap never makes the exposed all-to-all negative, and hides at most the window it is given
    o = _costs(m, shared_overlap=True)
    assert o["ep"][0][0] == pytest.approx(max(c["ep"][0][0] - shared[0], 0.0))
    assert 0.0 <= _costs(m, a2a_overlap=True)["ep"][0][0] <= c["ep"][0][0]
    assert _costs(m, disp="flex")["ep"][0][0] < c["ep"][0][0]  # one NIC crossing per remote node


def test_flex_inside_one_domain_runs_at_the_measured_hybridep_rate() -> None:
    """B200 (HYBRIDEP_NVLINK: 535.94 / 530.86 GB/s at 8 ranks, the smallest tested): a rank's received rows
    (one per token and distinct destination rank, its own included) x hidden x 2 bytes at the figure, dispatch
    and combine halved, one NVLink latency each; no table (H100), etp 2 or a group past the domain: the old rule."""
    from dnnplace.core.catalogue import HYBRIDEP_NVLINK

    b200 = device_spec("b200")
    m = small()  # hidden 4, top-2, 8 experts
    t, ep, one = A([1000.0]), A([4.0]), A([1.0])
    ranks = 4 * (1 - comb(6, 2) / comb(8, 2))  # distinct ranks of 2 experts, 2 experts a rank
    received = 1000 * ranks * 4 * 2
    d, c = HYBRIDEP_NVLINK["b200"].at(4)
    assert (d, c) == (535.94e9, 530.86e9)
    expected = 0.5 * (received / d + b200.nvlink_latency_s) + 0.5 * (received / c + b200.nvlink_latency_s)
    got = M.flex_dispatch_time(m, t, ep, one, 8, b200)[0]
    assert got == pytest.approx(expected, rel=1e-12)
    # the DeepEP rule where nothing is measured: H100, ETP 2, or EP groups spanning two domains
    h100_rule = M.flex_dispatch_time(m, t, ep, one, 8, H100)[0]
    nvl, _ = M.dispatch_volumes(m, t, ep, one, 8, "flex")
    bw = H100.nvlink_bandwidth * H100.nvlink_fraction
    deepep = 0.5 * (nvl[0] / (bw * 153 / 160) + H100.nvlink_latency_s) + 0.5 * (nvl[0] / (bw * 158 / 160)
                                                                               + H100.nvlink_latency_s)
    assert h100_rule == pytest.approx(deepep, rel=1e-12)
    assert M.flex_dispatch_time(m, t, ep, A([2.0]), 8, b200)[0] != pytest.approx(expected, rel=1e-3)
    r8 = 1000 * 8 * (1 - comb(7, 2) / comb(8, 2)) * 4 * 2  # ep 8 over two 4-GPU domains: RDMA as before
    at8 = 0.5 * (r8 / d + b200.internode_latency_s) + 0.5 * (r8 / c + b200.internode_latency_s)
    assert M.flex_dispatch_time(m, t, A([8.0]), one, 4, b200)[0] != pytest.approx(at8, rel=1e-3)


def test_router_gemm_stays_bf16_under_a_quantized_recipe() -> None:
    """An FP8 recipe runs the experts and shared experts at the FP8 peak, the router GEMM at BF16 (Megatron-Core's
    RouterGatingLinearFunction calls TE's GEMM on the 16-bit tensors, outside the quantized linears)."""
    import dataclasses

    from dnnplace.models.llm.moe_rules import modules_mask

    # the router GEMM (n = 256 experts) is bound by its bytes at either peak on an H100; on a device with a
    # hundredth of its tensor-core rate the two peaks give different times, so the check below tells them apart
    dev = dataclasses.replace(H100, peak_flops={k: v / 100 for k, v in H100.peak_flops.items()})
    m, fp8 = ds3(), dev.peak("fp8")
    t, tp, ep, etp = A([4096.0]), A([1.0]), A([64.0]), A([1.0])
    c = M.moe_layer_costs(m, t, tp, ep, etp, A([0]), A([modules_mask(())]), 8, dev, fp8)
    rf, _ = M.router_times(m, t, dev, dev.peak("bf16"))
    total, _, _ = _ds3_forward_parts(m, t, ep, etp, dev.peak("bf16"), fp8, dev)
    assert c["compute"][0][0] == pytest.approx(total, rel=1e-12)
    assert M.router_times(m, t, dev, fp8)[0][0] < rf[0]  # it was priced at the FP8 peak before


def test_mla_layer_compute_and_its_recompute() -> None:
    from dnnplace.models.llm.moe_rules import modules_mask

    m, peak = ds3(), H100.peak("bf16")
    T, tp = A([4096.0]), A([1.0])
    f0, b0 = M.mla_layer_compute(m, T, 4096, tp, A([0]), H100, peak)
    gf, gb = flops.fwd_bwd_gemm_times(M.mla_gemms(m, T, tp), H100, peak)
    # cuDNN's MLA-shape measurement (H200 at 4096: 599 / 404 TFLOP/s), the backward counted as 3 x 192 + 2 x 128
    # over 192 + 128 of the forward's FLOPs: 4096 tokens x 4096 keys x 128 heads x 320 forward
    fl = 4096 * 4096 * 128 * 320
    assert M.mla_attention_fwd_flops(m, T, 4096, tp)[0] == fl
    assert f0[0] == pytest.approx((sum(gf) + fl / 599e12)[0], rel=1e-12)
    assert b0[0] == pytest.approx((sum(gb) + fl * 832 / 320 / 404e12)[0], rel=1e-12)
    # no measurement at this device (A100): the catalogue's fused-attention fractions, as before
    a100 = device_spec("a100")
    fa, _ = M.mla_layer_compute(m, T, 4096, tp, A([0]), a100, a100.peak("bf16"))
    ga, _ = flops.fwd_bwd_gemm_times(M.mla_gemms(m, T, tp), a100, a100.peak("bf16"))
    assert fa[0] == pytest.approx((sum(ga) + fl / (312e12 * a100.attn_fwd_fraction))[0], rel=1e-12)
    _, b1 = M.mla_layer_compute(m, T, 4096, tp, A([modules_mask(["mla_up_proj"])]), H100, peak)
    assert b1[0] == pytest.approx(b0[0] + gf[1][0] + gf[3][0], rel=1e-12)  # q_up and kv_up rerun


def test_rank_layer_counts_put_the_dense_layers_where_the_split_does() -> None:
    m = ds3()
    dense, sparse = M.rank_layer_counts(m.moe.moe_layers, (4,) * 15 + (1,), 8)
    assert dense.tolist() == [3, 0, 0, 0, 0, 0, 0, 0]  # stage 0 (rank 0's first chunk) holds layers 0..3
    assert sparse.tolist() == [5, 8, 8, 8, 8, 8, 8, 5]  # rank 7: 4 + 1 layers
    dense, sparse = M.rank_layer_counts(m.moe.moe_layers, (16, 16, 16, 13), 4)
    assert dense.tolist() == [3, 0, 0, 0] and sparse.tolist() == [13, 16, 16, 13]
    with pytest.raises(ValueError):
        M.rank_layer_counts(m.moe.moe_layers, (4, 4), 2)


def test_dense_parameters_of_an_moe_model_hand_computed() -> None:
    m = ds3()
    h, heads = 7168, 128
    down = h * 1536 + h * (512 + 64)
    up = 1536 * heads * 192 + 512 * heads * 256 + heads * 128 * h
    assert M.attention_params(m, A([2.0]))[0] == down + up / 2 + h + 1536 + 512
    assert M.moe_dense_params(m, A([2.0]))[0] == 256 * h + 3 * h * 2048 / 2 + h
    assert M.dense_mlp_params(m, A([1.0]))[0] == 3 * h * 18432 + h
    # the whole model: attention + dense MLPs + MoE layers (+ experts) + embedding + head is DeepSeek-V3's
    # published 671 B parameters (MTP layer aside)
    total = (61 * M.attention_params(m, A([1.0]))[0] + 3 * M.dense_mlp_params(m, A([1.0]))[0]
             + 58 * M.moe_dense_params(m, A([1.0]))[0] + M.expert_params(m, A([58.0]), A([1.0]), A([1.0]))[0]
             + 2 * 129280 * h + h)
    assert 670e9 < total < 672e9
    q = load_moe(FIXTURES / "qwen3-30b-a3b.json")
    total = (48 * (M.attention_params(q, A([1.0]))[0] + M.moe_dense_params(q, A([1.0]))[0])
             + M.expert_params(q, A([48.0]), A([1.0]), A([1.0]))[0] + 2 * 151936 * 2048 + 2048)
    assert 30.4e9 < total < 30.6e9  # Qwen3-30B-A3B: 30.5 B parameters (its model card)


def test_stage_layer_kinds_vectorised_equal_the_per_rank_count() -> None:
    m = ds3()
    splits = [(4,) * 15 + (1,), (16, 16, 16, 13), (61,), (1, 2, 58)]
    width = max(len(s) for s in splits)
    stages = np.zeros((len(splits), width))
    for i, s in enumerate(splits):
        stages[i, :len(s)] = s
    dense, sparse = M.stage_layer_kinds(m.moe.moe_layers, stages)
    assert dense[0].tolist() == [3] + [0] * 15 and sparse[0].tolist() == [1] + [4] * 14 + [1]
    assert dense[3, :3].tolist() == [1, 2, 0] and sparse[3, :3].tolist() == [0, 0, 58]
    assert (dense + sparse == stages).all()
    for i, s in enumerate(splits):  # the stages of rank r add up to rank_layer_counts
        pp = {0: 8, 1: 4, 2: 1, 3: 3}[i]
        d, sp = M.rank_layer_counts(m.moe.moe_layers, s, pp)
        assert [dense[i, r:len(s):pp].sum() for r in range(pp)] == d.tolist()
        assert [sparse[i, r:len(s):pp].sum() for r in range(pp)] == sp.tolist()


def test_domains_hit_against_enumeration_with_group_limited_routing() -> None:
    """Expected distinct domains of a token's experts, by brute force over every group set and expert set."""
    def brute(e: int, k: int, ep: int, per_domain: int, g: int, tg: int) -> float:
        per_group, per_rank = e // g, e // ep
        total, n = 0.0, 0
        for groups in itertools.combinations(range(g), tg):
            pool = [x for x in range(e) if x // per_group in groups]
            sets = list(itertools.combinations(pool, k))
            total += sum(len({(x // per_rank) // per_domain for x in c}) for c in sets) / len(sets)
            n += 1
        return total / n

    for e, k, ep, per_domain, g, tg in ((8, 2, 4, 2, 4, 2), (12, 3, 6, 2, 3, 2), (16, 3, 8, 2, 4, 1),
                                        (8, 2, 8, 3, 2, 1), (8, 2, 4, 2, 1, 1)):
        hit = moe_dispatch._domains_hit(e, k, ep, per_domain, g, tg)
        assert hit == pytest.approx(brute(e, k, ep, per_domain, g, tg))


def test_deepseek_v3_group_limit_bounds_the_nodes_a_token_reaches() -> None:
    """DeepSeek-V3 at EP 64 on 8-GPU nodes: one group of 32 experts per node, 4 groups per token, so a token
    reaches 4 x (1 - C(96, 8) / C(128, 8)) nodes (its own counted) -- not 8 x (1 - C(224, 8) / C(256, 8))."""
    m = ds3()
    hits = M.domains_hit(m, A([64.0]), A([1.0]), 8)[0]
    assert hits == pytest.approx(4 * (1 - comb(96, 8) / comb(128, 8)))
    assert hits < 8 * (1 - comb(224, 8) / comb(256, 8))
    nvl, nic = M.dispatch_volumes(m, A([4096.0]), A([64.0]), A([1.0]), 8, "flex")
    assert nic[0] == pytest.approx(2 * 7168 * 4096 * hits * 7 / 8)  # the own node is 1/8 of the hits


def test_flex_dispatch_time_at_deepep_published_bandwidths() -> None:
    """DeepSeek-V3, EP 64 over 8 nodes: logical RDMA bytes (tokens x nodes hit, own node included) at DeepEP's
    EP 64 figures, 51 GB/s dispatch and 50 GB/s combine of a 50 GB/s NIC; the NVLink side is not the bound."""
    from dnnplace.core.catalogue import DEEPEP

    m, t = ds3(), A([4096.0])
    logical = 2 * 7168 * 4096 * 4 * (1 - comb(96, 8) / comb(128, 8))
    want = 0.5 * (logical / 51e9 + logical / 50e9) + H100.internode_latency_s
    assert M.flex_dispatch_time(m, t, A([64.0]), A([1.0]), 8, H100)[0] == pytest.approx(want)
    assert DEEPEP.rdma_fraction(8) == (51 / 50, 50 / 50) and DEEPEP.rdma_fraction(3) == (43 / 50, 43 / 50)
    # inside one domain: the NVLink copies at DeepEP's intranode figures of the NCCL NVLink bandwidth
    nvl, _ = M.dispatch_volumes(m, t, A([8.0]), A([1.0]), 8, "flex")
    bw = H100.nvlink_bandwidth * H100.nvlink_fraction
    want = 0.5 * (nvl[0] / (bw * 153 / 160) + nvl[0] / (bw * 158 / 160)) + H100.nvlink_latency_s
    assert M.flex_dispatch_time(m, t, A([8.0]), A([1.0]), 8, H100)[0] == pytest.approx(want)


def test_moe_cast_bytes_hand_computed() -> None:
    """8 experts, top-2, hidden 4, ffn 6 (gated), 2 heads of 2, 1 KV head: a quantize kernel moving 4 bytes per
    element (Hopper delayed FP8: read 2, write two 1-byte copies) and 2 extra bytes where fused into a norm."""
    m = small()
    T, one = A([10.0]), A([1.0])
    out = M.moe_cast_bytes(m, 4.0, 2.0, T, one, one, one, A([20.0]))
    assert out["experts"][0][0] == 20 * 4 * (4 + 6) and out["experts"][1][0] == 20 * 4 * (4 + 2 * 6)
    assert out["attention"][0][0] == 10 * (2 * 4 + 4 * 4) and out["attention"][1][0] == 10 * 4 * (4 + 4 + 2 * 2)
    assert out["dense_mlp"][0][0] == 10 * (2 * 4 + 2 * 6) and out["dense_mlp"][1][0] == 10 * 4 * (4 + 2 * 6)
    half = M.moe_cast_bytes(m, 4.0, 2.0, T, one, A([2.0]), one, A([20.0]))["experts"]  # etp 2: ffn / 2 per shard
    assert half[0][0] == 20 * 4 * (4 + 3)


def test_quantized_recipes_save_quantized_gemm_inputs_hand_computed() -> None:
    """TE keeps the quantized copy of a linear's input (here 1.03125 bytes: MXFP8's byte + a 1-byte scale per 32)
    instead of the 16-bit one; the pre-MLP norm output of an MoE layer stays 16-bit (the BF16 router saves it)."""
    m = small(shared=6)  # hidden 4, 8 experts top-2, expert ffn 6, one shared expert of 6; GQA 2 heads of 2
    t, tp, etp, qb = A([10.0]), A([1.0]), A([1.0]), 1.0 + 1.0 / 32
    bf = M.activation_parts(m, t, tp, etp, moe_layer=True)
    qp = M.activation_parts(m, t, tp, etp, moe_layer=True, quant_bytes=qb)
    copies = 10 * 2
    assert qp["moe"][0] == pytest.approx(copies * (qb * 4 + 2 * 2 * 6 + 4))  # fc1 input quantized
    assert qp["moe_act"][0] == pytest.approx(qb * copies * 6)
    assert qp["shared_experts"][0] == pytest.approx(10 * (2 * 2 * 6 + qb * 6))
    assert qp["layernorm"][0] == pytest.approx((qb + 2) * 10 * 4)
    assert qp["kept"][0] == pytest.approx(bf["kept"][0] + qb * 10 * 4)  # the out projection's quantized copy
    dense = M.activation_parts(m, t, tp, etp, moe_layer=False, quant_bytes=qb)
    assert dense["layernorm"][0] == pytest.approx(2 * qb * 10 * 4)
    assert dense["mlp"][0] == pytest.approx(10 * (2 * 2 * 6 + qb * 6))


def test_expert_weights_take_the_recipe_bytes() -> None:
    p = A([1e9])
    mem = M.expert_memory(p, A([4.0]), A([True]), weight_bytes=2 + 2 * (1 + 1 / 32))  # BF16 + two MXFP8 copies
    assert mem["weights"][0] == pytest.approx(4.0625e9)
    assert M.expert_memory(p, A([4.0]), A([True]), fp8=True)["weights"][0] == 3e9


def test_sliding_window_layers_run_at_the_measured_window_rates() -> None:
    """GPT-OSS-120B on GB200 at seq 4096: its 18 windowed layers (window 128, head dim 64) at cuDNN's measured
    161 / 182 TFLOP/s, the 18 global ones as before; averaged per layer."""
    import dataclasses

    from dnnplace.models.llm.evaluation.flops import attention_times

    m = load_moe(FIXTURES / "gpt-oss-120b.json")
    a, dev = m.arch, device_spec("gb200")
    tok, tp, cp = A([4096.0]), A([1.0]), A([1.0])
    f, b = M.attention_core_times(a, tok, 4096, tp, dev, cp)
    gf, gb = attention_times(dataclasses.replace(a, sliding_window=0), tok, 4096, tp, dev, cp)
    useful = 4 * 4096 * (128 - 128 * 128 / (2 * 4096)) * 64 * 64  # 126 keys per query, 64 heads of 64
    assert f[0] == pytest.approx((18 * gf[0] + 18 * useful / 161e12) / 36)
    assert b[0] == pytest.approx((18 * gb[0] + 18 * 2.5 * useful / 182e12) / 36)
    # no measurement for H100 at this window: the old pricing
    h = device_spec("h100")
    assert M.attention_core_times(a, tok, 4096, tp, h, cp)[0][0] == attention_times(a, tok, 4096, tp, h, cp)[0][0]


def test_overlapped_flex_kernels_take_their_sms_from_the_compute() -> None:
    """With the EP overlap, a flex transfer of T seconds costs max(T - compute, T x 20 / 132) on H100 (DeepEP's 20
    SMs of 132 are busy beside the compute); the alltoall overlap hides T up to the compute, as before."""
    m = ds3()
    t = A([4096.0])
    (sf1, sf2), _ = flops.fwd_bwd_gemm_times(M.shared_expert_gemms(m, t, A([1.0])), H100, H100.peak("bf16"))
    for disp, steal in (("flex", 20 / 132), ("alltoall", 0.0)):
        plain, ovl = _costs(m, disp=disp), _costs(m, disp=disp, a2a_overlap=True)
        T, beside = plain["ep"][0][0], plain["compute"][0][0] - (sf1 + sf2)[0]  # forward
        assert ovl["ep"][0][0] == pytest.approx(max(T - beside, T * steal))
    assert _costs(m, disp="flex", a2a_overlap=True)["ep"][0][0] > 0.0


def test_overlapped_flex_on_blackwell_takes_hybridep_sms() -> None:
    """GB200 (a HYBRIDEP_NVLINK device): the recipes' HybridEP holds 32 SMs of 148 beside the compute, so an
    overlapped flex transfer of T seconds costs max(T - compute, T x 32 / 148)."""
    from dnnplace.models.llm.moe import DISPATCHERS
    from dnnplace.models.llm.moe_rules import modules_mask

    gb = device_spec("gb200")
    assert gb.sm_count == 148
    m = load_moe(FIXTURES / "qwen3-30b-a3b.json")  # no shared experts: the whole compute is beside the transfer
    t, one, ep = A([16384.0]), A([1.0]), A([8.0])
    args = (m, t, one, ep, one, A([DISPATCHERS.index("flex")]), A([modules_mask(())]), 72, gb, gb.peak("bf16"))
    plain, ovl = M.moe_layer_costs(*args), M.moe_layer_costs(*args, a2a_overlap=True)
    T, beside = plain["ep"][0][0], plain["compute"][0][0]
    assert ovl["ep"][0][0] == pytest.approx(max(T - beside, T * 32 / 148))
    assert T * 32 / 148 > T - beside  # this layer's compute hides all but the SMs' share
