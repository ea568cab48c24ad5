"""The optimal contiguous-split DP (SPEC "Dynamic program") behind the solver interface.

Steps: prepare units; solve the *linearised* unit chain first (tiny lattice)
to get an upper bound; then run the exact DP over all ideals with that bound,
which lets the kernel skip sets that are too slow to matter.  The result is
exact: the bound only discards candidates whose load exceeds a value that an
actual contiguous split already achieves.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from dnnplace.errors import InfeasibleError, SolverTimeout
from dnnplace.model.split import Split
from dnnplace.model.workload import Workload
from dnnplace.prepare.contract import Prepared, linearized, merge_free_units, prepare
from dnnplace.solvers.base import SolveOptions, SolverOutput
from dnnplace.solvers.dp.ideals import IdealLattice, enumerate_ideals


@dataclass(frozen=True)
class DPResult:
    """The DP's optimum and the per-unit device it chose (-1: none)."""

    value: float
    unit_device: np.ndarray  # accelerators 0..A-1 in pipeline order, then CPUs
    n_acc_used: int
    n_cpu_used: int
    pairs: int


class DPSolver:
    """Max-load-optimal contiguous split over the ideal lattice."""

    name = "dp"
    objectives = ("throughput",)
    summary = "optimal contiguous split (dynamic program over ideals)"

    def solve(self, workload: Workload, options: SolveOptions) -> SolverOutput:
        return solve_dp(workload, options)


def solve_dp(workload: Workload, options: SolveOptions, extra_groups: np.ndarray | None = None) -> SolverOutput:
    """Prepare, bound, and run the exact DP; ``extra_groups`` fuses further nodes."""
    start = time.perf_counter()
    deadline = None if options.time_limit is None else start + options.time_limit
    p = merge_free_units(
        prepare(workload, contract_layers=options.contract_layers, linearize=options.linearize,
                extra_groups=extra_groups)
    )
    ub = np.inf
    stats: dict[str, float | int] = {"units": p.n_units}
    if not options.linearize:
        chain = linearized(p)
        first = run_dp(chain, enumerate_ideals(chain, options.max_ideals), workload,
                       overlap=options.overlap_comm, ub=np.inf, deadline=deadline)
        if np.isfinite(first.value):
            ub = first.value * (1 + 1e-9) + 1e-12
        stats["upper_bound"] = float(first.value)
    lattice = enumerate_ideals(p, options.max_ideals)
    stats["ideals"] = lattice.n_ideals
    result = run_dp(p, lattice, workload, overlap=options.overlap_comm, ub=ub,
                    deadline=deadline, progress=options.progress)
    stats["pairs_examined"] = result.pairs
    if not np.isfinite(result.value):
        raise InfeasibleError(
            f"no contiguous split fits: with {workload.max_accelerators} accelerators of"
            f" {workload.memory:.6g} bytes and {workload.max_cpus} CPU cores some contiguous"
            " piece always exceeds memory or holds an unsupported node"
        )
    device = result.unit_device[p.unit_of]
    split = Split.from_assignment(workload.node_ids, device, result.n_acc_used, result.n_cpu_used)
    stats["dp_value"] = float(result.value)
    return SolverOutput(split=split, status="optimal", bound=float(result.value), stats=stats)


def run_dp(
    p: Prepared,
    lattice: IdealLattice,
    w: Workload,
    *,
    overlap: bool = False,
    ub: float = np.inf,
    deadline: float | None = None,
    progress=None,
) -> DPResult:
    """Run the kernel over the whole lattice and backtrack the optimal chain."""
    from dnnplace.solvers.dp.kernel import dp_range

    n_cpu, n_acc = w.max_cpus, w.max_accelerators
    N = lattice.n_ideals
    dp = np.empty((N, n_cpu + 1, n_acc + 1))
    dp[0] = 0.0
    choice = np.zeros((N, n_cpu + 1, n_acc + 1), dtype=np.int64)
    kind = np.zeros((N, n_cpu + 1, n_acc + 1), dtype=np.int8)
    src = p.comm
    n_src = src.home.size
    home_order = np.argsort(src.home, kind="stable")
    home_ptr = _ptr(src.home, p.n_units)
    n_tgt = np.diff(src.target_ptr)
    tgt_owner = np.repeat(np.arange(n_src, dtype=np.int64), n_tgt)
    tgt_order = np.argsort(src.target_idx, kind="stable")
    tgt_ptr = _ptr(src.target_idx, p.n_units)
    args = (
        lattice.down_ptr, lattice.down_ideal, lattice.down_unit,
        lattice.acc_sum, lattice.cpu_sum, lattice.size_sum, lattice.unsupported_sum,
        *_work_bounds(p, lattice, float(w.memory)),
        home_ptr, home_order.astype(np.int64), tgt_ptr, tgt_owner[tgt_order], src.home,
        src.cost, n_tgt.astype(np.int64),
        n_cpu, n_acc, float(w.memory), float(ub), bool(overlap),
        dp, choice, kind,
        np.full(N, -1, dtype=np.int64), np.zeros(n_src, dtype=np.int64),
        np.zeros(p.n_units, dtype=np.int8),
        np.zeros(p.n_units + 2, dtype=np.int64), np.zeros(p.n_units + 2, dtype=np.int64),
        np.zeros(p.n_units + 2, dtype=np.int64),
        np.zeros((4, (n_cpu + 1) * (n_acc + 1)), dtype=np.int64),
    )
    pairs = 0
    lo, step = 1, 16
    while lo < N:
        hi = min(N, lo + step)
        t = time.perf_counter()
        pairs += dp_range(lo, hi, *args)
        elapsed = time.perf_counter() - t
        if elapsed < 0.05:
            step *= 2
        elif elapsed > 0.2 and step > 1:
            step //= 2
        lo = hi
        if progress is not None:
            progress(lo, N, "DP over ideals")
        if deadline is not None and time.perf_counter() > deadline and lo < N:
            raise SolverTimeout(f"dp: time limit reached after {lo:,} of {N:,} ideals; raise --time-limit"
                                " or use --contract-layers / --linearize")
    full = lattice.full
    value = float(dp[full, n_cpu, n_acc])
    unit_device = np.full(p.n_units, -1, dtype=np.int64)
    if not np.isfinite(value):
        return DPResult(value, unit_device, 0, 0, pairs)
    acc_sets: list[int] = []
    cpu_sets: list[int] = []
    c, a, cur = n_cpu, n_acc, full
    masks = lattice.masks
    while cur != 0:
        k, j = int(kind[cur, c, a]), int(choice[cur, c, a])
        if k == 1:
            cpu_sets.append(masks[cur] & ~masks[j])
            c, cur = c - 1, j
        elif k == 2:
            acc_sets.append(masks[cur] & ~masks[j])
            a, cur = a - 1, j
        elif k == 3:
            c -= 1
        elif k == 4:
            a -= 1
        else:  # pragma: no cover - the kernel always records a choice for finite values
            raise RuntimeError("DP backtracking found no choice")
    pieces = acc_sets[::-1] + cpu_sets[::-1]
    for d, mask in enumerate(pieces):
        for u in _bits(mask):
            unit_device[u] = d
    return DPResult(value, unit_device, len(acc_sets), len(cpu_sets), pairs)


def _work_bounds(p: Prepared, lattice: IdealLattice, memory: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-ideal work for the kernel's relevance test.

    Returns the accelerator time of units an accelerator can hold, the CPU
    time of units only a CPU can hold, and the most accelerator time one CPU
    second can stand in for (the largest acc/cpu ratio of a unit).
    """
    capable = p.supported & (p.size <= memory)
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
