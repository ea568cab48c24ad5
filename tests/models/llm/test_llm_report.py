"""The LLM plan's page draws and prints the one schedule representation the simulation times."""

from __future__ import annotations

import html

from conftest import ROOT

import dnnplace
from dnnplace.core.schedule import interleaved_1f1b
from dnnplace.models.llm.report import render_llm_report
from dnnplace.models.llm.simulation import simulate_llm

CONFIG = ROOT / "examples" / "llm" / "llama3.1-70b.json"


def _plan(**fix):
    pr = dnnplace.load_llm(CONFIG, gpus=64, seq_len=8192, global_batch=128)
    return dnnplace.solve(pr, mbs=1, **{"recompute": "none", **fix}).plan


def test_the_page_prints_each_ranks_issue_order_and_labels_tasks_by_action():
    plan = _plan(tp=4, pp=4, cp=2, vp=5)
    page = render_llm_report(plan, "t")
    order = interleaved_1f1b(4, 5, simulate_llm(plan).times.num_microbatches)
    assert html.escape(order.text()) in page and order.text().count("\n") == 4
    assert "<title>F0.1: F micro-batch 0, virtual stage 4</title>" in page


def test_a_long_order_is_left_out():
    plan = _plan(tp=2, pp=8, cp=2, vp=5, recompute="full")
    page = render_llm_report(plan, "t")
    assert "issue order omitted: more than 4,000 actions" in page and "<pre>" not in page
