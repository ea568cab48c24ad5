"""How the DP spends its time: the tuning constants of the portfolio, and what one run reads.

The algorithms (:mod:`~dnnplace.models.paper.solvers.dp.exact`, :mod:`~dnnplace.models.paper.solvers.dp.relaxations`,
:mod:`~dnnplace.models.paper.solvers.dp.fluid`, the IPs) take explicit deadlines and these
knobs; only :mod:`~dnnplace.models.paper.solvers.dp.portfolio` turns seconds into deadlines.
Every field says in one line why it exists; the measurements behind the values
are in ``docs/dev/solver_policy.md``.  Changing one changes answers that depend
on the budget (bounds and gaps of wide graphs), never an exact optimum.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dnnplace.core.solver import ProgressFn


@dataclass(frozen=True)
class DPPolicy:
    """The DP portfolio's budgets, shares and thresholds (seconds, fractions, counts)."""

    #: with a second phase and no time limit: the whole budget of the relaxation path (a plan in seconds)
    default_seconds: float = 9.0
    #: without a second phase and time limit: the relaxations stop then with what they proved
    relax_seconds: float = 30.0
    #: narrowing between relaxations stops this long after it began once some bound is proven
    refine_seconds: float = 10.0
    #: above this many ideals a coarser lattice's optimum first tightens the exact DP's pruning bound
    coarse_first: int = 10_000
    #: above this many units the ideal machinery is skipped for a chain of blocks (a lattice that large never fits)
    large_units: int = 4000
    #: above this many units no folds with an allowance: a second pass costs the relaxations' time and never fit
    wider_units: int = 1000
    #: of gap times the trivial bound: what the folds with an allowance may add to the optimum in all
    fold_allowance: float = 0.25
    #: of the budget: what a budgeted exact DP (above ``coarse_first`` ideals) may take before the rest relaxes
    exact_share: float = 0.3
    #: with a second phase: the relaxations' share of the budget, the rest is the second phase's
    relax_share: float = 0.7
    #: the relaxations' share up to ``ip_first_units`` units or with a time limit: the IP closes those, they plateau
    relax_share_small: float = 0.25
    #: up to this many units the second phase gets most of the budget (``relax_share_small``)
    ip_first_units: int = 600
    #: above this many units no second phase in the default budget: HiGHS's root LP alone would outlast it
    ip_max_units: int = 800
    #: a second phase with less time left than this is not started (it could not even presolve)
    finish_min_seconds: float = 0.5
    #: a budgeted exact DP runs this long alone before the IP starts beside it: HiGHS's presolve cannot be cancelled
    probe_seconds: float = 0.5
    #: above this many ideals the IP starts with the exact DP at once: the DP's work grows with their square
    ip_at_once_ideals: int = 50_000
    #: the spine relaxation keeps its gathering units if its lattice has at most this many ideals
    spine_ideals: int = 20_000
    #: moving groups of classes across a stage boundary after the spine relaxation (a cut through a scan)
    polish_seconds: float = 1.5
    #: bisection steps of the fluid bound on a lattice ...
    fluid_steps: int = 6
    #: ... and on one of at most ``fluid_small`` ideals (a spine: each test is cheap)
    fluid_steps_small: int = 12
    #: the lattice size up to which the fluid bound bisects further
    fluid_small: int = 5000
    #: of the gap: what the chain IP is asked to prove (its bound loses HiGHS's tolerance and the folds' deficit)
    chain_ip_gap_margin: float = 0.98


@dataclass(frozen=True)
class DPOptions:
    """What one DP run reads: the method's parameters, the cost-model switch, progress and the policy."""

    max_ideals: int = 200_000
    gap: float = 0.01
    contract_layers: bool = False
    linearize: bool = False
    overlap_comm: bool = False
    progress: ProgressFn | None = None
    policy: DPPolicy = field(default_factory=DPPolicy)
