"""The one small interface every solver implements, and the method registry.

A solver turns a workload into a :class:`SolverOutput` (a split plus what it
proved: status, bound).  It never computes the split's cost itself: the caller
(:func:`dnnplace.api.solve`) asks the evaluator, so every method is judged by
the same cost model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from dnnplace.model.split import Split
from dnnplace.model.workload import Workload

ProgressFn = Callable[[float, float, str], None]  # (done, total, description)

OBJECTIVES = ("throughput", "latency", "fw+bw")


@dataclass(frozen=True)
class SolveOptions:
    """Knobs shared by the solvers; each solver reads the ones it understands."""

    objective: str = "throughput"
    time_limit: float | None = None
    contract_layers: bool = False
    linearize: bool = False
    overlap_comm: bool = False
    max_ideals: int = 200_000
    gap: float = 0.01
    threads: int | None = None
    seed: int = 0
    restarts: int = 10
    subgraphs_per_accelerator: int = 1
    contiguous_cpus: bool = True
    progress: ProgressFn | None = None


@dataclass(frozen=True)
class SolverOutput:
    """A solver's answer before evaluation."""

    split: Split
    status: str = "optimal"  # optimal | feasible | time_limit | heuristic
    bound: float | None = None  # proven lower bound on the objective, if any
    stats: dict[str, Any] = field(default_factory=dict)


class Solver(Protocol):
    """What a placement method provides."""

    name: str
    objectives: tuple[str, ...]
    summary: str

    def solve(self, workload: Workload, options: SolveOptions) -> SolverOutput: ...


def registry() -> dict[str, Solver]:
    """All methods, in display order."""
    from dnnplace.solvers.baselines.greedy import GreedyLatency
    from dnnplace.solvers.baselines.local_search import LocalSearch
    from dnnplace.solvers.baselines.partitioners import Metis, Scotch
    from dnnplace.solvers.baselines.pipedream import PipeDream
    from dnnplace.solvers.baselines.single import SingleAccelerator
    from dnnplace.solvers.dp.solver import DPSolver
    from dnnplace.solvers.ip.throughput import ThroughputIP

    methods: list[Solver] = [
        DPSolver(),
        ThroughputIP(contiguous=True),
        ThroughputIP(contiguous=False),
        SingleAccelerator(),
        LocalSearch(),
        PipeDream(),
        Scotch(),
        Metis(),
        GreedyLatency(),
    ]
    return {m.name: m for m in methods}
