"""Room in a bounded memo whose entries are owned by the object they were computed for.

Why: the serving model's memos (layer times, stage memories) key on ``id()`` of a model or problem and keep
the owner in the entry, so a freed owner's recycled id never answers for another.  When such a memo fills,
clearing it whole also drops the entries of the search that is running, which then prices again, one call at
a time, what it had priced in batches -- a process that planned other problems first (a benchmark, a library
user, the baselines beside a plan) paid that mid-search.  Entries of other owners go first.
"""

from __future__ import annotations

from typing import Any


def make_room(cache: dict[Any, tuple[Any, Any]], owner: object, cap: int, incoming: int = 1) -> None:
    """Keep ``cache`` (values ``(owner, value)``) within ``cap`` once ``incoming`` entries are added: if it
    would overflow, drop every entry another owner holds; if that is not enough, drop everything."""
    if len(cache) + incoming <= cap:
        return
    for key in [k for k, v in cache.items() if v[0] is not owner]:
        del cache[key]
    if len(cache) + incoming > cap:
        cache.clear()
