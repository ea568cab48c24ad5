"""What is priced is what is exported (issue 45): each exporter writes the knob as priced, read back by the
trainer's own parser where it is installed, or refuses in one line naming the knob."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.exporters import export
from dnnplace.models.llm.spec import LLMPlan, LLMProblem, ParallelConfig

EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "llm"


def fixed_plan(pr: LLMProblem, c: ParallelConfig) -> LLMPlan:
    est = evaluate(pr, c)
    return LLMPlan(pr, c, est, "fixed", est.step_time_s, 0.0, False, 0.0)


def llama8b(precision: str = "bf16", **kw: Any) -> LLMProblem:
    return dnnplace.load_llm(EXAMPLES / "llama3.1-8b.json", gpus=8, seq_len=8192, global_batch=128,
                             precision=precision, **kw)


def torchtitan_job(text: str, tmp_path: Path) -> Any:
    spec = importlib.util.find_spec("torchtitan")
    if spec is None:
        pytest.skip("torchtitan is not installed (pip install '.[trainers]')")
    if "torchtitan" not in sys.modules:
        sys.modules["torchtitan"] = importlib.util.module_from_spec(spec)  # its __init__ pulls triton kernels
    from torchtitan.config import ConfigManager

    f = tmp_path / "job.toml"
    f.write_text(text)
    return ConfigManager().parse_args(["--job.config_file", str(f)])


def test_w2_torchtitan_accumulates_the_priced_micro_batches(tmp_path: Path) -> None:
    # Llama 3.1 8B, 8 GPUs, GBS 128, mbs 1, zero 3: one forward of 16 sequences was written
    pr = llama8b()
    sol = dnnplace.solve(pr, tp=1, pp=1, cp=1, mbs=1, zero=3, recompute="full")
    assert sol.plan.config.dp == 8
    job = torchtitan_job(export(sol.plan, "torchtitan"), tmp_path)
    local, dp = job.training.local_batch_size, job.parallelism.data_parallel_shard_degree
    assert local == 1 and dp == 8
    assert job.training.global_batch_size // (local * dp) == 16  # torchtitan's gradient accumulation steps


def test_w12_torchtitan_refuses_fp8_recipes_it_runs_differently() -> None:
    pr = llama8b("fp8")
    c = ParallelConfig(1, 1, 1, 1, 8, 1, "full", False, True, (32,), zero=3)
    with pytest.raises(DnnplaceError, match=r"precision fp8 .*--precision bf16$") as info:
        export(fixed_plan(pr, c), "torchtitan")
    assert "\n" not in str(info.value)


def test_w13_torchtitan_refuses_core_attention_recompute() -> None:
    c = ParallelConfig(1, 1, 1, 1, 8, 1, "selective", False, True, (32,), zero=3)
    with pytest.raises(DnnplaceError, match=r"recompute=selective .*--fix recompute=none or recompute=full$"):
        export(fixed_plan(llama8b(), c), "torchtitan")
    text = export(fixed_plan(llama8b(), ParallelConfig(1, 1, 1, 1, 8, 1, "full", False, True, (32,), zero=3)),
                  "torchtitan")
    assert tomllib.loads(text)["activation_checkpoint"] == {"mode": "full"}
