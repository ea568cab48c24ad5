"""The host side of an eager training step: what the CPU spends issuing the GPU's work (part of the catalogue).

An eager Megatron-Core step is issued op by op from Python: every op costs host time (the module call, the
dispatcher, the CUDA launch) whether or not its kernel is long.  The host runs ahead of the GPU while the
launch queue holds work, so that time is hidden unless the host is slower than the GPU between two points
where it must wait for the GPU (a synchronisation).  The figures here price that cost; the cost model
(``models/llm/evaluation/host.py``) counts the ops per module and applies them.  None is fitted to a step time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["HOST_OVERHEAD", "HostOverhead"]


@dataclass(frozen=True)
class HostOverhead:
    """Host seconds per eager op by host CPU, the extra cost of a Transformer Engine module, of a synchronising
    op and of a raw CUDA launch, and the ops each Megatron-Core module issues per forward (each with its
    source)."""

    # Host seconds of one eager PyTorch op that launches one kernel, by host CPU family.
    op_s: dict[str, float] = field(default_factory=lambda: {"x86": 13.48e-6, "grace": 37.08e-6})
    # A Transformer Engine module's forward costs this many plain ops (TE Linear / torch Linear, same host).
    te_module_ops: float = 99.66 / 37.08
    # The GPU idles this long more at a host synchronisation than between back-to-back launches.
    sync_s: float = 9.6e-6 - 3.8e-6
    # Host seconds per kernel launched from C++ in a loop (no Python): TE's grouped GEMM, one per local expert.
    launch_s: float = 3.8e-6
    # The backward dispatches this many times the forward's ops.
    backward_ops: float = 2.0
    # Ops per forward of each Megatron-Core module (plain ops, TE module calls), at the fused paths the
    # performance recipes set (moe_permute_fusion, moe_router_fusion, TE fused attention and norm-linear).
    module_ops: dict[str, tuple[int, int]] = field(default_factory=lambda: {
        "attn": (8, 3), "mlp": (2, 2), "moe_router": (10, 0), "moe_preprocess": (21, 0),
        "moe_dispatch": (5, 0), "experts": (4, 2), "moe_combine": (6, 0), "shared_experts": (2, 2)})
    sources: dict[str, str] = field(default_factory=lambda: {
        "op_s": "NVIDIA/TransformerEngine issue #2053 (2025-08-11, 'High CPU overhead on Grace systems'): CPU "
                "runtime of one torch.nn.Linear forward (BF16, hidden 2048, 8192 tokens) 13.48 us on an H100 DGX "
                "(Xeon Platinum 8480C), 37.08 us on GB200 (33.17 us on GH200). x86 is applied to every x86-hosted "
                "system (DGX H100 / H200 / B200 / B300: ASSUMPTION, their Xeons of the same class), grace to "
                "GB200 / GB300. Consistent with the ~7-8 us per eager pointwise op measured on A100 hosts "
                "(flagos-ai/Torch-FL PR #27: add[512^2] submitted back to back, 8 us/op; flagos-ai/FlagGems "
                "issue #4812: ~7 us per eager call)",
        "te_module_ops": "TE issue #2053, same table: te.Linear forward 99.66 us against torch.nn.Linear 37.08 us "
                         "on GB200 (90.53 / 33.17 on GH200): a TE module's Python (FP8 meta, workspace and "
                         "autocast bookkeeping) costs 2.7 plain ops; ASSUMPTION: the same ratio on x86 hosts",
        "sync_s": "NVIDIA Technical Blog, 'Getting Started with CUDA Graphs' (A. Gray, 2019): a 2.9 us kernel "
                  "launched back to back takes 3.8 us per kernel, 9.6 us with a cudaStreamSynchronize after "
                  "each: a synchronisation leaves the GPU idle 5.8 us more",
        "launch_s": "the same blog: 3.8 us per back-to-back stream launch (at most the host's launch cost, the "
                    "2.9 us kernel being shorter); TE's grouped linear launches one cuBLAS GEMM per local expert "
                    "from C++ (common/gemm/cublaslt_gemm.cu multi_stream_cublas_gemm)",
        "backward_ops": "ASSUMPTION from the modules' autograd: each linear's backward launches its data- and "
                        "weight-gradient GEMMs (TE linear.py _Linear.backward), each fused elementwise op one "
                        "backward kernel, the all-to-alls one each; the backward's ops are counted as twice "
                        "the forward's",
        "module_ops": "counted in megatron-core 0.16.1 (a reading of the code, rounded; not a measurement): attn "
                      "= transformer_layer._forward_attention + attention.SelfAttention.forward (TE "
                      "LayerNormLinear qkv, DotProductAttention, RowParallelLinear proj: 3 TE calls; split / view, "
                      "q/k norm, fused RoPE q and k, bias-dropout-add: 8 ops); mlp = fc1 LayerNormLinear + fc2 "
                      "(2 TE), fused bias-SwiGLU and bias-dropout-add (2); moe_router = router.TopKRouter.forward "
                      "(gating GEMM and cast, random logits under force balancing, fused top-k with score "
                      "function, aux-loss scores, loss and its autoscaler, expert-bias bookkeeping, views: 10); "
                      "moe_preprocess = MoEAlltoAllTokenDispatcher.preprocess (counts sum / reshape / all-gather "
                      "over tp x ep / transpose / slice / sums: 14) + the DtoH copies of the split sizes and "
                      "their event (4) + dispatch_preprocess's fused permute (3); moe_dispatch = token_dispatch "
                      "+ dispatch_postprocess (all-to-all and its output, sort_chunks_by_idxs, counts: 5); "
                      "experts = TEGroupedMLP.forward (2 GroupedLinear calls, activation with probs, split / "
                      "cat: 4 ops); moe_combine = combine_preprocess / token_combine / combine_postprocess "
                      "(unsort, all-to-all, fused unpermute, reshape, add: 6); shared_experts as mlp",
    }, compare=False)

    def op_seconds(self, device: str) -> float:
        """Host seconds of one eager op on the host CPU of ``device`` (Grace on the GB systems)."""
        return self.op_s["grace" if device.startswith("gb") or device.startswith("gh") else "x86"]


#: The host figures every LLM plan is priced with.
HOST_OVERHEAD = HostOverhead()
