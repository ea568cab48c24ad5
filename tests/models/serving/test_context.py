"""max_model_len as vLLM decides it: one full-length request's KV cache on every worker or it refuses to
start (vLLM #13061's "max seq len larger than the KV cache can store"); unpinned, the plan fits it."""

from __future__ import annotations

import shlex
from pathlib import Path

from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.exporters import export
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.plan_file import plan_document
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, Stage

ROOT = Path(__file__).resolve().parents[3]
M70 = ROOT / "examples" / "serving" / "llama3.1-70b.json"


def _plan(gpu: str = "l40s") -> ServingPlan:
    return ServingPlan(ServingConfig((Replica((Stage(gpu, 0, (0,), 40), Stage(gpu, 0, (1,), 40))),), 64, 4096))


def test_vllm_refuses_a_pinned_context_its_cache_cannot_hold():
    p = problem(M70, gpus="2xl40s", precision="fp8", isl=256, osl=64, max_model_len=131072)
    ev = evaluate(p, _plan().config)
    assert not ev.fits and "--max-model-len 131072" in ev.why and "refuses to start" in ev.why
    kv = int(ev.replicas[0].kv_tokens)
    assert 0 < kv < 131072 and f"{kv} or fewer would start" in ev.why


def test_unpinned_the_plan_serves_what_the_cache_holds_and_exports_it():
    p = problem(M70, gpus="2xl40s", precision="fp8", isl=256, osl=64)
    plan = _plan()
    ev = evaluate(p, plan.config)
    kv = int(ev.replicas[0].kv_tokens)
    assert ev.fits and ev.replicas[0].max_model_len == min(kv, 131072)
    doc = plan_document(p, plan, ev, baselines=[])
    assert doc["prediction"]["max_model_len"] == min(kv, 131072)
    args = shlex.split(export(p, plan, "vllm").splitlines()[1])
    assert int(args[args.index("--max-model-len") + 1]) == min(kv, 131072)


def test_engines_without_the_check_keep_the_problem_context():
    p = problem(M70, gpus="2xl40s", precision="fp8", isl=256, osl=64, engine="sglang")
    ev = evaluate(p, _plan().config)
    assert ev.replicas[0].max_model_len == p.context == 131072
