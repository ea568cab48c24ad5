"""The MoE parts of the evaluator that work per pipeline rank: which layers a rank holds, its parameters, its memory.

Called by :mod:`.step` for a problem with ``moe`` set (``c``: its :class:`~.step.Candidates`, passed in so that
this module does not import ``step``); the per-layer terms are :mod:`.moe`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dnnplace.kernels import roofline
from dnnplace.models.llm.evaluation import comm, flops, host, memory, moe_skew, precision
from dnnplace.models.llm.evaluation import moe as moe_cost
from dnnplace.models.llm.evaluation.candidates import KINDS, Candidates, StageCosts
from dnnplace.models.llm.spec import LLMProblem

Array = np.ndarray

__all__ = ["moe_memory_lower_bound", "moe_params", "moe_rank_memory", "rank_layer_kinds"]


def rank_layer_kinds(c: Any, pattern: tuple[bool, ...], width: int) -> tuple[Array, Array]:
    """(dense, sparse) layers of every pipeline rank, (n, width): its virtual stages s with s % pp = r."""
    dense_s, sparse_s = moe_cost.stage_layer_kinds(pattern, c.stages())
    n = len(c)
    nd, ns = np.zeros((n, width)), np.zeros((n, width))
    pp = c.pp.astype(np.int64)
    rows = np.arange(n)
    for st in range(dense_s.shape[1]):
        r = st % pp
        ok = (st < pp * c.vp.astype(np.int64)) & (r < width)
        np.add.at(nd, (rows[ok], r[ok]), dense_s[ok, st])
        np.add.at(ns, (rows[ok], r[ok]), sparse_s[ok, st])
    return nd, ns


def moe_params(problem: LLMProblem, c: Any, nd: Array, ns: Array, is_first: Array,
               is_last: Array) -> tuple[Array, Array]:
    """An MoE model's parameters per rank: (everything but the routed experts, the routed experts)."""
    mm, a = problem.moe, problem.arch
    ep, etp, _, _, _ = c.expert()
    col = (lambda x: x[:, None])  # noqa: E731
    attn = moe_cost.attention_params(mm, c.tp)
    dense = nd * col(attn + moe_cost.dense_mlp_params(mm, c.tp)) + ns * col(attn + moe_cost.moe_dense_params(mm, c.tp))
    mtp = mm.moe.mtp_layers
    # each MTP layer: a layer of the last layer's kind and its 2h x h projection (+ two norms)
    mtp_dense = mtp * (attn + (moe_cost.moe_dense_params(mm, c.tp) if mm.moe.moe_layers[-1]
                               else moe_cost.dense_mlp_params(mm, c.tp)) + 2 * a.hidden * a.hidden / c.tp)
    dense = (dense + is_first * col(memory.embedding_params(a, c.tp)) + is_last * col(memory.head_params(a, c.tp, c.pp))
             + is_last * col(mtp_dense))
    per_layer = moe_cost.expert_params(mm, np.ones(len(c)), ep, etp)
    experts = (ns + is_last * (mtp if mm.moe.moe_layers[-1] else 0)) * col(per_layer)
    return dense, experts


def moe_rank_memory(problem: LLMProblem, c: Any, mem: dict[str, Array], experts: Array, nd: Array, ns: Array,
                    r: Array, m: Array, tokens: Array, chunks: Array) -> dict[str, Array]:
    """An MoE model's memory per rank: the routed experts' weights, gradients and optimizer state (sharded over
    edp) beside the rest's, and activations by layer kind with the recompute modules (``moe.activation_parts``);
    a rank's in-flight layers are counted at its own mix of dense and sparse layers."""
    mm = problem.moe
    ep, etp, _, mods, _ = c.expert()
    col = (lambda x: x[:, None])  # noqa: E731
    edp = problem.cluster.gpus / (c.pp * ep * etp)
    a = problem.arch
    rec, q, quant, wq = _quantized(problem)
    grad_b = col(c.sharding()[1])
    ex = moe_cost.expert_memory(experts, col(edp), col(c.dist), grad_bytes=grad_b, weight_bytes=wq)
    t = tokens / c.tp
    sel = c.recompute == 1
    out = dict(mem)
    for key in ("weights", "gradients", "optimizer"):
        out[key] = mem[key] + ex[key]
    if rec.quantized:  # the rest's layers keep the recipe's weight copies too; embedding and head stay BF16
        params = mem["gradients"] / grad_b  # the rank's non-expert parameters (rank_memory's gradient bytes)
        ends = (r == 0) * col(memory.embedding_params(a, c.tp)) + (r == col(c.pp) - 1) * col(
            memory.head_params(a, c.tp, c.pp))
        out["weights"] = memory.WEIGHT_BYTES * params + (wq - memory.WEIGHT_BYTES) * (params - ends) + ex["weights"]
    acts = []
    for sparse in (False, True):
        parts = _parts(mm, t, c.tp, etp, sparse, q, quant)
        keep = np.zeros(len(c))
        code = np.where(sel, mods, 0.0).astype(np.int64)  # the modules named, none of them: nothing (issue 45)
        for mask in np.unique(code):
            rows = code == mask
            names = tuple(n for b, n in enumerate(moe_cost.RECOMPUTE_MODULES) if int(mask) >> b & 1)
            keep[rows] = moe_cost.activation_bytes({k: v[rows] for k, v in parts.items()}, names)
        full_rc = c.recompute == 2
        acts.append(np.where(full_rc, 2.0 * t * problem.arch.hidden, keep))
    total = np.maximum(nd + ns, 1.0)
    per_layer = (nd * col(acts[0]) + ns * col(acts[1])) / total
    inflight = memory.inflight_layers(r, col(c.pp), col(c.vp), col(m), chunks)
    is_last = r == col(c.pp) - 1
    logits = is_last * col(memory.head_activation_bytes(a, tokens, c.tp, np.where(c.sp, c.tp, 1.0),
                                                        problem.job.cross_entropy))
    out["activations"] = per_layer * inflight + logits
    out["buffers"] = memory.BUFFER_FIXED_BYTES + memory.FRAGMENTATION * out["activations"]
    return out


def _quantized(problem: LLMProblem) -> tuple[precision.Recipe, float, float | None, float]:
    """(recipe, its quantized share of the layers, bytes of a saved quantized GEMM input or None, bytes per
    layer weight averaged over the quantized and the BF16 layers)."""
    rec = precision.recipe(problem.job.precision)
    if not rec.quantized:
        return rec, 0.0, None, memory.WEIGHT_BYTES
    q = rec.quantized_layers(problem.arch.num_layers) / problem.arch.num_layers
    gen = precision.ARCHITECTURES.get(problem.device.name, "")
    return rec, q, rec.saved_input_bytes(), q * rec.weight_bytes(gen) + (1 - q) * memory.WEIGHT_BYTES


def _parts(mm: Any, t: Array, tp: Array, etp: Array, sparse: bool, q: float,
           quant: float | None) -> dict[str, Array]:
    """A layer's activation parts averaged over the recipe's quantized (share q) and BF16 layers."""
    bf16 = moe_cost.activation_parts(mm, t, tp, etp, sparse)
    if quant is None:
        return bf16
    qp = moe_cost.activation_parts(mm, t, tp, etp, sparse, quant_bytes=quant)
    return {k: q * qp[k] + (1 - q) * bf16[k] for k in bf16}


def moe_memory_lower_bound(problem: LLMProblem, c: Any, modules_mask: int) -> Array:
    """A proven lower bound on the peak bytes per GPU of every split of every candidate, whatever recompute
    modules from ``modules_mask`` (bit mask: the most any of its configurations frees) it uses.

    Every layer costs a rank at least ``b_r`` = the cheaper kind's (dense or sparse) weights, gradients and
    optimizer state, plus the cheaper kind's activations with every module of the mask recomputed (full
    recompute: the layer input) times the fewest micro-batches any of rank r's chunks holds in flight
    (``memory.inflight_layers``' counts; 1F1B: min(m, pp - r)), plus the allocator's fragmentation share.  Any
    split puts n_r >= 0 layers on rank r with sum n_r = L, so the fullest rank holds at least
    buffer + L / sum_r (1 / b_r) (water filling); the embedding, head, MTP layer and logits only add to it.
    """
    mm, a = problem.moe, problem.arch
    ep, etp, _, _, _ = c.expert()
    n = len(c)
    tp, pp, vp = c.tp, c.pp, c.vp
    gpus = problem.cluster.gpus
    shard = np.where(c.dist, c.dp * c.cp, 1.0)
    eshard = np.where(c.dist, gpus / (pp * ep * etp), 1.0)
    _, q, quant, _ = _quantized(problem)
    wb = memory.WEIGHT_BYTES if problem.job.precision == "bf16" else 1.0  # quantized recipes may keep 1-byte copies
    per = wb + c.sharding()[1]  # the gradient buffer's bytes (grad_dtype), as the evaluator prices them
    attn = moe_cost.attention_params(mm, tp)
    dense_static = (per + memory.OPTIMIZER_BYTES / shard) * (attn + moe_cost.dense_mlp_params(mm, tp))
    sparse_static = ((per + memory.OPTIMIZER_BYTES / shard) * (attn + moe_cost.moe_dense_params(mm, tp))
                     + (per + memory.OPTIMIZER_BYTES / eshard) * moe_cost.expert_params(mm, np.ones(n), ep, etp))
    tokens = c.mbs * problem.job.seq_len / c.cp
    t = tokens / tp
    names = tuple(name for b, name in enumerate(moe_cost.RECOMPUTE_MODULES) if modules_mask >> b & 1)
    acts = []
    for sparse in (False, True):
        parts = _parts(mm, t, tp, etp, sparse, q, quant)  # as the evaluator counts them
        keep = moe_cost.activation_bytes(parts, ())
        freed = moe_cost.activation_bytes(parts, names)
        acts.append(np.where(c.recompute == 2, 2.0 * t * a.hidden, np.where(c.recompute == 1, freed, keep)))
    layers = np.array(mm.moe.moe_layers)
    kinds = []
    if (~layers).any():
        kinds.append((dense_static, acts[0]))
    if layers.any():
        kinds.append((sparse_static, acts[1]))
    static = np.minimum.reduce([k[0] for k in kinds])
    act = np.minimum.reduce([k[1] for k in kinds]) * (1.0 + memory.FRAGMENTATION)
    m = problem.job.global_batch / (c.dp * c.mbs)
    inv = np.zeros(n)
    key = (np.round(m).astype(np.int64) * 4096 + vp.astype(np.int64)) * 4096 + pp.astype(np.int64)
    uniq, back = np.unique(key, return_inverse=True)  # the in-flight counts depend on (pp, vp, m) alone
    order = np.argsort(back, kind="stable")
    starts = np.searchsorted(back[order], np.arange(len(uniq) + 1))
    for i, u in enumerate(uniq.tolist()):
        rows = order[starts[i]:starts[i + 1]]
        p_, v_, m_ = float(u % 4096), float(u // 4096 % 4096), float(u // (4096 * 4096))
        r = np.arange(int(p_))
        chunks = memory.inflight_chunks(r, np.asarray(p_), np.asarray(v_), np.asarray(m_))
        full, rest = chunks // (p_ * v_), chunks % (p_ * v_)
        # chunk k holds full pp + clip(rest - k pp, 0, pp) micro-batches: the fewest in the last one
        fewest = (full * p_ + np.clip(rest - (v_ - 1) * p_, 0, p_)) if v_ > 1 else np.minimum(m_, p_ - r)
        b = static[rows, None] + act[rows, None] * fewest[None, :]
        inv[rows] = (1.0 / np.maximum(b, 1e-30)).sum(axis=1)
    return memory.BUFFER_FIXED_BYTES + a.num_layers / inv


def moe_stage_costs(problem: LLMProblem, c: Candidates, dense: StageCosts, coll: Array) -> StageCosts:
    """An MoE model's per-layer costs: its dense layers and its sparse ones, and the MTP layer on the last rank.

    Both kinds share the attention (MLA's projections and core for DeepSeek-style models, else the dense
    one) with its TP collectives; a dense layer adds its MLP, a sparse one the MoE terms of
    ``evaluation/llm/moe.py`` (router, permutation, grouped GEMMs, shared experts, the exposed dispatch and
    combine).  With selective recomputation the modules named are rerun, and none when none is named: a plan
    names Megatron's default ``core_attn`` (exported as ``--recompute-modules core_attn``), and
    ``recompute_modules=none`` is Megatron's empty ``--recompute-modules`` (issue 45).
    """
    mm = problem.moe
    a, dev, s = problem.arch, problem.device, problem.job.seq_len
    peak = precision.recipe(problem.job.precision).gemm_peak(dev)  # mxfp8 / fp8-cs run at the fp8 peak
    tp, tokens = c.tp, dense.tokens
    ep, etp, disp, mods, a2a = c.expert()
    sp_div = np.where(c.sp, tp, 1.0)
    sel = (c.recompute == 1)
    mods = np.where(sel, mods, 0.0)
    core_rerun = sel & moe_cost._bit(mods, "core_attn")  # an empty module list reruns nothing (Megatron's [])
    mods_eff = mods
    full = c.recompute == 2
    # attention
    att_shapes = moe_cost.mla_gemms(mm, tokens, tp) if mm.mla is not None else flops.layer_gemms(a, tokens, tp)[:2]
    agf, agb = flops.fwd_bwd_gemm_times(att_shapes, dev, peak)
    if mm.mla is not None:
        att_f, att_b = moe_cost.mla_layer_compute(mm, tokens, s, tp, np.where(sel, mods_eff, 0.0), dev, peak)
    else:
        cf, cb = moe_cost.attention_core_times(a, tokens, s, tp, dev, c.cp)  # windows at measured rates
        att_f, att_b = sum(agf) + cf, sum(agb) + cb + np.where(core_rerun, cf, 0.0)
    el_f, el_b = flops.elementwise_elements(a, tp, sp_div)
    act_f, act_b = ((3.0, 5.0) if a.gated else (2.0, 3.0))
    norm_f = roofline.hbm_time(2.0 * tokens * (el_f - act_f * a.ffn_hidden / tp), dev)
    norm_b = roofline.hbm_time(2.0 * tokens * (el_b - act_b * a.ffn_hidden / tp), dev)
    norm_b = norm_b + np.where(moe_cost._bit(mods, "layernorm"), roofline.hbm_time(8.0 * tokens * a.hidden / sp_div,
                                                                                  dev), 0.0)
    att_tp_f = sum(comm.overlapped(coll, g, tp) for g in (agf[0], agf[-1]))
    att_tp_b = sum(comm.overlapped(coll, g, tp) for g in (agb[0], agb[-1]))
    on = (tp > 1) & c.sp
    att_tp_f, att_tp_b = np.where(on, att_tp_f, 0.0), np.where(on, att_tp_b, 0.0)
    # the dense layers' MLP
    mgf, mgb = flops.fwd_bwd_gemm_times(flops.layer_gemms(a, tokens, tp)[2:], dev, peak)
    mlp_f = mgf[0] + mgf[1] + roofline.hbm_time(2.0 * tokens * act_f * a.ffn_hidden / tp, dev)
    mlp_b = mgb[0] + mgb[1] + roofline.hbm_time(2.0 * tokens * act_b * a.ffn_hidden / tp, dev)
    mlp_b = mlp_b + np.where(moe_cost._bit(mods, "mlp"), mlp_f, 0.0)
    mlp_tp_f = np.where(on, comm.overlapped(coll, mgf[0], tp) + comm.overlapped(coll, mgf[1], tp), 0.0)
    mlp_tp_b = np.where(on, comm.overlapped(coll, mgb[0], tp) + comm.overlapped(coll, mgb[1], tp), 0.0)
    # the sparse layers' MoE part (the shared experts' TP collectives hide behind their GEMMs)
    t = tokens / tp
    skew, _ = moe_skew.skew_factors(mm, t, ep, etp, c.routing, dev, precision.recipe(problem.job.precision))
    moe = moe_cost.moe_layer_costs(mm, t, tp, ep, etp, disp, mods, comm.nvlink_domain(problem.cluster), dev, peak,
                                   a2a_overlap=a2a, skew=skew)
    if mm.moe.shared_ffn:
        sh = moe_cost.shared_expert_gemms(mm, tokens, tp)
        sgf, sgb = flops.fwd_bwd_gemm_times(sh, dev, peak)
        sh_tp_f = np.where(on, comm.overlapped(coll, sgf[0], tp) + comm.overlapped(coll, sgf[1], tp), 0.0)
        sh_tp_b = np.where(on, comm.overlapped(coll, sgb[0], tp) + comm.overlapped(coll, sgb[1], tp), 0.0)
    else:
        sh_tp_f = sh_tp_b = 0.0 * tp
    cp = dense.layer["cp"]
    rec, gen = precision.recipe(problem.job.precision), precision.ARCHITECTURES.get(dev.name, "")
    if rec.quantized:  # the recipe's casts, part by part (moe.moe_cast_bytes); the experts' on the slowest rank
        copies = t * mm.moe.top_k * etp * moe_cost.rank_load(t * mm.moe.top_k * etp, ep, skew)
        copies = moe_cost.skew_seconds(copies, skew)  # the casts of the slowest rank's copies
        fused = rec.copies(gen) * rec.copy_bytes() - precision.BF16_BYTES
        cast_bytes = moe_cost.moe_cast_bytes(mm, rec.cast_bytes(gen), fused, tokens, tp, etp, sp_div, copies)
        casts = {k: (roofline.hbm_time(f, dev), roofline.hbm_time(b, dev)) for k, (f, b) in cast_bytes.items()}
        norm_f, norm_b = norm_f + casts["attention"][0], norm_b + casts["attention"][1]
        mlp_f, mlp_b = mlp_f + casts["dense_mlp"][0], mlp_b + casts["dense_mlp"][1]
        extra = casts["experts"][0] + (casts["shared"][0] if mm.moe.shared_ffn else 0.0), \
            casts["experts"][1] + (casts["shared"][1] if mm.moe.shared_ffn else 0.0)
        moe = {**moe, "compute": (moe["compute"][0] + extra[0], moe["compute"][1] + extra[1])}

    def whole(f: Array, b: Array) -> tuple[Array, Array]:
        return f, b + np.where(full, f, 0.0)  # full recomputation reruns the layer's forward

    d_comp = whole(att_f + norm_f + mlp_f, att_b + norm_b + mlp_b)
    d_tp = whole(att_tp_f + mlp_tp_f, att_tp_b + mlp_tp_b)
    s_comp = whole(att_f + norm_f + moe["compute"][0], att_b + norm_b + moe["compute"][1])
    s_tp = whole(att_tp_f + sh_tp_f, att_tp_b + sh_tp_b)
    s_ep = whole(*moe["ep"])
    zero = (0.0 * tp, 0.0 * tp)
    # The host's time to issue each layer's ops, where the GPU does not hide it (evaluation/llm/host.py): every
    # dropless dispatcher synchronises once per MoE layer forward.
    d_host = host.layer_host_seconds(dev.name, host.DENSE_MODULES, c.graphs, 0.0 * tp)
    s_host = host.layer_host_seconds(dev.name, host.MOE_MODULES, c.graphs, mm.moe.num_experts / ep,
                                     shared=bool(mm.moe.shared_ffn))
    d_host_exp = host.layer_exposed(dev.name, d_host, d_comp[0] + d_tp[0] + cp[0], d_comp[1] + d_tp[1] + cp[1],
                                    c.graphs, sync=False, full_recompute=full)
    s_host_exp = host.layer_exposed(dev.name, s_host, s_comp[0] + s_tp[0] + cp[0] + s_ep[0],
                                    s_comp[1] + s_tp[1] + cp[1] + s_ep[1], c.graphs, sync=True, full_recompute=full,
                                    overlap=a2a)
    layer = {"compute": d_comp, "tp": d_tp, "cp": cp, "ep": zero, "host": d_host_exp}
    sparse = {"compute": s_comp, "tp": s_tp, "cp": cp, "ep": s_ep, "host": s_host_exp}
    last = dict(dense.last)
    for _ in range(mm.moe.mtp_layers):  # DeepSeek's MTP layer on the last stage: a layer, its projection, a head
        kind = sparse if mm.moe.moe_layers[-1] else layer
        proj = flops.fwd_bwd_gemm_times([(tokens, np.full_like(tokens, float(a.hidden)) / tp,
                                          np.full_like(tokens, 2.0 * a.hidden))], dev, peak)
        last = {k: (last[k][0] + kind[k][0] + (dense.last[k][0] + (proj[0][0] if k == "compute" else 0.0)),
                    last[k][1] + kind[k][1] + (dense.last[k][1] + (proj[1][0] if k == "compute" else 0.0)))
                for k in KINDS}
    return StageCosts(layer, dense.first, last, dense.m, tokens, moe_layer=sparse, pattern=mm.moe.moe_layers)
