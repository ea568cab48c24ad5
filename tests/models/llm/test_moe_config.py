"""frontends/moe_config: the six MoE families read in full, checked against transformers' own models, and
their one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dnnplace.arch.moe_config import load_moe, moe_from_dict
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.published import CONFIGS

FIXTURES = CONFIGS


def test_deepseek_v3_full_size() -> None:
    m = load_moe(FIXTURES / "deepseek-v3.json")
    a, s, x = m.arch, m.moe, m.mla
    assert (a.num_layers, a.hidden, a.ffn_hidden, a.heads, a.kv_heads, a.vocab) == (61, 7168, 18432, 128, 128, 129280)
    assert s.moe_layers == (False,) * 3 + (True,) * 58  # first_k_dense_replace = 3
    assert (s.num_experts, s.top_k, s.expert_ffn, s.shared_experts, s.shared_ffn) == (256, 8, 2048, 1, 2048)
    assert (s.mtp_layers, s.router, s.expert_groups, s.topk_groups) == (1, "sigmoid", 8, 4)
    assert x is not None and (x.q_lora_rank, x.kv_lora_rank, x.qk_nope_head_dim, x.qk_rope_head_dim,
                              x.v_head_dim, x.qk_head_dim) == (1536, 512, 128, 64, 128, 192)
    assert a.head_dim == 128 and a.num_experts == 256 and a.family == "deepseek_v3"


def test_kimi_k2_is_read_as_the_deepseek_v3_architecture_it_names() -> None:
    """Kimi K2's config.json: model_type kimi_k2, architectures DeepseekV3ForCausalLM (384 experts, 64 heads,
    one dense layer first): read by the DeepSeek-V3 reader, its own name kept."""
    doc = json.loads((FIXTURES / "deepseek-v3.json").read_text())
    doc.update({"model_type": "kimi_k2", "n_routed_experts": 384, "num_attention_heads": 64, "n_group": 1,
                "topk_group": 1, "first_k_dense_replace": 1, "architectures": ["DeepseekV3ForCausalLM"]})
    m = moe_from_dict(doc, "kimi-k2/config.json")
    assert m.arch.family == "deepseek_v3" and m.arch.architecture == "DeepseekV3ForCausalLM"
    assert (m.moe.num_experts, m.arch.heads, m.moe.moe_layers[:2]) == (384, 64, (False, True))
    assert m.mla is not None


def test_llama4_maverick_text_config() -> None:
    m = load_moe(FIXTURES / "llama-4-maverick-17b-128e.json")
    a, s = m.arch, m.moe
    assert (a.num_layers, a.hidden, a.heads, a.kv_heads, a.head_dim, a.vocab) == (48, 5120, 40, 8, 128, 202048)
    assert s.moe_layers == (False, True) * 24  # interleave_moe_layer_step = 2: layers 1, 3, ..., 47
    assert (a.ffn_hidden, s.expert_ffn, s.shared_ffn, s.num_experts, s.top_k) == (16384, 8192, 8192, 128, 1)
    assert (m.attention_chunk, m.chunk_global_every) == (8192, 4)
    assert a.architecture == "Llama4ForConditionalGeneration"


def test_qwen3_moe() -> None:
    m = load_moe(FIXTURES / "qwen3-30b-a3b.json")
    a, s = m.arch, m.moe
    assert (a.num_layers, a.hidden, a.heads, a.kv_heads, a.head_dim, a.q_width) == (48, 2048, 32, 4, 128, 4096)
    assert s.moe_layers == (True,) * 48 and s.shared_ffn == 0 and (s.num_experts, s.top_k, s.expert_ffn) == (128, 8,
                                                                                                                768)
    assert a.qk_norm and not a.qkv_bias and m.mla is None


MIXTRAL = dict(model_type="mixtral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
               vocab_size=32000, sliding_window=None)
QWEN2_MOE = dict(model_type="qwen2_moe", hidden_size=2048, intermediate_size=5632, moe_intermediate_size=1408,
                 shared_expert_intermediate_size=5632, num_hidden_layers=24, num_attention_heads=16,
                 num_key_value_heads=16, num_experts=60, num_experts_per_tok=4, decoder_sparse_step=1,
                 vocab_size=151936)
GPT_OSS = dict(model_type="gpt_oss", hidden_size=2880, intermediate_size=2880, num_hidden_layers=24,
               num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_local_experts=32,
               num_experts_per_tok=4, sliding_window=128, vocab_size=201088,
               layer_types=["sliding_attention", "full_attention"] * 12)


def test_mixtral_qwen2_moe_gpt_oss() -> None:
    mx = moe_from_dict(MIXTRAL, "mixtral.json")
    assert mx.moe.moe_layers == (True,) * 32 and (mx.moe.num_experts, mx.moe.top_k, mx.moe.expert_ffn) == (8, 2, 14336)
    q2 = moe_from_dict(QWEN2_MOE, "q2.json")
    assert (q2.moe.shared_experts, q2.moe.shared_ffn, q2.moe.expert_ffn) == (1, 5632, 1408) and q2.arch.qkv_bias
    g = moe_from_dict(GPT_OSS, "oss.json")
    assert (g.arch.sliding_window, g.arch.global_every, g.arch.windowed_layers) == (128, 2, 12)
    assert g.attention_sinks and g.moe.expert_bias and g.arch.q_width == 4096


def test_qwen_sparse_step_and_mlp_only_layers() -> None:
    cfg = dict(QWEN2_MOE, num_hidden_layers=6, decoder_sparse_step=2, mlp_only_layers=[3])
    m = moe_from_dict(cfg, "q.json")
    # sparse when (i + 1) % 2 == 0 and not listed: layers 1 and 5 (3 is forced dense)
    assert m.moe.moe_layers == (False, True, False, False, False, True)
    assert m.arch.ffn_hidden == 5632


def _tiny_layers(model_type: str, cfg: dict) -> list[bool]:
    """Which decoder layers transformers itself builds with routed experts (a tiny random model)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    conf = AutoConfig.for_model(model_type, **cfg)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(conf)
    layers = model.model.layers
    return [any("expert" in n for n, _ in layer.named_modules() if n) for layer in layers]


TINY = {
    "qwen2_moe": dict(hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                      shared_expert_intermediate_size=48, num_hidden_layers=6, num_attention_heads=4,
                      num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, decoder_sparse_step=2,
                      mlp_only_layers=[3], vocab_size=64),
    "qwen3_moe": dict(hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=5,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=4,
                      num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[0, 4], vocab_size=64),
    "deepseek_v3": dict(hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=5,
                        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, n_shared_experts=1,
                        num_experts_per_tok=2, first_k_dense_replace=2, n_group=2, topk_group=1,
                        q_lora_rank=16, kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
                        vocab_size=64),
    "mixtral": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                    num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, vocab_size=64),
    "glm4_moe": dict(hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=5,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, n_routed_experts=8,
                     n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=2, vocab_size=64),
    "minimax_m2": dict(hidden_size=32, intermediate_size=16, num_hidden_layers=3, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                       vocab_size=64),
}


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_moe_layers_match_transformers(model_type: str) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    ours = moe_from_dict(dict(TINY[model_type], model_type=model_type), f"{model_type}.json")
    assert list(ours.moe.moe_layers) == _tiny_layers(model_type, TINY[model_type])


def test_llama4_layers_match_transformers_config() -> None:
    pytest.importorskip("transformers")
    from transformers import Llama4TextConfig

    for step in (1, 2, 3):
        conf = Llama4TextConfig(num_hidden_layers=7, interleave_moe_layer_step=step)
        ours = moe_from_dict({"model_type": "llama4", "text_config": conf.to_dict()}, "l4.json")
        assert [i for i, s in enumerate(ours.moe.moe_layers) if s] == list(conf.moe_layers)


def _refused(cfg: dict, *needles: str) -> str:
    with pytest.raises(DnnplaceError) as err:
        moe_from_dict(cfg, "bad.json")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("bad.json: ")
    for n in needles:
        assert n in msg, msg
    return msg


def test_hostile_configs_one_line() -> None:
    _refused(dict(MIXTRAL, num_experts_per_tok=9), "'num_experts_per_tok'", "exceeds the 8 routed experts")
    _refused({k: v for k, v in MIXTRAL.items() if k != "num_local_experts"}, "missing", "'num_local_experts'")
    _refused(dict(MIXTRAL, num_local_experts=1), "'num_local_experts'", "at least 2")
    _refused(dict(MIXTRAL, num_local_experts=True), "'num_local_experts'", "positive integer")
    _refused({k: v for k, v in QWEN2_MOE.items() if k != "moe_intermediate_size"}, "'moe_intermediate_size'")
    _refused(dict(QWEN2_MOE, mlp_only_layers=[30]), "'mlp_only_layers'", "outside 0..23")
    _refused(dict(QWEN2_MOE, mlp_only_layers=list(range(24))), "'mlp_only_layers'", "no layer with experts")
    _refused(dict(QWEN2_MOE, num_attention_heads=16, num_key_value_heads=5), "'num_key_value_heads'")
    ds = json.loads((FIXTURES / "deepseek-v3.json").read_text())
    _refused(dict(ds, n_group=3), "'n_group'", "does not divide the 256 routed experts")
    _refused(dict(ds, topk_group=9), "'topk_group'", "exceeds n_group")
    _refused(dict(ds, first_k_dense_replace=61), "'first_k_dense_replace'")
    _refused(dict(ds, num_nextn_predict_layers=-1), "'num_nextn_predict_layers'")
    _refused({k: v for k, v in ds.items() if k != "kv_lora_rank"}, "'kv_lora_rank'")
    _refused(dict(ds, scoring_func="tanh"), "'scoring_func'")
    _refused({"model_type": "llama4"}, "'text_config'")
    l4 = json.loads((FIXTURES / "llama-4-maverick-17b-128e.json").read_text())
    l4["text_config"] = dict(l4["text_config"], num_experts_per_tok=200)
    _refused(l4, "'text_config.num_experts_per_tok'", "exceeds the 128")
    _refused(dict(MIXTRAL, model_type="jamba"), "unknown or missing MoE model_type", "mixtral")
    _refused({"model_type": None}, "missing")


def test_linear_attention_hybrids_refused_naming_the_field() -> None:
    _refused(dict(QWEN2_MOE, model_type="qwen3_moe", shared_expert_intermediate_size=None,
                  linear_num_value_heads=32), "'linear_num_value_heads'", "linear-attention")
    _refused(dict(QWEN2_MOE, full_attention_interval=4), "'full_attention_interval'")
    _refused(dict(GPT_OSS, layer_types=["linear_attention", "full_attention"] * 12), "'layer_types'",
             '"linear_attention"')


def test_load_moe_reads_a_folder_and_refuses_bad_files(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(MIXTRAL))
    assert load_moe(tmp_path).moe.num_experts == 8
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(DnnplaceError, match="not valid JSON"):
        load_moe(tmp_path / "bad.json")
    with pytest.raises(DnnplaceError, match="cannot read"):
        load_moe(tmp_path / "missing.json")


def test_glm4_moe_and_minimax_m2_read_in_full() -> None:
    """GLM-4.5-Air's config.json (zai-org) and MiniMax-M2.5's (as aiconfigurator-core ships it): experts, the
    dense first layers and shared expert, grouped-query heads, QK norm, partial RoPE."""
    glm = {"model_type": "glm4_moe", "architectures": ["Glm4MoeForCausalLM"], "hidden_size": 4096,
           "intermediate_size": 10944, "num_hidden_layers": 46, "num_attention_heads": 96, "num_key_value_heads": 8,
           "head_dim": 128, "moe_intermediate_size": 1408, "n_routed_experts": 128, "n_shared_experts": 1,
           "num_experts_per_tok": 8, "first_k_dense_replace": 1, "vocab_size": 151552,
           "max_position_embeddings": 131072, "partial_rotary_factor": 0.5, "attention_bias": True,
           "use_qk_norm": False, "num_nextn_predict_layers": 1}
    m = moe_from_dict(glm, "glm-4.5-air/config.json")
    a, s = m.arch, m.moe
    assert (a.family, a.heads, a.kv_heads, a.head_dim, a.ffn_hidden) == ("glm4_moe", 96, 8, 128, 10944)
    assert s.moe_layers == (False,) + (True,) * 45 and (s.shared_ffn, s.router, s.mtp_layers) == (1408, "sigmoid", 1)
    assert (a.rotary_fraction, a.qkv_bias, a.qk_norm) == (0.5, True, False) and m.mla is None
    mm = moe_from_dict({"model_type": "minimax_m2", "hidden_size": 3072, "intermediate_size": 1536,
                        "num_hidden_layers": 62, "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
                        "num_local_experts": 256, "num_experts_per_tok": 8, "vocab_size": 200064, "rotary_dim": 64,
                        "use_qk_norm": True, "scoring_func": "sigmoid", "use_routing_bias": True,
                        "shared_intermediate_size": 0}, "minimax-m2.5/config.json")
    assert (mm.moe.num_experts, mm.moe.expert_ffn, mm.moe.shared_ffn, mm.moe.router) == (256, 1536, 0, "sigmoid")
    assert mm.moe.moe_layers == (True,) * 62 and not mm.moe.expert_bias
    assert (mm.arch.rotary_fraction, mm.arch.qk_norm, mm.arch.kv_heads) == (0.5, True, 8)
