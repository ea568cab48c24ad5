"""The serving plan's HTML page: every stage, bar and curve point it draws is the evaluator's figure."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from pathlib import Path

import numpy as np
import pytest
from browser import dom_of, parse, screenshot

from dnnplace.core.catalogue import device_spec
from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.baselines import Baseline
from dnnplace.models.serving.evaluation import ServingEvaluation, evaluate
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.report import curve, proof_line, render_report, write_report
from dnnplace.models.serving.report_svg import layer_range
from dnnplace.models.serving.search import search
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, ServingProblem


@dataclasses.dataclass
class Built:
    p: ServingProblem
    plan: ServingPlan
    ev: ServingEvaluation
    runner_ups: list[tuple[ServingConfig, ServingEvaluation]]
    rows: list[Baseline]


def _with_layers(c: ServingConfig, layers: tuple[int, ...]) -> ServingConfig:
    r = c.replicas[0]
    return dataclasses.replace(c, replicas=(Replica(tuple(dataclasses.replace(s, layers=n)
                                                          for s, n in zip(r.stages, layers))),))


@functools.cache
def _build(model: Path) -> Built:
    """A mixed node (2 x A100 + 2 x T4, a 70B model in FP8) at two stages: the plan, two runner-ups, baselines
    (unpinned, the search puts the A100s at both ends of four stages)."""
    p = problem(model, gpus="2xa100+2xt4", precision="fp8", isl=512, osl=128)
    plan = search(p, time_limit=20, pp=2)
    ev = evaluate(p, plan.config)
    assert ev.fits and plan.config.replicas[0].pp == 2
    ups = [c for c in plan.meta.get("runner_ups", [])]
    first = plan.config.replicas[0].stages[0].layers
    ups.append(_with_layers(plan.config, (first - 3, 83 - first)))  # a worse split of the same stages
    ups.append(_with_layers(plan.config, (40, 40)))  # the even split: the T4s cannot hold 40 layers
    runner_ups = [(c, evaluate(p, c)) for c in ups]
    worse = runner_ups[-2][1]
    rows = [Baseline("engine-even", runner_ups[-1][0], runner_ups[-1][1], None, "even split; " + runner_ups[-1][1].why),
            Baseline("accelerate-balanced", runner_ups[-2][0], worse, ev.value / worse.value, "balanced by size")]
    return Built(p, plan, ev, runner_ups, rows)


@pytest.fixture
def built(llama70b) -> Built:
    return _build(llama70b)


def _page(b: Built) -> str:
    return render_report(b.p, b.plan, b.ev, runner_ups=b.runner_ups, baselines=b.rows)


def test_every_stage_is_drawn_with_its_gpus_and_layer_range(built):
    page = _page(built)
    t = parse(page)
    stages = t.having("stage")
    assert len(stages) == sum(r.pp for r in built.plan.config.replicas)
    for r, rep in enumerate(built.plan.config.replicas):
        first = 0
        for k, s in enumerate(rep.stages):
            (a,) = [a for a in stages if a["data-replica"] == str(r) and a["data-stage"] == str(k)]
            assert (a["data-gpu"], a["data-node"], a["data-gpus"]) == (s.gpu, str(s.node), ",".join(map(str, s.gpus)))
            assert (int(a["data-first"]), int(a["data-layers"])) == (first, s.layers)
            assert layer_range(first, s.layers) in page
            first += s.layers
        assert first == built.p.model.num_layers
    gpus = t.having("gpu")
    assert len(gpus) == len(built.p.fleet.gpus)
    assert all(g["data-use"] != "idle" for g in gpus)  # the plan uses all four GPUs
    assert len(t.having("node")) == len(built.p.fleet.nodes)


def test_an_idle_gpu_is_drawn_idle(built):
    a100s = ServingConfig((Replica((dataclasses.replace(built.plan.config.replicas[0].stages[1], layers=80),)),),
                          256, 8192)
    ev = evaluate(built.p, a100s)
    assert ev.fits
    t = parse(render_report(built.p, ServingPlan(a100s, "feasible"), ev))
    uses = sorted(g["data-use"] for g in t.having("gpu"))
    assert uses == ["idle", "idle", "replica 1 stage 1", "replica 1 stage 1"]
    assert len(t.having("membar")) == 2


def test_a_gpu_given_to_two_stages_is_flagged(built):
    twice = dataclasses.replace(built.plan.config, replicas=built.plan.config.replicas * 2)
    page = render_report(built.p, ServingPlan(twice, "feasible"), evaluate(built.p, twice))
    t = parse(page)
    assert len(t.having("clash")) == 1 + 4  # the warning and every GPU of the node
    assert "Invalid deployment" in page and "node 0 GPU 0" in page
    assert not parse(_page(built)).having("clash")


def test_memory_bars_are_the_evaluations_figures(built):
    t = parse(_page(built))
    bars = t.having("membar")
    want = built.ev.to_dict()["memory_gib"]
    rows = [(m, s) for rep, mem in zip(built.plan.config.replicas, want) for s, m in zip(rep.stages, mem)
            for _ in s.gpus]
    assert len(bars) == len(rows) == len(built.p.fleet.gpus)
    segs = [a for _, a in t.tags if "seg" in a.get("class", "").split()]
    assert len(segs) == 6 * len(rows)
    for i, (m, s) in enumerate(rows):
        mine = {a["class"].split()[1][4:]: float(a["data-gib"]) for a in segs[6 * i:6 * i + 6]}
        assert mine["weights"] == pytest.approx(m["weights"], abs=2e-3)
        assert mine["activations"] == pytest.approx(m["activations"], abs=2e-3)
        assert mine["graphs"] == pytest.approx(m["cuda_graphs"], abs=2e-3)
        assert mine["kv"] + mine["kv_idle"] == pytest.approx(m["kv_cache"], abs=4e-3)
        cap = device_spec(s.gpu).usable_memory_bytes / 2**30
        assert float(bars[i]["data-capacity-gib"]) == pytest.approx(cap, abs=2e-3)
        total = sum(mine.values())
        assert total == pytest.approx(cap, abs=0.02)  # the segments fill the GPU (the plan fits)
        assert "over" not in bars[i]["class"]
    # the KV cache used is the replica's tokens at each stage's bytes per token (the cross-stage minimum)
    rev = built.ev.replicas[0]
    for k, mem in enumerate(rev.memory):
        used = rev.kv_tokens * mem.kv_per_token / 2**30
        first_gpu = sum(s.tp for s in built.plan.config.replicas[0].stages[:k])
        assert float(segs[6 * first_gpu + 3]["data-gib"]) == pytest.approx(used, abs=2e-3)


def test_stage_times_match_and_the_bottleneck_is_marked(built):
    t = parse(_page(built))
    bars = t.having("tbar")
    assert [float(a["data-ms"]) for a in bars] == pytest.approx(
        [x * 1e3 for r in built.ev.replicas for x in r.stage_s], rel=1e-6)
    marked = t.having("bottleneck")
    assert len(marked) == len(built.ev.replicas)
    for a in marked:
        r = built.ev.replicas[int(a["data-replica"])]
        assert int(a["data-stage"]) == int(np.argmax(r.stage_s))


def test_the_curve_holds_the_plan_and_its_runner_ups_and_rings_the_plan(built):
    t = parse(_page(built))
    series = t.having("series")
    assert len(series) == 1 + len(built.runner_ups)
    (chosen,) = t.having("chosen")
    assert float(chosen["data-tpot-ms"]) == pytest.approx(built.ev.tpot_ms, rel=1e-6)
    assert float(chosen["data-tokens-per-s"]) == pytest.approx(built.ev.output_tokens_per_s, rel=1e-6)
    pts = curve(built.p, built.plan.config)
    assert int(series[0]["data-points"]) == len(pts) >= 5
    # the plan's own max_num_seqs is on its curve, at the evaluated point
    (own,) = [x for x in pts if x[0] == built.plan.config.max_num_seqs]
    assert own[1:] == pytest.approx((built.ev.tpot_ms, built.ev.output_tokens_per_s), rel=1e-9)
    for b, tpot, tok in pts:
        ev = evaluate(built.p, dataclasses.replace(built.plan.config, max_num_seqs=b))
        assert (tpot, tok) == pytest.approx((ev.tpot_ms, ev.output_tokens_per_s), rel=1e-9)
    assert [x[0] for x in pts] == sorted(x[0] for x in pts)
    assert [x[2] for x in pts][:4] == sorted(x[2] for x in pts)[:4]  # throughput grows with the first batches
    assert int(series[-1]["data-points"]) == len(curve(built.p, built.runner_ups[-1][0]))


def test_summary_baselines_and_proof_line(built):
    page = _page(built)
    t = parse(page)
    ev = built.ev
    assert f"{ev.output_tokens_per_s:,.1f}" in page and f"{ev.tpot_ms:,.2f} ms" in page
    assert f"{ev.ttft_ms:,.2f} ms" in page and f"{int(ev.replicas[0].kv_tokens):,}" in page
    names = [a["data-name"] for a in t.having("baseline")]
    assert names == [b.name for b in built.rows]
    row = re.search(r"data-name='accelerate-balanced'>(.*?)</tr>", page)
    assert row and f"{built.rows[-1].gain:.2f}\u00d7" in row.group(1)
    assert re.search(r"data-name='engine-even'><td class='l'>engine-even</td><td>does not fit</td><td>\u2014", page)
    line = proof_line(built.plan, ev)
    assert line in page.replace("&#x27;", "'")
    assert f"status {built.plan.status}" in line and f"bound {built.plan.bound:,.1f}" in line
    assert f"error band \u00b1{100 * ev.error_band:.1f} %" in line
    for k, v in ev.sources.items():
        assert f"{v} {k}" in line
    gap = (built.plan.bound - ev.value) / built.plan.bound
    assert f"gap {100 * gap:.2f} %" in line
    assert len(t.having("runner")) == 1 + len(built.runner_ups)


def test_the_verdict_names_each_miss(built, llama70b):
    assert "fits; meets the load and the SLOs" in _page(built)
    p = problem(llama70b, gpus="2xa100+2xt4", precision="fp8", isl=512, osl=128, rate=1000.0, tpot_ms=10)
    ev = evaluate(p, built.plan.config)
    page = render_report(p, built.plan, ev)
    assert ev.saturated and "saturated: 1000 requests/s asked" in page
    assert f"TPOT {ev.tpot_ms:.1f} ms over the SLO 10 ms" in page and "TTFT" not in page.split("verdict")[1][:200]
    assert parse(page).having("slo")  # the TPOT SLO drawn on the curve


def test_a_false_bound_is_called_false(built):
    claim = dataclasses.replace(built.plan, bound=built.ev.value / 2, gap=0.0)
    assert "the claim is false" in proof_line(claim, built.ev)
    assert "no bound" in proof_line(dataclasses.replace(built.plan, bound=None, gap=None), built.ev)


def test_a_deployment_that_does_not_fit_says_why(built):
    c, ev = built.runner_ups[-1]
    assert not ev.fits
    page = render_report(built.p, ServingPlan(c, "infeasible"), ev)
    t = parse(page)
    assert "does NOT fit" in page and "t4" in ev.why and ev.why.split(":")[0] in page
    assert not t.having("chosen") and not t.having("tbar")
    assert "no stage time" in page
    assert t.having("over")  # the T4s' bars say they are over the engine's budget


def test_a_search_that_found_nothing_says_so(llama70b):
    p = problem(llama70b, gpus="1xt4", precision="bf16", isl=128, osl=128)
    plan = search(p, time_limit=5)
    assert plan.status == "infeasible" and not plan.config.replicas
    page = render_report(p, plan, evaluate(p, plan.config))
    assert "no deployment (search status infeasible)" in page and "fits; meets" not in page
    assert "no GPU is used" in page and "no point of the curve fits" in page
    assert parse(page).having("gpu")[0]["data-use"] == "idle"


def test_names_are_escaped_and_nothing_is_fetched(built):
    evil = dataclasses.replace(built.p, model=dataclasses.replace(built.p.model, name="<script>x</script>'\""))
    page = render_report(evil, built.plan, built.ev, baselines=[Baseline("<b>", None, None, None, "<i>")])
    assert "<script>" not in page and "<b>" not in page and "<i>" not in page
    assert "&lt;script&gt;" in page
    rest = page.replace("xmlns='http://www.w3.org/2000/svg'", "")
    assert "http" not in rest and " src=" not in rest and " href=" not in rest and "url(" not in rest


def test_write_report_is_atomic_and_refuses_links_and_folders(built, tmp_path):
    out = tmp_path / "r.html"
    got = write_report(built.p, built.plan, built.ev, out, runner_ups=built.runner_ups, baselines=built.rows)
    assert got == out and out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["r.html"]  # no temporary file left behind
    target = tmp_path / "target.html"
    target.write_text("keep")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    with pytest.raises(DnnplaceError, match="link"):
        write_report(built.p, built.plan, built.ev, link)
    assert target.read_text() == "keep"
    with pytest.raises(DnnplaceError, match="directory"):
        write_report(built.p, built.plan, built.ev, tmp_path)


@pytest.mark.slow  # starts a browser process
def test_the_report_renders_in_headless_chromium(built, tmp_path):
    report = write_report(built.p, built.plan, built.ev, tmp_path / "serve.html", runner_ups=built.runner_ups,
                          baselines=built.rows)
    dom = dom_of(report, tmp_path)
    for cls in ("fleet", "memory", "times", "curve"):
        assert f'<svg class="{cls}"' in dom
    assert dom.count('class="stage"') == 2 and dom.count('class="gpu"') == 4
    assert dom.count("<polyline") == 1 + len(built.runner_ups) and 'class="chosen"' in dom
    assert dom.count("<rect") > 40
    screenshot(report, tmp_path, 1300, 1800, 1000)
    assert math.isfinite(built.ev.output_tokens_per_s)
