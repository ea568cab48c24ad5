"""exporters/megatron_moe: the MoE arguments become megatron-core's own TransformerConfig, which validates them,
and megatron-core refuses exactly what the MoE rules refuse (where it checks at configuration time)."""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dnnplace.arch.moe_config import load_moe
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.exporters.megatron_moe import layer_freq, moe_model_args, moe_parallel_args
from dnnplace.models.llm.moe_rules import check_moe_config, moe_columns
from dnnplace.models.llm.published import CONFIGS

FIXTURES = CONFIGS
MODELS = ("deepseek-v3", "llama-4-maverick-17b-128e", "qwen3-30b-a3b")


def moe_freq_type(x: str) -> int | list[int]:
    """Megatron-LM arguments.moe_freq_type: an integer N (one MoE layer in N), or a Python list expression."""
    if "[" in x:
        return eval(x)  # noqa: S307 -- what Megatron-LM itself does with the argument
    return int(x)


def pattern_of(freq: int | list[int], layers: int) -> list[int]:
    """megatron-core's moe_layer_freq -> per-layer pattern (TransformerBlock / get_moe_layer_pattern)."""
    if isinstance(freq, int):
        return [1 if i % freq == 0 else 0 for i in range(layers)]
    return freq


@given(st.lists(st.booleans(), min_size=1, max_size=64).filter(any))
def test_layer_freq_evaluates_to_the_pattern(pattern: list[bool]) -> None:
    assert pattern_of(moe_freq_type(layer_freq(tuple(pattern))), len(pattern)) == [int(p) for p in pattern]


def test_layer_freq_is_short_for_the_published_patterns() -> None:
    assert layer_freq((True,) * 48) == "1"
    assert layer_freq((False, True) * 24) == "([0,1]*24)"
    assert layer_freq((False,) * 3 + (True,) * 58) == "([0]*3+[1]*58)"


def kwargs_of(groups: list[list[str]]) -> dict[str, Any]:
    """Megatron-LM's argument names -> megatron-core TransformerConfig fields (core_transformer_config_from_args)."""
    kw: dict[str, Any] = {}
    for name, *values in groups:
        key = {"num_experts": "num_moe_experts"}.get(name[2:].replace("-", "_"), name[2:].replace("-", "_"))
        if not values:
            kw[key] = True
        elif key == "moe_layer_freq":
            kw[key] = moe_freq_type(values[0])
        elif key == "recompute_modules":
            kw[key] = list(values)
        else:
            kw[key] = int(values[0]) if values[0].isdigit() else values[0]
    return kw


def core_config(m: Any, groups: list[list[str]], **extra: Any) -> Any:
    if importlib.util.find_spec("megatron") is None:
        pytest.skip("megatron-core is not installed (pip install '.[trainers]')")
    import torch
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    a = m.arch
    kw = {**dict(num_layers=a.num_layers, hidden_size=a.hidden, num_attention_heads=a.heads,
                 ffn_hidden_size=a.ffn_hidden, kv_channels=a.head_dim, gated_linear_unit=True,
                 add_bias_linear=a.linear_bias or m.moe.expert_bias, pipeline_dtype=torch.bfloat16, bf16=True),
          **kwargs_of(groups), **extra}
    if importlib.util.find_spec("transformer_engine") is None:
        assert kw.pop("moe_permute_fusion") is True  # exported; its fused kernels need Transformer Engine
    if not kw.get("multi_latent_attention"):
        kw["num_query_groups"] = a.kv_heads
    cls = MLATransformerConfig if kw.get("multi_latent_attention") else TransformerConfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(**kw)


@pytest.mark.parametrize("name", MODELS)
def test_megatron_core_builds_the_priced_experts(name: str) -> None:
    m = load_moe(FIXTURES / f"{name}.json")
    groups = moe_model_args(m) + moe_parallel_args(ep=8, etp=1, dispatcher="alltoall",
                                                   recompute_modules=("moe_act", "layernorm"))
    cfg = core_config(m, groups)
    s = m.moe
    assert (cfg.num_moe_experts, cfg.moe_router_topk, cfg.moe_ffn_hidden_size) == (s.num_experts, s.top_k,
                                                                                    s.expert_ffn)
    assert pattern_of(cfg.moe_layer_freq, m.arch.num_layers) == [int(x) for x in s.moe_layers]
    assert (cfg.moe_shared_expert_intermediate_size or 0) == s.shared_ffn
    assert cfg.moe_router_score_function == s.router and cfg.moe_grouped_gemm
    assert cfg.recompute_granularity == "selective" and cfg.recompute_modules == ["moe_act", "layernorm"]
    assert (cfg.mtp_num_layers or 0) == s.mtp_layers
    if m.mla is not None:
        x = m.mla
        assert (cfg.q_lora_rank, cfg.kv_lora_rank, cfg.qk_head_dim, cfg.qk_pos_emb_head_dim, cfg.v_head_dim) == (
            x.q_lora_rank, x.kv_lora_rank, x.qk_nope_head_dim, x.qk_rope_head_dim, x.v_head_dim)
        assert (cfg.moe_router_num_groups, cfg.moe_router_group_topk) == (s.expert_groups, s.topk_groups)


#: (MoE knobs, extra megatron-core fields, the rule dnnplace names); megatron-core must refuse each too.
REFUSED = [
    (dict(recompute="selective", recompute_modules=("mla_up_proj",)), {}, "mla_up_proj_mla"),
    (dict(recompute="selective", recompute_modules=("moe_act",), grouped_gemm=False), {}, "moe_act_grouped_gemm"),
    (dict(ep=1, a2a_overlap=True), {}, "a2a_overlap_ep"),
    (dict(dispatcher="allgather", a2a_overlap=True), {}, "a2a_overlap_dispatcher"),
    (dict(pp=2, a2a_overlap=True), {"pipeline_model_parallel_size": 2}, "a2a_overlap_vp"),
    (dict(recompute="full", a2a_overlap=True), {"recompute_granularity": "full", "recompute_method": "uniform",
                                                 "recompute_num_layers": 1}, "a2a_overlap_recompute"),
    (dict(ep=4, etp=2), {"add_bias_linear": True}, "expert_bias_etp"),
]


@pytest.mark.parametrize(("knobs", "extra", "rule"), REFUSED)
def test_megatron_core_refuses_what_the_rules_refuse(knobs: dict, extra: dict, rule: str) -> None:
    m = load_moe(FIXTURES / "qwen3-30b-a3b.json")  # no MLA: mla_up_proj is refused by both
    if rule == "expert_bias_etp":  # experts with biases (gpt-oss)
        m = dataclasses.replace(m, moe=dataclasses.replace(m.moe, expert_bias=True))
    cols = dict(dict(ep=8, dp=8, dispatcher="alltoall"), **knobs)
    with pytest.raises(DnnplaceError, match=f"rule {rule}"):
        check_moe_config(m, 8 * cols.get("pp", 1), moe_columns(**cols))
    par = {k: v for k, v in cols.items() if k in ("ep", "etp", "dispatcher", "recompute_modules", "grouped_gemm",
                                                   "a2a_overlap")}
    groups = moe_model_args(m) + moe_parallel_args(**{"etp": 1, **par})
    with pytest.raises((ValueError, AssertionError)):
        core_config(m, groups, **extra)


def test_shared_expert_overlap_conflicts_refused_by_both() -> None:
    q2 = {"model_type": "qwen2_moe", "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 64,
          "shared_expert_intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
          "num_key_value_heads": 4, "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 100}
    from dnnplace.arch.moe_config import moe_from_dict

    m = moe_from_dict(q2, "q2.json")
    for knobs, rule in ((dict(recompute="selective", recompute_modules=("shared_experts",)),
                         "shared_overlap_recompute"), (dict(a2a_overlap=True), "a2a_overlap_shared")):
        with pytest.raises(DnnplaceError, match=f"rule {rule}"):
            check_moe_config(m, 8, moe_columns(ep=8, dp=8, shared_expert_overlap=True, **knobs))
        par = {k: v for k, v in knobs.items() if k != "recompute"}
        groups = moe_model_args(m) + moe_parallel_args(ep=8, etp=1, dispatcher="alltoall", shared_expert_overlap=True,
                                                       **par)
        with pytest.raises((ValueError, AssertionError)):
            core_config(m, groups)


def test_accepted_layouts_are_accepted_by_megatron_core() -> None:
    m = load_moe(FIXTURES / "deepseek-v3.json")
    for knobs in (dict(recompute="selective", recompute_modules=("mla_up_proj", "mlp", "moe")),
                  dict(pp=2, vp=2, a2a_overlap=True), dict(dispatcher="flex", etp=2)):
        cols = dict(dict(ep=8, dp=16), **knobs)
        check_moe_config(m, 16 * cols.get("pp", 1), moe_columns(**cols))
        par = {k: v for k, v in cols.items() if k in ("ep", "etp", "dispatcher", "recompute_modules",
                                                       "a2a_overlap")}
        groups = moe_model_args(m) + moe_parallel_args(**{"etp": 1, "dispatcher": "alltoall", **par})
        extra = {"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2} if "vp" in cols else {}
        core_config(m, groups, **extra)


def test_mlp_graphs_with_the_a2a_overlap_refused_by_both() -> None:
    """megatron-core (0.16.1 to 0.19) graphs no mlp module under the EP all-to-all overlap: the planner refuses
    the pair by rule, not by writing arguments the trainer refuses."""
    import dnnplace

    path = FIXTURES / "deepseek-v3.json"  # three dense layers: the mlp scope captures them
    pr = dnnplace.load_llm(path, gpus=256, seq_len=4096, global_batch=512, device="b200", precision="fp8")
    with pytest.raises(DnnplaceError, match="rule graphs_a2a_mlp") as info:
        dnnplace.solve(pr, cuda_graphs="attn+mlp+moe_router+moe_preprocess", a2a_overlap=True)
    assert "\n" not in str(info.value)
    m = load_moe(path)
    groups = moe_model_args(m) + moe_parallel_args(ep=8, etp=1, dispatcher="alltoall", a2a_overlap=True)
    with pytest.raises((ValueError, AssertionError), match="not supported with overlap_moe_expert_parallel_comm"):
        core_config(m, groups, cuda_graph_impl="transformer_engine", cuda_graph_scope=["attn", "mlp"],
                    pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2)


def test_whole_iteration_graphs_with_the_a2a_overlap_say_the_version() -> None:
    """Megatron-Bridge's recipes run whole-iteration graphs with the EP all-to-all overlap (35 published rows);
    megatron-core 0.16 and 0.17 refuse the pair, 0.18 runs it: the plan stands and its arguments say so."""
    import dnnplace
    from dnnplace.models.llm.exporters import export

    pr = dnnplace.load_llm(FIXTURES / "qwen3-30b-a3b.json", gpus=16, seq_len=4096, global_batch=256,
                           device="gb200")
    text = export(dnnplace.solve(pr, cuda_graphs="full_iteration", a2a_overlap=True).plan, "megatron")
    assert "--overlap-moe-expert-parallel-comm" in text and "--cuda-graph-scope full_iteration" in text
    assert "need megatron-core 0.18 or later" in text
    plain = export(dnnplace.solve(pr, cuda_graphs="full_iteration", a2a_overlap=False).plan, "megatron")
    assert "megatron-core 0.18" not in plain
    if importlib.util.find_spec("megatron") is None:
        return
    from importlib.metadata import version

    if tuple(int(x) for x in version("megatron-core").split(".")[:2]) < (0, 18):  # the refusal the note is for
        m = load_moe(FIXTURES / "qwen3-30b-a3b.json")
        groups = moe_model_args(m) + moe_parallel_args(ep=8, etp=1, dispatcher="alltoall", a2a_overlap=True)
        with pytest.raises(AssertionError, match="not supported with overlap_moe_expert_parallel_comm"):
            core_config(m, groups, cuda_graph_impl="local", cuda_graph_scope=["full_iteration"])


def test_moe_recompute_under_a_router_graph_refused_by_both() -> None:
    """megatron-core 0.16.1: the 'moe' recompute module does not run under a moe_router graph (TE captures)."""
    import dnnplace

    path = FIXTURES / "qwen3-30b-a3b.json"
    pr = dnnplace.load_llm(path, gpus=16, seq_len=4096, global_batch=128)
    with pytest.raises(DnnplaceError, match="rule graphs_moe_recompute"):
        dnnplace.solve(pr, cuda_graphs="attn+moe_router", recompute="selective", recompute_modules="moe")
    m = load_moe(path)
    groups = moe_model_args(m) + moe_parallel_args(ep=8, etp=1, dispatcher="alltoall", recompute_modules=("moe",))
    with pytest.raises((ValueError, AssertionError), match="moe recompute is not supported"):
        core_config(m, groups, cuda_graph_impl="transformer_engine", cuda_graph_scope=["attn", "moe_router"])


@pytest.mark.parametrize(("graphs", "recompute", "ok"), [("attn", "full", False), ("full_iteration", "full", True),
                                                         ("attn", "selective", True)])
def test_graphs_with_recompute_as_megatron_core_takes_them(graphs: str, recompute: str, ok: bool) -> None:
    """Full recomputation runs only under whole-iteration graphs: the rule and megatron-core agree."""
    import dnnplace
    from dnnplace.models.llm.evaluation.rules import check_config

    path = FIXTURES / "qwen3-30b-a3b.json"
    pr = dnnplace.load_llm(path, gpus=16, seq_len=4096, global_batch=128)
    sol = dnnplace.solve(pr, tp=1, pp=1, cp=1, ep=8, dispatcher="alltoall", a2a_overlap=False, recompute="none")
    c = dataclasses.replace(sol.plan.config, recompute=recompute, cuda_graphs=graphs,
                            recompute_modules="moe_act" if recompute == "selective" else "none")
    m = load_moe(path)
    groups = moe_model_args(m) + moe_parallel_args(ep=8, etp=1, dispatcher="alltoall",
                                                   recompute_modules=("moe_act",) if recompute == "selective" else ())
    extra: dict[str, Any] = {"cuda_graph_impl": "local" if graphs == "full_iteration" else "transformer_engine",
                             "cuda_graph_scope": [graphs]}
    extra.update({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
                 if recompute == "full" else {"recompute_granularity": "selective"})
    if ok:
        check_config(pr, c)
        core_config(m, groups, **extra)
    else:
        with pytest.raises(DnnplaceError, match="rule graphs_full_recompute"):
            check_config(pr, c)
        with pytest.raises((ValueError, AssertionError), match="full recompute is only supported"):
            core_config(m, groups, **extra)
