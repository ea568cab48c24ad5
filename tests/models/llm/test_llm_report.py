"""The LLM plan's page shows what the plan document says: every number drawn is checked against the document
``dnnplace plan --json`` writes (the step and its band, the runner-ups and the compared layout, memory per GPU
and the limit, the kernel sources, the host's exposed time), and the timeline against the simulated schedule."""

from __future__ import annotations

import dataclasses
import functools
import html
import json
import math

import pytest
from browser import dom_of, parse, screenshot
from conftest import ROOT
from hostile import invoke

import dnnplace
from dnnplace.core.schedule import interleaved_1f1b
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.plan_doc import plan_document, runner_up_doc
from dnnplace.models.llm.published import CONFIGS
from dnnplace.models.llm.report import render_llm_report, write_llm_report
from dnnplace.models.llm.report_svg import MAX_TASK_BOXES, SEGMENTS
from dnnplace.models.llm.simulation import simulate_llm
from dnnplace.models.llm.solvers.search import price_pins
from dnnplace.models.llm.spec import LLMPlan, ParallelConfig

CONFIG = ROOT / "examples" / "llm" / "llama3.1-70b.json"
RIVAL = {"tp": 4, "pp": 4, "cp": 2, "vp": 5, "mbs": 1}


def _plan(**fix):
    pr = dnnplace.load_llm(CONFIG, gpus=64, seq_len=8192, global_batch=128)
    return dnnplace.solve(pr, mbs=1, **{"recompute": "none", **fix}).plan


@functools.cache
def _searched():
    """Llama 3.1 70B on 64 H100s: the plan, its three runner-ups and a compared layout, as ``plan`` finds them."""
    pr = dnnplace.load_llm(CONFIG, gpus=64, seq_len=8192, global_batch=128)
    sol = dnnplace.solve(pr, "llm-search", runner_ups=3, mbs=1)
    ups = list(sol.stats["runner_ups"])
    rival = price_pins(pr, RIVAL)
    page = render_llm_report(sol.plan, "t", runner_ups=ups, compared=[rival])
    doc = plan_document(sol.plan, ups)
    doc["compared"] = runner_up_doc(pr, sol.plan.estimate.step_time_s, rival)
    return sol.plan, ups, rival, page, doc


@functools.cache
def _host_bound():
    """Qwen3-30B-A3B on 8 B200s, eager (no CUDA graphs), pp 1, ep 8: the host's issue time is exposed."""
    pr = dnnplace.load_llm(CONFIGS / "qwen3-30b-a3b.json", gpus=8, seq_len=4096, global_batch=64, device="b200")
    cfg = ParallelConfig(1, 1, 1, 1, 8, 1, "none", False, True, (48,), ep=8)
    est = evaluate(pr, cfg)
    return LLMPlan(pr, cfg, est, "fixed", est.step_time_s, 0.0, False, 0.0)


def test_the_page_prints_each_ranks_issue_order_and_labels_tasks_by_action():
    plan = _plan(tp=4, pp=4, cp=2, vp=5)
    page = render_llm_report(plan, "t")
    order = interleaved_1f1b(4, 5, simulate_llm(plan).times.num_microbatches)
    assert html.escape(order.text()) in page and order.text().count("\n") == 4
    assert "<title>F0.1: F micro-batch 0, virtual stage 4, " in page


def test_a_long_order_is_left_out():
    plan = _plan(tp=2, pp=8, cp=2, vp=5, recompute="full")
    page = render_llm_report(plan, "t")
    assert "issue order omitted: more than 4,000 actions" in page and "<pre>" not in page


def test_the_headline_is_the_documents_step_and_band():
    plan, _, _, page, doc = _searched()
    (head,) = parse(page).having("headline")
    band = doc["error_band"]
    assert float(head["data-step-s"]) == pytest.approx(doc["prediction"]["step_time_s"], rel=1e-5)
    assert float(head["data-band-low-s"]) == pytest.approx(band["measured_low_s"], rel=1e-5)
    assert float(head["data-band-high-s"]) == pytest.approx(band["measured_high_s"], rel=1e-5)
    assert f"{100 * band['low']:+.1f} % .. {100 * band['high']:+.1f} %" in page and f"{band['rows']} published" in page


def test_the_step_chart_holds_the_plan_its_runner_ups_and_the_compared_layout():
    plan, ups, rival, page, doc = _searched()
    bars = parse(page).having("step")
    assert [b["data-role"] for b in bars] == ["plan", *["runner-up"] * len(ups), "compared"] and len(ups) == 3
    want = [doc["prediction"], *doc["runner_ups"], doc["compared"]]
    band = doc["error_band"]
    for bar, w in zip(bars, want):
        t = w["step_time_s"]
        assert float(bar["data-step-s"]) == pytest.approx(t, rel=1e-5)
        assert bar["data-fits"] == str(w["fits"]).lower()
        # the whisker: the step times the band's errors allow (predicted / (1 + error))
        assert float(bar["data-band-low-s"]) == pytest.approx(t / (1 + band["high"]), rel=1e-5)
        assert float(bar["data-band-high-s"]) == pytest.approx(t / (1 + band["low"]), rel=1e-5)
    assert float(bars[0]["data-band-low-s"]) == pytest.approx(band["measured_low_s"], rel=1e-5)
    rows = parse(page).having("runner")
    assert [r["data-role"] for r in rows] == ["runner-up"] * 3 + ["compared"]
    assert f"{100 * doc['compared']['vs_plan']:+.2f} %" in page
    verdict = "yes" if not doc["compared"]["within_band"] else "no"
    assert page.split("data-role='compared'><td")[1].split("</tr>")[0].endswith(f"<td>{verdict}</td>")
    assert "vp 7" in page.split("class='step plan'")[1][:300]  # each bar names its layout
    assert "runner-up 2: tp 8 pp 2 vp 14" in page


def test_memory_bars_are_each_layouts_breakdown_against_the_limit():
    plan, ups, rival, page, doc = _searched()
    t = parse(page)
    bars = t.having("membar")
    assert [b["data-role"] for b in bars] == ["plan", "runner-up", "runner-up", "runner-up", "compared"]
    segs = t.having("seg")
    assert len(segs) == len(SEGMENTS) * len(bars)
    for i, (bar, p) in enumerate(zip(bars, [plan, *ups, rival])):
        mine = {a["class"].split()[1][4:]: float(a["data-gb"]) for a in segs[5 * i:5 * i + 5]}
        assert mine == pytest.approx({k: v / 1e9 for k, v in p.estimate.memory_breakdown.items()}, abs=1e-4)
        assert float(bar["data-total-gb"]) == pytest.approx(sum(mine.values()), abs=1e-3)
    assert float(bars[0]["data-total-gb"]) == pytest.approx(doc["prediction"]["memory_per_gpu_bytes"] / 1e9, abs=1e-3)
    assert float(bars[-1]["data-total-gb"]) == pytest.approx(doc["compared"]["memory_per_gpu_bytes"] / 1e9, abs=1e-3)
    (limit,) = t.having("limit")
    assert float(limit["data-gb"]) == pytest.approx(plan.problem.device.usable_memory_bytes / 1e9, abs=1e-4)
    legend = page.split("class='legend'")[1]
    for word in ("weights", "gradients", "optimizer state", "activations", "other"):
        assert f">{word}" in legend


def test_the_kernel_sources_table_is_the_documents():
    _, _, _, page, doc = _searched()
    ks = doc["kernel_sources"]
    fams = parse(page).having("family")
    assert [f["data-family"] for f in fams] == [f for f, v in ks["families"].items() if v["counts"]]
    for f in fams:
        for name, n in ks["families"][f["data-family"]]["counts"].items():
            share = ks["families"][f["data-family"]]["seconds_share"][name]
            assert f"{100 * share:.1f} % ({n})" in page
    assert "kernel sources (catalogue; measured kernel tables off)" in page


def test_the_timeline_draws_every_task_on_its_rank():
    plan = _plan(tp=4, pp=4, cp=2, vp=5)
    sim = simulate_llm(plan)
    t = parse(render_llm_report(plan, "t"))
    (svg,) = [a for tag, a in t.tags if tag == "svg" and a.get("class") == "timeline"]
    assert svg["data-drawn"] == "tasks" and int(svg["data-tasks"]) == len(sim.run.tasks) <= MAX_TASK_BOXES
    assert float(svg["data-makespan-s"]) == pytest.approx(sim.pipeline_s, rel=1e-5)
    ranks = t.having("rank")
    assert [int(r["data-rank"]) for r in ranks] == list(range(4))
    assert [float(r["data-busy-s"]) for r in ranks] == pytest.approx(list(sim.run.busy), rel=1e-5)
    assert len(t.having("task")) == len(sim.run.tasks)
    assert t.having("tail")  # the exposed DP communication and optimizer step after the schedule


def test_sixty_four_stages_stay_one_bounded_readable_picture():
    """pp 64 and 1,024 micro-batches: 131,072 tasks become each rank's busy share, and the busy seconds add up."""
    pr = dnnplace.load_llm(CONFIG, gpus=512, seq_len=8192, global_batch=1024)
    plan = dnnplace.solve(pr, mbs=1, tp=8, pp=64, recompute="full").plan
    sim = simulate_llm(plan)
    page = render_llm_report(plan, "t")
    t = parse(page)
    (svg,) = [a for tag, a in t.tags if tag == "svg" and a.get("class") == "timeline"]
    assert svg["data-drawn"] == "runs" and int(svg["data-tasks"]) == len(sim.run.tasks) > 100_000
    assert len(t.having("rank")) == 64 and "rank 63</text>" in page
    runs = t.having("run")
    assert len(runs) <= 64 * 1200 and len(page) < 6e6  # bounded by the width, not by the tasks
    per_rank = page.split("<g class='rank'")[1:]
    for r, chunk in enumerate(per_rank):
        busy = sum(float(a["data-busy-s"]) for a in parse(chunk).having("run"))
        assert busy == pytest.approx(sim.run.busy[r], rel=1e-3)


def test_a_host_bound_step_is_warned_and_cuda_graphs_priced():
    plan = _host_bound()
    doc = plan_document(plan)["host"]
    assert doc["host_bound"] and doc["with_graphs"]["saves_s"] > 0
    page = render_llm_report(plan, "t")
    t = parse(page)
    (warn,) = t.having("host-bound")
    assert float(warn["data-exposed-s"]) == pytest.approx(doc["exposed_s"], rel=1e-5)
    assert "warning: the step is host-bound" in page and f"({100 * doc['share']:.1f} %)" in page
    (graphs,) = t.having("graphs")
    assert float(graphs["data-saves-s"]) == pytest.approx(doc["with_graphs"]["saves_s"], rel=1e-5)
    assert "pin cuda_graphs=attn+moe_router+moe_preprocess" in page
    assert "no runner-up nor compared configuration" in page.lower()
    assert not parse(_searched()[3]).having("host-bound") and "not host-bound" in _searched()[3]


def test_a_run_without_a_band_says_why():
    pr = dnnplace.load_llm(CONFIG, gpus=64, seq_len=8192, global_batch=128, device="a100")
    plan = dnnplace.solve(pr, mbs=1, tp=8, pp=4, vp=5, recompute="full").plan
    page = render_llm_report(plan, "t")
    (head,) = parse(page).having("headline")
    assert "data-band-low-s" not in head and "no error band: none: no published" in page
    assert "data-band-low-s" not in parse(page).having("step")[0]


def test_a_plan_that_does_not_fit_is_drawn_over_the_limit():
    pr = dnnplace.load_llm(CONFIG, gpus=64, seq_len=8192, global_batch=128)
    plan = price_pins(pr, {"tp": 1, "pp": 1, "cp": 1, "vp": 1, "mbs": 1, "offload_layers": 0,
                                "recompute": "none", "zero": 1})
    assert not plan.estimate.fits
    t = parse(render_llm_report(plan, "t"))
    assert t.having("over") and t.having("step")[0]["data-fits"] == "false"


def test_names_are_escaped_and_nothing_is_fetched(tmp_path):
    plan, ups, rival, _, _ = _searched()
    evil = dataclasses.replace(plan, problem=dataclasses.replace(
        plan.problem, arch=dataclasses.replace(plan.problem.arch, name="<script>x</script>'\"")))
    out = write_llm_report(evil, tmp_path / "r.html", title="<i>", runner_ups=ups, compared=[rival])
    page = out.read_text(encoding="utf-8")
    assert "<script>" not in page and "<i>" not in page and "&lt;script&gt;" in page and "&lt;i&gt;" in page
    rest = page.replace("xmlns='http://www.w3.org/2000/svg'", "")
    assert "http" not in rest and " src=" not in rest and " href=" not in rest and "url(" not in rest
    assert sorted(x.name for x in tmp_path.iterdir()) == ["r.html"]


def test_plan_report_shows_the_runner_ups_and_the_compared_layout(tmp_path):
    out, js = tmp_path / "r.html", tmp_path / "p.json"
    code, stdout, err = invoke("plan", CONFIG, "--gpus", 64, "--seq-len", 8192, "--global-batch", 128, "--fix",
                               "mbs=1", "--runner-ups", 2, "--compare", "tp=4,pp=4,cp=2,vp=5,mbs=1", "--report",
                               out, "-o", js)
    assert code == 0, err
    doc = json.loads(js.read_text())
    bars = parse(out.read_text(encoding="utf-8")).having("step")
    assert [b["data-role"] for b in bars] == ["plan", "runner-up", "runner-up", "compared"]
    want = [doc["prediction"], *doc["runner_ups"], doc["compared"]]
    assert [float(b["data-step-s"]) for b in bars] == pytest.approx([w["step_time_s"] for w in want], rel=1e-5)


@pytest.mark.slow  # starts a browser process
def test_the_report_renders_in_headless_chromium(tmp_path):
    plan, ups, rival, _, _ = _searched()
    report = write_llm_report(plan, tmp_path / "llm.html", runner_ups=ups, compared=[rival])
    dom = dom_of(report, tmp_path)
    for cls in ("steps", "memory", "timeline"):
        assert f'<svg class="{cls}"' in dom
    assert dom.count('class="step ') == 5 and dom.count('class="membar') == 5
    assert dom.count('class="task"') == len(simulate_llm(plan).run.tasks)
    screenshot(report, tmp_path, 1300, 2400, 2000)
    assert math.isfinite(plan.estimate.step_time_s)
