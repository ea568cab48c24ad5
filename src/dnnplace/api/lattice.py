"""What ``dnnplace info`` shows about a paper workload: its ideal lattice at each reduction, the DP's path."""

from __future__ import annotations

from dataclasses import dataclass

from dnnplace.api.models import paper_instance
from dnnplace.models.paper.solvers.dp.lattice_info import LatticeStep
from dnnplace.models.paper.workload import Workload
from dnnplace.utils.params import integer, validate_params

__all__ = ["LatticeStep", "WorkloadInfo", "info"]


@dataclass(frozen=True)
class WorkloadInfo:
    """What ``dnnplace info`` prints: the lattice at each reduction and the path ``solve`` will take."""

    steps: tuple[LatticeStep, ...]
    default_path: str


@validate_params(max_ideals=integer(1, 10**9), cap=integer(1, 10**9))
def info(workload: Workload, *, max_ideals: int = 200_000, cap: int = 1_000_000) -> WorkloadInfo:
    """Ideal counts of the raw graph and after each reduction (None: more than ``cap``), and the DP's path.

    Examples
    --------
    .. lane: slow (counts the ideals of a real graph)

    >>> import dnnplace
    >>> rep = dnnplace.info(dnnplace.load_workload(dnnplace.example_path("gnmt_training")))
    >>> [s.step for s in rep.steps]
    ['raw graph', 'reference reductions', 'exact reductions']
    >>> rep.default_path.startswith("exact DP")
    True
    """
    from dnnplace.models.paper.solvers.dp.lattice_info import default_path, lattice_steps

    workload = paper_instance(workload, "info")
    steps = lattice_steps(workload, max(cap, max_ideals))
    return WorkloadInfo(tuple(steps), default_path(steps, max_ideals))


