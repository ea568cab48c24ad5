"""FSDP / ZeRO terms: the ZeRO paper's own memory figures, hand-computed overlap, a prefetch simulation."""

from __future__ import annotations

import numpy as np
import pytest

from dnnplace.models.llm.evaluation.fsdp import (
    TRAINER_BYTES,
    exposed_time,
    layer_collectives,
    state_bytes,
    working_bytes,
)


@pytest.mark.parametrize("stage,gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_figure_1(stage: int, gb: float) -> None:
    # ZeRO (SC 2020) Fig. 1: 7.5B parameters, N_d = 64, K = 12: 120 / 31.4 / 16.6 / 1.9 GB per GPU.
    total = sum(state_bytes(np.array(7.5e9), np.array(64.0), stage, TRAINER_BYTES["deepspeed"]).values())
    assert float(total) / 1e9 == pytest.approx(gb, abs=0.05)


def test_torchtitan_stage3_is_16_bytes_per_parameter_sharded() -> None:
    mem = state_bytes(np.array(8e9), np.array(8.0), 3, TRAINER_BYTES["torchtitan"])
    assert {k: float(v) for k, v in mem.items()} == {"weights": 4e9, "gradients": 4e9, "optimizer": 8e9}


def test_working_bytes() -> None:
    tt = TRAINER_BYTES["torchtitan"]
    assert float(working_bytes(np.array(1e9), 3, tt)) == 1e9 * (2 * 2 + 4)  # 2 gathered layers + fp32 grad
    assert float(working_bytes(np.array(1e9), 3, tt, prefetch=2)) == 1e9 * (3 * 2 + 4)
    assert float(working_bytes(np.array(1e9), 2, tt)) == 4e9
    assert float(working_bytes(np.array(1e9), 1, tt)) == 0.0


def test_layer_collectives_by_stage() -> None:
    tt = TRAINER_BYTES["torchtitan"]
    assert [float(x) for x in layer_collectives(np.array(10.0), 3, tt)] == [20.0, 20.0, 40.0]
    assert [float(x) for x in layer_collectives(np.array(10.0), 2, tt)] == [0.0, 0.0, 40.0]
    assert [float(x) for x in layer_collectives(np.array(10.0), 1, tt)] == [0.0, 0.0, 0.0]


def test_exposed_time_hand_computed() -> None:
    # ag 1, rs 2, fwd 3, bwd 2 per layer, 4 layers: forward 1 (first gather); backward 1 + 3 x (3 - 2) + 2 = 6.
    one = exposed_time(np.array(1.0), np.array(1.0), np.array(2.0), np.array(3.0), np.array(2.0), np.array(4.0),
                       np.array(1.0))
    assert float(one) == 7.0
    two = exposed_time(np.array(1.0), np.array(1.0), np.array(2.0), np.array(3.0), np.array(2.0), np.array(4.0),
                       np.array(2.0))
    assert float(two) == 14.0
    once = exposed_time(np.array(1.0), np.array(1.0), np.array(2.0), np.array(3.0), np.array(2.0), np.array(4.0),
                        np.array(2.0), reduce_every_microbatch=False)
    assert float(once) == 2 * 1 + 1 + 6  # no reduce-scatter on the first micro-batch's backward


def _simulated_forward(ag: float, f: float, n: int) -> float:
    """Event simulation: one comm stream gathers layer i while layer i-1 computes (one-layer prefetch)."""
    ag_done, c_start, c_end = ag, ag, ag + f
    for _ in range(1, n):
        ag_done = max(ag_done, c_start) + ag
        c_start = max(c_end, ag_done)
        c_end = c_start + f
    return c_end - n * f


def test_forward_overlap_matches_an_event_simulation() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        ag, f, n = float(rng.uniform(0, 3)), float(rng.uniform(0.1, 3)), int(rng.integers(1, 12))
        got = exposed_time(np.array(ag), np.array(0.0), np.array(0.0), np.array(f), np.array(1.0), np.array(n),
                           np.array(1.0))
        assert float(got) == pytest.approx(_simulated_forward(ag, f, n))
