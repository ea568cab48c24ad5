"""The discrete-event simulation of a deployment under a request rate: TTFT and TPOT distributions.

Why a simulation beside the evaluator: ``evaluate`` prices the steady state of continuous batching,
which gives throughput but not the queueing a request sees under a rate -- the prefill it waits
behind, the chunk its prompt is split into, the micro-batch its decode rides in, the preemption
when the KV cache runs out.  Here requests arrive as a Poisson process (a seeded numpy Generator),
each replica runs the engine's scheduler step by step (:mod:`~dnnplace.models.serving.scheduler`:
vLLM v1's; TensorRT-LLM's reserving capacity scheduler and whole-context micro-batches; SGLang's
prompt batches run first, unmixed), and each micro-batch is priced by the evaluator's own cost
functions from the batch it actually holds.

Routing between replicas: vLLM's data-parallel client sends each request to the engine with the
least ``4 * waiting + running`` (``v1/engine/core_client.py::DPLBAsyncMPClient``; live counts here,
where vLLM's are up to 100 ms stale); SGLang's DP controller defaults to round robin
(``server_args.py``: ``load_balance_method = "round_robin"``), and the engines without a DP router
(TensorRT-LLM, llama.cpp, Hugging Face) are taken as behind a round-robin proxy.

Requests are alike, or each draws its own (ISL, OSL) from the workload's length distribution (weighted, with
the run's seeded generator), so the queue sees the long prompts and answers the mean hides.

The metrics are those of ``vllm bench serve``: TTFT from arrival to the first token, TPOT as
(last token - first token) / (output tokens - 1) of each request with more than one, throughput as output
tokens over the time from the first arrival to the last completion.  ``saturated``: fewer than 90 % as many
requests completed as arrived over the second half of the arrival window, the completions counted over that
window shifted by the first half's mean latency (the queue grows without bound); judged only when the arrivals
span :data:`JUDGED_LIFETIMES` request lifetimes (``saturation_judged``; a shorter run says so and how many
requests would judge it).

Offline (``offline=True``): every request arrives at once, as ``trtllm-bench throughput`` and
``vllm bench throughput`` run a fixed number of them, and the throughput is the run's: output tokens
over the time to the last completion.  Why not the evaluator's steady state: a finite run admits its
requests in waves whose start and end are not steady (the prompts of a whole batch first, a last
partial wave at the end), and on the published offline rows that costs 5-20 % of the rate
(benchmarks/results/serving.md).

Closed loop (``concurrency=C``): C clients each send a request, and the next as soon as theirs completes,
until ``requests`` were sent -- ``vllm bench serve --max-concurrency``, aiperf's and genai-perf's
``--concurrency``; the latencies are those requests' own.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.bands import prediction_band
from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.scheduler import ReplicaScheduler, RequestTable
from dnnplace.models.serving.spec import ServingConfig, ServingProblem, Workload, with_expert_parallel

__all__ = ["Simulation", "draw_lengths", "simulate"]

#: Saturated when completions over the second half of the arrival window fall below this share of arrivals.
SATURATION_SHARE = 0.9
#: The arrival window, in request lifetimes, that the saturation test needs: the first half fills the engine and
#: the second is judged against it, each half spanning two lifetimes (``verdicts.SLO_LIFETIMES`` sizes the runs
#: that judge an SLO so).  A shorter run is judged during the fill, whose requests finish faster than the steady
#: state's, and a run keeping up at half its capacity read "saturated".
JUDGED_LIFETIMES = 4.0

#: The steady-state throughput window: between the times these shares of all output tokens were made.
STEADY_WINDOW = (0.2, 0.8)


def _stats(x: np.ndarray) -> dict[str, float | None]:
    if not len(x):
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    q = np.percentile(x, [50, 90, 99])
    return {"mean": float(x.mean()), "p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2])}


@dataclass
class Simulation:
    """What a simulated run measured: latency distributions (ms), throughput, completions, preemptions."""

    rate: float
    requests: int
    completed: int
    preemptions: int
    saturated: bool
    output_tokens_per_s: float
    requests_per_s: float
    ttft_ms: dict[str, float | None]
    tpot_ms: dict[str, float | None]
    steady_output_tokens_per_s: float = 0.0
    duration_s: float = 0.0
    output_tokens: int = 0
    arrived: int = 0
    stopped: str = ""  # "" (all requests done), "time limit" or "stalled"
    router: str = ""
    micro_batches_in_flight: list[int] = field(default_factory=list)
    batches: int = 0
    priced_points: int = 0
    error_band: float = 0.0
    wall_s: float = 0.0
    sources: dict[str, int] = field(default_factory=dict)
    offline: bool = False
    concurrency: int | None = None
    #: every gap between two tokens of one request (ms): ``vllm bench serve``'s and ``sglang.bench_serving``'s ITL
    itl_ms: dict[str, float | None] = field(default_factory=lambda: _stats(np.empty(0)))
    #: the arrival window (s) and the first half's mean request lifetime (s) the saturation test read
    window_s: float = 0.0
    lifetime_s: float = 0.0

    @property
    def saturation_judged(self) -> bool:
        """Whether the arrivals span :data:`JUDGED_LIFETIMES` request lifetimes (always, offline or closed loop)."""
        return bool(self.offline or self.concurrency or self.window_s >= JUDGED_LIFETIMES * self.lifetime_s)

    def to_dict(self) -> dict[str, Any]:
        def fin(x: float) -> float | None:
            return round(x, 6) if math.isfinite(x) else None

        def rnd(d: dict[str, float | None]) -> dict[str, float | None]:
            return {k: (None if v is None else fin(v)) for k, v in d.items()}

        return {
            "rate": None if self.offline or self.concurrency else self.rate, "offline": self.offline,
            "concurrency": self.concurrency, "requests": self.requests,
            "completed": self.completed,
            "preemptions": self.preemptions, "saturated": self.saturated,
            "saturation_judged": self.saturation_judged,
            "output_tokens_per_s": fin(self.output_tokens_per_s), "requests_per_s": fin(self.requests_per_s),
            "ttft_ms": rnd(self.ttft_ms), "tpot_ms": rnd(self.tpot_ms), "itl_ms": rnd(self.itl_ms),
            "steady_output_tokens_per_s": fin(self.steady_output_tokens_per_s),
            "duration_s": fin(self.duration_s), "output_tokens": self.output_tokens, "arrived": self.arrived,
            "stopped": self.stopped, "router": self.router,
            "micro_batches_in_flight": list(self.micro_batches_in_flight),
            "batches": self.batches, "error_band": round(self.error_band, 4), "sources": dict(self.sources),
        }

    def summary(self) -> list[str]:
        def ms(d: dict[str, float | None]) -> str:
            return " / ".join("-" if d[k] is None else f"{d[k]:.1f}" for k in ("mean", "p50", "p90", "p99"))

        state = "SATURATED (the queue grows)" if self.saturated else "keeps up"
        if not self.saturation_judged:  # a verdict read during the fill is no verdict
            more = math.ceil(JUDGED_LIFETIMES * self.lifetime_s * self.rate)
            state = (f"queue not judged: {self.window_s:.0f} s of arrivals span under {JUDGED_LIFETIMES:g} request "
                     f"lifetimes ({self.lifetime_s:.1f} s each); give --requests {more} or more")
        done = f"{self.completed} completed, {self.preemptions} preemptions"
        if self.offline:
            head = f"simulated {self.arrived} of {self.requests} requests offline (all at once): {done}"
        elif self.concurrency:
            head = f"simulated {self.arrived} of {self.requests} requests from {self.concurrency} clients: {done}"
        else:
            head = f"simulated {self.arrived} of {self.requests} requests at {self.rate:g} req/s: {done}, {state}"
        lines = [
            head,
            f"throughput {self.output_tokens_per_s:,.0f} output tokens/s ({self.requests_per_s:.2f} req/s); "
            f"steady {self.steady_output_tokens_per_s:,.0f} tokens/s",
            f"TTFT ms mean / p50 / p90 / p99: {ms(self.ttft_ms)}",
            f"TPOT ms mean / p50 / p90 / p99: {ms(self.tpot_ms)}",
            f"ITL ms mean / p50 / p90 / p99: {ms(self.itl_ms)}",
            f"router {self.router}; micro-batches in flight {self.micro_batches_in_flight}; "
            f"error band +-{self.error_band:.0%}",
        ]
        if self.stopped:
            lines.append(f"stopped early ({self.stopped}) after {self.duration_s:.1f} simulated s: "
                         "the figures cover what was simulated")
        return lines


def _check(rate: float, requests: int, time_limit: float, offline: bool, concurrency: int | None) -> None:
    if concurrency is not None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= 1_000_000:
            raise DnnplaceError(f"--concurrency must be a whole number in [1, 1000000], got {concurrency!r}")
        if offline:
            raise DnnplaceError("give --offline or --concurrency, not both")
    bad_rate = isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0
    if not offline and concurrency is None and bad_rate:
        raise DnnplaceError(f"--rate must be a number > 0, got {rate!r}")
    if isinstance(requests, bool) or not isinstance(requests, int) or not 1 <= requests <= 10_000_000:
        raise DnnplaceError(f"--requests must be a whole number in [1, 10000000], got {requests!r}")
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not time_limit > 0:
        raise DnnplaceError(f"--time-limit must be a number > 0, got {time_limit!r}")


def draw_lengths(wl: Workload, requests: int, rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """Each request's (isl, osl): drawn from the workload's distribution by weight with the run's generator
    (after the arrivals, so a seed gives the same arrivals with or without one), else all alike."""
    if wl.lengths is None:
        return [wl.isl] * requests, [wl.osl] * requests
    rows = np.array(wl.lengths, dtype=float)
    pick = rng.choice(len(rows), size=requests, p=rows[:, 2] / rows[:, 2].sum())
    return rows[pick, 0].astype(np.int64).tolist(), rows[pick, 1].astype(np.int64).tolist()


def simulate(p: ServingProblem, config: ServingConfig, *, rate: float = 0.0, requests: int = 2000, seed: int = 0,
             time_limit: float = 60.0, offline: bool = False, concurrency: int | None = None) -> Simulation:
    """Stream ``requests`` Poisson arrivals at ``rate`` requests/s through ``config`` (``offline``: all of them
    at once; ``concurrency``: from that many closed-loop clients; ``rate`` unused in both); stop cleanly with
    what was simulated when ``time_limit`` seconds of wall clock have passed."""
    _check(rate, requests, time_limit, offline, concurrency)
    t_wall = time.perf_counter()
    p = with_expert_parallel(p, config.expert_parallel)
    if not config.replicas:  # a search that found nothing to run hands back an empty deployment
        raise DnnplaceError("the deployment has no replica to simulate (no deployment fits)")
    ev = evaluate(p, config)
    if not ev.fits:
        raise DnnplaceError(f"the deployment does not fit: {ev.why}")
    wl = p.workload
    rng = np.random.default_rng(seed)
    if concurrency is not None:  # the first C at once, each later one when a request completes
        arrivals = np.where(np.arange(requests) < concurrency, 0.0, np.inf)
    elif offline:
        arrivals = np.zeros(requests)
    else:
        arrivals = np.cumsum(rng.exponential(1.0 / rate, requests))
    isl, osl = draw_lengths(wl, requests, rng)
    reqs = RequestTable(arrivals.tolist(), isl, osl)
    next_client = min(concurrency or requests, requests)
    reps = [ReplicaScheduler(p, r, e.kv_tokens, config.max_num_seqs, config.max_num_batched_tokens, reqs)
            for r, e in zip(config.replicas, ev.replicas)]
    need = -(-(wl.max_len - 1) // p.block)  # the last output token's KV is never written
    for k, s in enumerate(reps):
        if s.total_blocks < (s.whole if s.reserve else need):  # an engine that reserves wants the whole length
            longest = "the longest request" if wl.lengths is not None else "one request"
            raise DnnplaceError(f"replica {k + 1}: its KV cache ({s.total_blocks} blocks of {p.block}) cannot "
                                f"hold {longest} ({wl.max_len} tokens)")
    least = p.engine.least_loaded_router
    router = "least-loaded (vLLM DP: 4 * waiting + running)" if least else "round-robin"
    tok_t: list[float] = []
    tok_n: list[int] = []
    made_total = 0
    nxt = 0
    rr = 0
    now = 0.0
    stopped = ""
    step = 0
    arr = reqs.arrival
    while True:
        step += 1
        if step & 255 == 0 and time.perf_counter() - t_wall > time_limit:
            stopped = "time limit"
            break
        best_t, best = math.inf, None
        for s in reps:
            if s.inflight and s.inflight[0].finish < best_t:
                best_t, best = s.inflight[0].finish, s
        if nxt < requests and arr[nxt] <= best_t:
            now = arr[nxt]
            if least:
                target = min(range(len(reps)), key=lambda k: (reps[k].load(), (k - rr) % len(reps)))
            else:
                target = rr % len(reps)
            rr = (target + 1) % len(reps)
            s = reps[target]
            s.waiting.append(nxt)
            nxt += 1
            if nxt < requests and arr[nxt] <= now:  # more arrive at this instant: queue them all first
                continue
            for s in reps:
                if s.waiting:
                    s.pump(now)
        elif best is not None:
            now = best_t
            made, finished = best.complete(now)
            if concurrency is not None:
                for _ in finished:
                    if next_client < requests:
                        arr[next_client] = now
                        next_client += 1
            if made:
                made_total += made
                tok_t.append(now)
                tok_n.append(made_total)
            best.pump(now)
        else:
            if any(s.waiting or s.running for s in reps):
                stopped = "stalled"
            break
    done = np.array(reqs.done)
    first = np.array(reqs.first)
    arrivals = np.array(arr)
    arrived = np.asarray(arrivals[:nxt])
    ok = np.isfinite(done)
    completed = int(ok.sum())
    ttft = (first - arrivals)[np.isfinite(first)] * 1e3
    outs = np.array(reqs.osl)
    many = ok & (outs > 1)  # TPOT is each request's own: over its own output tokens after the first
    tpot = (done - first)[many] / (outs[many] - 1) * 1e3
    duration = now
    tokens = made_total
    steady = 0.0
    if len(tok_n) >= 2:
        n = np.array(tok_n, dtype=float)
        t = np.array(tok_t)
        a, b = np.searchsorted(n, STEADY_WINDOW[0] * n[-1]), np.searchsorted(n, STEADY_WINDOW[1] * n[-1])
        if b > a and t[b] > t[a]:
            steady = float((n[b] - n[a]) / (t[b] - t[a]))
    saturated, end, lag = False, 0.0, 0.0
    if len(arrived) and not offline and concurrency is None:
        half, end = arrived[-1] / 2.0, arrived[-1]
        came = int(((arrived >= half) & (arrived <= end)).sum())
        # the window shifted by the first half's mean latency: a queue that keeps up completes what came in
        # [half, end] over [half + lag, end + lag]; counting over [half, end] itself would call a run whose
        # requests take a sizeable share of the window to serve "saturated" however idle it is.  The mean, not
        # the median: at steady state the completions over a window match the arrivals over it shifted back by
        # the mean latency, and replicas of unequal speed give latencies a long right tail (their median fell
        # short of it, and a run keeping up was called saturated)
        early = np.isfinite(done[:len(arrived)]) & (arrived < half)
        lag = float(np.mean(done[:len(arrived)][early] - arrived[early])) if early.any() else 0.0
        left = int(((done >= half + lag) & (done <= end + lag)).sum())
        saturated = left < SATURATION_SHARE * came
    src: dict[str, int] = {}
    for s in reps:
        for name, v in s.pricer.sources.items():
            src[name] = src.get(name, 0) + v
    return Simulation(
        float(rate), requests, completed, sum(s.preemptions for s in reps), bool(saturated),
        tokens / duration if duration > 0 else 0.0, completed / duration if duration > 0 else 0.0,
        _stats(ttft), _stats(tpot), steady, duration, tokens, nxt, stopped, router,
        [s.max_in_flight for s in reps], sum(s.batches for s in reps), sum(len(s.pricer.corners) for s in reps),
        prediction_band(p, src), time.perf_counter() - t_wall, src, offline, concurrency,
        _stats(np.frombuffer(reqs.gaps, dtype=float) * 1e3), float(end), lag)
