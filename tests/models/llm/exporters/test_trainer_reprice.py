"""Every exporter checked by the trainer's own code, then re-priced (issue 45, item 1): the exported text becomes
the trainer's own config objects (megatron-core's ``TransformerConfig``, ``DistributedDataParallelConfig`` and
``OptimizerConfig`` from the Megatron flags; torchtitan's ``JobConfig`` from the TOML; DeepSpeed's
``DeepSpeedConfig``), their validation runs, the knobs are read back from those objects alone and dnnplace
prices them again: the same step time and memory as the plan, or the exporter wrote another run.

The sample covers every knob: dense and MoE, BF16 and FP8, ZeRO 0-3 and the gradient dtype, pp 1 and > 1, vp,
cp, ep, etp, the three dispatchers, the all-to-all and communication overlaps, recompute none / selective /
full and module sets (an empty one included), activation offloading, CUDA graphs, TE cross entropy, Blackwell.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from trainer_configs import torchtitan_job

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.exporters import export
from dnnplace.models.llm.moe_knobs import module_set
from dnnplace.models.llm.published import CONFIGS
from dnnplace.models.llm.spec import LLMPlan, LLMProblem, ParallelConfig

EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "llm"

#: (model, gpus, device, gpus_per_node, precision, cross_entropy, pins): one plan each.
SAMPLE: dict[str, tuple[str, int, str, int, str, str, dict[str, Any]]] = {
    "dense-pp1-zero0": ("8b", 8, "h100", 8, "bf16", "megatron", dict(tp=8, pp=1, cp=1, mbs=1, zero=0,
                                                                     recompute="none")),
    "dense-vp-selective-zero1": ("8b", 8, "h100", 8, "bf16", "megatron", dict(tp=2, pp=2, vp=2, cp=1, mbs=1,
                                                                             zero=1, recompute="selective")),
    "dense-cp-full-zero2-bf16grad": ("8b", 8, "h100", 8, "bf16", "megatron", dict(tp=2, pp=1, cp=2, mbs=1, zero=2,
                                                                                 grad_dtype="bf16",
                                                                                 recompute="full")),
    "dense-zero3-te-ce": ("8b", 8, "h100", 8, "bf16", "te", dict(tp=1, pp=1, cp=1, mbs=1, zero=3,
                                                                 recompute="full")),
    "dense-fp8-pp2": ("8b", 8, "h100", 8, "fp8", "megatron", dict(tp=4, pp=2, cp=1, mbs=1, zero=1,
                                                                  recompute="none")),
    "dense-offload": ("8b", 8, "h100", 8, "bf16", "megatron", dict(tp=8, pp=1, cp=1, mbs=1, zero=1,
                                                                   recompute="none", offload_layers=4)),
    "dense-blackwell-graphs": ("8b", 8, "gb200", 72, "bf16", "megatron", dict(tp=2, pp=1, cp=1, mbs=1, zero=1,
                                                                             recompute="none",
                                                                             cuda_graphs="attn")),
    "moe-alltoall-core-attn": ("qwen3", 16, "h100", 8, "bf16", "megatron", dict(
        tp=1, pp=1, cp=1, ep=8, etp=1, dispatcher="alltoall", a2a_overlap=False, recompute="selective",
        recompute_modules="core_attn")),
    "moe-allgather-etp": ("qwen3", 16, "h100", 8, "bf16", "megatron", dict(
        tp=2, pp=1, cp=1, ep=4, etp=2, dispatcher="allgather", recompute="full")),
    "moe-empty-modules": ("qwen3", 16, "h100", 8, "bf16", "megatron", dict(
        tp=1, pp=1, cp=1, ep=16, recompute="selective", recompute_modules="none")),
    "moe-blackwell-flex-vp-overlap": ("qwen3", 16, "gb200", 72, "bf16", "megatron", dict(
        tp=1, pp=2, vp=2, cp=1, ep=8, dispatcher="flex", a2a_overlap=True, recompute="selective",
        recompute_modules="moe_act", cuda_graphs="attn")),
    "moe-graphs-core-attn": ("qwen3", 16, "h100", 8, "bf16", "megatron", dict(  # no dropout: graphed recompute
        tp=1, pp=1, cp=1, ep=8, dispatcher="alltoall", recompute="selective", recompute_modules="core_attn",
        cuda_graphs="attn+moe_router+moe_preprocess")),
    "moe-skewed-routing": ("qwen3", 16, "h100", 8, "bf16", "megatron", dict(
        tp=1, pp=1, cp=1, ep=8, dispatcher="alltoall", recompute="full", routing="power-law-1.2")),
    "moe-fp8-modules": ("qwen3", 16, "h100", 8, "fp8", "megatron", dict(
        tp=1, pp=1, cp=1, ep=8, dispatcher="alltoall", recompute="selective", recompute_modules="core_attn")),
    # runs torchtitan and DeepSpeed express (the others they refuse in one line)
    "dense-pp2-zero3": ("8b", 8, "h100", 8, "bf16", "megatron", dict(tp=2, pp=2, vp=1, cp=1, zero=3,
                                                                     recompute="full")),
    "dense-cp2-zero3": ("8b", 8, "h100", 8, "bf16", "megatron", dict(tp=1, pp=1, cp=2, zero=3, recompute="full")),
    "dense-vp-zero3": ("8b", 8, "h100", 8, "bf16", "megatron", dict(tp=2, pp=2, vp=2, cp=1, zero=3,
                                                                    recompute="full")),
    "dense-vp4-zero0": ("8b", 8, "h100", 8, "bf16", "megatron", dict(tp=1, pp=2, vp=4, cp=1, zero=0,
                                                                     recompute="full")),
    "dense-pp2-zero1-full": ("8b", 8, "h100", 8, "bf16", "megatron", dict(tp=2, pp=2, vp=1, cp=1, zero=1,
                                                                          recompute="full")),
    "moe-zero1-full": ("qwen3", 16, "h100", 8, "bf16", "megatron", dict(tp=1, pp=1, cp=1, ep=8,
                                                                        dispatcher="alltoall", recompute="full")),
    "moe-empty-modules-no-overlap": ("qwen3", 16, "h100", 8, "bf16", "megatron", dict(
        tp=1, pp=1, cp=1, ep=8, dispatcher="alltoall", a2a_overlap=False, recompute="selective",
        recompute_modules="none")),
}
#: Configurations priced as given (fitting or not): the MoE runs torchtitan expresses replicate (it has no
#: ZeRO-1, and MoE plans are priced at ZeRO 0/1), so their experts fold into tp x cp.
FIXED: dict[str, tuple[str, int, str, int, str, str, dict[str, Any]]] = {
    "moe-replicated-flex": ("qwen3", 16, "h100", 8, "bf16", "megatron", dict(
        tp=2, pp=1, vp=1, cp=1, dp=8, mbs=1, recompute="none", sequence_parallel=True, distributed_optimizer=False,
        layers_per_stage=(48,), ep=2, etp=1, dispatcher="flex", zero=0)),
    "moe-replicated-cp-etp": ("qwen3", 16, "h100", 8, "bf16", "megatron", dict(
        tp=2, pp=1, vp=1, cp=2, dp=4, mbs=1, recompute="full", sequence_parallel=True, distributed_optimizer=False,
        layers_per_stage=(48,), ep=2, etp=2, dispatcher="alltoall", zero=0)),
    "moe-replicated-empty-modules": ("qwen3", 16, "h100", 8, "bf16", "megatron", dict(
        tp=2, pp=1, vp=1, cp=1, dp=8, mbs=1, recompute="selective", recompute_modules="none",
        sequence_parallel=True, distributed_optimizer=False, layers_per_stage=(48,), ep=2, etp=1,
        dispatcher="alltoall", zero=0)),
    # DeepSeek-V3's published GB200 layout (NVIDIA dgxc-benchmarking 25.05): MLA, shared experts, an MTP layer
    "moe-mla-mtp-layout": ("deepseek", 256, "gb200", 64, "bf16", "megatron", dict(
        tp=2, pp=4, vp=1, cp=1, dp=32, mbs=1, recompute="selective", sequence_parallel=True,
        distributed_optimizer=True, layers_per_stage=(15, 16, 16, 14), ep=64, etp=1, dispatcher="alltoall",
        recompute_modules="core_attn", zero=1)),
}


def _problem(model: str, gpus: int, device: str, gpn: int, precision: str, ce: str) -> LLMProblem:
    path = {"8b": EXAMPLES / "llama3.1-8b.json", "qwen3": CONFIGS / "qwen3-30b-a3b.json",
            "deepseek": CONFIGS / "deepseek-v3.json"}[model]
    seq, gbs = {"8b": (8192, 128), "qwen3": (4096, 256), "deepseek": (4096, 2048)}[model]
    return dnnplace.load_llm(path, gpus=gpus, seq_len=seq, global_batch=gbs, device=device, gpus_per_node=gpn,
                             precision=precision, cross_entropy=ce)


@pytest.fixture(scope="module")
def plans() -> dict[str, LLMPlan]:
    out = {}
    for key, (model, gpus, device, gpn, precision, ce, pins) in SAMPLE.items():
        out[key] = dnnplace.solve(_problem(model, gpus, device, gpn, precision, ce), runner_ups=0, **pins).plan
    for key, (model, gpus, device, gpn, precision, ce, knobs) in FIXED.items():
        pr, c = _problem(model, gpus, device, gpn, precision, ce), ParallelConfig(**knobs)
        est = evaluate(pr, c)
        out[key] = LLMPlan(pr, c, est, "fixed", est.step_time_s, 0.0, False, 0.0)
    return out


def test_the_sample_covers_every_knob(plans: dict[str, LLMPlan]) -> None:
    cs = [p.config for p in plans.values()]
    assert {c.zero for c in cs} == {0, 1, 2, 3} and {c.recompute for c in cs} == {"none", "selective", "full"}
    assert {c.dispatcher for c in cs if c.ep > 1} == {"alltoall", "allgather", "flex"}
    assert any(c.pp == 1 for c in cs) and any(c.pp > 1 for c in cs) and any(c.vp > 1 for c in cs)
    assert any(c.cp > 1 for c in cs) and any(c.etp > 1 for c in cs) and any(c.a2a_overlap for c in cs)
    assert any(c.offload_layers for c in cs) and any(c.cuda_graphs != "none" for c in cs)
    assert {c.routing for c in cs if c.ep > 1} >= {"balanced", "power-law-1.2"}
    assert any(c.grad_dtype == "bf16" for c in cs) and "none" in {c.recompute_modules for c in cs if c.ep > 1}
    jobs = [p.problem for p in plans.values()]
    assert {pr.job.precision for pr in jobs} == {"bf16", "fp8"} and {pr.job.cross_entropy for pr in jobs} == {
        "megatron", "te"}
    assert {pr.device.name for pr in jobs} >= {"h100", "gb200"} and {pr.moe is None for pr in jobs} == {True, False}
    assert any(pr.moe is not None and pr.moe.mla is not None for pr in jobs)  # MLA, shared experts, MTP


def _runs(plan: LLMPlan) -> ParallelConfig:
    """The plan's configuration as a trainer without per-module recompute runs it: an MoE plan's selective
    recompute of no module reruns nothing, priced as (and exported as) no recompute."""
    c = plan.config
    if plan.problem.moe is not None and c.recompute == "selective" and c.recompute_modules == "none":
        return dataclasses.replace(c, recompute="none")
    return c


def _same_price(plan: LLMPlan, problem: LLMProblem, config: ParallelConfig) -> None:
    """The knobs read back from the trainer's objects price as the plan did (step time and memory)."""
    est = evaluate(problem, config)
    assert est.step_time_s == pytest.approx(plan.estimate.step_time_s, rel=1e-12)
    assert est.memory_per_gpu_bytes == pytest.approx(plan.estimate.memory_per_gpu_bytes, rel=1e-12)


# ---------------------------------------------------------------- Megatron: megatron-core's own config objects


def _flags(text: str, tmp_path: Path) -> dict[str, list[str]]:
    """The exported array as bash reads it, then as argparse groups it: each flag and the values after it."""
    f = tmp_path / "args.sh"
    f.write_text(text)
    out = subprocess.run(["bash", "-c", 'source "$1" && printf "%s\\0" "${DNNPLACE_MEGATRON_ARGS[@]}"', "_", str(f)],
                         capture_output=True, check=True, timeout=30)
    flags: dict[str, list[str]] = {}
    for arg in out.stdout.decode().split("\0")[:-1]:
        if arg.startswith("--"):
            flags[arg] = []
            last = arg
        else:
            flags[last].append(arg)
    return flags


#: Megatron-LM flags whose value is the TransformerConfig field of the same name (core_transformer_config_from_args
#: copies every argument named as a field); the type converts the text as argparse's ``type=`` does.
_SAME_NAME = {"tensor_model_parallel_size": int, "pipeline_model_parallel_size": int, "context_parallel_size": int,
              "num_layers": int, "hidden_size": int, "ffn_hidden_size": int, "num_attention_heads": int,
              "kv_channels": int, "num_query_groups": int, "recompute_granularity": str, "recompute_method": str,
              "recompute_num_layers": int, "expert_model_parallel_size": int, "expert_tensor_parallel_size": int,
              "moe_token_dispatcher_type": str, "moe_flex_dispatcher_backend": str, "moe_ffn_hidden_size": int,
              "moe_router_topk": int, "moe_router_dtype": str, "cpu_offloading_num_layers": int,
              "cuda_graph_impl": str, "cross_entropy_fusion_impl": str, "normalization": str,
              "moe_shared_expert_intermediate_size": int, "moe_router_score_function": str,
              "moe_router_num_groups": int, "moe_router_group_topk": int, "mtp_num_layers": int,
              "q_lora_rank": int, "kv_lora_rank": int, "qk_head_dim": int, "qk_pos_emb_head_dim": int,
              "v_head_dim": int, "attention_dropout": float, "hidden_dropout": float}
#: (--moe-permute-fusion is left out: its check imports Transformer Engine's fused kernels, absent here; it is a
#: kernel fusion the cost model does not price apart.)
_SWITCHES = ("sequence_parallel", "tp_comm_overlap", "moe_grouped_gemm", "overlap_moe_expert_parallel_comm",
             "moe_router_force_load_balancing", "cross_entropy_loss_fusion", "qk_layernorm")
#: Megatron-LM's arguments.py names for TransformerConfig fields of another name.
_RENAMED = {"num_experts": ("num_moe_experts", int), "fp8_format": ("fp8", str),
            "num_virtual_stages_per_pipeline_rank": ("virtual_pipeline_model_parallel_size", int),
            "decoder_first_pipeline_num_layers": ("num_layers_in_first_pipeline_stage", int),
            "decoder_last_pipeline_num_layers": ("num_layers_in_last_pipeline_stage", int)}


def megatron_objects(flags: dict[str, list[str]]) -> tuple[Any, Any, Any]:
    """megatron-core's TransformerConfig, DistributedDataParallelConfig and OptimizerConfig, filled from the
    flags as Megatron-LM's arguments.py / core_transformer_config_from_args fill them; their __post_init__
    checks run."""
    import torch
    import torch.nn.functional as F
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    def name(flag: str) -> str:
        return flag[2:].replace("-", "_")

    kw: dict[str, Any] = {"pipeline_dtype": torch.bfloat16, "params_dtype": torch.bfloat16, "bf16": True}
    for flag, values in flags.items():
        n = name(flag)
        if n in _SAME_NAME:
            kw[n] = _SAME_NAME[n](values[0])
        elif n in _SWITCHES:
            kw[n] = True
        elif n in _RENAMED:
            kw[_RENAMED[n][0]] = _RENAMED[n][1](values[0])
    if "--recompute-activations" in flags:  # arguments.py: --recompute-activations is selective granularity
        kw["recompute_granularity"] = "selective"
    if "--recompute-modules" in flags:  # nargs='*': an empty list is kept as []
        kw["recompute_modules"] = flags["--recompute-modules"]
    if "--cuda-graph-scope" in flags:
        kw["cuda_graph_scope"] = flags["--cuda-graph-scope"]
    if kw.get("cpu_offloading_num_layers", 0) > 0:  # arguments.py turns cpu_offloading on with it
        kw["cpu_offloading"] = True
    if "--fp8-param-gather" in flags:
        kw["fp8_param"] = True
    if "--swiglu" in flags:
        kw.update(gated_linear_unit=True, activation_func=F.silu)
    if "--disable-bias-linear" in flags:
        kw["add_bias_linear"] = False
    layout = flags.get("--pipeline-model-parallel-layout")
    if layout:
        kw["pipeline_model_parallel_layout"] = layout[0]
    tc = (MLATransformerConfig if "--multi-latent-attention" in flags else TransformerConfig)(**kw)
    strategy = (flags.get("--data-parallel-sharding-strategy") or ["no_shard"])[0]
    ddp = DistributedDataParallelConfig(
        grad_reduce_in_fp32="--grad-reduce-in-bf16" not in flags,
        overlap_grad_reduce="--overlap-grad-reduce" in flags, overlap_param_gather="--overlap-param-gather" in flags,
        use_distributed_optimizer="--use-distributed-optimizer" in flags,
        use_megatron_fsdp="--use-megatron-fsdp" in flags, data_parallel_sharding_strategy=strategy,
        fp8_param_gather="--fp8-param-gather" in flags)
    opt = OptimizerConfig(optimizer="adam", bf16=True, use_distributed_optimizer=ddp.use_distributed_optimizer,
                          overlap_param_gather=ddp.overlap_param_gather)
    return tc, ddp, opt


def megatron_built_layers(tc: Any) -> list[int]:
    """Decoder layers per virtual stage as megatron-core builds them from the config."""
    from megatron.core import parallel_state
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    pp = tc.pipeline_model_parallel_size
    vp = tc.virtual_pipeline_model_parallel_size or 1
    layout = tc.pipeline_model_parallel_layout
    if layout is not None:  # the layout's own count (it reads the VP size from the global state)
        vp = layout.virtual_pipeline_model_parallel_size
        parallel_state.set_virtual_pipeline_model_parallel_world_size(vp if vp > 1 else None)
        try:
            return [layout.get_num_layers_to_build(vp_stage=i // pp, pp_rank=i % pp) for i in range(pp * vp)]
        finally:
            parallel_state.set_virtual_pipeline_model_parallel_world_size(None)
    return [get_num_layers_to_build(tc, vp_stage=i // pp if vp > 1 else None, pp_rank=i % pp)
            for i in range(pp * vp)]


def megatron_readback(plan: LLMPlan, flags: dict[str, list[str]]) -> tuple[LLMProblem, ParallelConfig]:
    """The problem and configuration megatron-core's objects hold, read from them alone."""
    tc, ddp, opt = megatron_objects(flags)
    assert opt.use_distributed_optimizer == ddp.use_distributed_optimizer
    gpus = plan.problem.cluster.gpus
    tp, pp, cp = tc.tensor_model_parallel_size, tc.pipeline_model_parallel_size, tc.context_parallel_size
    strategy = ddp.data_parallel_sharding_strategy if ddp.use_megatron_fsdp else "no_shard"
    zero = {"optim_grads_params": 3, "optim_grads": 2}.get(strategy, int(ddp.use_distributed_optimizer))
    if zero >= 2:
        grad = flags["--megatron-fsdp-grad-comm-dtype"][0]
    else:
        grad = "fp32" if ddp.grad_reduce_in_fp32 else "bf16"
    moe = plan.problem.moe is not None
    selective = tc.recompute_granularity == "selective"
    if tc.cuda_graph_impl == "none":
        graphs = "none"
    else:
        scope = [getattr(s, "name", str(s)) for s in (tc.cuda_graph_scope or [])]
        graphs = "+".join(scope) if scope else "layer"
    cfg = ParallelConfig(
        tp, pp, tc.virtual_pipeline_model_parallel_size or 1, cp, gpus // (tp * pp * cp),
        int(flags["--micro-batch-size"][0]), tc.recompute_granularity or "none", tc.sequence_parallel,
        ddp.use_distributed_optimizer, tuple(megatron_built_layers(tc)),
        ep=tc.expert_model_parallel_size if moe else 1, etp=tc.expert_tensor_parallel_size if moe else 1,
        dispatcher=tc.moe_token_dispatcher_type if moe else "alltoall",
        recompute_modules=module_set(tc.recompute_modules) if moe and selective else "none",
        a2a_overlap=bool(tc.overlap_moe_expert_parallel_comm), zero=zero, grad_dtype=grad,
        offload_layers=tc.cpu_offloading_num_layers if tc.cpu_offloading else 0, cuda_graphs=graphs,
        # forced balance is the balanced routing; a trained router's skew is not in Megatron's config: the plan's
        routing="balanced" if tc.moe_router_force_load_balancing or not moe else plan.config.routing)
    assert not moe or tc.moe_router_force_load_balancing == (plan.config.routing == "balanced")
    precision = "fp8" if tc.fp8 == "hybrid" and tc.fp8_recipe == "delayed" and tc.fp8_param else (
        "bf16" if tc.fp8 is None else f"unexported {tc.fp8}")
    ce = "te" if tc.cross_entropy_loss_fusion and tc.cross_entropy_fusion_impl == "te" else "megatron"
    job = dataclasses.replace(plan.problem.job, precision=precision, cross_entropy=ce)
    if moe and tc.moe_token_dispatcher_type == "flex":  # the backend priced is the device's: say it is the one run
        from dnnplace.core.catalogue_moe import HYBRIDEP_NVLINK

        assert tc.moe_flex_dispatcher_backend == ("hybridep" if plan.problem.device.name in HYBRIDEP_NVLINK
                                                  else "deepep")
    assert tc.tp_comm_overlap == (tp > 1 and tc.sequence_parallel)  # priced overlapped (W1)
    mla = moe and plan.problem.moe.mla is not None  # type: ignore[union-attr]
    assert bool(getattr(tc, "multi_latent_attention", False)) == mla  # MLATransformerConfig for MLA models
    if mla:
        assert (tc.mtp_num_layers or 0) == plan.problem.moe.moe.mtp_layers  # type: ignore[union-attr]
    return dataclasses.replace(plan.problem, job=job), cfg


@pytest.mark.parametrize("key", [*SAMPLE, *FIXED])
def test_megatron_core_objects_reprice_as_the_plan(key: str, plans: dict[str, LLMPlan], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("megatron") is None:
        pytest.skip("megatron-core is not installed (pip install '.[trainers]')")
    import megatron.core.transformer.transformer_config as tc_module

    # Transformer Engine is not installed here: its version checks stand for the recent TE the recipes run
    # (every other rule of __post_init__ runs as written).
    monkeypatch.setattr(tc_module, "is_te_min_version", lambda *a, **k: True)
    plan = plans[key]
    problem, cfg = megatron_readback(plan, _flags(export(plan, "megatron"), tmp_path))
    assert problem.job == plan.problem.job
    for f in dataclasses.fields(ParallelConfig):  # every knob, named where one differs
        assert getattr(cfg, f.name) == getattr(plan.config, f.name), f.name
    _same_price(plan, problem, cfg)


# ---------------------------------------------------------------- torchtitan: its JobConfig


@pytest.mark.parametrize("key", [*SAMPLE, *FIXED])
def test_torchtitan_job_config_reprices_as_the_plan(key: str, plans: dict[str, LLMPlan], tmp_path: Path) -> None:
    plan = plans[key]
    try:
        text = export(plan, "torchtitan")
    except DnnplaceError as exc:  # a knob torchtitan cannot run: refused in one line, never another run
        assert "\n" not in str(exc) and "torchtitan" in str(exc)
        return
    assert tomllib.loads(text)
    job = torchtitan_job(text, tmp_path)
    par, tr = job.parallelism, job.training
    tp, pp, cp = par.tensor_parallel_degree, par.pipeline_parallel_degree, par.context_parallel_degree
    shard, rep = par.data_parallel_shard_degree, par.data_parallel_replicate_degree
    dp = plan.problem.cluster.gpus // (tp * pp * cp)
    assert max(shard, 1) * max(rep, 1) == dp
    mbs = tr.local_batch_size if pp == 1 else par.pipeline_parallel_microbatch_size
    if pp == 1:  # torchtitan accumulates global / (local x dp) micro-batches (W2)
        assert tr.global_batch_size // (tr.local_batch_size * dp) == plan.problem.job.global_batch // (mbs * dp)
    recompute = {"none": "none", "full": "full"}[job.activation_checkpoint.mode]
    zero = 3 if shard > 1 else 0
    c, moe = _runs(plan), plan.problem.moe is not None
    layers = tuple(c.layers_per_stage)
    vp = 1
    if pp > 1:  # the split torchtitan builds: decoder layers per model part, parts round-robin over the ranks
        parts = par.module_fqns_per_model_part
        layers = tuple(sum(1 for m in part if m.startswith("layers.")) for part in parts)
        vp = len(parts) // pp
        assert par.pipeline_parallel_schedule == ("Interleaved1F1B" if vp > 1 else "1F1B")
    cfg = dataclasses.replace(c, tp=tp, pp=pp, vp=vp, cp=cp, dp=dp, mbs=mbs, recompute=recompute, zero=zero,
                              distributed_optimizer=zero >= 1, sequence_parallel=tp > 1, layers_per_stage=layers,
                              ep=par.expert_parallel_degree if moe else 1,
                              etp=par.expert_tensor_parallel_degree if moe else 1,
                              dispatcher=("flex" if par.expert_parallel_comm_backend == "deepep" else "alltoall")
                              if moe else "alltoall")
    for f in dataclasses.fields(ParallelConfig):
        assert getattr(cfg, f.name) == getattr(c, f.name), f.name
    _same_price(plan, plan.problem, cfg)


# ---------------------------------------------------------------- DeepSpeed: its DeepSpeedConfig


@pytest.mark.parametrize("key", [*SAMPLE, *FIXED])
def test_deepspeed_config_reprices_as_the_plan(key: str, plans: dict[str, LLMPlan],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import copy
    import json

    plan = plans[key]
    try:
        text = export(plan, "deepspeed")
    except DnnplaceError as exc:
        assert "\n" not in str(exc) and "deepspeed" in str(exc).lower()
        return
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed (pip install '.[trainers]')")
    import deepspeed.runtime.config as ds_runtime_config
    from deepspeed.runtime.config import DeepSpeedConfig

    # Without an initialised process group DeepSpeed falls back to world size 1 before it asks the mpu.
    monkeypatch.setattr(ds_runtime_config.dist, "get_rank", lambda *a, **k: 0)
    doc = json.loads(text)
    ds = doc.get("ds_config", doc)
    c = _runs(plan)
    dp = c.dp

    class MPU:  # DeepSpeed reads the data-parallel size from the model-parallel unit it is given
        @staticmethod
        def get_data_parallel_world_size() -> int:
            return int(dp)

    cfg = DeepSpeedConfig(copy.deepcopy(ds), mpu=MPU())
    mbs, accum = cfg.train_micro_batch_size_per_gpu, cfg.gradient_accumulation_steps
    assert mbs * accum * dp == plan.problem.job.global_batch
    zero = cfg.zero_optimization_stage
    pp = cfg.pipeline["stages"]
    tp = max(cfg.tensor_parallel_config.autotp_size, 1)
    recompute = "full" if cfg.pipeline["activation_checkpoint_interval"] == 1 else "none"
    layers = tuple(doc["pipeline_module"]["decoder_layers_per_stage"]) if "pipeline_module" in doc else (
        c.layers_per_stage)
    back = dataclasses.replace(c, tp=tp, pp=pp, mbs=mbs, zero=zero, distributed_optimizer=zero >= 1,
                               recompute=recompute, layers_per_stage=layers)
    for f in ("tp", "pp", "mbs", "zero", "distributed_optimizer", "recompute", "layers_per_stage"):
        assert getattr(back, f) == getattr(c, f), f
    _same_price(plan, plan.problem, back)


#: The sample plans each narrower trainer runs (the rest it refuses in one line): the round trips above re-price
#: these, so the coverage cannot shrink to refusals unnoticed.
EXPORTED = {"torchtitan": {"dense-pp1-zero0", "dense-pp2-zero3", "dense-cp2-zero3", "dense-vp-zero3",
                           "dense-vp4-zero0", "moe-replicated-flex", "moe-replicated-cp-etp",
                           "moe-replicated-empty-modules"},
            "deepspeed": {"dense-pp1-zero0", "dense-blackwell-graphs", "dense-pp2-zero1-full", "moe-zero1-full",
                          "moe-empty-modules-no-overlap", "moe-skewed-routing"}}


@pytest.mark.parametrize("target", sorted(EXPORTED))
def test_each_trainer_runs_its_share_of_the_sample(target: str, plans: dict[str, LLMPlan]) -> None:
    ran = set()
    for key, plan in plans.items():
        try:
            export(plan, target)
        except DnnplaceError:
            continue
        ran.add(key)
    assert ran == EXPORTED[target]
