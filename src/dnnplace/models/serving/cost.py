"""Time of one engine iteration per decoder layer on one GPU type, from the kernel-cost layer.

Why an iteration: every engine here batches continuously -- each step runs the decode token of
every running sequence and a chunk of prompt tokens in one forward.  A layer's time is its GEMMs at
m = batched tokens, decode attention over the cached tokens, prefill attention of the chunk, and
the TP all-reduces on the node's link; the kernels say, per price, whether it was measured,
interpolated, extrapolated or roofline (:data:`dnnplace.kernels.SOURCE_NAMES`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dnnplace.kernels import SOURCE_NAMES, KernelCosts, Priced, kernel_costs
from dnnplace.models.serving.catalogue import (
    BAND,
    TP_ALL_REDUCE,
    context_fmha_dtype,
    mxfp4_moe_kernel,
    peer_access,
    tp_link,
)
from dnnplace.models.serving.spec import LayerProfile

__all__ = ["TABLE_CONTENTS", "Iteration", "LayerTimes", "band_of", "engine_kernels", "layer_times", "layer_times_batch",
           "layer_times_matrix", "p2p_time", "send_seconds", "tp_all_reduce"]

@dataclass(frozen=True)
class Iteration:
    """One forward of a micro-batch: ``decode`` sequences at ``kv_len`` cached tokens each and ``prefill``
    prompt tokens of requests ``isl`` long."""

    decode: float
    kv_len: float
    prefill: float
    isl: int

    @property
    def tokens(self) -> float:
        return self.decode + self.prefill


@dataclass
class LayerTimes:
    """Seconds per decoder layer (array), the last stage's extra (LM head), and the kernel sources."""

    per_layer: np.ndarray
    head: float
    sources: dict[str, int] = field(default_factory=dict)

    def add(self, p: Priced) -> None:
        for k, v in p.counts().items():
            self.sources[k] = self.sources.get(k, 0) + int(v)


def engine_kernels(gpu: str, framework: str | None) -> KernelCosts:
    """The kernel prices an engine runs on ``gpu``: the measured tables of its own framework where the device has
    them, the roofline for an engine no table measured (llama.cpp's GGUF kernels, a Hugging Face ``generate``).

    Why not another engine's tables for those: a table is the kernels of the framework that measured it
    (TensorRT-LLM's int4 GEMV is not llama.cpp's mmvq on Q4_K blocks, its XQA decode attention not an eager
    SDPA over a DynamicCache), so such a price would be said ``measured`` for kernels nobody measured."""
    return kernel_costs(gpu, framework, measured=framework is not None)


def layer_times(m: LayerProfile, gpu: str, tp: int, it: Iteration, framework: str | None,
                link: str = "nvlink", kv_dtype: str = "bf16") -> LayerTimes:
    """Seconds of each decoder layer (and the LM head) for one iteration on one GPU of a TP group, priced from
    ``framework``'s tables where the device has them (a family they lack: the roofline, said so).

    ``kv_dtype``: the cache's element type; attention reads the cache in it (an FP8 cache halves the bytes
    each decode step streams, which is most of decode attention's time)."""
    return _layer_times(m, engine_kernels(gpu, framework), tp, it, link, kv_dtype)


def layer_times_batch(m: LayerProfile, gpu: str, tp: int, its: Sequence[Iteration], framework: str | None,
                      link: str = "nvlink", kv_dtype: str = "bf16") -> list[LayerTimes]:
    """:func:`layer_times` of many iterations at once, equal entry by entry.

    Why: the search prices a pipeline's whole batch grid; the kernel layer answers arrays of shapes in one
    lookup, so one call per family replaces one per iteration (the lookup's overhead, not its arithmetic,
    dominated).  Every kernel price is elementwise, so each entry is the number :func:`layer_times` gives."""
    return _layer_times_batch(m, engine_kernels(gpu, framework), tp, list(its), link, kv_dtype)


#: What the measured rows a layer is priced from already contain, read in the collector that measured them
#: (aiconfigurator ``collector/trtllm``), so no separate kernel is added for it here.
TABLE_CONTENTS: dict[str, str] = {
    "decode_attention": "collect_attn.py times TensorRT-LLM's attention op forward (create_attention with "
                        "rope_gpt_neox PositionalEmbeddingParams, a KVCacheManager, qkv as input) in a CUDA graph: "
                        "the op's QKV preprocessing (RoPE, the KV-cache write, FP8 cache quantize) is in each row",
    "gemm": "collect_gemm.py times tensorrt_llm Linear.forward on a bf16 input with QuantConfig(FP8): the FP8 "
            "quantize of the activation before the GEMM is in each fp8 row, and, the weights carrying no input "
            "scale, the dynamic scale's computation (its own note); the serving model prices the rows as measured "
            "(KernelCosts.gemm_fp8_static, the rows less that computation, is not used: docs/serving.md)",
}


def _attn_dtype(kv_dtype: str) -> str:
    """The kernel tables' name of a cache dtype (16-bit caches read as bf16; a GGUF q8_0 cache as fp8-sized)."""
    return "fp8" if kv_dtype in ("fp8", "q8_0") else "bf16"


def _layer_times(m: LayerProfile, kc: KernelCosts, tp: int, it: Iteration, link: str,
                 kv_dtype: str = "bf16") -> LayerTimes:
    """One iteration's :class:`LayerTimes`: the batch arithmetic (:func:`_price`) on a batch of one, so the
    evaluator and the search price a step by one set of formulas."""
    return _layer_times_batch(m, kc, tp, [it], link, kv_dtype)[0]


def _counts(source: np.ndarray) -> np.ndarray:
    """Per row of ``source`` (iterations x prices), how many prices came from each source (columns: codes)."""
    return np.stack([(source == c).sum(axis=1) for c in range(len(SOURCE_NAMES))], axis=1)


def layer_times_matrix(m: LayerProfile, gpu: str, tp: int, its: Sequence[Iteration], framework: str | None,
                       link: str = "nvlink", kv_dtype: str = "bf16") -> tuple[np.ndarray, np.ndarray]:
    """:func:`layer_times_batch` as arrays only -- seconds per (iteration, layer) and the LM head's per
    iteration -- for callers that price thousands of iterations and need no sources (the search's bound)."""
    per, head, _ = _price(m, engine_kernels(gpu, framework), tp, list(its), link, kv_dtype)
    return per, head


def _layer_times_batch(m: LayerProfile, kc: KernelCosts, tp: int, its: list[Iteration], link: str,
                       kv_dtype: str = "bf16") -> list[LayerTimes]:
    """:class:`LayerTimes` of each of ``its``, each kernel family priced once for all of them (:func:`_price`)."""
    if not its:
        return []
    per, head, fams = _price(m, kc, tp, its, link, kv_dtype)
    out = [LayerTimes(per[k], float(head[k])) for k in range(len(its))]
    for rows, counts in fams:  # family by family, codes in order: the sources dict :func:`_layer_times` builds
        for k, row in zip(rows.tolist(), counts.tolist()):
            src = out[k].sources
            for c, v in enumerate(row):
                if v:
                    src[SOURCE_NAMES[c]] = src.get(SOURCE_NAMES[c], 0) + v
    return out


def _price(m: LayerProfile, kc: KernelCosts, tp: int, its: list[Iteration], link: str,
           kv_dtype: str) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """Per-layer seconds (iterations x layers), head seconds, and per kernel family the iterations it priced
    with their source counts.  A layer's time: its GEMMs at m = the step's tokens (16-bit modules of a
    quantized checkpoint at 16 bits), decode attention over the cached tokens and prefill attention of the
    step's prompts per window size, the TP all-reduces, the MoE layer where the layer has experts, and the
    memory-bound kernels between them."""
    K = len(its)
    every = np.arange(K)
    fams: list[tuple[np.ndarray, np.ndarray]] = []
    dec = np.array([it.decode for it in its], dtype=float)
    pre = np.array([it.prefill for it in its], dtype=float)
    kvl = np.array([it.kv_len for it in its], dtype=float)
    isl = np.array([it.isl for it in its], dtype=float)
    T = np.maximum(dec + pre, 1.0)
    dt = m.weight_dtype
    qw, kvw = m.heads * m.head_dim, m.kv_heads * m.head_dim
    ns = np.array([(qw + 2 * kvw) / tp, m.hidden, 2 * max(m.ffn, 1) / tp, m.hidden], dtype=float)
    ks = np.array([m.hidden, qw / tp, m.hidden, max(m.ffn, 1) / tp], dtype=float)
    g = kc.gemm(np.repeat(T[:, None], 4, 1), np.broadcast_to(ns, (K, 4)), np.broadcast_to(ks, (K, 4)), dt)
    fams.append((every, _counts(g.source)))
    proj = g.seconds[:, 0] + g.seconds[:, 1]
    mlp = g.seconds[:, 2] + g.seconds[:, 3]
    # a checkpoint's 16-bit modules (Meta's FP8 Llama keeps attention in BF16): their GEMMs at 16 bits, blended
    # per layer by the share of the part's weights kept so
    a16 = m.attn_16bit if m.attn_16bit is not None else np.zeros(m.num_layers)
    f16 = m.mlp_16bit if m.mlp_16bit is not None else np.zeros(m.num_layers)
    blend16 = bool(a16.any() or f16.any())
    proj16 = mlp16 = proj
    if blend16:
        g16 = kc.gemm(np.repeat(T[:, None], 4, 1), np.broadcast_to(ns, (K, 4)), np.broadcast_to(ks, (K, 4)), "bf16")
        fams.append((every, _counts(g16.source)))
        proj16, mlp16 = g16.seconds[:, 0] + g16.seconds[:, 1], g16.seconds[:, 2] + g16.seconds[:, 3]
    heads, kvh = max(m.heads // tp, 1), max(m.kv_heads // tp, 1)
    attn_w: dict[int, np.ndarray] = {}  # per window size
    kvd = _attn_dtype(kv_dtype)
    # TensorRT-LLM's FP8 context FMHA reads FP8 Q/K/V whatever the cache keeps: the tables measure it with an
    # FP8 cache (the cache write is a sliver of the kernel)
    fmha = context_fmha_dtype(kc.framework, dt, kv_dtype, float(a16.mean()) < 0.5)
    ckv = "fp8" if fmha == "fp8" else kvd
    hd, pf = dec > 0, pre > 0
    reqs = np.where(pf, pre / np.where(pf, isl, 1.0), 0.0)
    creq = np.maximum(np.ceil(reqs), 1.0)
    for w in np.unique(m.window):
        t = np.zeros(K)
        if hd.any():
            nd = int(hd.sum())
            d = kc.decode_attention(np.maximum(dec[hd], 1.0), np.maximum(kvl[hd], 1.0), np.full(nd, heads),
                                    np.full(nd, kvh), m.head_dim, kvd, int(w))
            fams.append((every[hd], _counts(d.source[:, None])))
            t[hd] += d.seconds
        if pf.any():
            npf = int(pf.sum())
            c = kc.context_attention(creq[pf], isl[pf], np.full(npf, heads), np.full(npf, kvh), m.head_dim,
                                     fmha, ckv, int(w))
            fams.append((every[pf], _counts(c.source[:, None])))
            t[pf] += c.seconds * reqs[pf] / creq[pf]
        attn_w[int(w)] = t
    comm = np.zeros(K)
    if tp > 1:
        c = tp_all_reduce(kc, T * m.hidden * 2.0, tp, link)
        fams.append((every, _counts(c.source[:, None])))
        comm = 2.0 * c.seconds
    moe_t: dict[str, np.ndarray] = {}
    if m.experts:
        for wd in (dt, "bf16") if (f16[m.moe].any() and dt != "bf16") else (dt,):
            # expert parallelism: each GPU of the group holds experts / tp whole experts and runs them for every
            # token routed there (moe_tp 1, ep tp); else each expert's matrices are sharded tp ways
            moe_tp, ep = (1, tp) if m.expert_parallel else (tp, 1)
            kernel = m.moe_dtype if (wd == dt and m.moe_dtype) else wd  # a block-scaled checkpoint's fused MoE
            if kernel == "mxfp4":  # an MXFP4 checkpoint: the engine's own MXFP4 kernel on this GPU
                kernel = mxfp4_moe_kernel(kc.framework, kc.spec.name)
            e = kc.moe(T, m.hidden, m.expert_ffn, m.top_k, m.experts, moe_tp, ep, kernel)
            fams.append((every, _counts(e.source[:, None])))
            moe_t[wd] = e.seconds.copy()
            if m.shared_ffn:
                sg = kc.gemm(np.repeat(T[:, None], 2, 1), np.broadcast_to([2 * m.shared_ffn / tp, m.hidden], (K, 2)),
                             np.broadcast_to([m.hidden, m.shared_ffn / tp], (K, 2)), wd)
                fams.append((every, _counts(sg.source)))
                moe_t[wd] = moe_t[wd] + (sg.seconds[:, 0] + sg.seconds[:, 1])
    ew = _elementwise(m, kc, tp, T)
    # layers alike in what moves their time (16-bit shares, window, experts) are priced once as a group: the
    # same arithmetic element by element as per (iteration, layer), without its matrices' temporaries
    sig = np.stack([a16, f16, m.window.astype(float), m.moe.astype(float)], axis=1)
    groups, inv = np.unique(sig, axis=0, return_inverse=True)
    cols = []
    for a, f, w, has_moe in groups.tolist():
        pj = proj * (1.0 - a) + proj16 * a if blend16 else proj
        ml = mlp * (1.0 - f) + mlp16 * f if blend16 else mlp
        if has_moe and moe_t:
            ml = moe_t[dt] * (1.0 - f) + moe_t.get("bf16", moe_t[dt]) * f
        cols.append(pj + attn_w[int(w)] + comm + ml + ew)
    per = np.stack(cols, axis=1)[:, inv.ravel()]
    # LM head for the sequences that sample this step (decoders, and the last chunk of each prompt)
    rows = np.maximum(dec + pre / isl, 1.0)
    h = kc.gemm(rows, np.full(K, m.vocab / tp), np.full(K, float(m.hidden)), "bf16")
    fams.append((every, _counts(h.source[:, None])))
    return per, h.seconds, fams


def tp_all_reduce(kc: KernelCosts, nbytes: np.ndarray, tp: int, link: str) -> Priced:
    """A layer's TP all-reduce of ``nbytes`` (array, per GPU) the way the engine of ``kc.framework`` runs it:
    its own kernel (the measured ``custom_all_reduce`` family) where its rule (:data:`TP_ALL_REDUCE`, read in
    its source) takes that path -- group size, NVLink mesh, message below its limit -- NCCL's measured ring
    elsewhere.  Why: vLLM, SGLang and TensorRT-LLM all bypass NCCL for the small messages of decode steps,
    where their one-shot kernels take a third to a fifth of NCCL's time on H100; pricing them with NCCL
    made every TP > 1 look slower than it runs.  Engines without a rule (llama.cpp, Hugging Face): NCCL."""
    nb = np.asarray(nbytes, dtype=float)
    # a 2-card bridge's larger group crosses PCIe, where no engine takes its own kernel without a full NVLink mesh
    link = tp_link(kc.spec.name, link, tp)
    ring = kc.collective("all_reduce", nb, np.full(nb.shape, tp), link)
    rule = TP_ALL_REDUCE.get(kc.framework or "")
    has_nvlink = kc.spec.nvlink_bandwidth > 0
    # a card with NVLink on a PCIe-only node: its table was measured over NVLink and says nothing of PCIe; a card
    # without peer access (catalogue NO_PEER_ACCESS): the engines' own kernel is off, NCCL runs it
    no_peer = not peer_access(kc.spec.name, link, tp)
    if rule is None or link == "network" or tp <= 1 or (has_nvlink and link != "nvlink") or no_peer:
        return ring
    use = rule.custom(nb, tp, has_nvlink)
    if not use.any():
        return ring
    own = kc.all_reduce_custom(nb, np.full(nb.shape, tp), link)
    return Priced(np.where(use, own.seconds, ring.seconds), np.where(use, own.source, ring.source).astype(np.int8))


def _elementwise(m: LayerProfile, kc: KernelCosts, tp: int, tokens: Any) -> Any:
    """The memory-bound kernels of a decoder layer between its GEMMs: two fused residual-add + RMSNorm (read
    residual and input, write both: 8 bytes per hidden element at 16 bits) and the gated activation (read
    gate and up, write the product: 6 bytes per MLP element on this GPU), streamed at the device's HBM
    fraction.  Why: every engine runs them as kernels of their own (TensorRT-LLM's Llama generation graph,
    as aiconfigurator-core's trtllm model lists it: add_norm_1, add_norm_2, act_gate), a few % of a step.
    The bytes are aiconfigurator-core's own (its ElementWise op: tokens x (dim_in + dim_out) x 2); its
    mem-op rule then divides by 0.8 of the datasheet bandwidth and adds 3 us per kernel, which its system
    files call "nonofficial correction based on observations" -- unmeasured, so not taken here."""
    mlp = max(m.ffn, m.top_k * m.expert_ffn + m.shared_ffn if m.experts else 0)
    nbytes = tokens * (2 * 8.0 * m.hidden + 6.0 * mlp / tp)
    bw = kc.spec.hbm_bandwidth * float(kc.spec.hbm_fraction or 1.0)
    out = nbytes / bw
    return out if isinstance(out, np.ndarray) else float(out)


def p2p_time(gpu: str, nbytes: float, link: str, bandwidth: float = 0.0, latency: float = 0.0) -> Priced:
    """Activations sent from one stage to the next (the fleet's own network figures where it gives them)."""
    return kernel_costs(gpu).p2p([nbytes], link, bandwidth if link == "network" else 0.0, latency)


@functools.lru_cache(maxsize=65536)
def send_seconds(gpu: str, nbytes: float, link: str, bandwidth: float = 0.0, latency: float = 0.0) -> float:
    """:func:`p2p_time`'s seconds, remembered (a pure function): a search asks for the same few sends tens of
    thousands of times, and each priced call builds arrays."""
    return float(p2p_time(gpu, nbytes, link, bandwidth, latency).seconds[0])


def band_of(sources: dict[str, int]) -> float:
    """The relative error band of a prediction: the kernel sources' bands weighted by how many prices each gave."""
    n = sum(v for k, v in sources.items() if k in BAND)
    if not n:
        return BAND["roofline"]
    return sum(BAND[k] * v for k, v in sources.items() if k in BAND) / n
