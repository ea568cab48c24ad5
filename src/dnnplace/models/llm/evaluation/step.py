"""One training step: the single LLM cost model, vectorised over candidate configurations.

:func:`evaluate_batch` prices many configurations at once (numpy arrays, one
entry per candidate; per pipeline rank a second axis).  :func:`evaluate` -- the
scalar evaluator -- validates one :class:`ParallelConfig` and calls
:func:`evaluate_batch` with a batch of one, so the search and the evaluator
share every formula.  docs/llm_planner.md explains each term.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dnnplace.core.catalogue import host_link
from dnnplace.kernels import roofline
from dnnplace.models.llm.evaluation import (
    comm,
    flops,
    fsdp,
    host,
    kernel_ledger,
    memory,
    moe_step,
    offload,
    precision,
    schedule,
)
from dnnplace.models.llm.evaluation import moe as moe_cost
from dnnplace.models.llm.evaluation.candidates import KINDS, BatchResult, Candidates, StageCosts, take_rows
from dnnplace.models.llm.rules import PRECISION_RECIPES
from dnnplace.models.llm.spec import HOST_OVERFLOW, MEMORY_KEYS, TIME_KEYS, LLMEstimate, LLMProblem, ParallelConfig

Array = np.ndarray


def stage_costs(problem: LLMProblem, c: Candidates) -> StageCosts:
    """Forward / backward seconds per micro-batch of one layer and of the first / last extras."""
    a, dev = problem.arch, problem.device
    domain, gpus = comm.nvlink_domain(problem.cluster), problem.cluster.gpus
    s, bf16 = problem.job.seq_len, problem.device.peak("bf16")
    tp = c.tp
    m = problem.job.global_batch / (c.dp * c.mbs)
    tokens = c.mbs * s / c.cp
    sp_div = np.where(c.sp, tp, 1.0)

    # The recipe's layers run their linear GEMMs in its format and add its casts; the layers it keeps in
    # BF16 do not (priced as the average layer: ``q`` is the quantized share).
    rec, gen = precision.recipe(problem.job.precision), precision.ARCHITECTURES.get(dev.name, "")
    shapes = flops.layer_gemms(a, tokens, tp)
    overlap = c.sp & rec.tp_overlap  # TE's userbuffers overlap, unless the recipe runs without it
    margins = flops.tp_overlap_sms(dev, gen, (tp > 1) & overlap)
    gf, gb = flops.fwd_bwd_gemm_times(shapes, dev, bf16, margins("bf16"))
    q = rec.quantized_layers(a.num_layers) / a.num_layers
    if rec.quantized:
        qf, qb = flops.fwd_bwd_gemm_times(shapes, dev, rec.gemm_peak(dev), margins(rec.gemm_format))
        gf = [q * x + (1 - q) * y for x, y in zip(qf, gf)]
        gb = [q * x + (1 - q) * y for x, y in zip(qb, gb)]
    attn_f, attn_b = flops.attention_times(a, tokens, s, tp, dev, c.cp)
    el_f, el_b = flops.elementwise_elements(a, tp, sp_div)
    comp_f = sum(gf) + attn_f + roofline.hbm_time(2.0 * tokens * el_f, dev)
    comp_b = sum(gb) + attn_b + roofline.hbm_time(2.0 * tokens * el_b, dev)
    if rec.quantized:
        cast_f, cast_b = precision.cast_bytes_per_token(a, rec, gen, tp, sp_div)
        comp_f = comp_f + q * roofline.hbm_time(tokens * cast_f, dev)
        comp_b = comp_b + q * roofline.hbm_time(tokens * cast_b, dev)

    # TP: with SP 2 all-gathers + 2 reduce-scatters each way, overlapped chunk-wise with the GEMM they feed
    # (NeMo's tp_comm_overlap); without SP 2 blocking all-reduces each way, and SP's four collectives blocking
    # where the recipe turns the overlap off -- the same four ring steps either way.
    tp_bw, tp_lat = comm.group_link(tp, comm.members_per_domain(tp, np.ones_like(tp), domain), domain, gpus, dev)
    # One ring step's worth: with SP the mean of an all-gather and a reduce-scatter, without it half an all-reduce
    # (the same ring time in the catalogue; NCCL's measured sweep where the switch is on, comm.collective_time).
    tp_in, act = comm.inside_domain(tp, domain, gpus), 2.0 * tokens * a.hidden
    ag_tp, rs_tp = (comm.collective_time(op, act, tp, tp_bw, tp_lat, tp_in, dev, c.sp)
                    for op in ("all_gather", "reduce_scatter"))
    ar_tp = comm.collective_time("all_reduce", act, tp, tp_bw, tp_lat, tp_in, dev, ~c.sp)
    coll = np.where(c.sp, 0.5 * (ag_tp + rs_tp), 0.5 * ar_tp)
    tp_f = np.where(overlap, sum(comm.overlapped(coll, g, tp) for g in gf), 4.0 * coll)
    tp_b = np.where(overlap, sum(comm.overlapped(coll, g, tp) for g in gb), 4.0 * coll)
    tp_f, tp_b = np.where(tp > 1, tp_f, 0.0), np.where(tp > 1, tp_b, 0.0)

    # CP: ring exchange of K and V (backward: also dK, dV), hidden behind the attention of the other steps.
    cp_bw, cp_lat = comm.group_link(tp * c.cp, np.ones_like(tp), domain, gpus, dev)  # ring p2p steps
    kv_step = 4.0 * tokens * a.kv_width / tp / cp_bw + cp_lat
    hide = (c.cp - 1) / c.cp
    cp_f = np.maximum(0.0, (c.cp - 1) * kv_step - attn_f * hide)
    cp_b = np.maximum(0.0, 2.0 * (c.cp - 1) * kv_step - attn_b * hide)
    kernel_ledger.note("collectives", (c.cp - 1) * kv_step, where=c.cp > 1)  # p2p steps: no table measures them

    # Recomputation: the backward pass first reruns the forward of the attention core or the whole layer.
    rc = c.recompute
    comp_b = comp_b + np.where(rc == 1, attn_f, np.where(rc == 2, comp_f, 0.0))
    cp_b = cp_b + np.where(rc >= 1, cp_f, 0.0)
    tp_b = tp_b + np.where(rc == 2, tp_f, 0.0)

    # Embedding (rank 0): lookup write + fp32 scatter-add of its gradient; SP: one reduce-scatter / all-gather.
    hid = tokens * a.hidden
    tp_edge = np.where(tp > 1, np.where(c.sp, coll, 2.0 * coll), 0.0)
    first = {"compute": (roofline.hbm_time(4.0 * hid / sp_div, dev), roofline.hbm_time(12.0 * hid / sp_div, dev)),
             "tp": (tp_edge, np.where((tp > 1) & c.sp, coll, 0.0)), "cp": (0.0 * tp, 0.0 * tp),
             "ep": (0.0 * tp, 0.0 * tp), "host": (0.0 * tp, 0.0 * tp)}
    # LM head (last rank): final norm, vocab-parallel GEMM (BF16 in every recipe), cross entropy on the logits.
    head = [(tokens, a.vocab / tp, np.full_like(tokens, float(a.hidden)))]
    hf, hb = flops.fwd_bwd_gemm_times(head, dev, bf16)
    logits = tokens * a.vocab / tp
    last = {"compute": (hf[0] + roofline.hbm_time(4.0 * hid / sp_div + flops.CE_BYTES_FWD * logits, dev),
                        hb[0] + roofline.hbm_time(6.0 * hid / sp_div + flops.CE_BYTES_BWD * logits, dev)),
            "tp": (np.where((tp > 1) & c.sp, coll, 0.0), tp_edge), "cp": (0.0 * tp, 0.0 * tp),
            "ep": (0.0 * tp, 0.0 * tp), "host": (0.0 * tp, 0.0 * tp)}
    # The host's time to issue the layer's ops, where the GPU does not hide it (evaluation/llm/host.py).
    gpu_f, gpu_b = comp_f + tp_f + cp_f, comp_b + tp_b + cp_b
    host_f = host.layer_host_seconds(dev.name, host.DENSE_MODULES, c.graphs, 0.0 * tp)
    layer = {"compute": (comp_f, comp_b), "tp": (tp_f, tp_b), "cp": (cp_f, cp_b), "ep": (0.0 * tp, 0.0 * tp),
             "host": host.layer_exposed(dev.name, host_f, gpu_f, gpu_b, c.graphs, sync=False,
                                        full_recompute=rc == 2)}
    if problem.moe is None:
        n_off = c.offloads()
        wait = None
        if np.any(n_off > 0):  # the offload copies' wait behind the layers' own time (evaluation/llm/offload.py)
            copy = offload.copy_seconds(saved_layer_bytes(problem, c), host_link(dev.name))
            wait = tuple(offload.exposed(n_off, a.num_layers, copy, sum(layer[k][part] for k in KINDS))
                         for part in (0, 1))
        return StageCosts(layer, first, last, m, tokens, offload=wait)  # type: ignore[arg-type]
    return moe_step.moe_stage_costs(problem, c, StageCosts(layer, first, last, m, tokens), coll)


def p2p_time(problem: LLMProblem, c: Candidates, tokens: Array) -> Array:
    """One pipeline send of a micro-batch's activation (sequence-parallel shard) to the next stage."""
    span = c.tp * c.cp * c.dp * c.pp
    bw, lat = comm.group_link(span, np.ones_like(span), comm.nvlink_domain(problem.cluster), problem.cluster.gpus,
                              problem.device)
    t = 2.0 * tokens * problem.arch.hidden / np.where(c.sp, c.tp, 1.0) / bw + lat
    kernel_ledger.note("collectives", t, where=c.pp > 1)  # a p2p send: no table measures it (ring model)
    return t


def stage_seconds(costs: StageCosts, c: Candidates) -> tuple[Array, Array]:
    """Forward and backward seconds per micro-batch of every virtual stage, (n, max pp * vp), model order:
    its layers at the per-layer cost, plus the embedding on stage 0 and the head on the last one."""
    layers = c.stages()
    s = np.arange(layers.shape[1])[None, :]
    first, last = (s == 0), (s == (c.pp * c.vp)[:, None] - 1)
    if costs.moe_layer is not None:
        dense_n, sparse_n = moe_cost.stage_layer_kinds(costs.pattern, layers)
    out = []
    for part in (0, 1):
        per_layer = np.sum([costs.layer[k][part] for k in KINDS], axis=0)
        emb = np.sum([costs.first[k][part] for k in KINDS], axis=0)
        head = np.sum([costs.last[k][part] for k in KINDS], axis=0)
        if costs.moe_layer is None:
            body = layers * per_layer[:, None]
        else:
            per_sparse = np.sum([costs.moe_layer[k][part] for k in KINDS], axis=0)
            body = dense_n * per_layer[:, None] + sparse_n * per_sparse[:, None]
        wait = costs.offload_wait()[part]  # offloading runs with pp = 1: its one stage waits
        out.append(body + first * emb[:, None] + last * head[:, None] + first * wait[:, None])
    return out[0], out[1]


def pipeline_makespans(c: Candidates, m: Array, fwd: Array, bwd: Array, p2p: Array) -> tuple[Array, Array]:
    """The schedule's makespan of every candidate with and without pipeline sends (:func:`schedule.makespan`),
    one recurrence per (pp, vp, m)."""
    with_p2p, without = np.empty(len(c)), np.empty(len(c))
    keys = np.stack([c.pp, c.vp, m], axis=1).astype(np.int64)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    for g, (pp, vp, mm) in enumerate(uniq):
        rows = np.flatnonzero(inverse.ravel() == g)
        n_st = int(pp * vp)
        f, b = fwd[rows, :n_st], bwd[rows, :n_st]
        d = np.where(pp > 1, p2p[rows], 0.0)
        # Candidates that differ only in knobs the schedule does not see (the ZeRO stage, the gradient dtype)
        # have the same stage times: one recurrence each.
        f, b, d, back = _distinct_rows(f, b, d)
        both = schedule.makespan(int(pp), int(vp), int(mm), np.concatenate([f, f]), np.concatenate([b, b]),
                                 np.concatenate([d, np.zeros_like(d)]))
        with_p2p[rows], without[rows] = both[:len(f)][back], both[len(f):][back]
    return with_p2p, without


def _distinct_rows(f: Array, b: Array, d: Array) -> tuple[Array, Array, Array, Array]:
    """The distinct rows of (f, b, d) and, per original row, the index of its distinct row."""
    if len(d) < 2:
        return f, b, d, np.arange(len(d))
    key = np.concatenate([f, b, d[:, None]], axis=1)
    _, first, back = np.unique(key, axis=0, return_index=True, return_inverse=True)
    return f[first], b[first], d[first], back.ravel()


def split_lower_bound(costs: StageCosts, c: Candidates, p2p: Array, rows: dict[tuple[int, int], Array]) -> Array:
    """A proven lower bound on the schedule's makespan (transfers included) over each candidate's layer splits.

    ``rows[(pp, vp)]``: the per-rank layer counts a search may choose, cut into chunks as
    :meth:`Candidates.config` does.  For every rank r the step takes at least the forward of the first
    micro-batch through the chunk-0 stages before r, r's own work on all m micro-batches, and the backward
    of the last one through those stages again (the last task of rank r is chunk 0's), with r transfers each
    way: max_r [m S_r + sum_{q<r} (F + B of rank q's chunk 0) + 2 r p2p]; then the smallest over the splits.
    """
    out = np.full(len(c), np.inf)
    layer, ef, el = costs.per_layer(), costs.extras("first"), costs.extras("last")
    keys = np.stack([c.pp, c.vp], axis=1).astype(np.int64)
    for (pp, vp), split in rows.items():
        idx = np.flatnonzero((keys[:, 0] == pp) & (keys[:, 1] == vp))
        if not len(idx) or not len(split):
            continue
        n = np.asarray(split, dtype=float)  # (rows, pp)
        r = np.arange(pp)
        full = np.ceil(n / vp)
        short_first = (r != pp - 1) | (r == 0)
        c0 = np.where(short_first, n - (vp - 1) * full, full)
        before = np.cumsum(c0, axis=1) - c0  # chunk-0 layers of the ranks before r
        block = max(1, 2_000_000 // (len(n) * pp))
        for lo in range(0, len(idx), block):
            b = idx[lo:lo + block]
            lay, f, last, mm = layer[b, None, None], ef[b, None, None], el[b, None, None], costs.m[b, None, None]
            body = (n * lay if costs.moe_layer is None  # an MoE model: its few dense layers at most at the cheaper cost
                    else take_rows(costs, b).layers_work(np.broadcast_to(n, (len(b),) + n.shape)))
            work = body + (r == 0) * f + (r == pp - 1) * last
            fill = before * lay + (r > 0) * f + 2.0 * r * np.where(pp > 1, p2p[b], 0.0)[:, None, None]
            out[b] = (mm * work + fill).max(axis=2).min(axis=1)
    return out


def evaluate_batch(problem: LLMProblem, c: Candidates, costs: StageCosts | None = None) -> BatchResult:
    """Step time, its breakdown and peak memory per GPU of every candidate."""
    a, dev = problem.arch, problem.device
    domain = comm.nvlink_domain(problem.cluster)
    costs = costs or stage_costs(problem, c)
    m, tokens = costs.m, costs.tokens
    width = c.rank_layers.shape[1]
    r = np.arange(width)[None, :]
    valid = r < c.pp[:, None]
    nl = c.rank_layers
    is_first, is_last = (r == 0), (r == c.pp[:, None] - 1)

    moe = costs.moe_layer
    if moe is not None:
        nd, ns = moe_step.rank_layer_kinds(c, costs.pattern, width)

    def per_rank(kind: str, part: int) -> Array:
        body = (nl * costs.layer[kind][part][:, None] if moe is None else
                nd * costs.layer[kind][part][:, None] + ns * moe[kind][part][:, None])
        return body + is_first * costs.first[kind][part][:, None] + is_last * costs.last[kind][part][:, None]

    fwd = {k: per_rank(k, 0) for k in KINDS}
    bwd = {k: per_rank(k, 1) for k in KINDS}
    wait_f, wait_b = costs.offload_wait()
    wait = is_first * (wait_f + wait_b)[:, None]  # the offload copies' wait (pp = 1: rank 0 only)
    stage = sum(fwd[k] + bwd[k] for k in KINDS) + wait
    stage_max = np.where(valid, stage, -np.inf).max(axis=1)
    rows = np.arange(len(c))
    bott = np.where(valid, stage, -np.inf).argmax(axis=1)
    sf, sb = stage_seconds(costs, c)
    with_p2p, pipe = pipeline_makespans(c, m, sf, sb, p2p_time(problem, c, tokens))
    pp_exp = with_p2p - pipe

    # Parameters per rank, data-parallel gradient reduce-scatter / parameter all-gather and the optimizer.
    if moe is None:
        params = (nl * memory.layer_params(a, c.tp)[:, None] + is_first * memory.embedding_params(a, c.tp)[:, None]
                  + is_last * memory.head_params(a, c.tp, c.pp)[:, None])
        experts = 0.0 * params
    else:
        params, experts = moe_step.moe_params(problem, c, nd, ns, is_first, is_last)
    group = (c.dp * c.cp)[:, None]
    span = c.tp[:, None] * group
    bw, lat = comm.group_link(span, comm.members_per_domain(span, c.tp[:, None], domain), domain,
                              problem.cluster.gpus, dev)
    buckets = np.ceil(params / memory.BUCKET_PARAMS)
    zero, grad_b = c.sharding()
    gb = grad_b[:, None]  # the gradient buffer's bytes per parameter (the grad_dtype knob)
    dist = c.dist[:, None]
    dp_in = comm.inside_domain(span, domain, problem.cluster.gpus)
    rs = comm.collective_time("reduce_scatter", gb * params, group, bw, lat, dp_in, dev, dist & valid)
    ar = comm.collective_time("all_reduce", gb * params, group, bw, lat, dp_in, dev, ~dist & valid)
    gather = precision.recipe(problem.job.precision).param_allgather_bytes()  # FP8 parameters gather 1 byte
    ag = comm.collective_time("all_gather", gather * params, group, bw, lat, dp_in, dev, dist & valid)
    if moe is not None:  # the experts' gradients reduce over their own data-parallel group (edp ranks)
        ep, etp, _, _, _ = c.expert()
        edp = (problem.cluster.gpus / (c.pp * ep * etp))[:, None]
        e_in = comm.inside_domain(edp * (ep * etp)[:, None], domain, problem.cluster.gpus)
        rs = rs + comm.collective_time("reduce_scatter", gb * experts, edp, bw, lat, e_in, dev, dist & valid)
        ar = ar + comm.collective_time("all_reduce", gb * experts, edp, bw, lat, e_in, dev, ~dist & valid)
        ag = ag + comm.collective_time("all_gather", gather * experts, edp, bw, lat, e_in, dev, dist & valid)
        buckets = np.ceil((params + experts) / memory.BUCKET_PARAMS)
    f_all, b_all = fwd["compute"] + fwd["tp"] + fwd["cp"], bwd["compute"] + bwd["tp"] + bwd["cp"]
    ag_end = comm.overlapped(ag, f_all, buckets)
    dp_exp = np.where(dist, comm.overlapped(rs, b_all, buckets) + ag_end, comm.overlapped(ar, b_all, buckets))
    shard = np.where(dist, group, 1.0)
    if moe is None:  # ZeRO-2/3 replace the step-end reduce-scatter by per-layer collectives (fsdp.py)
        lp = memory.layer_params(a, c.tp)[:, None]
        per_f, per_b = (np.sum([costs.layer[k][part] for k in KINDS], axis=0)[:, None] for part in (0, 1))
        dp_exp = fsdp.sharded_exposed(zero[:, None], dp_exp, group, bw, lat, lp, params - nl * lp, nl, per_f, per_b,
                                      m[:, None], gather, gb, ag_end, chunks=c.vp[:, None], inside=dp_in, dev=dev)
    gshard = np.where(zero[:, None] >= 2, group, 1.0)
    opt = roofline.hbm_time(28.0 * params / shard + gb * params / gshard, dev)
    if moe is not None:
        eshard = np.where(dist, edp, 1.0)
        opt = opt + roofline.hbm_time(28.0 * experts / eshard + gb * experts, dev)
    tail = np.where(valid, dp_exp + opt, -np.inf)
    tail_rank = tail.argmax(axis=1)
    step = with_p2p + tail.max(axis=1)

    time = {"compute": m * stage_compute(fwd, bwd, rows, bott) + opt[rows, tail_rank],
            "tp_comm_exposed": m * (fwd["tp"] + bwd["tp"])[rows, bott],
            "cp_comm_exposed": m * (fwd["cp"] + bwd["cp"])[rows, bott],
            "pp_comm_exposed": pp_exp, "dp_comm_exposed": dp_exp[rows, tail_rank],
            "bubble": np.maximum(pipe - m * stage_max, 0.0),  # pp=1: equal sums differ in the last ulp (-2e-15)
            "ep_comm_exposed": m * (fwd["ep"] + bwd["ep"])[rows, bott],
            "offload_exposed": m * wait[rows, bott], "host_exposed": m * (fwd["host"] + bwd["host"])[rows, bott]}
    assert tuple(time) == TIME_KEYS

    mem = rank_memory(problem, c, params, nl, r, is_last, m, tokens)
    if moe is None:
        lp = memory.layer_params(a, c.tp)[:, None]
        mem = fsdp.sharded_memory(mem, zero[:, None], group, params, lp, params - nl * lp, gb)
    if moe is not None:
        mem = moe_step.moe_rank_memory(problem, c, mem, experts, nd, ns, r, m, tokens, rank_chunks(c, width))
    total = sum(mem.values())
    total = np.where(valid, total, -np.inf)
    worst = total.argmax(axis=1)
    mem_total = total[rows, worst]
    gpu_fits = mem_total <= dev.usable_memory_bytes
    host = None
    fits = gpu_fits
    n_off = c.offloads()
    if np.any(n_off > 0):  # the offloaded activations must fit in the host memory per GPU
        host = offload.host_bytes(n_off, saved_layer_bytes(problem, c))
        fits = gpu_fits & (host <= host_capacity(problem))
    return BatchResult(step=step, time=time, memory={k: v[rows, worst] for k, v in mem.items()},
                       mem_total=mem_total, fits=fits, m=m, pipeline=with_p2p, tail=tail.max(axis=1), host=host,
                       gpu_fits=gpu_fits)


def host_capacity(problem: LLMProblem) -> float:
    """Host memory per GPU of the problem's system (0 without a host link in the catalogue)."""
    link = host_link(problem.device.name)
    return 0.0 if link is None else link.memory_bytes


def saved_layer_bytes(problem: LLMProblem, c: Candidates) -> Array:
    """Bytes one layer saves for its backward pass, per micro-batch (the recipe's quantized saved inputs
    included): what :func:`rank_memory` keeps per in-flight layer and activation offloading moves to the host."""
    a = problem.arch
    rec = precision.recipe(problem.job.precision)
    seq_loc = problem.job.seq_len / c.cp
    act_layer = memory.layer_activation_bytes(a, seq_loc, c.mbs, c.tp, c.sp, c.recompute)
    if rec.quantized:
        q = rec.quantized_layers(a.num_layers) / a.num_layers
        delta = precision.saved_input_delta(a, rec, seq_loc * c.mbs, c.tp, np.where(c.sp, c.tp, 1.0))
        act_layer = act_layer + q * np.where(c.recompute == 2, 0.0, delta)
    return act_layer


def moe_peak_memory(problem: LLMProblem, c: Candidates) -> Array:
    """Peak bytes per GPU of every candidate of an MoE model, without pricing its time: the memory part of
    :func:`evaluate_batch` alone (the same terms, in the same order; a test checks they agree), so that the
    search can drop the (configuration, split) rows that cannot fit before it prices their schedules."""
    job = problem.job
    m = job.global_batch / (c.dp * c.mbs)
    tokens = c.mbs * job.seq_len / c.cp
    width = c.rank_layers.shape[1]
    r = np.arange(width)[None, :]
    valid = r < c.pp[:, None]
    is_first, is_last = (r == 0), (r == c.pp[:, None] - 1)
    nd, ns = moe_step.rank_layer_kinds(c, problem.moe.moe.moe_layers, width)
    params, experts = moe_step.moe_params(problem, c, nd, ns, is_first, is_last)
    mem = rank_memory(problem, c, params, c.rank_layers, r, is_last, m, tokens)
    mem = moe_step.moe_rank_memory(problem, c, mem, experts, nd, ns, r, m, tokens, rank_chunks(c, width))
    return np.where(valid, sum(mem.values()), -np.inf).max(axis=1)

def stage_compute(fwd: dict[str, Array], bwd: dict[str, Array], rows: Array, bott: Array) -> Array:
    return (fwd["compute"] + bwd["compute"])[rows, bott]


def rank_chunks(c: Candidates, width: int) -> Array:
    """Layers of each rank's chunks, (n, width ranks, max vp): chunk k of rank r is virtual stage k pp + r."""
    stages = c.stages()
    pp = c.pp.astype(np.int64)[:, None, None]
    r = np.arange(width)[None, :, None]
    k = np.arange(int(c.vp.max()))[None, None, :]
    s = k * pp + r
    ok = (r < pp) & (k < c.vp[:, None, None])
    flat = np.where(ok, s, 0).reshape(len(c), -1)
    return np.where(ok, np.take_along_axis(stages, flat, axis=1).reshape(ok.shape), 0.0)


def rank_memory(problem: LLMProblem, c: Candidates, params: Array, nl: Array, r: Array, is_last: Array,
                m: Array, tokens: Array) -> dict[str, Array]:
    """Peak bytes per pipeline rank by component (MEMORY_KEYS)."""
    a = problem.arch
    col = (lambda x: x[:, None])  # noqa: E731
    rec = precision.recipe(problem.job.precision)
    seq_loc = problem.job.seq_len / c.cp
    act_layer = saved_layer_bytes(problem, c)  # the recipe's quantized saved inputs included
    weights = memory.WEIGHT_BYTES * params
    if rec.quantized:
        # Quantized layers keep the recipe's weight copies (FP8 parameters, or BF16 + cached quantized copies);
        # embedding and LM head stay BF16.
        q = rec.quantized_layers(a.num_layers) / a.num_layers
        wb = q * rec.weight_bytes(precision.ARCHITECTURES.get(problem.device.name, "")) + (1 - q) * memory.WEIGHT_BYTES
        layer_params = nl * col(memory.layer_params(a, c.tp))
        weights = weights + (wb - memory.WEIGHT_BYTES) * layer_params
    act = col(act_layer) * memory.inflight_layers(r, col(c.pp), col(c.vp), col(m), rank_chunks(c, nl.shape[1]))
    # Offloaded layers (pp = 1, one micro-batch in flight) leave the GPU's peak: TE keeps L - N layers' worth.
    act = act - (r == 0) * col(np.minimum(c.offloads(), nl[:, 0]) * act_layer)
    working = memory.layer_activation_bytes(a, seq_loc, c.mbs, c.tp, c.sp, np.zeros_like(c.recompute))
    act = act + col(np.where(c.recompute == 2, working, 0.0))  # full recompute rebuilds one layer at a time
    sp_div = np.where(c.sp, c.tp, 1.0)
    act = act + is_last * col(memory.head_activation_bytes(a, tokens, c.tp, sp_div, problem.job.cross_entropy))
    shard = np.where(c.dist, c.dp * c.cp, 1.0)
    mem = {"weights": weights, "gradients": col(c.sharding()[1]) * params,
           "optimizer": memory.OPTIMIZER_BYTES * params / col(shard), "activations": act,
           "buffers": memory.BUFFER_FIXED_BYTES + memory.FRAGMENTATION * act}
    assert tuple(mem) == MEMORY_KEYS
    return mem


def estimate_at(problem: LLMProblem, res: BatchResult, i: int) -> LLMEstimate:
    """Candidate ``i`` of a batch result as an :class:`LLMEstimate`."""
    step = float(res.step[i])
    job = problem.job
    mf = (flops.executed_flops_per_step(problem.arch, job.seq_len, job.global_batch) if problem.moe is None
          else moe_cost.model_flops_per_step(problem.moe, job.seq_len, job.global_batch))
    mem = {k: float(v[i]) for k, v in res.memory.items()}
    fits = bool(res.fits[i])
    gpu_fits = fits if res.gpu_fits is None else bool(res.gpu_fits[i])
    host = 0.0 if res.host is None else float(res.host[i])
    flop_rate = mf / (step * problem.cluster.gpus)
    bf16 = problem.device.peak_flops.get("bf16")
    return LLMEstimate(
        # against the peak of the format the GEMMs run at, so never above 100 %; NVIDIA's tables divide FP8
        # runs by the BF16 peak too, which is the separate, labelled figure
        step_time_s=step, tokens_per_s=job.global_batch * job.seq_len / step,
        mfu=flop_rate / problem.device.peak(PRECISION_RECIPES[job.precision][0]),
        mfu_bf16_peak=flop_rate / bf16 if bf16 else None,
        model_flops_per_step=mf, memory_per_gpu_bytes=float(res.mem_total[i]), memory_breakdown=mem,
        time_breakdown={k: float(v[i]) for k, v in res.time.items()}, fits=fits,
        overflow=None if fits else (HOST_OVERFLOW if gpu_fits else max(mem, key=lambda k: mem[k])),
        num_microbatches=int(res.m[i]), host_memory_bytes=host,
        host_capacity_bytes=host_capacity(problem) if host > 0 else 0.0)


def overflow_text(problem: LLMProblem, est: LLMEstimate) -> str:
    """One line: which memory overflows and by how much."""
    if est.overflow == HOST_OVERFLOW:
        return (f"offloaded activations need {est.host_memory_bytes / 1e9:.1f} GB of host memory per GPU > "
                f"{est.host_capacity_bytes / 1e9:.1f} GB on {problem.device.name}'s system")
    parts = ", ".join(f"{k} {v / 1e9:.1f}" for k, v in est.memory_breakdown.items())
    return (f"needs {est.memory_per_gpu_bytes / 1e9:.1f} GB per GPU > {problem.device.usable_memory_bytes / 1e9:.1f}"
            f" GB on {problem.device.name} ({parts} GB); largest: {est.overflow}")


def evaluate(problem: LLMProblem, config: ParallelConfig) -> LLMEstimate:
    """The evaluator: predicted step time, breakdowns and memory of one configuration."""
    from dnnplace.models.llm.evaluation.rules import check_config, check_problem

    check_problem(problem)
    check_config(problem, config)
    return estimate_at(problem, evaluate_batch(problem, Candidates.of([config])), 0)


@dataclass(frozen=True)
class StageTimes:
    """Seconds per micro-batch of each virtual stage (model order), of one pipeline send, and of what the
    step adds after the schedule (``tail``: the largest exposed data-parallel communication + optimizer step
    over the ranks, as the evaluator adds it)."""

    forward: tuple[float, ...]
    backward: tuple[float, ...]
    p2p: float
    num_microbatches: int
    tail: float = 0.0


def stage_times(problem: LLMProblem, config: ParallelConfig) -> StageTimes:
    """The evaluator's own per-layer and embedding / head costs, laid out per virtual stage.

    What the pipeline schedule simulation (:mod:`dnnplace.models.llm.interleaved`) runs, so that
    the evaluator's pipeline term can be checked against the schedule itself.
    """
    from dnnplace.models.llm.evaluation.rules import check_config, check_problem

    check_problem(problem)
    check_config(problem, config)
    c = Candidates.of([config])
    costs = stage_costs(problem, c)
    fwd, bwd = stage_seconds(costs, c)
    n = config.pp * config.vp
    res = evaluate_batch(problem, c, costs)
    tail = float(res.tail[0]) if res.tail is not None else 0.0
    return StageTimes(tuple(float(x) for x in fwd[0, :n]), tuple(float(x) for x in bwd[0, :n]),
                      float(p2p_time(problem, c, costs.tokens)[0]), int(costs.m[0]), tail)
