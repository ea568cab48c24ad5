"""The host side of a step (evaluation/llm/host.py) against hand-computed values, the cuda_graphs knob in the
rules, the plan document and the Megatron export."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.config import CUDA_GRAPHS
from dnnplace.models.llm.evaluation import evaluate, host
from dnnplace.models.llm.exporters.megatron import cuda_graph_args
from dnnplace.models.llm.plan_doc import host_doc
from dnnplace.models.llm.published import CONFIGS
from dnnplace.models.llm.spec import LLMPlan, ParallelConfig

US = 1e-6


def _g(scope: str) -> np.ndarray:
    return np.array([float(CUDA_GRAPHS.index(scope))])


def test_dense_layer_host_time_by_hand() -> None:
    # Grace host: 37.08 us an op; a TE module call is 99.66 / 37.08 ops.  attn: 8 ops + 3 TE calls, mlp: 2 + 2.
    te = 99.66 / 37.08
    want = (8 + 3 * te + 2 + 2 * te) * 37.08 * US  # = (10 + 5 x 2.6877) x 37.08 us = 869.1 us
    got = host.layer_host_seconds("gb200", host.DENSE_MODULES, None, np.zeros(1))
    assert got[0] == pytest.approx(want) and want == pytest.approx(869.1 * US, rel=1e-4)
    # x86 host (DGX H100): 13.48 us an op
    assert host.layer_host_seconds("h100", host.DENSE_MODULES, None, np.zeros(1))[0] == pytest.approx(
        (10 + 5 * te) * 13.48 * US)
    # the whole layer graphed: one replay per module
    assert host.layer_host_seconds("gb200", host.DENSE_MODULES, _g("layer"), np.zeros(1))[0] == pytest.approx(
        2 * 37.08 * US)


def test_exposed_by_hand() -> None:
    h_f = np.array([869.1 * US])
    f, b = host.layer_exposed("gb200", h_f, np.array([300 * US]), np.array([600 * US]), None, sync=False,
                              full_recompute=np.array([False]))
    assert f[0] == pytest.approx(569.1 * US) and b[0] == pytest.approx(2 * 869.1 * US - 600 * US)
    # the GPU slower than the host: nothing exposed
    f, b = host.layer_exposed("gb200", h_f, np.array([2e-3]), np.array([4e-3]), None, sync=False,
                              full_recompute=np.array([False]))
    assert f[0] == 0.0 and b[0] == 0.0
    # a dispatcher's synchronisation: 9.6 - 3.8 us of idle and the op issued after it (37.08 us on Grace)
    f, _ = host.layer_exposed("gb200", h_f, np.array([2e-3]), np.array([4e-3]), None, sync=True,
                              full_recompute=np.array([False]))
    assert f[0] == pytest.approx((5.8 + 37.08) * US)
    # full recomputation reissues the forward in the backward; full-iteration graphs expose nothing
    _, b = host.layer_exposed("gb200", h_f, np.array([0.0]), np.array([0.0]), None, sync=False,
                              full_recompute=np.array([True]))
    assert b[0] == pytest.approx(3 * 869.1 * US)
    f, b = host.layer_exposed("gb200", h_f, np.array([0.0]), np.array([0.0]), _g("full_iteration"), sync=True,
                              full_recompute=np.array([True]))
    assert f[0] == 0.0 and b[0] == 0.0


def test_moe_layer_host_time_by_hand() -> None:
    # attn 8 + 3 TE, router 10, preprocess 21, dispatch 5, experts 4 + 2 TE, combine 6; 16 local experts x 2 GEMMs
    te = 99.66 / 37.08
    want = (54 + 5 * te) * 13.48 * US + 2 * 16 * 3.8 * US
    got = host.layer_host_seconds("b200", host.MOE_MODULES, None, np.array([16.0]))
    assert got[0] == pytest.approx(want)
    graphed = host.layer_host_seconds("b200", host.MOE_MODULES, _g("attn+moe_router+moe_preprocess"),
                                      np.array([16.0]))
    assert graphed[0] == pytest.approx((3 + 15 + 2 * te) * 13.48 * US + 2 * 16 * 3.8 * US)


def test_host_exposed_adds_up_in_the_step() -> None:
    """pp = 1: the step's host_exposed is micro-batches x layers x the layer's exposed seconds."""
    from dnnplace.models.llm.evaluation.candidates import Candidates
    from dnnplace.models.llm.evaluation.step import stage_costs

    pr = dnnplace.load_llm(CONFIGS / "qwen3-30b-a3b.json", gpus=8, seq_len=4096, global_batch=64, device="b200")
    cfg = ParallelConfig(1, 1, 1, 1, 8, 1, "none", False, True, (48,), ep=8)
    est = evaluate(pr, cfg)
    costs = stage_costs(pr, Candidates.of([cfg]))
    per = costs.moe_layer["host"][0][0] + costs.moe_layer["host"][1][0]
    assert per > 0 and est.time_breakdown["host_exposed"] == pytest.approx(8 * 48 * per)
    graphed = evaluate(pr, dataclasses.replace(cfg, cuda_graphs="attn+moe_router+moe_preprocess"))
    assert graphed.time_breakdown["host_exposed"] < est.time_breakdown["host_exposed"]
    assert graphed.step_time_s < est.step_time_s
    doc = host_doc(LLMPlan(pr, cfg, est, "fixed", est.step_time_s, 0.0, False, 0.0))
    assert doc["with_graphs"]["saves_s"] == pytest.approx(est.step_time_s - graphed.step_time_s)


def test_graph_scopes_refused_where_megatron_refuses_them() -> None:
    moe = dnnplace.load_llm(CONFIGS / "qwen3-30b-a3b.json", gpus=8, seq_len=4096, global_batch=64)
    cfg = ParallelConfig(1, 1, 1, 1, 8, 1, "none", False, True, (48,), ep=8)
    for scope, rule in (("attn+mlp", "graphs_mlp_scope"), ("layer", "graphs_layer_moe")):
        with pytest.raises(DnnplaceError, match=rule):
            evaluate(moe, dataclasses.replace(cfg, cuda_graphs=scope))


def test_megatron_flags_name_megatron_core_scopes() -> None:
    assert cuda_graph_args("none") == []
    assert cuda_graph_args("full_iteration") == [["--cuda-graph-impl", "local"],
                                                 ["--cuda-graph-scope", "full_iteration"]]
    assert cuda_graph_args("attn+moe_router+moe_preprocess") == [
        ["--cuda-graph-impl", "transformer_engine"], ["--te-rng-tracker"],
        ["--cuda-graph-scope", "attn", "moe_router", "moe_preprocess"]]
    enums = pytest.importorskip("megatron.core.transformer.enums")
    names = {s.name for s in enums.CudaGraphScope}
    assert {m for s in CUDA_GRAPHS if s not in ("none", "layer") for m in s.split("+")} <= names
