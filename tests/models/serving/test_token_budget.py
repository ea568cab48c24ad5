"""The prompt-token budget (``max_num_batched_tokens``) chosen by the search around the engine's default: the
plan's replicas priced at 1/4 ... 8 times it, the deployment searched again where one serves more, so the proof
is the chosen budget's; never worse than the default; pinned or llama.cpp / Hugging Face budgets kept."""

from __future__ import annotations

import json

import pytest

from dnnplace.errors import DnnplaceError
from dnnplace.models.serving import verdicts
from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.plan_file import plan_document, read_serving_plan
from dnnplace.models.serving.search import search
from dnnplace.models.serving.spec import ServingConfig


@pytest.fixture
def long_prompts(llama8b):
    return problem(llama8b, gpus="1xl40s", isl=4096, osl=64)


def test_the_budget_is_never_worse_than_the_default_and_the_proof_is_its_own(long_prompts):
    p = long_prompts
    plan = search(p, time_limit=30)
    tried = plan.meta["max_num_batched_tokens_searched"]
    default = p.engine.max_num_batched_tokens
    assert default in tried and len(tried) >= 4
    chosen = evaluate(p, plan.config).output_tokens_per_s
    at_default = search(p, time_limit=30, max_num_seqs=plan.config.max_num_seqs, max_num_batched_tokens=default)
    assert chosen >= evaluate(p, at_default.config).output_tokens_per_s * (1 - 1e-9)
    top = max(tried, key=lambda b: (tried[b], b == default))
    assert top != default and tried[top] > tried[default] * 1.01  # long prompts on an L40S: a real gain, taken
    assert plan.config.max_num_batched_tokens == top
    # the proof is the search's at the chosen budget: the same search pinned there agrees
    pinned = search(p, time_limit=30, max_num_seqs=plan.config.max_num_seqs,
                    max_num_batched_tokens=plan.config.max_num_batched_tokens)
    assert evaluate(p, pinned.config).output_tokens_per_s == pytest.approx(chosen, rel=1e-9)
    assert plan.status == pinned.status


def test_a_gain_inside_the_noise_keeps_the_default_budget(llama70b):
    """4 H100 + 4 A100: 2048 serves 0.1 % more than 8192 on the plan's replicas; not worth a second search."""
    p = problem(llama70b, gpus="4xh100+4xa100", precision="fp8")
    plan = search(p, time_limit=30)
    tried = plan.meta["max_num_batched_tokens_searched"]
    best = max(tried.values())
    if best < tried[p.engine.max_num_batched_tokens] * 1.01:
        assert plan.config.max_num_batched_tokens == p.engine.max_num_batched_tokens


def test_each_budget_priced_is_the_plans_replicas_at_it(long_prompts):
    p = long_prompts
    plan = search(p, time_limit=30)
    for b, v in plan.meta["max_num_batched_tokens_searched"].items():
        if b == plan.config.max_num_batched_tokens:
            continue
        ev = evaluate(p, ServingConfig(plan.config.replicas, plan.config.max_num_seqs, b))
        assert v <= (ev.output_tokens_per_s if ev.fits else 0.0) * (1 + 1e-6) + 1e-3 or v == 0.0


def test_a_pinned_budget_is_kept_and_not_searched(long_prompts):
    plan = search(long_prompts, time_limit=30, max_num_batched_tokens=1024)
    assert plan.config.max_num_batched_tokens == 1024 and "max_num_batched_tokens_searched" not in plan.meta


def test_llama_cpp_and_hf_keep_their_budget(llama8b):
    for engine in ("llama.cpp", "hf"):
        p = problem(llama8b, gpus="1xl40s", engine=engine, isl=512, osl=64)
        plan = search(p, time_limit=30)
        assert plan.config.max_num_batched_tokens == p.engine.max_num_batched_tokens
        assert "max_num_batched_tokens_searched" not in plan.meta


def test_vllm_never_gets_fewer_tokens_than_sequences(llama8b):
    p = problem(llama8b, gpus="1xh100", isl=128, osl=128)
    plan = search(p, time_limit=30)
    assert all(b >= plan.config.max_num_seqs for b in plan.meta["max_num_batched_tokens_searched"])


def test_the_plan_file_keeps_the_budgets_priced_and_refuses_a_mangled_one(long_prompts):
    p = long_prompts
    plan = search(p, time_limit=30)
    doc = json.loads(json.dumps(plan_document(p, plan, evaluate(p, plan.config), baselines=[])))
    _, again = read_serving_plan(doc, "plan.json")
    assert again.meta["max_num_batched_tokens_searched"] == plan.meta["max_num_batched_tokens_searched"]
    for bad in ([1, 2], {"x": 1.0}, {"1024": True}):
        doc["max_num_batched_tokens_searched"] = bad
        with pytest.raises(DnnplaceError, match="max_num_batched_tokens_searched"):
            read_serving_plan(doc, "plan.json")


def test_an_slo_the_searched_budget_misses_is_tried_at_the_engines_own(long_prompts, monkeypatch):
    """A larger budget serves more but runs longer steps: an SLO check also tries the engine's default budget
    before saying no deployment meets it."""
    p = long_prompts
    plan = search(p, time_limit=30)
    seen = []
    real = verdicts.evaluate

    def spy(q, c):
        seen.append(c.max_num_batched_tokens)
        return real(q, c)

    monkeypatch.setattr(verdicts, "evaluate", spy)
    tight = problem(p.source, gpus="1xl40s", isl=4096, osl=64, tpot_ms=1e-3)
    with pytest.raises(DnnplaceError):
        verdicts.meet_slo(tight, plan)
    if plan.config.max_num_batched_tokens != p.engine.max_num_batched_tokens:
        assert p.engine.max_num_batched_tokens in seen


def test_the_limit_is_searched_again_at_the_budget_chosen(llama70b):
    """A budget chosen away from the default moves the best ``max_num_seqs`` too (70B int4 on 2 x RTX 4090: 64
    at vLLM's default budget, 32 at 1,024): the limit is climbed again there, so the plan is not beaten by its
    own best-homogeneous baseline, which searches the limit at the plan's budget on the same fleet."""
    from dnnplace.models.serving.baselines import baselines

    p = problem(llama70b, gpus="2xrtx-4090", precision="int4")
    plan = search(p, time_limit=30)
    mbt = plan.config.max_num_batched_tokens
    assert mbt != p.engine.max_num_batched_tokens
    value = evaluate(p, plan.config).capacity_tokens_per_s
    for mns in (plan.config.max_num_seqs // 2, plan.config.max_num_seqs * 2):
        other = search(p, time_limit=30, max_num_seqs=mns, max_num_batched_tokens=mbt)
        if other.config.replicas:
            assert evaluate(p, other.config).capacity_tokens_per_s <= value * (1 + 1e-9)
    assert set(plan.meta["max_num_seqs_searched"]) >= {plan.config.max_num_seqs}
    homogeneous = next(b for b in baselines(p, plan) if b.name == "best-homogeneous")
    assert homogeneous.gain is not None and homogeneous.gain >= 1 - 1e-9



def test_the_limits_say_which_budget_they_were_tried_at(long_prompts):
    """The seqs limits are tried at one budget and the budget search may move it after: the plan says at which,
    so the summary's 'tried' rates and the prediction at another budget are not read as one another; the plan file
    keeps it and refuses a mangled one."""
    p = long_prompts
    plan = search(p, time_limit=30)
    at = plan.meta["max_num_seqs_searched_at"]
    assert at in plan.meta["max_num_batched_tokens_searched"]
    doc = json.loads(json.dumps(plan_document(p, plan, evaluate(p, plan.config), baselines=[])))
    _, again = read_serving_plan(doc, "plan.json")
    assert again.meta["max_num_seqs_searched_at"] == at
    for bad in (0, 1.5, True, "2048"):
        doc["max_num_seqs_searched_at"] = bad
        with pytest.raises(DnnplaceError, match="max_num_seqs_searched_at"):
            read_serving_plan(doc, "plan.json")
