"""The IP methods turn seconds into an absolute deadline once; the solving functions read only that deadline."""

from __future__ import annotations

import time

import pytest

from dnnplace.core.solver import RunContext
from dnnplace.errors import SolverTimeout
from dnnplace.models.paper.paper_json import workload_from_records
from dnnplace.models.paper.solvers.ip.latency import LatencyIP, solve_latency_ip
from dnnplace.models.paper.solvers.ip.throughput import solve_throughput_ip

pytest.importorskip("highspy")


def _chain(n: int = 6):
    """A small chain on two accelerators and a CPU: the IPs prove it optimal in a moment."""
    nodes = [{"id": i, "fpgaLatency": 1.0 + i % 3, "cpuLatency": 4.0 + i, "supportedOnFpga": True,
              "size": 1.0, "isBackwardNode": False, "colorClass": i} for i in range(n)]
    edges = [(i, i + 1, 0.5) for i in range(n - 1)]
    return workload_from_records(nodes, edges, accelerators=2, cpus=1, memory=1e9)


def _throughput(w, run, deadline):
    return solve_throughput_ip(w, run, deadline=deadline, contiguous=True, gap=0.0, threads=1, contiguous_cpus=True)


def test_throughput_ip_follows_its_deadline_not_the_run_seconds():
    w = _chain()
    # a run that says "no time at all" does not stop a solve handed no deadline
    assert _throughput(w, RunContext(time_limit=0.0), None).status == "optimal"
    # and a passed deadline stops it whatever the run's seconds say (no DP split in time: nothing to return)
    with pytest.raises(SolverTimeout, match="time limit ran out while building"):
        _throughput(w, RunContext(time_limit=None), time.perf_counter() - 1.0)


def test_latency_ip_follows_its_deadline_not_the_run_seconds():
    w = _chain()
    run = RunContext(objective="latency", time_limit=0.0)
    assert solve_latency_ip(w, run, LatencyIP(gap=0.0, threads=1), None).status == "optimal"
    late = solve_latency_ip(w, RunContext(objective="latency"), LatencyIP(threads=1), time.perf_counter() - 1.0)
    assert late.status == "time_limit"


def test_the_method_converts_its_time_limit_once(monkeypatch):
    import dnnplace.models.paper.solvers.ip.throughput as throughput

    seen = []
    monkeypatch.setattr(throughput, "solve_throughput_ip", lambda w, run, **kw: seen.append(kw["deadline"]))
    before = time.perf_counter()
    throughput.ContiguousIP().solve(None, RunContext(time_limit=30.0))
    throughput.ContiguousIP().solve(None, RunContext(time_limit=None))
    assert before + 30.0 <= seen[0] <= time.perf_counter() + 30.0 and seen[1] is None
