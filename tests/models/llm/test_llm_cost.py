"""The cost model's pieces against hand-computed values and the published formulas."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llm_helpers import llama, problem, uniform

from dnnplace.core.catalogue import CATALOGUE, legacy_view
from dnnplace.errors import DnnplaceError
from dnnplace.frontends.torch_model.devices import CATALOGUE as OLD
from dnnplace.models.llm.evaluation import evaluate, model_flops_per_step
from dnnplace.models.llm.evaluation.memory import layer_activation_bytes
from dnnplace.models.llm.spec import TransformerArch


def nemo_llama(gbs: int, s: int, L: int, h: int, kv: int, a: int, f: int, V: int) -> float:
    return gbs * s * L * h * h * (12 + 12 * kv / a + 18 * f / h + 12 * s / h + 6 * V / (L * h))


def test_llama_model_flops_equal_nemo_formula_and_published_mfu() -> None:
    a = llama("8b")
    mf = model_flops_per_step(a, 8192, 128)
    assert mf == pytest.approx(nemo_llama(128, 8192, 32, 4096, 8, 32, 14336, 128256), rel=1e-12)
    assert mf == pytest.approx(6.07e16, rel=2e-3)
    assert mf / (8 * 12.91 * 989e12) == pytest.approx(0.5937, abs=1e-3)
    b = llama("70b")
    assert model_flops_per_step(b, 8192, 128) == pytest.approx(
        nemo_llama(128, 8192, 80, 8192, 8, 64, 28672, 128256), rel=1e-12)


def test_gpt3_and_nemotron_flops_equal_nemo_formulas() -> None:
    # NeMo gpt3: (24 gbs s h^2 + 4 gbs s^2 h) * 3 L + 6 gbs s h V  (MHA, ungated 4h MLP)
    g = TransformerArch("gpt3-175b", "gpt2", 96, 12288, 4 * 12288, 96, 96, 128, 51200, mlp="gelu",
                        position="learned", norm="layer")
    gbs, s, h, L, V = 1536, 2048, 12288, 96, 51200
    want = (24 * gbs * s * h * h + 4 * gbs * s * s * h) * 3 * L + 6 * gbs * s * h * V
    assert model_flops_per_step(g, s, gbs) == pytest.approx(want, rel=1e-12)
    # Nemotron (squared ReLU, ungated, GQA): 12 + 12 kv/a + 12 f/h + 12 s/h + 6 V/(L h)
    n = TransformerArch("nemotron4-15b", "nemotron", 32, 6144, 24576, 48, 8, 128, 256000, mlp="relu2", norm="layer")
    gbs, s, h, L, V, f = 256, 4096, 6144, 32, 256000, 24576
    want = gbs * s * L * h * h * (12 + 12 * 8 / 48 + 12 * f / h + 12 * s / h + 6 * V / (L * h))
    assert model_flops_per_step(n, s, gbs) == pytest.approx(want, rel=1e-12)


GPT = st.builds(lambda h_units, a, L: TransformerArch("g", "gpt2", L, 64 * h_units, 256 * h_units, a, a,
                                                        64 * h_units // a, 1000, mlp="gelu", dropout=True),
                st.sampled_from([8, 16, 32]), st.sampled_from([1, 2, 4, 8]), st.just(2))


@settings(max_examples=40, deadline=None)
@given(arch=GPT, s=st.sampled_from([128, 512, 2048]), b=st.integers(1, 4), t=st.sampled_from([1, 2, 4, 8]))
def test_activation_bytes_equal_korthikanti(arch: TransformerArch, s: int, b: int, t: int) -> None:
    h, a = arch.hidden, arch.heads

    def act(rc: int, sp: bool = True, flash: bool = False) -> float:
        return float(layer_activation_bytes(arch, np.array(s), np.array(b), np.array(t), np.array(sp),
                                            np.array(rc), flash=flash))

    assert act(0) == pytest.approx(s * b * h * (34 + 5 * a * s / h) / t)
    assert act(1) == pytest.approx(34 * s * b * h / t)
    assert act(0, sp=False) == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))
    assert act(1, sp=False) == pytest.approx(s * b * h * (10 + 24 / t))
    assert act(2, sp=False) == pytest.approx(2 * s * b * h)  # full recomputation: the layer input
    assert act(2) == pytest.approx(2 * s * b * h / t)  # ... sequence-parallel: its shard
    assert act(0, flash=True) < act(0)  # flash stores no a s^2 tensors


@pytest.mark.parametrize("pp,vp,m", [(4, 1, 8), (4, 5, 64), (2, 2, 4), (8, 2, 16)])
def test_uniform_bubble_fraction(pp: int, vp: int, m: int) -> None:
    """The evaluator's pipeline term: uniform stages without transfers leave a bubble of exactly (p-1)/(v m)."""
    from dnnplace.models.llm.evaluation.schedule import makespan

    x = 2.5  # per micro-batch on each rank, split over its v chunks as forward 1/3, backward 2/3
    f, b = np.full((1, pp * vp), x / vp / 3), np.full((1, pp * vp), 2 * x / vp / 3)
    t = float(makespan(pp, vp, m, f, b, np.zeros(1))[0])
    assert (t - m * x) / (m * x) == pytest.approx((pp - 1) / (vp * m), rel=1e-12)


def test_uniform_bubble_in_evaluator_breakdown() -> None:
    # with tied embeddings off the extras make stages uneven; the bubble still equals T - m * max stage
    a = llama("70b")
    pr = problem(a, 64, 128)
    e = evaluate(pr, uniform(a, 64, 4, 4, 2, vp=5))
    tb = e.time_breakdown
    assert sum(tb.values()) == pytest.approx(e.step_time_s, rel=1e-9)
    assert 0 < tb["bubble"] < 0.05 * e.step_time_s


def test_70b_without_model_parallelism_does_not_fit_and_names_the_memory() -> None:
    a = llama("70b")
    e = evaluate(problem(a, 64, 128), uniform(a, 64, 1, 1, 1))
    assert not e.fits
    assert e.overflow in ("weights", "gradients", "optimizer", "activations")
    assert e.memory_breakdown["weights"] > 140e9


def test_published_configs_fit() -> None:
    a, b = llama("8b"), llama("70b")
    assert evaluate(problem(a, 8, 128), uniform(a, 8, 1, 1, 2)).fits
    assert evaluate(problem(b, 64, 128), uniform(b, 64, 4, 4, 2, vp=5)).fits


def test_legacy_view_keeps_the_old_catalogue() -> None:
    # the profiler's roofline figures before the catalogues became one (values as they were)
    assert OLD is not None and legacy_view() == OLD == {
        "v100": {"peak_flops": 125e12, "mem_bw": 0.9e12, "memory": 32e9, "link_bw": 150e9, "link_latency_ms": 0.01},
        "t4": {"peak_flops": 65e12, "mem_bw": 0.32e12, "memory": 16e9, "link_bw": 16e9, "link_latency_ms": 0.02},
        "a100": {"peak_flops": 312e12, "mem_bw": 2.0e12, "memory": 80e9, "link_bw": 300e9, "link_latency_ms": 0.01},
        "h100": {"peak_flops": 989e12, "mem_bw": 3.35e12, "memory": 80e9, "link_bw": 450e9, "link_latency_ms": 0.01},
        "h200": {"peak_flops": 989e12, "mem_bw": 4.8e12, "memory": 141e9, "link_bw": 450e9, "link_latency_ms": 0.01},
        "cpu": {"peak_flops": 150e9, "mem_bw": 25e9}}
    for spec in CATALOGUE.values():
        assert spec.sources, spec.name


@pytest.mark.parametrize("kw,msg", [({"tp": 16, "pp": 2, "dp": 1}, "tp=16 must divide"),
                                    ({"vp": 3}, "layers_per_stage needs"), ({"cp": 3}, r"tp\*pp\*cp\*dp = 96")])
def test_invalid_configs_are_one_line_errors(kw: dict, msg: str) -> None:
    from dataclasses import replace

    a = llama("70b")
    cfg = replace(uniform(a, 64, 4, 4, 2, vp=5), **kw)
    with pytest.raises(DnnplaceError, match=msg):
        evaluate(problem(a, 64, 128), cfg)


def test_every_training_stack_figure_has_a_source() -> None:
    import dataclasses

    from dnnplace.core.catalogue import TRAINING_STACK, TrainingStack

    names = {f.name for f in dataclasses.fields(TrainingStack)} - {"sources"}
    assert set(TRAINING_STACK.sources) == names and all(TRAINING_STACK.sources.values())
