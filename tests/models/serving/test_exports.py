"""Each export read back: partition length and sum, rank-to-GPU order, llama.cpp slots, HF exactly-once."""

from __future__ import annotations

import json
import shlex

import pytest

from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.exporters import export, hf_device_map
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, Stage


@pytest.fixture
def setup(llama70b):
    p = problem(llama70b, gpus="2xa100+2xt4", precision="fp8", isl=128, osl=128)
    r = Replica((Stage("a100", 0, (1,), 30), Stage("a100", 0, (0,), 30), Stage("t4", 0, (3,), 12),
                 Stage("t4", 0, (2,), 8)))
    return p, ServingPlan(ServingConfig((r,), 64, 4096)), r


def _env(line):
    return dict(w.split("=", 1) for w in shlex.split(line) if "=" in w and w.split("=")[0].isupper())


def test_vllm_partition_and_gpu_order(setup):
    p, plan, r = setup
    line = export(p, plan, "vllm").splitlines()[1]
    env = _env(line)
    parts = [int(x) for x in env["VLLM_PP_LAYER_PARTITION"].split(",")]
    assert len(parts) == 4 and sum(parts) == 80 and min(parts) >= 1
    assert env["CUDA_VISIBLE_DEVICES"] == "1,0,3,2" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    args = shlex.split(line)
    assert args[args.index("--pipeline-parallel-size") + 1] == "4"


def test_sglang_and_trtllm_partitions(setup):
    p, plan, r = setup
    env = _env(export(p, plan, "sglang").splitlines()[1])
    assert env["SGLANG_PP_LAYER_PARTITION"] == "30,30,12,8"
    doc = json.loads(export(p, plan, "trtllm"))[0]
    assert doc["llm_api_options"]["pp_partition"] == [30, 30, 12, 8]


def test_llama_cpp_slots_count_the_output_layer_on_the_last_device(setup):
    p, plan, r = setup
    args = shlex.split(export(p, plan, "llama.cpp").splitlines()[1])
    ts = [int(x) for x in args[args.index("-ts") + 1].split(",")]
    assert ts == [30, 30, 12, 9]
    # llama.cpp's own arithmetic: layer il goes to upper_bound(cumulative fractions, il / (n_layer + 1))
    cum = [sum(ts[:i + 1]) / sum(ts) for i in range(len(ts))]
    dev = [next(d for d, c in enumerate(cum) if il / 81 < c) for il in range(81)]
    assert [dev.count(d) for d in range(4)] == ts


def test_hf_device_map_places_every_module_exactly_once(setup):
    p, plan, r = setup
    dm = hf_device_map(p, r)["device_map"]
    layers = [k for k in dm if k.startswith("model.layers.")]
    assert layers == [f"model.layers.{i}" for i in range(80)]
    assert {"model.embed_tokens", "model.norm", "model.rotary_emb", "lm_head"} <= set(dm)
    assert not any(k in ("model", "model.layers") for k in dm)  # no parent keys
    assert dm["model.layers.0"] == 1 and dm["model.layers.79"] == 2


def test_a_zero_layer_stage_is_never_written(setup):
    p, plan, r = setup
    bad = Replica((Stage("a100", 0, (0,), 80), Stage("t4", 0, (2,), 0)))
    with pytest.raises(DnnplaceError, match="0 layers"):
        export(p, ServingPlan(ServingConfig((bad,), 64, 4096)), "vllm")
