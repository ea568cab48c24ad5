"""What is priced is what is exported (issue 45): each exporter writes the knob as priced, read back by the
trainer's own parser where it is installed, or refuses in one line naming the knob."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from typing import Any

import pytest
from trainer_configs import torchtitan_job

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


def megatron_args(text: str, tmp_path: Path) -> list[str]:
    """The exported array as bash itself reads it."""
    import subprocess

    f = tmp_path / "args.sh"
    f.write_text(text)
    out = subprocess.run(["bash", "-c", 'source "$1" && printf "%s\\0" "${DNNPLACE_MEGATRON_ARGS[@]}"', "_", str(f)],
                         capture_output=True, check=True)
    return out.stdout.decode().split("\0")[:-1]


def test_w1_megatron_writes_the_overlaps_it_prices(tmp_path: Path) -> None:
    # Llama 3.1 70B, 64 H100s, --fix tp=8,pp=4,cp=1,vp=5,mbs=1,recompute=none,zero=1
    pr = dnnplace.load_llm(EXAMPLES / "llama3.1-70b.json", gpus=64, seq_len=8192, global_batch=128)
    sol = dnnplace.solve(pr, tp=8, pp=4, cp=1, vp=5, mbs=1, recompute="none", zero=1)
    args = megatron_args(export(sol.plan, "megatron"), tmp_path)
    for flag in ("--tp-comm-overlap", "--overlap-grad-reduce", "--overlap-param-gather", "--sequence-parallel",
                 "--use-distributed-optimizer"):
        assert flag in args, flag
    if importlib.util.find_spec("megatron") is None:
        pytest.skip("megatron-core is not installed (pip install '.[trainers]')")
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.model_parallel_config import ModelParallelConfig

    ddp = DistributedDataParallelConfig(use_distributed_optimizer=True, overlap_grad_reduce=True,
                                        overlap_param_gather=True)
    assert ddp.overlap_grad_reduce and ddp.overlap_param_gather
    mp = ModelParallelConfig(tensor_model_parallel_size=8, sequence_parallel=True, tp_comm_overlap=True)
    assert mp.tp_comm_overlap
    # zero 0 and no data parallelism: no parameter gather to overlap, no gradient reduction at all
    z0 = megatron_args(export(dnnplace.solve(pr, tp=8, pp=4, cp=1, vp=5, mbs=1, recompute="none", zero=0).plan,
                              "megatron"), tmp_path)
    assert "--overlap-grad-reduce" in z0 and "--overlap-param-gather" not in z0
    one = dnnplace.load_llm(EXAMPLES / "llama3.1-8b.json", gpus=8, seq_len=8192, global_batch=128)
    solo = megatron_args(export(dnnplace.solve(one, tp=8, pp=1, cp=1, mbs=1, recompute="none").plan, "megatron"),
                         tmp_path)
    assert "--overlap-grad-reduce" not in solo and "--tp-comm-overlap" in solo


def test_w10_te_cross_entropy_is_exported_or_refused(tmp_path: Path) -> None:
    pr = llama8b(cross_entropy="te")
    plan = dnnplace.solve(pr, tp=1, pp=1, cp=1, mbs=1, zero=3, recompute="full").plan
    args = megatron_args(export(plan, "megatron"), tmp_path)
    assert "--cross-entropy-loss-fusion" in args
    assert args[args.index("--cross-entropy-fusion-impl") + 1] == "te"
    base = megatron_args(export(dnnplace.solve(llama8b(), tp=1, pp=1, cp=1, mbs=1, zero=3,
                                               recompute="full").plan, "megatron"), tmp_path)
    assert "--cross-entropy-fusion-impl" not in base and "--cross-entropy-loss-fusion" not in base
    for target in ("torchtitan", "deepspeed"):
        with pytest.raises(DnnplaceError, match=r"cross_entropy=te .*--cross-entropy megatron$"):
            export(plan, target)
    if importlib.util.find_spec("megatron") is None:
        pytest.skip("megatron-core is not installed (pip install '.[trainers]')")
    from megatron.core.model_parallel_config import ModelParallelConfig

    mp = ModelParallelConfig(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te")
    assert mp.cross_entropy_loss_fusion and mp.cross_entropy_fusion_impl == "te"


def _qwen3_flex(device: str, gpn: int, replicated: bool = False) -> LLMPlan:
    """Qwen3-30B-A3B on 16 GPUs with the flex dispatcher (``replicated``: a layout torchtitan can run)."""
    from dnnplace.models.llm.published import CONFIGS

    pr = dnnplace.load_llm(CONFIGS / "qwen3-30b-a3b.json", gpus=16, seq_len=4096, global_batch=1024,
                           device=device, gpus_per_node=gpn)
    c = (ParallelConfig(2, 1, 1, 1, 8, 1, "none", True, False, (48,), ep=2, dispatcher="flex") if replicated
         else ParallelConfig(1, 1, 1, 1, 16, 1, "none", False, True, (48,), ep=8, dispatcher="flex"))
    return fixed_plan(pr, c)


def test_w11_flex_exports_the_backend_priced(tmp_path: Path) -> None:
    blackwell = megatron_args(export(_qwen3_flex("gb200", 4), "megatron"), tmp_path)
    assert blackwell[blackwell.index("--moe-flex-dispatcher-backend") + 1] == "hybridep"
    hopper = megatron_args(export(_qwen3_flex("h100", 8), "megatron"), tmp_path)
    assert hopper[hopper.index("--moe-flex-dispatcher-backend") + 1] == "deepep"
    with pytest.raises(DnnplaceError, match="dispatcher=flex on gb200"):
        export(_qwen3_flex("gb200", 4, replicated=True), "torchtitan")
    assert 'expert_parallel_comm_backend = "deepep"' in export(_qwen3_flex("h100", 8, replicated=True), "torchtitan")
    if importlib.util.find_spec("megatron") is None:
        pytest.skip("megatron-core is not installed (pip install '.[trainers]')")
    from megatron.core.transformer.transformer_config import TransformerConfig

    names = {f.name for f in __import__("dataclasses").fields(TransformerConfig)}
    assert "moe_flex_dispatcher_backend" in names


def test_w14_chunked_attention_is_refused_by_every_exporter() -> None:
    from dnnplace.models.llm.published import CONFIGS

    pr = dnnplace.load_llm(CONFIGS / "llama-4-maverick-17b-128e.json", gpus=64, seq_len=8192, global_batch=64)
    assert pr.moe is not None and pr.moe.attention_chunk
    plan = fixed_plan(pr, ParallelConfig(1, 1, 1, 1, 64, 1, "none", False, True, (pr.arch.num_layers,), ep=64))
    for target in ("megatron", "torchtitan", "deepspeed"):
        with pytest.raises(DnnplaceError, match=rf"attention_chunk={pr.moe.attention_chunk} .*{target} setting") as e:
            export(plan, target)
        assert "\n" not in str(e.value)
