"""Kernel seconds for one device: the measured tables where they exist, the sourced roofline elsewhere.

:func:`kernel_costs` gives the :class:`KernelCosts` of a device name (cached per process).  Each method
takes numpy arrays of shapes (broadcast together; the categorical arguments -- data type, head dim,
window, routing -- are scalars) and returns :class:`~dnnplace.kernels.sources.Priced`: seconds and, per
entry, where they came from.  A family the device's tables lack, or a categorical key they never
measured (a head dim, a data type), is priced by the roofline and says so; ``measured=False`` prices
everything by the roofline (the catalogue column of the benchmarks).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dnnplace.core.catalogue import ROOFLINE_DEFAULTS, DeviceSpec, device_spec, resolve_device_name
from dnnplace.errors import DnnplaceError
from dnnplace.kernels import roofline as rl
from dnnplace.kernels.measured import ATTN_DTYPES, COMM_OPS, FP8_QUANT_FILES, GEMM_DTYPES, MOE_ROUTING, Family, family
from dnnplace.kernels.sources import EXTRAPOLATED, INTERPOLATED, ROOFLINE, Priced
from dnnplace.kernels.tables import FRAMEWORK_ORDER, SYSTEMS, data_root

__all__ = ["KernelCosts", "kernel_costs", "roofline_spec"]

Array = np.ndarray
ROUTINGS = tuple(MOE_ROUTING)


def _arr(*xs: object) -> list[Array]:
    return [np.asarray(x, dtype=float) for x in np.broadcast_arrays(*[np.asarray(x, dtype=float) for x in xs])]


def _held(fam_value: Array, sol_q: Array, sol_at: Array, code: Array) -> Array:
    """Extrapolated entries keep the efficiency of the place that answered: value x SOL(query) / SOL(there)."""
    ratio = np.where(sol_at > 0, sol_q / np.where(sol_at > 0, sol_at, 1.0), 1.0)
    return np.where(code == EXTRAPOLATED, fam_value * ratio, fam_value)


@dataclass(frozen=True)
class KernelCosts:
    """The kernel prices of one device (``system``: its measured tables' folder, None for roofline only)."""

    device: str
    spec: DeviceSpec
    system: str | None
    framework: str | None = None
    measured: bool = True

    def _family(self, name: str) -> Family | None:
        if not self.measured or self.system is None:
            return None
        return family(self.system, name, None if name == "collective" else self.framework)

    # -- GEMM ---------------------------------------------------------------------------------------
    def gemm(self, m: object, n: object, k: object, dtype: str = "bf16") -> Priced:
        """(m x k) @ (k x n) in ``dtype`` (bf16, fp16, fp8, fp8_block, fp4, int8_wo, int4_wo)."""
        m_, n_, k_ = _arr(m, n, k)
        fam = self._family("gemm")
        grid = fam.grids.get((GEMM_DTYPES.get(dtype, dtype),)) if fam else None
        if grid is None:
            return Priced(self._gemm_roofline(m_, n_, k_, dtype), np.full(m_.shape, ROOFLINE, np.int8))
        look = grid.lookup([m_, n_, k_])
        sol_q = rl.sol_gemm(m_, n_, k_, self.spec, dtype)
        a = look.at
        sol_at = rl.sol_gemm(a[0], a[1], a[2], self.spec, dtype)
        return Priced(_held(look.values, sol_q, sol_at, look.code), look.code)

    def gemm_fp8_static(self, m: object, n: object, k: object, quantized_input: object = False) -> Priced:
        """An FP8 GEMM of a checkpoint with static input scales (ModelOpt's FP8 exports).

        Why not the FP8 rows as they are: the engines' FP8 GEMM rows are measured on weights without an input
        scale, so each includes computing the activation's scale (:data:`~dnnplace.kernels.measured.FP8_QUANT_FILES`:
        at decode sizes about 8 us a GEMM in TensorRT-LLM's, 1 us in vLLM's; more as m x k grows), which a static
        checkpoint never runs.  Its price is the FP8 row less the measured scale computation at (m, k), and less the
        measured static quantisation where ``quantized_input`` (the engine fuses it into the op before: after
        attention, after the gated activation) -- aiconfigurator-core's derivation of its ``fp8_static`` mode
        from the same tables -- and never below the GEMM's speed of light.  Marked at least interpolated: no
        table measured it whole.  Without those tables of the GEMM table's own framework (another engine's overhead
        measures another path), or where the FP8 GEMM is not measured, the FP8 price."""
        m_, n_, k_, q_ = _arr(m, n, k, quantized_input)
        g = self.gemm(m_, n_, k_, "fp8")
        gemm, scale, quant = (self._family(f) for f in ("gemm", "fp8_compute_scale", "fp8_scale_matrix"))
        measured = g.source != ROOFLINE
        if gemm is None or scale is None or quant is None or not measured.any() or \
                {scale.table[2], quant.table[2]} != {gemm.table[2]}:
            return g
        s_t, s_code = self._quant_overhead(scale, m_, k_)
        q_t, q_code = self._quant_overhead(quant, m_, k_)
        fused = q_ > 0
        less = s_t + np.where(fused, q_t, 0.0)
        t = np.where(measured, np.maximum(g.seconds - less, rl.sol_gemm(m_, n_, k_, self.spec, "fp8")), g.seconds)
        code = np.maximum.reduce([g.source, np.full(g.source.shape, INTERPOLATED), s_code,
                                  np.where(fused, q_code, 0)])
        return Priced(t, np.where(measured, code, g.source).astype(np.int8))

    def _quant_overhead(self, fam: Family, m: Array, k: Array) -> tuple[Array, Array]:
        """One FP8 quantisation overhead at (m, k); beyond the table it scales with the m x k elements it reads."""
        look = fam.grids[()].lookup([m, k])
        a = look.at
        return _held(look.values, m * k, a[0] * a[1], look.code), look.code

    def _gemm_roofline(self, m: Array, n: Array, k: Array, dtype: str) -> Array:
        dev = self.spec
        peak = rl.dtype_peak(dev, dtype)
        return rl.gemm_time(m, n, k, dev, peak, in_bytes=rl.DTYPE_BYTES.get(dtype, 2.0))

    # -- attention ----------------------------------------------------------------------------------
    def context_attention(self, batch: object, seq: object, heads: object, kv_heads: object, head_dim: int,
                          dtype: str = "bf16", kv_dtype: str = "bf16", window: int = 0) -> Priced:
        """Causal prefill attention of ``batch`` sequences of ``seq`` tokens, ``heads`` / ``kv_heads`` per GPU."""
        key = (head_dim, window, ATTN_DTYPES.get(dtype, dtype), ATTN_DTYPES.get(kv_dtype, kv_dtype))
        return self._attention("context_attention", rl.sol_attention_context, float(self.spec.attn_fwd_fraction or 1),
                               _arr(batch, seq, heads, kv_heads), key, kv_dtype)

    def decode_attention(self, batch: object, kv_len: object, heads: object, kv_heads: object, head_dim: int,
                         kv_dtype: str = "bf16", window: int = 0) -> Priced:
        """One decode step's attention for ``batch`` sequences each reading ``kv_len`` cached tokens."""
        key = (head_dim, window, "bfloat16", ATTN_DTYPES.get(kv_dtype, kv_dtype))
        return self._attention("decode_attention", rl.sol_attention_decode, float(self.spec.hbm_fraction or 1),
                               _arr(batch, kv_len, heads, kv_heads), key, kv_dtype)

    def _attention(self, name: str, sol: Any, fraction: float, q: list[Array], key: tuple[Any, ...],
                   kv_dtype: str) -> Priced:
        """Either attention family: its lattice for ``key`` (head dim, window, dtypes); a window the tables lack
        reads the full-attention lattice, and a compute dtype they lack for this cache dtype the other compute
        dtype's lattice of the same cache (SGLang's H100 tables hold FP8 caches only as (fp8, fp8): its
        collector does not pass the attention dtype to the backend), both marked extrapolated; no lattice: the
        roofline at ``fraction``."""
        head_dim, window = key[0], key[1]
        kvb = rl.DTYPE_BYTES.get(kv_dtype, 2.0)
        fam = self._family(name)
        grid = fam.grids.get(key) if fam else None
        code_extra = None
        lattice_window = window  # the window the answering lattice was measured at
        if grid is None and fam is not None:
            # the same compute dtype at full attention first (as before), then the other compute dtype
            near = [(w, a) for a in dict.fromkeys((key[2], "bfloat16", "fp8")) for w in dict.fromkeys((window, 0))]
            found = next(((w, a) for w, a in near if (head_dim, w, a, key[3]) in fam.grids), None)
            if found is not None:
                grid, code_extra, lattice_window = fam.grids[(head_dim, found[0], found[1], key[3])], EXTRAPOLATED, \
                    found[0]
        sol_q = sol(q[0], q[1], q[2], q[3], head_dim, self.spec, window, kvb)
        if grid is None:
            return Priced(sol_q / fraction, np.full(q[0].shape, ROOFLINE, np.int8))
        look = grid.lookup(q)
        a = look.at
        sol_at = sol(a[0], a[1], a[2], a[3], head_dim, self.spec, lattice_window, kvb)
        code = look.code if code_extra is None else np.maximum(look.code, code_extra).astype(np.int8)
        return Priced(_held(look.values, sol_q, sol_at, code), code)

    # -- communication ------------------------------------------------------------------------------
    def collective(self, op: str, nbytes: object, gpus: object, link: str = "nvlink") -> Priced:
        """A collective of ``nbytes`` (the message, per GPU) over ``gpus`` GPUs on ``link``
        (``nvlink``: the node's GPU-to-GPU fabric, NVLink or PCIe; ``network``: between nodes)."""
        if op not in COMM_OPS:
            raise DnnplaceError(f"unknown collective '{op}'; known: {', '.join(COMM_OPS)}")
        nb, g = _arr(nbytes, gpus)
        fam = self._family("collective") if link != "network" else None
        grid = fam.grids.get((COMM_OPS[op],)) if fam else None
        if grid is None:
            return Priced(rl.collective_time(op, nb, g, self.spec, link), np.full(nb.shape, ROOFLINE, np.int8))
        look = grid.lookup([g, nb])
        sol_q = rl.sol_collective(op, nb, g, self.spec, link)
        sol_at = rl.sol_collective(op, look.at[1], look.at[0], self.spec, link)
        t = _held(look.values, sol_q, sol_at, look.code)
        return Priced(np.where(g > 1, t, 0.0), look.code)

    def all_reduce_custom(self, nbytes: object, gpus: object, link: str = "nvlink") -> Priced:
        """The engine's own TP all-reduce (``self.framework``'s ``custom_allreduce_perf`` table: TensorRT-LLM's
        AUTO strategy, vLLM's and SGLang's custom all-reduce) of ``nbytes`` per GPU over ``gpus`` GPUs of one
        node.  Why a family of its own: below a few MiB these kernels take a third to a fifth of NCCL's time
        (one-shot reads of the peers' buffers over NVLink, no ring), which is most of a decode step's
        communication.  No table (no framework, a device without one, or ``link='network'``): the NCCL /
        ring price of :meth:`collective`, said so by its sources.  Whether the engine takes this path at a
        given size and group is the caller's rule (the serving catalogue's, read in each engine)."""
        nb, g = _arr(nbytes, gpus)
        fam = self._family("custom_all_reduce") if link != "network" and self.framework else None
        grid = fam.grids.get(()) if fam else None
        if grid is None:
            return self.collective("all_reduce", nb, g, link)
        look = grid.lookup([g, nb])
        sol_q = rl.sol_collective("all_reduce", nb, g, self.spec, link)
        sol_at = rl.sol_collective("all_reduce", look.at[1], look.at[0], self.spec, link)
        t = _held(look.values, sol_q, sol_at, look.code)
        return Priced(np.where(g > 1, t, 0.0), look.code)

    def collective_gpus(self, op: str, link: str = "nvlink") -> int:
        """The most GPUs the tables measured ``op`` on over ``link`` (0: no table; every answer is roofline).
        The NCCL sweeps are single-node: a group across nodes is never in them."""
        fam = self._family("collective") if link != "network" else None
        grid = fam.grids.get((COMM_OPS.get(op, op),)) if fam else None
        return 0 if grid is None else int(grid.axes[0][-1])

    def p2p(self, nbytes: object, link: str = "nvlink", bandwidth: float = 0.0, latency: float = 0.0) -> Priced:
        """One point-to-point send of ``nbytes`` (pipeline activations): no table measures it; the roofline
        at the link's bus bandwidth plus one step latency.  ``bandwidth`` (bytes/s achieved) and ``latency``
        given: the caller's own figures for the link (a fleet file's network), in place of the catalogue's."""
        nb = np.asarray(nbytes, dtype=float)
        bw, frac, lat = rl.link_figures(self.spec, link)
        if bandwidth > 0:
            bw, frac, lat = bandwidth, 1.0, latency
        eff = bw * frac
        # a link with no figure (an inference card's network: no datasheet gives one) is not priced as
        # 1 byte/s: it cannot be priced at all, and the caller says so
        seconds = nb / eff + lat if eff > 0 else np.full(nb.shape, np.inf)
        return Priced(seconds, np.full(nb.shape, ROOFLINE, np.int8))

    # -- mixture of experts -------------------------------------------------------------------------
    def moe(self, tokens: object, hidden: int, inter: int, topk: int, experts: int, tp: int = 1, ep: int = 1,
            dtype: str = "bf16", routing: str = "balanced") -> Priced:
        """A fused MoE layer's experts (gated, 3 GEMMs) for ``tokens`` tokens on one GPU of ``tp`` x ``ep``."""
        if routing not in MOE_ROUTING:
            raise DnnplaceError(f"unknown routing '{routing}'; known: {', '.join(MOE_ROUTING)}")
        t = np.asarray(tokens, dtype=float)
        fam = self._family("moe")
        key = (GEMM_DTYPES.get(dtype, dtype), MOE_ROUTING[routing], hidden, inter, topk, experts, tp, ep)
        grid = fam.grids.get(key) if fam else None
        if grid is None:
            rows = t * topk / ep
            local = float(max(experts // ep, 1))
            # the local experts some token picks (each token picks topk of the experts uniformly, the balanced
            # routing the tables measure): only they read their weights; at decode sizes that is a few of them
            active = np.maximum(local * (1.0 - (1.0 - topk / max(experts, 1)) ** t), 1.0)
            per = rows / active
            d = self.spec
            peak = rl.dtype_peak(d, dtype)
            b = rl.DTYPE_BYTES.get(dtype, 2.0)
            up = rl.gemm_time(per, np.full_like(t, 2.0 * inter / tp), np.full_like(t, float(hidden)), d, peak,
                              groups=active, in_bytes=b)
            down = rl.gemm_time(per, np.full_like(t, float(hidden)), np.full_like(t, inter / tp), d, peak,
                                groups=active, in_bytes=b)
            return Priced(up + down, np.full(t.shape, ROOFLINE, np.int8))
        look = grid.lookup([t])
        d = self.spec
        sol_q = rl.sol_moe(t, hidden, inter, topk, experts, tp, ep, d, dtype)
        sol_at = rl.sol_moe(look.at[0], hidden, inter, topk, experts, tp, ep, d, dtype)
        return Priced(_held(look.values, sol_q, sol_at, look.code), look.code)

    # -- what is measured ---------------------------------------------------------------------------
    def coverage(self) -> dict[str, object]:
        """Per family: the table (framework, version), its keys and axis ranges; or 'roofline'."""
        out: dict[str, object] = {}
        names: tuple[str, ...] = ("gemm", "context_attention", "decode_attention", "collective", "moe")
        if self.framework:  # the engine's own all-reduce is a framework's table; without one it is NCCL's
            names += ("custom_all_reduce",)
        names += tuple(FP8_QUANT_FILES)
        for name in names:
            fam = self._family(name)
            if fam is None and name in FP8_QUANT_FILES:  # an overhead, not a price: nothing to fall back to
                out[name] = {"source": "none", "means": "static-scale FP8 GEMMs priced as the FP8 rows"}
                continue
            if fam is None:
                out[name] = {"source": "roofline"}
                continue
            axes: dict[str, list[float]] = {}
            for g in fam.grids.values():
                for a, ax in zip(fam.axes, g.axes):
                    lo, hi = axes.get(a, [float("inf"), float("-inf")])
                    axes[a] = [min(lo, float(ax[0])), max(hi, float(ax[-1]))]
            keys = sorted({k for k in fam.grids}, key=str)
            out[name] = {"source": "measured", "framework": fam.table[2], "version": fam.table[3],
                         "key_fields": list(fam.keys), "keys": [list(map(_plain, k)) for k in keys],
                         "ranges": axes, "points": sum(g.points for g in fam.grids.values()),
                         "choice": fam.choice}
        out["p2p"] = {"source": "roofline"}
        return out


def _plain(v: object) -> object:
    return v.item() if hasattr(v, "item") else v


def roofline_spec(dev: DeviceSpec) -> DeviceSpec:
    """``dev`` with every efficiency fraction it lacks (no published measurement) taken from the catalogue's
    ``ROOFLINE_DEFAULTS``: what the roofline prices a card such as an RTX 4090 or an L4 with.  Prefill
    attention without its own figure runs at the defaults' attention fraction, the median efficiency of the
    measured prefill tables of the GPUs that have them (the GEMM fraction priced an L40S's prefill attention
    well below its own table's time: docs/kernels.md); the backward, which no table
    measures, at the GEMM fraction (flash attention is a chain of tensor-core GEMMs); a card without NVLink
    moves collectives over PCIe at the defaults' measured PCIe bus-bandwidth fraction (a bridge or NVLink
    without its own measured fraction takes that one too: the lower, published figure)."""
    d = ROOFLINE_DEFAULTS
    gemm = d.fraction("gemm_fraction", dev)
    pcie_only = dev.nvlink_bandwidth <= 0
    return replace(dev, gemm_fraction=gemm, hbm_fraction=d.fraction("hbm_fraction", dev),
                   attn_fwd_fraction=dev.attn_fwd_fraction or d.attn_fraction,
                   attn_bwd_fraction=dev.attn_bwd_fraction or gemm,
                   nvlink_fraction=d.pcie_fraction if pcie_only or dev.nvlink_fraction is None
                   else dev.nvlink_fraction,
                   internode_fraction=dev.internode_fraction or d.pcie_fraction)


@functools.cache
def kernel_costs(device: str, framework: str | None = None, measured: bool = True) -> KernelCosts:
    """The kernel prices of ``device`` (a catalogue name); unknown names are one line naming the known ones."""
    spec = roofline_spec(device_spec(device))
    system = SYSTEMS.get(resolve_device_name(device))
    if system is not None and data_root() is None:
        system = None  # aiconfigurator-core not installed: every answer says roofline
    if framework is not None and framework not in FRAMEWORK_ORDER:
        raise DnnplaceError(f"unknown kernel-table framework '{framework}'; known: {', '.join(FRAMEWORK_ORDER)}")
    return KernelCosts(device, spec, system, framework, measured)
