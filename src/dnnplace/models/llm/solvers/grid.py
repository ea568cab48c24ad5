"""The search's columns and clocks: candidate columns by name, their expansion, the time budget's pace.

Shared by the dense search (:mod:`.search`), its bounds (:mod:`.bounds`) and the expert knobs
(:mod:`.moe_search`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from dnnplace.models.llm.evaluation.step import (
    Candidates,
)

Columns = dict[str, np.ndarray]
BOUND_ROWS = 200_000  # base configurations bounded per numpy batch
MAX_BASES = 2_000_000  # base configurations one search may hold (a few hundred MB of columns and bounds)


class _Clock:
    """The search's deadline (``None``: no limit)."""

    def __init__(self, time_limit: float | None) -> None:
        self.started = time.perf_counter()
        self.limit = time_limit

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def over(self) -> bool:
        return self.limit is not None and self.elapsed() > self.limit


class _Pace:
    """Work per numpy batch, in cells (a row weighs what the cost model does for it: its layer splits times
    its pipeline ranks, or its schedule's tasks), so the clock is read every ``target`` seconds or so from the
    first call on: a batch sized in rows alone could take minutes on one deep, many-micro-batch shape."""

    def __init__(self, start: float, target: float = 0.25, cap: float = 2e9) -> None:
        self.budget, self.target, self.cap = start, target, cap

    def take(self, cum: np.ndarray, lo: int) -> int:
        """The end of the next batch from row ``lo`` (``cum``: the rows' running weight, from 0): as many
        rows as the budget holds, at least one."""
        hi = int(np.searchsorted(cum, cum[lo] + self.budget, side="right")) - 1
        return max(hi, lo + 1)

    def timed(self, work: float, seconds: float) -> None:
        if work and seconds > self.target:
            self.budget = max(1.0, work * self.target / seconds)
        elif work >= self.budget / 2 and seconds < self.target / 4:
            self.budget = min(self.cap, 2 * self.budget)


class _TimeUp(Exception):
    """The deadline passed while the space was still being built or bounded."""


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _expand(cols: Columns, name: str, keys: np.ndarray, options: Callable[[int], list[int]]) -> Columns:
    """Each row repeated once per value of knob ``name`` (``options(key)`` for the row's key), in order."""
    table = {int(k): np.asarray(options(int(k)), dtype=np.int64) for k in np.unique(keys)}
    if len(table) == 1:  # the same values for every row: no loop over the rows
        (values,) = table.values()
        rows = np.repeat(np.arange(len(keys)), len(values))
        return {**{k: v[rows] for k, v in cols.items()}, name: np.tile(values, len(keys))}
    parts = [table[int(k)] for k in keys.tolist()]
    counts = np.array([len(p) for p in parts], dtype=np.int64)
    rows = np.repeat(np.arange(len(keys)), counts)
    out = {k: v[rows] for k, v in cols.items()}
    out[name] = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return out


def row_groups(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of integer ``columns`` (equal length): the index of each one's first row and every
    row's group, groups in lexicographic order -- what ``np.unique(np.stack(columns, 1), axis=0,
    return_index=True, return_inverse=True)`` gives, without its row-wise sort of structured values (seconds
    on a search's millions of rows).  The columns fold into one mixed-radix int64 code, re-ranked (which keeps
    the order) before it could overflow."""
    n = len(columns[0]) if columns else 0
    key = np.zeros(n, dtype=np.int64)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    for col in columns:
        c = np.asarray(col).astype(np.int64)
        lo = int(c.min())
        radix = int(c.max()) - lo + 1
        if radix > 1 << 20:  # sparse values: their ranks instead
            values, c = np.unique(c, return_inverse=True)
            c, lo, radix = c.reshape(-1), 0, len(values)
        if (int(key.max()) + 1) * radix >= 1 << 62:
            key = np.unique(key, return_inverse=True)[1].reshape(-1).astype(np.int64)
        key = key * radix + (c - lo)
    _, first, back = np.unique(key, return_index=True, return_inverse=True)
    return first, back.reshape(-1)


def as_candidates(cols: Columns, rows: np.ndarray, layers: np.ndarray) -> Candidates:
    """Rows of named columns as the cost model's :class:`Candidates` (the one place its field names are mapped)."""
    def num(name: str) -> np.ndarray:
        return cols[name][rows].astype(float)

    names = (("ep", "ep"), ("etp", "etp"), ("dispatcher", "dispatcher"), ("modules", "recompute_modules"))
    expert = {k: (num(c) if c in cols else None) for k, c in names}
    a2a = cols["a2a_overlap"][rows].astype(bool) if "a2a_overlap" in cols else None
    sharding = {k: (num(c) if c in cols else None) for k, c in (("zero", "zero"), ("grad", "grad_dtype"))}
    return Candidates(tp=num("tp"), pp=num("pp"), vp=num("vp"), cp=num("cp"), dp=num("dp"), mbs=num("mbs"),
                      recompute=num("recompute"), sp=cols["sequence_parallel"][rows].astype(bool),
                      dist=cols["distributed_optimizer"][rows].astype(bool), rank_layers=layers, a2a=a2a, **expert,
                      **sharding, offload=num("offload_layers") if "offload_layers" in cols else None,
                      graphs=num("cuda_graphs") if "cuda_graphs" in cols else None,
                      routing=num("routing") if "routing" in cols else None)


def splits(L: int, pp: int, vp: int) -> np.ndarray:
    """Every per-rank layer count of the family Megatron expresses: rows (first, middle..., last).

    Without interleaving (vp = 1): first and last rank free, the middle ranks equal
    (``--decoder-first/last-pipeline-num-layers``).  Interleaved: every virtual stage holds the
    same k layers but the first and the last, which may hold fewer, down to none -- the split
    NeMo's account-for-embedding/loss options give (126 layers on pp 8 x vp 8: 1, 2, ..., 2, 1; 94 on
    pp 32 x vp 3: 0, 1, ..., 1, 0, Megatron-Core counting the embedding and the loss as one layer each,
    ``transformer_config.py`` / ``transformer_block.get_num_layers_to_build``), or a
    ``--pipeline-model-parallel-layout`` with an embedding-only first or a loss-only last stage
    (Megatron-Bridge's DeepSeek-V3 PP8 VP4 recipe ``Et|(tt|)*30mL``: 1, 2, ..., 2, 0).  Chunks of unequal size
    inside the interleaved schedule are left out: its closed form (:mod:`..schedule`) holds for equal
    chunks, and the simulated schedule shows such splits slower than the formula says.
    """
    if pp == 1:
        return np.array([[L]])
    if vp == 1:
        f = np.arange(1, L)
        if pp == 2:
            return np.stack([f, L - f], axis=1)
        ff, ll = np.meshgrid(f, f, indexing="ij")
        rest = L - ff - ll
        ok = (rest >= pp - 2) & (rest % (pp - 2) == 0)
        ff, ll, mid = ff[ok], ll[ok], rest[ok] // (pp - 2)
        return np.concatenate([ff[:, None], np.repeat(mid[:, None], pp - 2, axis=1), ll[:, None]], axis=1)
    rows = []
    n = pp * vp
    for k in range(1, L // max(n - 2, 1) + 2):
        for short_first in range(k + 1):
            short_last = n * k - short_first - L
            if 0 <= short_last <= k:
                rows.append([vp * k - short_first] + [vp * k] * (pp - 2) + [vp * k - short_last])
    return np.array(rows, dtype=np.int64).reshape(-1, pp)
