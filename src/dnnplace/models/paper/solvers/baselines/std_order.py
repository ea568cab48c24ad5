"""The iteration order of a libstdc++ ``std::unordered_map<int, ...>``.

The paper's greedy baseline (C++) takes its blocks in a topological order
whose ties are broken by the iteration order of an ``unordered_map`` keyed by
colour class.  To reproduce its published latencies exactly, dnnplace
replays that container: identity hash, prime bucket counts, insertion at the
front of a bucket (or of the whole list when the bucket is empty) and the
standard rehash, which relinks nodes in list order.
"""

from __future__ import annotations

# (size that triggers the rehash, new bucket count) for one-at-a-time inserts
# into a default-constructed map (max load factor 1), as libstdc++ grows it.
_GROWTH = ((1, 13), (14, 29), (30, 59), (60, 127), (128, 257), (258, 541), (542, 1109), (1110, 2357),
           (2358, 5087), (5088, 10273), (10274, 20753), (20754, 42043), (42044, 85229), (85230, 172933),
           (172934, 351061))
_HEAD = object()


def unordered_map_order(keys: list[int]) -> list[int]:
    """Iteration order after inserting ``keys`` (duplicates ignored) one by one."""
    nxt: dict[object, object] = {_HEAD: None}
    buckets: dict[int, object] = {}
    n_buckets = 1
    size = 0
    growth = iter(_GROWTH)
    upcoming = next(growth)

    def bucket(k: int) -> int:
        return (k % (1 << 64)) % n_buckets

    seen: set[int] = set()
    for key in keys:
        if key in seen:
            continue
        seen.add(key)
        if size + 1 >= upcoming[0]:
            n_buckets = upcoming[1]
            upcoming = next(growth, (1 << 62, n_buckets))
            # rehash: walk the list in order, relinking into the new buckets
            p = nxt[_HEAD]
            nxt[_HEAD] = None
            buckets = {}
            bbegin = 0
            while p is not None:
                after = nxt[p]
                b = bucket(p)  # type: ignore[arg-type]
                if b not in buckets:
                    nxt[p] = nxt[_HEAD]
                    nxt[_HEAD] = p
                    buckets[b] = _HEAD
                    if nxt[p] is not None:
                        buckets[bbegin] = p
                    bbegin = b
                else:
                    before = buckets[b]
                    nxt[p] = nxt[before]
                    nxt[before] = p
                p = after
        b = bucket(key)
        if b in buckets:
            before = buckets[b]
            nxt[key] = nxt[before]
            nxt[before] = key
        else:
            nxt[key] = nxt[_HEAD]
            nxt[_HEAD] = key
            if nxt[key] is not None:
                buckets[bucket(nxt[key])] = key  # type: ignore[arg-type]
            buckets[b] = _HEAD
        size += 1
    order = []
    p = nxt[_HEAD]
    while p is not None:
        order.append(p)
        p = nxt[p]
    return order  # type: ignore[return-value]
