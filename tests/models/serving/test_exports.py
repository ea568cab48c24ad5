"""Each export read back: partition length and sum, rank-to-GPU order, llama.cpp slots, HF exactly-once."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.exporters import export, hf_device_map, llama_slots
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, Stage


@pytest.fixture
def setup(llama70b):
    p = problem(llama70b, gpus="2xa100+2xt4", precision="fp8", isl=128, osl=128)
    r = Replica((Stage("a100", 0, (1,), 30), Stage("a100", 0, (0,), 30), Stage("t4", 0, (3,), 12),
                 Stage("t4", 0, (2,), 8)))
    return p, ServingPlan(ServingConfig((r,), 64, 4096)), r


@pytest.fixture
def gguf(setup, llama70b):
    """The same deployment planned for llama.cpp, which loads GGUF weights (no FP8)."""
    _, plan, r = setup
    return problem(llama70b, gpus="2xa100+2xt4", precision="q8_0", engine="llama.cpp", isl=128, osl=128), plan, r


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
    with pytest.raises(DnnplaceError, match="stage 3 .t4.*plan again with --engine sglang"):
        export(p, plan, "sglang")  # SGLang's own fraction on a 16 GB T4 (0.757) leaves its 12 layers no KV cache
    env = _env(export(replace(p, memory_fraction=0.88), plan, "sglang").splitlines()[1])
    assert env["SGLANG_PP_LAYER_PARTITION"] == "30,30,12,8"
    doc = json.loads(export(p, plan, "trtllm"))[0]
    assert doc["llm_api_options"]["pp_partition"] == [30, 30, 12, 8]


def test_llama_cpp_slots_count_the_output_layer_on_the_last_device(gguf):
    p, plan, r = gguf
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


# --- read-back of every exporter: partition, rank -> GPU order, llama.cpp slots, refusals -----------------

ENGINES = ("vllm", "sglang", "trtllm", "llama.cpp", "hf")


def _command_lines(text):
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def _read_back(p, plan, to):
    """(partition, CUDA_VISIBLE_DEVICES as a list) of each replica, read from the export's text as an engine would."""
    text = export(p, plan, to)
    if to == "trtllm":
        return [(d["llm_api_options"]["pp_partition"], d["env"]["CUDA_VISIBLE_DEVICES"].split(","))
                for d in json.loads(text)]
    if to == "hf":
        out = []
        for d in json.loads(text):
            dm = d["device_map"]
            per_layer = [dm[k] for k in dm if k.startswith("model.layers.")]
            runs = [g for i, g in enumerate(per_layer) if i == 0 or g != per_layer[i - 1]]
            out.append(([per_layer.count(g) for g in runs], [str(g) for g in runs]))
        return out
    out = []
    for line in _command_lines(text):
        env, args = _env(line), shlex.split(line)
        if to == "vllm":
            part = [int(x) for x in env["VLLM_PP_LAYER_PARTITION"].split(",")]
        elif to == "sglang":
            part = [int(x) for x in env["SGLANG_PP_LAYER_PARTITION"].split(",")]
        else:  # llama.cpp: slots minus the output layer's slot on the last device
            part = [int(x) for x in args[args.index("-ts") + 1].split(",")]
            part[-1] -= 1
        out.append((part, env["CUDA_VISIBLE_DEVICES"].split(",")))
    return out


def _check_ranks(replica, devices):
    """Every engine numbers ranks stage-major, TP-minor (rank = pp_rank * tp + tp_rank) and rank k runs on
    the k-th visible device: that device must be the plan's GPU for that stage and TP rank."""
    assert len(devices) == replica.pp * replica.tp
    for pp_rank, s in enumerate(replica.stages):
        for tp_rank, g in enumerate(s.gpus):
            assert devices[pp_rank * replica.tp + tp_rank] == str(g)


@pytest.mark.parametrize("to", ENGINES)
def test_every_export_reads_back_the_plans_partition_and_gpu_order(setup, gguf, to):
    p, plan, r = gguf if to == "llama.cpp" else setup
    if to == "sglang":  # the vLLM plan's 12-layer T4 stage needs more than SGLang's own 0.757 on a T4
        p = replace(p, memory_fraction=0.88)
    [(part, devices)] = _read_back(p, plan, to)
    assert part == r.partition() and len(part) == r.pp and sum(part) == p.model.num_layers and min(part) >= 1
    if to == "hf":  # device_map values are device indices: one per stage, in stage order
        assert devices == [str(s.gpus[0]) for s in r.stages]
    else:
        _check_ranks(r, devices)


@pytest.fixture
def tp2(llama70b):
    p = problem(llama70b, gpus="2xa100+2xl40s;4xh100", precision="fp8", isl=128, osl=128)
    a = Replica((Stage("a100", 0, (1, 0), 50), Stage("l40s", 0, (3, 2), 30)))
    b = Replica((Stage("h100", 1, (2, 3), 40), Stage("h100", 1, (0, 1), 40)))
    return p, ServingPlan(ServingConfig((a, b), 64, 4096)), (a, b)


@pytest.mark.parametrize("to", ["vllm", "sglang", "trtllm"])
def test_tp_and_several_replicas_keep_each_ranks_gpu(tp2, to):
    p, plan, reps = tp2
    back = _read_back(p, plan, to)
    assert len(back) == len(reps)
    for (part, devices), r in zip(back, reps, strict=True):
        assert part == r.partition() and sum(part) == 80
        _check_ranks(r, devices)
    if to != "trtllm":
        lines = _command_lines(export(p, plan, to))
        flag = "--tensor-parallel-size" if to == "vllm" else "--tp-size"
        assert all(shlex.split(ln)[shlex.split(ln).index(flag) + 1] == "2" for ln in lines)
        ports = [shlex.split(ln)[shlex.split(ln).index("--port") + 1] for ln in lines]
        assert len(set(ports)) == len(ports)  # replicas on one host do not collide
        # each replica is its own server: the launch says how to route to them, which the plan's rate assumed
        first = export(p, plan, to).splitlines()[0]
        assert first.startswith("# 2 replicas") and "least-loaded" in first and "round robin" in first
    single = ServingPlan(ServingConfig(plan.config.replicas[1:], 64, 4096))
    assert "replicas, one server each" not in export(p, single, to)


@pytest.mark.parametrize("to", ["llama.cpp", "hf"])
def test_layer_only_exports_refuse_tp(tp2, to):
    p, plan, _ = tp2
    with pytest.raises(DnnplaceError, match="tp 1"):
        export(p, plan, to)


def _llama_cpp_devices(ts, n_layer):
    """llama.cpp's own placement (llama-model.cpp, load_tensors) in its float32 arithmetic: cumulative
    split fractions, and slot ``il`` (the output layer is slot ``n_layer``) on ``upper_bound(splits,
    il / (n_layer + 1))``, with every layer offloaded (``-ngl all``)."""
    import numpy as np

    cum = np.cumsum(np.array(ts, dtype=np.float32), dtype=np.float32)
    splits = cum / np.float32(cum[-1])
    act = np.float32(n_layer + 1)
    return [int(np.searchsorted(splits, np.float32(il) / act, side="right")) for il in range(n_layer + 1)]


@given(st.lists(st.integers(1, 40), min_size=1, max_size=6))
def test_llama_cpp_slots_put_each_layer_where_the_plan_says(layers):
    n = sum(layers)
    r = Replica(tuple(Stage("a100", 0, (i,), k) for i, k in enumerate(layers)))
    ts = llama_slots(r)
    assert len(ts) == len(layers) and sum(ts) == n + 1 and min(ts) >= 1
    dev = _llama_cpp_devices(ts, n)
    want = [i for i, k in enumerate(layers) for _ in range(k)] + [len(layers) - 1]  # output layer: last device
    assert dev == want


@pytest.mark.parametrize("to", ENGINES)
def test_no_export_writes_a_zero_layer_stage_or_a_wrong_sum(setup, to):
    p, plan, r = setup
    zero = Replica((Stage("a100", 0, (0,), 80), Stage("t4", 0, (2,), 0)))
    short = Replica((Stage("a100", 0, (0,), 40), Stage("t4", 0, (2,), 39)))
    with pytest.raises(DnnplaceError, match="0 layers"):
        export(p, ServingPlan(ServingConfig((zero,), 64, 4096)), to)
    with pytest.raises(DnnplaceError, match="does not sum to 80"):
        export(p, ServingPlan(ServingConfig((short,), 64, 4096)), to)


@pytest.mark.parametrize("to", ENGINES)
def test_per_stage_tp_and_cross_node_replicas_are_refused(tp2, to):
    """Per-stage TP everywhere; a replica across nodes everywhere but vLLM and SGLang, whose multi-node launches
    write it (tests/models/serving/test_exports_nodes.py)."""
    p, _, _ = tp2
    mixed_tp = Replica((Stage("a100", 0, (0, 1), 40), Stage("l40s", 0, (2,), 40)))
    two_nodes = Replica((Stage("a100", 0, (0,), 40), Stage("h100", 1, (0,), 40)))
    for bad, why in ((mixed_tp, "per-stage TP"), (two_nodes, "across nodes")):
        if to in ("vllm", "sglang") and bad is two_nodes:
            continue
        with pytest.raises(DnnplaceError, match=why):
            export(p, ServingPlan(ServingConfig((bad,), 64, 4096)), to)


def test_vllm_dtype_is_half_when_any_stage_predates_sm80(setup, llama70b):
    """vLLM picks ``--dtype auto`` from device 0 alone: a T4 later in the pipeline must still get ``half``."""
    p, plan, _ = setup
    args = shlex.split(export(p, plan, "vllm").splitlines()[1])
    assert args[args.index("--dtype") + 1] == "half"
    q = problem(llama70b, gpus="4xa100", precision="fp8", isl=128, osl=128)
    r = Replica(tuple(Stage("a100", 0, (i,), 20) for i in range(4)))
    args = shlex.split(export(q, ServingPlan(ServingConfig((r,), 64, 4096)), "vllm").splitlines()[1])
    assert args[args.index("--dtype") + 1] == "auto"


def test_sglang_dtype_is_half_when_any_stage_predates_sm80(setup, llama70b):
    """SGLang takes ``--dtype`` as vLLM does: a replica with a GPU below compute capability 8.0 (no BF16) is told
    half, what the plan priced (FP16 at the BF16 rate); an A100 replica keeps the checkpoint's own."""
    p, plan, _ = setup
    args = shlex.split(export(replace(p, memory_fraction=0.88), plan, "sglang").splitlines()[1])
    assert args[args.index("--dtype") + 1] == "half"
    q = problem(llama70b, gpus="4xa100", precision="fp8", isl=128, osl=128)
    r = Replica(tuple(Stage("a100", 0, (i,), 20) for i in range(4)))
    assert "--dtype" not in export(q, ServingPlan(ServingConfig((r,), 64, 4096)), "sglang")


def test_hf_export_says_the_bus_order_and_how_to_read_max_memory(setup):
    p, plan, _ = setup
    doc = json.loads(export(p, plan, "hf"))[0]
    assert doc["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert "int(k)" in doc["load"] and set(doc["max_memory"]) == {"0", "1", "2", "3"}
