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

import math
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from dnnplace.core.schedule import megatron_rank
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.evaluation.schedule import sends

#: Tasks simulated at most (p * v * m * 2): a few seconds of Python.  The tasks are kept in flat arrays
#: (about 30 bytes each) and a trace is streamed to its file, so a run at this limit stays near 100 MB
#: of memory (it took 6.4 GB as objects: 1.92 M tasks, issue 45; benchmarks/trace_memory.py measures it).
MAX_TASKS = 2_000_000
_TRACE_CHUNK = 5_000  # trace events per written piece


@dataclass(frozen=True, slots=True)
class Task:
    """One forward or backward pass of one micro-batch through one virtual stage."""

    rank: int
    stage: int  # virtual stage (model order)
    microbatch: int
    backward: bool
    start: float
    end: float


@dataclass(frozen=True)
class TaskColumns(Sequence[Task]):
    """The simulated tasks as columns (flat arrays), read back one :class:`Task` at a time: two million
    task objects took gigabytes, these columns take tens of megabytes."""

    rank: array
    stage: array
    microbatch: array
    backward: array
    start: array
    end: array

    @staticmethod
    def empty() -> TaskColumns:
        return TaskColumns(array("i"), array("i"), array("i"), array("b"), array("d"), array("d"))

    def append(self, t: Task) -> None:
        self.rank.append(t.rank)
        self.stage.append(t.stage)
        self.microbatch.append(t.microbatch)
        self.backward.append(t.backward)
        self.start.append(t.start)
        self.end.append(t.end)

    def __len__(self) -> int:
        return len(self.rank)

    @overload
    def __getitem__(self, i: int) -> Task: ...

    @overload
    def __getitem__(self, i: slice) -> list[Task]: ...

    def __getitem__(self, i: int | slice) -> Task | list[Task]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return Task(self.rank[i], self.stage[i], self.microbatch[i], bool(self.backward[i]), self.start[i],
                    self.end[i])

    def __iter__(self) -> Iterator[Task]:
        for i in range(len(self)):
            yield self[i]


def _num(x: float) -> str:
    """A JSON number (standard JSON: a non-finite one is null, as json_safe writes it)."""
    return repr(x) if math.isfinite(x) else "null"


@dataclass(frozen=True)
class ScheduleRun:
    """The simulated step: its makespan, each rank's busy time, and every task (for a timeline)."""

    makespan: float
    busy: tuple[float, ...]  # per rank
    tasks: Sequence[Task] = field(repr=False)

    @property
    def bubble_fraction(self) -> float:
        """The bubble over the bottleneck rank's work: makespan / its busy time - 1 ((p-1)/(v m) when uniform),
        never below 0 (a makespan equal to the work can round a few ulps below it: -7e-15, issue 45)."""
        work = max(self.busy)
        return max(self.makespan / work - 1.0, 0.0) if work > 0 else 0.0

    def chrome_trace(self) -> dict[str, Any]:
        """Chrome trace-event JSON (microseconds), one row per pipeline rank."""
        events = [{"name": f"{'B' if t.backward else 'F'}{t.microbatch} s{t.stage}", "ph": "X", "pid": 0,
                   "tid": t.rank, "ts": 1e6 * t.start, "dur": 1e6 * (t.end - t.start),
                   "args": {"stage": t.stage, "microbatch": t.microbatch}} for t in self.tasks]
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def trace_chunks(self) -> Iterator[str]:
        """:meth:`chrome_trace` as JSON text, piece by piece (one event a line), to stream into a file: the
        whole document never sits in memory (a trace at the task limit is hundreds of megabytes)."""
        yield '{"traceEvents": ['
        n = len(self.tasks)
        cols = self.tasks if isinstance(self.tasks, TaskColumns) else None
        for lo in range(0, n, _TRACE_CHUNK):
            lines = []
            for i in range(lo, min(lo + _TRACE_CHUNK, n)):
                t = cols[i] if cols is not None else self.tasks[i]
                lines.append(f'{"," if i else ""}\n{{"name": "{"B" if t.backward else "F"}{t.microbatch} s{t.stage}",'
                             f' "ph": "X", "pid": 0, "tid": {t.rank}, "ts": {_num(1e6 * t.start)},'
                             f' "dur": {_num(1e6 * (t.end - t.start))}, "args": {{"stage": {t.stage},'
                             f' "microbatch": {t.microbatch}}}}}')
            yield "".join(lines)
        yield '\n], "displayTimeUnit": "ms"}\n'


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
    # Flat arrays, not objects (2 M tasks as tuples, dicts and dataclasses took 6.4 GB): each rank's order
    # packed as ((micro-batch * vp + chunk) * 2 + backward), end times indexed by micro-batch * stages + stage.
    orders = [array("q", (((mb * vp + chunk) << 1) | is_bwd for is_bwd, mb, chunk in rank_order(r, pp, vp, m)))
              for r in range(pp)]
    position = [0] * pp
    free = [0.0] * pp
    busy = [0.0] * pp
    ended = (array("d", [-1.0]) * (m * n_stages), array("d", [-1.0]) * (m * n_stages))  # fwd, bwd; -1: not yet
    tasks = TaskColumns.empty()
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(pp):
            order = orders[r]
            while position[r] < len(order):
                code = order[position[r]]
                is_bwd, (mb, chunk) = bool(code & 1), divmod(code >> 1, vp)
                s = chunk * pp + r
                if not is_bwd:
                    dep = (False, s - 1) if s > 0 else None
                else:
                    dep = (True, s + 1) if s < n_stages - 1 else (False, s)
                dep_end = 0.0 if dep is None else ended[dep[0]][mb * n_stages + dep[1]]
                if dep_end < 0 or (is_bwd and ended[0][mb * n_stages + s] < 0):
                    break
                ready = 0.0 if dep is None else dep_end + (p2p if dep[1] % pp != r else 0.0)
                start = max(free[r], ready)
                took = bwd[s] if is_bwd else fwd[s]
                end = start + took
                ended[is_bwd][mb * n_stages + s] = end
                free[r] = end + (p2p if vp == 1 and sends(pp, vp, s, is_bwd) else 0.0)
                busy[r] += took
                tasks.append(Task(r, s, mb, is_bwd, start, end))
                position[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - the orders above never deadlock
            raise RuntimeError("internal error: the pipeline schedule deadlocked")
    return ScheduleRun(max(tasks.end), tuple(busy), tasks)
