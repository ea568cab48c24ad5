"""Precision recipes: byte counts against Transformer Engine's and NeMo's documented layouts."""

from __future__ import annotations

import numpy as np
import pytest
from llm_helpers import llama, uniform

from dnnplace.core.catalogue import CATALOGUE
from dnnplace.core.systems import system_device, system_spec
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.evaluation.memory import embedding_params, head_params, layer_params
from dnnplace.models.llm.evaluation.precision import (
    HIGH_PRECISION_OPS,
    RECIPES,
    cast_bytes_per_token,
    recipe,
    saved_input_delta,
)
from dnnplace.models.llm.spec import LLMProblem


def test_bf16_keeps_today_s_byte_counts() -> None:
    r = recipe("bf16")
    assert (r.weight_bytes("hopper"), r.cast_bytes("hopper"), r.quantized_layers(80)) == (2, 0, 0)
    assert r.param_allgather_bytes() == 2 and r.saved_input_bytes() == 2


def test_fp8_parameters_on_hopper_are_fp8_value_and_transpose() -> None:
    # fp8_param_gather: no BF16 copy; Hopper's TN-only FP8 GEMMs need the transpose for dgrad.
    r = recipe("fp8")
    assert r.weight_bytes("hopper") == 2.0
    assert r.weight_bytes("blackwell") == 1.0  # any layout: one copy
    assert r.param_allgather_bytes() == 1.0
    assert r.saved_input_bytes() == 1.0


def test_cast_bytes_per_element() -> None:
    assert recipe("fp8").cast_bytes("hopper") == 2 + 1 + 1  # read bf16, write value + transpose
    assert recipe("fp8").cast_bytes("blackwell") == 2 + 1
    assert recipe("fp8-cs").cast_bytes("hopper") == 2 + 2 + 1 + 1  # the amax pass reads once more
    assert recipe("mxfp8").cast_bytes("blackwell") == 2 + 2 * (1 + 1 / 32)  # row- and column-wise + E8M0
    assert recipe("nvfp4").cast_bytes("blackwell") == 2 + 2 + 2 * (0.5 + 1 / 16)  # + global amax pass


def test_block_scaled_weights_keep_bf16_and_two_copies() -> None:
    assert recipe("mxfp8").weight_bytes("blackwell") == 2 * 1.03125  # MXFP8 parameters, no BF16 copy
    assert recipe("nvfp4").weight_bytes("blackwell") == 2 + 2 * 0.5625
    assert recipe("mxfp8").param_allgather_bytes() == 2.0  # gathered as BF16 into the gradient buffer


def test_delayed_scaling_state_is_the_amax_history() -> None:
    # 3 quantized tensors per GEMM (input, weight, grad), 1024 fp32 amax entries + scale + scale_inv each
    assert recipe("fp8").scaling_state_bytes(3) == 3 * 4 * 1026
    assert recipe("fp8-cs").scaling_state_bytes(3) == 3 * 4 * 2
    assert recipe("mxfp8").scaling_state_bytes(3) == 0


def test_layers_kept_in_bf16() -> None:
    assert recipe("fp8").quantized_layers(32) == 32
    assert recipe("fp8-cs").quantized_layers(32) == 30  # first and last layer in BF16
    assert recipe("nvfp4").quantized_layers(32) == 27  # about 16 % kept in BF16
    assert recipe("fp8-cs").quantized_layers(1) == 0


def test_peaks_and_architectures() -> None:
    h100, b200 = CATALOGUE["h100"], system_device(system_spec("dgx-b200"))
    assert recipe("fp8").gemm_peak(h100) == 1979e12
    assert recipe("nvfp4").gemm_peak(b200) == 9e15
    recipe("fp8-cs").check(h100)
    recipe("mxfp8").check(b200)
    with pytest.raises(DnnplaceError, match="mxfp8 runs on blackwell GPUs; h100 is hopper"):
        recipe("mxfp8").check(h100)
    with pytest.raises(DnnplaceError, match="no fp4 tensor cores"):
        recipe("nvfp4").gemm_peak(CATALOGUE["h100"])
    with pytest.raises(DnnplaceError, match="fp8 runs on hopper or blackwell"):
        recipe("fp8").check(CATALOGUE["a100"])


def test_unknown_recipe_and_sixteen_bit_operators() -> None:
    with pytest.raises(DnnplaceError, match="precision must be one of bf16, fp8, fp8-cs, fp8-cs-all, mxfp8, nvfp4, "
                                               "nvfp4-all, nvfp4-fp4p"):
        recipe("fp16")
    assert {"attention core", "LM head", "MoE router", "norms"} <= set(HIGH_PRECISION_OPS)
    assert all(r.source for r in RECIPES.values())


def test_saved_input_delta_of_an_8b_layer() -> None:
    # 4096 tokens, TP 1: LN1 out and LN2 out (4096 wide) and SwiGLU out (14336) saved at 1 byte, not 2;
    # plus a 1-byte copy of the out projection's 4096-wide input: -75.5 MB (docs/dev/fidelity.md).
    a = llama("8b")
    one = np.array([1.0])
    got = float(saved_input_delta(a, recipe("fp8"), np.array([4096.0]), one, one)[0])
    assert got == 4096 * (-(4096 + 4096 + 14336) + 4096)
    assert float(saved_input_delta(a, recipe("bf16"), np.array([4096.0]), one, one)[0]) == 0.0


def test_cast_bytes_of_an_8b_layer_on_hopper() -> None:
    a, one = llama("8b"), np.array([1.0])
    fwd, bwd = cast_bytes_per_token(a, recipe("fp8"), "hopper", one, one)
    assert float(fwd[0]) == 0 * (2 * 4096 + 14336) + 4 * 4096  # fused casts write 2 x 1 byte for 2
    assert float(bwd[0]) == 4 * (2 * 4096 + 2 * 14336 + 4096 + 2 * 1024)  # 43,008 gradients x 4 bytes
    # MXFP8: the SwiGLU writes both copies itself; the two norms write BF16 and a cast reads it back.
    fwd_mx, _ = cast_bytes_per_token(a, recipe("mxfp8"), "blackwell", one, one)
    assert float(fwd_mx[0]) == pytest.approx((2 + 2.0625) * 2 * 4096 + (2.0625 - 2) * 14336 + 4.0625 * 4096)


def test_current_scaling_casts_after_its_producers() -> None:
    # TE's FUSED_NORM_AMAX_FP8 / FUSED_ACTIVATION_AMAX_FP8: BF16 write + amax, then a cast reads 2 bytes and writes
    # the copies (Hopper 2, Blackwell 1); the out projection's input cast reads twice (amax pass) and writes.
    a, one = llama("8b"), np.array([1.0])
    fwd_h, _ = cast_bytes_per_token(a, recipe("fp8-cs-all"), "hopper", one, one)
    assert float(fwd_h[0]) == (2 + 2) * (2 * 4096 + 14336) + (2 + 2 + 2) * 4096
    fwd_b, _ = cast_bytes_per_token(a, recipe("fp8-cs-all"), "blackwell", one, one)
    assert float(fwd_b[0]) == (2 + 1) * (2 * 4096 + 14336) + (2 + 2 + 1) * 4096
    nv = recipe("nvfp4")
    assert not nv.producer_fused("norm") and not nv.producer_fused("act")
    assert recipe("mxfp8").producer_fused("act") and not recipe("mxfp8").producer_fused("norm")
    assert recipe("fp8").producer_fused("norm") and recipe("fp8").producer_fused("act")


# --- the recipes in the cost model -------------------------------------------------------------------------------

def _fp8_problem(size: str, gpus: int, gbs: int, prec: str, device: str = "h100") -> LLMProblem:
    from dnnplace.models.llm.spec import Cluster, TrainingJob

    dev = CATALOGUE[device] if device in CATALOGUE else system_device(system_spec(device))
    return LLMProblem(llama(size), Cluster(dev.name, gpus, 8), TrainingJob(8192, gbs, prec), dev)


def test_model_level_recipe_table_agrees() -> None:
    from dnnplace.models.llm.rules import PRECISION_RECIPES

    assert set(PRECISION_RECIPES) == set(RECIPES)
    for name, (fmt, gens) in PRECISION_RECIPES.items():
        assert (RECIPES[name].gemm_format, RECIPES[name].architectures) == (fmt, gens)


def test_published_fp8_8b_run_fits_and_70b_unsharded_does_not() -> None:
    # NVIDIA ran Llama 3.1 8B FP8 with TP1 PP1 CP2 on 8 H100s: FP8 parameters (value + transpose, 2 bytes)
    # and FP8-saved GEMM inputs bring it under 85.5 GB (docs/dev/fidelity.md).
    pr = _fp8_problem("8b", 8, 128, "fp8")
    est = evaluate(pr, uniform(pr.arch, 8, 1, 1, 2))
    assert est.fits, est.memory_per_gpu_bytes
    layers = pr.arch.num_layers * float(layer_params(pr.arch, np.array([1.0]))[0])
    one = np.array([1.0])
    extras = float(np.sum(embedding_params(pr.arch, one))) + float(np.sum(head_params(pr.arch, one, one)))
    assert est.memory_breakdown["weights"] == pytest.approx(2.0 * layers + 2.0 * extras)
    big = _fp8_problem("70b", 8, 128, "fp8")
    assert not evaluate(big, uniform(big.arch, 8, 1, 1, 1)).fits


def test_lm_head_stays_bf16_and_casts_cost_time() -> None:
    from dnnplace.models.llm.evaluation.step import Candidates, stage_costs

    bf, f8 = _fp8_problem("8b", 8, 128, "bf16"), _fp8_problem("8b", 8, 128, "fp8")
    c = Candidates.of([uniform(bf.arch, 8, 1, 1, 2)])
    head_bf, head_f8 = stage_costs(bf, c).last["compute"], stage_costs(f8, c).last["compute"]
    assert float(head_bf[0][0]) == float(head_f8[0][0]) and float(head_bf[1][0]) == float(head_f8[1][0])
    layer_bf, layer_f8 = stage_costs(bf, c).layer["compute"], stage_costs(f8, c).layer["compute"]
    assert float(layer_f8[0][0]) < float(layer_bf[0][0])  # FP8 GEMMs, even with the casts


def test_block_recipes_need_blackwell() -> None:
    pr = _fp8_problem("8b", 8, 128, "mxfp8")
    with pytest.raises(DnnplaceError, match="precision mxfp8 runs on blackwell GPUs; h100 is hopper"):
        evaluate(pr, uniform(pr.arch, 8, 1, 1, 2))
    b = _fp8_problem("8b", 8, 128, "nvfp4", "dgx-b200")
    est = evaluate(b, uniform(b.arch, 8, 1, 1, 2))
    assert est.step_time_s < evaluate(_fp8_problem("8b", 8, 128, "mxfp8", "dgx-b200"),
                                      uniform(b.arch, 8, 1, 1, 2)).step_time_s


def test_exports_refuse_recipes_they_do_not_write_and_fp8_gathers_fp8_parameters() -> None:
    from dnnplace.models.llm.exporters import export
    from dnnplace.models.llm.solvers import search

    b = _fp8_problem("8b", 8, 128, "mxfp8", "dgx-b200")
    plan = search(b, {"tp": 1, "pp": 1, "cp": 2, "mbs": 1, "recompute": "none"})
    for target in ("megatron", "torchtitan", "deepspeed"):
        with pytest.raises(DnnplaceError, match="precision mxfp8 is priced but not yet written"):
            export(plan, target)
    h = _fp8_problem("8b", 8, 128, "fp8")
    text = export(search(h, {"tp": 1, "pp": 1, "cp": 2, "mbs": 1, "recompute": "none"}), "megatron")
    assert "--fp8-param-gather" in text


def test_fp8_cs_all_quantizes_every_layer() -> None:
    # Megatron-Bridge's performance recipes: current scaling with first_last_layers_bf16 = False.
    r = recipe("fp8-cs-all")
    assert r.quantized_layers(32) == 32 and recipe("fp8-cs").quantized_layers(32) == 30
    assert r.cast_bytes("hopper") == recipe("fp8-cs").cast_bytes("hopper") == 6
    assert r.weight_bytes("blackwell") == 1.0 and r.param_allgather_bytes() == 1.0


def test_mxfp8_weights_hand_computed() -> None:
    # Llama 3.1 70B, TP1 PP4 VP5 on GB300: 20 layers per rank, MXFP8 parameters 2 x (1 + 1/32) bytes each
    # (norms counted with the layer, as the model does), the embedding / LM head in BF16.
    from llm_helpers import llama

    from dnnplace.core.systems import system_device, system_spec
    from dnnplace.models.llm.evaluation import evaluate
    from dnnplace.models.llm.spec import Cluster, LLMProblem, ParallelConfig, TrainingJob

    arch = llama("70b")
    dev = system_device(system_spec("gb300-nvl72"))
    pr = LLMProblem(arch, Cluster(dev.name, 64, 64), TrainingJob(8192, 256, "mxfp8"), dev)
    est = evaluate(pr, ParallelConfig(1, 4, 5, 1, 16, 1, "none", False, True, (4,) * 20, grad_dtype="bf16"))
    layer = 8192 * (8192 + 2 * 1024) + 8192 * 8192 + 3 * 8192 * 28672 + 2 * 8192  # 855,654,400
    first = 20 * layer * 2.0625 + 2 * 128256 * 8192
    last = 20 * layer * 2.0625 + 2 * (128256 * 8192 + 8192)
    assert est.memory_breakdown["weights"] in (pytest.approx(first), pytest.approx(last))


def test_bridge_nvfp4_recipes_quantize_every_layer() -> None:
    assert recipe("nvfp4-all").quantized_layers(80) == recipe("nvfp4-fp4p").quantized_layers(80) == 80
    assert recipe("nvfp4-all").weight_bytes("blackwell") == 2 + 2 * 0.5625  # BF16 weight + row/column copies
    assert recipe("nvfp4-fp4p").weight_bytes("blackwell") == 2 * 0.5625  # FP4 parameters, no BF16 copy
    assert recipe("nvfp4-all").param_allgather_bytes() == 2.0 and recipe("nvfp4-fp4p").param_allgather_bytes() == 0.5


def test_bridge_nvfp4_runs_tp_collectives_blocking() -> None:
    # Megatron-Bridge turns tp_comm_overlap off for NVFP4: Llama 3.1 8B, TP2 on 8 GB200s (one NVLink domain),
    # 4096-token micro-batches: each SP all-gather / reduce-scatter of a 2 x 4096 x 4096-byte activation is
    # (1/2) x 33.55 MB / (900 GB/s x 0.8) + 5 us, and a step runs 8 per layer (4 each way) on 32 layers plus
    # one each way at the embedding and the LM head, for each of the 128 / (4 x 1) = 32 micro-batches.
    from dnnplace.models.llm.spec import Cluster, TrainingJob

    dev = system_device(system_spec("gb200-nvl72"))
    pr = LLMProblem(llama("8b"), Cluster(dev.name, 8, 8), TrainingJob(4096, 128, "nvfp4-all"), dev)
    est = evaluate(pr, uniform(pr.arch, 8, 2, 1, 1))
    coll = 0.5 * 2 * 4096 * 4096 / (900e9 * 0.8) + 5e-6
    assert est.time_breakdown["tp_comm_exposed"] == pytest.approx(32 * (32 * 8 + 4) * coll)
    overlapped = evaluate(LLMProblem(pr.arch, pr.cluster, TrainingJob(4096, 128, "nvfp4"), dev),
                          uniform(pr.arch, 8, 2, 1, 1))
    assert overlapped.time_breakdown["tp_comm_exposed"] < est.time_breakdown["tp_comm_exposed"]
