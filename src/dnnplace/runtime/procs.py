"""Start the stage processes of a run: locally (one spawned process per rank) or under ``torchrun``.

Local runs keep to this machine and to their parent:

* every worker asks the kernel to kill it when its parent dies
  (``PR_SET_PDEATHSIG``) and checks that the parent is still the one that
  started it, so killing ``dnnplace run`` -- even with SIGKILL -- leaves no
  stage process behind; with the workers gone the multiprocessing resource
  tracker sees its pipe close and exits too;
* the rendezvous is a file store in a private temporary folder (nothing
  listens on a port) and gloo binds to the loopback interface unless
  ``GLOO_SOCKET_IFNAME`` says otherwise.

Under ``torchrun`` (``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` set) the current
process is one rank: it joins the ``env://`` rendezvous and the results are
gathered on rank 0.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from dnnplace.errors import DnnplaceError


def under_torchrun() -> bool:
    """True when this process is one rank of a ``torchrun`` (or similarly launched) job."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when its parent exits; exit now if the parent is already gone."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _local_worker(rank: int, world: int, store: str, backend: str, parent_pid: int, queue,
                  target: Callable, payload: Any) -> None:
    die_with_parent(parent_pid)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch.distributed as dist

    try:
        dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world)
    except Exception as exc:
        queue.put({"rank": rank, "error": f"rank {rank}: cannot join the process group: {exc}"})
        raise
    try:
        result = target(rank, world, payload)
        queue.put({"rank": rank, **(result or {})})
    except Exception as exc:  # one line for the parent; the traceback goes to this worker's stderr
        queue.put({"rank": rank, "error": f"rank {rank}: {exc.__class__.__name__}: {exc}"})
        raise
    finally:
        try:
            dist.destroy_process_group()
        except Exception:  # pragma: no cover
            pass


def launch_local(target: Callable, world: int, payload: Any, *, backend: str = "gloo",
                 timeout_s: float = 600.0) -> list[dict]:
    """Run ``target(rank, world, payload)`` in ``world`` spawned processes; return their result dicts by rank.

    ``target`` must be a module-level function and return a picklable dict
    (numpy arrays, not tensors) or None.
    """
    import torch.multiprocessing as mp

    tmp = tempfile.mkdtemp(prefix="dnnplace-run-")
    store = os.path.join(tmp, "store")
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=_local_worker, daemon=True,
                         args=(r, world, store, backend, os.getpid(), queue, target, payload))
             for r in range(world)]
    results: dict[int, dict] = {}
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        # read while the workers run: a large message blocks its sender until it is read
        while len(results) < world and time.monotonic() < deadline:
            while not queue.empty() and len(results) < world:
                msg = queue.get()
                results[msg["rank"]] = msg
                if "error" in msg:
                    deadline = min(deadline, time.monotonic() + 5.0)  # let the others report, briefly
            if len(results) < world:
                if not any(p.is_alive() for p in procs) and queue.empty():
                    break
                time.sleep(0.01)
        for p in procs:
            p.join(max(0.5, min(10.0, deadline - time.monotonic())))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        try:
            queue.close()  # its semaphore must not outlive the run ("leaked semaphore" warnings)
        except (AttributeError, OSError):  # pragma: no cover
            pass
        shutil.rmtree(tmp, ignore_errors=True)
    errors = [results[r]["error"] for r in sorted(results) if "error" in results[r]]
    if errors:
        raise DnnplaceError(f"pipeline stage failed: {errors[0]}")
    if len(results) < world:
        codes = [p.exitcode for p in procs]
        if time.monotonic() < deadline:  # they all exited without a result: not a timeout
            raise DnnplaceError(f"the pipeline processes exited without a result (exit codes {codes}); their"
                                " stderr says why (called from a script: is its code under"
                                " `if __name__ == '__main__':`? the stage processes are spawned)")
        raise DnnplaceError(f"the pipeline processes did not finish in {timeout_s:g} s (exit codes {codes})")
    return [results[r] for r in range(world)]


def launch_torchrun(target: Callable, world: int, payload: Any, *, backend: str = "gloo") -> list[dict] | None:
    """Run this process's rank of ``target`` under torchrun; rank 0 gets every rank's result, the others None."""
    import torch.distributed as dist

    die_with_parent(os.getppid())  # the torchrun agent: if it is killed, so is this rank
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if size != world:
        raise DnnplaceError(f"this run needs {world} processes (one per stage); torchrun started {size}")
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=size)
    try:
        try:
            result = {"rank": rank, **(target(rank, world, payload) or {})}
        except Exception as exc:
            result = {"rank": rank, "error": f"rank {rank}: {exc.__class__.__name__}: {exc}"}
        gathered: list[Any] | None = [None] * size if rank == 0 else None  # None off rank 0, as torch asks
        if backend == "nccl":  # object collectives under nccl need the current device set
            import torch

            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.gather_object(result, gathered, dst=0)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        if "error" in result:
            raise DnnplaceError(f"pipeline stage failed: {result['error']}")
        return None
    assert gathered is not None
    errors = [g["error"] for g in gathered if "error" in g]
    if errors:
        raise DnnplaceError(f"pipeline stage failed: {errors[0]}")
    return sorted(gathered, key=lambda g: g["rank"])


def launch(target: Callable, world: int, payload: Any, *, backend: str = "gloo",
           timeout_s: float = 600.0) -> list[dict] | None:
    """Local processes, or this rank under torchrun."""
    if under_torchrun():
        return launch_torchrun(target, world, payload, backend=backend)
    return launch_local(target, world, payload, backend=backend, timeout_s=timeout_s)
