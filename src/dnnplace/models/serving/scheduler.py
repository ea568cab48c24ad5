"""One replica's engine scheduler, stepped by the discrete-event simulation, and the price of its batches.

Why vLLM v1's scheduler (``vllm/v1/core/sched/scheduler.py::Scheduler.schedule``): it is the
engine the planner exports first and the one whose contract ``ENGINES.md`` reads in full.  Every
step it first gives each running request (in admission order) the tokens it still lacks -- one for
a decode, the rest of a prompt for a chunked prefill -- from the ``max_num_batched_tokens`` budget;
when a request needs a KV block and none is free it preempts the newest running request by
recompute (its blocks freed, its computed tokens reset to 0, put back at the head of the waiting
queue).  With prefix caching (``EngineRules.prefix_cache``: vLLM v1 turns it on by default) a preempted
request's full blocks stay in the cache while free: the free queue hands out the blocks freed longest ago
first, and a request's blocks go back tail first, so its prompt's head survives longest; re-admitted, it
recomputes only what other requests' allocations took since (``v1/core/kv_cache_manager.py::free``,
``v1/core/block_pool.py::get_new_blocks``).  Only when nothing was preempted does it admit waiting requests,
FCFS, while fewer than
``max_num_seqs`` run, the budget lasts and their chunk's blocks are free.  A request whose tokens are
all in flight (PP: its decode is still in an earlier micro-batch) gets nothing this step.  The
token a request samples comes out when its whole prompt (plus, after a recompute, its earlier
output) has been computed: vLLM discards what a partial prefill samples
(``v1/worker/gpu_model_runner.py``), so the first token ends the last prefill chunk.  Under PP each
step fills its micro-batch greedily from every ready request, as vLLM v1 does: micro-batches come out
uneven and stay so (vLLM issue #41682; the balancing PRs #19873 (closed), #39165 and #50410 (open)
as found in the tracker), where the evaluator assumes ``concurrency / pp`` sequences in each.

An engine that reserves a request's whole length (``EngineRules.capacity_policy == "reserve"``:
TensorRT-LLM) runs its own two schedulers instead.  The capacity scheduler (GUARANTEED_NO_EVICT)
admits waiting requests FCFS while fewer than ``max_batch_size`` run and the blocks of the whole
ISL + OSL are free, and never preempts; the micro-batch scheduler
(``batch_manager/microBatchScheduler.cpp``) walks the running requests in order -- a generating one
costs one token, one still in its context its whole prompt -- and stops at the first that overflows
``max_num_tokens``.  Without chunked prefill (``enable_chunked_prefill`` defaults to False) a prompt
is never split; the context step produces the first token.  With batch waiting on
(``EngineRules.batch_wait_*``; ``pyexecutor/py_executor.py::_waiting_requests``), a step that has both
contexts and generations drops its contexts while their tokens and the generations' stay under the ratio
of ``max_num_tokens`` and fewer than the timeout's iterations have waited.

SGLang without ``--enable-mixed-chunk`` (its default) does not mix prompts into decode steps
(``managers/scheduler.py::get_next_batch_to_run``): whenever a prompt (a chunked one first, then new
requests FCFS within the token budget) is ready, the step is a batch of prompts alone; otherwise it is a
decode batch of every running request.

Why a price grid: one ``layer_times`` call costs milliseconds (it asks the kernel layer for seven
prices), and every batch of a simulation is a different (decodes, KV length, prompt tokens).  The
stage times are taken from :func:`~dnnplace.models.serving.evaluation.cached_times` -- the same
call the evaluator prices with -- at grid points (decodes and prompt tokens exact up to 8, then
every 20 %, plus the prompt length and the token budget; KV length every 25 %) and interpolated
linearly along each axis between them, so a prompt's prefill alone is priced exactly and the rest
within the grid's interpolation error (decode attention is linear in the KV length).
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from dnnplace.models.serving.cost import Iteration, send_seconds
from dnnplace.models.serving.evaluation import cached_times, link_between, micro_batches, prompts_chunked, seq_cap
from dnnplace.models.serving.spec import Replica, ServingProblem

__all__ = ["Batch", "ReplicaScheduler", "RequestTable", "StagePricer", "price_grid"]

#: Grid spacing of the price table: decodes and prompt tokens every 20 % above 8, KV length every 25 %.
GRID_STEP = 1.2
KV_STEP = 1.25


def price_grid(limit: int, extra: tuple[int, ...] = ()) -> list[int]:
    """Token or sequence counts priced exactly: 0..8, then every 20 %, ``limit`` and ``extra``."""
    pts = set(range(min(limit, 8) + 1))
    x = 8.0
    while x < limit:
        pts.add(int(round(x)))
        x *= GRID_STEP
    pts.add(limit)
    pts.update(e for e in extra if 0 <= e <= limit)
    return sorted(pts)


class StagePricer:
    """Seconds each stage of one replica spends on a batch: its layers (the evaluator's ``cached_times``),
    the LM head on the last stage, and the activations sent to the next stage on their link.

    A batch is priced by its token counts and mean KV length; the attention of its prompt tokens is priced
    as if they came from prompts of the workload's (mean) ISL, as the evaluator prices them, also where
    the requests draw their own lengths from a distribution (a price per prompt length would multiply the
    grid by the distribution's support)."""

    def __init__(self, p: ServingProblem, r: Replica, max_num_seqs: int, budget: int) -> None:
        self.p, self.r = p, r
        self.bounds = np.concatenate([[0], np.cumsum(r.partition())]).astype(int)
        self.d_grid = price_grid(max(max_num_seqs, 1))
        self.p_grid = price_grid(max(budget, p.workload.isl), (p.workload.isl, budget))
        self.corners: dict[tuple[int, int, int], np.ndarray] = {}
        self.memo: dict[tuple[int, int, int], tuple[float, ...]] = {}
        self.sources: dict[str, int] = {}

    @staticmethod
    def _kv_axis(kv_len: float) -> tuple[int, int, float]:
        """The KV-length grid points either side of ``kv_len`` (every 25 %) and the weight of the upper."""
        if kv_len <= 1:
            return 1, 1, 0.0
        k = math.floor(math.log(kv_len) / math.log(KV_STEP))
        lo, hi = int(round(KV_STEP ** k)), int(round(KV_STEP ** (k + 1)))
        if hi <= lo or kv_len <= lo:
            return lo, lo, 0.0
        return lo, hi, (kv_len - lo) / (hi - lo)

    def corner(self, decode: int, kv: int, prefill: int) -> np.ndarray:
        """Stage seconds at one grid point, priced once."""
        key = (decode, kv if decode else 0, prefill)
        hit = self.corners.get(key)
        if hit is not None:
            return hit
        p, r = self.p, self.r
        it = Iteration(float(decode), float(key[1]), float(prefill), p.workload.isl)
        out = np.zeros(r.pp)
        for i, s in enumerate(r.stages):
            link = "pcie" if p.fleet.nodes[s.node].link == "pcie" else "nvlink"
            lt = cached_times(p, s.gpu, s.tp, it, p.engine.framework, link)
            for k, v in lt.sources.items():
                self.sources[k] = self.sources.get(k, 0) + v
            t = float(lt.per_layer[self.bounds[i]:self.bounds[i + 1]].sum())
            if i == r.pp - 1:
                t += lt.head
            else:
                t += send_seconds(s.gpu, it.tokens * p.model.hidden * 2.0, link_between(p, s, r.stages[i + 1]),
                                  p.fleet.network_bandwidth, p.fleet.network_latency_s)
            out[i] = t
        self.corners[key] = out
        return out

    @staticmethod
    def _axis(grid: list[int], x: int) -> tuple[int, int, float]:
        j = bisect.bisect_left(grid, x)
        if j < len(grid) and grid[j] == x:
            return x, x, 0.0
        j = min(max(j, 1), len(grid) - 1)
        lo, hi = grid[j - 1], grid[j]
        return lo, hi, (x - lo) / (hi - lo)

    def price(self, decode: int, kv_len: float, prefill: int) -> tuple[float, ...]:
        """Stage seconds of a batch of ``decode`` sequences at mean ``kv_len`` and ``prefill`` prompt tokens."""
        key = (decode, int(kv_len) if decode else 0, prefill)
        hit = self.memo.get(key)
        if hit is None:
            if len(self.memo) > 200_000:
                self.memo.clear()
            hit = self.memo[key] = tuple(float(x) for x in self._interpolate(decode, kv_len, prefill))
        return hit

    def _interpolate(self, decode: int, kv_len: float, prefill: int) -> np.ndarray:
        axes = (self._axis(self.d_grid, decode), self._kv_axis(kv_len) if decode else (0, 0, 0.0),
                self._axis(self.p_grid, prefill))
        t = np.zeros(self.r.pp)
        for pick in range(8):  # the corners of the cell, each weighed by its distance to the point
            w, at = 1.0, []
            for bit, (lo, hi, x) in enumerate(axes):
                up = pick >> bit & 1
                w *= x if up else 1.0 - x
                at.append(hi if up else lo)
            if w > 0:
                t = t + w * self.corner(at[0], at[1], at[2])
        return t


@dataclass
class RequestTable:
    """Every request's state, one list entry per request (lists: the event loop reads them one at a time).
    ``isl`` and ``osl`` are each request's own lengths (a single number: every request alike)."""

    arrival: list[float]
    isl: list[int]
    osl: list[int]
    computed: list[int] = field(default_factory=list)  # tokens whose KV is in the cache
    generated: list[int] = field(default_factory=list)  # output tokens produced
    blocks: list[int] = field(default_factory=list)
    epoch: list[int] = field(default_factory=list)  # bumped by a preemption: outputs in flight are dropped
    first: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    last: list[float] = field(default_factory=list)  # when each request's latest token came out
    # every gap between two tokens of one request (s): the inter-token latency ``vllm bench serve`` and
    # ``sglang.bench_serving`` print beside TPOT (a request's own mean gap), whose median can differ from
    # TPOT's when steps vary in length (a prompt batch among decodes)
    gaps: array = field(default_factory=lambda: array("d"))

    def __post_init__(self) -> None:
        n = len(self.arrival)
        if isinstance(self.isl, int):
            self.isl = [self.isl] * n
        if isinstance(self.osl, int):
            self.osl = [self.osl] * n
        self.computed, self.generated, self.blocks, self.epoch = [0] * n, [0] * n, [0] * n, [0] * n
        self.first, self.done, self.last = [math.nan] * n, [math.nan] * n, [math.nan] * n


@dataclass
class Batch:
    """One scheduled micro-batch: (request, epoch, samples a token) per entry, and when it leaves the last stage."""

    entries: list[tuple[int, int, bool]]
    decode: int
    prefill: int
    kv: float  # mean KV length the decodes attend over
    finish: float = 0.0


class ReplicaScheduler:
    """One replica's engine: waiting queue, running list, KV blocks, and up to ``pp`` micro-batches in flight."""

    def __init__(self, p: ServingProblem, r: Replica, kv_tokens: float, max_num_seqs: int, budget: int,
                 reqs: RequestTable) -> None:
        self.block = p.block
        self.total_blocks = int(kv_tokens // self.block)
        self.free = self.total_blocks
        # prefix caching: the free blocks in the order they are handed out, as [owner, count] runs (owner -1:
        # blocks nobody will hit again), and each preempted request's blocks still cached
        self.prefix_cache = p.engine.prefix_cache
        self.free_runs: deque[list[int]] = deque([[-1, self.total_blocks]])
        self.cached: dict[int, int] = {}
        self.max_seqs, self.budget, self.pp = max_num_seqs, budget, r.pp
        self.micro_batches = micro_batches(p, r.pp)  # one for an engine that runs a step through its devices in turn
        # TensorRT-LLM schedules each micro-batch on its own, up to max_num_seqs requests not in flight
        self.running_cap = seq_cap(p, r.pp, max_num_seqs)
        self.reqs = reqs
        self.pricer = StagePricer(p, r, max_num_seqs, budget)
        self.reserve = p.engine.capacity_policy in ("reserve", "slots")  # a slot holds its request whole
        self.unmixed = not p.engine.mixed_steps
        self.chunked = prompts_chunked(p, budget)
        self.whole = -(-p.workload.max_len // self.block)  # the longest request's whole length, in blocks
        self.wait_iters, self.wait_ratio = p.engine.batch_wait_timeout_iters, p.engine.batch_wait_max_tokens_ratio
        self.waited = 0  # iterations the contexts have been held back (TensorRT-LLM's batch_wait_iters_count)
        self.waiting: deque[int] = deque()
        self.running: list[int] = []
        self.inflight: deque[Batch] = deque()
        self.stage_free = [0.0] * r.pp
        # the overlap scheduler (one stage): when the step that just ended started, the next one was chosen
        self.overlap = p.engine.overlap_scheduler and self.micro_batches == 1
        self.last_start = self.last_end = -math.inf
        self.preemptions = 0
        self.max_in_flight = 0
        self.batches = 0

    def load(self) -> int:
        """vLLM's DP load-balancing score (``v1/engine/core_client.py``: waiting * 4 + running)."""
        return 4 * len(self.waiting) + len(self.running)

    def _preempt(self) -> int:
        q = self.reqs
        v = self.running.pop()
        if self.prefix_cache:  # its full blocks stay cached at the queue's tail; the partial one goes first
            full = min(q.computed[v] // self.block, q.blocks[v])
            self._release(v, full)
            self._release(-1, q.blocks[v] - full, first=True)
        else:
            self.free += q.blocks[v]
        q.blocks[v] = 0
        q.computed[v] = 0
        q.epoch[v] += 1
        self.waiting.appendleft(v)
        self.preemptions += 1
        return v

    def _release(self, owner: int, n: int, first: bool = False) -> None:
        """``n`` blocks back to the free pool: at the tail of the queue (handed out last), or ``first``."""
        if n <= 0:
            return
        self.free += n
        if not self.prefix_cache:
            return
        if owner >= 0:
            self.cached[owner] = self.cached.get(owner, 0) + n
        if first:
            self.free_runs.appendleft([owner, n])
        else:
            self.free_runs.append([owner, n])

    def _take(self, n: int) -> None:
        """``n`` free blocks handed out, from the head of the queue: a preempted request whose cached blocks
        are taken loses them (its tail first, as vLLM freed them)."""
        self.free -= n
        if not self.prefix_cache:
            return
        runs, cached = self.free_runs, self.cached
        while n > 0 and runs:
            run = runs[0]
            k = n if n < run[1] else run[1]
            run[1] -= k
            n -= k
            if run[0] >= 0:
                left = cached[run[0]] - k
                if left > 0:
                    cached[run[0]] = left
                else:
                    del cached[run[0]]
            if run[1] == 0:
                runs.popleft()

    def _reclaim(self, r: int) -> int:
        """Take back request ``r``'s blocks still cached (its prompt's head): how many."""
        hits = self.cached.pop(r, 0)
        if hits:
            for i, run in enumerate(self.free_runs):
                if run[0] == r:
                    del self.free_runs[i]
                    break
            self.free -= hits
        return hits

    def _schedule_reserve(self, cutoff: float) -> Batch | None:
        """One step of TensorRT-LLM's schedulers (module docstring): admit while the whole request's blocks
        are free, then generation tokens and whole contexts in request order up to the token budget."""
        q = self.reqs
        comp, gen, blocks, epoch = q.computed, q.generated, q.blocks, q.epoch
        isl, osl, B = q.isl, q.osl, self.block
        waiting, running = self.waiting, self.running
        arrival = q.arrival
        while waiting and len(running) < self.running_cap:
            r = waiting[0]
            if arrival[r] > cutoff:  # the overlap scheduler chose this step before it came
                break
            whole = -(-(isl[r] + osl[r]) // B)
            if self.free < whole:
                break
            waiting.popleft()
            running.append(r)
            self.free -= whole
            blocks[r] = whole
        budget = self.budget
        entries: list[tuple[int, int, bool]] = []
        contexts: list[tuple[int, int]] = []  # (request, prompt tokens this step)
        decode = prefill = 0
        kv_sum = 0
        for r in running:
            n_in = isl[r]
            want = n_in + gen[r] - comp[r]
            if want <= 0:  # its token is still in flight
                continue
            if len(entries) >= self.max_seqs:  # this micro-batch is full
                break
            if comp[r] >= n_in:
                if budget < 1:
                    break
                comp[r] += 1
                budget -= 1
                decode += 1
                kv_sum += comp[r]
                entries.append((r, epoch[r], True))
                continue
            new = n_in - comp[r]
            if new > budget:
                if not self.chunked or budget <= 0:
                    break
                new = budget
            comp[r] += new
            budget -= new
            prefill += new
            entries.append((r, epoch[r], comp[r] == n_in))
            contexts.append((r, new))
        if contexts and decode and (self.wait_iters > 0 or self.wait_ratio > 0):
            # the contexts' whole prompts count, as TensorRT-LLM counts them (no reuse: every prompt token)
            tokens = sum(isl[r] for r, _ in contexts) + decode
            if self.waited >= self.wait_iters or tokens >= self.wait_ratio * self.budget:
                self.waited = 0
            else:  # held back this iteration: the generations run alone
                self.waited += 1
                held = {r for r, _ in contexts}
                for r, new in contexts:
                    comp[r] -= new
                entries = [e for e in entries if e[0] not in held]
                prefill = 0
        if not entries:
            return None
        return Batch(entries, decode, prefill, kv_sum / decode if decode else 0.0)

    def schedule(self, cutoff: float = math.inf) -> Batch | None:
        """One step of the scheduler: running requests first, then admissions (none after a preemption) of the
        requests that arrived by ``cutoff``; an engine that does not mix prompts into decode steps runs a batch
        of prompts whenever one is ready."""
        if self.reserve:
            return self._schedule_reserve(cutoff)
        if self.unmixed:
            return self._schedule("prefill", cutoff) or self._schedule("decode", cutoff)
        return self._schedule("both", cutoff)

    def _schedule(self, kinds: str, cutoff: float) -> Batch | None:
        """vLLM's step over the running requests and the waiting queue; ``kinds`` ``prefill`` or ``decode``
        keeps only prompt work (and admissions) or only decodes (SGLang's separate batches)."""
        q, B = self.reqs, self.block
        comp, gen, blocks, epoch = q.computed, q.generated, q.blocks, q.epoch
        isl = q.isl
        budget = self.budget if kinds != "decode" else 1 << 62  # a decode batch takes every running request
        entries: list[tuple[int, int, bool]] = []
        decode = prefill = 0
        kv_sum = 0
        preempted = False
        running = self.running
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            n_in = isl[r]
            want = n_in + gen[r] - comp[r]
            if want <= 0 or (kinds != "both" and (kinds == "decode") != (want == 1 and comp[r] >= n_in)):
                i += 1  # its token is still in flight, or not this batch's kind
                continue
            new = min(want, budget)
            need = -(-(comp[r] + new) // B) - blocks[r]
            fits = True
            while need > self.free:
                preempted = True
                if self._preempt() == r:  # the newest running request was this one
                    fits = False
                    break
            if not fits:
                break
            if need > 0:
                self._take(need)
                blocks[r] += need
            is_decode = want == 1 and comp[r] >= n_in
            comp[r] += new
            budget -= new
            samples = comp[r] == n_in + gen[r]
            entries.append((r, epoch[r], samples))
            if is_decode:
                decode += 1
                kv_sum += comp[r]
            else:
                prefill += new
            i += 1
        if not preempted and kinds != "decode":
            waiting = self.waiting
            cached = self.cached
            arrival = q.arrival
            while waiting and budget > 0 and len(running) < self.max_seqs:
                r = waiting[0]
                if arrival[r] > cutoff:  # the overlap scheduler chose this step before it came
                    break
                hit = cached.get(r, 0)
                # its cached blocks count again (vLLM recomputes at least the last token of a full hit)
                done = min(hit * B, isl[r] + gen[r] - 1)
                want = isl[r] + gen[r] - done
                new = min(want, budget)
                need = -(-(done + new) // B) - hit
                if need > self.free - hit:
                    break
                waiting.popleft()
                running.append(r)
                self._reclaim(r)
                self._take(need)
                blocks[r] = hit + need
                comp[r] = done + new
                budget -= new
                entries.append((r, epoch[r], new == want))
                prefill += new
        if not entries:
            return None
        return Batch(entries, decode, prefill, kv_sum / decode if decode else 0.0)

    def submit(self, b: Batch, now: float) -> None:
        """Send a micro-batch down the pipeline: each stage takes it when the previous one hands it over
        and the stage has finished the micro-batch before it."""
        t = self.pricer.price(b.decode, b.kv, b.prefill)
        end = now
        free = self.stage_free
        for s, ts in enumerate(t):
            f = free[s]
            end = (end if end > f else f) + ts
            free[s] = end
        b.finish = end
        self.last_start = now
        self.inflight.append(b)
        self.batches += 1
        self.max_in_flight = max(self.max_in_flight, len(self.inflight))

    def pump(self, now: float) -> None:
        """Keep up to ``pp`` micro-batches in flight (vLLM's batch queue: ``max_concurrent_batches = pp``), one
        where the engine runs a step through its devices in turn (:func:`.evaluation.micro_batches`)."""
        while len(self.inflight) < self.micro_batches:
            # the overlap scheduler chose this step when the one ending now started: later arrivals wait for the
            # next, unless the engine would otherwise idle (the host then takes them at once)
            held = self.overlap and self.last_end == now
            b = self.schedule(self.last_start if held else math.inf)
            if held and b is None and self.waiting:
                b = self.schedule()
            if b is None:
                return
            self.submit(b, now)

    def complete(self, now: float) -> tuple[int, list[int]]:
        """The oldest micro-batch leaves the last stage: (tokens it produced, requests it finished)."""
        b = self.inflight.popleft()
        self.last_end = now
        q = self.reqs
        made = 0
        finished: list[int] = []
        # the hottest loop of a simulation (every token): the table's lists bound once
        generated, epoch, last, osl, gap = q.generated, q.epoch, q.last, q.osl, q.gaps.append
        for r, ep, samples in b.entries:
            if not samples or epoch[r] != ep:
                continue
            g = generated[r] + 1
            generated[r] = g
            made += 1
            if g == 1:
                q.first[r] = now
            else:
                gap(now - last[r])
            last[r] = now
            if g == osl[r]:
                q.done[r] = now
                self.running.remove(r)
                self._release(-1, q.blocks[r])
                q.blocks[r] = 0
                finished.append(r)
        return made, finished
