"""The depth-first walk down an ideal lattice's cover relation, shared by the paper's DP and Piper's.

Both DPs enumerate, for an ideal ``I``, the sub-ideals ``J`` reachable by removing
maximal units one at a time, i.e. the contiguous sets ``S = I minus J`` grown unit by
unit; each visit decides whether to go deeper (pruning is the caller's).  The walk
keeps a stack of (ideal, next cover edge) and a ``stamp`` per ideal so that every
sub-ideal is visited once per walk.

The three steps are ``inline="always"`` and take plain arrays and integers: numba
inlines them into the caller's loop, and the caller unpacks its argument bundles once
outside the loop (reading an array out of a namedtuple inside the loop costs an atomic
reference count per read).  A caller's loop reads::

    sp = start(I, stamp, stack_j, stack_e, down_ptr)
    while sp >= 0:
        e = next_cover(sp, I, stamp, stack_j, stack_e, down_ptr, down_ideal)
        if e < 0:            # the top's covers are exhausted: undo its unit, pop
            ...; sp -= 1
            continue
        J2, x = down_ideal[e], down_unit[e]   # S grows by x
        ...
        if worth_going_deeper:
            sp = descend(sp, J2, stack_j, stack_e, down_ptr)
"""

from __future__ import annotations

from numba import njit


@njit(cache=True, inline="always")
def start(root, stamp, stack_j, stack_e, down_ptr):
    """Begin a walk below ``root``: ``root`` marked seen, on the stack with its first cover edge; the stack top."""
    stamp[root] = root
    stack_j[0] = root
    stack_e[0] = down_ptr[root]
    return 0


@njit(cache=True, inline="always")
def next_cover(sp, root, stamp, stack_j, stack_e, down_ptr, down_ideal):
    """The next cover edge of the stack top whose lower ideal this walk has not seen (now marked), or -1."""
    e = stack_e[sp]
    end = down_ptr[stack_j[sp] + 1]
    while e < end:
        j2 = down_ideal[e]
        e += 1
        if stamp[j2] != root:
            stamp[j2] = root
            stack_e[sp] = e
            return e - 1
    stack_e[sp] = e
    return -1


@njit(cache=True, inline="always")
def descend(sp, j2, stack_j, stack_e, down_ptr):
    """Push the sub-ideal ``j2`` (the walk goes on below it); the new stack top."""
    sp += 1
    stack_j[sp] = j2
    stack_e[sp] = down_ptr[j2]
    return sp
