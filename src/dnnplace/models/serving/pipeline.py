"""One pipeline's exact search: given its stages in order, the best layer split over every batch it may run.

Why its own module: the deployment search (search.py) enumerates what this takes as given -- which GPUs form a
pipeline, in which order (:func:`stage_orders`), at which batch limits -- and this answers each with the DP's
split, the batch refined by branch and bound, and a bound the deployment search's proof is built from.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from dnnplace.models.serving.cost import Iteration, send_seconds
from dnnplace.models.serving.dp import split_prefix_dp
from dnnplace.models.serving.evaluation import (
    cached_times,
    cached_times_batch,
    evaluate_replica,
    iteration,
    link_between,
    micro_batches,
    seq_cap,
    seq_tokens,
    steady_batch,
    steps,
    steps_many,
)
from dnnplace.models.serving.memory import launch_memory, replica_memory, stage_memory
from dnnplace.models.serving.spec import Replica, ServingProblem, Stage

__all__ = ["TOL", "Unit", "best_replica", "launch_refusal", "node_run_refusal", "stage_orders", "units"]

#: Batch intervals whose bound is within this of the best split found are not refined.
TOL = 1e-9
#: What :func:`stage_orders` orders: the search's stage units, or a pinned plan's stages.
T = TypeVar("T")
#: DPs one pipeline's batch refinement may run (its grid and the intervals it splits).
_MAX_PROBES = 96
#: Batch limits up to this are priced whole before the refinement (above: the grid, then each interval it splits).
_PRICE_ALL = 512
#: Stage cost matrices one search keeps for its pipelines to share (each (layers + 1)^2 floats: ~50 KB at 80).
_SHARED_COSTS = 4096


@dataclass(frozen=True)
class Unit:
    """A stage's GPUs: one kind on one node (key), ``tp`` physical indices."""

    gpu: str
    node: int
    gpus: tuple[int, ...]

    @property
    def key(self) -> tuple[int, str]:
        return (self.node, self.gpu)


def units(p: ServingProblem, tp: int) -> dict[tuple[int, str], list[Unit]]:
    out: dict[tuple[int, str], list[Unit]] = {}
    for n, node in enumerate(p.fleet.nodes):
        for name, gpus in node.kinds().items():
            idx = [g.index for g in gpus]
            out[(n, name)] = [Unit(name, n, tuple(idx[i:i + tp])) for i in range(0, len(idx) - tp + 1, tp)]
    return out


class _Pipeline:
    """One ordered list of stages and what its DP needs that no batch changes: each stage's memory left for
    KV with no layer, the weight and KV-per-token prefixes over the layers, its link.  Why: the batch
    refinement runs the DP dozens of times per pipeline; only the layer times and the KV need move with the
    batch."""

    def __init__(self, p: ServingProblem, stages: list[Unit], mns: int, mbt: int,
                 shared: dict[Any, Any] | None = None) -> None:
        self.p, self.stages, self.mns, self.mbt, self.pp = p, stages, mns, mbt, len(stages)
        #: what pipelines of one search share (one problem and batch limits): the stage time prefixes by
        #: (signature, depth, batch) and the batches already priced per stage kind and depth,
        #: so the orders of the same GPUs do not redo each other's work
        self.shared: dict[Any, Any] = {} if shared is None else shared
        links = ["pcie" if p.fleet.nodes[u.node].link == "pcie" else "nvlink" for u in stages]
        hops = [link_between(p, Stage(a.gpu, a.node, a.gpus, 1), Stage(b.gpu, b.node, b.gpus, 1))
                for a, b in zip(stages, stages[1:])] + [None]
        #: per stage what its layer times depend on: stages with equal signatures share them (a pipeline of
        #: eight H100s has three: first, middle, last)
        self.sig = [(u.gpu, len(u.gpus), links[i], i == 0, i == self.pp - 1, hops[i]) for i, u in enumerate(stages)]
        self.usig = list(dict.fromkeys(self.sig))  # the distinct signatures, and which one each stage reads
        self.rows = np.array([self.usig.index(g) for g in self.sig], dtype=np.int64)
        self.per_seq = seq_tokens(p)
        self.mb = micro_batches(p, self.pp)  # micro-batches in flight: pp, or 1 where a step runs stage by stage
        self.slope = p.fraction if p.engine.fraction_of == "free" else 1.0  # TensorRT-LLM: a share of what is left
        wpre = np.concatenate([[0.0], np.cumsum(p.model.weight_bytes)])
        launch = launch_memory([u.gpu for u in stages])
        # what the DP's fit check reads per kind of stage: KV room with no layer, and the weight and KV
        # prefixes, so layers [i, j) fit where free0 - slope * (w[j] - w[i]) >= need * (k[j] - k[i])
        self.free0 = np.array([stage_memory(p, gpu, tp, 0, 0, first, last, mns, mbt, self.pp, launch).kv_free
                               for gpu, tp, _, first, last, _ in self.usig])
        self.wpre = np.stack([wpre / tp for _, tp, *_ in self.usig])
        self.kpre = np.stack([np.concatenate([[0.0], np.cumsum(p.model.kv_per_gpu(tp))]) for _, tp, *_ in self.usig])

    def steps(self, seqs: int) -> list[tuple[float, Iteration]]:
        """The evaluator's steps of a micro-batch at ``seqs`` sequences in the pipeline, with their shares (once
        per depth and batch in a search: the orders of one set of GPUs run the same micro-batches)."""
        memo: dict[Any, list[tuple[float, Iteration]]] = self.shared.setdefault("steps", {})
        key = (self.pp, seqs)
        if key not in memo:
            memo[key] = steps(self.p, max(seqs / self.mb, 1.0), self.mbt)
        return memo[key]

    def prefetch(self, batches: list[int]) -> None:
        """Price the layer times of these batches' steps on every stage kind in one call each (once per search)."""
        done: dict[Any, set[int]] = self.shared.setdefault("priced", {})
        kinds = [k for k in dict.fromkeys(s[:3] for s in self.sig)]
        every = set.intersection(*[done.setdefault((k, self.pp), set()) for k in kinds])  # priced on all kinds
        todo = [b for b in batches if b not in every]
        if not todo:
            return
        its = [x for mix in steps_many(self.p, [max(b / self.mb, 1.0) for b in todo], self.mbt) for _, x in mix]
        for gpu, tp, link in kinds:
            cached_times_batch(self.p, gpu, tp, its, self.p.engine.framework, link)
            done[((gpu, tp, link), self.pp)].update(todo)

    def split(self, seqs: int) -> tuple[float, tuple[int, ...]]:
        """The DP: the smallest bottleneck time holding ``seqs`` sequences of KV, and its split (memory as
        :func:`evaluate` sizes it: activations and logits at the engine's ``max_num_seqs``)."""
        p = self.p
        mix = self.steps(seqs)
        # an engine that refuses to start without one pinned max_model_len request's cache (vLLM)
        floor = p.max_model_len if p.engine.max_len_must_fit else 0
        need = max(seqs * self.per_seq, floor)
        made: dict[tuple[Any, ...], tuple[np.ndarray, float]] = {}
        memo: dict[Any, tuple[np.ndarray, float]] = self.shared.setdefault("costs", {})
        for sig in self.usig:
            key = (sig, self.pp, seqs)
            if key in memo:
                made[sig] = memo[key]
                continue
            gpu, tp, link, first, last, hop = sig
            per_layer = np.zeros(p.model.num_layers)  # the steps' shares of each layer's time
            fixed = 0.0  # and of the head and the send
            for w, x in mix:
                lt = cached_times(p, gpu, tp, x, p.engine.framework, link)
                per_layer = per_layer + w * lt.per_layer
                fixed += w * (lt.head if last else 0.0)
                if hop is not None:
                    fixed += w * send_seconds(gpu, x.tokens * p.model.hidden * 2.0, hop,
                                              p.fleet.network_bandwidth, p.fleet.network_latency_s)
            made[sig] = (np.concatenate([[0.0], np.cumsum(per_layer)]), fixed)
            if len(memo) > _SHARED_COSTS:
                memo.clear()
            memo[key] = made[sig]
        prefix = np.stack([made[sig][0] for sig in self.usig])
        fixed_u = np.array([made[sig][1] for sig in self.usig])
        s = split_prefix_dp(prefix, fixed_u, self.free0, self.wpre, self.slope, self.kpre, float(need), self.rows,
                            total=self.mb == 1)
        return s.value, s.layers


def _grid(limit: int) -> list[int]:
    g = sorted({1, *[int(2 ** (k / 2)) for k in range(0, 2 * int(math.log2(max(limit, 1))) + 2)], limit})
    return [b for b in g if b <= limit]


def _concurrency(p: ServingProblem, r: Replica, mns: int, mbt: int) -> float:
    """The batch ``evaluate_replica`` runs ``r`` at, from memory alone (no kernel pricing)."""
    _, kv = replica_memory(p, r, mns, mbt)
    return steady_batch(p, kv, seq_cap(p, r.pp, mns))


def best_replica(p: ServingProblem, stages: list[Unit], mns: int, mbt: int, floor: float = 0.0,
                 shared: dict[Any, Any] | None = None) -> tuple[float, float, Replica | None]:
    """(throughput, upper bound, replica) of one pipeline over ``stages`` in this order, exact over the batch.

    ``floor``: what another pipeline over the same GPUs already serves; batches whose bound is no more are
    not refined, and the bound returned is then only good together with that floor (the caller's maximum).

    Why exact: the DP's smallest bottleneck time ``t(c)`` holding ``c`` sequences grows with ``c``, and
    the decode tokens of an iteration grow with ``c``, so no split running ``c`` in ``[a, b)`` beats
    ``decode(b - 1) / t(a)``.  The batch grid is refined (branch and bound) until every interval's bound
    is below the best evaluated split; each candidate split is priced by :func:`evaluate_replica`, the
    one evaluator, at the batch its KV cache really holds.
    """
    pp = len(stages)
    mb = micro_batches(p, pp)
    cap = seq_cap(p, pp, mns)
    limit = cap if p.workload.concurrency is None else min(cap, p.workload.concurrency)
    pipe = _Pipeline(p, stages, mns, mbt, shared)
    priced: set[int] = set()
    t_of: dict[int, float] = {}
    best, rep = 0.0, None
    tried: set[tuple[int, ...]] = set()

    def probe(b: int) -> float:
        nonlocal best, rep
        if b not in t_of:
            t, layers = pipe.split(b)
            t_of[b] = t
            if math.isfinite(t) and layers not in tried:
                tried.add(layers)
                r = Replica(tuple(Stage(u.gpu, u.node, u.gpus, n) for u, n in zip(stages, layers)))
                # the split runs the batch its KV cache holds (>= b): no more than decode(that) / t(b)
                if iteration(p, max(_concurrency(p, r, mns, mbt) / mb, 1.0), mbt).decode / t > \
                        max(best, floor) * (1 + TOL):
                    v = evaluate_replica(p, r, mns, mbt, latency=False).tokens_per_s
                    if v > best:
                        best, rep = v, r
        return t_of[b]

    def ub(a: int, b: int) -> float:  # a bound on any split running a batch in [a, b]
        t = probe(a)
        return iteration(p, max(b / mb, 1.0), mbt).decode / t if math.isfinite(t) else 0.0

    # the grid in sequences per micro-batch: pipelines of any depth share these iterations (and their pricing)
    grid = sorted({1, limit} | {min(s * mb, limit) for s in _grid(max(limit // mb, 1))})
    # one kernel-layer call per stage kind prices the grid, or every batch the refinement may probe where they
    # are few (a call of a few hundred iterations costs about two of one)
    first = list(range(1, limit + 1)) if limit <= _PRICE_ALL else grid
    pipe.prefetch(first)
    priced.update(first)
    for b in grid:  # every grid point first: a good incumbent prunes most intervals
        if not math.isfinite(probe(b)):
            break
    heap = [(-ub(a, b - 1), a, b) for a, b in zip(grid, grid[1:] + [grid[-1] + 1])]
    heapq.heapify(heap)
    bound = 0.0
    while heap:  # best first: the interval with the highest bound is refined next
        u, a, b = heapq.heappop(heap)
        u = -u
        if u <= max(best, floor) * (1 + TOL) or u == 0.0:
            break
        if b - a <= 1 or len(t_of) >= _MAX_PROBES:
            # a single batch whose own split falls short of its bound (the cost is not monotone in the batch
            # there), or the refinement's budget spent: the bound stands and the gap says so
            bound = max(bound, u)
            continue
        if a + 1 not in priced:  # the first split inside a grid interval: price all its batches at once
            rest = [x for x in range(a, b) if x not in priced]
            pipe.prefetch(rest)
            priced.update(rest)
        mid = (a + b) // 2
        heapq.heappush(heap, (-ub(a, mid - 1), a, mid))
        heapq.heappush(heap, (-ub(mid, b - 1), mid, b))
    return best, max(bound, best), rep


def launch_refusal(p: ServingProblem, nodes: Sequence[int]) -> str:
    """Why the engine cannot launch a replica whose stages sit on ``nodes`` (in stage order); "" when it can.

    Why: an engine that launches a replica across nodes (``EngineRules.multi_node``: vLLM, SGLang) gives every
    node the same number of consecutive ranks (:func:`node_run_refusal`); the others' launches (TensorRT-LLM's
    LLM-API options, llama.cpp, a ``device_map``) are one node's.  A plan the engine cannot start as priced is
    a wrong answer, so the search never offers one."""
    if len(set(nodes)) <= 1:
        return ""
    if not p.engine.multi_node:
        return (f"a replica across nodes is launched by vLLM and SGLang only (their multi-node launches), not by "
                f"{p.engine.name}")
    return node_run_refusal(nodes, p.engine.name)


def node_run_refusal(nodes: Sequence[int], launcher: str) -> str:
    """Why ``launcher``'s multi-node launch cannot start a replica whose stages sit on ``nodes`` (in stage order);
    "" when it can.  vLLM's (``config/parallel.py``: ``local_world_size = world_size // nnodes``, node k runs
    global ranks [k L, (k + 1) L)) and SGLang's (``entrypoints/engine.py::_calculate_rank_ranges``:
    ``pp_size_per_node = pp_size // nnodes``) give every node the same number of consecutive ranks, so the
    stages must form one run per node, the runs equally long."""
    runs = [(n, len(list(g))) for n, g in itertools.groupby(nodes)]
    seen = [n for n, _ in runs]
    if len(set(seen)) != len(seen):
        return (f"the replica's stages go back to node {next(n for n in seen if seen.count(n) > 1) + 1} after "
                f"leaving it: {launcher}'s multi-node launch gives each node consecutive ranks")
    if len({k for _, k in runs}) > 1:
        return (f"the replica holds {'/'.join(str(k) for _, k in runs)} stages on its nodes: {launcher}'s "
                "multi-node launch runs the same number of workers on every node")
    return ""


def stage_orders(units: dict[Any, list[T]]) -> list[list[T]]:
    """Every stage order a pipeline over these units (per (node, kind) key) needs to be tried in: the first
    stage's key, the last stage's key, and between them each key's other units in one block, the blocks in
    every order; orders with the same key sequence once.

    Why this loses nothing: the DP prices a stage by its kind, its layers, whether it is first (embedding) or
    last (LM head, sampler) and the link its activations cross to the next stage; units of one key are
    interchangeable.  Between a fixed first and last stage, splitting a key's block only turns a send to a
    unit of the same kind (NVLink where the node has it) into a send across kinds or nodes, never the other
    way, so the blocks dominate every interleaving -- but the ends do not: an order that puts the larger GPUs
    at both ends (A, T, T, A) can hold more KV cache than any order of whole blocks."""
    keys = [k for k, v in units.items() if v]
    out: list[tuple[int, list[T]]] = []
    seen: set[tuple[Any, ...]] = set()
    total = sum(len(units[k]) for k in keys)
    for f in keys:
        for last in keys if total > 1 else [f]:
            pools = {k: list(units[k]) for k in keys}
            head = pools[f].pop(0)
            if total > 1 and not pools[last]:
                continue
            tail = pools[last].pop() if total > 1 else None
            rest = [k for k in keys if pools[k]]
            for order in itertools.permutations(rest):
                seq = (f, *[k for k in order for _ in pools[k]], *([last] if tail is not None else []))
                if seq in seen:
                    continue
                seen.add(seq)
                runs = 1 + sum(a != b for a, b in zip(seq, seq[1:]))
                out.append((runs, [head, *[u for k in order for u in pools[k]], *([tail] if tail is not None else [])]))
    # whole blocks first (the usual best): a good incumbent lets the others stop early (best_replica's floor)
    return [o for _, o in sorted(out, key=lambda x: x[0])]
