"""A replica across nodes exported as vLLM's own multi-node launch (``--nnodes``, ``--node-rank``,
``--headless``) and as SGLang's (``--nnodes``, ``--node-rank``, ``--dist-init-addr``): read back, every global
rank lands on the planned node and GPU, with the planned layers.

The rank rule read back here is vLLM's (ENGINES.md section 1.5): ``local_world_size = world_size // nnodes``,
node k runs global ranks [k L, (k + 1) L), rank = pp_rank * tp + tp_rank, and local rank i uses the i-th
entry of that node's ``CUDA_VISIBLE_DEVICES``."""

from __future__ import annotations

import shlex

import pytest

from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.exporters import SGLANG_DIST_PORT, VLLM_MASTER_PORT, export
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, Stage


@pytest.fixture
def fleet(llama70b):
    return problem(llama70b, gpus="4xh100;4xa100", precision="fp8", isl=128, osl=128)


def _nodes(text: str) -> list[tuple[dict[str, str], list[str]]]:
    """(environment, arguments) of every command line of an export."""
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        words = shlex.split(line)
        env = dict(w.split("=", 1) for w in words if "=" in w and w.split("=")[0].isupper())
        out.append((env, [w for w in words if w not in {f"{k}={v}" for k, v in env.items()}]))
    return out


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _ranks(cmds: list[tuple[dict[str, str], list[str]]]) -> list[tuple[int, str]]:
    """(node rank, physical GPU) of every global rank, by vLLM's multi-node rule."""
    world = int(_arg(cmds[0][1], "--tensor-parallel-size")) * int(_arg(cmds[0][1], "--pipeline-parallel-size"))
    nnodes = int(_arg(cmds[0][1], "--nnodes"))
    local = world // nnodes
    by_rank = {int(_arg(a, "--node-rank")): e["CUDA_VISIBLE_DEVICES"].split(",") for e, a in cmds}
    return [(g // local, by_rank[g // local][g % local]) for g in range(world)]


@pytest.mark.parametrize("tp", [1, 2])
def test_each_rank_lands_on_its_planned_node_and_gpu(fleet, tp):
    gpus = [(3, 2), (1, 0)] if tp == 2 else [(3,), (1,)]
    r = Replica((Stage("h100", 0, gpus[0], 30), Stage("h100", 0, gpus[1], 20),
                 Stage("a100", 1, gpus[1], 15), Stage("a100", 1, gpus[0], 15)))
    cmds = _nodes(export(fleet, ServingPlan(ServingConfig((r,), 64, 4096)), "vllm"))
    assert len(cmds) == 2
    want = [(0 if s.node == 0 else 1, str(g)) for s in r.stages for g in s.gpus]
    assert _ranks(cmds) == want
    for rank, (env, args) in enumerate(cmds):
        assert env["VLLM_PP_LAYER_PARTITION"] == "30,20,15,15" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert _arg(args, "--distributed-executor-backend") == "mp" and _arg(args, "--nnodes") == "2"
        assert _arg(args, "--node-rank") == str(rank) and _arg(args, "--master-port") == str(VLLM_MASTER_PORT)
        assert ("--headless" in args) == (rank > 0)


def test_a_second_replica_gets_its_own_rendezvous_and_port(fleet):
    a = Replica((Stage("h100", 0, (0,), 40), Stage("a100", 1, (0,), 40)))
    b = Replica((Stage("h100", 0, (1,), 40), Stage("a100", 1, (1,), 40)))
    cmds = _nodes(export(fleet, ServingPlan(ServingConfig((a, b), 64, 4096)), "vllm"))
    assert [_arg(x, "--master-port") for _, x in cmds] == [str(VLLM_MASTER_PORT)] * 2 + [str(VLLM_MASTER_PORT + 1)] * 2
    assert {_arg(x, "--port") for _, x in cmds[:2]} == {"8000"} and {_arg(x, "--port") for _, x in cmds[2:]} == {"8001"}


def test_unequal_stage_counts_per_node_are_refused_in_one_line(fleet):
    r = Replica((Stage("h100", 0, (0,), 30), Stage("h100", 0, (1,), 30), Stage("a100", 1, (0,), 20)))
    with pytest.raises(DnnplaceError, match="2/1 stages on its nodes: vLLM's multi-node launch runs the same"):
        export(fleet, ServingPlan(ServingConfig((r,), 64, 4096)), "vllm")


def test_a_replica_that_returns_to_a_node_is_refused(fleet):
    r = Replica((Stage("h100", 0, (0,), 30), Stage("a100", 1, (0,), 20), Stage("h100", 0, (1,), 30)))
    with pytest.raises(DnnplaceError, match="go back to node 1"):
        export(fleet, ServingPlan(ServingConfig((r,), 64, 4096)), "vllm")


@pytest.mark.parametrize("to", ["trtllm", "llama.cpp", "hf"])
def test_other_engines_refuse_a_replica_across_nodes_naming_vllm_and_sglang(fleet, to):
    r = Replica((Stage("h100", 0, (0,), 40), Stage("a100", 1, (0,), 40)))
    with pytest.raises(DnnplaceError, match="across nodes is written for vLLM and SGLang only"):
        export(fleet, ServingPlan(ServingConfig((r,), 64, 4096)), to)


def _sglang_ranks(cmds: list[tuple[dict[str, str], list[str]]]) -> list[tuple[int, str]]:
    """(node rank, physical GPU) of every (pp_rank, tp_rank) in global order, by SGLang's own rule
    (``entrypoints/engine.py::_calculate_rank_ranges`` and ``_launch_scheduler_processes``): with PP at least
    the node count, node r runs PP ranks [r P/N, (r + 1) P/N) and every TP rank of each, and a rank's
    ``gpu_id`` = base_gpu_id + (pp_rank % pp_size_per_node) * tp + tp_rank indexes that node's
    ``CUDA_VISIBLE_DEVICES``."""
    tp, pp = int(_arg(cmds[0][1], "--tp-size")), int(_arg(cmds[0][1], "--pp-size"))
    nnodes = int(_arg(cmds[0][1], "--nnodes"))
    per_node = max(pp // nnodes, 1)
    by_rank = {int(_arg(a, "--node-rank")): (e["CUDA_VISIBLE_DEVICES"].split(","), int(_arg(a, "--base-gpu-id")))
               for e, a in cmds}
    out = []
    for pp_rank in range(pp):
        node = pp_rank // per_node
        devices, base = by_rank[node]
        out += [(node, devices[base + (pp_rank % per_node) * tp + t]) for t in range(tp)]
    return out


@pytest.mark.parametrize("tp", [1, 2])
def test_sglang_multi_node_launch_puts_each_rank_on_its_planned_node_and_gpu(fleet, tp):
    gpus = [(3, 2), (1, 0)] if tp == 2 else [(3,), (1,)]
    r = Replica((Stage("h100", 0, gpus[0], 30), Stage("h100", 0, gpus[1], 20),
                 Stage("a100", 1, gpus[1], 15), Stage("a100", 1, gpus[0], 15)))
    cmds = _nodes(export(fleet, ServingPlan(ServingConfig((r,), 64, 4096)), "sglang"))
    assert len(cmds) == 2
    assert _sglang_ranks(cmds) == [(s.node, str(g)) for s in r.stages for g in s.gpus]
    for rank, (env, args) in enumerate(cmds):
        assert env["SGLANG_PP_LAYER_PARTITION"] == "30,20,15,15" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert _arg(args, "--nnodes") == "2" and _arg(args, "--node-rank") == str(rank)
        assert _arg(args, "--dist-init-addr") == f"HEAD_ADDR:{SGLANG_DIST_PORT}"


def test_sglang_refuses_unequal_stage_counts_per_node_naming_itself(fleet):
    r = Replica((Stage("h100", 0, (0,), 30), Stage("h100", 0, (1,), 30), Stage("a100", 1, (0,), 20)))
    with pytest.raises(DnnplaceError, match="2/1 stages on its nodes: SGLang's multi-node launch runs the same"):
        export(fleet, ServingPlan(ServingConfig((r,), 64, 4096)), "sglang")
