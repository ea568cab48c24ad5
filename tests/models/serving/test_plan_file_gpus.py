"""A plan file is read back on its own GPUs: a TensorRT-LLM FP4 plan on Blackwell exports and re-prices.

Why: the reader built the problem on a stand-in fleet of one H100 before putting the plan's fleet in, and the
engine's precision rules ran against the stand-in, so every TensorRT-LLM FP4 plan (FP4 from compute capability
10.0) was refused by ``export`` and ``simulate`` with "fp4 weights on h100".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.exporters import export
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.plan_file import plan_document, read_serving_plan
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, Stage


def _doc(p, plan) -> dict:
    return json.loads(json.dumps(plan_document(p, plan, evaluate(p, plan.config), baselines=[])))


@pytest.mark.parametrize("gpu", ["b200", "b300", "gb200"])
def test_a_trtllm_fp4_plan_on_blackwell_reads_back_and_exports(llama8b: Path, gpu):
    p = problem(llama8b, gpus=f"1x{gpu}", engine="trtllm", precision="fp4", isl=512, osl=128)
    plan = ServingPlan(ServingConfig((Replica((Stage(gpu, 0, (0,), 32),)),), 256, 8192))
    q, again = read_serving_plan(_doc(p, plan), "plan.json")
    assert [g.name for g in q.fleet.gpus] == [gpu] and q.model.precision == "fp4"
    assert again.config.replicas == plan.config.replicas
    assert json.loads(export(q, again, "trtllm"))[0]["llm_api_options"]["pipeline_parallel_size"] == 1


def test_a_plan_file_edited_onto_hopper_is_refused_for_the_gpu_it_names(llama8b: Path):
    p = problem(llama8b, gpus="1xb200", engine="trtllm", precision="fp4", isl=512, osl=128)
    doc = _doc(p, ServingPlan(ServingConfig((Replica((Stage("b200", 0, (0,), 32),)),), 256, 8192)))
    doc["fleet"]["gpus"] = doc["fleet"]["nodes"][0]["gpus"] = "1xh100"
    doc["config"]["replicas"][0]["stages"][0]["gpu"] = "h100"
    with pytest.raises(DnnplaceError, match="plan.json: .*fp4 weights on h100"):
        read_serving_plan(doc, "plan.json")
