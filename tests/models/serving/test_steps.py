"""The evaluator's steady state carries prompts in whole lumps (:func:`evaluation.steps`): hand-computed mixes,
the mean kept, every step within the budget, and the stage time the steps' share-weighted times."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dnnplace.models.serving.evaluation import cached_times, evaluate, iteration, steps, steps_many
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingProblem, Stage

LLAMA8B = Path(__file__).resolve().parents[3] / "examples" / "llm" / "llama3.1-8b.json"


@functools.cache
def _p(isl: int, osl: int) -> ServingProblem:
    return problem(LLAMA8B, gpus="1xh100", isl=isl, osl=osl, max_model_len=max(isl + osl, 4096))


def test_one_prompt_every_ten_steps_is_a_tenth_of_the_steps_carrying_it():
    """10 sequences decoding 100 tokens each, prompts of 500: 50 prompt tokens a step on average, which come
    as one whole prompt in one step of ten."""
    mix = steps(_p(500, 100), 10.0, 8192)
    assert [w for w, _ in mix] == pytest.approx([0.9, 0.1])
    assert [(x.decode, x.prefill) for _, x in mix] == [(10.0, 0.0), (10.0, 500.0)]


def test_three_and_a_half_prompts_a_step_are_three_or_four_whole_prompts():
    mix = steps(_p(100, 20), 14.0, 8192)  # 14 * 100 / 20 = 70 prompt tokens a step: lumps of 100
    assert [(x.prefill, round(w, 12)) for w, x in mix] == [(0.0, 0.3), (100.0, 0.7)]
    mix = steps(_p(100, 20), 70.0, 8192)  # 350 a step: 3 or 4 prompts
    assert [(x.prefill, round(w, 12)) for w, x in mix] == [(300.0, 0.5), (400.0, 0.5)]


def test_a_full_budget_and_a_prompt_longer_than_it():
    p = _p(1000, 10)
    full = steps(p, 200.0, 4096)  # 200 * 1010 / 10 tokens > 4096: every step full, one kind
    assert len(full) == 1 and full[0][1] == iteration(p, 200.0, 4096)
    long = steps(_p(20000, 2000), 23.0, 2048)  # prompts in budget-sized chunks, the last step capped
    assert all(x.tokens <= 2048 + 1e-9 for _, x in long)
    assert {x.prefill for _, x in long} <= {0.0, 2048.0 - 23.0, 2048.0}


@settings(max_examples=200, deadline=None)
@given(isl=st.integers(1, 30000), osl=st.integers(1, 4000), seqs=st.floats(1.0, 2048.0),
       budget=st.integers(16, 32768))
def test_the_steps_keep_the_mean_and_the_budget(isl, osl, seqs, budget):
    p = _p(isl, osl)
    it = iteration(p, seqs, budget)
    mix = steps(p, seqs, budget)
    assert sum(w for w, _ in mix) == pytest.approx(1.0)
    assert all(w > 0 for w, _ in mix) and 1 <= len(mix) <= 2
    assert sum(w * x.prefill for w, x in mix) == pytest.approx(it.prefill, rel=1e-9, abs=1e-9)
    assert all(x.decode == it.decode and x.tokens <= budget + 1e-6 for _, x in mix)


def test_the_stage_time_is_the_steps_share_weighted_time():
    p = _p(500, 100)
    c = ServingConfig((Replica((Stage("h100", 0, (0,), 32),)),), 10, 8192)
    ev = evaluate(p, c)
    want = 0.0
    for w, x in steps(p, ev.replicas[0].concurrency, 8192):
        lt = cached_times(p, "h100", 1, x, p.engine.framework, "nvlink")
        want += w * (float(lt.per_layer.sum()) + lt.head)
    assert ev.replicas[0].stage_s[0] == pytest.approx(want, rel=1e-12)
    mean = cached_times(p, "h100", 1, iteration(p, ev.replicas[0].concurrency, 8192), p.engine.framework, "nvlink")
    assert want > float(mean.per_layer.sum()) + mean.head  # a step's time is convex in its tokens


@settings(max_examples=200, deadline=None)
@given(isl=st.integers(1, 30000), osl=st.integers(1, 4000), seqs=st.lists(st.floats(1.0, 2048.0), min_size=1,
                                                                          max_size=5),
       budget=st.integers(16, 32768))
def test_one_batch_at_a_time_gives_the_vectorised_steps_exactly(isl, osl, seqs, budget):
    """``steps`` works one batch in Python floats (the evaluator's thousand calls a search), ``steps_many``
    many at once in numpy (the search's prefetch): the same numbers, or the priced layer times would miss."""
    p = _p(isl, osl)
    assert [steps(p, s, budget) for s in seqs] == steps_many(p, seqs, budget)
