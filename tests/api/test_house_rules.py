"""Rules of the source tree that a review would otherwise have to catch by eye.

Each test reads ``src/`` as text, so that what it forbids cannot come back in a later change.
"""

from __future__ import annotations

from pathlib import Path

import dnnplace

PACKAGE = Path(dnnplace.__file__).resolve().parent
LIMIT = 600  # lines; a longer file is two things that want names of their own


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_source_file_is_over_the_limit_but_numba_kernels():
    # numba kernels stay whole: splitting one costs a compiled call boundary inside a hot loop
    long = [f"{p.relative_to(PACKAGE)}: {n} lines" for p in _sources() if "kernel" not in p.name
            and (n := len(p.read_text().splitlines())) > LIMIT]
    assert not long, long
