"""Memory per GPU as each engine allocates it, and the KV cache its rule leaves.

Why per engine: the same split holds different KV caches in vLLM (the minimum over workers of each
worker's blocks), SGLang (the world's smallest free memory for every rank, then the minimum over PP
ranks), TensorRT-LLM (a fraction of each rank's free memory after loading, MIN-reduced) and
llama.cpp (each device its own layers' cache of one global context); the first and last stages
carry the embedding and LM head where that engine puts them (catalogue.EngineRules).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from dnnplace.core.catalogue import device_spec
from dnnplace.models.serving.spec import LayerProfile, Replica, ServingProblem
from dnnplace.utils.owned_cache import make_room

__all__ = ["CUDA_GRAPH_MAX_BATCH", "StageMemory", "activation_bytes", "extra_weight_bytes", "launch_memory",
           "replica_memory", "sampler_note", "stage_memory"]

#: vLLM captures CUDA graphs up to this decode batch (config/compilation.py max_cudagraph_capture_size 512);
#: the graph pool holds one such batch's intermediates.
CUDA_GRAPH_MAX_BATCH = 512


def activation_bytes(m: LayerProfile, tp: int, tokens: float, seqs: float, last: bool,
                     sampler_copies: float = 0.0) -> float:
    """The peak of one forward at ``tokens`` batched tokens on one GPU of ``tp``: the widest layer's
    intermediates (residual and hidden, QKV, the gated MLP's up and activated outputs, 16-bit) and, on
    the last stage, the FP32 logits of ``seqs`` sequences (vllm/v1/sample/sampler.py upcasts to FP32).

    ``sampler_copies`` > 0: the engine's profile samples after the forward, holding that many FP32 logits
    tensors of ``seqs`` rows (every TP rank gathers the whole vocabulary) beside the step's hidden states;
    the peak is the larger of the two passes (:data:`~dnnplace.models.serving.catalogue.VLLM_SAMPLER_LOGITS_COPIES`)."""
    mlp = max(m.ffn, m.top_k * m.expert_ffn + m.shared_ffn if m.experts else 0)
    width = 2 * m.hidden + (m.heads * m.head_dim + 2 * m.kv_heads * m.head_dim) / tp + 3 * mlp / tp
    forward = tokens * width * 2.0
    if not last:
        return float(forward)
    if sampler_copies > 0:
        return float(max(forward, tokens * m.hidden * 2.0 + seqs * m.vocab * 4.0 * sampler_copies))
    return float(forward + seqs * m.vocab * 4.0)


def extra_weight_bytes(p: ServingProblem, first: bool, last: bool, tp: int) -> float:
    """Embedding and LM head bytes a stage holds beside its layers, per GPU (vocab-sharded over TP)."""
    m, e = p.model, p.engine
    out = 0.0
    if first and not e.embed_on_host:
        out += m.embed_bytes
    if last or e.lm_head_every_stage:
        out += m.head_bytes + m.hidden * 2.0
        if m.tied and not first and e.name == "vllm":
            out += 0.0  # tied: vLLM's last rank holds its own embedding copy as the head (counted once here)
    return out / tp


@dataclass(frozen=True)
class StageMemory:
    """One GPU of a stage: budget the engine may use, weights, activation peak, CUDA graphs, and what is
    left for the KV cache (``kv_free``), all bytes; ``kv_per_token``: its layers' KV bytes per token."""

    gpu: str
    budget: float
    weights: float
    activations: float
    graphs: float
    kv_free: float
    kv_per_token: float

    @property
    def kv_tokens(self) -> float:
        return max(self.kv_free, 0.0) / self.kv_per_token if self.kv_per_token > 0 else float("inf")


#: Stage memories by (problem identity, arguments); each entry holds its problem, so the id in its key cannot
#: be reused by another problem while the entry lives.  Why: a search sizes the same stages thousands of
#: times (11,953 calls, 2,794 distinct, on 4 H100 + 4 A100), and the answer is a pure function of them.
_MEMORY: dict[tuple[object, ...], tuple[ServingProblem, StageMemory]] = {}


def stage_memory(p: ServingProblem, gpu: str, tp: int, lo: int, hi: int, first: bool, last: bool,
                 max_num_seqs: int, max_num_batched_tokens: int, pp: int = 1,
                 launch_bytes: float | None = None) -> StageMemory:
    """The memory of one GPU of a stage running layers ``[lo, hi)`` of a replica of ``pp`` stages (per-GPU rule;
    the cross-GPU rule is :func:`stage_kv_tokens`).  ``pp`` and ``launch_bytes`` move only SGLang's default
    fraction, which SGLang sets once per launch from the smallest GPU it sees (``get_nvgpu_memory_capacity``:
    nvidia-smi's minimum) and which shrinks as the launch grows: the replica's smallest GPU
    (:func:`launch_memory`, what the SGLang export writes) stands for it; ``pp`` 1 is the optimistic value a
    bound may use."""
    key = (id(p), gpu, tp, lo, hi, first, last, max_num_seqs, max_num_batched_tokens, pp, launch_bytes)
    hit = _MEMORY.get(key)
    if hit is None or hit[0] is not p:
        make_room(_MEMORY, p, 100_000)
        hit = _MEMORY[key] = (p, _sized(p, gpu, tp, lo, hi, first, last, max_num_seqs, max_num_batched_tokens,
                                        pp, launch_bytes))
    return hit[1]


def _sized(p: ServingProblem, gpu: str, tp: int, lo: int, hi: int, first: bool, last: bool, max_num_seqs: int,
           max_num_batched_tokens: int, pp: int, launch_bytes: float | None) -> StageMemory:
    m, e = p.model, p.engine
    total = device_spec(gpu).usable_memory_bytes
    weights = float(m.weight_bytes[lo:hi].sum()) / tp + extra_weight_bytes(p, first, last, tp)
    act = activation_bytes(m, tp, max_num_batched_tokens, max_num_seqs, last, e.sampler_logits_copies)
    graphs = activation_bytes(m, tp, min(max_num_seqs, CUDA_GRAPH_MAX_BATCH), 0, False) if e.cuda_graphs else 0.0
    frac = p.fraction_for(total if launch_bytes is None else launch_bytes, tp, pp)
    if e.fraction_of == "free":
        budget = frac * max(total - weights - act, 0.0) + weights + act
    else:
        budget = frac * total
    kv_free = budget - weights - act - (0.0 if e.graphs_after_kv else graphs)
    kv_tok = float(m.kv_per_gpu(tp)[lo:hi].sum())
    return StageMemory(gpu, budget, weights, act, graphs, kv_free, kv_tok)


def launch_memory(gpus: list[str] | tuple[str, ...]) -> float:
    """The memory (bytes) an engine launch over these GPU kinds sizes its default fraction from: the smallest
    (SGLang's ``get_nvgpu_memory_capacity`` takes nvidia-smi's minimum)."""
    return min(device_spec(g).usable_memory_bytes for g in gpus)


def replica_memory(p: ServingProblem, r: Replica, max_num_seqs: int,
                   max_num_batched_tokens: int) -> tuple[list[StageMemory], float]:
    """Each stage's memory (:func:`stage_memory`, the launch's fraction from its smallest GPU) and the KV-cache
    tokens the replica holds by the engine's rule: the smallest stage's (:func:`stage_kv_tokens`), in whole
    blocks where the engine takes the minimum of blocks (vLLM).  The one place a replica's memory is sized:
    the evaluator and the search's concurrency estimate both read it."""
    bounds = np.concatenate([[0], np.cumsum(r.partition())])
    launch = launch_memory([s.gpu for s in r.stages])
    mems = [stage_memory(p, s.gpu, s.tp, int(bounds[i]), int(bounds[i + 1]), i == 0, i == r.pp - 1,
                         max_num_seqs, max_num_batched_tokens, r.pp, launch) for i, s in enumerate(r.stages)]
    per_stage = stage_kv_tokens(mems, p)
    kv = float(per_stage.min()) if len(per_stage) else 0.0
    if p.engine.kv_rule == "min_blocks":
        kv = math.floor(kv / p.block) * p.block
    return mems, kv


def stage_kv_tokens(mems: list[StageMemory], p: ServingProblem) -> np.ndarray:
    """Per stage, the tokens of KV cache the engine's rule gives it before the cross-stage minimum."""
    rule = p.engine.kv_rule
    if rule == "world_min":  # SGLang: the world's smallest free memory budgets every rank
        rest = min(s.budget - s.weights for s in mems)
        return np.array([max(rest - s.activations - s.graphs, 0.0) / s.kv_per_token for s in mems])
    return np.array([s.kv_tokens for s in mems])


def sampler_note(p: ServingProblem, r: Replica, max_num_seqs: int, max_num_batched_tokens: int, need: int) -> str:
    """When the start-up sampler pass alone keeps the cache below ``need`` tokens: that it is priced as the
    engine's PyTorch top-k / top-p path, which not every release runs.

    Why: vLLM sampled with FlashInfer's kernel by default wherever flashinfer-python was installed until PR
    #26859 (October 2025) turned it off (and PR #40376 later back on); that kernel does not sort the logits, so
    those releases start where the PyTorch path's pass leaves too little room (GPUStack's vLLM 0.11.0 ran
    Qwen3-32B at 32,000-token prompts on one H100; llm-d's later vLLM refused it at 32,000).  The verdict is
    the PyTorch path's, said so, with the knob that moves it."""
    if p.engine.sampler_logits_copies <= 0:
        return ""
    q = replace(p, engine=replace(p.engine, sampler_logits_copies=0.0))
    _, kv = replica_memory(q, r, max_num_seqs, max_num_batched_tokens)
    if kv < need:
        return ""
    return (f" (its start-up sampler pass over {max_num_seqs} sequences priced as vLLM's PyTorch top-k/top-p path;"
            " a release sampling with FlashInfer's kernel, vLLM's default before PR #26859, needs less and may"
            " start: fewer --max-num-seqs frees that memory on either)")
