"""The routing knob (issue 44 item 3): the skew factor against hand-computed values, where the search and the
plan file keep it, and the price it puts on the slowest rank's experts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.kernels import kernel_costs
from dnnplace.kernels.sources import MEASURED
from dnnplace.kernels.tables import data_root
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.evaluation import moe as moe_cost
from dnnplace.models.llm.evaluation.moe_skew import DRAWS, rule_factor, skew_factors, table_factor
from dnnplace.models.llm.moe_knobs import ROUTINGS, UNFORCED_ROUTING
from dnnplace.models.llm.plan_file import read_llm_plan
from dnnplace.models.llm.published import CONFIGS
from dnnplace.models.llm.solvers.search import search

QWEN3 = CONFIGS / "qwen3-30b-a3b.json"


def _power_law_max_share(alpha: float, lo: float, hi: float, n: int = 4000) -> float:
    """E[max(X1, X2) / (X1 + X2)] x 2 for two i.i.d. loads of density ~ x^-alpha on [lo, hi], by quadrature
    on a log grid (midpoint rule): the rule's answer for two experts on two ranks, computed another way."""
    edges = np.geomspace(lo, hi, n + 1)
    x = np.sqrt(edges[1:] * edges[:-1])
    w = x ** -alpha * np.diff(edges)
    w /= w.sum()
    a, b = np.meshgrid(x, x, indexing="ij")
    share = np.maximum(a, b) / (a + b)
    return float(2.0 * (w[:, None] * w[None, :] * share).sum())


def test_rule_factor_against_quadrature() -> None:
    assert rule_factor(4096, 128, 8, 1, 1.2) == 1.0  # one rank holds every expert: no rank is slower
    for alpha in (1.01, 1.2):
        want = _power_law_max_share(alpha, 1.0, 0.8 * 4096)
        got = rule_factor(4096, 2, 1, 2, alpha)
        assert got == pytest.approx(want, rel=3.0 / np.sqrt(DRAWS))
        assert 1.0 < got < 2.0
    # more ranks: the slowest of more is slower; the same seed: the same answer every run
    assert rule_factor(16384, 128, 8, 32, 1.2) > rule_factor(16384, 128, 8, 8, 1.2) > 1.0
    assert rule_factor.__wrapped__(16384, 128, 8, 8, 1.2) == rule_factor(16384, 128, 8, 8, 1.2)


@pytest.mark.skipif(data_root() is None, reason="aiconfigurator-core's kernel tables are not installed")
def test_table_factor_is_the_measured_ratio() -> None:
    """At a measured token count the factor is the table's own skewed over balanced latency."""
    kc = kernel_costs("h100")
    shape = (2048, 768, 8, 128, 1, 8)  # Qwen3-30B-A3B's experts at etp 1, ep 8
    probe = kc.moe(np.array([2.0 ** i for i in range(6, 15)]), *shape[:4], tp=1, ep=8, routing="power-law-1.2")
    hit = np.flatnonzero(probe.source == MEASURED)  # token counts the table measured: the largest
    assert hit.size
    tokens = np.array([2.0 ** range(6, 15)[int(hit[-1])]])
    bal = kc.moe(tokens, *shape[:4], tp=1, ep=8, routing="balanced")
    sk = kc.moe(tokens, *shape[:4], tp=1, ep=8, routing="power-law-1.2")
    assert int(bal.source[0]) == MEASURED and int(sk.source[0]) == MEASURED
    f = table_factor("h100", tokens, *shape[:4], 1, 8, "power-law-1.2")
    assert f is not None and f[0] == pytest.approx(sk.seconds[0] / bal.seconds[0], rel=1e-12)
    assert f[0] > 1.2  # thousands of tokens on 8 ranks: the hot rank is much slower
    # a shape no table holds falls to the rule
    assert table_factor("h100", tokens, 1000, 300, 3, 12, 1, 4, "power-law-1.2") is None


def test_skew_multiplies_the_slowest_ranks_expert_seconds() -> None:
    pr = dnnplace.load_llm(QWEN3, gpus=16, seq_len=4096, global_batch=256)
    m, dev = pr.moe, pr.device
    t, ep, etp = np.array([4096.0, 4096.0]), np.array([8.0, 8.0]), np.array([1.0, 1.0])
    even = moe_cost.expert_gemm_times(m, t, ep, etp, dev, 1e15, skew=np.array([1.0, 1.0]))
    skewed = moe_cost.expert_gemm_times(m, t, ep, etp, dev, 1e15, skew=np.array([0.0, 2.5]))
    balanced = moe_cost.expert_gemm_times(m, t, ep, etp, dev, 1e15)
    assert skewed[0][1] == pytest.approx(2.5 * even[0][1]) and skewed[1][1] == pytest.approx(2.5 * even[1][1])
    assert skewed[0][0] == pytest.approx(balanced[0][0])  # factor 0: balanced, the load factor kept
    f, how = skew_factors(m, t, ep, etp, np.array([0, ROUTINGS.index("power-law-1.2")]), dev)
    assert f is not None and f[0] == 0.0 and f[1] > 1.0 and len(how) == 1
    assert skew_factors(m, t, ep, etp, np.zeros(2), dev) == (None, [])


def test_search_keeps_the_pin_and_skew_costs_time() -> None:
    pr = dnnplace.load_llm(QWEN3, gpus=16, seq_len=4096, global_batch=256)
    plan = search(pr, {"tp": 1, "pp": 1, "ep": 8, "routing": UNFORCED_ROUTING})
    assert plan.config.routing == UNFORCED_ROUTING
    assert search(pr, {"tp": 1, "pp": 1, "ep": 8}).config.routing == "balanced"  # not searched: balanced
    times = [evaluate(pr, dataclasses.replace(plan.config, routing=r)).step_time_s for r in ROUTINGS]
    assert times[0] < times[1] and times[0] < times[2]


def test_plan_file_round_trip_and_older_files_read_balanced() -> None:
    pr = dnnplace.load_llm(QWEN3, gpus=16, seq_len=4096, global_batch=256)
    plan = search(pr, {"tp": 1, "pp": 1, "ep": 8, "routing": "power-law-1.01"})
    doc = plan.to_dict()
    assert doc["version"] == 9 and doc["config"]["routing"] == "power-law-1.01"
    assert read_llm_plan(doc).config.routing == "power-law-1.01"
    old = {**doc, "version": 7, "config": {k: v for k, v in doc["config"].items() if k != "routing"}}
    assert read_llm_plan(old).config.routing == "balanced"
    bad = {**doc, "config": {**doc["config"], "routing": "aux"}}
    with pytest.raises(DnnplaceError, match="routing must be one of balanced"):
        read_llm_plan(bad)
