"""A run too short to judge the queue says so instead of "SATURATED".

Why: ``simulate --rate 8.25 --requests 400`` on a TensorRT-LLM PP 4 plan at half its capacity read "SATURATED (the
queue grows)" with a p99 TTFT of 375 ms: 55 s of arrivals against 35 s request lifetimes, so the second half was
judged during the fill, whose requests finish faster than the steady state's.  2,000 requests: "keeps up".
"""

from __future__ import annotations

import math

from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.simulator import JUDGED_LIFETIMES, simulate
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage


def _setup(llama8b):
    p = problem(llama8b, gpus="1xh100", isl=512, osl=1024, max_model_len=4096)
    c = ServingConfig((Replica((Stage("h100", 0, (0,), 32),)),), 64, 8192)
    return p, c, 0.5 * evaluate(p, c).requests_per_s


def test_a_window_under_four_lifetimes_is_not_judged_and_says_how_many_requests(llama8b):
    p, c, rate = _setup(llama8b)
    s = simulate(p, c, rate=rate, requests=30)
    assert s.window_s < JUDGED_LIFETIMES * s.lifetime_s and not s.saturation_judged
    head = s.summary()[0]
    assert "queue not judged" in head and "SATURATED" not in head and "keeps up" not in head
    assert f"--requests {math.ceil(JUDGED_LIFETIMES * s.lifetime_s * rate)} or more" in head
    assert s.to_dict()["saturation_judged"] is False


def test_enough_requests_are_judged(llama8b):
    p, c, rate = _setup(llama8b)
    short = simulate(p, c, rate=rate, requests=30)
    s = simulate(p, c, rate=rate, requests=math.ceil(1.5 * JUDGED_LIFETIMES * short.lifetime_s * rate))
    assert s.saturation_judged and not s.saturated and "keeps up" in s.summary()[0]
