"""Where a kernel's price came from: every answer of the kernel layer carries one code per entry.

``measured``: a point of a measured table, returned verbatim.  ``interpolated``: blended from measured
points that bracket it.  ``extrapolated``: beyond (or between ragged gaps of) a table, the nearest measured
point's efficiency held and scaled by the roofline of the query (a bounded rule, docs/kernels.md).
``roofline``: no table for this device or family: the sourced catalogue's roofline.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["EXTRAPOLATED", "INTERPOLATED", "MEASURED", "ROOFLINE", "SOURCE_NAMES", "Priced", "source_name"]

MEASURED, INTERPOLATED, EXTRAPOLATED, ROOFLINE = 0, 1, 2, 3
SOURCE_NAMES = ("measured", "interpolated", "extrapolated", "roofline")


def source_name(code: int) -> str:
    """The word for a source code (the order is also the order of growing uncertainty)."""
    return SOURCE_NAMES[int(code)]


@dataclass(frozen=True)
class Priced:
    """Seconds per query and the source of each (codes of :data:`SOURCE_NAMES`), arrays of one shape."""

    seconds: np.ndarray
    source: np.ndarray

    @property
    def worst(self) -> str:
        """The least certain source among the entries: what a sum of them may claim."""
        return source_name(int(self.source.max())) if self.source.size else SOURCE_NAMES[0]

    def sources(self) -> list[str]:
        return [source_name(int(c)) for c in np.ravel(self.source)]

    def counts(self) -> dict[str, int]:
        """How many entries came from each source (only those present)."""
        codes, n = np.unique(self.source, return_counts=True)
        return {source_name(int(c)): int(k) for c, k in zip(codes, n)}
