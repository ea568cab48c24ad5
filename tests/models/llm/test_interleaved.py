"""Megatron's schedules simulated task by task, against the closed forms the LLM planner prices with."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.interleaved import rank_order, simulate_schedule


@settings(max_examples=examples(80), deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(1, 6), st.floats(0.1, 5), st.floats(0.1, 5))
def test_uniform_stages_have_the_textbook_bubble(pp, vp, groups, f, b):
    m = pp * groups
    run = simulate_schedule(pp, vp, m, [f / vp] * (pp * vp), [b / vp] * (pp * vp))
    assert run.makespan == pytest.approx(m * (f + b) * (1 + (pp - 1) / (vp * m)), rel=1e-9)
    assert run.bubble_fraction == pytest.approx((pp - 1) / (vp * m), rel=1e-9, abs=1e-12)


@settings(max_examples=examples(80), deadline=None)
@given(st.integers(1, 5), st.integers(1, 3), st.integers(1, 4), st.data())
def test_uneven_stages_are_bounded_by_the_bottleneck_and_by_serial_execution(pp, vp, groups, data):
    # the bottleneck rank runs every micro-batch (a lower bound the planner may prune with); with uneven
    # stages the closed form is an estimate, neither bound (pp=3, m=2, (1,2),(3,.25),(1,.5): 11.25 > 11)
    m = pp * groups
    t = data.draw(st.lists(st.tuples(st.floats(0.1, 3), st.floats(0.1, 3)), min_size=pp * vp, max_size=pp * vp))
    run = simulate_schedule(pp, vp, m, [x for x, _ in t], [y for _, y in t])
    per_rank = [sum(x + y for s, (x, y) in enumerate(t) if s % pp == r) for r in range(pp)]
    assert m * max(per_rank) * (1 - 1e-9) <= run.makespan <= m * sum(per_rank) * (1 + 1e-9)
    assert run.busy == pytest.approx([m * w for w in per_rank])


def test_every_task_runs_once_after_its_inputs():
    pp, vp, m = 3, 2, 6
    run = simulate_schedule(pp, vp, m, [1.0, 2.0, 1.5, 1.0, 0.5, 2.0], [2.0] * 6, p2p=0.25)
    seen = {(t.backward, t.microbatch, t.stage): t for t in run.tasks}
    assert len(seen) == len(run.tasks) == 2 * pp * vp * m
    for (bwd, mb, s), t in seen.items():
        if not bwd and s > 0:
            assert t.start >= seen[(False, mb, s - 1)].end
        if bwd:
            assert t.start >= seen[(False, mb, s)].end
            if s < pp * vp - 1:
                assert t.start >= seen[(True, mb, s + 1)].end + 0.25 - 1e-12
    assert len(run.chrome_trace()["traceEvents"]) == len(run.tasks)


def test_the_issue_order_is_megatrons():
    # rank 0 of p=2, v=2, m=4: warm-up (2-0-1)*2 + (2-1)*2 = 4 forwards, in chunk groups of p micro-batches
    order = rank_order(0, 2, 2, 4)
    assert order[:4] == [(False, 0, 0), (False, 1, 0), (False, 0, 1), (False, 1, 1)]
    assert order[4:6] == [(False, 2, 0), (True, 0, 1)]
    assert len(order) == 2 * 2 * 4


def test_refusals_are_one_line():
    with pytest.raises(DnnplaceError, match="multiple of pp"):
        simulate_schedule(4, 2, 6, [1.0] * 8, [1.0] * 8)
    with pytest.raises(DnnplaceError, match="pp x vp"):
        simulate_schedule(2, 2, 4, [1.0] * 3, [1.0] * 4)
