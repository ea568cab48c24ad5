"""FSDP / ZeRO: sharded training state and its per-layer collectives, as pure functions of the shapes.

ZeRO stages (Rajbhandari et al., *ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models*, SC 2020, Sec. 5) shard over the ``shard`` data-parallel ranks:

* stage 1: the optimizer state (Megatron's distributed optimizer is this stage);
* stage 2: + the gradients (each rank reduce-scatters and keeps its shard);
* stage 3: + the parameters (torchtitan's FSDP2 ``fully_shard``, DeepSpeed ZeRO-3, Megatron-FSDP
  ``optim_grads_params``): every layer's parameters are all-gathered before its forward and again
  before its backward, and its gradients reduce-scattered after the backward.

With prefetching (FSDP2's implicit forward prefetch and explicit backward prefetch; DeepSpeed's
``stage3_prefetch_bucket_size``) the all-gather of layer i+1 runs while layer i computes, so only the
first all-gather and the last reduce-scatter are never hidden; in the backward the all-gather of the
next layer and the reduce-scatter of the previous share the same links, so they hide together behind
one layer's backward.  Memory beyond the shards: the gathered parameters of the layers in flight
(the current one and ``prefetch`` more) and one layer's unsharded gradient before it is reduced.

Byte counts per parameter are the trainers' defaults (:data:`TRAINER_BYTES`, with sources), and
the collective times are whatever ring formula the caller prices with -- here only their counts,
sizes and overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TRAINER_BYTES", "ShardBytes", "exposed_time", "layer_collectives", "state_bytes", "working_bytes"]

Array = np.ndarray


@dataclass(frozen=True)
class ShardBytes:
    """Bytes per parameter a trainer keeps and moves under sharding."""

    weight: float  # the compute copy of a parameter (gathered for use)
    sharded_param: float  # the persistent sharded parameter at stage 3 (the FP32 master when it is one)
    grad: float  # the gradient as reduced and kept
    optimizer: float  # optimizer state: Adam's 2 FP32 moments, plus an FP32 master kept apart from the parameter
    gather: float  # bytes per parameter the parameter all-gather moves
    reduce: float  # bytes per parameter the gradient reduce-scatter moves
    source: str


#: Defaults of the three trainers dnnplace exports to, mixed-precision AdamW.
TRAINER_BYTES: dict[str, ShardBytes] = {
    # FSDP2: the sharded parameter is the FP32 master (DTensor); MixedPrecisionPolicy casts the gathered
    # copy to param_dtype (bf16) and reduces gradients in reduce_dtype (fp32); AdamW keeps 2 FP32 moments.
    "torchtitan": ShardBytes(weight=2.0, sharded_param=4.0, grad=4.0, optimizer=8.0, gather=2.0,
                             reduce=4.0, source="torchtitan config: mixed_precision_param='bfloat16', "
                             "mixed_precision_reduce='float32'; torch.distributed.fsdp.fully_shard + "
                             "MixedPrecisionPolicy: sharded FP32 parameters, gathered in param_dtype"),
    # ZeRO-3 with bf16: bf16 parameters and gradients partitioned, FP32 master + 2 moments (K = 12).
    "deepspeed": ShardBytes(weight=2.0, sharded_param=2.0, grad=2.0, optimizer=12.0, gather=2.0,
                            reduce=2.0, source="ZeRO (SC 2020) Sec. 5: (2 + 2 + K) Psi / N_d with K = 12 for "
                            "mixed-precision Adam; DeepSpeed bf16 config: gradients reduced in bf16 unless "
                            "communication_data_type says otherwise"),
    # Megatron-FSDP (optim_grads_params): bf16 parameters, FP32 main gradients (grad_reduce_in_fp32), FP32
    # master + 2 moments in the distributed optimizer.
    "megatron": ShardBytes(weight=2.0, sharded_param=2.0, grad=4.0, optimizer=12.0, gather=2.0,
                           reduce=4.0, source="Megatron-Core DistributedDataParallelConfig "
                           "data_parallel_sharding_strategy='optim_grads_params' with use_megatron_fsdp; "
                           "theoretical_memory_usage.py byte counts (2 + 4 + 12)"),
}


def state_bytes(params: Array, shard: Array, stage: int, b: ShardBytes) -> dict[str, Array]:
    """Persistent bytes per GPU of ``params`` parameters sharded ``shard`` ways at ZeRO ``stage`` (0-3)."""
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0-3, got {stage}")
    s = np.maximum(np.asarray(shard, dtype=float), 1.0)
    opt_div = s if stage >= 1 else 1.0
    grad_div = s if stage >= 2 else 1.0
    weights = params * (b.sharded_param / s if stage == 3 else b.weight)
    return {"weights": weights, "gradients": params * b.grad / grad_div, "optimizer": params * b.optimizer / opt_div}


def working_bytes(layer_params: Array, stage: int, b: ShardBytes, prefetch: int = 1) -> Array:
    """Transient bytes of stage 3 beyond the shards: gathered layers in flight + one unsharded layer gradient.

    Stage 2 holds one layer's (bucket's) unsharded gradient until it is reduced; stages 0 and 1 nothing.
    """
    if stage == 3:
        return layer_params * ((1 + prefetch) * b.weight + b.grad)
    if stage == 2:
        return layer_params * b.grad
    return np.zeros_like(np.asarray(layer_params, dtype=float))


def layer_collectives(layer_params: Array, stage: int, b: ShardBytes) -> tuple[Array, Array, Array]:
    """Buffer bytes of one layer's (forward all-gather, backward all-gather, gradient reduce-scatter).

    Each is the whole layer's buffer; a ring moves (n-1)/n of it per rank (the caller's ring formula).
    Stage 3 gathers twice (the forward resharded its copy); stage 2 only reduce-scatters per layer.
    """
    zero = np.zeros_like(np.asarray(layer_params, dtype=float))
    ag = layer_params * b.gather if stage == 3 else zero
    rs = layer_params * b.reduce if stage >= 2 else zero
    return ag, ag, rs


def exposed_time(ag_fwd: Array, ag_bwd: Array, rs: Array, fwd: Array, bwd: Array, layers: Array,
                 microbatches: Array, reduce_every_microbatch: bool = True) -> Array:
    """Seconds of per-layer FSDP communication left exposed over one step, with one-layer prefetch.

    Per micro-batch, ``layers`` layers of forward ``fwd`` / backward ``bwd`` seconds each: the first
    forward all-gather is exposed, each later one hides behind the previous layer's forward; in the
    backward the next all-gather and the previous reduce-scatter share the links and hide together
    behind one layer's backward; the last reduce-scatter is exposed.  With ``reduce_every_microbatch``
    false (gradient sync only on the last micro-batch) the reduce-scatters run once per step.
    """
    n = np.maximum(layers, 1)
    m = np.maximum(microbatches, 1)
    fwd_exp = ag_fwd + (n - 1) * np.maximum(0.0, ag_fwd - fwd)
    both = ag_bwd + rs
    bwd_exp = ag_bwd + (n - 1) * np.maximum(0.0, both - bwd) + rs
    if reduce_every_microbatch:
        return m * (fwd_exp + bwd_exp)
    bwd_no_rs = ag_bwd + (n - 1) * np.maximum(0.0, ag_bwd - bwd)
    return m * fwd_exp + (m - 1) * bwd_no_rs + bwd_exp
