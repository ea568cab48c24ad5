"""The catalogue's mixture-of-experts and special-attention figures: DeepEP and HybridEP bandwidths, and the
cuDNN rates of sliding-window and MLA attention, each with its source.

Part of THE catalogue (``core/catalogue.py`` re-exports every name here; import from there): split out only
for size, these are the figures the MoE cost terms (``models/llm/evaluation/moe*.py``) and the windowed /
MLA attention price with, chosen from their sources before any comparison with training measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DEEPEP", "HYBRIDEP_NVLINK", "MLA_ATTENTION", "SLIDING_WINDOW_ATTENTION", "DeepEPFigures",
           "FlexNVLinkTable", "MLAAttentionTable", "WindowAttentionTable"]

GB = 1e9


def _tested_at(tested: list[int], x: float) -> int:
    """The largest of the ascending ``tested`` sizes not above ``x`` (the smallest when all are above): how every
    measured table here is read between and beyond its tested points, never interpolated."""
    best = tested[0]
    for n in tested:
        if n <= x:
            best = n
    return best


@dataclass(frozen=True)
class DeepEPFigures:
    """DeepEP's published normal-kernel (training) bandwidths: what Megatron's ``flex`` dispatcher reaches.

    Measured on H800 (~160 GB/s NVLink achievable) with one 400 Gb/s CX7 NIC (~50 GB/s) per GPU, DeepSeek-V3's
    setting (4096 tokens, hidden 7168, top-8 of 256 experts, top-4 groups = nodes).  The bandwidths are
    *logical*: DeepEP's test divides (tokens x distinct destination nodes, its own node included) x hidden x
    bytes by the kernel time, so :func:`~dnnplace.models.llm.evaluation.moe.flex_dispatch_time` prices the same
    logical bytes at them.  Kept as fractions of those maxima (NVLink: of the device's achievable NCCL NVLink
    bandwidth; RDMA: of its NIC line rate) so they apply to any device of the catalogue.
    """

    nvlink: tuple[float, float] = (153 / 160, 158 / 160)  # (dispatch, combine), intranode EP 8
    #: SMs the dispatch / combine kernels occupy while they run (beside any overlapped compute)
    sms: int = 20
    #: (nodes of the EP group, (dispatch, combine)) for the internode kernels; EP 16 / 32 / 64 at 8 GPUs a node
    rdma: tuple[tuple[int, tuple[float, float]], ...] = ((2, (43 / 50, 43 / 50)), (4, (58 / 50, 57 / 50)),
                                                         (8, (51 / 50, 50 / 50)))
    sources: dict[str, str] = field(default_factory=lambda: {
        "nvlink": "DeepEP README (docs/legacy.md, 'Normal kernels with NVLink and RDMA forwarding'): intranode "
                  "EP 8 dispatch 153 GB/s, combine 158 GB/s of ~160 GB/s NVLink on H800",
        "rdma": "same table: internode EP 16 43 / 43 GB/s, EP 32 58 / 57 GB/s, EP 64 51 / 50 GB/s (dispatch / "
                "combine, RDMA bottleneck bandwidth) of a ~50 GB/s CX7 400 Gb/s NIC; 'logical' per DeepEP "
                "tests/test_internode.py (num_rdma_token_sent counts the source node too)",
        "sms": "Megatron-Core moe/token_dispatcher.py (_DeepepManager): set_deepep_num_sms(20) when "
               "moe_flex_dispatcher_num_sms is unset ('DeepEP's historical mcore default'); DeepEP's kernels are "
               "persistent, one per SM (DeepEP README: Buffer.set_num_sms)",
    }, compare=False)

    def rdma_fraction(self, nodes: int) -> tuple[float, float]:
        """The published figure of the largest tested node count not above ``nodes`` (the smallest one below it)."""
        return dict(self.rdma)[_tested_at([n for n, _ in self.rdma], nodes)]


#: DeepEP's normal kernels (the ``flex`` token dispatcher of Megatron-Core), the same for every model.
DEEPEP = DeepEPFigures()


@dataclass(frozen=True)
class WindowAttentionTable:
    """Measured fused sliding-window attention throughput of one device: BF16, causal within a window of
    ``window`` keys, head dim ``head_dim``, by pass and sequence length, in *useful* FLOP/s (the window's keys
    only: 4 x batch x heads x seq x mean keys x head dim forward, 2.5 x that backward, as the benchmark counts
    them).  Kept apart from :class:`AttentionTable` (head dim 128, whole causal sequence) because a short window
    runs a few tiles per query block, far below the long-sequence rates."""

    window: int
    head_dim: int
    rates: dict[str, dict[int, float]]  # "fwd" / "bwd" -> seq -> FLOP/s
    source: str

    def rate(self, pass_: str, seq: int) -> float:
        """The figure of the largest tested sequence not above ``seq`` (the smallest one below them)."""
        table = self.rates[pass_]
        return table[_tested_at(sorted(table), seq)]


_CUDNN_SWA = ("NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/gpt_oss/{gpu}/{csv} (config "
              "gpt_oss: cuDNN backend, bfloat16, mask top_left, sliding_window_size 128, head dim 64, batch 2, 128 "
              "heads; non-deterministic backward, TE's default), cudnn-frontend 1.21.1 / cuDNN 9.22")
_TF = 1e12
#: GPT-OSS-style sliding-window attention (window 128, head dim 64) as cuDNN runs it; B200 / B300 take the
#: GB200 / GB300 measurement (ASSUMPTION: the same GPU die).  No Hopper measurement at this window.
SLIDING_WINDOW_ATTENTION: dict[str, WindowAttentionTable] = {
    "gb200": WindowAttentionTable(128, 64, {
        "fwd": {2048: 153 * _TF, 4096: 161 * _TF, 8192: 165 * _TF, 16384: 167 * _TF, 32768: 104 * _TF},
        "bwd": {2048: 176 * _TF, 4096: 182 * _TF, 8192: 187 * _TF, 16384: 188 * _TF, 32768: 186 * _TF}},
        _CUDNN_SWA.format(gpu="gb200", csv="gpt_oss_20260424_100011.csv")),
    "gb300": WindowAttentionTable(128, 64, {
        "fwd": {2048: 160 * _TF, 4096: 167 * _TF, 8192: 172 * _TF, 16384: 173 * _TF, 32768: 108 * _TF},
        "bwd": {2048: 184 * _TF, 4096: 191 * _TF, 8192: 198 * _TF, 16384: 200 * _TF, 32768: 199 * _TF}},
        _CUDNN_SWA.format(gpu="gb300", csv="gpt_oss_20260424_100022.csv")),
}
SLIDING_WINDOW_ATTENTION["b200"] = SLIDING_WINDOW_ATTENTION["gb200"]
SLIDING_WINDOW_ATTENTION["b300"] = SLIDING_WINDOW_ATTENTION["gb300"]


@dataclass(frozen=True)
class FlexNVLinkTable:
    """Measured flex-dispatcher (HybridEP) bandwidth inside one NVLink domain of a device, by EP ranks.

    *Logical* bytes per second, dispatch and combine: HybridEP's ``tests/test_hybrid_ep.py`` divides the rows a
    rank receives (one per token and destination rank, its own rank's included) x hidden x 2 bytes (BF16) by the
    time through the Torch API (what Megatron-Core's flex dispatcher calls).  Kept apart from :class:`DeepEPFigures`
    (DeepEP's H800 figures, fractions of a device's NVLink) because these are absolute measurements of one device.
    """

    figures: tuple[tuple[int, tuple[float, float]], ...]  # (EP ranks, (dispatch, combine) bytes/s)
    source: str
    #: SMs the kernels hold while they run, beside any overlapped compute: the recipes' setting, Megatron-Bridge
    #: ``perf_recipes/_common.py`` / ``scripts/performance/utils/overrides.py`` ``moe_hybridep_num_sms = 32``
    #: whenever the flex backend is hybridep
    sms: int = 32

    def at(self, ranks: float) -> tuple[float, float]:
        """The figure of the largest tested rank count not above ``ranks`` (the smallest one below them)."""
        return dict(self.figures)[_tested_at([n for n, _ in self.figures], ranks)]


_HYBRIDEP = ("DeepEP hybrid-ep branch docs/README_Hybrid-EP.md, 'Performance Results', {gpu}: 4096 tokens, hidden "
             "7168, top-8, random uniform router, 8 local experts, BF16 dispatch and combine through the Torch API, "
             "{sms} SMs; bytes as tests/test_hybrid_ep.py counts them (dispatched rows x hidden x 2)")
#: HybridEP inside one NVLink domain, the flex backend Megatron-Bridge's Blackwell recipes run.  GB200: 32 SMs
#: (the recipes' ``moe_hybridep_num_sms = 32``, Megatron-Bridge ``scripts/performance/utils/overrides.py``);
#: B200: the one HybridEP row published, 16 SMs at 8 ranks (on GB200 16 and 32 SMs differ by under 6 % at 8
#: ranks).  B300 / GB300 take the B200 / GB200 figures (ASSUMPTION: the same NVLink 5 at 1.8 TB/s a GPU; no
#: measurement published).
HYBRIDEP_NVLINK: dict[str, FlexNVLinkTable] = {
    "gb200": FlexNVLinkTable(((8, (545.71e9, 568.94e9)), (16, (523.48e9, 521.55e9)), (24, (507.32e9, 483.76e9)),
                              (32, (484.22e9, 464.54e9)), (36, (479.02e9, 447.89e9))),
                             _HYBRIDEP.format(gpu="GB200 Platform", sms=32)),
    "b200": FlexNVLinkTable(((8, (535.94e9, 530.86e9)),), _HYBRIDEP.format(gpu="B200 Platform", sms=16)),
}
HYBRIDEP_NVLINK["gb300"] = HYBRIDEP_NVLINK["gb200"]
HYBRIDEP_NVLINK["b300"] = HYBRIDEP_NVLINK["b200"]


@dataclass(frozen=True)
class MLAAttentionTable:
    """Measured fused attention throughput of one device at multi-latent attention's shape (DeepSeek-V3: 128 heads,
    query-key head dim 192, value head dim 128), BF16, causal, by pass and sequence length, in the benchmark's
    FLOP/s: forward 2 x unmasked scores x (qk + v) per head, backward 2 x unmasked scores x (3 qk + 2 v).  Kept apart
    from :class:`AttentionTable` (head dim 128 for both) because the asymmetric head dims run at their own rates."""

    head_dim_qk: int
    head_dim_v: int
    rates: dict[str, dict[int, float]]  # "fwd" / "bwd" -> seq -> FLOP/s
    source: str

    def rate(self, pass_: str, seq: int) -> float:
        """The figure of the largest tested sequence not above ``seq`` (the smallest one below them)."""
        table = self.rates[pass_]
        return table[_tested_at(sorted(table), seq)]


_CUDNN_DSV3 = ("NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/{path} (config dsv3: cuDNN backend, "
               "bfloat16, mask top_left, 128 heads, head dims 192 / 128, batch {batch}; backward {bwd})")
#: MLA's attention core as cuDNN runs it.  GB200 / GB300: cudnn-frontend 1.21.1 / cuDNN 9.22, non-deterministic
#: backward (TE's default).  H100 takes the H200 measurement (cuDNN 9.19, which has the deterministic backward only),
#: as the catalogue's H100 attention fractions do (the same GH100 die and peak).  B200 / B300 keep their catalogue
#: fractions: their peaks differ from GB200 / GB300's (2.25 against 2.5 PFLOP/s BF16), so the rates do not carry over.
MLA_ATTENTION: dict[str, MLAAttentionTable] = {
    "gb200": MLAAttentionTable(192, 128, {
        "fwd": {2048: 1072 * _TF, 4096: 1406 * _TF, 8192: 1585 * _TF, 16384: 1678 * _TF, 32768: 1743 * _TF},
        "bwd": {2048: 846 * _TF, 4096: 1057 * _TF, 8192: 1193 * _TF, 16384: 1134 * _TF, 32768: 1076 * _TF}},
        _CUDNN_DSV3.format(path="dsv3/gb200/dsv3_20260424_101009.csv", batch=2, bwd="non-deterministic")),
    "gb300": MLAAttentionTable(192, 128, {
        "fwd": {2048: 1285 * _TF, 4096: 1590 * _TF, 8192: 1825 * _TF, 16384: 1967 * _TF, 32768: 1991 * _TF},
        "bwd": {2048: 914 * _TF, 4096: 1143 * _TF, 8192: 1291 * _TF, 16384: 1302 * _TF, 32768: 1289 * _TF}},
        _CUDNN_DSV3.format(path="dsv3/gb300/dsv3_20260424_101002.csv", batch=2, bwd="non-deterministic")),
    "h100": MLAAttentionTable(192, 128, {
        "fwd": {2048: 522 * _TF, 4096: 599 * _TF, 8192: 643 * _TF},
        "bwd": {2048: 352 * _TF, 4096: 404 * _TF, 8192: 442 * _TF}},
        _CUDNN_DSV3.format(path="h200_919_only_cudnn/dsv3_20260227_034744.csv (H200)", batch=1,
                           bwd="deterministic, the only one measured")),
}
MLA_ATTENTION["h200"] = MLA_ATTENTION["h100"]
