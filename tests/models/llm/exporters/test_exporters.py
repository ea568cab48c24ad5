"""Exporters round-trip through the trainers' own parsers; hostile plans fail in one line.

Megatron: bash itself reads the exported array, then an argparse parser built
from the option table extracted from Megatron-LM (fixtures/megatron_options.json)
parses it, and megatron-core (when installed) checks the layer split with its
own layout parser and layer-count rule.  torchtitan: its ``ConfigManager``
loads the TOML (torchtitan 0.2.x, ``pip install '.[trainers]'``).  DeepSpeed: its
``DeepSpeedConfig`` loads ``ds_config``.  Each real-parser test is skipped when
that package is missing.
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import tomllib
import types
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.exporters import EXPORTERS, export
from dnnplace.models.llm.exporters.megatron import ARRAY
from dnnplace.models.llm.exporters.torchtitan import FLAVORS, flavor_of
from dnnplace.models.llm.plan_file import read_llm_plan, validate_plan
from dnnplace.models.llm.spec import LLMPlan

FIX = Path(__file__).parent / "fixtures"
BASE = json.loads((FIX / "llama3.1-70b_64xh100.plan.json").read_text())
OPTIONS = json.loads((FIX / "megatron_options.json").read_text())

#: TransformerArch field -> the plan file's model key, for the fields a version-1 file has always held.
_FILE_KEYS = {"name": "name", "family": "family", "num_layers": "num_layers", "hidden": "hidden_size",
              "ffn_hidden": "ffn_hidden_size", "heads": "num_attention_heads", "kv_heads": "num_key_value_heads",
              "vocab": "vocab_size", "tied_embeddings": "tied_embeddings", "mlp": "mlp", "position": "position",
              "norm": "norm"}
#: What the 70B example's file does not say about Llama 3.1 70B (its config.json does).
LLAMA31 = {"rope_theta": 500000.0, "max_position": 131072}


def plan(*, gpus: int | None = None, arch: dict | None = None, job: dict | None = None, **cfg: Any) -> LLMPlan:
    """A consistent plan derived from the 70B example (dp, microbatches and first/last filled in).

    ``arch`` overrides :class:`TransformerArch` fields: those a version-1 plan file holds go through the
    file and the plan codec, the rest (head_dim, rope_theta, biases, ...) are set on the read plan, so the
    exporters are tested on the full priced architecture whatever the codec writes.
    """
    arch = {**LLAMA31, **(arch or {})}
    p = copy.deepcopy(BASE)
    p["model"].update({_FILE_KEYS[k]: v for k, v in arch.items() if k in _FILE_KEYS})
    p["job"].update(job or {})
    c = p["config"]
    c.update(cfg)
    if "layers_per_stage" not in cfg:
        n, k = p["model"]["num_layers"], c["pp"] * c["vp"]
        c["layers_per_stage"] = [n // k + (i < n % k) for i in range(k)]
    lps, pp = c["layers_per_stage"], c["pp"]
    c["first_stage_layers"], c["last_stage_layers"] = sum(lps[0::pp]), sum(lps[pp - 1::pp])
    p["cluster"]["gpus"] = gpus or c["tp"] * pp * c["cp"] * c["dp"]
    c["num_microbatches"] = p["job"]["global_batch"] // (c["dp"] * c["mbs"])
    read = read_llm_plan(validate_plan(p))
    rest = {k: v for k, v in arch.items() if k not in _FILE_KEYS}
    if "head_dim" not in rest:
        rest["head_dim"] = read.problem.arch.hidden // read.problem.arch.heads
    full = dataclasses.replace(read.problem.arch, **rest)
    return dataclasses.replace(read, problem=dataclasses.replace(read.problem, arch=full))


LLAMA8B = {"name": "llama3.1-8b", "num_layers": 32, "hidden": 4096, "ffn_hidden": 14336, "heads": 32,
           "kv_heads": 8}
QWEN3_32B = {"name": "qwen3-32b", "family": "qwen3", "num_layers": 64, "hidden": 5120, "ffn_hidden": 25600,
             "heads": 64, "kv_heads": 8, "head_dim": 128, "vocab": 151936, "rope_theta": 1e6, "qk_norm": True,
             "max_position": 40960}
QWEN2_7B = {"name": "qwen2-7b", "family": "qwen2", "num_layers": 28, "hidden": 3584, "ffn_hidden": 18944,
            "heads": 28, "kv_heads": 4, "vocab": 152064, "rope_theta": 1e6, "qkv_bias": True, "max_position": 32768}
GPT2_XL = {"name": "gpt2-xl", "family": "gpt2", "num_layers": 48, "hidden": 1600, "ffn_hidden": 6400, "heads": 25,
           "kv_heads": 25, "vocab": 50257, "tied_embeddings": True, "mlp": "gelu", "position": "learned",
           "norm": "layer", "linear_bias": True, "dropout": True, "max_position": 1024}
MISTRAL_7B = {"name": "mistral-7b-v0.1", "family": "mistral", "num_layers": 32, "hidden": 4096, "ffn_hidden": 14336,
              "heads": 32, "kv_heads": 8, "vocab": 32000, "rope_theta": 10000.0, "sliding_window": 4096,
              "max_position": 32768}
ALTERNATING = {**MISTRAL_7B, "name": "alternating-window", "global_every": 2}
NEMOTRON = {"name": "nemotron-ish", "family": "nemotron", "num_layers": 32, "hidden": 6144, "ffn_hidden": 24576,
            "heads": 48, "kv_heads": 8, "vocab": 256000, "mlp": "relu2", "norm": "layer", "max_position": 4096}

PLANS = {
    "70b-tp4-pp4-vp5-cp2": plan(),
    "8b-tp1-pp1-cp2": plan(arch=LLAMA8B, tp=1, pp=1, vp=1, cp=2, dp=8, sequence_parallel=False,
                           distributed_optimizer=True, recompute="selective", job={"precision": "fp8"}),
    "8b-pp1-cp2-mbs2-full": plan(arch=LLAMA8B, tp=1, pp=1, vp=1, cp=2, dp=8, mbs=2, sequence_parallel=False,
                                 recompute="full"),
    "70b-uneven-first-last": plan(tp=8, pp=4, vp=1, cp=1, dp=2, layers_per_stage=[18, 22, 22, 18]),
    "70b-full-recompute-layout": plan(tp=8, pp=4, vp=2, cp=1, dp=2, recompute="full",
                                      layers_per_stage=[9, 11, 10, 10, 10, 10, 11, 9]),
    "relu2-learned-layernorm": plan(arch={"mlp": "relu2", "position": "learned", "norm": "layer",
                                          "tied_embeddings": True, "kv_heads": 64},
                                    tp=2, pp=2, vp=1, cp=1, dp=4, layers_per_stage=[39, 41]),
    "qwen3-32b-head-dim-qk-norm": plan(arch=QWEN3_32B, tp=8, pp=1, vp=1, cp=1, dp=8),
    "qwen2-7b-qkv-bias": plan(arch=QWEN2_7B, tp=4, pp=2, vp=1, cp=1, dp=8, job={"seq_len": 4096}),
    "gpt2-xl-learned-biases-dropout": plan(arch=GPT2_XL, tp=1, pp=4, vp=1, cp=1, dp=16, recompute="full",
                                           job={"seq_len": 1024}),
    "mistral-7b-window": plan(arch=MISTRAL_7B, tp=2, pp=1, vp=1, cp=1, dp=32),
    "alternating-window": plan(arch=ALTERNATING, tp=2, pp=2, vp=2, cp=1, dp=16),
    "nemotron-relu2": plan(arch=NEMOTRON, tp=8, pp=2, vp=1, cp=1, dp=4, job={"seq_len": 4096}),
}
#: The plans torchtitan 0.2.2 has a model for, and those DeepSpeed's engine can run as priced.
TORCHTITAN = ["70b-tp4-pp4-vp5-cp2", "8b-pp1-cp2-mbs2-full", "70b-uneven-first-last", "70b-full-recompute-layout",
              "qwen3-32b-head-dim-qk-norm"]
DEEPSPEED = [k for k, p in PLANS.items() if p.config.vp == 1 and p.config.cp == 1 and p.config.recompute != "selective"]


def tt(p: LLMPlan) -> LLMPlan:
    """``p`` with the data parallelism torchtitan expresses: FSDP2 (ZeRO-3) for a distributed optimizer, DDP
    (ZeRO-0) without one (torchtitan has no ZeRO-1/2 and refuses them)."""
    return dataclasses.replace(p, config=dataclasses.replace(p.config, zero=3 if p.config.distributed_optimizer else 0))


# ---------------------------------------------------------------- megatron


def bash_args(text: str, tmp_path: Path) -> list[str]:
    """The array as bash itself reads it (source the snippet, print each element NUL-terminated)."""
    f = tmp_path / "args.sh"
    f.write_text(text)
    out = subprocess.run(["bash", "-c", f'source "$1" && printf "%s\\0" "${{{ARRAY}[@]}}"', "_", str(f)],
                         capture_output=True, check=True, timeout=30)
    return out.stdout.decode().split("\0")[:-1]


def _tuple(text: str) -> tuple[int, ...]:
    """Megatron's ``tuple_type``: comma-separated integers, optionally in parentheses."""
    return tuple(int(x) for x in text.strip("()").split(","))


def megatron_parser() -> argparse.ArgumentParser:
    """argparse built from the option table read from Megatron-LM (names, types, choices, store_false dests)."""
    parser = argparse.ArgumentParser(exit_on_error=False, allow_abbrev=False)
    types: dict[str, Any] = {"int": int, "str": str, "float": float, "tuple": _tuple, "freq": int}
    for name, spec in OPTIONS["options"].items():
        if spec["type"] == "flag":
            parser.add_argument(name, action="store_true")
        elif spec["type"] == "flag_false":
            parser.add_argument(name, action="store_false", dest=spec["dest"])
        else:
            parser.add_argument(name, type=types[spec["type"]], choices=spec.get("choices"),
                                default=spec.get("default"))
    return parser


def megatron_namespace(p: Any, tmp_path: Path) -> argparse.Namespace:
    args = bash_args(export(p, "megatron"), tmp_path)
    ns, unknown = megatron_parser().parse_known_args(args)
    assert unknown == [], unknown
    for group in OPTIONS["at_most_one_of"]:
        assert sum(getattr(ns, o[2:].replace("-", "_")) is not None for o in group) <= 1
    # validate_args: the position table must cover the run; with every bias on, the QKV bias is on too.
    assert ns.max_position_embeddings is not None and ns.max_position_embeddings >= ns.seq_length
    if ns.add_bias_linear:
        ns.add_qkv_bias = True
    return ns


def megatron_built_layers(ns: argparse.Namespace) -> list[int] | None:
    """Decoder layers per virtual stage as megatron-core builds them, or None without megatron-core."""
    if importlib.util.find_spec("megatron") is None:
        return None
    import torch
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_config import TransformerConfig

    pp = ns.pipeline_model_parallel_size
    if ns.pipeline_model_parallel_layout is not None:
        layout = PipelineParallelLayerLayout.from_str(ns.pipeline_model_parallel_layout, pp)
        layout.validate_layer_layout(num_layers=ns.num_layers, mtp_num_layers=0)
        vp = layout.virtual_pipeline_model_parallel_size
        from megatron.core import parallel_state  # the layout reads the VP size from the global state

        parallel_state.set_virtual_pipeline_model_parallel_world_size(vp if vp > 1 else None)
        try:
            return [layout.get_num_layers_to_build(vp_stage=i // pp, pp_rank=i % pp) for i in range(pp * vp)]
        finally:
            parallel_state.set_virtual_pipeline_model_parallel_world_size(None)
    vp = ns.num_virtual_stages_per_pipeline_rank
    cfg = TransformerConfig(num_layers=ns.num_layers, hidden_size=ns.hidden_size,
                            num_attention_heads=ns.num_attention_heads, pipeline_model_parallel_size=pp,
                            virtual_pipeline_model_parallel_size=vp, pipeline_dtype=torch.bfloat16,
                            num_layers_in_first_pipeline_stage=ns.decoder_first_pipeline_num_layers,
                            num_layers_in_last_pipeline_stage=ns.decoder_last_pipeline_num_layers)
    vp = vp or 1
    return [get_num_layers_to_build(cfg, vp_stage=i // pp if vp > 1 else None, pp_rank=i % pp)
            for i in range(pp * vp)]


@pytest.mark.parametrize("key", PLANS)
def test_megatron_round_trip(key: str, tmp_path: Path) -> None:
    p = PLANS[key]
    a, c, j = p.problem.arch, p.config, p.problem.job
    ns = megatron_namespace(p, tmp_path)
    assert (ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.context_parallel_size) == (
        c.tp, c.pp, c.cp)
    assert (ns.micro_batch_size, ns.global_batch_size, ns.seq_length) == (c.mbs, j.global_batch, j.seq_len)
    assert (ns.num_layers, ns.hidden_size, ns.ffn_hidden_size, ns.num_attention_heads) == (
        a.num_layers, a.hidden, a.ffn_hidden, a.heads)
    assert ns.sequence_parallel == (c.sequence_parallel and c.tp > 1)
    assert ns.use_distributed_optimizer == c.distributed_optimizer
    assert ns.group_query_attention == (a.kv_heads < a.heads)
    assert ns.untie_embeddings_and_output_weights == (not a.tied_embeddings)
    assert ns.swiglu == (a.mlp == "swiglu") and ns.squared_relu == (a.mlp == "relu2") and not ns.quick_geglu
    assert ns.fp8_format == ("hybrid" if j.precision == "fp8" else None) and ns.bf16
    if c.recompute == "full":
        assert (ns.recompute_granularity, ns.recompute_method, ns.recompute_num_layers) == ("full", "uniform", 1)
    assert ns.recompute_activations == (c.recompute == "selective")
    built = megatron_built_layers(ns)
    if built is not None:
        assert built == list(c.layers_per_stage)


@pytest.mark.parametrize("key", PLANS)
def test_megatron_builds_the_priced_architecture(key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every architecture field the cost model read is spelled out, none left to Megatron's defaults."""
    a = PLANS[key].problem.arch
    assert_megatron_arch(megatron_namespace(PLANS[key], tmp_path), a, monkeypatch)


def assert_megatron_arch(ns: argparse.Namespace, a: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parsed arguments say every architecture field of ``a`` (and megatron-core windows as priced)."""
    assert ns.kv_channels == a.head_dim  # Megatron's default is hidden / heads
    assert ns.num_query_groups == (a.kv_heads if a.kv_heads < a.heads else None)
    assert ns.position_embedding_type == {"rope": "rope", "learned": "learned_absolute"}[a.position]
    assert ns.normalization == {"rms": "RMSNorm", "layer": "LayerNorm"}[a.norm]
    if a.position == "rope":
        assert ns.rotary_base == a.rope_theta  # Megatron's default is 10000
        assert ns.rotary_percent == a.rotary_fraction  # Megatron's default rotates every channel
    assert ns.qk_layernorm == a.qk_norm
    assert (ns.add_bias_linear, ns.add_qkv_bias) == (a.linear_bias, a.linear_bias or a.qkv_bias)
    assert (ns.attention_dropout, ns.hidden_dropout) == ((0.1, 0.1) if a.dropout else (0.0, 0.0))
    expected_window = (a.sliding_window - 1, 0) if a.sliding_window else None
    assert ns.window_size == expected_window
    assert ns.window_attn_skip_freq == (a.global_every or None)
    if importlib.util.find_spec("megatron") is None:
        return
    import torch
    from megatron.core.transformer import utils as megatron_utils
    from megatron.core.transformer.utils import get_sliding_window_causal_mask, is_layer_window_attention

    if not torch.cuda.is_available():  # the mask is built on "cuda" by name; build the same one on the CPU
        monkeypatch.setattr(megatron_utils, "torch", types.SimpleNamespace(
            ones=lambda *shape, device=None, **kw: torch.ones(*shape, **kw), triu=torch.triu, tril=torch.tril,
            bool=torch.bool))

    windowed = [is_layer_window_attention(ns.window_size, ns.window_attn_skip_freq, k + 1)
                for k in range(a.num_layers)]
    assert sum(windowed) == a.windowed_layers
    if a.global_every:
        assert [not w for w in windowed] == [(k + 1) % a.global_every == 0 for k in range(a.num_layers)]
    if ns.window_size is not None:  # megatron-core's own mask: each query sees at most sliding_window keys
        s = a.sliding_window + 5
        masked = get_sliding_window_causal_mask(s, s, ns.window_size)
        assert [int((~masked[i]).sum()) for i in range(s)] == [min(i + 1, a.sliding_window) for i in range(s)]


@settings(max_examples=int(os.environ.get("DNNPLACE_FUZZ_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_megatron_spells_out_any_architecture(data: st.DataObject, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Property: for any architecture, the export says every field, or refuses for exactly the reasons
    Megatron's command line has (gated GELU, fractional RoPE base, a learned table shorter than the run)."""
    heads = data.draw(st.sampled_from([1, 2, 4, 8]), label="heads")
    layers = data.draw(st.integers(1, 6), label="layers")
    window = data.draw(st.sampled_from([0, 0, 1, 7, 64]), label="window")
    fields = {
        "name": "random", "num_layers": layers, "heads": heads,
        "kv_heads": data.draw(st.sampled_from([k for k in (1, 2, 4, 8) if heads % k == 0]), label="kv"),
        "hidden": data.draw(st.sampled_from([32, 64, 96]), label="hidden"),
        "head_dim": data.draw(st.sampled_from([8, 16, 24, 40]), label="head_dim"),
        "ffn_hidden": data.draw(st.integers(8, 300), label="ffn"),
        "vocab": data.draw(st.integers(16, 4096), label="vocab"),
        "mlp": data.draw(st.sampled_from(["swiglu", "gelu", "relu2", "geglu"]), label="mlp"),
        "position": data.draw(st.sampled_from(["rope", "learned"]), label="position"),
        "norm": data.draw(st.sampled_from(["rms", "layer"]), label="norm"),
        "tied_embeddings": data.draw(st.booleans(), label="tied"),
        "rope_theta": data.draw(st.sampled_from([10000.0, 500000.0, 1e6, 75000.5]), label="theta"),
        "max_position": data.draw(st.sampled_from([16, 128, 4096]), label="max_position"),
        "qkv_bias": data.draw(st.booleans(), label="qkv_bias"),
        "linear_bias": data.draw(st.booleans(), label="linear_bias"),
        "qk_norm": data.draw(st.booleans(), label="qk_norm"),
        "dropout": data.draw(st.booleans(), label="dropout"),
        "sliding_window": window,
        "global_every": data.draw(st.integers(0, 3), label="global_every") if window else 0,
        "rotary_fraction": data.draw(st.sampled_from([1.0, 1.0, 0.25, 0.75]), label="rotary_fraction"),
        "parallel_residual": data.draw(st.sampled_from([False, False, True]), label="parallel_residual"),
    }
    seq = data.draw(st.sampled_from([16, 64, 256]), label="seq_len")
    p = plan(arch=fields, gpus=8, tp=1, pp=1, vp=1, cp=1, dp=8, job={"seq_len": seq})
    a = p.problem.arch
    # the planner's rules (learned positions) are checked before what Megatron's command line can say
    why = ("learned position" if a.position == "learned" and seq > a.max_position else
           "gated GELU" if a.mlp == "geglu" else
           "in parallel" if a.parallel_residual else
           "rotary-base" if a.position == "rope" and a.rope_theta != int(a.rope_theta) else None)
    if why is not None:
        with pytest.raises(DnnplaceError, match=why) as info:
            export(p, "megatron")
        assert "\n" not in str(info.value)
        return
    ns = megatron_namespace(p, tmp_path)
    assert (ns.num_layers, ns.hidden_size, ns.ffn_hidden_size, ns.num_attention_heads) == (
        a.num_layers, a.hidden, a.ffn_hidden, a.heads)
    assert ns.swiglu == (a.mlp == "swiglu") and ns.squared_relu == (a.mlp == "relu2")
    assert ns.max_position_embeddings == (a.max_position if a.position == "learned" else max(a.max_position, seq))
    assert_megatron_arch(ns, a, monkeypatch)
    doc = json.loads(export(p, "deepspeed"))
    assert doc["architecture"] == json.loads(json.dumps(dataclasses.asdict(a)))
    try:
        flavor = flavor_of(a)
    except DnnplaceError:
        with pytest.raises(DnnplaceError, match="has no such model"):
            export(p, "torchtitan")
    else:
        assert flavor.builds(a)


def test_megatron_core_config_from_the_arguments(tmp_path: Path) -> None:
    """megatron-core's TransformerConfig, filled the way Megatron-LM fills it from these arguments, is the arch."""
    if importlib.util.find_spec("megatron") is None:
        pytest.skip("megatron-core is not installed (pip install '.[trainers]')")
    import torch
    import torch.nn.functional as F
    from megatron.core.activations import squared_relu
    from megatron.core.transformer.transformer_config import TransformerConfig

    names = {f.name for f in dataclasses.fields(TransformerConfig)}
    for spec in OPTIONS["options"].values():  # the table's TransformerConfig fields exist in megatron-core
        if spec["from"].startswith("TransformerConfig."):
            assert spec["from"].split()[0].split(".")[1] in names, spec
    for key in ("qwen3-32b-head-dim-qk-norm", "qwen2-7b-qkv-bias", "gpt2-xl-learned-biases-dropout",
                "alternating-window", "nemotron-relu2"):
        a = PLANS[key].problem.arch
        ns = megatron_namespace(PLANS[key], tmp_path)
        kw = {k: v for k, v in vars(ns).items() if k in names and v is not None and k not in (
            "pipeline_model_parallel_layout", "recompute_granularity", "recompute_method", "recompute_num_layers",
            "sequence_parallel", "fp8", "tensor_model_parallel_size", "pipeline_model_parallel_size",
            "context_parallel_size")}
        if ns.swiglu:  # core_transformer_config_from_args
            kw.update(activation_func=F.silu, gated_linear_unit=True)
        if ns.squared_relu:
            kw.update(activation_func=squared_relu)
        kw["num_query_groups"] = ns.num_query_groups if ns.group_query_attention else None
        cfg = TransformerConfig(**kw, pipeline_dtype=torch.bfloat16)
        assert (cfg.kv_channels, cfg.num_query_groups or cfg.num_attention_heads) == (a.head_dim, a.kv_heads)
        assert cfg.gated_linear_unit == a.gated and cfg.normalization == ns.normalization
        assert cfg.activation_func is {"swiglu": F.silu, "relu2": squared_relu, "gelu": F.gelu}[a.mlp]
        assert (cfg.add_bias_linear, cfg.add_qkv_bias, cfg.qk_layernorm) == (
            a.linear_bias, a.linear_bias or a.qkv_bias, a.qk_norm)
        assert (cfg.hidden_dropout > 0, cfg.attention_dropout > 0) == (a.dropout, a.dropout)
        assert cfg.window_size == ((a.sliding_window - 1, 0) if a.sliding_window else None)


TINY = {"num_layers": 2, "hidden": 64, "ffn_hidden": 96, "heads": 4, "kv_heads": 2, "vocab": 128,
        "max_position": 64}
TINY_ARCHS = {
    "qwen3-like": {**TINY, "family": "qwen3", "head_dim": 24, "qk_norm": True, "rope_theta": 1e6},
    "qwen2-like": {**TINY, "family": "qwen2", "qkv_bias": True, "tied_embeddings": True},
    "gpt2-like": {**TINY, "family": "gpt2", "kv_heads": 4, "mlp": "gelu", "position": "learned", "norm": "layer",
                  "linear_bias": True, "tied_embeddings": True, "dropout": True},
    "nemotron-like": {**TINY, "family": "nemotron", "mlp": "relu2", "norm": "layer", "rope_theta": 10000.0},
    "windowed": {**TINY, "family": "mistral", "sliding_window": 16, "global_every": 2},
}


def priced_parameters(a: Any) -> dict[str, tuple[int, ...]]:
    """The parameters of the priced model, one decoder layer and the rest, under megatron-core's local names."""
    bias, qkv_bias, ln = a.linear_bias, a.linear_bias or a.qkv_bias, a.norm == "layer"
    qkv = a.heads * a.head_dim + 2 * a.kv_heads * a.head_dim
    layer = {"input_layernorm.weight": (a.hidden,), "self_attention.linear_qkv.weight": (qkv, a.hidden),
             "self_attention.linear_proj.weight": (a.hidden, a.heads * a.head_dim),
             "pre_mlp_layernorm.weight": (a.hidden,),
             "mlp.linear_fc1.weight": ((2 if a.gated else 1) * a.ffn_hidden, a.hidden),
             "mlp.linear_fc2.weight": (a.hidden, a.ffn_hidden)}
    if ln:
        layer.update({"input_layernorm.bias": (a.hidden,), "pre_mlp_layernorm.bias": (a.hidden,)})
    if qkv_bias:
        layer["self_attention.linear_qkv.bias"] = (qkv,)
    if bias:
        layer.update({"self_attention.linear_proj.bias": (a.hidden,), "mlp.linear_fc1.bias": (
            (2 if a.gated else 1) * a.ffn_hidden,), "mlp.linear_fc2.bias": (a.hidden,)})
    if a.qk_norm:
        for n in ("q_layernorm", "k_layernorm"):
            layer[f"self_attention.{n}.weight"] = (a.head_dim,)
            if ln:
                layer[f"self_attention.{n}.bias"] = (a.head_dim,)
    out = {f"decoder.layers.{k}.{n}": v for k in range(a.num_layers) for n, v in layer.items()}
    out["embedding.word_embeddings.weight"] = (a.vocab, a.hidden)
    if a.position == "learned":
        out["embedding.position_embeddings.weight"] = (a.max_position, a.hidden)
    out["decoder.final_layernorm.weight"] = (a.hidden,)
    if ln:
        out["decoder.final_layernorm.bias"] = (a.hidden,)
    if not a.tied_embeddings:
        out["output_layer.weight"] = (a.vocab, a.hidden)
    return out


def test_megatron_core_builds_the_priced_parameters(tmp_path: Path) -> None:
    """megatron-core's GPTModel, built from the exported arguments as Megatron-LM builds it, holds exactly the
    priced model's parameters (head width, GQA, biases, qk-norm, gating, tying, position table) and RoPE base."""
    if importlib.util.find_spec("megatron") is None:
        pytest.skip("megatron-core is not installed (pip install '.[trainers]')")
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from megatron.core import parallel_state
    from megatron.core.activations import squared_relu
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    names = {f.name for f in dataclasses.fields(TransformerConfig)}
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        parallel_state.initialize_model_parallel(1, 1)
        for key, fields in TINY_ARCHS.items():
            p = plan(arch={"name": key, **fields}, gpus=8, tp=1, pp=1, vp=1, cp=1, dp=8, job={"seq_len": 64})
            a = p.problem.arch
            ns = megatron_namespace(p, tmp_path)
            kw = {k: v for k, v in vars(ns).items() if k in names and v is not None and k in (
                "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "kv_channels",
                "add_bias_linear", "add_qkv_bias", "qk_layernorm", "normalization", "hidden_dropout",
                "attention_dropout", "window_size", "window_attn_skip_freq")}
            if ns.swiglu:
                kw.update(activation_func=F.silu, gated_linear_unit=True)
            if ns.squared_relu:
                kw.update(activation_func=squared_relu)
            cfg = TransformerConfig(**kw, num_query_groups=ns.num_query_groups if ns.group_query_attention else None,
                                    use_cpu_initialization=True, pipeline_dtype=torch.float32)
            spec = get_gpt_layer_local_spec(qk_layernorm=ns.qk_layernorm, normalization=ns.normalization)
            model = GPTModel(cfg, spec, vocab_size=a.vocab, max_sequence_length=ns.max_position_embeddings,
                             position_embedding_type=ns.position_embedding_type,
                             rotary_base=ns.rotary_base if ns.rotary_base is not None else 10000,
                             share_embeddings_and_output_weights=not ns.untie_embeddings_and_output_weights)
            built = {n: tuple(t.shape) for n, t in model.named_parameters()}
            assert built == priced_parameters(a), key
            if a.position == "rope":
                d = a.head_dim
                want = 1.0 / (a.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
                assert torch.allclose(model.rotary_pos_emb.inv_freq.float().cpu(), want), key
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def test_megatron_refuses_what_its_command_line_cannot_build(tmp_path: Path) -> None:
    """Gemma's gated GELU is not --swiglu; a fractional RoPE base does not fit --rotary-base."""
    gemma = plan(arch={"name": "gemma-7b", "family": "gemma", "mlp": "geglu", "tied_embeddings": True},
                 tp=8, pp=4, vp=1, cp=1, dp=2)
    with pytest.raises(DnnplaceError, match="gated GELU") as info:
        export(gemma, "megatron")
    assert "\n" not in str(info.value) and "gemma-7b" in str(info.value)
    with pytest.raises(DnnplaceError, match="rotary-base"):
        export(plan(arch={"rope_theta": 10000.5}, tp=8, pp=4, vp=1, cp=1, dp=2), "megatron")
    src = tmp_path / "gemma.plan.json"
    src.write_text(json.dumps(dataclasses.replace(gemma, problem=dataclasses.replace(
        gemma.problem, arch=dataclasses.replace(gemma.problem.arch, rope_theta=10000.0))).to_dict()))
    res = run_cli("export", src, "--to", "megatron", "-o", tmp_path / "gemma.sh")
    assert res.returncode == 2 and "gated GELU" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "gemma.sh").exists()


def test_megatron_max_position_is_the_models(tmp_path: Path) -> None:
    """--max-position-embeddings is the model's table, never the run's length; learned tables cap the run."""
    ns = megatron_namespace(PLANS["gpt2-xl-learned-biases-dropout"], tmp_path)
    assert (ns.max_position_embeddings, ns.seq_length) == (1024, 1024)
    ns = megatron_namespace(PLANS["70b-tp4-pp4-vp5-cp2"], tmp_path)
    assert (ns.max_position_embeddings, ns.seq_length) == (131072, 8192)
    # RoPE sizes no table in Megatron's model, but validate_args wants max_position_embeddings >= seq_length.
    ns = megatron_namespace(plan(arch={"max_position": 4096}, tp=8, pp=4, vp=1, cp=1, dp=2), tmp_path)
    assert (ns.max_position_embeddings, ns.seq_length) == (8192, 8192)
    too_long = plan(arch={**GPT2_XL, "max_position": 1024}, tp=1, pp=4, vp=1, cp=1, dp=16, job={"seq_len": 2048})
    with pytest.raises(DnnplaceError, match="1024 learned positions|learned position table holds 1024") as info:
        export(too_long, "megatron")
    assert "2048" in str(info.value) and "\n" not in str(info.value)


def test_megatron_option_choice(tmp_path: Path) -> None:
    """Even split: VP count only; uneven first/last: the two counts; anything else: the layout."""
    ns = megatron_namespace(PLANS["70b-tp4-pp4-vp5-cp2"], tmp_path)
    assert ns.num_virtual_stages_per_pipeline_rank == 5 and ns.pipeline_model_parallel_layout is None
    ns = megatron_namespace(PLANS["70b-uneven-first-last"], tmp_path)
    assert (ns.decoder_first_pipeline_num_layers, ns.decoder_last_pipeline_num_layers) == (18, 18)
    ns = megatron_namespace(PLANS["70b-full-recompute-layout"], tmp_path)
    assert ns.pipeline_model_parallel_layout.startswith("E") and ns.pipeline_model_parallel_layout.endswith("L")
    assert ns.num_virtual_stages_per_pipeline_rank is None


# ---------------------------------------------------------------- torchtitan


def torchtitan_config_manager() -> Any:
    """torchtitan's ConfigManager, imported without the package __init__ (it pulls triton MoE kernels)."""
    spec = importlib.util.find_spec("torchtitan")
    if spec is None:
        pytest.skip("torchtitan is not installed (pip install '.[trainers]')")
    if "torchtitan" not in sys.modules:
        sys.modules["torchtitan"] = importlib.util.module_from_spec(spec)  # the package, its __init__ not run
    from torchtitan.config import ConfigManager

    return ConfigManager


@pytest.mark.parametrize("key", TORCHTITAN)
def test_torchtitan_round_trip(key: str, tmp_path: Path) -> None:
    p = tt(PLANS[key])
    c, j = p.config, p.problem.job
    text = export(p, "torchtitan")
    f = tmp_path / "job.toml"
    f.write_text(text)
    assert tomllib.loads(text)["job"]["description"] == p.problem.arch.name
    cfg = torchtitan_config_manager()().parse_args(["--job.config_file", str(f)])
    flavor = flavor_of(p.problem.arch)
    assert (cfg.model.name, cfg.model.flavor) == (flavor.name, flavor.flavor)
    par = cfg.parallelism
    assert (par.tensor_parallel_degree, par.pipeline_parallel_degree, par.context_parallel_degree) == (
        c.tp, c.pp, c.cp)
    assert par.data_parallel_shard_degree * par.data_parallel_replicate_degree == c.dp
    assert par.data_parallel_shard_degree == (c.dp if c.zero == 3 else 1)
    assert cfg.training.mixed_precision_reduce == "float32"
    # torchtitan runs local_batch_size per forward and accumulates global / (local * dp) of them (train.py); a
    # pipeline splits the local batch into micro-batches of pipeline_parallel_microbatch_size: mbs either way.
    local = cfg.training.local_batch_size
    micro = local if c.pp == 1 else par.pipeline_parallel_microbatch_size
    assert (cfg.training.global_batch_size, micro, cfg.training.seq_len) == (j.global_batch, c.mbs, j.seq_len)
    assert j.global_batch // (local * c.dp) * (local // micro) == j.global_batch // (c.dp * c.mbs)
    assert local % micro == 0 and j.global_batch % (local * c.dp) == 0
    assert cfg.activation_checkpoint.mode == c.recompute
    if c.pp > 1:
        from torch.distributed.pipelining.schedules import get_schedule_class

        get_schedule_class(par.pipeline_parallel_schedule)  # torch knows the schedule name
        parts = par.module_fqns_per_model_part
        assert len(parts) == c.pp * c.vp
        assert [sum(x.startswith("layers.") for x in part) for part in parts] == list(c.layers_per_stage)
        flat = [x for part in parts for x in part]
        assert flat == ["tok_embeddings"] + [f"layers.{i}" for i in range(p.problem.arch.num_layers)] + [
            "norm", "output"]


def test_torchtitan_names_the_priced_model() -> None:
    """The model name and flavor are written (torchtitan's default is llama3 debugmodel), or refused."""
    for key, want in (("70b-tp4-pp4-vp5-cp2", ("llama3", "70B")), ("8b-pp1-cp2-mbs2-full", ("llama3", "8B")),
                      ("qwen3-32b-head-dim-qk-norm", ("qwen3", "32B"))):
        model = tomllib.loads(export(tt(PLANS[key]), "torchtitan"))["model"]
        assert (model["name"], model["flavor"]) == want
    for key in ("qwen2-7b-qkv-bias", "mistral-7b-window", "gpt2-xl-learned-biases-dropout", "nemotron-relu2"):
        with pytest.raises(DnnplaceError, match="torchtitan 0.2.2 has no such model") as info:
            export(PLANS[key], "torchtitan")
        assert "\n" not in str(info.value)
    # One field off is another model: the same sizes with Llama 2's RoPE base, or Qwen3 without its head_dim.
    with pytest.raises(DnnplaceError, match=r"nearest: llama3 70B, which differs in rope_theta 10000.0 \(not 500000"):
        export(plan(arch={"rope_theta": 10000.0}, tp=8, pp=4, vp=1, cp=1, dp=2), "torchtitan")
    with pytest.raises(DnnplaceError, match=r"nearest: qwen3 32B, which differs in head_dim 80 \(not 128\)\)$"):
        export(plan(arch={**QWEN3_32B, "head_dim": 80}, tp=8, pp=1, vp=1, cp=1, dp=8), "torchtitan")
    with pytest.raises(DnnplaceError, match=r"nearest: qwen3 32B, which differs in tied_embeddings True"):
        export(plan(arch={**QWEN3_32B, "tied_embeddings": True}, tp=8, pp=1, vp=1, cp=1, dp=8), "torchtitan")
    with pytest.raises(DnnplaceError, match="qwen3 train spec has no pipelining"):
        export(plan(arch=QWEN3_32B, tp=8, pp=2, vp=1, cp=1, dp=4), "torchtitan")


def torchtitan_registry(model: str) -> dict[str, dict[str, Any]]:
    """torchtitan's ``<model>_args`` registry as flavor -> argument values, read from the installed sources.

    The train specs' modules import torchdata, tensorboard and triton, which the tests do not install, so
    the registry literal is read with :mod:`ast`, over the defaults of its args dataclass.
    """
    spec = importlib.util.find_spec("torchtitan")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torchtitan is not installed (pip install '.[trainers]')")
    root = Path(list(spec.submodule_search_locations)[0]) / "models" / model

    def literal(node: ast.expr) -> Any:
        try:
            return ast.literal_eval(node)
        except ValueError:
            return None  # e.g. moe_args=MoEArgs(...): not a dense flavor's business

    defaults = {}
    for node in ast.walk(ast.parse((root / "model" / "args.py").read_text())):
        if isinstance(node, ast.ClassDef) and node.name.endswith("ModelArgs"):
            defaults = {st.target.id: literal(st.value) for st in node.body if isinstance(st, ast.AnnAssign)
                        and isinstance(st.target, ast.Name) and st.value is not None}
    for node in ast.walk(ast.parse((root / "__init__.py").read_text())):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == f"{model}_args"
                                                for t in node.targets):
            assert isinstance(node.value, ast.Dict)
            return {literal(k): {**defaults, **{kw.arg: literal(kw.value) for kw in v.keywords}}
                    for k, v in zip(node.value.keys, node.value.values) if isinstance(v, ast.Call) and k}
    raise AssertionError(f"no {model}_args in torchtitan")


def test_torchtitan_flavor_table_is_torchtitans() -> None:
    """Each entry of the hand-copied table is what torchtitan 0.2.2's own registry says it builds."""
    reg = {name: torchtitan_registry(name) for name in ("llama3", "qwen3")}
    for f in FLAVORS:
        a = reg[f.name][f.flavor]
        kv = a["n_kv_heads"] or a["n_heads"]
        if f.name == "llama3":  # llama3/model/model.py FeedForward: 2/3 of 4*dim, times the multiplier, rounded up
            ffn = int(2 * 4 * a["dim"] / 3)
            if a["ffn_dim_multiplier"] is not None:
                ffn = int(a["ffn_dim_multiplier"] * ffn)
            ffn = a["multiple_of"] * -(-ffn // a["multiple_of"])
            head_dim, qk_norm, tied = a["dim"] // a["n_heads"], False, False
        else:
            ffn, head_dim, qk_norm, tied = a["hidden_dim"], a["head_dim"], a["qk_norm"], a["enable_weight_tying"]
            assert not a.get("moe_enabled"), f
        assert (a["n_layers"], a["dim"], ffn, a["n_heads"], kv, head_dim, a["vocab_size"], tied,
                float(a["rope_theta"]), qk_norm) == (f.num_layers, f.hidden, f.ffn_hidden, f.heads, f.kv_heads,
                                                      f.head_dim, f.vocab, f.tied_embeddings, f.rope_theta,
                                                      f.qk_norm), f
    # Every dense flavor is in the table (the _flex / _varlen variants change the attention kernel only).
    dense = {(n, k) for n in reg for k, a in reg[n].items()
             if not a.get("moe_enabled") and k.split("_")[-1] not in ("flex", "varlen", "attn")}
    assert dense == {(f.name, f.flavor) for f in FLAVORS}
    root = Path(list(importlib.util.find_spec("torchtitan").submodule_search_locations)[0]) / "models"
    for f in FLAVORS:  # qwen3's train spec has pipelining_fn=None in 0.2.2
        assert ("pipelining_fn=None" not in (root / f.name / "__init__.py").read_text()) == f.pipelining, f


# ---------------------------------------------------------------- deepspeed


@pytest.mark.parametrize("key", DEEPSPEED)
def test_deepspeed_round_trip(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    p = PLANS[key]
    c, j = p.config, p.problem.job
    doc = json.loads(export(p, "deepspeed"))
    ds = doc["ds_config"]
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * c.dp \
        == j.global_batch
    pm = doc["pipeline_module"]
    parts = pm["parts"]
    assert len(parts) == c.pp + 1 and parts[0] == 0 and parts[-1] == p.problem.arch.num_layers + 3
    assert all(a < b for a, b in zip(parts, parts[1:]))
    assert pm["decoder_layers_per_stage"] == list(c.layers_per_stage)
    assert doc["architecture"] == json.loads(json.dumps(dataclasses.asdict(p.problem.arch)))
    assert bool(doc["notes"]) == (c.tp > 1 or j.precision == "fp8")
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed (pip install '.[trainers]')")
    import deepspeed.runtime.config as ds_runtime_config
    import torch
    from deepspeed.runtime.config import DeepSpeedConfig

    # Without an initialised process group DeepSpeed falls back to world size 1 before it asks the mpu.
    monkeypatch.setattr(ds_runtime_config.dist, "get_rank", lambda *a, **k: 0)

    class MPU:  # DeepSpeed reads the data-parallel size from the model-parallel unit it is given
        @staticmethod
        def get_data_parallel_world_size() -> int:
            return int(c.dp)

    cfg = DeepSpeedConfig(copy.deepcopy(ds), mpu=MPU())
    assert cfg.train_batch_size == j.global_batch
    assert cfg.zero_optimization_stage == c.zero == (1 if c.distributed_optimizer else 0)
    assert cfg.communication_data_type == torch.float32
    assert cfg.bfloat16_config.enabled
    assert cfg.tensor_parallel_config.autotp_size == (c.tp if c.tp > 1 else 0)
    assert cfg.activation_checkpointing_config.partition_activations == (c.recompute == "full" and c.tp > 1)
    assert cfg.pipeline["stages"] == c.pp


@pytest.mark.parametrize("key,culprit", [("70b-tp4-pp4-vp5-cp2", "vp=5"), ("8b-tp1-pp1-cp2", "recompute=selective"),
                                         ("8b-tp1-pp1-cp2", "cp=2"), ("alternating-window", "vp=2")])
def test_deepspeed_refuses_what_its_engine_cannot_run(key: str, culprit: str) -> None:
    """Interleaving, selective recompute and ring CP are refused in one line, not dropped into a note."""
    with pytest.raises(DnnplaceError, match=culprit) as info:
        export(PLANS[key], "deepspeed")
    assert "\n" not in str(info.value) and "--fix" in str(info.value)


# ---------------------------------------------------------------- the planner's rules, before any export


def _breaking(rule: str) -> LLMPlan:
    """A plan that passes the plan-file schema but breaks one of the planner's rules."""
    p = PLANS["70b-uneven-first-last"]
    c = p.config
    if rule == "kv":  # 8 KV heads, tp 16
        cfg = dataclasses.replace(c, tp=16, dp=1)
    elif rule == "interleave":  # vp 2 with 6 micro-batches on pp 4
        cfg = dataclasses.replace(c, vp=2, layers_per_stage=(10,) * 8, dp=2)
        p = dataclasses.replace(p, problem=dataclasses.replace(
            p.problem, job=dataclasses.replace(p.problem.job, global_batch=12)))
    else:  # sequence parallel with seq_len 8190 on tp 8
        cfg = c
        p = dataclasses.replace(p, problem=dataclasses.replace(
            p.problem, job=dataclasses.replace(p.problem.job, seq_len=8190)))
    m = p.problem.job.global_batch // (cfg.dp * cfg.mbs)
    return dataclasses.replace(p, config=cfg, estimate=dataclasses.replace(p.estimate, num_microbatches=m))


RULES = {"kv": "kv heads", "interleave": "micro-batches", "sp": "sequence parallel"}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("target", ["megatron", "torchtitan", "deepspeed"])
def test_exporters_refuse_what_the_rules_refuse(rule: str, target: str, tmp_path: Path) -> None:
    """A plan the planner's own rules refuse is refused by every exporter: one line, exit 2, no file."""
    p = _breaking(rule)
    with pytest.raises(DnnplaceError, match=RULES[rule]) as info:
        export(p, target)
    assert "\n" not in str(info.value)
    src, out = tmp_path / "plan.json", tmp_path / "out.txt"
    src.write_text(json.dumps(p.to_dict()))
    res = run_cli("export", src, "--to", target, "-o", out)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr and not out.exists()


# ---------------------------------------------------------------- hostile plans and the helper


HOSTILE_NAMES = ['x"; rm -rf / #', "x$(touch /tmp/pwned)`id`", 'a"]\n[evil]\nx = "1', "' \\ \" ]] \u202e"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_names_are_refused_or_escaped(name: str, tmp_path: Path) -> None:
    base = PLANS["70b-uneven-first-last"]
    p = dataclasses.replace(base, problem=dataclasses.replace(
        base.problem, arch=dataclasses.replace(base.problem.arch, name=name)))
    if "\n" in name:  # the plan codec writes names printable: the raw line break never reaches an export
        for target in ("megatron", "torchtitan", "deepspeed"):
            assert name not in export(tt(p) if target == "torchtitan" else p, target)
        return
    args = bash_args(export(p, "megatron"), tmp_path)  # bash sees only the plan's options
    assert megatron_parser().parse_known_args(args)[1] == []
    written = p.to_dict()["model"]["name"]  # the name as the plan codec writes it (printable)
    assert tomllib.loads(export(tt(p), "torchtitan"))["job"]["description"] == written
    assert set(tomllib.loads(export(tt(p), "torchtitan"))) == {"job", "model", "training", "parallelism",
                                                            "activation_checkpoint"}
    assert json.loads(export(p, "deepspeed"))["model"] == written


def _bad(path: str, value: Any) -> dict:
    p = copy.deepcopy(BASE)
    *head, last = path.split(".")
    obj = p
    for k in head:
        obj = obj[k]
    if value is KeyError:
        del obj[last]
    else:
        obj[last] = value
    return p


@pytest.mark.parametrize("path,value,field", [
    ("config.tp", "4", "config.tp"),
    ("config.tp", 4.0, "config.tp"),
    ("config.pp", True, "config.pp"),
    ("config.mbs", -1, "config.mbs"),
    ("config.dp", 3, r"tp\*pp\*cp\*dp"),
    ("cluster.gpus", 63, r"tp\*pp\*cp\*dp"),
    ("config.num_microbatches", 63, "num_microbatches"),
    ("config.layers_per_stage", [4] * 19 + [5], "layers_per_stage"),
    ("config.layers_per_stage", [4] * 19, "layers_per_stage"),
    ("config.layers_per_stage", [4] * 19 + ["4"], r"layers_per_stage\[19\]"),
    ("config.first_stage_layers", 19, "first_stage_layers"),
    ("config.recompute", "everything", "config.recompute"),
    ("job.precision", "fp16; echo", "job.precision"),
    ("model.mlp", "swiglu --evil", "model.mlp"),
    ("model.name", "", "model.name"),
    ("model.name", 7, "model.name"),
    ("model.num_key_value_heads", 7, "num_key_value_heads"),
    ("model.hidden_size", 10**30, "model.hidden_size"),
    ("model.extra", 1, "model.extra"),
    ("job.seq_len", KeyError, "job.seq_len"),
    ("format", "other", "plan.format"),
    ("config", [], "config"),
])
def test_bad_plans_fail_in_one_line(path: str, value: Any, field: str) -> None:
    with pytest.raises(DnnplaceError, match=field) as info:
        validate_plan(_bad(path, value))
    assert "\n" not in str(info.value)


def test_export_command_writes_atomically_and_refuses_its_input(tmp_path: Path) -> None:
    p = PLANS["70b-uneven-first-last"]
    src = tmp_path / "plan.json"
    src.write_text(json.dumps(p.to_dict()))
    # A plan file read back without the fields the codec may not write yet (rope_theta, max_position) is
    # another model than p; torchtitan, which names its model, must then refuse rather than export it.
    same_model = read_llm_plan(p.to_dict()).problem.arch == p.problem.arch
    for name, exp in EXPORTERS.items():
        if exp.takes != "llm-plan":
            continue
        out = tmp_path / f"out{exp.suffix}"
        res = run_cli("export", src, "--to", name, "-o", out)
        if name == "torchtitan":  # another model (above), or ZeRO-1, which torchtitan has no setting for
            why = "zero=1" if same_model else "has no such model"
            assert res.returncode == 2 and why in res.stderr and not out.exists()
            continue
        assert res.returncode == 0, res.stderr
        text = out.read_text()
        assert text == run_cli("export", src, "--to", name).stdout and text.endswith("\n")
    res = run_cli("export", src, "--to", "megatron", "-o", src)
    assert res.returncode == 2 and "input" in res.stderr
    res = run_cli("export", src, "--to", "nemo", "-o", tmp_path / "x")
    assert res.returncode == 2
    res = run_cli("export", src, "--to", "megatron", "-w", src, "-o", tmp_path / "x")
    assert res.returncode == 2 and "applies to split targets only" in res.stderr
    res = run_cli("export", src, "--to", "stages", "-o", tmp_path / "x")
    assert res.returncode == 2 and "-w" in res.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    res = run_cli("export", bad, "--to", "megatron")
    assert res.returncode == 2 and "not valid JSON" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------- ZeRO stages and the gradient dtype


def _sharded(key: str, zero: int, grad: str = "fp32") -> LLMPlan:
    p = PLANS[key]
    return dataclasses.replace(p, config=dataclasses.replace(p.config, zero=zero, distributed_optimizer=zero >= 1,
                                                             grad_dtype=grad))


@pytest.mark.parametrize("zero,grad", [(0, "fp32"), (1, "bf16"), (2, "fp32"), (3, "bf16")])
def test_megatron_writes_the_zero_stage_and_gradient_dtype(zero: int, grad: str, tmp_path: Path) -> None:
    """ZeRO-1 is the distributed optimizer, 2/3 Megatron-FSDP with their sharding strategy and the priced gradient
    dtype spelled out; below 2, bf16 gradients are --grad-reduce-in-bf16 (options read from Megatron-LM)."""
    ns = megatron_namespace(_sharded("70b-tp4-pp4-vp5-cp2", zero, grad), tmp_path)
    assert ns.use_distributed_optimizer == (zero >= 1)
    assert ns.use_megatron_fsdp == (zero >= 2)
    if zero >= 2:
        assert ns.data_parallel_sharding_strategy == {2: "optim_grads", 3: "optim_grads_params"}[zero]
        assert ns.megatron_fsdp_main_grads_dtype == ns.megatron_fsdp_grad_comm_dtype == grad
        assert ns.ckpt_format == "fsdp_dtensor" and not ns.gradient_accumulation_fusion
        assert not ns.grad_reduce_in_bf16
    else:
        assert ns.grad_reduce_in_bf16 == (grad == "bf16") and ns.ckpt_format == "torch_dist"


def test_torchtitan_writes_fsdp_and_refuses_the_stages_it_lacks(tmp_path: Path) -> None:
    """ZeRO-3 is data_parallel_shard_degree, ZeRO-0 the replicate degree (read back by torchtitan's own
    ConfigManager); ZeRO-1/2 and bf16 gradient reduction have no torchtitan 0.2.2 setting: one line each."""
    for zero, shard in ((3, 8), (0, 1)):
        f = tmp_path / f"z{zero}.toml"
        f.write_text(export(_sharded("8b-pp1-cp2-mbs2-full", zero), "torchtitan"))
        par = torchtitan_config_manager()().parse_args(["--job.config_file", str(f)]).parallelism
        assert (par.data_parallel_shard_degree, par.data_parallel_replicate_degree) == (shard, 8 // shard)
    for zero, grad, culprit in ((1, "fp32", "zero=1"), (2, "fp32", "zero=2"), (3, "bf16", "grad_dtype=bf16")):
        with pytest.raises(DnnplaceError, match=culprit) as info:
            export(_sharded("8b-pp1-cp2-mbs2-full", zero, grad), "torchtitan")
        assert "\n" not in str(info.value) and "--fix" in str(info.value)


@pytest.mark.parametrize("zero,grad", [(2, "bf16"), (3, "fp32"), (0, "bf16")])
def test_deepspeed_writes_the_zero_stage(zero: int, grad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """zero_optimization.stage and the gradient dtype, read back by DeepSpeed's own DeepSpeedConfig."""
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed (pip install '.[trainers]')")
    import deepspeed.runtime.config as ds_runtime_config
    import torch
    from deepspeed.runtime.config import DeepSpeedConfig

    p = _sharded("mistral-7b-window", zero, grad)  # pp 1: every stage runs under DeepSpeed's engine
    ds = json.loads(export(p, "deepspeed"))["ds_config"]
    monkeypatch.setattr(ds_runtime_config.dist, "get_rank", lambda *a, **k: 0)

    class MPU:
        @staticmethod
        def get_data_parallel_world_size() -> int:
            return int(p.config.dp)

    cfg = DeepSpeedConfig(copy.deepcopy(ds), mpu=MPU())
    assert cfg.zero_optimization_stage == zero
    assert cfg.communication_data_type == {"fp32": torch.float32, "bf16": torch.bfloat16}[grad]
    assert cfg.grad_accum_dtype == grad


def test_deepspeed_refuses_a_pipelined_zero_2_or_3() -> None:
    with pytest.raises(DnnplaceError, match="zero=3 with pp=4") as info:
        export(_sharded("70b-uneven-first-last", 3), "deepspeed")
    assert "\n" not in str(info.value) and "--fix zero=1" in str(info.value)


def test_megatron_offloading_round_trip_and_megatron_core_rules(tmp_path: Path) -> None:
    """offload_layers N is --cpu-offloading-num-layers N, and Megatron-Core's TransformerConfig (installed) takes
    the configuration the planner's rules accept and refuses N = num_layers, pp > 1 and recomputation as they do."""
    p = plan(arch=LLAMA8B, tp=8, pp=1, vp=1, cp=1, dp=8, offload_layers=12)
    assert p.config.offload_layers == 12
    ns = megatron_namespace(p, tmp_path)
    assert ns.cpu_offloading_num_layers == 12
    if importlib.util.find_spec("megatron") is None:
        return
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    base = {"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "cpu_offloading": True}
    TransformerConfig(**base, cpu_offloading_num_layers=12)
    pipelined = {"pipeline_model_parallel_size": 2, "pipeline_dtype": torch.bfloat16}
    for extra in ({"cpu_offloading_num_layers": 32}, {"cpu_offloading_num_layers": 4, **pipelined},
                  {"cpu_offloading_num_layers": 4, "recompute_granularity": "selective"}):
        with pytest.raises(ValueError):
            TransformerConfig(**base, **extra)
