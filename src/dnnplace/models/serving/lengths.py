"""A request-length distribution file (``dnnplace serve --lengths``): read, checked row by row, merged.

Why its own module: a trace of a million requests is read once, every row that cannot be read (or does not fit
the context) named by its line, and the plan file carries the merged rows back through the same reader
(:func:`lengths_from_json`), so a distribution has one parser.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.utils.files import read_json_file, read_text_file
from dnnplace.utils.text import clip

__all__ = ["LENGTH_COLUMNS", "MAX_LENGTH_ROWS", "LengthRows", "distribution", "lengths_from_json", "mean_lengths",
           "read_lengths"]


#: The header names a lengths file may give each column (case and surrounding spaces aside): the names the
#: common traces and benchmark tools write.
LENGTH_COLUMNS: dict[str, tuple[str, ...]] = {
    "isl": ("isl", "input_len", "input_tokens", "prompt_tokens", "prompt_len"),
    "osl": ("osl", "output_len", "output_tokens", "completion_tokens"),
    "weight": ("count", "weight"),
}
_WHAT = {"isl": "prompt-length", "osl": "output-length", "weight": "count/weight"}
#: Rows a lengths file may hold: a million requests describe any trace; more is a mistake (or a hostile file).
MAX_LENGTH_ROWS = 1_000_000


@dataclass
class LengthRows:
    """A lengths file as read: the weight of each (isl, osl) pair (duplicates merged), and the longest row
    with where it is (so the context check names the row, not the file)."""

    source: str
    weights: dict[tuple[int, int], float] = field(default_factory=dict)
    rows: int = 0
    longest: int = 0
    longest_at: str = ""
    longest_pair: tuple[int, int] = (0, 0)

    def add(self, isl: int, osl: int, weight: float, where: str) -> None:
        self.weights[(isl, osl)] = self.weights.get((isl, osl), 0.0) + weight
        if isl + osl > self.longest:
            self.longest, self.longest_at, self.longest_pair = isl + osl, where, (isl, osl)

    def count(self, where: str) -> None:
        """One more row; past :data:`MAX_LENGTH_ROWS`, refused."""
        self.rows += 1
        if self.rows > MAX_LENGTH_ROWS:
            raise DnnplaceError(f"{where}: more than {MAX_LENGTH_ROWS:,} rows; merge equal lengths with a count column")


def _tokens(v: Any, where: str) -> int:
    """A length: a whole number > 0 (JSON's 512.0 or the text "512" taken as 512)."""
    x = v
    if isinstance(v, str):
        try:
            x = int(v.strip())
        except ValueError:
            try:
                x = float(v.strip())
            except ValueError:
                raise DnnplaceError(f"{where}: {clip(repr(v), 40)} is not a whole number of tokens") from None
    if isinstance(x, bool) or not isinstance(x, (int, float)) or \
            (isinstance(x, float) and not (math.isfinite(x) and x.is_integer())):
        raise DnnplaceError(f"{where}: {clip(repr(v), 40)} is not a whole number of tokens")
    if x <= 0:
        raise DnnplaceError(f"{where}: {clip(repr(v), 40)}; a length must be a whole number > 0")
    return int(x)


def _weight(v: Any, where: str) -> float:
    """A count or weight: a finite number >= 0."""
    x = v
    if isinstance(v, str):
        try:
            x = float(v.strip())
        except ValueError:
            raise DnnplaceError(f"{where}: {clip(repr(v), 40)} is not a number") from None
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
        raise DnnplaceError(f"{where}: {clip(repr(v), 40)}; a count or weight must be a finite number >= 0")
    return float(x)


def _columns(names: list[str], where: str, given: str) -> dict[str, int]:
    """Which of ``names`` gives each field: exactly one for the lengths, at most one for the weight."""
    low = [n.strip().lower() for n in names]
    cols: dict[str, int] = {}
    for key, options in LENGTH_COLUMNS.items():
        found = [k for k, n in enumerate(low) if n in options]
        if len(found) > 1:
            raise DnnplaceError(f"{where}: {_WHAT[key]} given twice ({', '.join(repr(names[k]) for k in found)}); "
                                "keep one")
        if found:
            cols[key] = found[0]
        elif key != "weight":
            raise DnnplaceError(f"{where}: no {_WHAT[key]} {given} in {clip(', '.join(names), 80)}; name it one "
                                f"of {', '.join(options)}")
    return cols


def _csv_lengths(text: str, shown: str) -> LengthRows:
    """A CSV lengths file: a header row, then one row per request (or per length, with a count column)."""
    out = LengthRows(shown)
    reader = csv.reader(io.StringIO(text[1:] if text.startswith("\ufeff") else text))
    try:
        header = next((row for row in reader if any(c.strip() for c in row)), None)
        if header is None:
            raise DnnplaceError(f"{shown}: an empty file; give a header row (isl,osl[,count]) and a row per request")
        cols = _columns(header, f"{shown} line {reader.line_num}", "column")
        need = max(cols.values()) + 1
        for row in reader:
            if not any(c.strip() for c in row):
                continue
            at = f"{shown} line {reader.line_num}"
            out.count(at)
            if len(row) < need:
                raise DnnplaceError(f"{at}: {len(row)} fields, the header names {len(header)}")
            cell = {k: (row[c], f"{at}, column {clip(header[c].strip(), 40)!r}") for k, c in cols.items()}
            weight = _weight(*cell["weight"]) if "weight" in cell else 1.0
            out.add(_tokens(*cell["isl"]), _tokens(*cell["osl"]), weight, at)
    except csv.Error as exc:
        raise DnnplaceError(f"{shown} line {reader.line_num}: not CSV ({clip(exc, 80)})") from None
    return out


def lengths_from_json(doc: Any, shown: str) -> LengthRows:
    """Lengths from JSON: a list of ``[isl, osl]`` pairs (``[isl, osl, weight]`` triples, as a plan file
    writes them) or of objects with a prompt- and an output-length key (and a count or weight)."""
    if not isinstance(doc, list):
        raise DnnplaceError(f"{shown}: must be a list of [isl, osl] pairs or of objects with isl and osl")
    out = LengthRows(shown)
    for k, item in enumerate(doc):
        at = f"{shown}[{k}]"
        out.count(at)
        if isinstance(item, list):
            if len(item) not in (2, 3):
                raise DnnplaceError(f"{at}: a pair [isl, osl] (or [isl, osl, weight]), got {len(item)} items")
            isl, osl = _tokens(item[0], f"{at} isl"), _tokens(item[1], f"{at} osl")
            out.add(isl, osl, _weight(item[2], f"{at} weight") if len(item) == 3 else 1.0, at)
        elif isinstance(item, dict):
            keys = list(item)
            cols = _columns([str(x) for x in keys], at, "key")
            val = {name: (item[keys[c]], f"{at} {clip(keys[c], 40)}") for name, c in cols.items()}
            out.add(_tokens(*val["isl"]), _tokens(*val["osl"]),
                    _weight(*val["weight"]) if "weight" in val else 1.0, at)
        else:
            raise DnnplaceError(f"{at}: {clip(repr(item), 40)} is neither an [isl, osl] pair nor an object")
    return out


def read_lengths(path: str | Path) -> LengthRows:
    """A request-length distribution file: CSV with a header row, or JSON (``.json``, or text that opens with
    ``[`` or ``{``); see :data:`LENGTH_COLUMNS` for the names a column may have."""
    shown = clip(path, 120)
    text = read_text_file(path, "CSV or JSON")
    if str(path).lower().endswith(".json") or text.lstrip("\ufeff \t\r\n").startswith(("[", "{")):
        return lengths_from_json(read_json_file(path), shown)
    return _csv_lengths(text, shown)


def distribution(rows: LengthRows, context: int) -> tuple[tuple[int, int, float], ...]:
    """The workload's (isl, osl, weight) rows, sorted, those of weight 0 dropped: refused when there is no
    request, every weight is 0, or the longest request does not fit the context."""
    if not rows.weights:
        raise DnnplaceError(f"{rows.source}: no requests (give a header row and a row per request)")
    if rows.longest > context:
        i, o = rows.longest_pair
        raise DnnplaceError(f"{rows.longest_at}: isl {i} + osl {o} = {i + o} tokens is longer than the context "
                            f"({context} tokens)")
    dist = tuple(sorted((i, o, w) for (i, o), w in rows.weights.items() if w > 0))
    if not dist:
        raise DnnplaceError(f"{rows.source}: every count/weight is 0; no request is left")
    return dist


def mean_lengths(dist: tuple[tuple[int, int, float], ...]) -> tuple[int, int]:
    """The weighted mean prompt and output lengths of a distribution, whole tokens (at least 1): the request
    the steady-state evaluator prices (:class:`~dnnplace.models.serving.spec.Workload`)."""
    total = math.fsum(w for _, _, w in dist)
    isl = math.fsum(w * i for i, _, w in dist) / total
    osl = math.fsum(w * o for _, o, w in dist) / total
    return max(1, round(isl)), max(1, round(osl))
