"""One pipeline schedule representation: what each rank runs, in order, for every simulator and the runtime.

A :class:`Schedule` is a list of :class:`Action` per rank (a device of the paper's
model, a stage process of the runtime, a pipeline rank of the LLM planner), in
issue order.  It is built by one of the generators below, checked by
:meth:`Schedule.validate`, printed by :meth:`Schedule.text`, saved and read back
by :meth:`Schedule.to_dict` / :meth:`Schedule.from_dict`; the LLM evaluator prices
it, the simulators time it, the runtime executes it and the reports draw it, so that
the order priced is the order run.  It lives with the model's types, below every
layer that uses it.

An action names a kind (``F`` forward, ``B`` backward, ``W`` weight gradient),
a micro-batch and a chunk (the model chunk of an interleaved schedule: virtual
stage ``chunk * ranks + rank`` in Megatron's placement; 0 otherwise).  Which
rank feeds which is not part of the schedule: the paper's pipelines are DAGs
of devices, the LLM's a chain of virtual stages, and each simulator supplies
its own dependencies.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeGuard

from dnnplace.errors import DnnplaceError

#: Forward, backward (input and weight gradients together, or input only when a ``W`` follows), weight gradient.
KINDS = ("F", "B", "W")
#: The schedules of the paper's simulator and the runtime (by name).
SCHEDULES = ("1f1b", "gpipe")
_ACTION = re.compile(r"([FBW])(\d+)(?:\.(\d+))?")


class Action(NamedTuple):
    """One task of one rank: a kind of pass over one micro-batch of one chunk.

    A named tuple rather than a dataclass: the simulators hold millions of them.
    """

    kind: str
    microbatch: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{self.kind}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")

    @classmethod
    def parse(cls, text: Any) -> Action:
        """The action written as ``F3`` (chunk 0) or ``B3.1`` (chunk 1); anything else is refused."""
        match = _ACTION.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise DnnplaceError(f"a schedule action is written like F3, B3 or W3.1, not {text!r:.40}")
        return cls(match[1], int(match[2]), int(match[3] or 0))


@dataclass(frozen=True)
class Schedule:
    """Each rank's actions in issue order; ``microbatches`` and ``chunks`` bound their indices."""

    name: str
    microbatches: int
    chunks: int
    ranks: tuple[tuple[Action, ...], ...]

    @property
    def training(self) -> bool:
        """Whether the schedule runs backward passes (every rank does, or none: :meth:`validate`)."""
        return any(a.kind == "B" for seq in self.ranks for a in seq)

    def validate(self) -> Schedule:
        """Refuse, in one line naming the rank and the action, a schedule no pipeline could run.

        Every rank runs the forward of every (micro-batch, chunk) once; in a training schedule
        every rank also runs its backward once, after that forward; a weight-gradient pass, when
        there is one, comes after its backward.  Returns the schedule, so a generator can end with it.
        """
        if self.microbatches < 1 or self.chunks < 1 or not self.ranks:
            raise DnnplaceError(f"schedule '{self.name}' needs at least one rank, micro-batch and chunk")
        training = self.training
        for r, seq in enumerate(self.ranks):
            seen: set[Action] = set()
            for a in seq:
                if a.kind not in KINDS or not 0 <= a.microbatch < self.microbatches or not 0 <= a.chunk < self.chunks:
                    raise DnnplaceError(f"schedule '{self.name}': rank {r} has {a}, outside {self.microbatches}"
                                        f" micro-batches x {self.chunks} chunks of kinds {', '.join(KINDS)}")
                if a in seen:
                    raise DnnplaceError(f"schedule '{self.name}': rank {r} runs {a} twice")
                before = {"B": "F", "W": "B"}.get(a.kind)
                if before is not None and Action(before, a.microbatch, a.chunk) not in seen:
                    raise DnnplaceError(f"schedule '{self.name}': rank {r} runs {a} before"
                                        f" {Action(before, a.microbatch, a.chunk)}")
                seen.add(a)
            for kind in ("F", "B") if training else ("F",):
                missing = [Action(kind, m, c) for c in range(self.chunks) for m in range(self.microbatches)
                           if Action(kind, m, c) not in seen]
                if missing:
                    raise DnnplaceError(f"schedule '{self.name}': rank {r} never runs {missing[0]}"
                                        + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        return self

    def in_flight(self, rank: int) -> int:
        """The most micro-batch chunks ``rank`` holds between a forward and its backward (0: forward only).

        What a rank's activation memory is multiplied by: the schedule decides it, not its name.
        """
        if not self.training:
            return 0
        live = peak = 0
        for a in self.ranks[rank]:
            if a.kind == "F":
                live += 1
                peak = max(peak, live)
            elif a.kind == "B":
                live -= 1
        return peak

    def text(self) -> str:
        """The schedule as aligned text, one line per rank (as a log or a test failure shows it)."""
        cells = [[str(a) for a in seq] for seq in self.ranks]
        width = max((len(c) for row in cells for c in row), default=1)
        head = (f"{self.name}: {len(self.ranks)} ranks, {self.microbatches} micro-batches"
                + (f", {self.chunks} chunks" if self.chunks > 1 else ""))
        label = len(str(len(self.ranks) - 1))
        return "\n".join([head] + [f"rank {r:>{label}}: " + " ".join(c.ljust(width) for c in row).rstrip()
                                   for r, row in enumerate(cells)])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form that :meth:`from_dict` reads back (actions written as :meth:`Action.__str__`)."""
        return {"name": self.name, "microbatches": self.microbatches, "chunks": self.chunks,
                "ranks": [[str(a) for a in seq] for seq in self.ranks]}

    @classmethod
    def from_dict(cls, data: Any) -> Schedule:
        """Read :meth:`to_dict`'s form, refusing in one line anything malformed or unrunnable."""
        if not isinstance(data, dict) or not isinstance(data.get("ranks"), list):
            raise DnnplaceError("a schedule is an object with a list of ranks, each a list of actions")
        name, microbatches, chunks = data.get("name", "schedule"), data.get("microbatches"), data.get("chunks", 1)
        if not isinstance(name, str) or not _whole(microbatches) or not _whole(chunks):
            raise DnnplaceError("a schedule's name is a string and its microbatches and chunks are integers")
        if not all(isinstance(seq, list) for seq in data["ranks"]):
            raise DnnplaceError("each rank of a schedule is a list of actions")
        ranks = tuple(tuple(Action.parse(a) for a in seq) for seq in data["ranks"])
        return cls(name, microbatches, chunks, ranks).validate()


def _whole(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _chain(ranks: int, after: Sequence[int] | None) -> list[int]:
    """Per rank, the stages downstream of it: given, or those of a chain of ``ranks``."""
    if after is None:
        return [ranks - 1 - r for r in range(ranks)]
    if len(after) != ranks or any(a < 0 for a in after):
        raise DnnplaceError(f"need a non-negative count of later stages for each of the {ranks} ranks")
    return [int(a) for a in after]


def _check_counts(**counts: int) -> None:
    for name, value in counts.items():
        if value < 1:
            raise DnnplaceError(f"a schedule needs {name} of at least 1, got {value}")


def gpipe(ranks: int, microbatches: int, *, training: bool = True) -> Schedule:
    """GPipe: every forward, then every backward (a flush per step); forward only without training."""
    _check_counts(ranks=ranks, microbatches=microbatches)
    fwd = tuple(Action("F", m) for m in range(microbatches))
    bwd = tuple(Action("B", m) for m in range(microbatches)) if training else ()
    return Schedule("gpipe", microbatches, 1, tuple(fwd + bwd for _ in range(ranks)))


def one_f_one_b(ranks: int, microbatches: int, *, after: Sequence[int] | None = None,
                training: bool = True) -> Schedule:
    """PipeDream's 1F1B: as many warm-up forwards as stages after the rank, then one forward, one backward.

    ``after[r]`` is the number of pipeline stages downstream of rank ``r`` (a chain of ``ranks``
    when omitted; in a DAG of devices, the longest path below it).  Forward only without training.
    """
    _check_counts(ranks=ranks, microbatches=microbatches)
    seqs = []
    for a in _chain(ranks, after):
        if not training:
            seqs.append(tuple(Action("F", m) for m in range(microbatches)))
            continue
        warm = min(a, microbatches)
        seq = [Action("F", m) for m in range(warm)]
        for m in range(microbatches - warm):
            seq += [Action("F", warm + m), Action("B", m)]
        seq += [Action("B", m) for m in range(microbatches - warm, microbatches)]
        seqs.append(tuple(seq))
    return Schedule("1f1b", microbatches, 1, tuple(seqs))


def interleaved_1f1b(pp: int, vp: int, microbatches: int) -> Schedule:
    """Megatron-Core's interleaved 1F1B, each rank's tasks in the order it issues them (1F1B when ``vp`` is 1).

    A rank holds ``vp`` chunks (virtual stage ``chunk * pp + rank``); see :func:`megatron_rank`.
    """
    _check_counts(pp=pp, vp=vp, microbatches=microbatches)
    if vp > 1 and microbatches % pp:
        raise DnnplaceError(f"interleaving needs the micro-batches ({microbatches}) to be a multiple of pp ({pp})")
    return Schedule("interleaved 1f1b" if vp > 1 else "1f1b", microbatches, vp,
                    tuple(megatron_rank(r, pp, vp, microbatches) for r in range(pp)))


def megatron_rank(rank: int, pp: int, vp: int, microbatches: int) -> tuple[Action, ...]:
    """One rank's actions of :func:`interleaved_1f1b`, for callers that need a rank at a time.

    Forwards go chunk after chunk in groups of ``pp`` micro-batches, backwards likewise from
    the last chunk.  Warm-up forwards: ``(pp - rank - 1) * 2 + (vp - 1) * pp`` when interleaving
    (``pp - rank - 1`` without), capped at all of them; then one forward, one backward; then the
    remaining backwards.  Unchecked: interleaving needs ``microbatches % pp == 0`` (the caller's rule).
    """
    total = microbatches * vp

    def task(kind: str, k: int) -> Action:
        group, within = divmod(k, pp * vp)
        chunk = within // pp
        return Action(kind, group * pp + within % pp, chunk if kind == "F" else vp - 1 - chunk)

    warm = min((pp - rank - 1) * 2 + (vp - 1) * pp if vp > 1 else pp - rank - 1, total)
    seq = [task("F", k) for k in range(warm)]
    for i in range(total - warm):
        seq += [task("F", warm + i), task("B", i)]
    seq += [task("B", k) for k in range(total - warm, total)]
    return tuple(seq)


def by_name(name: str, ranks: int, microbatches: int, *, after: Sequence[int] | None = None,
            training: bool = True) -> Schedule:
    """The schedule ``name`` (one of :data:`SCHEDULES`) for the paper's simulator and the runtime."""
    if name == "gpipe":
        return gpipe(ranks, microbatches, training=training)
    if name == "1f1b":
        return one_f_one_b(ranks, microbatches, after=after, training=training)
    raise DnnplaceError(f"unknown schedule '{name}'; choose one of: {', '.join(SCHEDULES)}")
