"""Point-to-point transfers between stage processes: sends that never block, receives posted ahead.

Gloo moves a message only once its receive is posted.  A stage that posted
its receives when a task started put every cut edge's transfer on the
critical path: a 1F1B U-Net stage waited about 3 ms per microbatch for the
skip tensors while the sender's transport thread, sharing its core with
compute, woke up to send them.  Posted a few tasks ahead, the transfers
overlap the tasks before (as Megatron-LM overlaps its pipeline's p2p with
compute).  Booleans travel as uint8 (not every backend sends bool).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Tasks (microbatches for forward runs) ahead whose receives a stage posts before computing the current one.
PREFETCH = 2


def prefetch_depth(*, both_directions: bool) -> int:
    """How many tasks ahead to post receives: :data:`PREFETCH`, or 0 where posting ahead could deadlock.

    NCCL runs a pair of ranks' sends and receives on one stream, in the order they were issued: a receive
    posted ahead (a gradient from the next stage) would hold back a send issued after it (the activation
    that stage needs first).  Gloo progresses each message on its own.  Forward runs only send to later
    stages and receive from earlier ones, so nothing can wait behind a receive there."""
    import torch.distributed as dist

    return 0 if both_directions and dist.get_backend() == "nccl" else PREFETCH


def stage_device() -> Any:
    """Where this rank's tensors live: its GPU under nccl, else the CPU."""
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", dist.get_rank() % torch.cuda.device_count())
    return torch.device("cpu")


class Posted:
    """One receive posted now and read later with :meth:`value`."""

    def __init__(self, shape: Any, dtype: Any, src: int, tag: int, device: Any) -> None:
        import torch
        import torch.distributed as dist

        self.bool = dtype == torch.bool
        self.buf = torch.empty(shape, dtype=torch.uint8 if self.bool else dtype, device=device)
        work = dist.irecv(self.buf, src=src, tag=tag)
        assert work is not None  # only None for a rank outside the group, which a stage never is
        self.work = work

    def value(self) -> Any:
        """Wait for the message and return it."""
        import torch

        self.work.wait()
        return self.buf.to(torch.bool) if self.bool else self.buf


class Prefetcher:
    """Posts each task's receives ``depth`` tasks ahead of it and hands them over when the task runs.

    ``receives_of(i)`` lists task i's receives as ``(value name, source rank, tag)``, in the order their
    producers send them; :meth:`take` returns them keyed by that triple.
    """

    def __init__(self, receives_of: Callable[[int], list[tuple[str, int, int]]], tasks: int, depth: int,
                 shapes: dict[str, tuple[Any, Any]], device: Any) -> None:
        self.receives_of, self.tasks, self.depth = receives_of, tasks, depth
        self.shapes, self.device = shapes, device
        self.posted: dict[int, dict[tuple[str, int, int], Posted]] = {}

    def take(self, i: int) -> dict[tuple[str, int, int], Posted]:
        """Task i's receives (posted now if they were not yet), after posting those of the next ``depth``."""
        for ahead in range(i, min(i + 1 + self.depth, self.tasks)):
            if ahead not in self.posted:
                self.posted[ahead] = {(v, src, tag): Posted(*self.shapes[v], src, tag, self.device)
                                      for v, src, tag in self.receives_of(ahead)}
        return self.posted.pop(i)


def isend(value: Any, dst: int, tag: int) -> tuple[Any, Any]:
    """Post a send of ``value`` and return ``(work, tensor sent)``: the tensor must live until the work is done."""
    import torch
    import torch.distributed as dist

    if value.dtype == torch.bool:
        value = value.to(torch.uint8)
    value = value.detach().contiguous()
    return dist.isend(value, dst=dst, tag=tag), value
