"""Command-line options generated from the solvers' declared parameters (declared once, in the solver).

Each parameter a method declares with :func:`dnnplace.core.solver.param` becomes one flag of
``solve``: ``max_ideals`` -> ``--max-ideals``; a switch that is on by default -> ``--no-X``.
Its help lists the methods that take it and their defaults; its range is checked by the solver.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import typer

from dnnplace.api.methods import get_solver_class, methods, resolve_method
from dnnplace.errors import DnnplaceError


@dataclass(frozen=True)
class SolverFlag:
    """One parameter name shared by the methods that declare it."""

    name: str
    flag: str
    kind: type  # int, float or bool
    inverted: bool  # --no-X: giving the flag sets the parameter to False
    help: str


def _kind(f: dataclasses.Field) -> type:
    text = str(f.type).replace(" ", "").removesuffix("|None")
    return {"int": int, "float": float, "bool": bool, "str": str}[text]


def solver_flags() -> dict[str, SolverFlag]:
    """Every parameter of every registered method, by name, with its flag and help."""
    seen: dict[str, list[tuple[str, dataclasses.Field]]] = {}
    for method, cls in methods().items():
        for f in cls.param_fields():
            seen.setdefault(f.name, []).append((method, f))
    flags = {}
    for name, uses in seen.items():
        first = uses[0][1]
        kind = _kind(first)
        inverted = kind is bool and first.default is True
        flag = ("--no-" if inverted else "--") + name.replace("_", "-")
        groups: dict[tuple[str, object], list[str]] = {}  # (doc, default) -> methods
        for method, f in uses:
            groups.setdefault((f.metadata.get("doc", ""), f.default), []).append(method)
        parts = []
        for (doc, default), ms in groups.items():
            shown = "" if kind is bool or default is None else f" [default: {default}]"
            parts.append(f"{'turn off: ' if inverted else ''}{doc} ({', '.join(ms)}){shown}")
        help_text = "; ".join(parts)
        help_text = help_text[:1].upper() + help_text[1:] + "."
        flags[name] = SolverFlag(name, flag, kind, inverted, help_text)
    return flags


def with_solver_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add one typer option per solver parameter to ``func``'s signature; it receives them as ``**params``."""
    sig = inspect.signature(func)
    fixed = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    extra = []
    for fl in solver_flags().values():
        if fl.kind is bool:
            option = typer.Option(None, fl.flag, show_default=False, help=fl.help)
            annotation: Any = Optional[bool]
        else:
            option = typer.Option(None, fl.flag, show_default=False, help=fl.help)
            annotation = Optional[fl.kind]
        extra.append(inspect.Parameter(fl.name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                       annotation=annotation))
    func.__signature__ = sig.replace(parameters=[*fixed, *extra])  # type: ignore[attr-defined]
    return func


def model_flags() -> dict[str, Any]:
    """Every loader option every planned model declares (``PlannedModel.load_flags``), by name, first wins."""
    from dnnplace.api.models import MODELS

    flags: dict[str, Any] = {}
    for m in MODELS.values():
        for fl in m.load_flags:
            flags.setdefault(fl.name, fl)
    return flags


def with_model_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add one typer option per model loader option (``--gpus``, ``--bert-layers``...) to ``func``'s keyword
    parameters, before its ``**params``: it receives them as keyword arguments named as declared."""
    sig = inspect.signature(func)
    params = list(sig.parameters.values())
    tail = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    head = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
    extra = [inspect.Parameter(fl.name, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[fl.kind],
                               default=typer.Option(None, "--" + fl.name.replace("_", "-"), show_default=False,
                                                    help=fl.help))
             for fl in model_flags().values()]
    func.__signature__ = sig.replace(parameters=[*head, *extra, *tail])  # type: ignore[attr-defined]
    return func


def method_params(method: str, objective: str, given: Mapping[str, object]) -> dict[str, object]:
    """The parameters the user set (flags given), refused by flag name when the method does not take them."""
    flags = solver_flags()
    cls = get_solver_class(resolve_method(method, objective))
    params: dict[str, object] = {}
    for name, value in given.items():
        if value is None:
            continue
        fl = flags[name]
        params[name] = (not value) if fl.inverted else value
    unknown = [flags[k].flag for k in params if k not in cls.param_names()]
    if unknown:
        takes = ", ".join(flags[k].flag for k in cls.param_names()) or "none of these options"
        raise DnnplaceError(f"--method {method} does not take {', '.join(unknown)}; it takes: {takes}")
    return params


def flag_of(name: str) -> str:
    """The CLI flag of a solver parameter."""
    return solver_flags()[name].flag
