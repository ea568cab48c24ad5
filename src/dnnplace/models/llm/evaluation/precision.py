"""Precision recipes: what an FP8 / FP4 training recipe changes in a step's time and memory.

A recipe (``--precision``) names how Transformer Engine (TE) runs the linear layers' GEMMs and what
Megatron keeps beside them.  It does not change *which* operators are low precision: only the GEMMs of
TE's linear modules (QKV, attention output, MLP in / out) are quantized; the attention core, norms,
softmax / cross entropy, embedding, the MoE router and the LM head (Megatron's ``output_layer`` is a
plain ColumnParallelLinear, not a TE module) stay 16-bit in every recipe (:data:`HIGH_PRECISION_OPS`).

Per quantized GEMM operand the recipe decides:

* the format and its tensor-core peak (``gemm_format``, a key of ``DeviceSpec.peak_flops``);
* how many quantized *copies* exist: Hopper's FP8 GEMMs take only the TN layout, so a tensor used both
  ways (the weight in fprop and dgrad, the input in fprop and wgrad) needs a physical transpose; on
  Blackwell one tensorwise-FP8 copy serves every layout, but block-scaled formats (MXFP8, NVFP4) scale
  along the contraction dimension and so keep a row-wise and a column-wise copy, each with its scales;
* the bytes a quantize kernel moves per source element (read 16-bit, write each copy and its scales,
  plus one more read for current scaling, whose amax must be known before the cast);
* the bytes kept: the weight copies (or FP8 parameters themselves with ``fp8_param_gather``), the input
  saved for the weight gradient (TE saves it quantized, column-wise usage only), scaling state.

Every figure is sourced in :data:`SOURCES`; nothing here is fitted to a measured step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dnnplace.core.catalogue import DeviceSpec
from dnnplace.core.systems import GPU_GENERATIONS
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.spec import TransformerArch

__all__ = ["ARCHITECTURES", "HIGH_PRECISION_OPS", "RECIPES", "SOURCES", "Recipe", "architecture",
           "cast_bytes_per_token", "recipe", "saved_input_delta"]

Array = np.ndarray

BF16_BYTES = 2.0
FP32_BYTES = 4.0

#: GPU generation of each catalogue / system GPU (model/systems.py).
ARCHITECTURES = GPU_GENERATIONS

#: Operators no recipe quantizes (module docstring).
HIGH_PRECISION_OPS = ("attention core", "norms", "softmax / cross entropy", "embedding", "LM head", "MoE router")

SOURCES: dict[str, str] = {
    "delayed": "TE common.recipe.DelayedScaling: one scale per tensor from the amax history of the previous "
               "steps (amax_history_len default 1024), HYBRID format (E4M3 forward, E5M2 gradients); NeMo "
               "recipes/precision/mixed_precision.py bf16_with_fp8_mixed: Fp8Recipe.delayed, "
               "fp8_amax_history_len=1024, fp8_param_gather=True",
    "current": "TE Float8CurrentScaling: the scale comes from this tensor's own amax, computed before the cast; "
               "NeMo bf16_with_fp8_current_scaling_mixed: Fp8Recipe.tensorwise, first and last transformer "
               "layer in BF16 (num_layers_at_start/end_in_bf16 = 1), fp8_param_gather=True",
    "mxfp8": "TE MXFP8BlockScaling (user guide, low_precision_training/mxfp8): one E8M0 scale per 32 consecutive "
             "values, 1-D blocks, E4M3 both passes, Blackwell (SM 10.0+) only; NeMo (2025-09) and Megatron-Bridge "
             "(since 2025-08, #450) bf16_with_mxfp8_mixed: fp8_param_gather=True with "
             "reuse_grad_buf_for_mxfp8_param_ag=True",
    "mxfp8_param_gather": "Megatron-Core param_and_grad_buffer.py: with reuse_grad_buf_for_mxfp8_param_ag the "
                          "quantized parameters keep no persistent param_data buffer; the distributed optimizer's "
                          "all-gather writes BF16 values into the gradient buffer and _post_param_sync copies them "
                          "into TE's MXFP8 storage (row- and column-wise copies): 2 bytes gathered per parameter",
    "fp8_cs_all": "Megatron-Bridge performance recipes: scripts/performance/utils/precision.py "
                  "get_precision_config('fp8_cs') (25.09-26.04) and perf_recipes/_common.py _perf_precision "
                  "(26.06+): bf16_with_fp8_current_scaling_mixed() with first_last_layers_bf16 = False -- every "
                  "transformer layer in FP8, fp8_param_gather=True",
    "nvfp4": "TE NVFP4BlockScaling / cuDNN block-scale quantize: 16 E2M1 values share one E4M3 scale, plus one "
             "FP32 per-tensor scale (its amax is a separate pass); 16x16 2-D blocks for weights, random "
             "Hadamard transform on wgrad inputs, stochastic rounding of gradients; selected layers kept in "
             "BF16, about 16 % of the linear layers (NVIDIA, 'Pretraining Large Language Models with NVFP4', "
             "arXiv:2509.25149)",
    "nvfp4_all": "Megatron-Bridge bf16_with_nvfp4_mixed() (mixed_precision.py, 26.02-26.06), which the performance "
                 "scripts' get_precision_config('nvfp4') return unchanged: first_last_layers_bf16 = False (the "
                 "MixedPrecisionConfig default), no per-module BF16 override for Llama -- every layer in NVFP4",
    "nvfp4_fp4p": "Megatron-Bridge #3364 (2026-04-21): bf16_with_nvfp4_mixed() sets fp4_param_gather = True -- the "
                  "parameters are NVFP4 tensors (no BF16 copy) and the data-parallel all-gather moves FP4",
    "nvfp4_no_tp_overlap": "Megatron-Bridge scripts/performance/configs/llama/llama3_llm_pretrain.py and "
                           "llama31_llm_pretrain.py (25.11-26.06) set comm_overlap.tp_comm_overlap = False for "
                           "nvfp4 on every GPU (perf_recipes/llama/*/llama31.py likewise): the sequence-parallel "
                           "all-gathers and reduce-scatters run blocking",
    "layouts": "TE cublaslt_gemm.cu CanonicalizeGemmInput: 'Hopper only supports TN GEMMs for FP8. Column-wise "
               "data is transpose of data'; 'Blackwell supports any GEMM layout for FP8'; TE user guide, "
               "performance considerations, 'Handling transposes' (row-wise and column-wise usages)",
    "saved_input": "TE pytorch/module/linear.py: the quantized input saved for the backward pass drops its "
                   "row-wise usage (inputmat.update_usage(rowwise_usage=False)): one column-wise copy is kept",
    "param_gather": "Megatron-Core --fp8-param-gather: parameters are stored in FP8 (TE fp8_model_init), the "
                    "distributed optimizer keeps the FP32 master copy, and the data-parallel parameter "
                    "all-gather moves 1 byte per parameter",
    "producer_fusion": "TE pytorch/csrc/extensions/normalization.cpp (layernorm_fwd / rmsnorm_fwd) and "
                       "activation.cpp: the norm or activation kernel writes the quantized output itself "
                       "(FULLY_FUSED) only for tensorwise delayed scaling and, for the activation, MXFP8; current "
                       "scaling and NVFP4 write BF16 with a fused amax, then quantize_with_amax casts it "
                       "(FUSED_NORM_AMAX_FP8 / _NVFP4, FUSED_ACTIVATION_AMAX_FP8 / _NVFP4); an MXFP8 norm writes "
                       "BF16 and is quantized by a kernel of its own (UNFUSED) unless NVTE_NORM_FWD_USE_CUDNN is set "
                       "(TE's default: unset)",
    "lm_head": "megatron/core/models/gpt/gpt_model.py: output_layer = tensor_parallel.ColumnParallelLinear "
               "(not a TE module), so the LM head GEMM runs in BF16 under fp8_autocast",
    # The gradient buffer's dtype is a trainer setting, not part of a recipe: NeMo's performance scripts
    # set it per script (docs/dev/fidelity.md), so it is a knob of its own.
    "grad_dtype": "NeMo scripts/llm/performance/llama3_8b.py (2024): plugins.grad_reduce_in_fp32 = False "
                  "for every compute dtype; from NeMo 2.3 (25.04) scripts/performance/utils.py "
                  "set_primary_perf_configs sets it False with compute_dtype fp8 for every script, the 405B "
                  "one included, and leaves bf16_mixed()'s grad_reduce_in_fp32=True for BF16",
}


@dataclass(frozen=True)
class Recipe:
    """One precision recipe (module docstring); byte counts per element of a quantized operand."""

    name: str
    gemm_format: str  # key of DeviceSpec.peak_flops the quantized GEMMs run at
    scaling: str  # "none" | "delayed" | "current" | "block"
    architectures: tuple[str, ...]  # GPU generations TE runs it on
    element_bytes: float  # bytes of one quantized value
    block: int  # values per scale; 0 = one scale per tensor
    scale_bytes: float  # bytes of one block scale (0 for tensorwise)
    amax_history: int  # delayed scaling: FP32 amax entries kept per quantized tensor
    extra_amax_pass: bool  # a separate read of the source for its amax before the cast
    bf16_layers_start: int  # transformer layers at the start the recipe keeps in BF16
    bf16_layers_end: int
    bf16_layers_fraction: float  # share of the remaining layers kept in BF16 (NVFP4's selective layers)
    param_gather: bool  # FP8 parameters (fp8_param_gather): no BF16 weight copy, 1-byte all-gather
    source: str
    gather_bf16: bool = False  # the quantized parameters are all-gathered as BF16 (MXFP8's grad-buffer reuse)
    tp_overlap: bool = True  # TP communication overlapped with the GEMMs (TE userbuffers) where TP > 1 with SP

    @property
    def quantized(self) -> bool:
        return self.scaling != "none"

    def copy_bytes(self) -> float:
        """Bytes per element of ONE quantized copy: the values plus their share of the block scales."""
        if not self.quantized:
            return BF16_BYTES
        return self.element_bytes + (self.scale_bytes / self.block if self.block else 0.0)

    def copies(self, arch: str) -> int:
        """Quantized copies of a tensor used in two layouts (weight: fprop + dgrad; input: fprop + wgrad)."""
        if not self.quantized:
            return 1
        if self.block:
            return 2  # scales run along the contraction dimension, which differs between the two uses
        return 2 if arch == "hopper" else 1

    def producer_fused(self, producer: str) -> bool:
        """Does the ``producer`` kernel ("norm" or "act") write its output quantized itself (SOURCES
        "producer_fusion")?  Only where the scale is known before the kernel runs and TE has the fused kernel:
        delayed scaling for both, MXFP8 (1-D blocks inside one row) for the activation."""
        if self.scaling == "delayed":
            return True
        return producer == "act" and self.scaling == "block" and not self.extra_amax_pass

    def producer_cast_bytes(self, producer: str, arch: str) -> float:
        """HBM bytes per element the quantized output of a norm or activation adds to its 16-bit write: the
        copies' bytes instead of the write when the producer is fused, else a cast kernel's read of the 16-bit
        output and its writes (the amax comes fused from the producer, so no extra pass)."""
        if not self.quantized:
            return 0.0
        written = self.copies(arch) * self.copy_bytes()
        return written - BF16_BYTES if self.producer_fused(producer) else BF16_BYTES + written

    def cast_bytes(self, arch: str) -> float:
        """HBM bytes a quantize kernel moves per source element (read BF16, write every copy + scales)."""
        if not self.quantized:
            return 0.0
        read = BF16_BYTES * (2 if self.extra_amax_pass else 1)
        return read + self.copies(arch) * self.copy_bytes()

    def weight_bytes(self, arch: str) -> float:
        """Bytes per parameter the model keeps for its weights, master copy excluded (that is optimizer state).

        FP8 parameters: the FP8 copies only.  Otherwise the BF16 weight plus TE's cached quantized copies
        (kept across micro-batches: it quantizes the weight on the first one only).
        """
        if not self.quantized:
            return BF16_BYTES
        cached = self.copies(arch) * self.copy_bytes()
        return cached if self.param_gather else BF16_BYTES + cached

    def saved_input_bytes(self) -> float:
        """Bytes per element of a GEMM input kept for the weight gradient (one column-wise copy)."""
        return self.copy_bytes()

    def param_allgather_bytes(self) -> float:
        """Bytes per parameter of the data-parallel parameter all-gather."""
        return self.element_bytes if self.param_gather and not self.gather_bf16 else BF16_BYTES

    def scaling_state_bytes(self, quantized_tensors: int) -> float:
        """FP32 scaling state of ``quantized_tensors`` tensorwise-scaled tensors: amax history + scale + 1/scale."""
        if self.scaling not in ("delayed", "current"):
            return 0.0
        return quantized_tensors * FP32_BYTES * (self.amax_history + 2)

    def quantized_layers(self, num_layers: int) -> int:
        """Transformer layers whose linear GEMMs run in the recipe's format."""
        if not self.quantized:
            return 0
        rest = max(num_layers - self.bf16_layers_start - self.bf16_layers_end, 0)
        return rest - round(self.bf16_layers_fraction * rest)

    def gemm_peak(self, device: DeviceSpec) -> float:
        """The tensor-core peak the quantized GEMMs run at (one-line error if the device has no such units)."""
        return device.peak(self.gemm_format)

    def check(self, device: DeviceSpec) -> None:
        """Refuse a recipe the device's generation cannot run (TE's own restriction), in one line."""
        arch = architecture(device.name)
        if arch not in self.architectures:
            runs = " or ".join(self.architectures)
            raise DnnplaceError(f"precision {self.name} runs on {runs} GPUs; {device.name} is {arch}")
        self.gemm_peak(device)


RECIPES: dict[str, Recipe] = {
    "bf16": Recipe("bf16", "bf16", "none", ("ampere", "hopper", "blackwell"), BF16_BYTES, 0, 0.0, 0, False,
                   0, 0, 0.0, False, "BF16 mixed precision (NeMo bf16_mixed)"),
    # Tensorwise delayed scaling as NeMo's FP8 recipes run it: FP8 parameters.
    "fp8": Recipe("fp8", "fp8", "delayed", ("hopper", "blackwell"), 1.0, 0, 0.0, 1024, False, 0, 0, 0.0, True,
                  SOURCES["delayed"]),
    "fp8-cs": Recipe("fp8-cs", "fp8", "current", ("hopper", "blackwell"), 1.0, 0, 0.0, 0, True, 1, 1, 0.0, True,
                     SOURCES["current"]),
    # Current scaling with every layer quantized, as Megatron-Bridge's performance recipes run "FP8".
    "fp8-cs-all": Recipe("fp8-cs-all", "fp8", "current", ("hopper", "blackwell"), 1.0, 0, 0.0, 0, True, 0, 0, 0.0,
                         True, SOURCES["fp8_cs_all"]),
    # MXFP8 parameters (two 1-byte copies + E8M0 scales, no BF16 copy), gathered as BF16 through the gradient buffer.
    "mxfp8": Recipe("mxfp8", "fp8", "block", ("blackwell",), 1.0, 32, 1.0, 0, False, 0, 0, 0.0, True,
                    SOURCES["mxfp8"] + "; " + SOURCES["mxfp8_param_gather"], gather_bf16=True),
    # NVFP4: the paper keeps about 16 % of the linear layers (the last ones) in BF16; the per-tensor amax
    # is a pass of its own.
    "nvfp4": Recipe("nvfp4", "fp4", "block", ("blackwell",), 0.5, 16, 1.0, 0, True, 0, 0, 0.16, False,
                    SOURCES["nvfp4"]),
    # Megatron-Bridge's NVFP4 performance recipe: every layer in NVFP4; BF16 parameters until #3364, FP4 since.
    "nvfp4-all": Recipe("nvfp4-all", "fp4", "block", ("blackwell",), 0.5, 16, 1.0, 0, True, 0, 0, 0.0, False,
                        SOURCES["nvfp4"] + "; " + SOURCES["nvfp4_all"] + "; " + SOURCES["nvfp4_no_tp_overlap"],
                        tp_overlap=False),
    "nvfp4-fp4p": Recipe("nvfp4-fp4p", "fp4", "block", ("blackwell",), 0.5, 16, 1.0, 0, True, 0, 0, 0.0, True,
                         SOURCES["nvfp4"] + "; " + SOURCES["nvfp4_all"] + "; " + SOURCES["nvfp4_fp4p"] + "; "
                         + SOURCES["nvfp4_no_tp_overlap"], tp_overlap=False),
}


def recipe(name: str) -> Recipe:
    """The recipe ``name``; one-line error naming the recipes otherwise."""
    try:
        return RECIPES[name.lower()]
    except (KeyError, AttributeError):
        raise DnnplaceError(f"precision must be one of {', '.join(RECIPES)}, got {name!r}") from None


def architecture(device_name: str) -> str:
    """GPU generation of a catalogue or system GPU name (one-line error when unknown)."""
    try:
        return ARCHITECTURES[device_name.lower()]
    except KeyError:
        raise DnnplaceError(f"device {device_name}: GPU generation unknown, no precision recipe can be "
                            "checked") from None


def cast_bytes_per_token(arch: TransformerArch, r: Recipe, gpu_arch: str, tp: Array,
                         sp_div: Array) -> tuple[Array, Array]:
    """HBM bytes per local token that one quantized layer's casts add (forward, backward).

    Forward: the norms and the MLP activation write their output quantized where TE fuses the cast into
    them (:meth:`Recipe.producer_fused`), which costs the copies' bytes instead of the 16-bit write they
    replace, and are otherwise cast by a kernel of their own after a 16-bit write (current scaling, NVFP4, the
    MXFP8 norms); the attention output entering the out projection is always cast by a kernel of its own.
    Backward: every output gradient entering a quantized GEMM is cast (and on Hopper transposed) by a kernel of its own:
    fc2's and the out projection's (hidden wide, sequence-parallel shards), fc1's (gated: 2 ffn) and QKV's.
    ``sp_div`` = tp with sequence parallelism, else 1.
    """
    if not r.quantized:
        zero = np.zeros_like(np.asarray(tp, dtype=float))
        return zero, zero
    h, f = arch.hidden, arch.ffn_hidden
    norm, act = r.producer_cast_bytes("norm", gpu_arch), r.producer_cast_bytes("act", gpu_arch)
    fwd = norm * 2.0 * h / sp_div + act * f / tp + r.cast_bytes(gpu_arch) * arch.q_width / tp
    grads = 2.0 * h / sp_div + (2 if arch.gated else 1) * f / tp + (arch.q_width + 2 * arch.kv_width) / tp
    return fwd, r.cast_bytes(gpu_arch) * grads


def saved_input_delta(arch: TransformerArch, r: Recipe, tokens: Array, tp: Array, sp_div: Array) -> Array:
    """Change of one quantized layer's activation bytes per micro-batch against the 16-bit count.

    TE saves the quantized QKV, fc1 and fc2 inputs (one column-wise copy) instead of the 16-bit ones,
    and keeps a quantized copy of the out projection's input beside the 16-bit output flash attention
    saves for its own backward.
    """
    if not r.quantized:
        return np.zeros_like(np.asarray(tokens, dtype=float))
    h, f = arch.hidden, arch.ffn_hidden
    replaced = 2.0 * h / sp_div + f / tp  # LN1 output, LN2 output, activation output
    return tokens * ((r.saved_input_bytes() - BF16_BYTES) * replaced + r.saved_input_bytes() * arch.q_width / tp)
