"""The ZeRO-stage and gradient-dtype knobs: memory per stage against hand-computed bytes (the ZeRO paper's
2 + 2 + K split), the exposed collectives against hand-computed seconds, the search against brute force with
the new knobs, pins and their hostile values, the plan-file codec, and the runner-ups."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_cli
from llm_helpers import EXAMPLES, llama, problem

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.config import parse_pins
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.evaluation.fsdp import sharded_exposed
from dnnplace.models.llm.evaluation.rules import check_config
from dnnplace.models.llm.plan_file import read_llm_plan
from dnnplace.models.llm.published import config_path
from dnnplace.models.llm.solvers import search
from dnnplace.models.llm.solvers.search import search_with_runner_ups
from dnnplace.models.llm.spec import RECOMPUTE, LLMPlan, ParallelConfig, TransformerArch

# Llama 3.1 8B by hand: one layer's matrices h (q + 2 kv) + q h + 3 h ffn, two RMSNorms; embedding and untied head.
H, Q, KV, FFN, VOCAB = 4096, 4096, 1024, 14336, 128256
LAYER = H * (Q + 2 * KV) + Q * H + 3 * H * FFN + 2 * H  # 218,112,000
EXTRA = VOCAB * H + (VOCAB * H + H)  # embedding + LM head and final norm: 1,050,677,248
P = 32 * LAYER + EXTRA  # 8,030,261,248 parameters on the one pipeline rank


def _cfg(zero: int, grad: str = "fp32", dp: int = 8) -> ParallelConfig:
    return ParallelConfig(1, 1, 1, 1, dp, 1, "full", False, zero >= 1, (32,), zero=zero, grad_dtype=grad)


@pytest.mark.parametrize("grad,g", [("fp32", 4), ("bf16", 2)])
@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_memory_per_zero_stage_is_the_papers_split(zero: int, grad: str, g: int) -> None:
    """ZeRO (SC 2020) Sec. 5: (2 + g + 12) bytes per parameter, the 12 bytes of optimizer state sharded from stage 1,
    the g gradient bytes from stage 2, the 2 weight bytes at stage 3 -- over dp = 8 -- plus, at stages 2-3, the
    unit in flight: one unsharded unit gradient (stage 2) and the gathered unit with one prefetched (stage 3);
    the largest unit here is the embedding + head."""
    est = evaluate(problem(llama("8b"), 8, 64), _cfg(zero, grad))
    mem = est.memory_breakdown
    n = 8
    want_w = 2 * P / n + 2 * 2 * EXTRA if zero == 3 else 2 * P
    want_g = g * P / n + g * EXTRA if zero >= 2 else g * P
    want_o = 12 * P / n if zero >= 1 else 12 * P
    assert (mem["weights"], mem["gradients"], mem["optimizer"]) == pytest.approx((want_w, want_g, want_o), rel=1e-12)


def test_sharded_exposed_hand_computed() -> None:
    # 4 ranks at 1 GB/s, no latency: a ring moves 3/4 of a buffer. Per layer 1e8 parameters: all-gather of 2 bytes
    # 0.15 s, reduce-scatter of 4 bytes 0.3 s; 4 layers of 0.1 s forward, 0.2 s backward; 2 micro-batches.
    args = dict(group=np.array(4.0), bw=np.array(1e9), lat=np.array(0.0), layer_p=np.array(1e8),
                extra_p=np.array(0.0), layers=np.array(4.0), layer_f=np.array(0.1), layer_b=np.array(0.2),
                m=np.array(2.0), gather_b=2.0, grad_b=np.array(4.0), ag_end=np.array(0.05))
    replicated = np.array(0.07)
    # stage 3: forward 0.15 + 3 x (0.15 - 0.1); backward 0.15 + 3 x (0.15 + 0.3 - 0.2) + 0.3; x 2 micro-batches
    three = float(sharded_exposed(np.array(3.0), replicated, **args))
    assert three == pytest.approx(2 * ((0.15 + 3 * 0.05) + (0.15 + 3 * 0.25 + 0.3)))
    # stage 2: backward 3 x (0.3 - 0.2) + 0.3 per micro-batch, then the step-end parameter all-gather
    assert float(sharded_exposed(np.array(2.0), replicated, **args)) == pytest.approx(2 * (3 * 0.1 + 0.3) + 0.05)
    assert float(sharded_exposed(np.array(1.0), replicated, **args)) == 0.07
    # interleaved, 2 chunks of 2 layers: each chunk's first gather and last reduce-scatter are exposed
    two_chunks = float(sharded_exposed(np.array(3.0), replicated, **args, chunks=2.0))
    assert two_chunks == pytest.approx(2 * 2 * ((0.15 + 0.05) + (0.15 + 0.25 + 0.3)))
    # the embedding and head of a rank are priced exposed: 2 gathers + 1 reduce-scatter per micro-batch
    extra = float(sharded_exposed(np.array(3.0), replicated, **{**args, "extra_p": np.array(1e8)}))
    assert extra - three == pytest.approx(2 * (2 * 0.15 + 0.3))


def test_grad_dtype_halves_the_reduce_scatter_and_the_gradient_memory() -> None:
    pr = problem(llama("8b"), 16, 128)
    cfg = ParallelConfig(1, 1, 1, 1, 16, 1, "full", False, True, (32,))
    fp32, bf16 = evaluate(pr, cfg), evaluate(pr, dataclasses.replace(cfg, grad_dtype="bf16"))
    assert bf16.memory_breakdown["gradients"] == pytest.approx(fp32.memory_breakdown["gradients"] / 2)
    assert bf16.step_time_s < fp32.step_time_s


def _brute_force(pr, zeros=range(4), grad="fp32") -> float:  # noqa: ANN001
    """Every configuration of a tiny space (pp <= 2, even splits and every uneven one), ZeRO stage included."""
    a, n = pr.arch, pr.cluster.gpus
    best = float("inf")
    for tp, pp, cp in itertools.product((1, 2), (1, 2), (1, 2, 4)):
        if n % (tp * pp * cp):
            continue
        dp = n // (tp * pp * cp)
        split_list = [(a.num_layers,)] if pp == 1 else [(f, a.num_layers - f) for f in range(1, a.num_layers)]
        for lps, mbs, rc, zero in itertools.product(split_list, (1, 2, 4), RECOMPUTE, zeros):
            cfg = ParallelConfig(tp, pp, 1, cp, dp, mbs, rc, tp > 1, zero >= 1, lps, zero=zero, grad_dtype=grad)
            try:
                est = evaluate(pr, cfg)
            except DnnplaceError:
                continue
            if est.fits:
                best = min(best, est.step_time_s)
    return best


TINY = TransformerArch("tiny", "llama", 4, 256, 1024, 4, 2, 64, 1000)


@pytest.mark.parametrize("grad", ["fp32", "bf16"])
def test_search_equals_brute_force_with_the_zero_knob(grad: str) -> None:
    pr = problem(TINY, 4, 4, seq=512, gpn=2)
    plan = search(pr, {"vp": 1, "grad_dtype": grad})
    assert plan.status == "optimal" and plan.config.grad_dtype == grad
    assert plan.estimate.step_time_s == pytest.approx(_brute_force(pr, grad=grad), rel=1e-12)
    pinned = search(pr, {"vp": 1, "zero": 3, "grad_dtype": grad})
    assert pinned.config.zero == 3 and pinned.config.distributed_optimizer
    assert pinned.estimate.step_time_s == pytest.approx(_brute_force(pr, zeros=(3,), grad=grad), rel=1e-12)


def test_zero_3_fits_where_the_distributed_optimizer_does_not() -> None:
    """Llama 3.1 70B on 16 GPUs without pipelining: the distributed optimizer cannot hold it, FSDP can."""
    pr = problem(llama("70b"), 16, 32)
    with pytest.raises(DnnplaceError, match="no configuration fits"):
        search(pr, {"pp": 1, "zero": 1})
    plan = search(pr, {"pp": 1})
    assert plan.config.zero == 3 and plan.estimate.fits


def test_fix_zero_parses_and_hostile_values_are_one_line() -> None:
    assert parse_pins("zero=3,grad_dtype=bf16") == {"zero": 3, "grad_dtype": "bf16"}
    for text, msg in (("zero=7", "zero must be one of 0, 1, 2, 3, got 7"), ("zero=x", "zero must be an integer"),
                      ("zero=-1", "zero must be one of"), ("grad_dtype=fp16", "grad_dtype must be one of fp32, bf16")):
        with pytest.raises(DnnplaceError, match=msg) as info:
            parse_pins(text)
        assert "\n" not in str(info.value)
    with pytest.raises(DnnplaceError, match="zero must be one of"):
        search(problem(TINY, 4, 4, seq=512, gpn=2), {"zero": True})
    for bad, msg in ((7, "zero must be at most 3, got 7"), (True, "zero must be int"), ("3", "zero must be int")):
        with pytest.raises(DnnplaceError, match=msg):
            dnnplace.solve(problem(TINY, 4, 4, seq=512, gpn=2), "llm-search", zero=bad)


def test_plan_cli_fix_zero(tmp_path: Path) -> None:
    cfg = str(EXAMPLES / "llama3.1-8b.json")
    res = run_cli("plan", cfg, "--gpus", "8", "--seq-len", "8192", "--global-batch", "64", "--fix", "zero=7")
    assert res.returncode == 2 and "zero must be one of 0, 1, 2, 3, got 7" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    out = tmp_path / "plan.json"
    res = run_cli("plan", cfg, "--gpus", "8", "--seq-len", "8192", "--global-batch", "64", "--fix",
                  "zero=3,tp=1,pp=1", "-o", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["config"]["zero"] == 3 and doc["config"]["distributed_optimizer"] is True
    assert "runner-ups" in res.stdout and "zero=" in res.stdout


def test_codec_round_trips_the_new_knobs_and_reads_old_files() -> None:
    pr = problem(llama("8b"), 8, 64)
    cfg = _cfg(3, "bf16")
    est = evaluate(pr, cfg)
    doc = LLMPlan(pr, cfg, est, "fixed", est.step_time_s, 0.0, False, 0.0).to_dict()
    assert doc["version"] == 9 and doc["config"]["zero"] == 3 and doc["config"]["grad_dtype"] == "bf16"
    back = read_llm_plan(json.loads(json.dumps(doc)))
    assert back.config == cfg
    for dist, zero in ((True, 1), (False, 0)):  # a version-3 file: zero follows the distributed optimizer
        old = json.loads(json.dumps(doc))
        old["version"] = 3
        del old["config"]["zero"], old["config"]["grad_dtype"]
        old["config"]["distributed_optimizer"] = dist
        c = read_llm_plan(old).config
        assert (c.zero, c.grad_dtype) == (zero, "fp32")
    bad = json.loads(json.dumps(doc))
    bad["config"]["zero"] = 7
    with pytest.raises(DnnplaceError, match="config.zero must be one of 0, 1, 2, 3, got 7"):
        read_llm_plan(bad)


def test_moe_models_keep_zero_0_1_and_take_bf16_gradients() -> None:
    """ZeRO 2/3 stay dense-only; bf16 gradients (the Megatron-Bridge recipes' grad_reduce_in_fp32=False) are
    priced for MoE too: 2 bytes per parameter less on every parameter the rank holds, experts included."""
    pr = dnnplace.load_llm(config_path("qwen3-30b-a3b"), gpus=16, seq_len=4096, global_batch=1024)
    cfg = ParallelConfig(1, 1, 1, 1, 16, 1, "none", False, True, (48,), ep=16, dispatcher="flex")
    check_config(pr, cfg)
    with pytest.raises(DnnplaceError, match=r"\(rule zero_dense\)$"):
        check_config(pr, dataclasses.replace(cfg, zero=3))
    fp32, bf16 = evaluate(pr, cfg), evaluate(pr, dataclasses.replace(cfg, grad_dtype="bf16"))
    # Qwen3-30B-A3B by hand: 48 layers of attention (q 4096, kv 2 x 512 on h 2048; out 4096 x 2048; two
    # RMSNorms; the planner leaves out the q/k norms' 256 weights), router 128 x 2048, 128 experts of
    # 3 x 2048 x 768 over EP 16; embedding, head and the final norm.
    h, layers = 2048, 48
    attn = h * (4096 + 2 * 512) + 4096 * h + 2 * h
    dense = layers * (attn + 128 * h) + 2 * 151936 * h + h
    experts = layers * (128 // 16) * 3 * h * 768
    assert fp32.memory_per_gpu_bytes - bf16.memory_per_gpu_bytes == pytest.approx(2 * (dense + experts), rel=1e-9)


def test_runner_ups_are_the_next_fastest_distinct_configurations() -> None:
    pr = problem(TINY, 4, 4, seq=512, gpn=2)
    plan, others = search_with_runner_ups(pr, {"vp": 1}, count=3)
    assert plan.estimate.step_time_s == search(pr, {"vp": 1}).estimate.step_time_s
    assert len(others) == 3
    times = [r.estimate.step_time_s for r in others]
    assert times == sorted(times) and times[0] >= plan.estimate.step_time_s
    assert all(r.estimate.fits for r in others)
    knobs = {dataclasses.replace(r.config, layers_per_stage=()) for r in others}
    assert len(knobs) == 3 and dataclasses.replace(plan.config, layers_per_stage=()) not in knobs
    # brute force: the 4 fastest distinct knob settings (best split each) are the plan and its runner-ups
    best: dict[ParallelConfig, float] = {}
    a, n = pr.arch, pr.cluster.gpus
    for tp, pp, cp in itertools.product((1, 2), (1, 2), (1, 2, 4)):
        if n % (tp * pp * cp):
            continue
        splits = [(a.num_layers,)] if pp == 1 else [(f, a.num_layers - f) for f in range(1, a.num_layers)]
        for lps, mbs, rc, zero in itertools.product(splits, (1, 2, 4), RECOMPUTE, range(4)):
            cfg = ParallelConfig(tp, pp, 1, cp, n // (tp * pp * cp), mbs, rc, tp > 1, zero >= 1, lps, zero=zero)
            try:
                est = evaluate(pr, cfg)
            except DnnplaceError:
                continue
            key = dataclasses.replace(cfg, layers_per_stage=())
            if est.fits and est.step_time_s < best.get(key, float("inf")):
                best[key] = est.step_time_s
    top = sorted(best.values())[:4]
    assert [plan.estimate.step_time_s, *times] == pytest.approx(top, rel=1e-12)


def test_calibrate_scales_the_compute_efficiencies_to_measured_runs(tmp_path: Path) -> None:
    """One factor on the documented compute efficiencies, fitted to the user's runs: a run measured 25 % slower
    than predicted gets a prediction of its measured time; the communication fractions are untouched."""
    from dnnplace.models.llm.solvers.calibrate import SCALED, calibrate, read_measured, scaled_problem

    pr = problem(llama("8b"), 8, 64)
    pins = {"tp": 1, "pp": 1, "cp": 2, "vp": 1, "mbs": 1, "recompute": "none", "zero": 1}
    before = search(pr, pins).estimate.step_time_s
    f = tmp_path / "measured.json"
    f.write_text(json.dumps({"runs": [{"config": pins, "step_time_s": 1.25 * before}]}))
    cal = calibrate(pr, read_measured(f))
    assert cal.scale < 1 and not cal.capped
    assert cal.runs[0][3] == pytest.approx(1.25 * before, rel=1e-4)
    scaled = scaled_problem(pr, cal.scale)
    for name in SCALED:
        assert getattr(scaled.device, name) == pytest.approx(getattr(pr.device, name) * cal.scale)
    assert scaled.device.nvlink_fraction == pr.device.nvlink_fraction
    res = run_cli("plan", str(EXAMPLES / "llama3.1-8b.json"), "--gpus", "8", "--seq-len", "8192", "--global-batch",
                  "64", "--calibrate", str(f), "--runner-ups", "0")
    assert res.returncode == 0, res.stderr
    assert "calibrated: compute efficiencies x" in res.stdout
    for bad, msg in (({"runs": []}, "1 to 64 measured runs"), ({"runs": [{"config": pins}]}, "exactly the keys"),
                     ({"runs": [{"config": pins, "step_time_s": -1}]}, "positive number"),
                     ({"runs": [{"config": {"zero": 7}, "step_time_s": 1.0}]}, "zero must be one of")):
        f.write_text(json.dumps(bad))
        res = run_cli("plan", str(EXAMPLES / "llama3.1-8b.json"), "--gpus", "8", "--seq-len", "8192",
                      "--global-batch", "64", "--calibrate", str(f))
        assert res.returncode == 2 and msg in res.stderr and len(res.stderr.strip().splitlines()) == 1
