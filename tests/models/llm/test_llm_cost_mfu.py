"""MFU against the peak of the format the GEMMs run at: at most 100 % by construction (issue 33, item 11)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llm_helpers import llama, uniform

from dnnplace.core.catalogue import device_spec
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.solvers import search
from dnnplace.models.llm.spec import Cluster, LLMProblem, TrainingJob, TransformerArch


@pytest.mark.parametrize("size,gpus", [("8b", 8), ("70b", 64)])
def test_fp8_plans_stay_below_the_fp8_peak(size: str, gpus: int) -> None:
    a = llama(size)
    pr = LLMProblem(a, Cluster("h100", gpus, 8), TrainingJob(8192, 128, "fp8"), device_spec("h100"))
    est = search(pr).estimate
    assert 0 < est.mfu <= 1.0
    # NVIDIA's tables divide by the BF16 peak for every precision: the labelled second figure
    assert est.mfu_bf16_peak == pytest.approx(est.mfu * 1979 / 989)
    assert est.mfu_bf16_peak > est.mfu


def test_bf16_mfu_is_the_recipes_figure() -> None:
    a = llama("8b")
    pr = LLMProblem(a, Cluster("h100", 8, 8), TrainingJob(8192, 128), device_spec("h100"))
    est = evaluate(pr, uniform(a, 8, 1, 1, 2))
    assert est.mfu == est.mfu_bf16_peak == pytest.approx(est.model_flops_per_step / (est.step_time_s * 8 * 989e12))


@settings(max_examples=40, deadline=None)
@given(dev=st.sampled_from(["h100", "h200", "a100", "b200"]), fp8=st.booleans(), h=st.sampled_from([512, 1024, 4096]),
       layers=st.sampled_from([2, 4, 8]), seq=st.sampled_from([512, 4096, 32768]), tp=st.sampled_from([1, 2, 4]),
       window=st.sampled_from([0, 256]), mbs=st.sampled_from([1, 2]))
def test_mfu_never_exceeds_one(dev: str, fp8: bool, h: int, layers: int, seq: int, tp: int, window: int,
                               mbs: int) -> None:
    spec = device_spec(dev)
    precision = "fp8" if fp8 and "fp8" in spec.peak_flops else "bf16"
    a = TransformerArch("t", "llama", layers, h, 4 * h, 8, 8, h // 8, 32000, sliding_window=window)
    pr = LLMProblem(a, Cluster(dev, 8, 8), TrainingJob(seq, 16, precision), spec)
    est = evaluate(pr, uniform(a, 8, tp, 1, 1, mbs=mbs))
    assert 0 < est.mfu <= 1.0


def test_w6_mfu_at_half_a_million_tokens_stays_below_the_peak() -> None:
    """Llama 3.1 8B, 64 GPUs, seq 524,288, GBS 8, BF16 read 105.4 %: NeMo's count has non-causal attention,
    the kernels priced are causal; the estimate counts what is timed (issue 45, W6)."""
    from dnnplace.models.llm.evaluation import model_flops_per_step
    from dnnplace.models.llm.evaluation.flops import executed_flops_per_step

    a = llama("8b")
    pr = LLMProblem(a, Cluster("h100", 64, 8), TrainingJob(524288, 8), device_spec("h100"))
    est = search(pr).estimate
    assert 0 < est.mfu <= 1.0
    assert est.model_flops_per_step == executed_flops_per_step(a, 524288, 8) < model_flops_per_step(a, 524288, 8)
    # the causal count is the published one less (s - 1) / 2 of the s keys per query in the 12 s h term
    nemo, causal = model_flops_per_step(a, 524288, 8), executed_flops_per_step(a, 524288, 8)
    assert nemo - causal == pytest.approx(8 * 524288 * a.num_layers * 12 * a.hidden * (524288 - 1) / 2, rel=1e-9)
