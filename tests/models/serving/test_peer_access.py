"""GeForce cards without peer access over PCIe (catalogue NO_PEER_ACCESS): the engines' custom all-reduce is off,
so a TP group of them is priced with NCCL's ring and its vLLM / SGLang commands say --disable-custom-all-reduce
(SGLang crashed on RTX 4090s without it: sglang #4814); data-center cards and NVLink-bridged 3090s keep it."""

from __future__ import annotations

import numpy as np
import pytest

from dnnplace.models.serving.catalogue import NO_PEER_ACCESS
from dnnplace.models.serving.cost import engine_kernels, tp_all_reduce
from dnnplace.models.serving.exporters import export
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, Stage


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_card_without_peer_access_all_reduces_through_nccl(engine):
    kc = engine_kernels("rtx-4090", engine)
    nbytes = np.array([64e3, 1e6])
    priced = tp_all_reduce(kc, nbytes, 2, "pcie")
    ring = kc.collective("all_reduce", nbytes, np.full(2, 2), "pcie")
    assert np.allclose(priced.seconds, ring.seconds)
    # an L40S pair over PCIe does have peer access: two GPUs take the engine's own kernel there
    kc = engine_kernels("l40s", engine)
    own = tp_all_reduce(kc, nbytes[:1], 2, "pcie")
    assert own.seconds[0] < kc.collective("all_reduce", nbytes[:1], np.full(1, 2), "pcie").seconds[0]


def _export(llama8b, gpus: str, engine: str, link: str | None = None) -> str:
    p = problem(llama8b, gpus=gpus, engine=engine)
    if link is not None:
        from dataclasses import replace

        p = replace(p, fleet=replace(p.fleet, nodes=tuple(replace(n, link=link) for n in p.fleet.nodes)))
    gpu = p.fleet.gpus[0].name
    plan = ServingPlan(ServingConfig((Replica((Stage(gpu, 0, (0, 1), 32),)),), 64, 2048), "feasible", 0.0, 0.0, 0.0)
    return export(p, plan, engine)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_their_commands_disable_the_custom_all_reduce(llama8b, engine):
    assert "--disable-custom-all-reduce" in _export(llama8b, "2xrtx-4090", engine)
    assert "--disable-custom-all-reduce" in _export(llama8b, "2xrtx-3090", engine, link="pcie")
    assert "--disable-custom-all-reduce" not in _export(llama8b, "2xrtx-3090", engine)  # on the NVLink bridge
    assert "--disable-custom-all-reduce" not in _export(llama8b, "2xl40s", engine)


def test_every_entry_is_a_catalogue_gpu_with_its_source():
    from dnnplace.core.catalogue import device_spec

    for gpu, source in NO_PEER_ACCESS.items():
        assert device_spec(gpu).name == gpu and len(source) > 20



def test_a_bridge_joins_two_cards_only():
    """RTX A6000 / 3090 NVLink bridges join pairs (their datasheets): TP 2 all-reduces over the bridge, TP 4 over
    PCIe with NCCL's ring (vLLM and SGLang take their own kernel only on a full NVLink mesh above 2 GPUs)."""
    kc = engine_kernels("a6000", "vllm")
    nbytes = np.array([64e3, 4e6])
    four = tp_all_reduce(kc, nbytes, 4, "nvlink")
    assert np.allclose(four.seconds, kc.collective("all_reduce", nbytes, np.full(2, 4), "pcie").seconds)
    two = tp_all_reduce(kc, nbytes, 2, "nvlink")
    assert (two.seconds < tp_all_reduce(kc, nbytes, 2, "pcie").seconds).all()


def test_a_3090_group_beyond_its_bridge_disables_the_custom_all_reduce(llama8b):
    p = problem(llama8b, gpus="4xrtx-3090", engine="vllm")
    plan = ServingPlan(ServingConfig((Replica((Stage("rtx-3090", 0, (0, 1, 2, 3), 32),)),), 64, 2048), "feasible",
                       0.0, 0.0, 0.0)
    assert "--disable-custom-all-reduce" in export(p, plan, "vllm")


def test_the_plan_file_says_what_each_nodes_link_means_for_its_gpus():
    """A node's link ``nvlink`` is its own fabric: the plan file says PCIe for cards without NVLink, the bridge
    and PCIe beyond for bridged pairs, and PCIe between kinds (it said 'nvlink' for RTX 4090 nodes)."""
    import dnnplace
    from dnnplace.models.serving.plan_file import plan_document

    root = __import__("pathlib").Path(__file__).resolve().parents[3]
    p = dnnplace.load_serving(root / "examples" / "serving" / "llama3.1-8b.json", gpus="2xrtx-4090+2xa6000;2xh100")
    sol = dnnplace.solve(p, time_limit=10)
    from dnnplace.models.serving.evaluation import evaluate

    nodes = plan_document(p, sol.plan, evaluate(p, sol.plan.config))["fleet"]["nodes"]
    assert nodes[0]["fabric"] == "a6000: nvlink3-bridge (pairs), PCIe beyond; rtx-4090: PCIe; between kinds: PCIe"
    assert nodes[1]["fabric"] == "h100: nvlink4" and all(n["link"] == "nvlink" for n in nodes)
