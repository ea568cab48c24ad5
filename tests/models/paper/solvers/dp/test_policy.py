"""The DP's policy is one dataclass the portfolio reads; the algorithms read no clock of their own."""

from __future__ import annotations

import ast
import dataclasses
import time
from pathlib import Path
from unittest import mock

import dnnplace
from dnnplace.models.paper.paper_json import workload_from_records
from dnnplace.models.paper.solvers.dp import policy as policy_module
from dnnplace.models.paper.solvers.dp.policy import DPPolicy
from dnnplace.models.paper.solvers.dp_ip import DPThenIP
from dnnplace.models.paper.solvers.ip.common import warm_start_dp

DP = Path(policy_module.__file__).parent
#: the portfolio owns the clock; the exact DP reads it only to size its kernel calls
CLOCK_READERS = {"portfolio.py", "exact.py"}


def _chain(n: int = 6):
    nodes = [{"id": i, "fpgaLatency": 1.0 + i % 2, "cpuLatency": 2.0, "size": 0.0, "colorClass": i} for i in range(n)]
    return workload_from_records(nodes, [(i, i + 1, 0.5) for i in range(n - 1)], accelerators=2, cpus=0, memory=1e9)


def test_only_the_portfolio_and_the_kernel_loop_import_time():
    readers = set()
    for path in DP.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module in ("time", "threading"):
                names = [node.module]
            if {"time", "threading"} & set(names):
                readers.add(path.name)
    assert readers <= CLOCK_READERS, readers - CLOCK_READERS
    assert "portfolio.py" in readers


def test_every_policy_field_says_why():
    """Each field of DPPolicy is preceded by its own ``#:`` line (the one-line why)."""
    lines = Path(policy_module.__file__).read_text().splitlines()
    for f in dataclasses.fields(DPPolicy):
        at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{f.name}:"))
        assert lines[at - 1].strip().startswith("#: "), f.name


def test_the_method_policy_reaches_the_algorithms():
    """A policy replaced on the method class changes which algorithm runs (here: the block chain of huge graphs)."""
    w = _chain()
    assert "coarse_blocks" not in dnnplace.solve(w, "dp").stats
    with mock.patch.object(DPThenIP, "policy", dataclasses.replace(DPThenIP.policy, large_units=2)):
        assert "coarse_blocks" in dnnplace.solve(w, "dp").stats


def test_the_warm_start_keeps_its_callers_deadline():
    w = _chain()
    assert warm_start_dp(w, time.perf_counter() - 1.0) is None
    split = warm_start_dp(w, time.perf_counter() + 30.0)
    assert split is not None and dnnplace.evaluate(w, split).feasible
