"""Sliding-window attention priced with min(window, causal span) keys (issue 33, item 9)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from llm_helpers import problem, uniform

from dnnplace.arch.hf_config import arch_from_dict
from dnnplace.models.llm.evaluation import evaluate, model_flops_per_step
from dnnplace.models.llm.evaluation.flops import attention_fwd_flops
from dnnplace.models.llm.spec import TransformerArch

MISTRAL = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "sliding_window": 4096}


def test_mistral_v01_window_hand_computed() -> None:
    a = arch_from_dict(MISTRAL, "mistral.json")
    assert (a.sliding_window, a.windowed_layers) == (4096, 32)
    # seq 8192: query i sees min(i, 4096) keys, on average 4096 - 4096^2 / (2 * 8192) = 3072 (full causal: 4096)
    got = float(attention_fwd_flops(a, np.array(8192.0), 8192, np.array(1.0)))
    assert got == pytest.approx(2 * 2 * 8192 * 3072 * 4096)
    full = replace(a, sliding_window=0)
    assert float(attention_fwd_flops(full, np.array(8192.0), 8192, np.array(1.0))) == pytest.approx(
        2 * 2 * 8192 * 4096 * 4096)
    # model FLOPs: the attention term 12 s q per token and layer counts min(window, s) = 4096 keys, not 8192
    diff = model_flops_per_step(full, 8192, 8) - model_flops_per_step(a, 8192, 8)
    assert diff == pytest.approx(8 * 8192 * 32 * 12 * (8192 - 4096) * 4096)
    # a window at least the sequence changes nothing
    assert model_flops_per_step(a, 4096, 8) == model_flops_per_step(full, 4096, 8)
    assert float(attention_fwd_flops(a, np.array(4096.0), 4096, np.array(2.0))) == pytest.approx(
        float(attention_fwd_flops(full, np.array(4096.0), 4096, np.array(2.0))))


def test_gemma2_alternating_layers_average_their_keys() -> None:
    a = TransformerArch("g2", "gemma2", 4, 2304, 9216, 8, 4, 256, 256000, mlp="geglu", sliding_window=4096,
                        global_every=2)
    assert a.windowed_layers == 2
    got = float(attention_fwd_flops(a, np.array(8192.0), 8192, np.array(1.0)))
    assert got == pytest.approx(4 * 8192 * (2 * 4096 + 2 * 3072) / 4 * a.q_width)


def test_windowed_attention_makes_the_step_faster() -> None:
    a = arch_from_dict(MISTRAL, "mistral.json")
    pr = problem(a, 8, 32, seq=16384)
    cfg = uniform(a, 8, 8, 1, 1)
    windowed, full = evaluate(pr, cfg), evaluate(problem(replace(a, sliding_window=0), 8, 32, seq=16384), cfg)
    assert windowed.step_time_s < 0.95 * full.step_time_s
    assert windowed.model_flops_per_step < full.model_flops_per_step


GEMMA3_1B = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 1152,
             "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1,
             "head_dim": 256, "vocab_size": 262144, "max_position_embeddings": 32768, "sliding_window": 512,
             "sliding_window_pattern": 6}


def test_gemma3_text_five_windowed_layers_to_one_global() -> None:
    """transformers Gemma3TextConfig: layer i is global when (i + 1) % sliding_window_pattern == 0 (layer_types
    says the same where a config lists it); QK norm; GeGLU; tied embeddings."""
    a = arch_from_dict(GEMMA3_1B, "gemma-3-1b/config.json")
    assert (a.sliding_window, a.global_every, a.windowed_layers) == (512, 6, 26 - 4)
    assert a.qk_norm and a.mlp == "geglu" and a.tied_embeddings and a.head_dim == 256
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(26)]
    listed = arch_from_dict({**GEMMA3_1B, "layer_types": types, "sliding_window_pattern": None}, "g.json")
    assert (listed.global_every, listed.windowed_layers) == (6, 22)


def test_phi3_and_vision_language_wrappers() -> None:
    phi4 = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 5120,
            "intermediate_size": 17920, "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 10,
            "vocab_size": 100352, "max_position_embeddings": 16384, "sliding_window": None}
    a = arch_from_dict(phi4, "phi-4/config.json")
    assert (a.mlp, a.kv_heads, a.sliding_window, a.tied_embeddings) == ("swiglu", 10, 0, False)
    from dnnplace.errors import DnnplaceError

    vl = {"model_type": "qwen3_vl", "text_config": {**phi4, "model_type": "qwen3_vl_text"}, "vision_config": {}}
    with pytest.raises(DnnplaceError, match="vision-language model.*give its text_config"):
        arch_from_dict(vl, "qwen3-vl/config.json")


def test_the_advice_for_a_vision_language_model_leads_to_a_plan() -> None:
    """A VL config is refused with "give its text_config" only where that text model is read: Qwen3-VL's
    language models (qwen3_vl_text, qwen3_vl_moe_text: Qwen3's and Qwen3-MoE's decoders with multimodal RoPE)
    are; Gemma 4's is not, and the refusal says so instead of sending the user to a second refusal."""
    from dnnplace.arch.moe_config import moe_from_dict
    from dnnplace.errors import DnnplaceError

    text = {"model_type": "qwen3_vl_text", "hidden_size": 5120, "intermediate_size": 25600, "num_hidden_layers": 64,
            "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
            "max_position_embeddings": 262144, "rope_theta": 5000000,
            "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"}}
    a = arch_from_dict(text, "qwen3-vl-32b/text_config.json")
    plain = arch_from_dict({**text, "model_type": "qwen3", "rope_scaling": None}, "qwen3-32b/config.json")
    assert a.qk_norm and (a.hidden, a.num_layers, a.kv_heads, a.head_dim) == (5120, 64, 8, 128)
    assert replace(a, name="", source="") == replace(plain, name="", source="")
    moe_text = {**text, "model_type": "qwen3_vl_moe_text", "hidden_size": 2048, "intermediate_size": 6144,
                "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
                "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
                "mlp_only_layers": [], "norm_topk_prob": True}
    moe = moe_from_dict(moe_text, "qwen3-vl-30b-a3b/text_config.json")
    assert (moe.moe.num_experts, moe.moe.top_k, moe.moe.expert_ffn, moe.arch.family) == (128, 8, 768, "qwen3_moe")
    with pytest.raises(DnnplaceError, match="vision-language model.*give its text_config"):
        arch_from_dict({"model_type": "qwen3_vl_moe", "text_config": moe_text, "vision_config": {}}, "vl.json")
    gemma4 = {"model_type": "gemma4", "text_config": {"model_type": "gemma4_text"}, "vision_config": {}}
    with pytest.raises(DnnplaceError, match=r"its language model \(gemma4_text\) is not a family planned"):
        arch_from_dict(gemma4, "gemma-4/config.json")


def test_partial_rotary_and_parallel_residual_are_read_for_the_exports() -> None:
    """transformers GPTNeoXConfig: rotary_pct 0.25 and use_parallel_residual true by default; Phi's
    partial_rotary_factor.  Nothing priced changes; Megatron's export says --rotary-percent or refuses."""
    neox = {"model_type": "gpt_neox", "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 4,
            "num_attention_heads": 8, "vocab_size": 50304}
    a = arch_from_dict(neox, "pythia/config.json")
    assert (a.rotary_fraction, a.parallel_residual) == (0.25, True)
    b = arch_from_dict({**neox, "rotary_pct": 1.0, "use_parallel_residual": False}, "neox.json")
    assert (b.rotary_fraction, b.parallel_residual) == (1.0, False)
    phi = {"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
           "num_attention_heads": 24, "num_key_value_heads": 8, "vocab_size": 200064, "partial_rotary_factor": 0.75}
    assert arch_from_dict(phi, "phi-4-mini.json").rotary_fraction == 0.75
    from dnnplace.errors import DnnplaceError

    with pytest.raises(DnnplaceError, match="partial_rotary_factor"):
        arch_from_dict({**phi, "partial_rotary_factor": 1.5}, "bad.json")
