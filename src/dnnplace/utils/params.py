"""Declarative argument checks for the public API: one vocabulary, checked once, before any work.

Each public function declares what every argument may be with :func:`validate_params`
(scikit-learn's ``validate_params`` is the model)::

    @validate_params(time_limit=seconds(), progress=optional(function()))
    def solve(workload, *, time_limit=None, progress=None): ...

A refused argument raises :class:`~dnnplace.errors.ParamError` naming the parameter, what it
must be and what it was, so that no ``TypeError`` / ``AttributeError`` / ``OSError`` leaks out
of the work it would have fed, minutes later.  A constraint may also *normalise* the value it
accepts (``time_limit=inf`` means no limit and reaches the function as ``None``; a numpy
integer reaches it as an ``int``), so the function body sees one form.  The CLI only parses
text: it shows the same error with the parameter's flag name (``--time-limit``).
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from dnnplace.errors import ParamError

__all__ = ["MAX_SECONDS", "Constraint", "any_of", "boolean", "check_arguments", "choice", "function", "instance_of",
           "integer", "optional", "path_like", "paths", "real", "seconds", "text", "validate_params"]

#: A time limit above this (about 30 years) is a typo; ``inf`` means no limit.
MAX_SECONDS = 1e9

F = TypeVar("F", bound=Callable[..., Any])


class _Refused(Exception):
    """A constraint did not accept the value (the caller words the message)."""


@dataclass(frozen=True)
class Constraint:
    """What one argument may be: ``accept`` returns the value (normalised) or raises ``_Refused``."""

    description: str  # completes "NAME must be ..."
    accept: Callable[[Any], Any]

    def check(self, name: str, value: Any, where: str = "") -> Any:
        """``value`` as the function should see it, or a :class:`ParamError` naming ``name``."""
        try:
            return self.accept(value)
        except _Refused:
            raise ParamError(name, self.description, value, where=where) from None


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _in_range(v: float, lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> bool:
    if lo is not None and (v <= lo if lo_open else v < lo):
        return False
    return not (hi is not None and (v >= hi if hi_open else v > hi))


def _bound(v: float) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


def _range_text(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {_bound(lo)}")
    if hi is not None:
        parts.append(f"{'<' if hi_open else '<='} {_bound(hi)}")
    return " and ".join(parts)


def real(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
         hi_open: bool = False) -> Constraint:
    """A finite real number (not a bool, not a string) in the range; reaches the function as a float."""
    rng = _range_text(lo, hi, lo_open, hi_open)

    def accept(v: Any) -> float:
        if not _number(v) or not math.isfinite(v) or not _in_range(float(v), lo, hi, lo_open, hi_open):
            raise _Refused
        return float(v)

    return Constraint("a finite number" + (f" {rng}" if rng else ""), accept)


def integer(lo: int | None = None, hi: int | None = None) -> Constraint:
    """A whole number (an int or a numpy integer; not a bool, not 2.0) in ``lo..hi``; reaches it as an int."""
    rng = _range_text(lo, hi, False, False)

    def accept(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not _in_range(int(v), lo, hi, False, False):
            raise _Refused
        return int(v)

    return Constraint("a whole number" + (f" {rng}" if rng else ""), accept)


def seconds(maximum: float = MAX_SECONDS) -> Constraint:
    """A time limit: seconds > 0 and at most ``maximum``; ``None`` or ``inf``: no limit (reaches it as None).

    Zero is refused: no method can answer in no time, and "0" is more often a slip than a wish.
    """
    def accept(v: Any) -> float | None:
        if v is None or (_number(v) and v == math.inf):
            return None
        if not _number(v) or not math.isfinite(v) or not 0 < v <= maximum:
            raise _Refused
        return float(v)

    return Constraint(f"a number of seconds > 0 and <= {maximum:g} (inf or none: no limit)", accept)


def boolean() -> Constraint:
    """True or False (also numpy's), never 0, 1 or a string."""
    def accept(v: Any) -> bool:
        if isinstance(v, bool) or (type(v).__module__ == "numpy" and type(v).__name__ in ("bool", "bool_")):
            return bool(v)
        raise _Refused

    return Constraint("true or false", accept)


def choice(*options: str) -> Constraint:
    """One of a few strings, exactly."""
    def accept(v: Any) -> str:
        if isinstance(v, str) and v in options:
            return v
        raise _Refused

    return Constraint("one of " + ", ".join(options), accept)


def text(max_length: int = 4096) -> Constraint:
    """A non-empty string of at most ``max_length`` characters."""
    def accept(v: Any) -> str:
        if isinstance(v, str) and 0 < len(v) <= max_length:
            return v
        raise _Refused

    return Constraint(f"a non-empty string of at most {max_length:,} characters", accept)


def path_like() -> Constraint:
    """A file path: a non-empty ``str`` or ``os.PathLike`` without NUL (not a dict, not bytes)."""
    def accept(v: Any) -> Any:
        if isinstance(v, os.PathLike):
            s = os.fspath(v)
        elif isinstance(v, str):
            s = v
        else:
            raise _Refused
        if not isinstance(s, str) or not s or "\0" in s:
            raise _Refused
        return v

    return Constraint("a file path (a string or a pathlib.Path)", accept)


def paths() -> Constraint:
    """Files an output must never replace: an iterable (not a string) of paths or None; reaches it as a tuple."""
    one = optional(path_like())

    def accept(v: Any) -> tuple:
        if isinstance(v, (str, bytes, os.PathLike, dict)) or not hasattr(v, "__iter__"):
            raise _Refused
        items = tuple(v)
        for item in items:
            one.accept(item)
        return items

    return Constraint("a list of file paths (or None)", accept)


def function() -> Constraint:
    """Something callable."""
    def accept(v: Any) -> Any:
        if callable(v):
            return v
        raise _Refused

    return Constraint("callable", accept)


def instance_of(*types: type, what: str) -> Constraint:
    """An instance of one of ``types`` (``what`` names them for the message, e.g. ``"a Workload"``)."""
    def accept(v: Any) -> Any:
        if isinstance(v, types):
            return v
        raise _Refused

    return Constraint(what, accept)


def optional(c: Constraint) -> Constraint:
    """``c``, or None."""
    return Constraint(f"{c.description}, or none", lambda v: None if v is None else c.accept(v))


def any_of(*cs: Constraint) -> Constraint:
    """The first of ``cs`` that accepts the value."""
    def accept(v: Any) -> Any:
        for c in cs:
            try:
                return c.accept(v)
            except _Refused:
                continue
        raise _Refused

    return Constraint(" or ".join(c.description for c in cs), accept)


def validate_params(**constraints: Constraint) -> Callable[[F], F]:
    """Check the named arguments of the decorated function against ``constraints`` at each call, first.

    Only arguments the caller passed are checked (defaults are the function's own); the body sees
    the values the constraints return.  Calling it with an argument it does not take (or without one it
    needs) is a :class:`~dnnplace.errors.DnnplaceError` too, not a ``TypeError``.  The table stays readable
    on the function as ``__param_constraints__`` (what the CLI's messages and the tests use).
    """
    def decorate(fn: F) -> F:
        sig = inspect.signature(fn)
        unknown = set(constraints) - set(sig.parameters)
        if unknown:
            raise TypeError(f"{fn.__qualname__} has no parameter {', '.join(sorted(unknown))}")

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as exc:
                from dnnplace.errors import DnnplaceError

                raise DnnplaceError(f"{fn.__name__}: {exc}") from None
            for name, c in constraints.items():
                if name in bound.arguments:
                    bound.arguments[name] = c.check(name, bound.arguments[name], where=fn.__name__)
            return fn(*bound.args, **bound.kwargs)

        checked.__param_constraints__ = dict(constraints)  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]

    return decorate


def check_arguments(fn: Callable[..., Any], **values: Any) -> dict[str, Any]:
    """``values`` checked against ``fn``'s declared constraints, as a call would check them; normalised.

    For a caller that must refuse a bad argument before the work that precedes the call (the CLI
    reading a large workload before it solves): the rule stays the function's own, declared once.
    """
    table: dict[str, Constraint] = getattr(fn, "__param_constraints__", {})
    unknown = set(values) - set(table)
    if unknown:
        raise TypeError(f"{fn.__qualname__} declares no constraint for {', '.join(sorted(unknown))}")
    return {name: table[name].check(name, v, where=fn.__name__) for name, v in values.items()}
