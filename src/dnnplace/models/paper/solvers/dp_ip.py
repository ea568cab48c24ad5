"""The default method ``dp``: the DP, then HiGHS on the rest of the time when its relaxation leaves a gap.

Wide operator graphs (alternating attention masks, relative-position
branches, state-space scans, parallel experts) keep lattices far above the
ideal budget after every exact reduction; there the DP's relaxations prove a
bound a few percent short.  An IP, warm-started with the DP's split, then
both improves the split and raises the bound, within the same time budget
(:func:`dnnplace.models.paper.solvers.dp.portfolio.solve_dp`, step 5): on accelerator-only
budgets the chain-of-ideals IP on the DP's own units
(:mod:`dnnplace.models.paper.solvers.ip.chain`), otherwise the contiguous assignment IP on
the workload.  It lives beside both packages because the IP's own warm start
already calls the DP: the DP never imports an IP, it is handed one as its
second phase (import-linter's solvers contract keeps it so).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from dnnplace.core.solver import RunContext, SolverOutput
from dnnplace.models.paper.solvers.dp.method import DPSolver
from dnnplace.models.paper.solvers.dp.portfolio import DPOptions, solve_dp
from dnnplace.models.paper.solvers.prepare import Prepared
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload


@dataclass
class DPThenIP(DPSolver):
    """The DP (exact when the lattice fits), its relaxations, then the IP where a gap remains.

    Same parameters as the DP alone (``--gap 1`` leaves the IP out: no gap is above it).
    """

    def solve(self, workload: Workload, run: RunContext) -> SolverOutput:
        return solve_dp(workload, self.options(run), time_limit=run.time_limit, finish=ip_finish)


def ip_finish(p: Prepared, split: Split, bound: float, deadline: float, options: DPOptions,
              stop: threading.Event | None = None) -> tuple[Split | None, float, dict]:
    """:data:`~dnnplace.models.paper.solvers.dp.portfolio.Finisher`: the chain IP on ``p``'s units where it applies.

    ``bound`` and the bound returned are on the workload; on the units they
    differ by ``p.deficit`` (the folds with an allowance, see ``Prepared``).
    """
    from dnnplace.models.paper.solvers.ip.chain import chain_ip_applies, solve_chain_ip

    if not chain_ip_applies(p):
        from dnnplace.models.paper.solvers.ip.certify import improve_with_ip

        out = improve_with_ip(p.workload, split, gap=options.gap, overlap=options.overlap_comm, deadline=deadline,
                              lower_bound=bound, stop=stop)
        return out.split, out.bound, out.stats
    # HiGHS stops at its gap; the bound then loses its tolerance and the deficit: aim a little lower
    gap = options.policy.chain_ip_gap_margin * options.gap
    res = solve_chain_ip(p, unit_devices(p, split), deadline=deadline, gap=gap, overlap=options.overlap_comm,
                         lower_bound=bound + p.deficit, stop=stop)
    found = None if res.stage is None else split_of_stages(p, res.stage)
    return found, max(0.0, res.bound - p.deficit), res.stats


def unit_devices(p: Prepared, split: Split) -> np.ndarray | None:
    """The device of every unit in ``split``, or None when some unit's nodes are on different devices."""
    from dnnplace.models.paper.evaluation import evaluate

    dev = evaluate(p.workload, split, complete=False).assignment.device
    unit = np.full(p.n_units, -1, dtype=np.int64)
    unit[p.unit_of] = dev
    return unit if (unit >= 0).all() and bool(np.all(unit[p.unit_of] == dev)) else None


def split_of_stages(p: Prepared, stage: np.ndarray) -> Split:
    """A split of the workload from a stage per unit (empty stages dropped, the order kept)."""
    used, device = np.unique(stage, return_inverse=True)
    return Split.from_assignment(p.workload.node_ids, device[p.unit_of], int(used.size), 0)
