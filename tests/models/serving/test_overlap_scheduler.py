"""The overlap scheduler (TensorRT-LLM, SGLang): the host picks step n + 1 while the GPU runs step n, so a request
that arrives during step n first runs in step n + 2 -- unless the engine would otherwise idle, when the host takes
it at once.  Checked against the same engine with the overlap off, by hand on two requests and in a property."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dnnplace.models.serving.load import problem
from dnnplace.models.serving.simulator import simulate
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingProblem, Stage

LLAMA8B = Path(__file__).resolve().parents[3] / "examples" / "llm" / "llama3.1-8b.json"


@functools.cache
def _problems(engine: str, isl: int, osl: int) -> tuple[ServingProblem, ServingProblem]:
    """(the engine as its rules hold it, the same engine with the overlap scheduler off)."""
    p = problem(LLAMA8B, gpus="1xh100", isl=isl, osl=osl, engine=engine)
    assert p.engine.overlap_scheduler
    return p, replace(p, engine=replace(p.engine, overlap_scheduler=False))


def _config(p: ServingProblem) -> ServingConfig:
    return ServingConfig((Replica((Stage("h100", 0, (0,), p.model.num_layers),)),), 64, 8192)


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_requests_that_never_meet_are_not_delayed(engine: str) -> None:
    on, off = _problems(engine, 256, 16)
    a = simulate(on, _config(on), rate=0.05, requests=8, seed=1)
    b = simulate(off, _config(off), rate=0.05, requests=8, seed=1)
    assert a.ttft_ms == b.ttft_ms and a.tpot_ms == b.tpot_ms


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_a_request_arriving_mid_step_waits_one_more_step(engine: str) -> None:
    """Two requests 1 ms apart: the second arrives while the first one's prompt runs.  Without the overlap it
    runs right after that step; with it, the step the host already chose (the first request's first decode)
    runs before it, so its TTFT grows by that decode step."""
    on, off = _problems(engine, 512, 64)
    t = {}
    for name, p in (("on", on), ("off", off)):
        s = simulate(p, _config(p), rate=1000.0, requests=2, seed=0)
        assert s.completed == 2
        t[name] = s
    assert t["on"].ttft_ms["mean"] > t["off"].ttft_ms["mean"]
    # the first request's TTFT is its own prompt either way; only the second waits
    assert t["on"].ttft_ms["p50"] == pytest.approx(t["off"].ttft_ms["p50"], rel=0.5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rate=st.floats(0.5, 200.0), seed=st.integers(0, 50), engine=st.sampled_from(["sglang", "trtllm"]))
def test_the_overlap_never_shortens_a_ttft_and_loses_no_token(rate: float, seed: int, engine: str) -> None:
    on, off = _problems(engine, 128, 16)
    a = simulate(on, _config(on), rate=rate, requests=30, seed=seed)
    b = simulate(off, _config(off), rate=rate, requests=30, seed=seed)
    assert a.completed == b.completed == 30
    assert a.output_tokens == b.output_tokens
    assert a.ttft_ms["mean"] >= b.ttft_ms["mean"] * (1 - 1e-9)
