"""DeepSpeed: the engine config (``ds_config``) and the PipelineModule layer split of a plan, as one JSON.

The batch sizes satisfy DeepSpeed's own rule ``train_batch_size =
train_micro_batch_size_per_gpu * gradient_accumulation_steps * dp``; a
distributed optimizer becomes ZeRO stage 1 (the highest stage DeepSpeed's
pipeline engine supports).  ``pipeline_module.parts`` are the stage boundaries
(``PipelineModule.parts``) over the layer list ``[embedding, decoder layer 0 ..
N-1, final norm, LM head]``.  DeepSpeed has no interleaved (virtual) stages, no
selective recompute and no ring context parallelism; where the plan uses one,
the export keeps what DeepSpeed can express and says what it dropped in
``notes``.  Everything is written with :func:`json.dumps`.
"""

from __future__ import annotations

import json
from typing import Any

from dnnplace.frontends.llm_plan import rank_layers


def stage_layers(plan: dict[str, Any]) -> list[int]:
    """Decoder layers per pipeline rank (a rank's interleaved chunks collapse into one contiguous block)."""
    c = plan["config"]
    return [sum(rank_layers(c["layers_per_stage"], c["pp"], r)) for r in range(c["pp"])]


def parts(plan: dict[str, Any]) -> list[int]:
    """Stage boundaries over ``[embedding, decoder layers..., norm, head]``: stage s owns ``parts[s]:parts[s+1]``."""
    per = stage_layers(plan)
    out, end = [0], 1  # the embedding is layer 0, on stage 0
    for n in per[:-1]:
        end += n
        out.append(end)
    out.append(plan["model"]["num_layers"] + 3)
    return out


def notes(plan: dict[str, Any]) -> list[str]:
    """What the plan asks for that DeepSpeed cannot express, in words."""
    c, out = plan["config"], []
    if c["vp"] > 1:
        out.append(f"vp={c['vp']}: DeepSpeed has no interleaved pipeline stages; each rank runs its "
                   f"{c['vp']} chunks as one contiguous block, so the pipeline bubble is larger than planned")
    if c["recompute"] == "selective":
        out.append("recompute=selective: DeepSpeed has no selective recompute; no activation checkpointing is set")
    if c["cp"] > 1:
        out.append(f"cp={c['cp']}: DeepSpeed has no ring context parallelism; the nearest is Ulysses "
                   "sequence parallelism (set it up in the model code)")
    if plan["job"]["precision"] == "fp8":
        out.append("precision=fp8: DeepSpeed has no FP8 switch; bf16 is set and FP8 layers (Transformer Engine) "
                   "must be used in the model code")
    if c["tp"] > 1:
        out.append(f"tp={c['tp']}: tensor parallelism comes from the model code (a Megatron-style mpu passed to "
                   "deepspeed.initialize); ds_config.tensor_parallel.autotp_size records the degree")
    return out


def ds_config(plan: dict[str, Any]) -> dict[str, Any]:
    """The DeepSpeed engine config."""
    c, j = plan["config"], plan["job"]
    cfg: dict[str, Any] = {
        "train_batch_size": j["global_batch"],
        "train_micro_batch_size_per_gpu": c["mbs"],
        "gradient_accumulation_steps": c["num_microbatches"],
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 1 if c["distributed_optimizer"] else 0},
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


def document(plan: dict[str, Any]) -> dict[str, Any]:
    """The whole export as a JSON-ready dict."""
    m, c = plan["model"], plan["config"]
    return {
        "format": "dnnplace.deepspeed-export",
        "model": m["name"],
        "parallelism": {k: c[k] for k in ("tp", "pp", "cp", "dp")},
        "ds_config": ds_config(plan),
        "pipeline_module": {
            "num_stages": c["pp"],
            "layers": ["embedding", f"decoder_layer x {m['num_layers']}", "final_norm", "lm_head"],
            "num_layer_specs": m["num_layers"] + 3,
            "decoder_layers_per_stage": stage_layers(plan),
            "parts": parts(plan),
        },
        "notes": notes(plan),
    }


def render(plan: dict[str, Any]) -> str:
    """The JSON text: pass ``ds_config`` to ``deepspeed.initialize`` and set ``PipelineModule.parts`` from it."""
    return json.dumps(document(plan), indent=2) + "\n"
