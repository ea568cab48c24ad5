"""The paper report prints the issue order its simulated timeline ran: the shared Schedule's text."""

from __future__ import annotations

import html

from conftest import throughput_path

import dnnplace
from dnnplace.models.paper.report import render_report
from dnnplace.models.paper.simulation import simulate


def test_the_report_prints_the_order_the_timeline_ran():
    w = dnnplace.load_workload(throughput_path("LayerGraphs/gnmt_training"))
    split = dnnplace.solve(w, "dp").split
    sim = simulate(w, split, schedule="1f1b", microbatches=6)
    assert sim.order is not None and len(sim.order.ranks) == len(sim.devices)
    for r, seq in enumerate(sim.order.ranks):  # each device ran its actions in the schedule's order
        ran = sorted((t for t in sim.tasks if t.device == r), key=lambda t: (t.start, seq.index(t.action)))
        assert [t.action for t in ran] == list(seq)
    page = render_report(w, split, dnnplace.evaluate(w, split), sim, "t")
    assert f"<pre class='order'>{html.escape(sim.order.text())}</pre>" in page
    assert sim.order.text().splitlines()[0] == f"1f1b: {len(sim.devices)} ranks, 6 micro-batches"


def test_a_long_order_is_left_out():
    w = dnnplace.load_workload(throughput_path("LayerGraphs/gnmt_training"))
    split = dnnplace.solve(w, "dp").split
    sim = simulate(w, split, schedule="gpipe", microbatches=1000)
    page = render_report(w, split, dnnplace.evaluate(w, split), sim, "t")
    assert "issue order omitted" in page and "<pre class='order'>" not in page
