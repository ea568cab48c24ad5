"""Simulate microbatches flowing through a placed pipeline under SPEC's cost model.

Each device runs, per microbatch, a forward task (and for training a backward
task) whose duration is the device's forward (backward) load from the
evaluator: received transfers, compute, sent transfers.  A task starts when
its device is free and every task it depends on for that microbatch is done:
forward needs the forward of every device that feeds it; backward needs the
backward of every device it feeds and any forward whose output it stashed.
Devices are ordered by depth in the DAG of device sets.

Schedules: ``gpipe`` runs all forwards, then all backwards (a flush per
minibatch): time per sample = makespan / N.  ``1f1b`` (PipeDream) warms up
with (stages after it) forwards, then alternates one forward and one backward:
time per sample is the steady-state spacing of completed microbatches
(between warm-up and cool-down), which equals the max-load once the pipeline
is full.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from dnnplace.core.schedule import SCHEDULES, Action, Schedule, by_name
from dnnplace.errors import DnnplaceError
from dnnplace.models.paper.evaluation import Evaluation, evaluate
from dnnplace.models.paper.evaluation.evaluator import combine
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload
from dnnplace.utils.graph import CYCLE_MESSAGE, stage_depths, topological_order

__all__ = ["SCHEDULES", "Simulation", "Task", "simulate"]
#: The simulator keeps every task in a graph (about 1.5 KB each): more than this many would need
#: gigabytes, so they are refused up front (devices x microbatches, twice that for training).
MAX_TASKS = 1_000_000
#: A Chrome trace holds up to three events per task, each a dict (and a line of JSON): bounded likewise.
MAX_TRACE_TASKS = 200_000


@dataclass(frozen=True)
class Task:
    """One forward or backward step of one microbatch on one device."""

    device: int  # index into Simulation.devices
    micro: int
    kind: str  # "F" or "B"
    start: float
    parts: tuple[float, float, float]  # received, compute, sent
    overlap: bool = False

    @property
    def duration(self) -> float:
        r, c, s = self.parts
        return float(combine(c, r + s, self.overlap))

    @property
    def end(self) -> float:
        return self.start + self.duration

    @property
    def action(self) -> Action:
        """The schedule's action this task times."""
        return Action(self.kind, self.micro)


@dataclass(frozen=True)
class Simulation:
    """The simulated timeline and the numbers people ask of it."""

    schedule: str
    microbatches: int
    devices: tuple[str, ...]
    tasks: tuple[Task, ...]
    makespan: float
    time_per_sample: float
    max_load: float
    evaluation: Evaluation = field(repr=False)
    order: Schedule | None = field(default=None, repr=False)  # what each device ran, in order

    @property
    def throughput(self) -> float:
        return 1.0 / self.time_per_sample if self.time_per_sample > 0 else float("inf")

    @property
    def busy(self) -> np.ndarray:
        out = np.zeros(len(self.devices))
        for t in self.tasks:
            out[t.device] += t.duration
        return out

    @property
    def bubble_fraction(self) -> float:
        """Share of device-time spent idle between the first start and the last end."""
        if self.makespan <= 0 or not self.devices:
            return 0.0
        return float(1.0 - self.busy.sum() / (len(self.devices) * self.makespan))

    def to_dict(self) -> dict:
        busy = self.busy
        return {
            "schedule": self.schedule,
            "microbatches": self.microbatches,
            "time_per_sample": self.time_per_sample,
            "throughput": self.throughput,
            "makespan": self.makespan,
            "makespan_per_sample": self.makespan / self.microbatches,
            "max_load": self.max_load,
            "bubble_fraction": self.bubble_fraction,
            "devices": [{"device": d, "busy": float(b),
                         "busy_share": float(b / self.makespan) if self.makespan else 0.0}
                        for d, b in zip(self.devices, busy)],
        }

    def chrome_trace(self, time_unit_us: float = 1000.0) -> dict:
        """Trace-event JSON (Perfetto / chrome://tracing): one track per device.

        Times in workload units (the paper's files use milliseconds) are
        scaled by ``time_unit_us`` to microseconds.
        """
        if len(self.tasks) > MAX_TRACE_TASKS:
            per_micro = max(1, len(self.tasks) // self.microbatches)
            raise DnnplaceError(
                f"a trace of {len(self.tasks):,} tasks is more than the limit of {MAX_TRACE_TASKS:,};"
                f" use --microbatches {max(1, MAX_TRACE_TASKS // per_micro):,} or fewer with --trace"
            )
        events: list[dict] = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
                               "args": {"name": f"dnnplace pipeline ({self.schedule})"}}]
        for i, d in enumerate(self.devices):
            events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": i, "args": {"name": d}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": i, "args": {"sort_index": i}})
        body = []
        for t in self.tasks:
            r, c, s = t.parts
            phase = "forward" if t.kind == "F" else "backward"
            if t.overlap:
                pieces = [(0.0, c, f"{t.kind}{t.micro}", phase)]
                pieces += [(0.0, r + s, f"comm {t.kind}{t.micro}", "communication")] if r + s > 0 else []
            else:
                pieces = []
                if r > 0:
                    pieces.append((0.0, r, f"recv {t.kind}{t.micro}", "communication"))
                pieces.append((r, c, f"{t.kind}{t.micro}", phase))
                if s > 0:
                    pieces.append((r + c, s, f"send {t.kind}{t.micro}", "communication"))
            for off, dur, name, cat in pieces:
                tid = t.device if not (t.overlap and cat == "communication") else len(self.devices) + t.device
                ts = round((t.start + off) * time_unit_us, 3)
                end = round((t.start + off + dur) * time_unit_us, 3)  # rounded ends keep tracks monotone
                body.append({"name": name, "cat": cat, "ph": "X", "pid": 1, "tid": tid,
                             "ts": ts, "dur": round(end - ts, 3),
                             "args": {"microbatch": t.micro, "device": self.devices[t.device]}})
        body.sort(key=lambda e: (e["tid"], e["ts"]))
        return {"traceEvents": events + body, "displayTimeUnit": "ms"}


def simulate(w: Workload, split: Split, *, schedule: str = "1f1b", microbatches: int = 32,
             overlap_comm: bool = False) -> Simulation:
    """Run the event simulation of ``split`` for ``microbatches`` samples."""
    if schedule not in SCHEDULES:
        raise DnnplaceError(f"unknown schedule '{schedule}'; choose one of: {', '.join(SCHEDULES)}")
    if microbatches < 1:
        raise DnnplaceError("--microbatches must be at least 1")
    ev = evaluate(w, split, overlap_comm=overlap_comm)
    if any(v.kind in ("unplaced", "duplicate") for v in ev.violations):
        raise DnnplaceError("the split does not place every node exactly once; cannot simulate it")
    used = [i for i, d in enumerate(ev.devices) if d.nodes]
    _check_size(len(used), microbatches, w.is_training)
    index = {d: i for i, d in enumerate(used)}
    dev = np.array([index.get(int(d), -1) for d in ev.assignment.device])
    fw_deps, bw_deps, stash = _dependencies(w, dev)
    depth = stage_depths(len(used), fw_deps)
    stages = int(depth.max()) + 1 if len(used) else 0
    order = by_name(schedule, len(used), microbatches, after=[stages - 1 - int(d) for d in depth],
                    training=w.is_training) if used else None
    parts = {"F": [ev.devices[d].forward_parts for d in used], "B": [ev.devices[d].backward_parts for d in used]}
    seqs = order.ranks if order is not None else ()
    tasks = _run_tasks(seqs, _task_deps(seqs, microbatches, fw_deps, bw_deps, stash, w.is_training), parts,
                       overlap_comm)
    makespan = max((t.end for t in tasks), default=0.0)
    if schedule == "gpipe" or microbatches == 1:
        tps = makespan / microbatches
    else:
        tps = _steady_spacing(tasks, microbatches, stages, "B" if w.is_training else "F")
    names = tuple(ev.devices[d].name for d in used)
    return Simulation(schedule, microbatches, names, tuple(sorted(tasks, key=lambda t: (t.device, t.start))),
                      makespan, tps, ev.max_load, ev, order)


def _check_size(devices: int, microbatches: int, training: bool) -> None:
    per_micro = devices * (2 if training else 1)
    if per_micro * microbatches > MAX_TASKS:
        raise DnnplaceError(
            f"{microbatches:,} microbatches on {devices} devices make {per_micro * microbatches:,} tasks,"
            f" more than the simulator's limit of {MAX_TASKS:,} (about 1.5 GB of memory);"
            f" use --microbatches {max(1, MAX_TASKS // max(per_micro, 1)):,} or fewer"
        )


TaskKey = tuple[int, str, int]  # (device, "F" or "B", microbatch)


def _task_deps(order: Sequence[Sequence[Action]], microbatches: int, fw_deps: set, bw_deps: set, stash: set,
               training: bool) -> list[tuple[TaskKey, TaskKey]]:
    """Each device's own order, then the data dependencies of every microbatch."""
    deps: list[tuple[TaskKey, TaskKey]] = []
    for i, seq in enumerate(order):
        deps += [((i, a.kind, a.microbatch), (i, b.kind, b.microbatch)) for a, b in zip(seq, seq[1:])]
    for m in range(microbatches):
        deps += [((a, "F", m), (b, "F", m)) for a, b in fw_deps]
        if training:
            deps += [((a, "B", m), (b, "B", m)) for a, b in bw_deps]
            deps += [((a, "F", m), (b, "B", m)) for a, b in stash]
    return deps


def _run_tasks(order: Sequence[Sequence[Action]], deps: list[tuple[TaskKey, TaskKey]], parts: dict,
               overlap_comm: bool) -> list[Task]:
    """Start every task as soon as its device order and its inputs allow (longest path)."""
    keys = [(i, a.kind, a.microbatch) for i, seq in enumerate(order) for a in seq]
    number = {k: j for j, k in enumerate(keys)}
    succ: list[list[int]] = [[] for _ in keys]
    for a, b in deps:
        succ[number[a]].append(number[b])
    topo = topological_order(len(keys), succ)
    if len(topo) < len(keys):
        raise DnnplaceError(CYCLE_MESSAGE)
    start = np.zeros(len(keys))
    tasks: list[Task] = []
    for j in topo.tolist():
        i, kind, m = keys[j]
        task = Task(i, m, kind, float(start[j]), parts[kind][i], overlap_comm)
        tasks.append(task)
        for b in succ[j]:
            start[b] = max(float(start[b]), task.end)
    return tasks


def _steady_spacing(tasks: list[Task], microbatches: int, stages: int, last_kind: str) -> float:
    """Time between completed microbatches once the pipeline is full and before it drains."""
    done = np.zeros(microbatches)
    for t in tasks:
        if t.kind == last_kind:
            done[t.micro] = max(done[t.micro], t.end)
    # warm-up and cool-down each last at most one microbatch per stage
    edge = min(stages, (microbatches - 1) // 2)
    first, last = edge, microbatches - 1 - edge
    if last <= first:
        first, last = 0, microbatches - 1
    return float((done[last] - done[first]) / (last - first))


def _dependencies(w: Workload, dev: np.ndarray) -> tuple[set, set, set]:
    fw, bw = ~w.backward, w.backward
    a, b = dev[w.edge_src], dev[w.edge_dst]
    cross = a != b
    s, d = w.edge_src, w.edge_dst

    def pairs(mask: np.ndarray) -> set[tuple[int, int]]:
        return set(zip(a[mask].tolist(), b[mask].tolist()))

    return (pairs(cross & fw[s] & fw[d]), pairs(cross & bw[s] & bw[d]), pairs(cross & fw[s] & bw[d]))

