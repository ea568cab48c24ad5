"""A quantized checkpoint's 16-bit modules: read from each format's list, matched as the engines match them,
priced at 16 bits in bytes and in GEMM time, layer by layer.

Checked against a published measurement: vLLM #6746 logs "Loading model weights took 57.7520 GB" (GiB) per
H100 for Meta's Llama-3.1-405B-Instruct-FP8 at TP 8, whose ``modules_to_not_convert`` keeps every attention
projection and the first and last layers' MLPs in BF16."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dnnplace.arch.quant import quant_from_dict
from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.cost import Iteration, layer_times
from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.load import layer_profile, problem
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage

LLAMA_405B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16384, "intermediate_size": 53248,
    "num_attention_heads": 128, "num_key_value_heads": 8, "num_hidden_layers": 126, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "hidden_act": "silu",
}


def _meta_fp8_skip(layers: int) -> list[str]:
    """Meta's FP8 Llama 3.1 list: every layer's attention projections, layers 0 and last's MLP, the head."""
    out = []
    for i in range(layers):
        if i in (0, layers - 1):
            out += [f"model.layers.{i}.mlp.{p}" for p in ("down_proj", "gate_proj", "up_proj")]
        out += [f"model.layers.{i}.self_attn.{p}" for p in ("k_proj", "o_proj", "q_proj", "v_proj")]
    return out + ["lm_head"]


def _write(tmp_path: Path, doc: dict) -> Path:
    p = tmp_path / "config.json"
    p.write_text(json.dumps(doc))
    return p


def _q(cfg: dict):
    return quant_from_dict({"quantization_config": cfg}, "c")


def test_vllm_6746_405b_fp8_weights_per_h100_within_3_percent(tmp_path):
    doc = {**LLAMA_405B, "quantization_config": {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                                                 "modules_to_not_convert": _meta_fp8_skip(126)}}
    p = problem(_write(tmp_path, doc), gpus="8xh100", precision="fp8", isl=1024, osl=256)
    stage = Stage("h100", 0, tuple(range(8)), 126)
    ev = evaluate(p, ServingConfig((Replica((stage,)),), 256, 8192))
    weights = ev.replicas[0].memory[0].weights / 2**30
    assert abs(weights / 57.752 - 1) <= 0.03, weights
    # read as all-FP8 it would be a sixth too small, and its KV cache that much too large
    everything = problem(_write(tmp_path, {**doc, "quantization_config": {"quant_method": "fbgemm_fp8"}}),
                         gpus="8xh100", precision="fp8", isl=1024, osl=256)
    ev8 = evaluate(everything, ServingConfig((Replica((stage,)),), 256, 8192))
    assert ev8.replicas[0].memory[0].weights / 2**30 < 0.85 * 57.752
    assert ev.replicas[0].kv_tokens < ev8.replicas[0].kv_tokens


def test_the_16bit_layers_weigh_more_and_run_their_gemms_at_16_bits(tmp_path):
    doc = {**LLAMA_405B, "num_hidden_layers": 6,
           "quantization_config": {"quant_method": "fbgemm_fp8", "modules_to_not_convert": _meta_fp8_skip(6)}}
    m = layer_profile(_write(tmp_path, doc), "fp8")
    w = m.weight_bytes
    assert w[0] == pytest.approx(w[5]) and w[0] > w[1] and w[1] == pytest.approx(w[4])
    h, ffn, qw, kvw = 16384, 53248, 16384, 1024
    attn, mlp = 2 * h * qw + 2 * h * kvw, 3 * h * ffn
    assert w[1] == pytest.approx(attn * 2 + mlp * 1 + 4 * h)  # attention BF16, MLP FP8, two 16-bit norms
    assert w[0] == pytest.approx((attn + mlp) * 2 + 4 * h)
    assert np.allclose(m.attn_16bit, 1) and m.mlp_16bit.tolist() == [1, 0, 0, 0, 0, 1]
    plain = layer_profile(_write(tmp_path, {**doc, "quantization_config": {"quant_method": "fbgemm_fp8"}}), "fp8")
    it = Iteration(64.0, 1024.0, 0.0, 1024)
    mixed, fp8 = layer_times(m, "h100", 1, it, "vllm"), layer_times(plain, "h100", 1, it, "vllm")
    assert np.all(mixed.per_layer > fp8.per_layer)
    assert mixed.per_layer[0] > mixed.per_layer[1]  # its MLP at 16 bits too


@pytest.mark.parametrize(("cfg", "name", "kept"), [
    ({"quant_method": "fbgemm_fp8", "modules_to_not_convert": ["model.layers.0.self_attn.q_proj"]},
     "model.layers.0.self_attn.q_proj", True),
    ({"quant_method": "fbgemm_fp8", "modules_to_not_convert": ["model.layers.0.self_attn.q_proj"]},
     "model.layers.10.self_attn.q_proj", False),
    ({"quant_method": "fp8", "ignored_layers": ["model.layers.3.mlp"]}, "model.layers.3.mlp.down_proj", True),
    ({"quant_method": "fp8", "modules_to_not_convert": ["model.layers.3.mlp"]}, "model.layers.31.mlp.up_proj", False),
    ({"quant_method": "compressed-tensors", "ignore": ["lm_head", "re:.*self_attn.*"],
      "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int", "group_size": 128}}}},
     "model.layers.7.self_attn.o_proj", True),
    ({"quant_method": "compressed-tensors", "ignore": ["re:.*mlp.gate$"],
      "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}},
     "model.layers.7.mlp.gate_proj", False),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": ["model.layers.*.self_attn*"]},
     "model.layers.60.self_attn.kv_b_proj", True),
    ({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]},
     "model.layers.2.self_attn.q_proj", True),
    ({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]},
     "model.layers.2.mlp.experts.0.gate_proj", False),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": ["visual"]},
     "model.visual.blocks.0.attn.qkv", True),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "modules_to_not_convert": ["visual"]},
     "model.visual.blocks.0.attn.qkv", False),
])
def test_each_format_names_its_16bit_modules_as_its_engine_matches_them(cfg, name, kept):
    q = _q(cfg)
    assert q is not None and q.keeps_16bit(name) is kept


def test_a_bad_skip_list_is_one_line_naming_the_field():
    with pytest.raises(DnnplaceError, match="modules_to_not_convert"):
        _q({"quant_method": "fbgemm_fp8", "modules_to_not_convert": "lm_head"})
    with pytest.raises(DnnplaceError, match="ignore"):
        _q({"quant_method": "compressed-tensors", "ignore": [3],
            "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}})
    assert not _q({"quant_method": "compressed-tensors", "ignore": ["re:("],
                   "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}}).keeps_16bit("x")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.booleans(), min_size=4, max_size=4), st.integers(0, 3))
def test_a_layers_16bit_share_is_the_weight_share_of_its_matched_modules(flags, layer):
    mods = [(("self_attn.q_proj",), 4.0), (("self_attn.k_proj",), 1.0), (("self_attn.v_proj",), 1.0),
            (("self_attn.o_proj",), 4.0)]
    skip = [f"model.layers.{layer}.{names[0]}" for (names, _), f in zip(mods, flags) if f]
    q = _q({"quant_method": "fbgemm_fp8", "modules_to_not_convert": skip or ["lm_head"]})
    want = sum(w for (_, w), f in zip(mods, flags) if f) / 10.0
    assert q.share_16bit(layer, mods) == pytest.approx(want)
    assert q.share_16bit(layer + 1, mods) == 0.0
