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


def test_a_pinned_split_is_tried_in_every_order_of_its_stages(llama70b):
    """Layers pinned per position fit only with the A100s at both ends (30+10+10+30 on 2 A100 + 2 T4): every
    distinct order of the stages' GPU groups is tried, not only whole blocks."""
    import dnnplace
    from dnnplace.models.serving.load import problem

    p = problem(llama70b, gpus="2xa100+2xt4", precision="fp8", isl=512, osl=128)
    sol = dnnplace.solve(p, tp=1, pp=4, layers="30+10+10+30", time_limit=20)
    r = sol.plan.config.replicas[0]
    assert [s.gpu for s in r.stages] == ["a100", "t4", "t4", "a100"] and list(r.partition()) == [30, 10, 10, 30]
