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

The evaluator (``step.py``) prices the ``zero`` knob through :func:`sharded_exposed` and
:func:`sharded_memory` with the planner's own Megatron bytes (bf16 weights, the ``grad_dtype``
knob's gradients, 12 bytes of FP32 master + moments, the recipe's parameter all-gather bytes), the
same ring formula and the same dp x cp group as the distributed optimizer's collectives.  Stages 2
and 3 reduce-scatter every micro-batch (DeepSpeed ZeRO-2/3 reduce into the partitioned buffer after
each backward; FSDP2 reduce-scatters after each backward unless ``set_requires_gradient_sync(False)``,
which torchtitan 0.2 does not call), so their per-layer terms repeat over the micro-batches.  The
exposed time is added after the pipeline schedule (like the distributed optimizer's): a lower
figure than one that would also stretch every stage's micro-batch and the bubble with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dnnplace.core.catalogue import TRAINING_STACK, DeviceSpec
from dnnplace.models.llm.config import GRAD_DTYPES
from dnnplace.models.llm.evaluation import comm

__all__ = ["GRAD_DTYPE_BYTES", "PREFETCH", "TRAINER_BYTES", "ShardBytes", "exposed_time", "layer_collectives",
           "sharded_exposed", "sharded_memory", "state_bytes", "working_bytes"]

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


#: Bytes per element of each gradient dtype (GRAD_DTYPES order), from the catalogue.
GRAD_DTYPE_BYTES: tuple[float, ...] = (TRAINING_STACK.grad_bytes, TRAINING_STACK.bf16_grad_bytes)
assert GRAD_DTYPES == ("fp32", "bf16")
#: Units gathered ahead of the one computing (the catalogue's fsdp_prefetch, with its source).
PREFETCH = TRAINING_STACK.fsdp_prefetch


def sharded_exposed(zero: Array, replicated: Array, group: Array, bw: Array, lat: Array, layer_p: Array,
                    extra_p: Array, layers: Array, layer_f: Array, layer_b: Array, m: Array, gather_b: float,
                    grad_b: Array, ag_end: Array, chunks: Array | float = 1.0, inside: Array | None = None,
                    dev: DeviceSpec | None = None) -> Array:
    """Exposed data-parallel seconds per step of each pipeline rank at ZeRO stage ``zero``.

    Stages 0-1 keep ``replicated`` (the step-end all-reduce or reduce-scatter + all-gather).  Stage 2:
    every micro-batch reduce-scatters each layer's gradient behind the next layer's backward
    (:func:`exposed_time`), and the step ends with the distributed optimizer's parameter all-gather
    ``ag_end``.  Stage 3: each layer is all-gathered before its forward and its backward and its gradient
    reduce-scattered, with one-layer prefetch.  The embedding / LM head (``extra_p`` parameters of the rank
    beyond its ``layers`` layers of ``layer_p``) are priced exposed: their compute is too short to hide them.
    ``layer_f`` / ``layer_b``: one layer's forward / backward seconds per micro-batch.  With ``chunks`` model
    chunks per rank (interleaving) each chunk's pass over a micro-batch starts with an unhidden all-gather
    and ends with an unhidden reduce-scatter: per micro-batch chunks x first + (layers - chunks) x the rest,
    whatever the chunks' sizes (>= 1 layer each).  ``inside`` / ``dev`` given: each collective priced by
    :func:`comm.collective_time` (NCCL's measured sweep where the device's switch is on and the group is in it).
    """
    def coll(op: str, nbytes: Array, used: Array) -> Array:
        if dev is None or inside is None:
            return comm.ring_time(nbytes, group, bw, lat)
        return comm.collective_time(op, nbytes, group, bw, lat, inside, dev, used)

    staged = (zero >= 2) & (layers > 0)
    ag = coll("all_gather", gather_b * layer_p, staged & (zero == 3))
    rs = coll("reduce_scatter", grad_b * layer_p, staged)
    ag_x = coll("all_gather", gather_b * extra_p, staged & (zero == 3))
    rs_x = coll("reduce_scatter", grad_b * extra_p, staged)
    ag, rs, ag_x, rs_x, n = np.broadcast_arrays(ag, rs, ag_x, rs_x, layers)
    none = np.zeros_like(ag)
    k = np.maximum(np.minimum(chunks, np.maximum(n, 1.0)), 1.0)
    per = n / k  # exposed_time is linear in the layers: k chains of n / k layers
    three = k * exposed_time(ag, ag, rs, layer_f, layer_b, per, m) + m * (2.0 * ag_x + rs_x)
    two = k * exposed_time(none, none, rs, layer_f, layer_b, per, m) + m * rs_x + ag_end
    return np.where(n > 0, np.where(zero == 3, three, np.where(zero == 2, two, replicated)), replicated)


def sharded_memory(mem: dict[str, Array], zero: Array, group: Array, params: Array, layer_p: Array,
                   extra_p: Array, grad_b: Array, prefetch: int = PREFETCH) -> dict[str, Array]:
    """Peak bytes per rank at ZeRO stage ``zero``: ``mem`` (stages 0-1, the optimizer already sharded) with
    the gradients sharded at stages 2-3 and the weights at stage 3, plus the working set of
    :func:`working_bytes` (the largest unit -- a layer or the embedding / head -- gathered and in flight,
    and one unsharded unit gradient before its reduce-scatter)."""
    shard = np.maximum(group, 1.0)
    weights, grads = mem["weights"], mem["gradients"]
    w_per = np.divide(weights, params, out=np.zeros_like(weights), where=params > 0)
    biggest = np.where(params > 0, np.maximum(layer_p, extra_p), 0.0)
    grads2 = grads / shard + grad_b * biggest
    weights3 = weights / shard + (1 + prefetch) * w_per * biggest
    out = dict(mem)
    out["gradients"] = np.where(zero >= 2, grads2, grads)
    out["weights"] = np.where(zero == 3, weights3, weights)
    return out
