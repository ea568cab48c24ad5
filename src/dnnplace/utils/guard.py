"""Run the user's own code (a ``file.py:fn`` factory, the module that holds it) behind one guard.

Whatever that code does ends as one line naming it: an exception or a syntax error is a
:class:`UserCodeError` (never "internal error"), ``sys.exit(0)`` or ``sys.exit(3)`` too (never a
silent success with no output, never a bare exit code), and what it prints goes to stderr, so
it can never corrupt a ``--json`` document on stdout.  Ctrl-C still interrupts.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from dnnplace.errors import DnnplaceError

__all__ = ["UserCodeError", "stdout_to_stderr", "user_code"]

_REASON_LIMIT = 120  # characters of the user's own message kept in the one line (a line stays under ~300)


class UserCodeError(DnnplaceError):
    """The user's code failed or exited; ``reason`` is what it did, ``exited`` whether it called sys.exit."""

    def __init__(self, what: str, reason: str, *, exited: bool) -> None:
        self.what, self.reason, self.exited = what, reason, exited
        super().__init__(f"{what} {reason}")


def _first_line(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a hostile __str__ must not hide what happened
        text = ""
    from dnnplace.utils.text import clip

    return clip(" ".join(text.split()), _REASON_LIMIT)  # cut after escaping: escapes lengthen the line


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send what is printed to stdout -- by Python (``print``) or below it (file descriptor 1) -- to stderr."""
    saved = None
    try:
        for stream in (sys.stdout, sys.__stdout__):
            if stream is not None:
                stream.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
    except (AttributeError, OSError, ValueError):  # no descriptors to redirect (closed, or an embedding host)
        if saved is not None:
            os.close(saved)
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            with contextlib.suppress(OSError, ValueError):
                if sys.__stdout__ is not None:
                    sys.__stdout__.flush()
            os.dup2(saved, 1)
            os.close(saved)


@contextlib.contextmanager
def user_code(what: str) -> Iterator[None]:
    """Run the block as the user's code named ``what`` (e.g. ``"'model.py:build': the factory"``).

    An exception becomes ``"{what} failed: TYPE: first line"``, ``sys.exit(c)`` becomes
    ``"{what} called sys.exit(c)"``, both a :class:`UserCodeError`; prints go to stderr.
    """
    with stdout_to_stderr():
        try:
            yield
        except KeyboardInterrupt:
            raise
        except SystemExit as exc:
            from dnnplace.utils.text import clip

            code = clip(repr(exc.code), _REASON_LIMIT)
            raise UserCodeError(what, f"called sys.exit({code})", exited=True) from None
        except Exception as exc:  # the user's bug, not ours: named, one line
            message = _first_line(exc)
            raise UserCodeError(what, f"failed: {type(exc).__name__}" + (f": {message}" if message else ""),
                                exited=False) from None
