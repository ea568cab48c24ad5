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


def _shown(value: object, limit: int = 40) -> str:
    """A short, printable rendering of an argument for a message (never its whole content)."""
    if isinstance(value, dict):
        return f"a dict with {len(value)} keys"
    if isinstance(value, (list, tuple)) and len(value) > 4:
        return f"a {type(value).__name__} of {len(value)} items"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of {len(str(abs(value)))} digits"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__ must not hide the real message
        text = f"a {type(value).__name__}"
    text = text.encode("unicode_escape").decode("ascii")  # control characters shown, never printed
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ParamError(DnnplaceError):
    """An argument of a public function outside what the function declares (see :mod:`dnnplace.utils.params`).

    It keeps the parameter's name apart from the words, so the CLI can say the same with its flag
    (``--time-limit``) instead of the Python name (``time_limit``).
    """

    def __init__(self, param: str, requirement: str, value: object, *, where: str = "") -> None:
        self.param, self.requirement, self.where = param, requirement, where
        self.shown = _shown(value)
        super().__init__((f"{where}: " if where else "") + self.worded(param))

    def worded(self, name: str) -> str:
        """The message with ``name`` standing for the parameter (its flag, on the command line)."""
        return " ".join(f"{name} must be {self.requirement}, got {self.shown}".split())


class OptionError(ParamError):
    """An option given to a model it does not apply to (refused by the models' declarations).

    A :class:`ParamError`, so that the CLI names the option by its flag (``--gpus``) and the API by
    its parameter (``gpus``).
    """

    def __init__(self, param: str, applies_to: str) -> None:
        self.param, self.applies_to, self.where = param, applies_to, ""
        DnnplaceError.__init__(self, self.worded(param.replace("_", "-")))

    def worded(self, name: str) -> str:
        """The message with ``name`` standing for the option."""
        return f"{name} applies to {self.applies_to}"
