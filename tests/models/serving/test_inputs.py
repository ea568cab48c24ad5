"""Fleet, workload, engine and precision inputs: what is read and what is refused (one line each)."""

from __future__ import annotations

import json

import pytest

from dnnplace.arch.quant import quant_from_dict
from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.catalogue import PRECISIONS
from dnnplace.models.serving.fleet import fleet_from_toml, parse_gpus
from dnnplace.models.serving.load import layer_profile, problem


def test_a_gpus_spec_reads_nodes_and_terms_in_order():
    f = parse_gpus("2xa100+2xt4;8xh100")
    assert len(f.nodes) == 2
    assert [g.name for g in f.nodes[0].gpus] == ["a100", "a100", "t4", "t4"]
    assert [g.index for g in f.nodes[0].gpus] == [0, 1, 2, 3]
    assert len(f.nodes[1].gpus) == 8 and f.spec() == "2xa100+2xt4;8xh100"


@pytest.mark.parametrize("text,culprit", [
    ("2xh10", "h10"), ("0xh100", "0xh100"), ("-2xh100", "-2xh100"), ("2xh100;", "node 2"), ("", "fleet"),
    ("2xh100++t4", "term ''"), ("abc xyz", "abc xyz"),
])
def test_bad_fleets_are_one_line_naming_the_culprit(text, culprit):
    with pytest.raises(DnnplaceError) as e:
        parse_gpus(text)
    msg = str(e.value)
    assert "\n" not in msg and culprit in msg


def test_an_unknown_gpu_names_the_known_ones_and_a_close_match():
    with pytest.raises(DnnplaceError, match=r"did you mean 'h100'.*known: .*h200"):
        parse_gpus("4xh1000")


def test_a_fleet_file_with_links_and_network(tmp_path):
    p = tmp_path / "f.toml"
    p.write_text('[[node]]\ngpus = "2xa100+2xt4"\nlink = "pcie"\n[[node]]\ngpus = "8xh100"\n'
                 '[network]\nbandwidth_gbps = 50\nlatency_us = 5\n')
    f = fleet_from_toml(p)
    assert f.nodes[0].link == "pcie" and f.nodes[1].link == "nvlink"
    assert f.network_bandwidth == 50e9 and f.network_latency_s == pytest.approx(5e-6)


@pytest.mark.parametrize("body,culprit", [
    ('[[node]]\ngpu = "2xh100"\n', "did you mean 'gpus'"),
    ('[[node]]\ngpus = "2xh100"\nlink = "infiniband"\n', "infiniband"),
    ('[[nodes]]\ngpus = "2xh100"\n', "nodes"),
    ('[[node]]\ngpus = "2xh100;2xa100"\n', "[[node]]"),
    ("not toml [", "not a TOML"),
])
def test_a_fleet_file_with_a_typo_is_one_line(tmp_path, body, culprit):
    p = tmp_path / "f.toml"
    p.write_text(body)
    with pytest.raises(DnnplaceError) as e:
        fleet_from_toml(p)
    assert culprit in str(e.value) and "\n" not in str(e.value)


def test_precisions_are_sourced_and_gguf_sizes_are_ggml_block_sizes():
    assert all(src for _, _, src in PRECISIONS.values())
    assert PRECISIONS["q8_0"][0] * 8 == 8.5 and PRECISIONS["q4_k_m"][0] * 8 == 4.5
    assert PRECISIONS["q6_k"][0] * 8 == 6.5625 and PRECISIONS["q5_k_m"][0] * 8 == 5.5


def test_weights_scale_with_precision_and_k_m_mixes_differ_by_layer(llama70b):
    bf = layer_profile(llama70b, "bf16")
    f8 = layer_profile(llama70b, "fp8")
    q4 = layer_profile(llama70b, "q4_k_m")
    assert bf.weight_bytes.sum() / 1e9 == pytest.approx(137, rel=0.02)  # 68.5 B params in the layers
    assert f8.weight_bytes.sum() == pytest.approx(bf.weight_bytes.sum() / 2, rel=0.01)
    assert q4.weight_bytes[0] > q4.weight_bytes[20]  # the first eighth is promoted to Q6_K
    assert f8.embed_bytes == bf.embed_bytes  # embeddings stay 16-bit in FP8 checkpoints


def test_quantization_configs_are_read():
    q = quant_from_dict({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}, "c")
    assert q is not None and q.precision == "int4" and q.bytes_per_weight == pytest.approx(0.5 + 20 / 8 / 128)
    q = quant_from_dict({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}, "c")
    assert q is not None and q.precision == "fp8"
    q = quant_from_dict({"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
        "g": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}}}}, "c")
    assert q is not None and q.precision == "fp4" and q.bytes_per_weight == pytest.approx(0.5625)
    q = quant_from_dict({"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}, "c")
    assert q is not None and q.precision == "fp4"
    assert quant_from_dict({}, "c") is None
    with pytest.raises(DnnplaceError, match="unknown quant_method 'bnb'"):
        quant_from_dict({"quantization_config": {"quant_method": "bnb"}}, "c")


def test_a_quantized_checkpoint_contradicting_the_precision_is_refused(tmp_path, llama70b):
    cfg = json.loads(llama70b.read_text())
    cfg["quantization_config"] = {"quant_method": "fp8"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert layer_profile(p, "fp8").precision == "fp8"
    with pytest.raises(DnnplaceError, match="quantized to fp8"):
        layer_profile(p, "bf16")


@pytest.mark.parametrize("kw,culprit", [
    ({"engine": "ollama"}, "unknown engine 'ollama'"), ({"precision": "int3"}, "unknown precision 'int3'"),
    ({"kv_dtype": "fp4"}, "KV-cache dtype"), ({"isl": 0}, "--isl"), ({"osl": -3}, "--osl"),
    ({"isl": 200_000}, "longer than the context"), ({"rate": 1.0, "concurrency": 4}, "not both"),
    ({"concurrency": 0}, "--concurrency"), ({"max_model_len": 10**6}, "longer than the model's context"),
    ({"precision": "q4_k_m"}, "llama.cpp only"), ({"rate": float("nan")}, "--rate"),
])
def test_bad_problem_arguments_are_one_line(llama70b, kw, culprit):
    with pytest.raises(DnnplaceError) as e:
        problem(llama70b, gpus="2xh100", **kw)
    assert culprit in str(e.value) and "\n" not in str(e.value)


LLAMA8B_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
                  "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
                  "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("engine,gpus,precision,said", [
    ("trtllm", "1xh100", "fp4", "from 10.0"),  # NVFP4: Blackwell only
    ("trtllm", "1xa100-80g", "fp8", "from 8.9"),  # FP8: Ada and Hopper, not Ampere
    ("trtllm", "2xt4", "bf16", "does not run on t4"),  # Ampere and newer
    ("sglang", "2xv100", "fp8", "from 8.0"),
    ("vllm", "2xv100", "fp8", "from 7.5"),
    ("hf", "1xa100-80g", "fp8", "dequantized to BF16"),
])
def test_weights_an_engine_has_no_kernel_for_on_a_gpu_are_refused(tmp_path, engine, gpus, precision, said):
    """A plan priced for kernels the engine lacks on that GPU would not start: one line with the GPU, its
    compute capability and where the engine's limit is read."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA8B_CONFIG))
    with pytest.raises(DnnplaceError) as e:
        problem(cfg, gpus=gpus, engine=engine, precision=precision)
    msg = str(e.value)
    assert "\n" not in msg and said in msg and "compute capability" in msg


@pytest.mark.parametrize("engine,gpus,precision", [
    ("vllm", "1xa100-80g", "fp8"), ("vllm", "1xt4", "fp8"), ("sglang", "1xa10g", "fp8"), ("vllm", "1xl4", "fp4"),
    ("trtllm", "1xrtx-pro-6000", "fp4"), ("trtllm", "1xl40s", "fp8"), ("hf", "1xl40s", "fp8"),
])
def test_weights_an_engine_runs_on_a_gpu_are_taken(tmp_path, engine, gpus, precision):
    """Weight-only Marlin FP8 / FP4 (vLLM from 7.5, SGLang's FP8 from 8.0), FP8 from Ada, FP4 on Blackwell."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA8B_CONFIG))
    assert problem(cfg, gpus=gpus, engine=engine, precision=precision).model.precision == precision


def test_a_mixed_fleet_refused_for_some_gpus_names_the_ones_that_could_serve(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA8B_CONFIG))
    with pytest.raises(DnnplaceError, match="plan the h100 GPUs alone by leaving v100 out"):
        problem(cfg, gpus="2xh100+2xv100", precision="fp8")


def test_every_nvidia_gpu_of_the_catalogue_has_its_compute_capability():
    """A GPU added without one would skip every engine's kernel limits (check_capability) in silence."""
    from dnnplace.core.catalogue import CATALOGUE
    from dnnplace.models.serving.catalogue import COMPUTE_CAPABILITY, NON_NVIDIA

    assert set(CATALOGUE) - set(NON_NVIDIA) == set(COMPUTE_CAPABILITY)


def test_gpt_oss_mxfp4_is_not_nvfp4():
    """GPT-OSS's checkpoint stores MXFP4 experts, which TensorRT-LLM runs on Hopper (BF16 activations, its
    TRITON MoE backend) where NVFP4 needs Blackwell: the H200 rows of aiconfigurator-core's silicon sample run
    it.  The rule for the checkpoint's own method wins over the precision's."""
    from pathlib import Path

    import aiconfigurator_core

    cfg = Path(aiconfigurator_core.__file__).parent / "model_configs" / "openai--gpt-oss-120b_config.json"
    p = problem(cfg, gpus="1xh200", engine="trtllm", precision="fp4")
    assert p.model.weight_format == "mxfp4"
    with pytest.raises(DnnplaceError, match=r"fp4 \(mxfp4\) weights on a100 .* from 9\.0"):
        problem(cfg, gpus="1xa100-80g", engine="trtllm", precision="fp4")


def test_block_scaled_fp8_checkpoints_price_their_fused_moe_with_block_fp8_kernels(tmp_path):
    """weight_block_size [128, 128] (DeepSeek-V3, Qwen3-*-FP8, MiniMax-M2): the fused MoE is priced from the
    tables' fp8_block rows, the dense GEMMs from the per-tensor rows; a per-tensor checkpoint and a dense
    model keep fp8 throughout."""
    from dnnplace.models.llm.published import CONFIGS

    moe = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    for base, name in ((moe, "moe"), (LLAMA8B_CONFIG, "dense")):
        for q, block in (({"weight_block_size": [128, 128], "activation_scheme": "dynamic"}, True),
                         ({"activation_scheme": "static"}, False)):
            cfg = tmp_path / f"{name}-{block}.json"
            cfg.write_text(json.dumps(dict(base, quantization_config={"quant_method": "fp8", **q})))
            m = problem(cfg, gpus="1xh100", precision="fp8").model
            assert (m.precision, m.weight_dtype, m.weight_format) == ("fp8", "fp8", "fp8")
            assert m.moe_dtype == ("fp8_block" if block and name == "moe" else "")
