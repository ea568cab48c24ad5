"""The exact DP over a lattice of ideals (SPEC "Dynamic program"): the kernel run in short calls, then backtracked.

:func:`run_dp` is a pure algorithm: it takes the lattice, the bound to prune with and an absolute
``deadline`` (``time.perf_counter()`` seconds, or None) that it checks between kernel calls; budgets
are the portfolio's (:mod:`~dnnplace.models.paper.solvers.dp.portfolio`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from dnnplace.core.solver import expired
from dnnplace.errors import SolverTimeout
from dnnplace.models.paper.solvers.dp.ideals import IdealLattice
from dnnplace.models.paper.solvers.dp.relax import UnitAnchors
from dnnplace.models.paper.solvers.prepare import Prepared
from dnnplace.models.paper.workload import Workload


@dataclass(frozen=True)
class DPResult:
    """The DP's optimum and the per-unit device it chose (-1: none)."""

    value: float
    unit_device: np.ndarray  # accelerators 0..A-1 in pipeline order, then CPUs
    n_acc_used: int
    n_cpu_used: int
    pairs: int
    chain: tuple[int, ...] = ()  # device of every piece in pipeline order (first ideal first)



def run_dp(
    p: Prepared,
    lattice: IdealLattice,
    w: Workload,
    *,
    overlap: bool = False,
    ub: float = np.inf,
    deadline: float | None = None,
    progress: Any = None,
    piece_cap: float = np.inf,
    anchored: UnitAnchors | None = None,
    on_chunk: Callable[[], None] | None = None,
    left_out_work: float = 0.0,
) -> DPResult:
    """Run the kernel over the whole lattice and backtrack the optimal chain.

    A finite ``piece_cap`` runs the fluid test instead (:func:`fluid_certifies`;
    ``left_out_work``: the left-out compute in all, of which what ``anchored``
    does not place may run anywhere).  ``anchored``: left-out units a piece
    must hold, for a relaxation (:func:`relax.anchors`).  ``on_chunk`` is
    called after each call of the kernel.
    """
    args, dp, choice, kind = _kernel_args(p, lattice, w, overlap=overlap, ub=ub, piece_cap=piece_cap,
                                          anchored=anchored, left_out_work=left_out_work)
    pairs = _run_chunks(args, lattice.n_ideals, deadline, progress, on_chunk)
    return _backtrack(p, lattice, w, dp, choice, kind, pairs)


class KernelArgs(NamedTuple):
    """The arguments of :func:`~.kernel.dp_range` after ``(lo, hi, max_work)``, by meaning."""

    lattice: Any  # kernel.LatticeSums
    transfers: Any  # kernel.Transfers
    limits: Any  # kernel.Limits
    tables: Any  # kernel.Tables: dp, choice, kind (filled in place)
    scratch: Any  # kernel.Scratch
    shared: Any  # kernel.Shared: the shared parameter groups of the units
    anchored: Any  # kernel.Anchored: left-out units a piece must hold (a relaxation's; else empty)


def _kernel_args(p: Prepared, lattice: IdealLattice, w: Workload, *, overlap: bool, ub: float,
                 piece_cap: float, anchored: UnitAnchors | None = None, left_out_work: float = 0.0
                 ) -> tuple[KernelArgs, np.ndarray, np.ndarray, np.ndarray]:
    """The kernel's arrays: lattice sums, per-source transfer tables, the DP tables and scratch space."""
    from dnnplace.models.paper.solvers.dp.kernel import (
        Anchored,
        LatticeSums,
        Limits,
        Scratch,
        Shared,
        Tables,
        Transfers,
        no_anchors,
        whole_ideal_comm,
        whole_ideal_shared,
    )

    n_cpu, n_acc = w.max_cpus, w.max_accelerators
    N = lattice.n_ideals
    dp = np.empty((N, n_cpu + 1, n_acc + 1))
    dp[0] = 0.0
    choice = np.zeros((N, n_cpu + 1, n_acc + 1), dtype=np.int64)
    kind = np.zeros((N, n_cpu + 1, n_acc + 1), dtype=np.int8)
    src = p.comm
    n_src = src.home.size
    home_order = np.argsort(src.home, kind="stable")
    n_tgt = np.diff(src.target_ptr)
    tgt_owner = np.repeat(np.arange(n_src, dtype=np.int64), n_tgt)
    tgt_order = np.argsort(src.target_idx, kind="stable")
    transfers = Transfers(
        home_ptr=_ptr(src.home, p.n_units), home_src=home_order.astype(np.int64),
        tgt_ptr=_ptr(src.target_idx, p.n_units), tgt_src=tgt_owner[tgt_order],
        src_home=src.home, src_cost=src.cost, src_ntgt=n_tgt.astype(np.int64),
        src_slice=np.full(n_src, np.inf) if src.slice_cost is None else src.slice_cost,
        src_trunk=np.full(n_src, np.inf) if src.trunk_cost is None else src.trunk_cost,
    )
    if anchored is None:
        anc = no_anchors(p.n_units, N)
    else:
        t = anchored.weight.size
        anc = Anchored(unit_ptr=anchored.ptr, unit_item=anchored.item, side=anchored.side, weight=anchored.weight,
                       before=np.zeros(t, dtype=np.int64), after=np.zeros(t, dtype=np.int64), whole=np.zeros(N),
                       n_before=anchored.n_before, avail=np.zeros(N), due=np.zeros(N))
    whole_comm, held, avail, due = whole_ideal_comm(lattice.down_ptr, lattice.down_ideal, lattice.down_unit,
                                                    transfers, np.zeros(n_src, dtype=np.int64),
                                                    np.zeros(p.n_units, dtype=np.int8), anc)
    # the fluid test: items without anchors before may run from the start, other left-out work anywhere
    avail += left_out_work - float(anc.weight[anc.n_before > 0].sum())
    if np.isfinite(piece_cap):  # accelerators left empty before the first piece hold left-out work too
        dp[0] = -np.minimum(avail[0], np.arange(n_acc + 1) * piece_cap)[None, :]
    anc = anc._replace(whole=held, avail=avail, due=due)
    work_acc, forced_cpu, ratio = _work_bounds(p, lattice, float(w.memory))
    sh = p.shared
    args = KernelArgs(
        lattice=LatticeSums(
            down_ptr=lattice.down_ptr, down_ideal=lattice.down_ideal, down_unit=lattice.down_unit,
            acc_sum=lattice.acc_sum, cpu_sum=lattice.cpu_sum, size_sum=lattice.size_sum,
            unsup_sum=lattice.unsupported_sum, work_acc=work_acc, forced_cpu=forced_cpu, whole_comm=whole_comm,
        ),
        transfers=transfers,
        limits=Limits(n_cpu=n_cpu, n_acc=n_acc, memory=float(w.memory), ub=float(ub), overlap=bool(overlap),
                      ratio=ratio, piece_cap=float(piece_cap)),
        tables=Tables(dp=dp, choice=choice, kind=kind),
        scratch=Scratch(stamp=np.full(N, -1, dtype=np.int64), stack_j=np.zeros(p.n_units + 2, dtype=np.int64),
                        stack_e=np.zeros(p.n_units + 2, dtype=np.int64),
                        stack_x=np.zeros(p.n_units + 2, dtype=np.int64), cnt=np.zeros(n_src, dtype=np.int64),
                        in_s=np.zeros(p.n_units, dtype=np.int8),
                        rel=np.zeros((4, (n_cpu + 1) * (n_acc + 1)), dtype=np.int64)),
        shared=Shared(unit_ptr=sh.ptr, unit_group=sh.group, size=sh.size,
                      count=np.zeros(sh.size.size, dtype=np.int64),
                      whole=whole_ideal_shared(lattice.down_ptr, lattice.down_ideal, lattice.down_unit, sh.ptr,
                                               sh.group, sh.size)),
        anchored=anc,
    )
    return args, dp, choice, kind


def _run_chunks(args: KernelArgs, N: int, deadline: float | None, progress: Any,
                on_chunk: Callable[[], None] | None = None) -> int:
    """The kernel over ideals 1..N-1 in calls of about 20 ms (Ctrl-C and deadlines between them).

    A call is bounded by work (pairs examined plus ideals filled), not by a
    count of ideals: an ideal's cost varies by orders of magnitude along the
    lattice, and a count that was cheap a moment ago once made a call last
    over a second.  The clock is read here only to size the calls (and to
    check ``deadline`` between them).
    """
    from dnnplace.models.paper.solvers.dp.kernel import dp_range

    pairs = 0
    lo, budget = 1, 1024
    while lo < N:
        t = time.perf_counter()
        hi, p = dp_range(lo, N, budget, *args)
        elapsed = time.perf_counter() - t
        pairs += p
        done = p + (hi - lo)
        if elapsed < 0.005:
            budget = min(budget * 2, 1 << 40)
        else:
            budget = max(64, int(done * 0.02 / elapsed))
        lo = hi
        if progress is not None:
            progress(lo, N, "DP over ideals")
        if on_chunk is not None:
            on_chunk()
        if lo < N and expired(deadline):
            raise SolverTimeout(f"dp: time limit reached after {lo:,} of {N:,} ideals; raise --time-limit"
                                " or use --contract-layers / --linearize")
    return pairs


def _backtrack(p: Prepared, lattice: IdealLattice, w: Workload, dp: np.ndarray, choice: np.ndarray,
               kind: np.ndarray, pairs: int) -> DPResult:
    """The optimal chain of pieces, from the full ideal back to the empty one."""
    from dnnplace.models.paper.solvers.dp.kernel import ACC_PIECE, CPU_PIECE, FEWER_ACCS, FEWER_CPUS

    n_cpu, n_acc = w.max_cpus, w.max_accelerators
    full = lattice.full
    value = float(dp[full, n_cpu, n_acc])
    unit_device = np.full(p.n_units, -1, dtype=np.int64)
    if not np.isfinite(value):
        return DPResult(value, unit_device, 0, 0, pairs)
    acc_sets: list[int] = []
    cpu_sets: list[int] = []
    backwards: list[tuple[bool, int]] = []  # (is CPU, index in its list), last piece first
    c, a, cur = n_cpu, n_acc, full
    masks = lattice.masks
    while cur != 0:
        k, j = int(kind[cur, c, a]), int(choice[cur, c, a])
        if k == CPU_PIECE:
            backwards.append((True, len(cpu_sets)))
            cpu_sets.append(masks[cur] & ~masks[j])
            c, cur = c - 1, j
        elif k == ACC_PIECE:
            backwards.append((False, len(acc_sets)))
            acc_sets.append(masks[cur] & ~masks[j])
            a, cur = a - 1, j
        elif k == FEWER_CPUS:
            c -= 1
        elif k == FEWER_ACCS:
            a -= 1
        else:  # pragma: no cover - the kernel always records a choice for finite values
            raise RuntimeError("DP backtracking found no choice")
    pieces = acc_sets[::-1] + cpu_sets[::-1]
    for d, mask in enumerate(pieces):
        for u in _bits(mask):
            unit_device[u] = d
    na, nc = len(acc_sets), len(cpu_sets)
    chain = tuple(na + nc - 1 - i if is_cpu else na - 1 - i for is_cpu, i in reversed(backwards))
    return DPResult(value, unit_device, na, nc, pairs, chain)


def _work_bounds(p: Prepared, lattice: IdealLattice, memory: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-ideal work for the kernel's relevance test.

    Returns the accelerator time of units an accelerator can hold, the CPU
    time of units only a CPU can hold, and the most accelerator time one CPU
    second can stand in for (the largest acc/cpu ratio of a unit).
    """
    capable = p.supported & (p.size + p.shared.unit_bytes() <= memory)
    work = np.where(capable, p.acc_time, 0.0)
    forced = np.where(capable, 0.0, p.cpu_time)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(capable & (p.acc_time > 0), p.acc_time / p.cpu_time, 0.0)
    ratio = float(ratios.max(initial=0.0))
    has = np.diff(lattice.down_ptr) > 0
    first = lattice.down_ptr[:-1]
    parent = np.zeros(lattice.n_ideals, dtype=np.int64)
    unit = np.zeros(lattice.n_ideals, dtype=np.int64)
    parent[has] = lattice.down_ideal[first[has]]
    unit[has] = lattice.down_unit[first[has]]
    work_sum = np.zeros(lattice.n_ideals)
    forced_sum = np.zeros(lattice.n_ideals)
    # ids grow with ideal size, so every parent is filled before its child
    for i in range(1, lattice.n_ideals):
        work_sum[i] = work_sum[parent[i]] + work[unit[i]]
        forced_sum[i] = forced_sum[parent[i]] + forced[unit[i]]
    return work_sum, forced_sum, ratio


def _ptr(keys: np.ndarray, n: int) -> np.ndarray:
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out
