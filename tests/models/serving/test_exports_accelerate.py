"""The Hugging Face export read back by accelerate itself, on a meta-device model.

Why accelerate and not our own reading: ``device_map`` keys are module names that transformers
and accelerate resolve by prefix; a key that names no module is only a warning there, and a
parameter no key covers fails late, at dispatch, on the user's GPUs. Building the real module tree
on the meta device (no memory, no GPU) and running accelerate's ``check_device_map`` plus an
exactly-once count of every parameter and buffer catches both here.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from accelerate import init_empty_weights
from accelerate.utils import check_device_map, get_max_memory
from transformers import AutoConfig, AutoModelForCausalLM

from dnnplace.models.serving.exporters import export, hf_device_map
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.search import search
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, Stage

_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
    "num_hidden_layers": 10, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1024,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}


def _model_dir(tmp_path: Path, tied: bool) -> Path:
    d = tmp_path / ("tied" if tied else "untied")
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**_CONFIG, "tie_word_embeddings": tied}))
    return d


def _meta_model(d: Path) -> torch.nn.Module:
    with init_empty_weights(include_buffers=True):
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(d))


def _owners(name: str, device_map: dict[str, int]) -> list[str]:
    return [k for k in device_map if k == "" or name == k or name.startswith(k + ".")]


def _assert_exactly_once(model: torch.nn.Module, device_map: dict[str, int]) -> dict[str, int]:
    """Every parameter and buffer (tied copies and non-persistent buffers included) under exactly one key;
    returns each tensor's device."""
    names = [n for n, _ in model.named_parameters(remove_duplicate=False)]
    names += [n for n, _ in model.named_buffers(remove_duplicate=False)]
    assert names
    placed = {}
    for n in names:
        owners = _owners(n, device_map)
        assert len(owners) == 1, f"{n} is under {owners}"
        placed[n] = device_map[owners[0]]
    return placed


@pytest.mark.parametrize("tied", [False, True])
def test_hf_export_of_a_mixed_fleet_plan_loads_on_a_meta_model(tmp_path, tied):
    d = _model_dir(tmp_path, tied)
    p = problem(d, gpus="1xa100+1xl40s+1xt4", engine="hf", isl=256, osl=64)
    plan = search(p, tp=1, pp=3, time_limit=20)
    assert plan.config.replicas, plan.status
    r = plan.config.replicas[0]
    assert r.pp == 3 and {s.gpu for s in r.stages} == {"a100", "l40s", "t4"}
    doc = json.loads(export(p, plan, "hf"))[0]
    dm = doc["device_map"]
    model = _meta_model(d)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a key naming no module is only a warning in accelerate
        check_device_map(model, dm)
    placed = _assert_exactly_once(model, dm)
    # every decoder layer on the GPU its stage says, in stage order
    layer = 0
    for s in r.stages:
        for _ in range(s.layers):
            assert {v for k, v in placed.items() if k.startswith(f"model.layers.{layer}.")} == {s.gpus[0]}
            layer += 1
    assert layer == 10
    first, last = r.stages[0].gpus[0], r.stages[-1].gpus[0]
    assert placed["model.embed_tokens.weight"] == first
    assert placed["model.norm.weight"] == last
    assert placed["lm_head.weight"] == (first if tied else last)
    # max_memory: one budget per GPU of the replica, in sizes accelerate parses. JSON keys are strings, which
    # accelerate refuses ("Device 0 is not recognized"): a reader turns them back into GPU indices. (transformers
    # ignores max_memory when device_map is a dict: it is the budget the plan assumed, for the record.)
    mm = get_max_memory({int(k): v for k, v in doc["max_memory"].items()})
    assert sorted(mm) == sorted(g for s in r.stages for g in s.gpus)
    assert all(v > 2**30 for v in mm.values())


def test_hf_export_of_an_uneven_pinned_split(tmp_path):
    """A split pinned by hand (2 + 7 + 1 on physical GPUs 2, 0, 1) with accelerate's check."""
    d = _model_dir(tmp_path, False)
    p = problem(d, gpus="1xa100+1xl40s+1xt4", engine="hf", isl=256, osl=64)
    r = Replica((Stage("t4", 0, (2,), 2), Stage("a100", 0, (0,), 7), Stage("l40s", 0, (1,), 1)))
    dm = hf_device_map(p, r)["device_map"]
    model = _meta_model(d)
    check_device_map(model, dm)
    placed = _assert_exactly_once(model, dm)
    per_gpu = {g: len({k.split(".")[2] for k, v in placed.items() if k.startswith("model.layers.") and v == g})
               for g in (0, 1, 2)}
    assert per_gpu == {2: 2, 0: 7, 1: 1}
    assert json.loads(export(p, ServingPlan(ServingConfig((r,), 8, 2048)), "hf"))[0]["device_map"] == dm


#: Small configs of each dense family the reader takes (transformers builds each on the meta device).
_FAMILIES = {
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "head_dim": 32},
    "gemma2": {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "head_dim": 32,
               "sliding_window": 512, "hidden_activation": "gelu_pytorch_tanh"},
    "gemma3_text": {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "head_dim": 32,
                    "sliding_window": 512, "hidden_activation": "gelu_pytorch_tanh"},
    "phi3": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "partial_rotary_factor": 0.75,
             "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
}


@pytest.mark.parametrize("family", sorted(_FAMILIES))
def test_hf_export_of_each_dense_family_loads_on_its_meta_model(tmp_path, family):
    """Every module holding a parameter or buffer (Gemma's rotary tables, Phi's fused projections) is under
    exactly one device_map key of a three-stage split."""
    d = tmp_path / family
    d.mkdir()
    base = {k: v for k, v in _CONFIG.items() if k not in ("architectures", "model_type", "hidden_act")}
    (d / "config.json").write_text(json.dumps({**base, **_FAMILIES[family], "num_hidden_layers": 6}))
    p = problem(d, gpus="1xa100+1xl40s+1xt4", engine="hf", isl=256, osl=64)
    r = Replica((Stage("a100", 0, (0,), 3), Stage("l40s", 0, (1,), 2), Stage("t4", 0, (2,), 1)))
    dm = hf_device_map(p, r)["device_map"]
    model = _meta_model(d)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_device_map(model, dm)
    placed = _assert_exactly_once(model, dm)
    assert {v for k, v in placed.items() if k.startswith("model.layers.5.")} == {2}
