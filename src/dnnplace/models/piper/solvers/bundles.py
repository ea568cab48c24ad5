"""The Piper kernel's arguments, grouped by meaning: numba takes namedtuples of arrays as they are.

The solver builds the first four (:class:`Tails`, :class:`Graph`, :class:`Options`,
:class:`Limits`) and :class:`Points`; the kernel allocates the rest.  Every compiled function
unpacks the fields it uses once, at its top: numba takes a reference (an atomic increment and
decrement) each time an array is read out of a tuple, which inside a hot loop can cost more
than the work (it made the DP kernel's walk 2.7 times slower when tried there).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

Tails = namedtuple("Tails", [
    "down_ptr", "down_ideal", "down_unit",  # the cover relation of the tails (CSR, see dp.ideals)
    "miss_sum", "nonstatic_sum",  # per tail and t: nodes without TMPCs / without an always-fastest option
    "pmin_sum", "mmin_sum", "mmin2_sum",  # per tail and t: least compute; least memory at 1 and 2 in flight
    "wp_sum",  # per tail: (least device-seconds, least compute) over t
])
Graph = namedtuple("Graph", [
    "in_ptr", "in_edge", "out_ptr", "out_edge",  # per node: its in- and out-edges (CSR)
    "esrc", "edst", "ecost",  # per edge: ends and bytes
    "fwe", "bwe",  # per edge, t and option: extra forward / backward bytes
])
Options = namedtuple("Options", [
    "nopt", "pp", "ww", "aa", "bb",  # per node, t (and option): count, compute, weights, memory a*y + b
    "fast",  # per node and t: the option fastest in every stage and for every d
    "tvals", "divs", "dmax_t",  # tensor-parallel degrees; data-parallel degrees; the largest d per t
])
Limits = namedtuple("Limits", [
    "K", "big_n", "bw", "memory",  # devices, micro-batches per batch, bandwidth, memory per device
    "tau",  # the bound of this run: stages slower than it are cut
    "S",  # the largest sum of data-parallel degrees
])
Points = namedtuple("Points", [
    "row_ptr",  # the points of tail I with k devices: [row_ptr[I, k], row_ptr[I, k + 1])
    "kmin",  # per tail: the fewest devices of any point (K + 1: none)
    "pts_s", "pts_v",  # per point: sum of d, value
])
Window = namedtuple("Window", ["k_lo", "k_hi", "s_lo", "s_hi"])  # the (k, s) box of one tail worth updating
Stage = namedtuple("Stage", [
    "xs",  # the nodes of the stage under the walk: xs[:sp]
    "in_s",  # per node: 1 while in the stage
    "e_s",  # per node, t and option: boundary bytes in the current stage (stage.stage_edges)
])
Scratch = namedtuple("Scratch", [
    "it_c", "it_da", "it_db",  # per memory-saving switch: extra compute (or edge bytes), memory saved (a, b)
    "kc", "ks",  # the switches handed to the cover: cost, saving
    "w1", "w2", "w3", "w4",  # the cover's work space
    "it_dp", "it_dw",  # per switch: extra compute, extra weights (static stages)
    "agg",  # sums of a static stage (stage.gather_static)
    "it_cd", "ratio", "order", "cum_s", "cum_c",  # per switch: cost at d, cost per saving, ratio order, prefixes
    "r",  # the stage table R[y]
    "ext",  # per y: exact cover, its lower and upper bound (stage.cover_bounds)
])


@njit(cache=True)
def new_stage(n, n_t):
    """An empty stage over ``n`` nodes and ``n_t`` tensor-parallel degrees."""
    return Stage(np.empty(n + 2, dtype=np.int64), np.zeros(n, dtype=np.int8), np.zeros((n, n_t, 2)))


@njit(cache=True)
def new_scratch(n, S):
    """Work space of the stage tables for ``n`` nodes and sums of d up to ``S``."""
    return Scratch(np.empty(n + 1), np.empty(n + 1), np.empty(n + 1), np.empty(n + 1), np.empty(n + 1),
                   np.empty(4096), np.empty(4096), np.empty(4096), np.empty(4096), np.empty(n + 1), np.empty(n + 1),
                   np.empty(8), np.empty(n + 1), np.empty(n + 1), np.empty(n + 1, dtype=np.int64), np.empty(n + 2),
                   np.empty(n + 2), np.empty(S + 2), np.empty(3 * (S + 2)))
