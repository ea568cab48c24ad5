"""One exception type for every user-facing failure.

The CLI turns a :class:`DnnplaceError` into a one-line message and exit code 2;
anything else is a bug.  Keeping the message a single line (the culprit first)
is part of the contract, so constructors collapse newlines.
"""

from __future__ import annotations


class DnnplaceError(Exception):
    """A problem with the user's input or request, explained in one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


class InputError(DnnplaceError):
    """A workload or split file is malformed or inconsistent."""


class InfeasibleError(DnnplaceError):
    """No placement can satisfy the constraints of the instance."""


class TooManyIdealsError(DnnplaceError):
    """The ideal lattice is larger than the configured budget."""


class SolverTimeout(DnnplaceError):
    """A solver ran past its time limit without an answer."""
