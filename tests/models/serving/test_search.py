"""The deployment search on mixed fleets: a plan that fits, with status, bound and gap."""

from __future__ import annotations

from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.search import search


def test_a_mixed_node_gets_an_uneven_split_that_fits(llama70b):
    p = problem(llama70b, gpus="2xa100+2xt4", precision="fp8", isl=512, osl=128)
    plan = search(p, time_limit=20)
    ev = evaluate(p, plan.config)
    assert ev.fits and ev.output_tokens_per_s > 0
    assert plan.status in ("optimal", "feasible") and plan.bound is not None and plan.bound >= ev.value - 1e-6
    assert 0 <= plan.gap < 1
    for r in plan.config.replicas:
        assert sum(r.partition()) == 80 and min(r.partition()) >= 1


def test_a_model_that_fits_nowhere_is_infeasible(llama70b):
    p = problem(llama70b, gpus="1xt4", precision="bf16", isl=128, osl=128)
    assert search(p, time_limit=5).status == "infeasible"
