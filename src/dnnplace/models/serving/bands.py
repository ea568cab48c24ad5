"""The error band a serving prediction carries, and why it is wider than its kernel sources' where it is.

Why a module of its own: a band is a claim about the whole prediction that published runs, not the kernel
tables, decide -- llama.cpp's forward rates for its GGUF kernels, vLLM's runs of an MXFP4 mixture of experts
before Blackwell -- so the rule and the sentence that explains it live together, read by the evaluator, the
simulation, the plan file and the report alike.
"""

from __future__ import annotations

from dnnplace.models.serving.catalogue import COMPUTE_CAPABILITY, GGUF_NAMES, LLAMA_CPP_GGUF_BAND, VLLM_MXFP4_BAND
from dnnplace.models.serving.cost import band_of
from dnnplace.models.serving.spec import ServingProblem

__all__ = ["band_note", "prediction_band"]


def prediction_band(p: ServingProblem, sources: dict[str, int]) -> float:
    """The relative error band of a prediction for ``p``: its kernel sources' (:func:`~.cost.band_of`), widened to
    what published runs show where they miss by more: llama.cpp's forward rates for its GGUF-quantized kernels,
    which the roofline prices fast at a few tokens a forward (:data:`~.catalogue.LLAMA_CPP_GGUF_BAND`), and vLLM's
    runs of an MXFP4 mixture-of-experts checkpoint before Blackwell (:data:`~.catalogue.VLLM_MXFP4_BAND`)."""
    band = band_of(sources)
    if _gguf_on_llama_cpp(p):
        band = max(band, LLAMA_CPP_GGUF_BAND)
    if _mxfp4_on_vllm_before_blackwell(p):
        band = max(band, VLLM_MXFP4_BAND)
    return band


def _gguf_on_llama_cpp(p: ServingProblem) -> bool:
    return p.engine.name == "llama.cpp" and p.model.precision in GGUF_NAMES


def _mxfp4_on_vllm_before_blackwell(p: ServingProblem) -> bool:
    return p.engine.name == "vllm" and p.model.moe_dtype == "mxfp4" and \
        any(COMPUTE_CAPABILITY.get(g.name, 0.0) < 10.0 for g in p.fleet.gpus)


def band_note(p: ServingProblem) -> str:
    """Why :func:`prediction_band` is wider than the kernel sources' (empty where it is not)."""
    notes = []
    if _gguf_on_llama_cpp(p):
        notes.append(f"llama.cpp's GGUF kernels: published forward rates up to "
                     f"{1.0 / (1.0 - LLAMA_CPP_GGUF_BAND):.1f}x below the roofline at a few tokens a forward "
                     "(benchmarks/results/llamacpp_ubatch.md)")
    if _mxfp4_on_vllm_before_blackwell(p):
        notes.append(f"vLLM on an MXFP4 mixture of experts before Blackwell: published GPT-OSS runs on A100 and H100 "
                     f"up to {1.0 / (1.0 - VLLM_MXFP4_BAND):.1f}x slower than priced "
                     "(benchmarks/results/serving_gpustack.md)")
    return "; ".join(notes)
