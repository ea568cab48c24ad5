"""The cross-entropy implementation's logits at the memory peak (TrainingJob.cross_entropy), by hand."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from llm_helpers import llama, problem, uniform

from dnnplace.core.catalogue import TRAINING_STACK
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.evaluation import evaluate, memory
from dnnplace.models.llm.solvers import search
from dnnplace.models.llm.spec import LLMPlan, LLMProblem, TrainingJob

SEQ, MBS, H, V = 8192, 2, 8192, 128256  # Llama 3 70B, one micro-batch of 2 x 8192 tokens


def test_catalogue_bytes_per_logit() -> None:
    # Megatron-Core: the 16-bit output_layer output (2) + calculate_logits_max's fp32 copy (4); TE: 16-bit only.
    assert TRAINING_STACK.ce_logit_bytes == {"megatron": 6.0, "te": 2.0}
    assert "ce_logit_bytes" in TRAINING_STACK.sources


@pytest.mark.parametrize(("impl", "expected"), [
    # 4 x 16384 x 8192 (final-norm input + LM-head input, 16-bit) + 6 x 16384 x 128256
    ("megatron", 536_870_912 + 12_608_077_824),
    # the same 536_870_912 + 2 x 16384 x 128256
    ("te", 536_870_912 + 4_202_692_608),
])
def test_head_activation_bytes_hand_computed(impl: str, expected: int) -> None:
    got = memory.head_activation_bytes(llama("70b"), np.array(SEQ * MBS * 1.0), np.array(1.0), np.array(1.0), impl)
    assert float(got) == expected


def test_tp_and_sequence_parallel_shard_the_head_terms() -> None:
    # tp 4 with SP: 4 x 16384 x 8192 / 4 + 2 x 16384 x 128256 / 4
    got = memory.head_activation_bytes(llama("70b"), np.array(16384.0), np.array(4.0), np.array(4.0), "te")
    assert float(got) == 134_217_728 + 1_050_673_152


def test_te_cross_entropy_lowers_the_last_rank_by_four_bytes_a_logit() -> None:
    # pp 1: the one rank is the last; activations fall by 4 x tokens x V / tp, buffers by the 5 % share of it.
    base = problem(llama("8b"), 8, 64)
    te = LLMProblem(base.arch, base.cluster, replace(base.job, cross_entropy="te"), base.device)
    cfg = uniform(base.arch, 8, 1, 1, 1, mbs=1)
    a, b = evaluate(base, cfg), evaluate(te, cfg)
    drop = 4.0 * SEQ * V  # 4_202_692_608
    assert a.memory_breakdown["activations"] - b.memory_breakdown["activations"] == pytest.approx(drop)
    assert a.memory_breakdown["buffers"] - b.memory_breakdown["buffers"] == pytest.approx(0.05 * drop)
    assert a.step_time_s == b.step_time_s  # memory only: the time keeps Megatron's passes


def test_unknown_cross_entropy_is_one_line() -> None:
    base = problem(llama("8b"), 8, 64)
    with pytest.raises(DnnplaceError) as exc:
        LLMProblem(base.arch, base.cluster, TrainingJob(SEQ, 64, "bf16", "apex"), base.device)
    assert "cross_entropy" in str(exc.value) and "\n" not in str(exc.value)


def test_plan_file_carries_a_non_default_cross_entropy() -> None:
    base = problem(llama("8b"), 8, 64)
    te = LLMProblem(base.arch, base.cluster, replace(base.job, cross_entropy="te"), base.device)
    d = search(te, {"tp": 1, "pp": 1, "cp": 1, "vp": 1, "mbs": 1}).to_dict()
    assert d["job"]["cross_entropy"] == "te"
    again = LLMPlan.from_dict(json.loads(json.dumps(d)))
    assert again.problem.job.cross_entropy == "te" and again.to_dict() == d
    plain = search(base, {"tp": 1, "pp": 1, "cp": 1, "vp": 1, "mbs": 1}).to_dict()
    assert "cross_entropy" not in plain["job"]  # the default writes the version-5 job unchanged


def test_cli_and_api_take_the_cross_entropy() -> None:
    """`plan --cross-entropy te`, `solve --cross-entropy te` and `load_llm(cross_entropy=...)` set the job's; an
    unknown one is one line, exit 2."""
    from cli_runner import run_cli
    from llm_helpers import EXAMPLES

    import dnnplace

    cfg = EXAMPLES / "llama3.1-8b.json"
    assert dnnplace.load_llm(cfg, gpus=8, seq_len=SEQ, global_batch=64, cross_entropy="te").job.cross_entropy == "te"
    base = ("--gpus", "8", "--seq-len", "8192", "--global-batch", "64")
    r = run_cli("plan", cfg, *base, "--cross-entropy", "te", "--json", "--runner-ups", "0")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["job"]["cross_entropy"] == "te"
    r = run_cli("solve", cfg, *base, "--cross-entropy", "te")
    assert r.returncode == 0, r.stderr
    r = run_cli("plan", cfg, *base, "--cross-entropy", "apex")
    assert r.returncode == 2 and "--cross-entropy must be one of megatron, te" in r.stderr
    assert "Traceback" not in r.stderr


def test_moe_last_stage_honours_the_cross_entropy() -> None:
    """The MoE memory path keeps the logits as the job's cross entropy does (4 bytes a logit less with TE)."""
    import dnnplace
    from dnnplace.models.llm.published import config_path
    from dnnplace.models.llm.spec import ParallelConfig

    kw = {"gpus": 16, "seq_len": 4096, "global_batch": 1024}
    meg = dnnplace.load_llm(config_path("qwen3-30b-a3b"), **kw)
    te = dnnplace.load_llm(config_path("qwen3-30b-a3b"), cross_entropy="te", **kw)
    cfg = ParallelConfig(1, 1, 1, 1, 16, 1, "none", False, True, (48,), ep=16, etp=1, dispatcher="flex")
    a, b = evaluate(meg, cfg), evaluate(te, cfg)
    drop = 4.0 * 4096 * meg.arch.vocab
    assert a.memory_breakdown["activations"] - b.memory_breakdown["activations"] == pytest.approx(drop)
    assert a.step_time_s == b.step_time_s
