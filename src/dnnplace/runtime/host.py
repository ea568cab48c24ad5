"""What every worker process asks of its host: inputs per microbatch, a core of its own, run-queue time."""

from __future__ import annotations


def microbatch(inputs: tuple, m: int) -> tuple:
    """Deterministic, distinct inputs for microbatch ``m`` (the same in forward runs and training)."""
    return tuple(t + 0.01 * m if t.is_floating_point() else t for t in inputs)


def microbatch_kwargs(kwargs: dict, m: int) -> dict:
    """The keyword inputs of microbatch ``m``: each tensor changed as :func:`microbatch` changes it, so that the
    unsplit ``model(*args, **kwargs)`` sees what the stages see in the traced graph's flattened inputs."""
    return {k: (v + 0.01 * m if v is not None and v.is_floating_point() else v) for k, v in kwargs.items()}


def pin(rank: int, n: int) -> None:
    """Bind this worker to a core of its own when there are enough: one core per stage, as the cost model assumes."""
    import os

    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if rank < n and n <= len(cores):
        os.sched_setaffinity(0, {cores[rank]})  # one core per stage, as the cost model assumes


def runqueue_s() -> float:
    """Seconds this thread has spent runnable but waiting for a CPU (Linux schedstat; 0 elsewhere)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):  # pragma: no cover
        return 0.0
