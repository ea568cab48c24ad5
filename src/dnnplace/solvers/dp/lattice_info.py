"""How large the DP's lattice is at each step of preparation, and which path ``solve`` will take."""

from __future__ import annotations

from dataclasses import dataclass

from dnnplace.errors import TooManyIdealsError
from dnnplace.model.workload import Workload
from dnnplace.prepare.contract import Prepared, merge_free_units, prepare
from dnnplace.solvers.dp.ideals import enumerate_ideals
from dnnplace.solvers.dp.relax import inert_units, relax


@dataclass(frozen=True)
class LatticeStep:
    """One preparation step: its name, unit count and ideal count (None: more than ``cap``)."""

    step: str
    units: int
    ideals: int | None


def count_ideals(p: Prepared, cap: int) -> int | None:
    """The number of ideals of ``p``'s unit DAG, or None when it exceeds ``cap``."""
    try:
        return enumerate_ideals(p, cap + 1).n_ideals
    except TooManyIdealsError:
        return None


def lattice_steps(w: Workload, cap: int = 1_000_000) -> list[LatticeStep]:
    """Ideal counts of the raw graph (colour classes contracted), after the reference's reductions
    (SCC fusion, zero-cost leaves) and after dnnplace's exact reductions (free units folded, inert
    units left out)."""
    raw = prepare(w, merge_trivial=False)
    ref = prepare(w)
    merged = merge_free_units(ref)
    inert = inert_units(merged)
    final = relax(merged, inert).prepared if inert.any() else merged
    return [
        LatticeStep("raw graph", raw.n_units, count_ideals(raw, cap)),
        LatticeStep("reference reductions", ref.n_units, count_ideals(ref, cap)),
        LatticeStep("exact reductions", final.n_units, count_ideals(final, cap)),
    ]


def default_path(steps: list[LatticeStep], max_ideals: int) -> str:
    """What ``dnnplace solve`` does with this lattice under ``--max-ideals``."""
    last = steps[-1].ideals
    if last is not None and last <= max_ideals:
        return f"exact DP over {last:,} ideals (proven optimum)"
    return (f"more than {max_ideals:,} ideals: relaxations that leave out cheap parallel units give a lower"
            " bound, the units put back give a split; status/bound/gap say what was proven")
