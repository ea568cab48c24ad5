"""Megatron's pipeline schedules, simulated task by task: 1F1B and interleaved 1F1B.

The LLM planner prices a step with a closed form (the bottleneck rank runs every
micro-batch, the fill and drain cost the other ranks' work once, cut by the number
of chunks per rank).  This simulation runs the schedule itself -- each rank's task
order exactly as Megatron-Core's ``forward_backward_pipelining_with_interleaving``
issues it, every task waiting for its inputs -- so that the closed form can be
checked against it and a plan's timeline drawn.

Virtual stage ``s`` (``0 .. p*v - 1``, model order) runs on rank ``s % p`` as that
rank's chunk ``s // p``.  Micro-batch ``mb`` flows forward through virtual stages
``0 .. p*v - 1`` and backward in reverse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dnnplace.core.schedule import megatron_rank
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.evaluation.schedule import sends

MAX_TASKS = 2_000_000  # tasks simulated at most (p * v * m * 2): a few seconds of Python


@dataclass(frozen=True)
class Task:
    """One forward or backward pass of one micro-batch through one virtual stage."""

    rank: int
    stage: int  # virtual stage (model order)
    microbatch: int
    backward: bool
    start: float
    end: float


@dataclass(frozen=True)
class ScheduleRun:
    """The simulated step: its makespan, each rank's busy time, and every task (for a timeline)."""

    makespan: float
    busy: tuple[float, ...]  # per rank
    tasks: tuple[Task, ...] = field(repr=False)

    @property
    def bubble_fraction(self) -> float:
        """The bubble over the bottleneck rank's work: makespan / its busy time - 1 ((p-1)/(v m) when uniform)."""
        work = max(self.busy)
        return self.makespan / work - 1.0 if work > 0 else 0.0

    def chrome_trace(self) -> dict[str, Any]:
        """Chrome trace-event JSON (microseconds), one row per pipeline rank."""
        events = [{"name": f"{'B' if t.backward else 'F'}{t.microbatch} s{t.stage}", "ph": "X", "pid": 0,
                   "tid": t.rank, "ts": 1e6 * t.start, "dur": 1e6 * (t.end - t.start),
                   "args": {"stage": t.stage, "microbatch": t.microbatch}} for t in self.tasks]
        return {"traceEvents": events, "displayTimeUnit": "ms"}


def rank_order(rank: int, pp: int, vp: int, m: int) -> list[tuple[bool, int, int]]:
    """Rank ``rank``'s tasks in issue order: (backward, micro-batch, chunk), as Megatron-Core issues them
    (the shared schedule's :func:`~dnnplace.core.schedule.megatron_rank`, the order the evaluator prices)."""
    return [(a.kind == "B", a.microbatch, a.chunk) for a in megatron_rank(rank, pp, vp, m)]


def simulate_schedule(pp: int, vp: int, m: int, fwd: list[float], bwd: list[float], p2p: float = 0.0) -> ScheduleRun:
    """Run the schedule with forward/backward seconds per virtual stage and ``p2p`` seconds per transfer.

    A task starts when its rank is free and its input has arrived (``p2p`` after the
    producing task ended, on another rank).  Interleaved schedules overlap the transfers with
    compute (Megatron's ``overlap_p2p_comm``); 1F1B's send/recv block, so there the producing
    rank is also busy for the ``p2p`` seconds of each send.  Raises a one-line error for a schedule
    Megatron refuses (interleaving needs ``m % p == 0``) or one too large to simulate.
    """
    n_stages = pp * vp
    if len(fwd) != n_stages or len(bwd) != n_stages:
        raise DnnplaceError(f"need {n_stages} forward and backward times (pp x vp), got {len(fwd)}, {len(bwd)}")
    if min(pp, vp, m) < 1:
        raise DnnplaceError("pp, vp and the number of micro-batches must be at least 1")
    if vp > 1 and m % pp:
        raise DnnplaceError(f"interleaving needs the micro-batches ({m}) to be a multiple of pp ({pp})")
    if 2 * n_stages * m > MAX_TASKS:
        raise DnnplaceError(f"{2 * n_stages * m:,} tasks is too many to simulate (at most {MAX_TASKS:,})")
    orders = [rank_order(r, pp, vp, m) for r in range(pp)]
    position = [0] * pp
    free = [0.0] * pp
    done: dict[tuple[bool, int, int], float] = {}  # (backward, micro-batch, stage) -> end time
    tasks: list[Task] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(pp):
            while position[r] < len(orders[r]):
                is_bwd, mb, chunk = orders[r][position[r]]
                s = chunk * pp + r
                if not is_bwd:
                    dep = (False, mb, s - 1) if s > 0 else None
                else:
                    dep = (True, mb, s + 1) if s < n_stages - 1 else (False, mb, s)
                if dep is not None and dep not in done:
                    break
                ready = 0.0 if dep is None else done[dep] + (p2p if dep[2] % pp != r else 0.0)
                if is_bwd and (False, mb, s) not in done:
                    break
                start = max(free[r], ready)
                end = start + (bwd[s] if is_bwd else fwd[s])
                done[(is_bwd, mb, s)] = end
                free[r] = end + (p2p if vp == 1 and sends(pp, vp, s, is_bwd) else 0.0)
                tasks.append(Task(r, s, mb, is_bwd, start, end))
                position[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - the orders above never deadlock
            raise RuntimeError("internal error: the pipeline schedule deadlocked")
    busy = tuple(sum((bwd[t.stage] if t.backward else fwd[t.stage]) for t in tasks if t.rank == r)
                 for r in range(pp))
    return ScheduleRun(max(t.end for t in tasks), busy, tuple(tasks))
