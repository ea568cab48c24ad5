"""An engine is priced from the measured tables of its own framework only: llama.cpp and a Hugging Face
``generate`` (no table measured their kernels) are roofline on every GPU, tables or not, and say so."""

from __future__ import annotations

from pathlib import Path

import pytest

import dnnplace
from dnnplace.models.serving.cost import Iteration, engine_kernels, layer_times
from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.load import problem

ROOT = Path(__file__).resolve().parents[3]
M8B = ROOT / "examples" / "serving" / "llama3.1-8b.json"


@pytest.mark.parametrize(("engine", "precision"), [("llama.cpp", "q4_k_m"), ("hf", "bf16")])
def test_engines_no_table_measured_are_roofline_on_a_table_gpu(engine, precision):
    p = problem(M8B, gpus="1xh100", engine=engine, precision=precision, isl=512, osl=128, concurrency=1)
    ev = evaluate(p, dnnplace.solve(p, time_limit=10).plan.config)
    assert set(ev.sources) == {"roofline"}


def test_an_engine_with_tables_still_reads_them():
    p = problem(M8B, gpus="1xh100", engine="vllm", isl=512, osl=128)
    lt = layer_times(p.model, "h100", 1, Iteration(8.0, 600.0, 0.0, 512), "vllm")
    assert set(lt.sources) - {"roofline"}  # measured, interpolated or extrapolated prices
    assert engine_kernels("h100", None).measured is False and engine_kernels("h100", "trtllm").measured
