"""DeepSpeed: the engine config (``ds_config``) and the PipelineModule layer split of a plan, as one JSON.

The batch sizes satisfy DeepSpeed's own rule ``train_batch_size =
train_micro_batch_size_per_gpu * gradient_accumulation_steps * dp``; the
ZeRO stage is ``zero_optimization.stage`` (the distributed optimizer is stage
1; DeepSpeed's pipeline engine takes stages 0 and 1 only, so a pipelined plan
at stage 2 or 3 is refused), and the gradient dtype is both the gradient
reduction's ``communication_data_type`` and ``data_types.grad_accum_dtype``.
``pipeline_module.parts`` are the stage boundaries (``PipelineModule.parts``)
over the layer list ``[embedding, decoder layer 0 .. N-1, final norm, LM head]``.

DeepSpeed takes the model from the user's code, so the export spells out the
priced architecture (``architecture``: every field the cost model read) for
that code to build.  What DeepSpeed's engine would have to run differently
from the priced plan is refused in one line rather than silently dropped: it
has no interleaved (virtual) pipeline stages, no selective recompute and no
ring context parallelism.  Tensor parallelism and FP8 layers live in the
model code; ``notes`` says so where the plan uses them.  The plan is checked by
the planner's own rules first (:mod:`dnnplace.models.llm.exporters.checked`).  Everything
is written with :func:`json.dumps`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.exporters.checked import CheckedPlan, checked_plan
from dnnplace.models.llm.exporters.deepspeed_moe import moe_section
from dnnplace.models.llm.plan_file import rank_layers
from dnnplace.models.llm.spec import LLMPlan


def stage_layers(plan: CheckedPlan) -> list[int]:
    """Decoder layers per pipeline rank (the plan has no interleaving: DeepSpeed would refuse it)."""
    c = plan.config
    return [sum(rank_layers(c["layers_per_stage"], c["pp"], r)) for r in range(c["pp"])]


def parts(plan: CheckedPlan) -> list[int]:
    """Stage boundaries over ``[embedding, decoder layers..., norm, head]``: stage s owns ``parts[s]:parts[s+1]``."""
    per = stage_layers(plan)
    out, end = [0], 1  # the embedding is layer 0, on stage 0
    for n in per[:-1]:
        end += n
        out.append(end)
    out.append(plan.arch.num_layers + 3)
    return out


def expressible(plan: CheckedPlan) -> None:
    """Refuse, in one line, a plan whose knobs DeepSpeed's engine has no way to run as priced."""
    c, why = plan.config, []
    if c["vp"] > 1:
        why.append(f"vp={c['vp']} (DeepSpeed's pipeline engine has no interleaved stages: --fix vp=1)")
    if plan.runs_recompute == "selective":
        why.append("recompute=selective (DeepSpeed checkpoints whole layers only: --fix recompute=none or full)")
    if c["cp"] > 1:
        why.append(f"cp={c['cp']} (DeepSpeed has no ring context parallelism: --fix cp=1)")
    if _zero(c) >= 2 and c["pp"] > 1:
        why.append(f"zero={_zero(c)} with pp={c['pp']} (DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only: "
                   "--fix zero=1 or pp=1)")
    if why:
        raise DnnplaceError("export --to deepspeed: cannot run this plan as priced: " + "; ".join(why)
                            + "; re-plan with those knobs fixed")


def _zero(c: dict[str, Any]) -> int:
    return int(c.get("zero", 1 if c["distributed_optimizer"] else 0))


def notes(plan: CheckedPlan) -> list[str]:
    """What the plan leaves to the model code DeepSpeed is given, in words."""
    c, out = plan.config, []
    if plan.job["precision"] == "fp8":
        out.append("precision=fp8: DeepSpeed has no FP8 switch; bf16 is set and FP8 layers (Transformer Engine) "
                   "must be used in the model code")
    if c["tp"] > 1:
        out.append(f"tp={c['tp']}: tensor parallelism comes from the model code (a Megatron-style mpu passed to "
                   "deepspeed.initialize); ds_config.tensor_parallel.autotp_size records the degree")
    return out


def ds_config(plan: CheckedPlan) -> dict[str, Any]:
    """The DeepSpeed engine config."""
    c, j = plan.config, plan.job
    cfg: dict[str, Any] = {
        "train_batch_size": j["global_batch"],
        "train_micro_batch_size_per_gpu": c["mbs"],
        "gradient_accumulation_steps": c["num_microbatches"],
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": _zero(c)},
        "communication_data_type": str(c.get("grad_dtype", "fp32")),
        "data_types": {"grad_accum_dtype": str(c.get("grad_dtype", "fp32"))},
        "pipeline": {"stages": c["pp"], "activation_checkpoint_interval": 1 if c["recompute"] == "full" else 0},
    }
    if c["tp"] > 1:
        cfg["tensor_parallel"] = {"autotp_size": c["tp"]}
    if c["recompute"] == "full":
        cfg["activation_checkpointing"] = {
            "partition_activations": c["tp"] > 1,
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": False,
            "synchronize_checkpoint_boundary": False,
            "profile": False,
        }
    return cfg


def document(plan: CheckedPlan) -> dict[str, Any]:
    """The whole export as a JSON-ready dict."""
    expressible(plan)
    a, c = plan.arch, plan.config
    return {
        "format": "dnnplace.deepspeed-export",
        "model": a.name,
        "architecture": dataclasses.asdict(a),
        "parallelism": {k: c[k] for k in ("tp", "pp", "cp", "dp")},
        "ds_config": ds_config(plan),
        "pipeline_module": {
            "num_stages": c["pp"],
            "layers": ["embedding", f"decoder_layer x {a.num_layers}", "final_norm", "lm_head"],
            "num_layer_specs": a.num_layers + 3,
            "decoder_layers_per_stage": stage_layers(plan),
            "parts": parts(plan),
        },
        "notes": notes(plan),
    }


def render(plan: dict[str, Any] | LLMPlan) -> str:
    """The JSON text: pass ``ds_config`` to ``deepspeed.initialize`` and set ``PipelineModule.parts`` from it."""
    checked = checked_plan(plan, "deepspeed")
    doc = document(checked)
    if checked.problem.moe is not None:  # DeepSpeed-MoE's layer arguments (exporters/deepspeed_moe.py)
        doc["moe"] = moe_section(checked)
    return json.dumps(doc, indent=2) + "\n"
