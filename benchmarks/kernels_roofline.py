"""How far the sourced roofline is from the measured tables: GEMMs by row count, attention and MoE layers.

Why: every GPU without aiconfigurator-core's tables (L4, A10G, T4, the RTX cards, A6000, V100, MI300X ...) is
priced by the roofline alone, and serving prices decode, whose GEMMs have as many rows as the batch (1 to a
few hundred).  The tables of the GPUs that have them are the check the project did not write: every measured
GEMM point of each device's default table with n and k >= 1024 (an LLM layer's weights), in BF16 and, where
the device has an FP8 peak, FP8, is priced by the roofline (``kernel_costs(gpu, measured=False)``: the kernel
layer without its tables, the datasheet peaks and published efficiencies) and the ratio roofline / measured
reported by band of m; prefill and decode attention and MoE layers likewise.  Nothing is fitted to these
points.  (The FP8 rows include the activation's dynamic quantisation, which the roofline does not price: FP8
ratios below 1 at small m.)

    PYTHONPATH=src python benchmarks/kernels_roofline.py [--out benchmarks/results/kernels_roofline.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dnnplace.kernels.costs import GEMM_DTYPES, kernel_costs  # noqa: E402
from dnnplace.kernels.measured import family  # noqa: E402
from dnnplace.kernels.tables import SYSTEMS  # noqa: E402

BANDS = ((1, 16), (17, 64), (65, 256), (257, 1024), (1025, 4096), (4097, 1 << 30))
#: the weight shapes of LLM layers: n and k of at least this (smaller GEMMs are a launch's few microseconds, which
#: the roofline does not price)
MIN_NK = 1024
DEVICES = ("a100", "h100", "h200", "b200", "l40s", "rtx-pro-6000")


def ratios(gpu: str, dtype: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(m, roofline / measured) at every measured point of ``gpu``'s ``dtype`` GEMM table."""
    fam = family(SYSTEMS[gpu], "gemm")
    grid = fam.grids.get((GEMM_DTYPES.get(dtype, dtype),)) if fam else None
    if grid is None:
        return None
    idx = np.argwhere(np.isfinite(grid.values))
    m, n, k = (grid.axes[j][idx[:, j]] for j in range(3))
    meas = grid.values[tuple(idx.T)]
    roof = kernel_costs(gpu, measured=False).gemm(m, n, k, dtype).seconds
    ok = (meas > 0) & (n >= MIN_NK) & (k >= MIN_NK)
    return m[ok], roof[ok] / meas[ok]


#: attention bands: prompt length for prefill, batch x cached tokens for decode
SEQ_BANDS = ((1, 256), (257, 1024), (1025, 4096), (4097, 1 << 30))
KV_BANDS = ((1, 10**5), (10**5 + 1, 10**6), (10**6 + 1, 10**7), (10**7 + 1, 1 << 40))


def attention_ratios(gpu: str, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(band coordinate, roofline / measured) at every measured point of ``gpu``'s BF16, head-dim-128,
    full-attention lattice of ``name`` (context: the prompt length; decode: batch x cached tokens)."""
    fam = family(SYSTEMS[gpu], name)
    grid = None if fam is None else next((g for k, g in fam.grids.items()
                                          if k[0] == 128 and k[1] == 0 and k[2] == "bfloat16"
                                          and k[3] == "bfloat16"), None)
    if grid is None:
        return None
    idx = np.argwhere(np.isfinite(grid.values))
    b, x, h, kvh = (grid.axes[j][idx[:, j]] for j in range(4))
    meas = grid.values[tuple(idx.T)]
    roofline = kernel_costs(gpu, measured=False)
    if name == "context_attention":
        roof = roofline.context_attention(b, x, h, kvh, 128).seconds
        coord = x
    else:
        roof = roofline.decode_attention(b, x, h, kvh, 128).seconds
        coord = b * x
    ok = meas > 0
    return coord[ok], roof[ok] / meas[ok]


def _cells(coord: np.ndarray, r: np.ndarray, bands: tuple[tuple[int, int], ...]) -> list[str]:
    """Per band of ``coord``: the median (10th-90th percentile) of ``r`` and the points in it, or '-'."""
    out = []
    for a, b in bands:
        sel = (coord >= a) & (coord <= b)
        if not sel.any():
            out.append("-")
            continue
        q = np.percentile(r[sel], [10, 50, 90])
        out.append(f"{q[1]:.2f} ({q[0]:.2f}-{q[2]:.2f}), {int(sel.sum())}")
    return out


def _band_name(a: int, b: int, what: str) -> str:
    return f"{what} {a:,}-{b:,}" if b < 1 << 30 else f"{what} > {a - 1:,}"


def attention_lines() -> list[str]:
    """Prefill and decode attention, BF16, head dim 128, no window: the roofline against the tables."""
    lines = ["| device | family | " + " | ".join(f"{i}" for i in range(1, 5)) + " |", "|---|---|---|---|---|---|"]
    for gpu in DEVICES:
        for name, bands, what in (("context_attention", SEQ_BANDS, "seq"), ("decode_attention", KV_BANDS, "b x kv")):
            got = attention_ratios(gpu, name)
            if got is None:
                continue
            cells = [f"{_band_name(a, b, what)}: {c}" for (a, b), c in zip(bands, _cells(*got, bands))]
            lines.append(f"| {gpu} | {name} | " + " | ".join(cells) + " |")
    return lines


TOKEN_BANDS = ((1, 16), (17, 256), (257, 4096), (4097, 1 << 30))


def moe_ratios(gpu: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(tokens, roofline / measured) at every measured point of ``gpu``'s balanced 16-bit MoE lattices, the
    roofline as the kernel layer prices a shape its tables lack (``KernelCosts.moe`` without a lattice)."""
    fam = family(SYSTEMS[gpu], "moe")
    if fam is None:
        return None
    roofline = kernel_costs(gpu, measured=False)
    coords, ratios_ = [], []
    for key, grid in fam.grids.items():
        dt, routing, hidden, inter, topk, experts, tp, ep = key
        if dt != "bfloat16" or routing != "balanced":
            continue
        t = grid.axes[0]
        ok = np.isfinite(grid.values) & (grid.values > 0)
        if not ok.any():
            continue
        roof = roofline.moe(t[ok], hidden, inter, topk, experts, tp, ep).seconds
        coords.append(t[ok])
        ratios_.append(roof / grid.values[ok])
    if not coords:
        return None
    return np.concatenate(coords), np.concatenate(ratios_)


def moe_lines() -> list[str]:
    lines = ["| device | " + " | ".join(_band_name(a, b, "tokens") for a, b in TOKEN_BANDS) + " |",
             "|---|" + "---|" * len(TOKEN_BANDS)]
    for gpu in DEVICES:
        got = moe_ratios(gpu)
        if got is not None:
            lines.append(f"| {gpu} | " + " | ".join(_cells(*got, TOKEN_BANDS)) + " |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    head = ["| device | dtype | " + " | ".join(f"m {a}-{b}" if b < 1 << 30 else f"m > {a - 1}" for a, b in BANDS)
            + " |", "|---|---|" + "---|" * len(BANDS)]
    lines = list(head)
    for gpu in DEVICES:
        spec = kernel_costs(gpu).spec
        for dtype in ("bf16", "fp8"):
            if dtype == "fp8" and "fp8" not in spec.peak_flops:
                continue
            got = ratios(gpu, dtype)
            if got is None:
                continue
            lines.append(f"| {gpu} | {dtype} | " + " | ".join(_cells(*got, BANDS)) + " |")
    text = "\n".join(lines)
    att = "\n".join(attention_lines())
    moe = "\n".join(moe_lines())
    print(text + "\n\n" + att + "\n\n" + moe)
    if args.out:
        args.out.write_text("# The GEMM roofline against the measured tables\n\n"
                            "`PYTHONPATH=src python benchmarks/kernels_roofline.py --out "
                            "benchmarks/results/kernels_roofline.md`\n\n"
                            "Each cell: roofline / measured latency, median (10th-90th percentile), points. 1.00 is "
                            "exact; above 1 the roofline is slower than the GPU.\n\n" + text + "\n\n"
                            "## Attention (BF16, head dim 128, no window)\n\nThe roofline as the kernel layer "
                            "prices a card without tables: prefill at the attention fraction of the tensor-core "
                            "peak, decode at the HBM fraction (no per-kernel floor: small decodes read far "
                            "below 1). By band of the prompt length (prefill) or batch x cached tokens (decode); "
                            "same cell format.\n\n" + att + "\n\n"
                            "## MoE layers (BF16, balanced routing)\n\nThe roofline for a shape the tables lack: "
                            "each local expert a token picks reads its weights (a grouped GEMM over them); by band "
                            "of tokens per step, every balanced 16-bit lattice of the device.\n\n" + moe + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
