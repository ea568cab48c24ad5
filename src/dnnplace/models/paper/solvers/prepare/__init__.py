"""Preparation: from a workload to the forward unit DAG that the DP and the IPs work on.

Only the solvers use it, so it lives beside them: :func:`prepare` contracts a
workload into units (:class:`Prepared`), :func:`merge_free_units` applies the
exact reduction of free units, :func:`comm_sources` prices transfers per
original producer.
"""

from dnnplace.models.paper.solvers.prepare.comm import CommSources, comm_sources
from dnnplace.models.paper.solvers.prepare.contract import linearized, prepare
from dnnplace.models.paper.solvers.prepare.free_units import merge_free_units
from dnnplace.models.paper.solvers.prepare.units import Prepared, UnitShared, memory_binds

__all__ = ["CommSources", "Prepared", "UnitShared", "comm_sources", "linearized", "memory_binds",
           "merge_free_units", "prepare"]
