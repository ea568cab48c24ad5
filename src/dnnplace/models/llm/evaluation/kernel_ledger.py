"""Where a training plan's kernel costs came from: a ledger the cost model writes while it prices one plan.

Every term family -- dense GEMMs, expert GEMMs, attention, collectives -- is priced either from the measured
kernel tables (:mod:`dnnplace.kernels`, whose every answer carries ``measured`` / ``interpolated`` /
``extrapolated`` / ``roofline`` per entry) or from the catalogue's own formulas (MAMF fractions, flash-attention
fractions, ring collectives at NCCL bus-bandwidth fractions).  A plan must say which, so the pricing functions
:func:`note` what they priced; the ledger is only kept inside :func:`recording` (one plan's evaluation), so the
search, which prices millions of candidates, pays one context-variable read per call and nothing else.
:func:`uses_tables` is the one place the ``measured_kernels`` switch is read per family.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from dnnplace.core.catalogue import DeviceSpec
from dnnplace.kernels import SOURCE_NAMES

__all__ = ["CATALOGUE", "FAMILIES", "NAMES", "Ledger", "ledger_doc", "ledger_lines", "ledger_text", "note", "recording",
           "tables_for", "uses_tables"]

#: The term families a plan reports, in the order a reader sees them.
FAMILIES = ("dense_gemm", "expert_gemm", "attention", "collectives")
LABELS = {"dense_gemm": "dense GEMMs", "expert_gemm": "expert GEMMs", "attention": "attention",
          "collectives": "collectives"}
#: The kernel layer's source words, then ``catalogue``: priced by the training cost model's own formulas.
NAMES = (*SOURCE_NAMES, "catalogue")
CATALOGUE = len(SOURCE_NAMES)


class Ledger:
    """Per family and source: how many priced entries, and their seconds (one call's, not times its uses)."""

    def __init__(self) -> None:
        self.count = {f: np.zeros(len(NAMES)) for f in FAMILIES}
        self.seconds = {f: np.zeros(len(NAMES)) for f in FAMILIES}

    def add(self, family: str, codes: np.ndarray, seconds: np.ndarray) -> None:
        c = np.ravel(codes).astype(np.int64)
        s = np.ravel(np.broadcast_to(seconds, np.shape(codes))).astype(float)
        self.count[family] += np.bincount(c, minlength=len(NAMES))
        self.seconds[family] += np.bincount(c, weights=np.nan_to_num(s), minlength=len(NAMES))


_LEDGER: ContextVar[Ledger | None] = ContextVar("dnnplace_kernel_ledger", default=None)
_TABLES: ContextVar[frozenset[str]] = ContextVar("dnnplace_kernel_tables", default=frozenset(FAMILIES))


def uses_tables(dev: DeviceSpec, family: str) -> bool:
    """Does ``family`` price from the measured tables on ``dev``: its ``measured_kernels`` switch, restricted to
    the families of :func:`tables_for` (every family unless a comparison narrows them, docs/kernels-training.md)."""
    return bool(dev.measured_kernels) and family in _TABLES.get()


@contextmanager
def tables_for(families: Iterable[str]) -> Iterator[None]:
    """Inside the block the switch reaches only ``families``: the per-family comparison of
    benchmarks/kernels_training.py (one family from the tables, the rest from the catalogue)."""
    token = _TABLES.set(frozenset(families))
    try:
        yield
    finally:
        _TABLES.reset(token)


def note(family: str, seconds: Any, codes: Any = None, where: Any = None) -> None:
    """Record priced entries of ``family``: their ``seconds`` and source ``codes`` (None: all ``catalogue``);
    ``where`` (a mask) keeps only the entries that are real kernels (a collective over more than one GPU)."""
    led = _LEDGER.get()
    if led is None:
        return
    sec = np.asarray(seconds, dtype=float)
    code = np.full(sec.shape, CATALOGUE, np.int64) if codes is None else np.asarray(codes, dtype=np.int64)
    keep = np.asarray(True if where is None else where, dtype=bool)
    code, sec, keep = np.broadcast_arrays(code, sec, keep)
    code, sec = code[keep], sec[keep]
    led.add(family, code, sec)


@contextmanager
def recording() -> Iterator[Ledger]:
    """Keep a ledger of everything priced inside the block."""
    led = Ledger()
    token = _LEDGER.set(led)
    try:
        yield led
    finally:
        _LEDGER.reset(token)


def ledger_doc(led: Ledger, switch: bool) -> dict[str, Any]:
    """``kernel_sources`` of a plan document: the switch, and per family the entries and the seconds share of
    each source (the seconds are per kernel call, so the shares weigh kernels by their length, not their count)."""
    fams: dict[str, Any] = {}
    for f in FAMILIES:
        n, s = led.count[f], led.seconds[f]
        total = float(s.sum())
        fams[f] = {"counts": {NAMES[i]: int(n[i]) for i in range(len(NAMES)) if n[i]},
                   "seconds_share": {NAMES[i]: float(s[i] / total) if total > 0 else 0.0
                                     for i in range(len(NAMES)) if n[i]}}
    return {"measured_kernels": switch, "families": fams}


def _pct(share: float) -> str:
    return "<1 %" if share < 0.005 else f"{100 * share:.0f} %"


def ledger_lines(doc: dict[str, Any]) -> list[str]:
    """The screen's line: ``kernel sources (switch): `` and :func:`ledger_text`."""
    switch = "measured kernel tables on" if doc["measured_kernels"] else "catalogue; measured kernel tables off"
    return [f"kernel sources ({switch}): {ledger_text(doc)}"]


def ledger_text(doc: dict[str, Any]) -> str:
    """Per family, the share of its kernel seconds each source priced."""
    parts = []
    for f in FAMILIES:
        share = doc["families"][f]["seconds_share"]
        if share:
            parts.append(f"{LABELS[f]} " + ", ".join(f"{_pct(v)} {k}" for k, v in
                                                     sorted(share.items(), key=lambda kv: -kv[1])))
    return "; ".join(parts)
