"""User text made safe to show: no terminal control sequences, no rich markup, no emoji codes.

Names, paths and messages can come from hostile files.  :func:`printable`
replaces every control character (C0, DEL, C1: the start of ANSI/OSC escape
sequences), the bidirectional overrides that reorder what a reader sees, and
lone surrogates (which cannot be encoded) by a visible escape such as ``\\x1b``.
:class:`SafeConsole` is a rich console that never interprets markup or emoji
codes in what it is given and passes every string through :func:`printable`.
"""

from __future__ import annotations

import errno
import io
import json
import math
import re
import sys
from typing import Any

from rich.console import Console

from dnnplace.errors import DnnplaceError

MIN_WIDTH = 20  # a narrower COLUMNS (0 included) is ignored: rich would print nothing


class OutputError(DnnplaceError):
    """Standard output (or error) is closed, full or a broken pipe: what was to be shown is lost."""

# C0 controls, DEL, C1 controls, bidi embeddings/overrides/isolates, line/paragraph separators, lone surrogates
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]")
_UNSAFE_KEEP_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069"
                                "\u2028\u2029\ud800-\udfff]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``, ``\\u202e``)."""
    return (_UNSAFE_KEEP_LINES if keep_newlines else _UNSAFE).sub(_escape, str(text))


def clip(text: object, limit: int = 200) -> str:
    """:func:`printable`, cut to ``limit`` characters with an ellipsis (for names in messages)."""
    s = printable(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def encodable(text: str, encoding: str | None) -> str:
    """``text`` with what ``encoding`` cannot hold written as escapes (``PYTHONIOENCODING=ascii``: ``\\xe9``)."""
    try:
        text.encode(encoding or "utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode(encoding or "utf-8", "backslashreplace").decode(encoding or "utf-8")
    except LookupError:
        return text


class _Closed(io.TextIOBase):
    """Where a closed standard stream (``sys.stdout is None``) points: writing to it is an error."""

    def write(self, s: str) -> int:
        raise OSError(errno.EBADF, "the stream is closed")

    def isatty(self) -> bool:
        return False


_CLOSED = _Closed()


class SafeConsole(Console):
    """A rich console for untrusted text: no markup, no emoji codes, no highlighting, no control characters.

    Styling is still possible with :class:`rich.text.Text` objects or an explicit
    ``markup=True`` on a template whose user parts went through
    :func:`rich.markup.escape`.
    """

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("markup", False)
        kwargs.setdefault("emoji", False)
        kwargs.setdefault("highlight", False)
        super().__init__(**kwargs)
        if self._width is not None and self._width < MIN_WIDTH:  # COLUMNS=0 would print nothing at all
            self._width = None

    @property
    def file(self):
        """The stream written to; a closed one (``sys.stdout`` is None) is an error, not silence."""
        stream = self._file or (sys.stderr if self.stderr else sys.stdout)
        stream = getattr(stream, "rich_proxied_file", stream)
        return _CLOSED if stream is None else stream

    @file.setter
    def file(self, new_file) -> None:
        self._file = new_file

    def _render_buffer(self, buffer) -> str:
        return encodable(super()._render_buffer(buffer), self.encoding)

    def _write_buffer(self) -> None:
        try:
            super()._write_buffer()
        except OSError as exc:  # /dev/full, a closed pipe
            raise OutputError(f"cannot write to standard {'error' if self.stderr else 'output'}"
                              f" ({exc.strerror or exc})") from None

    def render_str(self, text: str, **kwargs):  # every str printed, in tables and titles too
        return super().render_str(printable(text, keep_newlines=True), **kwargs)

    def print_json(self, json: str | None = None, **kwargs) -> None:  # noqa: A002 - rich's name
        kwargs["ensure_ascii"] = True  # C1 controls and bidi overrides stay \u escapes
        super().print_json(json, **kwargs)


def show_value(v: Any, limit: int = 40) -> str:
    """A short, printable rendering of a JSON value for an error message."""
    if isinstance(v, dict):
        return f"an object with {len(v)} keys"
    if isinstance(v, list):
        return f"a list of {len(v)} items"
    if isinstance(v, str):
        return clip(json.dumps(v[: limit + 2]), limit)
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 10**30:
        return f"an integer of {len(str(abs(v)))} digits"
    return clip(json.dumps(v), limit)


def format_number(x: float | None, digits: int = 6, *, missing: str = "-", infinity: str = "inf") -> str:
    """A number for a table or a report: ``digits`` significant digits; ``missing`` for None or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return missing
    if isinstance(x, float) and math.isinf(x):
        return infinity if x > 0 else "-" + infinity
    return f"{x:.{digits}g}"


def format_bytes(x: float) -> str:
    """Bytes with a binary unit (``12.0 MiB``)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(x) < 1024:
            return f"{x:.0f} B" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{x:.1f} TiB"


def id_ranges(ids: list[int]) -> str:
    """Integers as compact ranges, e.g. ``[1, 2, 3, 7]`` -> ``"1-3,7"`` (``"-"`` for none)."""
    ids = sorted(ids)
    parts = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts) if parts else "-"


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None: standard JSON has no NaN or Infinity."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
