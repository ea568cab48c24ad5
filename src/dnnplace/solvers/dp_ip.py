"""The default method ``dp``: the DP, then HiGHS on the rest of the time when its relaxation leaves a gap.

Wide operator graphs (alternating attention masks, relative-position
branches, state-space scans, parallel experts) keep lattices far above the
ideal budget after every exact reduction; there the DP's relaxations prove a
bound a few percent short.  The throughput IP, warm-started with the DP's
split, then both improves the split and raises the bound, within the same
time budget (:func:`dnnplace.solvers.dp.solver.solve_dp`, step 5).  It lives
beside both packages because the IP's own warm start already calls the DP.
"""

from __future__ import annotations

from dataclasses import dataclass

from dnnplace.model.split import Split
from dnnplace.model.workload import Workload
from dnnplace.solvers.base import RunContext, SolverOutput
from dnnplace.solvers.dp.solver import DPOptions, DPSolver, solve_dp


@dataclass
class DPThenIP(DPSolver):
    """The DP (exact when the lattice fits), its relaxations, then the IP where a gap remains.

    Same parameters as the DP alone (``--gap 1`` leaves the IP out: no gap is above it).
    """

    def solve(self, workload: Workload, run: RunContext) -> SolverOutput:
        return solve_dp(workload, DPOptions(**self.get_params(), overlap_comm=run.overlap_comm,
                                            time_limit=run.time_limit, progress=run.progress, finish=ip_finish))


def ip_finish(w: Workload, split: Split, bound: float, deadline: float,
              options: DPOptions) -> tuple[Split | None, float, dict]:
    """:data:`~dnnplace.solvers.dp.solver.Finisher` by the contiguous throughput IP."""
    from dnnplace.solvers.ip.certify import improve_with_ip

    out = improve_with_ip(w, split, gap=options.gap, overlap=options.overlap_comm, deadline=deadline,
                          lower_bound=bound)
    return out.split, out.bound, out.stats
