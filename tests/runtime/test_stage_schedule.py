"""The trainer executes the shared Schedule the simulator times, and takes its activations in flight from it."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402

from dnnplace.core.schedule import Schedule  # noqa: E402
from dnnplace.models.paper.split import Split  # noqa: E402


def _plan(*bounds: int):
    from dnnplace.frontends.torch_model.capture import capture
    from dnnplace.frontends.torch_model.loader import load_factory
    from dnnplace.runtime.stages import build_stages

    loaded = load_factory(str(ROOT / "examples/mlp_skip.py:build"))
    split = Split.of([list(range(a, b)) for a, b in zip(bounds, bounds[1:])])
    return build_stages(capture(loaded.model, loaded.args, quiet=True), split)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("microbatches", [1, 2, 5])
def test_stage_orders_are_the_shared_schedule(schedule, microbatches):
    from dnnplace.runtime.train import stage_orders

    order, after = stage_orders(_plan(0, 2, 7, 12), schedule, microbatches)
    assert isinstance(order, Schedule) and order.name == schedule and len(order.ranks) == len(after) == 3
    assert Schedule.from_dict(order.to_dict()) == order  # what every worker is handed is a runnable schedule
    assert after == [2, 1, 0]
    # what the launcher multiplies a stage's activations by: all microbatches (GPipe), or one per later stage
    expected = [microbatches if schedule == "gpipe" else min(a + 1, microbatches) for a in after]
    assert [order.in_flight(r) for r in range(3)] == expected
