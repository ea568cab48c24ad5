"""Collectives: latency + bandwidth ring formulas on the link a group actually uses.

Rank order is Megatron's default ``tp-cp-ep-dp-pp`` (TP innermost): a TP group is
``tp`` consecutive ranks, a CP group has stride tp, the DP(xCP) group stride tp,
and pipeline neighbours are tp*cp*dp apart.  A group lies in one node when its span
fits in ``gpus_per_node``; otherwise it crosses nodes.  NCCL then builds rings that
cross each node boundary once per ring, one ring per NIC: with k group members per
node the ring's bus bandwidth is min(NVLink, k x NIC) (nccl-tests doc/PERFORMANCE.md:
busBW of a ring = (n-1)/n x size / time on its slowest link).
"""

from __future__ import annotations

import numpy as np

from dnnplace.model.catalogue import DeviceSpec

Array = np.ndarray


def group_link(span: Array, members_per_node: Array, gpn: int, dev: DeviceSpec) -> tuple[Array, Array]:
    """Effective bus bandwidth (bytes/s) and per-step latency of a group spanning ``span`` ranks."""
    nvl = dev.nvlink_bandwidth * float(dev.nvlink_fraction or 0.0)
    nic = dev.internode_bandwidth * float(dev.internode_fraction or 0.0)
    inside = span <= gpn
    bw = np.where(inside, nvl, np.minimum(nvl, np.maximum(members_per_node, 1) * nic))
    lat = np.where(inside, dev.nvlink_latency_s, dev.internode_latency_s)
    return bw, lat


def ring_time(nbytes: Array, n: Array, bw: Array, lat: Array) -> Array:
    """All-gather or reduce-scatter of a ``nbytes`` buffer over ``n`` ranks: (n-1)/n x bytes / bw + (n-1) steps."""
    return np.where(n > 1, (n - 1) / np.maximum(n, 1) * nbytes / bw + (n - 1) * lat, 0.0)


def overlapped(comm: Array, window: Array, chunks: Array) -> Array:
    """Exposed part of a collective overlapped with ``window`` seconds of compute, pipelined in ``chunks``.

    The first (or last) chunk can never hide; the rest hides up to the window.
    """
    first = comm / np.maximum(chunks, 1)
    return np.maximum(first, comm - window)
