"""Measured kernel costs under every LLM planner: silicon tables where they exist, the sourced roofline elsewhere.

One layer below the planned models (they import it; it imports none of them).  :func:`kernel_costs` gives a
device's :class:`KernelCosts`: GEMM, prefill and decode attention, collectives, point-to-point and fused
MoE layers, each priced for numpy arrays of shapes and returning :class:`Priced` seconds with, per entry,
its source: ``measured`` (a table point), ``interpolated``, ``extrapolated`` (beyond a table, efficiency
held) or ``roofline`` (no table: the catalogue's datasheet peaks and published efficiencies).

The tables are NVIDIA aiconfigurator-core's (Apache-2.0), read lazily from its installed files: importing
this package loads neither pandas, pyarrow nor aiconfigurator (docs/kernels.md).
"""

from dnnplace.kernels.costs import KernelCosts, kernel_costs
from dnnplace.kernels.sources import SOURCE_NAMES, Priced

__all__ = ["SOURCE_NAMES", "KernelCosts", "Priced", "kernel_costs"]
