"""The measured-kernel layer as the command line sees it: what is measured for a device, and one kernel's price.

Every argument is checked here, once: a device name the catalogue does not know, a malformed shape, a
negative size or an unknown data type is one :class:`DnnplaceError` line naming the culprit.
"""

from __future__ import annotations

import math
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.kernels import kernel_costs
from dnnplace.kernels.roofline import COLLECTIVE_OPS, DTYPE_BYTES
from dnnplace.kernels.tables import FRAMEWORK_ORDER

__all__ = ["KERNEL_FAMILIES", "describe_kernels", "price_kernel"]

#: family -> (its fields in order, how many are required)
KERNEL_FAMILIES: dict[str, tuple[tuple[str, ...], int]] = {
    "gemm": (("m", "n", "k", "dtype"), 3),
    "attention": (("batch", "seq", "heads", "kv_heads", "head_dim", "dtype", "kv_dtype", "window"), 5),
    "decode": (("batch", "kv_len", "heads", "kv_heads", "head_dim", "kv_dtype", "window"), 5),
    "collective": (("op", "bytes", "gpus", "link"), 3),
    "p2p": (("bytes", "link"), 1),
    "moe": (("tokens", "hidden", "inter", "topk", "experts", "tp", "ep", "dtype", "routing"), 5),
}
_TEXT = {"dtype", "kv_dtype", "op", "link", "routing"}
_LINKS = ("nvlink", "network")


def _framework(framework: str | None) -> str | None:
    if framework is not None and framework not in FRAMEWORK_ORDER:
        raise DnnplaceError(f"--framework: unknown '{framework}'; known: {', '.join(FRAMEWORK_ORDER)}")
    return framework


def describe_kernels(device: str, framework: str | None = None) -> dict[str, Any]:
    """Per family: measured (table, version, keys, shape ranges, points, the kernel-source rule) or roofline."""
    kc = kernel_costs(device, _framework(framework))
    return {"device": kc.device, "system": kc.system, "families": kc.coverage()}


def _parse(family: str, text: str) -> dict[str, Any]:
    fields, required = KERNEL_FAMILIES[family]
    parts = [p.strip() for p in text.split(",")]
    if not (required <= len(parts) <= len(fields)) or any(p == "" for p in parts):
        raise DnnplaceError(f"--{family}: give {','.join(fields[:required])}"
                            f"{'[,' + ','.join(fields[required:]) + ']' if len(fields) > required else ''}, "
                            f"got '{text[:80]}'")
    out: dict[str, Any] = {}
    for name, raw in zip(fields, parts):
        if name in _TEXT:
            out[name] = raw.lower()
            continue
        try:
            v = float(raw)
        except ValueError:
            raise DnnplaceError(f"--{family}: {name} must be a number, got '{raw[:40]}'") from None
        if not math.isfinite(v) or v < (0 if name == "window" else 1) or v > 1e15:
            raise DnnplaceError(f"--{family}: {name} must be a positive number up to 1e15, got '{raw[:40]}'")
        out[name] = int(v) if name in ("head_dim", "window", "hidden", "inter", "topk", "experts", "tp", "ep") \
            else v
    for key in ("dtype", "kv_dtype"):
        if key in out and out[key] not in DTYPE_BYTES:
            raise DnnplaceError(f"--{family}: unknown {key} '{out[key][:20]}'; known: {', '.join(DTYPE_BYTES)}")
    if "op" in out and out["op"] not in COLLECTIVE_OPS:
        raise DnnplaceError(f"--{family}: unknown op '{out['op'][:20]}'; known: {', '.join(COLLECTIVE_OPS)}")
    if "link" in out and out["link"] not in _LINKS:
        raise DnnplaceError(f"--{family}: unknown link '{out['link'][:20]}'; known: {', '.join(_LINKS)}")
    return out


def price_kernel(device: str, family: str, shape: str, framework: str | None = None) -> dict[str, Any]:
    """One kernel of ``family`` at ``shape`` (comma-separated fields, :data:`KERNEL_FAMILIES`): seconds, source."""
    if family not in KERNEL_FAMILIES:
        raise DnnplaceError(f"unknown kernel family '{family}'; known: {', '.join(KERNEL_FAMILIES)}")
    a = _parse(family, shape)
    kc = kernel_costs(device, _framework(framework))
    if family == "gemm":
        p = kc.gemm(a["m"], a["n"], a["k"], a.get("dtype", "bf16"))
    elif family == "attention":
        p = kc.context_attention(a["batch"], a["seq"], a["heads"], a["kv_heads"], a["head_dim"],
                                 a.get("dtype", "bf16"), a.get("kv_dtype", "bf16"), a.get("window", 0))
    elif family == "decode":
        p = kc.decode_attention(a["batch"], a["kv_len"], a["heads"], a["kv_heads"], a["head_dim"],
                                a.get("kv_dtype", "bf16"), a.get("window", 0))
    elif family == "collective":
        p = kc.collective(a["op"], a["bytes"], a["gpus"], a.get("link", "nvlink"))
    elif family == "p2p":
        p = kc.p2p(a["bytes"], a.get("link", "nvlink"))
    else:
        p = kc.moe(a["tokens"], a["hidden"], a["inter"], a["topk"], a["experts"], a.get("tp", 1), a.get("ep", 1),
                   a.get("dtype", "bf16"), a.get("routing", "balanced"))
    return {"device": kc.device, "family": family, "shape": a, "seconds": float(p.seconds),
            "source": p.worst, "table": describe_kernels(device, framework)["families"]
            .get({"attention": "context_attention", "decode": "decode_attention"}.get(family, family), {})}
