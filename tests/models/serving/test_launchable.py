"""A plan never holds a replica its engine cannot start: across nodes only under vLLM's and SGLang's multi-node
launches, as one run of stages per node with the runs equally long; under the other engines a model that needs
two nodes is refused in one line that says the launch, not the GPUs, is why.

Why: the search had planned DeepSeek-V3 on two nodes of 8 x H200 as a replica of 8 + 1 stages (vLLM) and of
8 + 1 (SGLang); ``export`` then refused both, and the plan's figures were those of a deployment no engine runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dnnplace.models.serving.exporters import export
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.pipeline import launch_refusal
from dnnplace.models.serving.search import search
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, Stage
from dnnplace.models.serving.verdicts import apply_layers, unfit

ROOT = Path(__file__).resolve().parents[3]
M70 = ROOT / "examples" / "serving" / "llama3.1-70b.json"


def _launchable(p, plan) -> bool:
    return all(not launch_refusal(p, [s.node for s in r.stages]) for r in plan.config.replicas)


@pytest.mark.parametrize(("engine", "nodes", "why"), [
    ("vllm", [0, 0, 1, 1], ""),
    ("sglang", [0, 1], ""),
    ("vllm", [0, 0], ""),
    ("trtllm", [0, 0, 0], ""),
    ("vllm", [0, 0, 1], "2/1 stages on its nodes"),
    ("sglang", [0, 1, 0, 1], "go back to node 1"),
    ("trtllm", [0, 1], "launched by vLLM and SGLang only"),
    ("llama.cpp", [0, 1], "launched by vLLM and SGLang only"),
    ("hf", [1, 0], "launched by vLLM and SGLang only"),
])
def test_the_launch_rule_by_engine(llama8b, engine, nodes, why):
    p = problem(llama8b, gpus="4xh100;4xh100", engine=engine, isl=256, osl=64)
    got = launch_refusal(p, nodes)
    assert (why in got and got) if why else got == ""


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_model_on_three_gpus_of_two_nodes_spans_them_only_as_equal_runs(engine):
    # Llama 3.1 70B in BF16 (141 GB) needs two H100s; on "2xh100;1xh100" the best unconstrained replica
    # used all three (2 + 1 stages), which neither engine's multi-node launch starts
    p = problem(M70, gpus="2xh100;1xh100", engine=engine, isl=512, osl=128, precision="bf16")
    plan = search(p, time_limit=60)
    assert plan.config.replicas and _launchable(p, plan)
    assert all(len(r.stages) != 3 for r in plan.config.replicas)
    export(p, plan, engine)  # and the engine's export takes it as planned


def test_trtllm_keeps_replicas_inside_nodes_and_says_so_when_none_fits():
    p = problem(M70, gpus="1xh100;1xh100", engine="trtllm", isl=512, osl=128, precision="bf16")
    plan = search(p, time_limit=60)
    assert not plan.config.replicas and plan.status == "infeasible"
    line = str(unfit(p, {}))
    assert "in one node" in line and "launched by vLLM and SGLang only" in line and "--engine vllm or sglang" in line


def test_the_same_fleet_fits_across_nodes_under_vllm():
    p = problem(M70, gpus="1xh100;1xh100", engine="vllm", isl=512, osl=128, precision="bf16")
    plan = search(p, time_limit=60)
    assert len(plan.config.replicas) == 1 and {s.node for s in plan.config.replicas[0].stages} == {0, 1}


def test_a_pinned_split_is_tried_only_in_orders_the_engine_starts(llama8b):
    p = problem(llama8b, gpus="2xh100;2xh100", engine="vllm", isl=256, osl=64)
    r = Replica((Stage("h100", 0, (0,), 8), Stage("h100", 0, (1,), 8), Stage("h100", 1, (0,), 8),
                 Stage("h100", 1, (1,), 8)))
    out = apply_layers(p, ServingPlan(ServingConfig((r,), 64, 4096)), [2, 14, 14, 2])
    assert _launchable(p, out)


def test_runner_ups_are_distinct_deployments_not_the_plan_on_other_gpus():
    # two identical nodes of three: the same layout on the other node was listed as a runner-up
    p = problem(M70, gpus="3xa100-80g;3xa100-80g", engine="vllm", isl=512, osl=128, precision="bf16")
    plan = search(p, time_limit=60)

    def shape(reps):
        return tuple(sorted(tuple((s.gpu, s.tp, s.layers, i > 0 and s.node != r.stages[i - 1].node)
                                  for i, s in enumerate(r.stages)) for r in reps))

    shapes = [shape(plan.config.replicas)] + [shape(c.replicas) for c in plan.meta["runner_ups"]]
    assert len(shapes) > 2 and len(set(shapes)) == len(shapes)


def test_a_pinned_refusal_names_the_reason_on_one_deployment(llama8b):
    # the priced reason (here vLLM's start-up sampler pass over 1,024 sequences leaving no KV room) is said,
    # not only "fits on no deployment"
    p = problem(llama8b, gpus="1xl4", isl=1024, osl=128, max_model_len=4096)
    assert search(p, time_limit=30).config.replicas  # it fits at the engine's own limits
    line = str(unfit(p, {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}))
    assert "with --fix max_num_seqs=1024,max_num_batched_tokens=8192; e.g. 1 x l4 of node 1 as tp=1 pp=1: " in line


def test_a_kv_refusal_that_hinges_on_the_sampler_pass_says_the_sampler_path(llama8b):
    from dnnplace.models.serving.evaluation import evaluate

    p = problem(llama8b, gpus="1xl4", isl=1024, osl=128, max_model_len=4096)
    one = Replica((Stage("l4", 0, (0,), 32),))
    at_1024 = evaluate(p, ServingConfig((one,), 1024, 8192))
    assert not at_1024.fits and "PyTorch top-k/top-p path" in at_1024.why and "PR #26859" in at_1024.why
    # a cache too small whatever the sampler does says nothing of it
    tight = problem(llama8b, gpus="1xl4", isl=1024, osl=128, max_model_len=65536)
    short = evaluate(tight, ServingConfig((one,), 8, 8192))
    assert not short.fits and "KV cache holds" in short.why and "PyTorch" not in short.why


def test_a_runner_up_across_nodes_says_so():
    from cli_runner import run_cli

    res = run_cli("serve", M70, "--gpus", "2xh100;2xh100", "--precision", "bf16", "--time-limit", 20)
    assert res.returncode == 0, res.stderr
    ups = [line for line in res.stdout.splitlines() if line.startswith("runner-up")]
    assert any("across nodes 0, 1" in line for line in ups) and any("across" not in line for line in ups)
