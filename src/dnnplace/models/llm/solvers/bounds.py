"""Proven lower bounds on a base configuration's step time and memory, over all its layer splits."""

from __future__ import annotations

import numpy as np

from dnnplace.models.llm.evaluation import memory, schedule
from dnnplace.models.llm.evaluation import moe as moe_cost
from dnnplace.models.llm.evaluation.candidates import take_rows
from dnnplace.models.llm.evaluation.step import (
    KINDS,
    Candidates,
    StageCosts,
    p2p_time,
    split_lower_bound,
    stage_costs,
)
from dnnplace.models.llm.solvers.grid import Columns, as_candidates, row_groups
from dnnplace.models.llm.spec import LLMProblem


def lower_bounds(problem: LLMProblem, cols: Columns, rows: np.ndarray,
                 split_rows: dict[tuple[int, int], np.ndarray] | None = None,
                 floor_out: np.ndarray | None = None, costs: StageCosts | None = None,
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Proven lower bounds on the step time of each base configuration over all its layer splits:
    infinite where no split can fit (:func:`static_memory_lb`), and the time bound alone; ``floor_out``
    receives the part of them the ZeRO-2/3 collectives make (:func:`_sharded_floor`); ``costs``: the
    rows' :func:`stage_costs`, when the caller has them."""
    L = problem.arch.num_layers
    rows_in = rows
    # The stage costs and the schedule bound do not read the data-parallel sharding knobs: computed once per
    # set of ZeRO twins, and spread back (``back``) to every row.
    full = as_candidates(cols, rows, np.zeros((len(rows), 1)))
    same = [k for k in sorted(cols) if k not in _SHARDING_KNOBS]
    first_row, back = row_groups([cols[k][rows] for k in same])
    rows = rows[first_row]
    pp, vp = cols["pp"][rows].astype(float), cols["vp"][rows].astype(float)
    c = as_candidates(cols, rows, np.zeros((len(rows), 1)))
    costs = take_rows(costs, first_row) if costs is not None else stage_costs(problem, c)
    layer, first, last = costs.per_layer(), costs.extras("first"), costs.extras("last")
    total = costs.layers_work(np.full(len(rows), float(L))) + first + last  # an MoE model: its exact layer mix
    one = np.where(pp == 1, total, 0.0)
    lb_max = np.maximum.reduce([total / pp, first + vp * layer, last + vp * layer, one])
    p2p = p2p_time(problem, c, costs.tokens)
    lb = schedule.pipeline_time(lb_max, total, costs.m, vp) + schedule.pp_exposed(p2p, c.pp, c.vp, costs.m)
    if split_rows is not None:  # the schedule over the splits the search may choose (a proven bound)
        lb = np.maximum(lb, split_lower_bound(costs, c, p2p, split_rows))
    per_f, per_b = (np.sum([costs.layer[k][part] for k in KINDS], axis=0)[back] for part in (0, 1))
    floor = _sharded_floor(problem, full, per_f, per_b, costs.m[back])
    if floor_out is not None:
        floor_out[:] = floor
    lb = lb[back] + floor
    room = offload_room(problem, cols, rows_in)
    return np.where(static_memory_lb(problem, full, room) > problem.device.usable_memory_bytes, np.inf, lb), lb


def offload_room(problem: LLMProblem, cols: Columns, rows: np.ndarray) -> np.ndarray:
    """The most layers each base configuration may offload: its pin, else (the search choosing N) L - 1 where
    Megatron allows offloading (pp = 1, no recomputation, the search's ``offload_free`` column), else 0."""
    if "offload_layers" in cols:
        return cols["offload_layers"][rows].astype(float)
    if "offload_free" not in cols:
        return np.zeros(len(rows))
    ok = cols["offload_free"][rows] & (cols["pp"][rows] == 1) & (cols["recompute"][rows] == 0)
    return np.where(ok, problem.arch.num_layers - 1.0, 0.0)


#: Knobs the stage costs and the schedule do not read (the ZeRO stage and what follows from it).
_SHARDING_KNOBS = ("zero", "distributed_optimizer")


def _sharded_floor(problem: LLMProblem, c: Candidates, per_f: np.ndarray, per_b: np.ndarray,
                   m: np.ndarray) -> np.ndarray:
    """A proven lower bound on what ZeRO-2/3 add after the schedule (0 at stages 0-1 and for an MoE model,
    whose rules keep zero <= 1): the exposed per-layer collectives of :func:`fsdp.sharded_exposed` on the rank
    with the most layers (at least ceil(L / pp), in vp chunks; the exposure grows with the layers), without the step-end
    all-gather, and with the embedding and head where one rank holds everything (pp = 1)."""
    if problem.moe is not None:
        return np.zeros(len(c))
    from dnnplace.models.llm.evaluation import comm, fsdp, precision

    a = problem.arch
    zero, grad_b = c.sharding()
    domain = comm.nvlink_domain(problem.cluster)
    group = c.dp * c.cp
    span = c.tp * group
    bw, lat = comm.group_link(span, comm.members_per_domain(span, c.tp, domain), domain, problem.cluster.gpus,
                              problem.device)
    gather = precision.recipe(problem.job.precision).param_allgather_bytes()
    extra = np.where(c.pp == 1, memory.embedding_params(a, c.tp) + memory.head_params(a, c.tp, c.pp), 0.0)
    none = np.zeros(len(c))
    return fsdp.sharded_exposed(zero, none, group, bw, lat, memory.layer_params(a, c.tp), extra,
                                np.ceil(a.num_layers / c.pp), per_f, per_b, m, gather, grad_b, none, chunks=c.vp)


def static_memory_lb(problem: LLMProblem, c: Candidates, offload: np.ndarray | None = None) -> np.ndarray:
    """Proven lower bound on the peak memory of any split: the average rank's weights, gradients and
    optimizer state plus the fixed buffer allowance (the fullest rank holds at least the average);
    ``offload``: the most layers each may offload (their activations leave the bound)."""
    shard = np.where(c.dist, c.dp * c.cp, 1.0)
    if problem.moe is not None:  # the same average over an MoE model's parts (its experts sharded over edp)
        ep, etp, _, _, _ = c.expert()
        params, experts = _average_params(problem, c.tp, c.pp, ep, etp)
        eshard = np.where(c.dist, problem.cluster.gpus / (c.pp * ep * etp), 1.0)
        return ((memory.WEIGHT_BYTES + memory.GRAD_BYTES + memory.OPTIMIZER_BYTES / shard) * params
                + (memory.WEIGHT_BYTES + memory.GRAD_BYTES + memory.OPTIMIZER_BYTES / eshard) * experts
                + memory.BUFFER_FIXED_BYTES)
    params, _ = _average_params(problem, c.tp, c.pp, np.ones(len(c)), np.ones(len(c)))
    zero, grad_b = c.sharding()  # ZeRO-2 shards the gradients, ZeRO-3 the weights too
    group = np.maximum(c.dp * c.cp, 1.0)
    weights = memory.WEIGHT_BYTES / np.where(zero == 3, group, 1.0)
    grads = grad_b / np.where(zero >= 2, group, 1.0)
    average = (weights + grads + memory.OPTIMIZER_BYTES / shard) * params + memory.BUFFER_FIXED_BYTES
    off = np.zeros(len(c)) if offload is None else offload
    return np.maximum(average, _fullest_rank_lb(problem, c, shard, zero, grad_b, group, off))


def _fullest_rank_lb(problem: LLMProblem, c: Candidates, shard: np.ndarray, zero: np.ndarray, grad_b: np.ndarray,
                     group: np.ndarray, offload: np.ndarray) -> np.ndarray:
    """Proven lower bound on the peak memory of any split of a dense model: the rank with the most layers
    holds at least ceil(L / pp) of them, their state, and at least one micro-batch of each one's activations
    (1F1B keeps min(m, pp - r) >= 1 in flight; interleaving, with m >= pp, at least one per chunk), plus the
    ZeRO-2/3 working set and the buffers of :func:`step.rank_memory` (logits and the embedding left out)."""
    from dnnplace.models.llm.evaluation import fsdp, precision

    a = problem.arch
    rec = precision.recipe(problem.job.precision)
    n = np.ceil(a.num_layers / c.pp)
    lp = memory.layer_params(a, c.tp)
    seq = problem.job.seq_len / c.cp
    act = memory.layer_activation_bytes(a, seq, c.mbs, c.tp, c.sp, c.recompute)
    w = memory.WEIGHT_BYTES
    if rec.quantized:  # as rank_memory prices the recipe's layers: its weight copies and quantized saved inputs
        q = rec.quantized_layers(a.num_layers) / a.num_layers
        w = q * rec.weight_bytes(precision.ARCHITECTURES.get(problem.device.name, "")) + (1 - q) * w
        delta = precision.saved_input_delta(a, rec, seq * c.mbs, c.tp, np.where(c.sp, c.tp, 1.0))
        act = act + q * np.where(c.recompute == 2, 0.0, delta)
    acts = (n - np.minimum(offload, n)) * act + np.where(c.recompute == 2, memory.layer_activation_bytes(
        a, seq, c.mbs, c.tp, c.sp, np.zeros_like(c.recompute)), 0.0)
    state = (w / np.where(zero == 3, group, 1.0) + grad_b / np.where(zero >= 2, group, 1.0)
             + memory.OPTIMIZER_BYTES / shard) * lp * n
    work = lp * np.where(zero == 3, (1 + fsdp.PREFETCH) * min(w, memory.WEIGHT_BYTES) + grad_b,
                         np.where(zero == 2, grad_b, 0.0))
    return state + work + acts * (1 + memory.FRAGMENTATION) + memory.BUFFER_FIXED_BYTES


def state_floor(problem: LLMProblem, grad_bytes: float) -> float:
    """Proven lower bound on the peak memory per GPU of any layout of ``problem``: its gradients and optimizer
    state spread perfectly over every GPU, plus the fixed buffer allowance.  Every layout holds at least the
    average GPU's share (main gradients are sharded at most over all GPUs, the optimizer state likewise);
    the weights are left out, since a quantized recipe stores them in fewer bytes.  Why: a search that could
    not expand all of a large MoE model's expert layouts said "pin some knobs" for Qwen3-Coder-480B on 32
    GB200s, whose gradients and optimizer state alone overflow a GB200 whatever the layout."""
    one = np.ones(1)
    shared, experts = _average_params(problem, one, one, one, one)
    return float(((grad_bytes + memory.OPTIMIZER_BYTES) * (shared + experts) / problem.cluster.gpus)[0]
                 + memory.BUFFER_FIXED_BYTES)


def _average_params(problem: LLMProblem, tp: np.ndarray, pp: np.ndarray, ep: np.ndarray,
                    etp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(parameters outside the routed experts, routed-expert parameters) of the average pipeline rank of each
    layout: the model's layers, embedding and head over pp, their matrices over tp, the experts over ep x etp
    (0 for a dense model).  One count for the per-layout memory bound and the problem-wide floor."""
    a = problem.arch
    ends = memory.embedding_params(a, tp) + memory.head_params(a, tp, pp)
    if problem.moe is None:
        return (a.num_layers * memory.layer_params(a, tp) + ends) / pp, np.zeros_like(np.asarray(tp, dtype=float))
    mm = problem.moe
    attn = moe_cost.attention_params(mm, tp)
    shared = (mm.moe.num_dense_layers * (attn + moe_cost.dense_mlp_params(mm, tp))
              + mm.moe.num_moe_layers * (attn + moe_cost.moe_dense_params(mm, tp)) + ends) / pp
    layers = np.full(np.shape(tp), float(mm.moe.num_moe_layers))
    return shared, moe_cost.expert_params(mm, layers, ep, etp) / pp
