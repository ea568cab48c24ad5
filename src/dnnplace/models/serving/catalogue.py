"""Every figure of the serving model that is not derived from a tensor shape, each with its source.

Why one module: the engines differ in where they put the embedding and LM head, how they size the
KV cache and how they split layers by default; a reviewer checks each figure here against the
engine's file and function named beside it (read in the engines' sources; see
``src/dnnplace/data/serving/ENGINES-NOTICE.md``).  None is fitted to a benchmark row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["BAND", "COMPUTE_CAPABILITY", "COMPUTE_CAPABILITY_SOURCE", "ENGINES", "FP8_CONTEXT_FMHA_SOURCE", "GGUF",
           "GGUF_NAMES", "KV_DTYPES", "NO_PEER_ACCESS", "NON_NVIDIA", "PRECISIONS", "TP_ALL_REDUCE", "VLLM_MXFP4_BAND",
           "AllReduceRule", "CapabilityRule", "EngineRules", "GgufMix", "context_fmha_dtype", "engine_rules",
           "mxfp4_moe_kernel", "peer_access", "tp_link", "trtllm_bench_limits"]

#: Relative error band per kernel source (issue 43's reference figures for aiconfigurator on the same
#: tables: 6.8 % offline median where measured, 9.6 % over all Llama rows; extrapolation and roofline
#: wider: +39 % at PP4 on RTX PRO 6000, -72 % on L40S TP4/TP8 -- taken as the bands, never fitted).
BAND = {"measured": 0.07, "interpolated": 0.10, "extrapolated": 0.25, "roofline": 0.40}

#: The error band of a llama.cpp prediction on GGUF-quantized weights: the largest |measured / predicted - 1| of
#: the published forward rates by micro-batch size that ``benchmarks/llamacpp_ubatch.py`` checks the roofline on
#: (llama.cpp PRs #15802, #15131, #7676, #7860: Q4_0 and Q6_K on RTX 3090 / 4090; forwards of 2 to 64 tokens run
#: slower than priced: mmvq's and MMQ's dequantisation, which the roofline does not price).  Its 16-bit rows are
#: within the roofline's own band, so BF16 / FP16 keep BAND["roofline"].
#: tests/models/serving/test_llamacpp_band.py recomputes it from the rows.
LLAMA_CPP_GGUF_BAND = 0.61
LLAMA_CPP_GGUF_BAND_SOURCE = ("benchmarks/results/llamacpp_ubatch.md: max |measured / predicted - 1| over the GGUF "
                              "rows (tests/data/serving/llamacpp_ubatch.json)")

#: The error band of a vLLM prediction for an MXFP4 mixture-of-experts checkpoint (GPT-OSS) on a GPU before Blackwell:
#: the largest |measured / predicted - 1| of the GPT-OSS 20B / 120B runs GPUStack's performance lab published for
#: vLLM 0.10 / 0.11 on A100 and H100 (``benchmarks/serving_gpustack.py``): nearly all ran slower than priced, by far
#: more than their kernel sources' band.  Newer vLLM does better there (aiconfigurator-core's silicon rows of
#: GPT-OSS 120B on H100 / H200, ``benchmarks/serving_load_moe.py``), but a plan cannot know which vLLM will run it,
#: so it keeps the older runs' miss.  Blackwell runs other MXFP4 kernels, which no published row checks here.
#: tests/models/serving/test_gpustack_band.py recomputes it from the rows.
VLLM_MXFP4_BAND = 0.68
VLLM_MXFP4_BAND_SOURCE = ("benchmarks/results/serving_gpustack.md: max |measured / predicted - 1| over the GPT-OSS "
                          "rows (tests/data/serving/gpustack_perf_lab.json)")

#: Weight precisions the planner takes: name -> (bytes per weight, kernel dtype, source).
PRECISIONS: dict[str, tuple[float, str, str]] = {
    "bf16": (2.0, "bf16", "IEEE bfloat16"),
    "fp16": (2.0, "fp16", "IEEE half"),
    # per-tensor or per-channel FP32 scales: negligible next to the weights (vLLM Fp8LinearMethod)
    "fp8": (1.0, "fp8", "vllm/model_executor/layers/quantization/fp8.py::Fp8LinearMethod.create_weights"),
    # NVFP4: one FP8 E4M3 scale per 16 FP4 weights (ModelOpt / llm-compressor NVFP4 preset)
    "fp4": (0.5 + 1.0 / 16.0, "fp4", "NVFP4 block of 16 weights with an FP8 scale (modelopt NVFP4)"),
    # AWQ/GPTQ w4a16, group 128: an FP16 scale and a 4-bit zero per group (AutoAWQ WQLinear_GEMM layout)
    "int4": (0.5 + (16.0 + 4.0) / 8.0 / 128.0, "int4_wo", "AutoAWQ WQLinear_GEMM: int4, group 128, fp16 scale"),
    # 8-bit integer weights (GPTQ / AWQ 8-bit, compressed-tensors W8A8 / W8A16): one byte each, priced with
    # the weight-only INT8 kernels (a checkpoint's group scales are added from its quantization_config)
    "int8": (1.0, "int8_wo", "GPTQ / compressed-tensors int8: 8 bits per weight (vLLM gptq_marlin, w8a16)"),
    # GGUF: see GGUF below (block sizes of ggml's type_traits)
    "q8_0": (34.0 / 32.0, "int8_wo", "ggml/src/ggml-common.h block_q8_0: fp16 d + 32 int8 = 34 bytes / 32"),
    "q6_k": (210.0 / 256.0, "int4_wo", "ggml-common.h block_q6_K: 128 ql + 64 qh + 16 scales + fp16 d = 210 / 256"),
    "q5_k_m": (176.0 / 256.0, "int4_wo", "ggml-common.h block_q5_K: 2 fp16 + 12 scales + 32 qh + 128 qs = 176 / 256"),
    "q4_k_m": (144.0 / 256.0, "int4_wo", "ggml-common.h block_q4_K: 2 fp16 + 12 scales + 128 qs = 144 / 256"),
    # every tensor Q4_0 but the output layer (Q6_K: llama_tensor_get_type), the type llama.cpp's own benchmarks run
    "q4_0": (18.0 / 32.0, "int4_wo", "ggml-common.h block_q4_0: fp16 d + 16 bytes of nibbles = 18 / 32"),
}

#: Where TensorRT-LLM runs its context (prefill) attention in FP8, as its attention op decides:
#: cpp/tensorrt_llm/thop/attentionOp.cpp sets ``mFP8ContextFMHA = is_fp8_out || is_fp4_out ||
#: (hasFp8KvCache && use_paged_context_fmha)``; the PyTorch flow asks for an FP8 (FP4) attention output when
#: the output projection after it is FP8 (NVFP4) quantized, and pages its context FMHA when blocks are reused
#: (``KvCacheConfig.enable_block_reuse``, on by default).  The other engines' prefill attention is priced at
#: 16 bits.
FP8_CONTEXT_FMHA_SOURCE = ("TensorRT-LLM thop/attentionOp.cpp: mFP8ContextFMHA = is_fp8_out || is_fp4_out || "
                           "(hasFp8KvCache && use_paged_context_fmha); llmapi KvCacheConfig.enable_block_reuse True")


def context_fmha_dtype(framework: str | None, weight_dtype: str, kv_dtype: str, attention_quantized: bool) -> str:
    """The data type an engine runs prefill attention in (:data:`FP8_CONTEXT_FMHA_SOURCE`): ``fp8`` for
    TensorRT-LLM when the attention's output projection is FP8 or NVFP4 (``attention_quantized``: not kept at
    16 bits by the checkpoint) or the KV cache is FP8, else ``bf16``."""
    if framework != "trtllm":
        return "bf16"
    fp8_out = attention_quantized and weight_dtype in ("fp8", "fp8_block", "fp4")
    return "fp8" if fp8_out or kv_dtype == "fp8" else "bf16"


#: GPUs of the catalogue that are not NVIDIA's: vendor and llama.cpp's backend device prefix (ggml's
#: GGML_CUDA_NAME is "ROCm" in a HIP build, GGML_SYCL_NAME "SYCL"); every other GPU is NVIDIA's, "CUDA".
NON_NVIDIA: dict[str, tuple[str, str]] = {"mi300x": ("AMD", "ROCm"), "b60": ("Intel", "SYCL")}

#: NVIDIA compute capability of each catalogue GPU (NVIDIA, "CUDA GPUs - Compute Capability",
#: developer.nvidia.com/cuda-gpus): what decides which weight types an engine's kernels run on it.
COMPUTE_CAPABILITY: dict[str, float] = {
    "v100": 7.0, "t4": 7.5, "a100": 8.0, "a100-40g": 8.0, "a10g": 8.6, "a6000": 8.6, "rtx-3060": 8.6,
    "rtx-3090": 8.6, "l4": 8.9, "l40s": 8.9, "rtx-4090": 8.9, "h100": 9.0, "h100-pcie": 9.0, "h200": 9.0,
    "gh200": 9.0, "b200": 10.0, "gb200": 10.0, "b300": 10.3, "gb300": 10.3, "rtx-5090": 12.0,
    "rtx-pro-6000": 12.0}
COMPUTE_CAPABILITY_SOURCE = "NVIDIA CUDA GPUs compute capability table, developer.nvidia.com/cuda-gpus"


@dataclass(frozen=True)
class CapabilityRule:
    """The lowest compute capability on which an engine runs ``precision`` weights at all (``at_least``), and
    where in its source that limit is."""

    precision: str
    at_least: float
    source: str
    method: str = ""  # a checkpoint quantization method this rule is for ("": the precision's other checkpoints)

#: The GGUF weight types (llama.cpp only).
GGUF_NAMES = ("q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0")

#: KV-cache element types -> bytes per element.
KV_DTYPES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "q8_0": 34.0 / 32.0}

#: Bytes per weight of ggml's Q6_K: the type the K_M mixes promote some tensors to.
Q6_K_BYTES = 210.0 / 256.0


@dataclass(frozen=True)
class GgufMix:
    """llama.cpp's ``*_K_M`` mixes (src/llama-quant.cpp ``llama_tensor_get_type``): ``attn_v`` and
    ``ffn_down`` of the layers ``use_more_bits`` picks (the first and last eighth, every third
    between) and ``output.weight`` are Q6_K; every other tensor is the base type."""

    base_bytes: float


GGUF: dict[str, GgufMix] = {"q4_k_m": GgufMix(144.0 / 256.0), "q5_k_m": GgufMix(176.0 / 256.0)}


def use_more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's ``use_more_bits(i_layer, n_layers)`` (src/llama-quant.cpp)."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


@dataclass(frozen=True)
class EngineRules:
    """What one engine does with memory and layers, as read in its source.

    ``memory_fraction``: the default share of memory it may use (``fraction_of``: ``total`` memory
    of each GPU, or ``free`` after loading); ``kv_rule``: ``min_blocks`` (vLLM: the minimum over
    workers of that worker's blocks), ``world_min`` (SGLang: the world's smallest free memory, then
    the minimum over PP ranks), ``min_tokens`` (TensorRT-LLM: MIN all-reduce of tokens),
    ``per_device`` (llama.cpp: each device holds its layers' cache of one global context),
    ``dynamic`` (Hugging Face: no pool; grows with the batch).  ``embed_first`` / ``head_last``:
    where the input embedding and LM head sit (``lm_head_every_stage``: SGLang's Llama builds it on
    every PP rank; ``embed_on_host``: llama.cpp keeps ``tok_embd`` in host RAM).
    """

    name: str
    framework: str | None  # the kernel tables' framework (None: roofline / llama.cpp kernels)
    memory_fraction: float
    fraction_of: str
    kv_rule: str
    block_size: int
    default_split: str  # where the remainder layers go by default: middle | last | first | free_memory
    lm_head_every_stage: bool = False
    embed_on_host: bool = False
    cuda_graphs: bool = True
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    sources: tuple[str, ...] = ()
    #: how the scheduler admits a request against the KV cache: ``mean`` (vLLM, SGLang: by the blocks it
    #: holds now, preempting when the cache runs out, so the steady batch is bounded by the mean occupancy)
    #: or ``reserve`` (TensorRT-LLM's GUARANTEED_NO_EVICT: only when the blocks of its whole ISL + OSL are free)
    #: or ``slots`` (llama.cpp: ``-c`` cells split evenly over the ``-np`` slots, each of which must hold the
    #: longest request whole, so every slot reserves that much whatever it runs)
    capacity_policy: str = "mean"
    #: whether a replica of several stages keeps micro-batches in flight on every stage at once (vLLM, SGLang,
    #: TensorRT-LLM: ``pp`` batches queued) or runs each step through its devices in turn (llama.cpp's layer
    #: split: a decode step is one ubatch, and its pipelining overlaps only the ubatches of one batch, PR #6017;
    #: a Hugging Face ``device_map``: accelerate's hooks move one forward from device to device)
    pipelined: bool = True
    #: the most sequences the engine takes at once whatever its flags (llama.cpp's ``LLAMA_MAX_SEQ``)
    seqs_ceiling: int = 4096
    #: the KV cache's cells are allocated in multiples of this (llama.cpp pads ``-c`` to 256 cells)
    kv_pad: int = 1
    #: whether CUDA graphs are captured after the KV cache is sized, out of the memory the fraction leaves
    #: (TensorRT-LLM's PyTorch executor; vLLM of 2024) rather than budgeted before it (vLLM V1)
    graphs_after_kv: bool = False
    #: whether a prompt longer than what is left of the step's token budget is split over steps (vLLM v1,
    #: SGLang) or waits until it fits whole (TensorRT-LLM without ``enable_chunked_prefill``, its default)
    chunked_prefill: bool = True
    #: whether a step carries prompt tokens beside the running requests' decodes (vLLM, TensorRT-LLM) or
    #: prompts run in batches of their own, first (SGLang without ``--enable-mixed-chunk``)
    mixed_steps: bool = True
    #: whether the engine shards a layer over a TP group at all (llama.cpp's ``-sm layer`` and a Hugging Face
    #: ``device_map`` place whole layers: one GPU per stage)
    tensor_parallel: bool = True
    #: whether the engine refuses ``max_num_batched_tokens < max_num_seqs`` at start-up (vLLM's SchedulerConfig)
    tokens_cover_seqs: bool = False
    #: whether the engine refuses to start when one worker's KV cache cannot hold one request of max_model_len
    #: (vLLM's _check_enough_kv_cache_memory); the others cap the request length to the pool
    max_len_must_fit: bool = False
    #: whether one replica runs in one process on one node (a Hugging Face device_map; llama.cpp without
    #: its RPC backend, which is neither priced nor exported here)
    single_node: bool = False
    #: the weight precisions the engine loads (empty: every non-GGUF one); llama.cpp reads GGUF files only
    precisions: tuple[str, ...] = ()
    #: whether the engine runs only on NVIDIA GPUs (TensorRT-LLM: CUDA and TensorRT kernels)
    nvidia_only: bool = False
    #: KV-cache dtypes the engine stores (our name -> its flag's value; None: its default, the model's dtype)
    kv_dtypes: tuple[tuple[str, str | None], ...] = (("bf16", None), ("fp16", None), ("fp8", "fp8"))
    #: the start-up profile's sampling peak in FP32 logits (``max_num_seqs`` x vocab x 4 bytes) it holds at once;
    #: with a value the profile's peak is the larger of the forward's and the sampler's (they run one after the
    #: other), without one (0) a stage holds one FP32 logits tensor beside the forward's intermediates
    sampler_logits_copies: float = 0.0
    #: whether ``max_num_seqs`` caps each of the ``pp`` micro-batches in flight (TensorRT-LLM: every micro-batch
    #: is scheduled on its own, up to ``max_batch_size`` requests not already in flight) or all of them together
    #: (vLLM: ``max_num_seqs`` caps ``scheduler.running`` across the micro-batches)
    seqs_per_micro_batch: bool = False
    #: how the default memory fraction is set: ``fixed`` (``memory_fraction``) or ``sglang`` (SGLang derives it
    #: per launch from the GPU's memory and TP x PP: :func:`sglang_mem_fraction`)
    fraction_rule: str = "fixed"
    #: how the default ``max_num_seqs`` is set: ``fixed`` (``max_num_seqs``) or ``vllm`` (vLLM keys it on the
    #: GPU the engine starts on: :func:`vllm_default_max_num_seqs`)
    seqs_rule: str = "fixed"
    #: whether the search chooses ``max_num_seqs`` (engines that batch many sequences continuously and take the
    #: limit as a flag: llama.cpp's ``-np`` too); a Hugging Face ``generate`` runs one request
    searched_seqs: bool = True
    #: whether the search also chooses ``max_num_batched_tokens`` (the step's token budget); llama.cpp's ``-ub``
    #: is kept: its steps run up to ``-b`` tokens in ubatches of it, which the model prices as one ubatch a step
    searched_tokens: bool = True
    #: TensorRT-LLM's batch waiting (``batch_wait_timeout_iters``, ``batch_wait_max_tokens_ratio``; both 0, off,
    #: by default): while requests generate, new contexts are held back until the step's tokens reach the ratio
    #: of ``max_num_tokens`` or the timeout's iterations pass (``PyExecutor._waiting_requests``).  The simulation
    #: honours them; the steady-state evaluator does not
    batch_wait_timeout_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    #: the lowest compute capability the engine runs on at all (0: no limit; NVIDIA GPUs only)
    min_capability: float = 0.0
    min_capability_source: str = ""
    #: weight types the engine runs only from some compute capability up (the rest: wherever it runs)
    capability_rules: tuple[CapabilityRule, ...] = ()
    #: how requests reach the replicas: least-loaded (vLLM's data-parallel client: the engine with the least
    #: ``4 * waiting + running``, ``v1/engine/core_client.py::DPLBAsyncMPClient``) or round robin (SGLang's DP
    #: controller default, ``server_args.py`` ``load_balance_method = "round_robin"``; the engines without a DP
    #: router taken as behind a round-robin proxy).  The simulation routes so; the evaluator shares a rate so
    least_loaded_router: bool = False
    #: whether the engine caches prompt blocks by content by default, so a request preempted by recompute
    #: finds the head of its prompt still cached when it is re-admitted (vLLM v1: ``enable_prefix_caching``
    #: on unless turned off); the simulation keeps those blocks until other requests' allocations take them
    prefix_cache: bool = False
    #: whether the host schedules step n + 1 while the GPU runs step n (TensorRT-LLM's overlap scheduler, SGLang's
    #: zero-overhead scheduler), so a request that arrives during step n first runs in step n + 2 unless the
    #: engine would idle; the simulation honours it on a replica of one stage, the steady state does not
    overlap_scheduler: bool = False
    #: whether a replica may span nodes, launched by the engine's own multi-node flags (vLLM ``--nnodes``,
    #: SGLang ``--nnodes``): each node then runs the same number of consecutive ranks, so the replica's stages
    #: must form one run per node, the runs equally long (:func:`~dnnplace.models.serving.pipeline.launch_refusal`)
    multi_node: bool = False


#: vLLM's start-up profile ends with a sampling pass over ``max_num_seqs`` rows of logits with top-k and top-p
#: on (V0 ``profile_run``: top_k = vocab - 1, top_p 0.99; V1 ``_dummy_sampler_run``), whose PyTorch path holds
#: the FP32 logits, their sorted copy and int64 sort indices, masks, the scattered logits, probabilities and the
#: exponential draws at once, plus the sort's own buffers.  Measured, not counted: llm-d's vLLM runs on H100
#: (llm-d-benchmark config_explorer/empirical-vllm-memory-results.md) log a 4.76 GiB activation peak for
#: Llama-3.1-8B at vLLM's 1,024 sequences on an 80 GB GPU: 4.76 GiB / (1024 x 128256 x 4 B) = 9.73 FP32
#: logits tensors.  The other rows of that table, vLLM PR #10511's 1.26 GiB at 256 sequences and the start-up
#: logs in benchmarks/serving_memory.py check it.
VLLM_SAMPLER_LOGITS_COPIES = 4.76 * 2**30 / (1024 * 128256 * 4)
VLLM_SAMPLER_SOURCE = ("llm-d-benchmark config_explorer/empirical-vllm-memory-results.md: Llama-3.1-8B on H100, "
                       "peak activation 4.76 GiB at max_num_seqs 1024 -> 9.73 x max_num_seqs x vocab x 4 B")

ENGINES: dict[str, EngineRules] = {
    "vllm": EngineRules(
        "vllm", "vllm", 0.92, "total", "min_blocks", 64, "middle",
        max_num_seqs=256, max_num_batched_tokens=8192, tokens_cover_seqs=True, max_len_must_fit=True,
        sampler_logits_copies=VLLM_SAMPLER_LOGITS_COPIES, seqs_rule="vllm", least_loaded_router=True,
        prefix_cache=True, multi_node=True,
        capability_rules=(
            CapabilityRule("fp8", 7.5, "vllm quantization/utils/marlin_utils_fp8.py::is_fp8_marlin_supported "
                                       "(has_device_capability(75)): FP8 W8A8 from 8.9, weight-only FP8 Marlin "
                                       "below (docs features/quantization/llm_compressor/fp8.md)"),
            CapabilityRule("fp4", 7.5, "vllm quantization/utils/marlin_utils_fp4.py::is_fp4_marlin_supported "
                                       "(has_device_capability(75)): NVFP4 kernels on Blackwell, weight-only FP4 "
                                       "Marlin below")),
        sources=(VLLM_SAMPLER_SOURCE,
                 "config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE = 64; DEFAULT_GPU_MEMORY_UTILIZATION = 0.92",
                 "v1/core/kv_cache_planning.py::get_kv_cache_configs: min over workers of available // bytes",
                 "distributed/utils.py::get_pp_indices: remainder to partitions[-2], [-3], ...",
                 "engine/arg_utils.py::get_batch_defaults: max_num_seqs 1024 on a GPU of >= 70 GiB that is not an "
                 "A100, else 256 (LLM class and API server alike); max_num_batched_tokens 8192 there, else 2048 "
                 "(the API server: vllm serve)",
                 "config/model.py::verify_with_parallel_config: attention heads % TP == 0; layers/linear.py"
                 "::QKVParallelLinear: divide(KV heads, TP) or divide(TP, KV heads)",
                 "config/scheduler.py::SchedulerConfig._verify_args: max_num_batched_tokens >= max_num_seqs",
                 "config/cache.py CacheDType: auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2 (--kv-cache-dtype)",
                 "v1/core/kv_cache_utils.py::_check_enough_kv_cache_memory: each worker holds one max_model_len",
                 "engine/arg_utils.py: V1 turns enable_prefix_caching on for generative models unless set; "
                 "v1/core/kv_cache_manager.py::free: blocks freed in reverse order, the tail evicted first; "
                 "v1/core/block_pool.py::get_new_blocks: the free queue's head (freed longest ago) first",
                 "config/parallel.py: local_world_size = world_size // nnodes, node k runs ranks [k L, (k + 1) L)")),
    "sglang": EngineRules(
        "sglang", "sglang", 0.88, "total", "world_min", 1, "last", lm_head_every_stage=True,
        max_num_seqs=4096, max_num_batched_tokens=8192, mixed_steps=False, fraction_rule="sglang",
        overlap_scheduler=True, multi_node=True,
        capability_rules=(
            CapabilityRule("fp8", 8.0, "sglang srt/layers/quantization/fp8.py Fp8Config.get_min_capability (80); "
                                       "fp8_utils.py::can_auto_enable_marlin_fp8: weight-only Marlin on 8.0-8.8"),
            CapabilityRule("fp4", 7.5, "sglang srt/layers/quantization/marlin_utils_fp4.py::"
                                       "is_fp4_marlin_supported (SM >= 75)")),
        kv_dtypes=(("bf16", None), ("fp16", None), ("fp8", "fp8_e4m3")),
        sources=("srt/server_args.py --kv-cache-dtype choices: auto, fp8_e5m2, fp8_e4m3, bf16",
                 "srt/model_executor/model_runner_kv_cache_mixin.py::profile_max_num_token (world-min memory)",
                 "srt/distributed/utils.py::get_pp_indices: remainder to the last partitions",
                 "srt/models/llama.py: ParallelLMHead on every PP rank",
                 "srt/server_args.py::_handle_gpu_memory_settings: mem_fraction_static by sglang_mem_fraction "
                 "(0.88 where the GPU's memory is unknown)",
                 "srt/server_args.py enable_mixed_chunk False; srt/managers/scheduler.py::get_next_batch_to_run: "
                 "a new prefill batch runs before the running decode batch",
                 "srt/server_args.py disable_overlap_schedule False: the zero-overhead batch scheduler "
                 "(lmsys.org/blog/2024-12-04-sglang-v0-4) runs the next batch's scheduling while the GPU runs "
                 "this one",
                 "srt/entrypoints/engine.py::_calculate_rank_ranges: node r runs PP ranks [r P/N, (r + 1) P/N)")),
    "trtllm": EngineRules(
        "trtllm", "trtllm", 0.9, "free", "min_tokens", 32, "first",
        max_num_seqs=2048, max_num_batched_tokens=8192, capacity_policy="reserve", graphs_after_kv=True,
        chunked_prefill=False, seqs_per_micro_batch=True, overlap_scheduler=True,
        nvidia_only=True, min_capability=8.0,
        min_capability_source="TensorRT-LLM docs supported-hardware.md: Blackwell, Hopper, Ada Lovelace, Ampere "
                              "(A100); reference/support-matrix.md: Ampere (SM80, SM86) and newer",
        capability_rules=(
            CapabilityRule("fp8", 8.9, "TensorRT-LLM reference/support-matrix.md: FP8 on Ada Lovelace (SM89) and "
                                       "Hopper (SM90), not on Ampere"),
            CapabilityRule("fp4", 10.0, "TensorRT Model Optimizer support matrix: FP4 per-block weights and "
                                        "activations on Blackwell and later"),
            CapabilityRule("fp4", 9.0, "TensorRT-LLM deployment guide for GPT-OSS: MXFP4 MoE weights with BF16 "
                                       "activations on H200 (the TRITON MoE backend), MXFP8 activations on "
                                       "Blackwell", method="mxfp4")),
        sources=(FP8_CONTEXT_FMHA_SOURCE,
                 "_torch/pyexecutor/resource_manager.py::calculate_max_num_blocks: free_gpu_memory_fraction 0.9",
                 "tensorrt_llm/mapping.py::pp_layers: torch.tensor_split, first ranks get the remainder",
                 "llmapi/llm_args.py: tokens_per_block 32, max_batch_size 2048, max_num_tokens 8192",
                 "_torch/pyexecutor/py_executor.py::_executor_loop_pp: each of pp micro-batches is scheduled by "
                 "_schedule() over the requests not in flight, up to max_batch_size each (bench/build/tuning.py "
                 "splits its batch over PP for that reason)",
                 "llmapi/llm_args.py KvCacheConfig.dtype: auto, fp8",
                 "llmapi/llm_args.py SchedulerConfig: capacity_scheduler_policy GUARANTEED_NO_EVICT",
                 "llmapi/llm_args.py enable_chunked_prefill False; batch_manager/microBatchScheduler.cpp: "
                 "generation then whole contexts in request order, stop at the first that overflows max_num_tokens",
                 "_torch/pyexecutor/py_executor_creator.py: KV estimated from a dry run, CUDA graphs captured "
                 "after the KV cache is allocated",
                 "docs/source/features/overlap-scheduler.md: step n + 1 is scheduled and launched before step "
                 "n's outputs are processed (py_executor.py _executor_loop_overlap), enabled by default "
                 "(disable_overlap_scheduler False)")),
    "llama.cpp": EngineRules(
        "llama.cpp", None, 1.0, "total", "per_device", 1, "free_memory", embed_on_host=True, cuda_graphs=False,
        tensor_parallel=False, kv_dtypes=(("bf16", None), ("fp16", None), ("q8_0", "q8_0")),
        precisions=("bf16", "fp16", "fp4", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0"), single_node=True,
        max_num_seqs=4, max_num_batched_tokens=512, capacity_policy="slots", seqs_ceiling=256, kv_pad=256,
        pipelined=False, searched_tokens=False,
        sources=("src/llama-model.cpp::load_tensors: tok_embd on the CPU, output as slot n_layer",
                 "src/llama-kv-cache.cpp: layer il's K/V on dev_layer(il)",
                 "tools/server: -np 4 slots by default (n_parallel), -ub 512 (n_ubatch); without --kv-unified "
                 "each slot gets n_ctx / n_parallel cells",
                 "src/llama-cparams.h LLAMA_MAX_SEQ 256 (ggml-org/llama.cpp PR #15916, 64 before it)",
                 "src/llama-context.cpp: n_ctx padded to a multiple of 256",
                 "ggml-org/llama.cpp PR #6017 (pipeline parallelism): the ubatches of one llama_decode overlap "
                 "over the devices; a step's outputs are synchronised before the next",
                 "ggml-org/llama.cpp PR #19922's baseline: gpt-oss 120B MXFP4 tg1024 82.4 / 76.8 / 73.4 t/s on 2 / 4 / "
                 "6 GPUs (-sm layer): one sequence's decode gains nothing from more stages",
                 "common/arg.cpp kv_cache_types: f32, f16, bf16, q8_0, q4_0, ... (-ctk / -ctv; no FP8)",
                 "ggml/include/ggml.h ggml_type: F16, BF16, Q8_0, Q6_K, Q5_K, Q4_K, MXFP4 (no FP8 or AWQ/GPTQ INT4)")),
    "hf": EngineRules(
        "hf", None, 0.9, "total", "dynamic", 1, "balanced", cuda_graphs=False, tensor_parallel=False,
        kv_dtypes=(("bf16", None), ("fp16", None)), single_node=True,
        max_num_seqs=1, max_num_batched_tokens=4096, searched_seqs=False, searched_tokens=False, pipelined=False,
        capability_rules=(
            CapabilityRule("fp8", 8.9, "transformers quantizers/quantizer_finegrained_fp8.py: below compute "
                                       "capability 8.9 an FP8 model is dequantized to BF16 on load (plan it "
                                       "as bf16 there)"),
            CapabilityRule("fp4", 10.0, "transformers docs quantization/nvfp4.md: NVFP4 requires a Blackwell GPU "
                                        "with compute capability 10.0 or newer"),
            CapabilityRule("fp4", 7.5, "transformers quantizers/quantizer_mxfp4.py: below compute capability 7.5 "
                                       "an MXFP4 model is dequantized to BF16 on load (plan it as bf16 there)",
                           method="mxfp4")),
        sources=("accelerate/utils/modeling.py::get_balanced_memory: even by bytes",
                 "get_max_memory: 90 % of a single GPU when max_memory is unset",
                 "transformers DynamicCache: the cache is kept in the model's dtype")),
}


#: vLLM's ``get_batch_defaults``: GPUs at or above this much memory (torch's total), A100s excepted, get the
#: larger default batch limits.
VLLM_LARGE_GPU_BYTES = 70 * 2**30


def vllm_default_max_num_seqs(gpus: list[tuple[str, float]]) -> int:
    """vLLM's default ``max_num_seqs`` for a plan on these GPU kinds ((name, torch's total bytes) each):
    engine/arg_utils.py::get_batch_defaults gives 1024 when the GPU the engine starts on has >= 70 GiB and is
    not an A100 ("setting large max_num_batched_tokens for A100 reduces throughput", vLLM PR #17885), else
    256, for the ``LLM`` class and the API server alike.  Why every kind: one plan carries one value for all
    its replicas, and each replica's engine keys on its own GPU, so the larger value is vLLM's default only
    where every kind qualifies; the export writes the value out either way."""
    return 1024 if _vllm_large(gpus) else 256


def _vllm_large(gpus: list[tuple[str, float]]) -> bool:
    """Whether every kind gets get_batch_defaults' larger limits (>= 70 GiB, not an A100)."""
    return bool(gpus) and all(nbytes >= VLLM_LARGE_GPU_BYTES and "a100" not in name.lower() for name, nbytes in gpus)


def vllm_default_max_num_batched_tokens(gpus: list[tuple[str, float]]) -> int:
    """vLLM's default ``max_num_batched_tokens`` under ``vllm serve`` (the API server the export writes) for a plan
    on these GPU kinds: engine/arg_utils.py::get_batch_defaults gives the OPENAI_API_SERVER context 8192 on a GPU
    of >= 70 GiB that is not an A100, else 2048 (the LLM class 16384 / 8192).  The search moves the budget
    from there (search.py); the export writes it out either way."""
    return 8192 if _vllm_large(gpus) else 2048


def sglang_mem_fraction(gpu_mib: float, tp: int, pp: int) -> float:
    """SGLang's default ``mem_fraction_static`` on a GPU of ``gpu_mib`` MiB (nvidia-smi's total) for a launch of
    ``tp`` x ``pp`` GPUs, as srt/server_args.py::_handle_gpu_memory_settings sets it: its memory tier's
    ``chunked_prefill_size`` (2048 below 35 GiB, 4096 below 60, 8192 below 160, else 16384) and
    ``cuda_graph_max_bs``; reserve 512 MiB, 1.5 MiB per chunked-prefill token, 2 MiB per CUDA-graph batch,
    1 GiB per 8 GPUs of TP x PP, at least 10 GiB on GPUs over 60 GiB; the fraction is what is left, rounded to
    3 decimals.  Why not a constant: on an 80 GB H100 it is 0.835 at TP 1 and 0.818 at TP 8, not the 0.88 of
    its fallback, and SGLang's KV pool is this fraction less the weights -- several GiB per GPU apart."""
    tiers = [(20 * 1024, 2048, 8, 8), (35 * 1024, 2048, 24, 80), (60 * 1024, 4096, 32, 160),
             (90 * 1024, 8192, 256, 512), (160 * 1024, 8192, 256, 512)]
    chunk, graphs = next(((c, small if tp < 4 else large) for top, c, small, large in tiers if gpu_mib < top),
                         (16384, 512))
    reserved = 512 + max(chunk, 2048) * 1.5 + graphs * 2 + tp * pp / 8 * 1024
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def engine_rules(name: str) -> EngineRules:
    """The engine's rules; one line naming the known engines otherwise."""
    from dnnplace.errors import DnnplaceError

    try:
        return ENGINES[name.lower()]
    except (KeyError, AttributeError):
        raise DnnplaceError(f"unknown engine '{name}'; known: {', '.join(ENGINES)}") from None


@dataclass(frozen=True)
class AllReduceRule:
    """When an engine runs a TP all-reduce with its own kernel rather than NCCL, as read in its source.

    ``world_sizes``: the group sizes its kernel supports (empty: any); ``max_bytes``: the custom path only
    below (``strict``) or up to this message size, NCCL above; ``pcie_world``: the largest group it still
    takes without a full NVLink mesh (vLLM / SGLang: 2 GPUs over PCIe P2P; TensorRT-LLM: none, taken here
    as NVLink only since P2P over PCIe is not known for a card).  Everything else is NCCL's ring."""

    world_sizes: tuple[int, ...]
    max_bytes: float
    strict: bool
    pcie_world: int
    sources: tuple[str, ...] = ()

    def custom(self, nbytes: object, tp: int, nvlink: bool) -> np.ndarray:
        """Whether each message of ``nbytes`` (array) on a TP group of ``tp`` takes the custom kernel."""
        nb = np.asarray(nbytes, dtype=float)
        group_ok = tp > 1 and (not self.world_sizes or tp in self.world_sizes) and (nvlink or tp <= self.pcie_world)
        size_ok = nb < self.max_bytes if self.strict else nb <= self.max_bytes
        return np.logical_and(group_ok, size_ok)


_MIB = 1024.0 * 1024.0

#: Per kernel-table framework (= engine): its TP all-reduce dispatch.  Not fitted; read in the engines.
TP_ALL_REDUCE: dict[str, AllReduceRule] = {
    "vllm": AllReduceRule(
        (2, 4, 6, 8), 8192 * 1024, True, 2,
        ("vllm/distributed/device_communicators/custom_all_reduce.py CustomAllreduce: _SUPPORTED_WORLD_SIZES "
         "[2, 4, 6, 8], max_size 8192 * 1024; __init__: disabled across nodes and for > 2 GPUs not fully "
         "NVLink-connected; should_custom_ar: inp_size < max_size; else the communicator's NCCL path",)),
    "sglang": AllReduceRule(
        (2, 4, 6, 8), 8192 * 1024, True, 2,
        ("sglang/srt/distributed/device_communicators/custom_all_reduce.py CustomAllreduce (adapted from "
         "vLLM): _SUPPORTED_WORLD_SIZES [2, 4, 6, 8], _MAX_CAR_SIZE 8192 * 1024, full NVLink or 2 GPUs",)),
    "trtllm": AllReduceRule(
        (), 64 * _MIB, False, 0,
        ("cpp/tensorrt_llm/thop/allreduceOp.cpp getRuntimeStrategy (AllReduceStrategy AUTO): ifFallbackToNCCL "
         "when message bytes > getMaxRequiredWorkspaceSize or without peer-to-peer; else its one-shot / "
         "two-shot / NCCL-symmetric choice, which the measured table holds",
         "cpp/tensorrt_llm/common/customAllReduceUtils.h getMaxRequiredWorkspaceSize: 64 MiB by default")),
}


#: GeForce cards whose driver refuses peer-to-peer access over PCIe (``cudaDeviceCanAccessPeer`` 0), with the
#: evidence.  Why it matters: vLLM's and SGLang's custom all-reduce need peer access (vLLM checks and falls back
#: to NCCL; SGLang crashed on 4090s until it checked), so a TP group of these cards all-reduces through NCCL over
#: host memory; a pair of 3090s on their NVLink bridge keeps peer access (node link ``nvlink``).
NO_PEER_ACCESS: dict[str, str] = {
    "rtx-5090": "tinygrad/open-gpu-kernel-modules #29: P2P on the RTX 5090 needs a patched kernel driver",
    "rtx-4090": "sgl-project/sglang #4814: 'peer access is not supported between these two devices' on 8 x RTX 4090 "
                "at TP 2; accelerate utils/environment.py check_cuda_p2p_ib_support disables P2P on the RTX 4000 "
                "series",
    "rtx-3090": "NVIDIA/nccl #1127: p2pBandwidthLatencyTest on 8 x RTX 3090 over PCIe, 'CANNOT Access Peer'; "
                "accelerate #2328: NVLink-bridged 3090s do have P2P",
    "rtx-3060": "GeForce Ampere as the RTX 3090 over PCIe (NVIDIA/nccl #1127), with no NVLink bridge at all",
}


def tp_link(gpu: str, link: str, tp: int) -> str:
    """The link a TP group of ``tp`` ``gpu`` cards all-reduces over on a node whose link is ``link``: a 2-card
    NVLink bridge (RTX A6000 / 3090 datasheets) joins pairs, so a larger group's ring crosses PCIe."""
    from dnnplace.core.catalogue import device_spec

    return "pcie" if link == "nvlink" and "bridge" in device_spec(gpu).nvlink and tp > 2 else link


def peer_access(gpu: str, link: str, tp: int) -> bool:
    """Whether a TP group of ``tp`` ``gpu`` cards has peer-to-peer access, which the engines' own all-reduce
    needs: every card but those of NO_PEER_ACCESS, and those only on their NVLink bridge."""
    from dnnplace.core.catalogue import device_spec

    bridged = device_spec(gpu).nvlink_bandwidth > 0 and tp_link(gpu, link, tp) == "nvlink"
    return gpu not in NO_PEER_ACCESS or bridged


#: Why an MXFP4 checkpoint's experts have a kernel rule of their own: GPT-OSS's MXFP4 is not NVFP4, and the tables
#: measure its fused MoE as ``w4a16_mxfp4`` (BF16 activations) and ``w4a8_mxfp4_mxfp8`` (MXFP8 activations).
MXFP4_MOE_SOURCE = ("TensorRT-LLM deployment guide for GPT-OSS: MXFP8 activations on Blackwell (the TRTLLM MoE "
                    "backend), BF16 on Hopper (TRITON); SGLang PR #9004: FlashInfer's MXFP4 MoE on Blackwell "
                    "quantizes activations to MXFP8, BF16 only behind --enable-flashinfer-mxfp4-bf16-moe ('higher "
                    "precision and slower'); vLLM quantization/mxfp4.py: BF16 activations unless "
                    "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8 (its tables' kernels: FlashInfer MXFP4 x BF16 on "
                    "Blackwell, OAI Triton on Hopper, Marlin on Ada)")


def mxfp4_moe_kernel(framework: str | None, gpu: str) -> str:
    """The measured-table kernel an engine runs an MXFP4 checkpoint's fused MoE with (MXFP4_MOE_SOURCE):
    TensorRT-LLM on Blackwell (compute capability 10.0 and up) and SGLang on data-center Blackwell (10.x: its
    FlashInfer MXFP4 kernels are SM100's; the RTX PRO 6000 / 5090 at 12.0 run Marlin, as its tables measure)
    quantize activations to MXFP8; vLLM, and every engine before Blackwell, keep them BF16."""
    cc = COMPUTE_CAPABILITY.get(gpu, 0.0)
    mxfp8 = framework == "trtllm" and cc >= 10.0 or framework == "sglang" and 10.0 <= cc < 11.0
    return "w4a8_mxfp4_mxfp8" if mxfp8 else "w4a16_mxfp4"


#: vLLM of July 2024 (the PR #6920 runs): ``CacheConfig.block_size`` 16 and ``gpu_memory_utilization`` 0.90
#: (vllm/engine/arg_utils.py of v0.5.3), CUDA graphs captured after the KV cache was sized.
VLLM_2024 = EngineRules(
    "vllm", "vllm", 0.90, "total", "min_blocks", 16, "middle", cuda_graphs=False, max_num_seqs=256,
    max_num_batched_tokens=8192, max_len_must_fit=True, sampler_logits_copies=VLLM_SAMPLER_LOGITS_COPIES,
    sources=("vllm v0.5.3 engine/arg_utils.py: block_size 16, gpu_memory_utilization 0.9", VLLM_SAMPLER_SOURCE))


#: trtllm-bench's bytes per element by quantization (tensorrt_llm/bench/build/tuning.py ``BYTES_PER_ELEM``).
TRTLLM_BENCH_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}


def trtllm_bench_limits(params: float, precision: str, kv_dtype: str, layers: int, kv_heads: int, head_dim: int,
                        gpu_gib: float, tp: int, pp: int, isl: int, osl: int, fraction: float = 0.90,
                        chunked_prefill: bool = False) -> tuple[int, int]:
    """``(max_batch_size, max_num_tokens)`` that ``trtllm-bench throughput`` runs with when neither is given.

    Why: the published TensorRT-LLM rows ran at these limits, not at the LLM API's defaults (2048, 8192).
    Read in tensorrt_llm/bench/build/tuning.py ``calc_engine_setting`` and ``finetune_setting`` (KV requests
    from ``fraction`` of all GPUs' memory less the checkpoint's parameters at its bytes per element; total
    batch capped at 4096 and split over PP; the optimistic rounding up; tokens at batch x (1 + ISL / OSL),
    capped at 32768), and tensorrt_llm/bench/benchmark/utils/general.py ``get_settings`` (without chunked
    prefill, max_num_tokens is raised to ISL + max_batch_size).  ``gpu_gib``: pynvml's total memory, GiB.
    """
    bpe = TRTLLM_BENCH_BYTES.get(precision, 2.0)
    kv_bpe = TRTLLM_BENCH_BYTES.get(kv_dtype, 2.0)
    per_token = 2 * layers * max(tp, kv_heads) * head_dim * kv_bpe / 1024**3
    available = gpu_gib * tp * pp - params * bpe / 1024**3
    requests = available * fraction / (per_token * (isl + osl))
    raw_bs = min(requests, 4096) / pp
    raw_tok = min(raw_bs * (1 + isl / osl), 32768)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        bs = 128 * math.ceil(raw_bs / 128)
    else:
        bs = 256 * math.ceil(raw_bs / 256)
    if raw_tok < 4096:
        tok = max(2048, 256 * math.ceil(raw_tok / 256))
    elif raw_tok < 8192:
        tok = 512 * math.ceil(raw_tok / 512)
    else:
        tok = 1024 * math.ceil(raw_tok / 1024)
    if not chunked_prefill:
        tok = max(tok, isl + bs)
    return int(bs), int(tok)
