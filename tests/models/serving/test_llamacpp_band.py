"""llama.cpp on GGUF-quantized weights carries the band its published forward rates show, recomputed here from
the rows ``benchmarks/llamacpp_ubatch.py`` checks (so the figure in the catalogue cannot drift from them)."""

from __future__ import annotations

import json

import pytest

from dnnplace.models.serving.catalogue import BAND, LLAMA_CPP_GGUF_BAND
from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage


def test_the_band_is_the_largest_miss_of_the_published_gguf_rows(benchmark_module):
    bench = benchmark_module("llamacpp_ubatch")
    rows = json.loads(bench.ROWS.read_text())["rows"]
    miss = {q: max(abs(r["tokens_per_s"] / bench.predicted(r) - 1.0) for r in rows
                   if (r["type"] in ("BF16", "F16")) != q) for q in (True, False)}
    assert round(miss[True], 2) == LLAMA_CPP_GGUF_BAND
    assert miss[False] <= BAND["roofline"]  # the 16-bit rows: the roofline's own band holds


@pytest.mark.parametrize("precision, band", [("q4_k_m", LLAMA_CPP_GGUF_BAND), ("bf16", BAND["roofline"])])
def test_a_llama_cpp_plan_says_it(llama8b, precision, band):
    p = problem(llama8b, gpus="1xrtx-4090", engine="llama.cpp", precision=precision, isl=512, osl=128)
    ev = evaluate(p, ServingConfig((Replica((Stage("rtx-4090", 0, (0,), 32),)),), 4, 512))
    assert ev.fits and ev.error_band == pytest.approx(band)


def test_the_report_says_why_the_band_is_wide(llama8b, tmp_path):
    from dnnplace.models.serving.report import render_report
    from dnnplace.models.serving.search import search

    p = problem(llama8b, gpus="1xrtx-4090", engine="llama.cpp", precision="q4_0", isl=512, osl=128)
    plan = search(p, time_limit=30)
    html = render_report(p, plan, evaluate(p, plan.config), baselines=[])
    assert "GGUF kernels" in html and "llamacpp_ubatch.md" in html
