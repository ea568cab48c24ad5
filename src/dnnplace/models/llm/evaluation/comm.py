"""Collectives: latency + bandwidth ring formulas on the link a group actually uses.

Rank order is Megatron's default ``tp-cp-ep-dp-pp`` (TP innermost): a TP group is
``tp`` consecutive ranks, a CP group has stride tp, the DP(xCP) group stride tp,
and pipeline neighbours are tp*cp*dp apart.  Groups of ``span`` consecutive ranks (the
strided ones inside their aligned block of that span) run on NVLink only when every such
block lies in one NVLink domain: the span divides the domain size (or the whole job fits
in one domain).  Otherwise some group crosses a domain boundary, and since every rank of a
step waits for the slowest group, the collective is priced on the NICs: NCCL builds rings
that cross each boundary once per ring, one ring per NIC, so with k group members per
domain the ring's bus bandwidth is min(NVLink, k x NIC) (nccl-tests doc/PERFORMANCE.md:
busBW of a ring = (n-1)/n x size / time on its slowest link).

The NVLink domain is what NVLink connects all-to-all: one 8-GPU node of a DGX/HGX
system today (:func:`nvlink_domain`), a whole rack on NVL72 systems.
"""

from __future__ import annotations

import numpy as np

from dnnplace.core.catalogue import DeviceSpec
from dnnplace.models.llm.evaluation import kernel_ledger
from dnnplace.models.llm.spec import Cluster

Array = np.ndarray


def nvlink_domain(cluster: Cluster) -> int:
    """GPUs NVLink connects all-to-all: the node (``gpus_per_node``) for the systems the catalogue has."""
    return int(cluster.gpus_per_node)


def inside_domain(span: Array, domain: int, gpus: int) -> Array:
    """Does every aligned block of ``span`` ranks lie in one NVLink domain?"""
    span = np.asarray(span, dtype=float)
    return (span <= domain) & ((np.mod(domain, np.maximum(span, 1)) == 0) | (gpus <= domain))


def members_per_domain(span: Array, stride: Array, domain: int) -> Array:
    """Fewest members of a group (``span`` ranks, every ``stride``-th) that one NVLink domain holds where the
    group crosses domains: blocks are cut at domain boundaries into multiples of gcd(span, domain) ranks."""
    g = np.gcd(np.asarray(span, dtype=np.int64), np.int64(domain))
    return np.maximum(g // np.maximum(np.asarray(stride, dtype=np.int64), 1), 1).astype(float)


def group_link(span: Array, members_per_node: Array, domain: int, gpus: int,
               dev: DeviceSpec) -> tuple[Array, Array]:
    """Effective bus bandwidth (bytes/s) and per-step latency of a group spanning ``span`` ranks.

    ``domain``: the NVLink domain size; ``gpus``: the job's GPUs (a job inside one domain never crosses).
    """
    nvl = dev.nvlink_bandwidth * float(dev.nvlink_fraction or 0.0)
    nic = dev.internode_bandwidth * float(dev.internode_fraction or 0.0)
    inside = inside_domain(span, domain, gpus)
    bw = np.where(inside, nvl, np.minimum(nvl, np.maximum(members_per_node, 1) * nic))
    lat = np.where(inside, dev.nvlink_latency_s, dev.internode_latency_s)
    return bw, lat


def ring_time(nbytes: Array, n: Array, bw: Array, lat: Array) -> Array:
    """All-gather or reduce-scatter of a ``nbytes`` buffer over ``n`` ranks: (n-1)/n x bytes / bw + (n-1) steps."""
    return np.where(n > 1, (n - 1) / np.maximum(n, 1) * nbytes / bw + (n - 1) * lat, 0.0)


def collective_time(op: str, nbytes: Array, n: Array, bw: Array, lat: Array, inside: Array,
                    dev: DeviceSpec, used: Array | bool = True) -> Array:
    """Seconds of one collective ``op`` of a ``nbytes`` buffer (nccl-tests' size convention, as
    :func:`ring_time`) over ``n`` ranks: the ring model on the link the group uses (an all-reduce is a
    reduce-scatter then an all-gather: twice :func:`ring_time`), or NCCL's measured sweep where the device's
    switch is on and the sweep describes the group (:func:`table_or_ring`)."""
    ring = ring_time(nbytes, n, bw, lat)
    return table_or_ring(op, nbytes, n, 2.0 * ring if op == "all_reduce" else ring, inside, dev, used)


def table_or_ring(op: str, nbytes: Array, n: Array, ring: Array, inside: Array, dev: DeviceSpec,
                  used: Array | bool = True) -> Array:
    """``ring`` (the catalogue's seconds of the collective) or, where the device's ``measured_kernels`` switch is
    on, NCCL's own measured sweep (:meth:`KernelCosts.collective`) for the groups it describes: inside one NVLink
    domain (``inside``) and at most as many GPUs as it measured.  The sweeps are single-node, so a group across
    nodes (and one larger than the sweep, such as 16 GPUs of an NVL72 rack) keeps the ring model; the plan's
    kernel sources say which entries were which (``used``: the entries the step runs this collective for, the
    ones the ledger counts).
    """
    n = np.asarray(n)
    real = (n > 1) & (np.asarray(ring) > 0) & np.asarray(used, dtype=bool)
    if not kernel_ledger.uses_tables(dev, "collectives"):
        kernel_ledger.note("collectives", ring, where=real)
        return ring
    from dnnplace.kernels import kernel_costs

    kc = kernel_costs(dev.name)
    top = kc.collective_gpus(op)
    use = (n > 1) & (n <= top) & np.asarray(inside, dtype=bool) & (np.asarray(ring) > 0)
    if not np.any(use):
        kernel_ledger.note("collectives", ring, where=real)
        return ring
    priced = kc.collective(op, nbytes, np.clip(n, 1, max(top, 1)), "nvlink")
    t = np.where(use, priced.seconds, ring)
    kernel_ledger.note("collectives", t, np.where(use, priced.source, kernel_ledger.CATALOGUE), where=real)
    return t


def overlapped(comm: Array, window: Array, chunks: Array) -> Array:
    """Exposed part of a collective overlapped with ``window`` seconds of compute, pipelined in ``chunks``.

    The first (or last) chunk can never hide; the rest hides up to the window.
    """
    first = comm / np.maximum(chunks, 1)
    return np.maximum(first, comm - window)
