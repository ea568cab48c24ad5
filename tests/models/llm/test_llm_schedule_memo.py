"""The schedule recurrence's speed-ups change no number: the task orders built with numpy are Megatron's, and a
memoised makespan is the one simulated afresh."""

from __future__ import annotations

import numpy as np

from dnnplace.models.llm.evaluation import schedule


def test_numpy_orders_are_megatrons() -> None:
    for pp, vp, m in ((2, 1, 3), (4, 1, 8), (4, 2, 8), (3, 5, 6), (8, 4, 16), (16, 1, 4)):
        rank, stage, bwd, mb = schedule._flat_orders(pp, vp, m)
        want = [(r, c * pp + r, b, k) for r in range(pp) for b, k, c in schedule.megatron_order(r, pp, vp, m)]
        assert list(zip(rank.tolist(), stage.tolist(), bwd.tolist(), mb.tolist(), strict=True)) == want


def test_memo_answers_as_a_fresh_simulation() -> None:
    rng = np.random.default_rng(1)
    f, b, d = rng.random((5, 8)), rng.random((5, 8)), 0.01 * rng.random(5)
    schedule._MEMO.clear()
    fresh = schedule.makespan(4, 2, 8, f, b, d)
    assert len(schedule._MEMO) == 5
    again = schedule.makespan(4, 2, 8, f[::-1], b[::-1], d[::-1])  # every row from the memo
    np.testing.assert_array_equal(again, fresh[::-1])
    np.testing.assert_array_equal(schedule._makespan(4, 2, 8, f, b, d), fresh)
