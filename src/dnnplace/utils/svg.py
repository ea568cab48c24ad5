"""Small pieces every HTML report draws with: escaping, round axis ticks, axis numbers.

Why shared: the paper's, the LLM planner's and the serving planner's reports each draw bar charts and
curves by hand (no plotting library in the page, so it renders offline); their axes should read alike.
"""

from __future__ import annotations

import html
import math

__all__ = ["esc", "fmt_number", "nice_ticks"]


def esc(x: object) -> str:
    """``x`` as text safe inside an element or a quoted attribute."""
    return html.escape(str(x), quote=True)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi], about ``n`` of them (steps of 1, 2 or 5 times a power of ten)."""
    span = hi - lo
    if not span > 0:
        return [lo]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    return [start + j * step for j in range(int(math.ceil((hi - start) / step - 1e-9)) + 1)]


def fmt_number(v: float) -> str:
    """An axis number: whole with thousands separators from 10 up, shortest form below."""
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:g}"
