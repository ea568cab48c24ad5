"""Token dispatch of a mixture-of-experts layer: permutation, the all-to-all / all-gather / DeepEP volumes
on NVLink and on the NICs, and their seconds.

Apart from :mod:`.moe` (expert GEMMs, memory, the layer's costs) because it is the part the dispatcher
knob changes; :mod:`.moe` re-exports it.
"""

from __future__ import annotations

from functools import lru_cache
from math import comb

import numpy as np

from dnnplace.core.catalogue import DEEPEP, HYBRIDEP_NVLINK, DeviceSpec
from dnnplace.models.llm.evaluation import comm, kernel_ledger
from dnnplace.models.llm.moe import MOE_STACK, MoEModel

Array = np.ndarray


def permute_bytes(m: MoEModel, t: Array, etp: Array, act_bytes: float = 2.0, ep: Array | None = None,
                  dispatcher: Array | None = None) -> Array:
    """HBM bytes of one direction's permutations on one rank (forward; the backward moves the same).

    Megatron-Core's token dispatchers (``moe/token_dispatcher.py``), each pass one read and one write of the
    rows it moves (``MOE_STACK.permute_passes``), C = t x top_k x etp the copies a rank's experts receive:

    * ``alltoall`` (and without ``dispatcher``): permutation 1 reads t tokens and writes their t x top_k
      copies grouped by destination, unpermutation 1 the reverse; after the all-to-all (and the ETP
      all-gather), when the rank holds more than one expert (E / ep > 1), permutation 2
      (``sort_chunks_by_idxs``, "Sort tokens by local expert") reorders the C received copies by expert, and
      unpermutation 2 restores them before the combine: 2 x C each way.  Without ``ep`` the old rule
      (the sort with etp > 1) is kept.
    * ``flex`` (DeepEP): the dispatch kernel reads the t tokens itself and delivers one row per (token,
      destination rank): R = t x etp x D rows, D the distinct EP ranks a token's experts fall on
      (:func:`domains_hit` over ranks); ``get_permuted_hidden_states_by_experts`` then permutes the R rows into
      the C copies and ``get_restored_hidden_states_by_experts`` reverses it before the combine kernel.
    * ``allgather``: as ``alltoall`` without ``ep`` (unchanged; no published row runs it).

    A negative ``dispatcher`` (the search's relaxation) takes the fewest bytes of the dispatchers.
    """
    h, k = float(m.arch.hidden), float(m.moe.top_k)
    one = 0.5 * MOE_STACK.permute_passes * act_bytes * h
    copies = t * k * etp
    base = 2.0 * one * (t + t * k)
    old = base + np.where(etp > 1, 2.0 * 2.0 * one * copies, 0.0)
    if ep is None or dispatcher is None:
        return old
    from dnnplace.models.llm.moe import DISPATCHERS

    local = float(m.moe.num_experts) / np.asarray(ep, dtype=float)
    a2a = base + np.where(local > 1, 2.0 * 2.0 * one * copies, 0.0)
    ranks = domains_hit(m, ep, np.ones_like(np.asarray(ep, dtype=float)), 1)
    flex = 2.0 * one * (t * etp * ranks + copies)
    d = np.asarray(dispatcher)
    out = np.where(d == DISPATCHERS.index("flex"), flex, np.where(d == DISPATCHERS.index("alltoall"), a2a, old))
    return np.where(d < 0, np.minimum.reduce([a2a, flex, old]), out)


# ----------------------------------------------------------------------------------------------- dispatch

def _hit(experts: int, top_k: int, groups: float) -> float:
    """Probability that one given group (of experts / groups experts) holds one of a token's top_k distinct
    experts drawn uniformly: 1 - C(E - E/g, k) / C(E, k)."""
    g = int(groups)
    if g <= 1:
        return 1.0
    return 1.0 - comb(experts - experts // g, top_k) / comb(experts, top_k)


def distinct_groups(experts: int, top_k: int, groups: Array) -> Array:
    """Expected number of distinct groups a token's top_k experts fall into: groups x hit probability."""
    g = np.asarray(groups, dtype=float)
    return g * np.vectorize(lambda x: _hit(experts, top_k, x), otypes=[float])(g)


@lru_cache(maxsize=4096)
def _domains_hit(experts: int, top_k: int, ep: int, per_domain: int, groups: int, topk_groups: int) -> float:
    """Expected distinct NVLink domains holding one of a token's top_k experts (its own domain counted).

    Experts sit contiguously on the EP ranks (E/ep each), ``per_domain`` consecutive EP ranks share a domain.
    Uniform routing (the recipes' forced load balancing: random logits) with Megatron's group-limited routing
    (``moe_router_num_groups`` / ``moe_router_group_topk``, DeepSeek's n_group / topk_group): a token picks
    ``topk_groups`` of the ``groups`` contiguous expert groups uniformly, then top_k experts uniformly among
    theirs.  A domain d is missed with probability E_S[C(N - x_S, k) / C(N, k)] (N experts in the chosen
    groups S, x_S of them on d); the distribution of x_S over the C(G, g) group sets is counted exactly.
    """
    g, tg = (groups, topk_groups) if groups > 1 and 0 < topk_groups < groups else (1, 1)
    per_group, per_rank = experts // g, experts // ep
    n_sel = tg * per_group
    domains = -(-ep // per_domain)
    total = 0.0
    for d in range(domains):
        overlap = [0] * g  # experts of group j on domain d
        for e in range(experts):
            if (e // per_rank) // per_domain == d:
                overlap[e // per_group] += 1
        ways: dict[tuple[int, int], int] = {(0, 0): 1}  # (groups chosen, experts of d among them) -> count
        for o in overlap:
            nxt = dict(ways)
            for (j, x), c in ways.items():
                if j < tg:
                    nxt[(j + 1, x + o)] = nxt.get((j + 1, x + o), 0) + c
            ways = nxt
        sets = comb(g, tg)
        miss = sum(c * comb(n_sel - x, top_k) for (j, x), c in ways.items() if j == tg) / (sets * comb(n_sel, top_k))
        total += 1.0 - miss
    return total


def domains_hit(m: MoEModel, ep: Array, etp: Array, domain: int) -> Array:
    """Per candidate: expected distinct NVLink domains a token's experts fall in (:func:`_domains_hit`)."""
    s = m.moe
    k_in = _ep_in_domain(ep, etp, domain)
    e_arr, k_arr = np.broadcast_arrays(np.asarray(ep, dtype=np.int64), k_in.astype(np.int64))
    key = e_arr * (1 << 20) + k_arr  # ep and its per-domain count are small whole numbers: one key per pair
    uniq, back = np.unique(key.reshape(-1), return_inverse=True)
    vals = np.array([_domains_hit(s.num_experts, s.top_k, int(u >> 20), int(u & ((1 << 20) - 1)), s.expert_groups,
                                  s.topk_groups) for u in uniq])
    return vals[back.reshape(-1)].reshape(np.shape(k_arr))


def _ep_in_domain(ep: Array, etp: Array, domain: int) -> Array:
    """EP-group members that share one NVLink domain (the group has stride etp)."""
    return np.clip(np.floor(domain / np.maximum(etp, 1)), 1, ep)


def dispatch_volumes(m: MoEModel, t: Array, ep: Array, etp: Array, domain: int, dispatcher: str,
                     act_bytes: float = 2.0) -> tuple[Array, Array]:
    """Bytes one rank sends in one dispatch (the combine sends the same back), over NVLink and over its NIC.

    * ``alltoall``: each of the t x top_k token copies goes to the rank holding its expert, uniform over
      the EP group: (k_in - 1)/ep of them to NVLink peers, (ep - k_in)/ep across the domain (k_in = EP
      members per domain); then an all-gather over the ETP group (NVLink) of the t x top_k received
      copies: (etp - 1) x t x top_k more (counted here in the NVLink bytes; :func:`dispatch_times` times it
      after the all-to-all, :func:`etp_collective_time`).
    * ``allgather``: every rank gathers the t tokens of all etp x ep ranks of its group: each rank's
      tokens reach the n - 1 others (sent once per ring step): (n - 1) x t over the ring's links.
    * ``flex`` (DeepEP / HybridEP): a token crosses the NIC once per distinct remote domain that holds
      one of its experts (copies for one domain travel once and are forwarded on NVLink there), with
      top_k x etp targets as Megatron's flex dispatcher sets them up; the domains hit follow the model's
      group-limited routing (:func:`domains_hit`).  With etp 1 a token reaches each distinct destination rank
      once (DeepEP's layout): over NVLink to every one but the rank it lands on in each domain hit.
    """
    h, k, e = float(m.arch.hidden), int(m.moe.top_k), int(m.moe.num_experts)
    tok = act_bytes * h * t
    k_in = _ep_in_domain(ep, etp, domain)
    if dispatcher == "alltoall":
        nvl = tok * k * (k_in - 1) / ep + tok * k * (etp - 1)
        nic = tok * k * (ep - k_in) / ep
        return nvl, nic
    if dispatcher == "allgather":
        n = ep * etp
        inside = np.minimum(n, domain)
        nvl = np.where(n <= domain, tok * (n - 1), tok * (inside - 1))
        nic = np.where(n <= domain, 0.0, tok * (n - inside))
        return nvl, nic
    if dispatcher == "flex":
        kk = np.minimum(k * etp, e * etp)
        domains = np.ceil(ep / k_in)
        # every domain is as likely to be hit (group selection ignores where the token is): the token's own
        # domain is 1/domains of the expected hits, the rest cross the NIC once each
        remote = domains_hit(m, ep, etp, domain) * (1.0 - 1.0 / domains)
        nic = tok * remote
        copies_out = tok * kk * (ep - k_in) / ep  # copies bound for other domains, forwarded there on NVLink
        by_copy = tok * kk * (k_in - 1) / ep + np.maximum(copies_out - nic, 0.0)
        # etp 1: DeepEP sends a token once per distinct destination rank; in every domain hit one rank is
        # where it lands (the source's own, or the RDMA peer), the others take it over NVLink
        ranks = domains_hit(m, ep, np.ones_like(np.asarray(ep, dtype=float)), 1)
        by_rank = tok * ranks * (k_in - 1) / k_in
        return np.where(etp > 1, by_copy, by_rank), nic
    raise ValueError(f"unknown dispatcher {dispatcher!r}")


def dispatch_time(nvl: Array, nic: Array, dev: DeviceSpec) -> Array:
    """Seconds of one dispatch (or combine): NVLink and NIC traffic run at once, plus one message latency.

    Bus bandwidths are the catalogue's NCCL fractions of NVLink and of one NIC per GPU.  NCCL's
    all-to-all posts its send/receive pairs to every peer inside one group call, so they are in
    flight together: one latency (of the slower link used), not one per peer.
    """
    nvl_bw = dev.nvlink_bandwidth * float(dev.nvlink_fraction or 0.0)
    nic_bw = dev.internode_bandwidth * float(dev.internode_fraction or 0.0)
    lat = np.where(nic > 0, dev.internode_latency_s, dev.nvlink_latency_s)
    busy = np.maximum(nvl / nvl_bw, nic / nic_bw)
    return np.where(nvl + nic > 0, busy + lat, 0.0)


def etp_collective_time(m: MoEModel, t: Array, etp: Array, domain: int, dev: DeviceSpec,
                        used: Array | bool = True, act_bytes: float = 2.0) -> Array:
    """Seconds of the expert-tensor-parallel all-gather that follows an ``alltoall`` dispatch (its reduce-scatter
    before the combine is the same ring), priced apart from the all-to-all because it runs after it.

    Megatron-Core's ``MoEAlltoAllTokenDispatcher`` (``moe/token_dispatcher.py``, core 0.12, the version NeMo 25.04
    runs) calls ``all_to_all(ep_group, ...)`` and only then ``gather_from_sequence_parallel_region(...,
    group=tp_group)`` on its output (the expert TP group); the combine runs ``reduce_scatter_to_sequence_parallel_
    region`` and then the all-to-all.  Each is a blocking collective on the same stream, so the two add.  A rank
    holds t x top_k received copies and the ring sends (etp - 1) of those blocks in etp - 1 steps, on NVLink when
    the etp consecutive ranks share a domain, else at the NIC's rate.
    """
    e = np.asarray(etp, dtype=float)
    nbytes = act_bytes * float(m.arch.hidden) * t * float(m.moe.top_k) * (e - 1.0)
    inside = (e <= domain) & (np.mod(domain, np.maximum(e, 1.0)) == 0)
    nvl_bw = dev.nvlink_bandwidth * float(dev.nvlink_fraction or 0.0)
    nic_bw = dev.internode_bandwidth * float(dev.internode_fraction or 0.0)
    bw = np.where(inside, nvl_bw, nic_bw)
    lat = np.where(inside, dev.nvlink_latency_s, dev.internode_latency_s)
    ring = np.where(e > 1, nbytes / bw + (e - 1.0) * lat, 0.0)
    # NCCL's measured all-gather (where the switch is on): a buffer of etp blocks, etp - 1 of them received
    return comm.table_or_ring("all_gather", nbytes * e / np.maximum(e - 1.0, 1.0), e, ring, inside, dev, used)


def _tested_figure(figures: tuple[tuple[int, tuple[float, float]], ...], x: Array, i: int) -> Array:
    """Element-wise figure ``i`` (0 dispatch, 1 combine) of the largest tested count not above ``x`` (the smallest
    tested one below them), as the catalogue reads its tables (``catalogue_moe._tested_at``)."""
    out = np.full_like(np.asarray(x, dtype=float), figures[0][1][i])
    for n, f in figures:
        out = np.where(x >= n, f[i], out)
    return out


def flex_dispatch_time(m: MoEModel, t: Array, ep: Array, etp: Array, domain: int, dev: DeviceSpec,
                       act_bytes: float = 2.0) -> Array:
    """Seconds of one flex (DeepEP normal-kernel) dispatch + combine, halved: one "dispatch" of the layer's four.

    DeepEP's published bandwidths (catalogue ``DEEPEP``) are logical: tokens x distinct destination domains
    (the source's own included) x hidden x bytes over the kernel time.  Across domains the RDMA side binds:
    t x :func:`domains_hit` tokens at the figure of the EP group's domain count; inside one domain the NVLink
    side: the copies :func:`dispatch_volumes` sends on NVLink at the intranode figure of the device's NCCL
    NVLink bandwidth.  Both run at once, plus one message latency, dispatch and combine at their own figures.

    Where the catalogue has a measurement of the device's flex kernels inside one NVLink domain
    (``HYBRIDEP_NVLINK``: HybridEP, the backend Megatron-Bridge's Blackwell recipes run) and the EP group fits in
    one domain with etp 1, the NVLink side is priced at it instead: the rows a rank receives, t x D (D the distinct
    EP ranks a token's experts fall on, its own included), x hidden x bytes, at the figure of the largest tested
    rank count not above ep -- the bytes its benchmark counts.
    """
    nvl, nic = dispatch_volumes(m, t, ep, etp, domain, "flex", act_bytes)
    k_in = _ep_in_domain(ep, etp, domain)
    domains = np.ceil(ep / k_in)
    logical = act_bytes * m.arch.hidden * t * domains_hit(m, ep, etp, domain)
    nvl_bw = dev.nvlink_bandwidth * float(dev.nvlink_fraction or 0.0)
    table = HYBRIDEP_NVLINK.get(dev.name)
    if table is not None:
        measured = (domains == 1) & (np.asarray(etp) == 1)
        received = act_bytes * m.arch.hidden * t * domains_hit(m, ep, np.ones_like(np.asarray(ep, dtype=float)), 1)
    out = np.zeros_like(np.asarray(t, dtype=float))
    for i in (0, 1):  # dispatch, combine
        frac = _tested_figure(DEEPEP.rdma, domains, i)
        rdma = np.where(domains > 1, logical / (dev.internode_bandwidth * frac), 0.0)
        busy = np.maximum(nvl / (nvl_bw * DEEPEP.nvlink[i]), rdma)
        if table is not None:
            fig = _tested_figure(table.figures, np.asarray(ep, dtype=float), i)
            busy = np.where(measured, received / fig, busy)
        lat = np.where(nic > 0, dev.internode_latency_s, dev.nvlink_latency_s)
        out = out + 0.5 * np.where(nvl + nic > 0, busy + lat, 0.0)
    return out


# ----------------------------------------------------------------------------------------------- experts


def dispatch_times(m: MoEModel, t: Array, ep: Array, etp: Array, dispatcher: Array, domain: int,
                   dev: DeviceSpec) -> Array:
    """Seconds of one dispatch (= one combine) per candidate; ``dispatcher`` indexes ``DISPATCHERS``, and a
    negative index takes the fastest of them (the search's relaxation, a lower bound over the dispatchers)."""
    from dnnplace.models.llm.moe import DISPATCHERS

    out = np.zeros_like(np.asarray(t, dtype=float))
    fastest = np.full_like(out, np.inf)
    for i, name in enumerate(DISPATCHERS):
        chosen = np.asarray(dispatcher) == i
        if name == "flex":
            one = flex_dispatch_time(m, t, ep, etp, domain, dev)
            kernel_ledger.note("collectives", one, where=chosen & (one > 0))  # DeepEP: no NCCL table times it
        elif name == "alltoall":  # the all-to-all, then the ETP all-gather (combine: reduce-scatter, then a2a)
            nvl, nic = dispatch_volumes(m, t, ep, etp, domain, name)
            etp_bytes = 2.0 * float(m.arch.hidden) * t * float(m.moe.top_k) * (np.asarray(etp, dtype=float) - 1.0)
            a2a = measured_all_to_all(m, t, ep, nic, dispatch_time(nvl - etp_bytes, nic, dev), dev, chosen)
            one = a2a + etp_collective_time(m, t, etp, domain, dev, chosen)
        else:
            one = dispatch_time(*dispatch_volumes(m, t, ep, etp, domain, name), dev)
            kernel_ledger.note("collectives", one, where=chosen & (one > 0))
        out = np.where(chosen, one, out)
        fastest = np.minimum(fastest, one)
    return np.where(np.asarray(dispatcher) < 0, fastest, out)


def measured_all_to_all(m: MoEModel, t: Array, ep: Array, nic: Array, ring: Array, dev: DeviceSpec,
                        used: Array | bool = True) -> Array:
    """The ``alltoall`` dispatcher's all-to-all: :func:`dispatch_time`'s ``ring`` seconds, or NCCL's measured
    all-to-all where the whole EP group is on NVLink (no NIC bytes): each rank's buffer holds its t x top_k
    16-bit token copies, (ep - 1) / ep of which leave it -- the bytes :func:`dispatch_volumes` counts."""
    nbytes = 2.0 * float(m.arch.hidden) * t * float(m.moe.top_k)
    e = np.asarray(ep, dtype=float)
    return comm.table_or_ring("all_to_all", nbytes * np.ones_like(e), e, ring, np.asarray(nic) <= 0, dev, used)
