"""The one implementation of the cost model (SPEC "Split and load").

Every solver, report and runtime asks this module what a split costs; no other
product module computes loads.  Communication is charged per *original* node:
a device pays ``c_u`` once for every node ``u`` whose output crosses its
boundary, in either direction; CPU cores pay none.  Memory: an accelerator
holds its nodes' own bytes plus one copy of every shared parameter group one of
its nodes uses (SPEC "Shared parameters").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dnnplace.models.paper.evaluation.assignment import Assignment, assign
from dnnplace.models.paper.evaluation.latency import single_sample_latency
from dnnplace.models.paper.split import Split
from dnnplace.models.paper.workload import Workload


@dataclass(frozen=True)
class DeviceReport:
    """Load of one device, split into its parts."""

    kind: str  # "accelerator" or "cpu"
    index: int  # position among devices of its kind
    nodes: tuple[int, ...]  # original node ids
    compute: float
    communication: float
    load: float
    memory: float
    contiguous: bool  # forward set has no path leaving and re-entering it
    # the load's parts per direction: (received, computed, sent); CPUs send and receive for free
    forward_parts: tuple[float, float, float] = (0.0, 0.0, 0.0)
    backward_parts: tuple[float, float, float] = (0.0, 0.0, 0.0)
    shared: tuple[str, ...] = ()  # the shared parameter groups this device holds a copy of (used by its nodes)

    @property
    def forward_load(self) -> float:
        """Compute + communication of forward nodes."""
        return float(sum(self.forward_parts))

    @property
    def backward_load(self) -> float:
        """Compute + communication of backward nodes."""
        return float(sum(self.backward_parts))

    @property
    def name(self) -> str:
        return f"{'acc' if self.kind == 'accelerator' else 'cpu'}{self.index}"


@dataclass(frozen=True)
class Violation:
    """One broken constraint; ``kind`` is a stable keyword for programs."""

    kind: str  # colocation | memory | unsupported | devices | unplaced | duplicate
    message: str


@dataclass(frozen=True)
class Evaluation:
    """Everything the cost model says about a split."""

    max_load: float
    devices: tuple[DeviceReport, ...]
    violations: tuple[Violation, ...]
    latency: float
    latency_note: str | None
    assignment: Assignment = field(repr=False)
    overlap_comm: bool = False

    @property
    def feasible(self) -> bool:
        return not self.violations

    @property
    def contiguous(self) -> bool:
        """Every device's forward set is contiguous."""
        return all(d.contiguous for d in self.devices)

    @property
    def fw_plus_bw(self) -> float:
        """The alternative objective max FW + max BW (paper, Appendix C)."""
        fw = max((d.forward_load for d in self.devices), default=0.0)
        bw = max((d.backward_load for d in self.devices), default=0.0)
        return fw + bw

    def value(self, objective: str) -> float:
        """This split's number for an objective: ``throughput`` (max-load), ``latency`` or ``fw+bw``."""
        if objective == "latency":
            return self.latency
        if objective == "fw+bw":
            return self.fw_plus_bw
        if objective == "throughput":
            return self.max_load
        raise ValueError(f"unknown objective {objective!r}")

    @property
    def bottleneck(self) -> DeviceReport | None:
        return max(self.devices, key=lambda d: d.load, default=None)

    def to_dict(self) -> dict:
        """JSON-ready summary (the CLI's ``--json``)."""
        return {
            "maxLoad": self.max_load,
            "latency": self.latency if np.isfinite(self.latency) else None,
            "latencyNote": self.latency_note,
            "feasible": self.feasible,
            "contiguous": self.contiguous,
            "fwPlusBw": self.fw_plus_bw,
            "violations": [{"kind": v.kind, "message": v.message} for v in self.violations],
            "devices": [
                {
                    "device": d.name, "kind": d.kind, "load": d.load, "compute": d.compute,
                    "communication": d.communication, "memory": d.memory,
                    "forwardLoad": d.forward_load, "backwardLoad": d.backward_load,
                    "contiguous": d.contiguous, "nodes": list(d.nodes),
                    **({"sharedParameters": list(d.shared)} if d.shared else {}),
                }
                for d in self.devices
            ],
            **({"sharedParameters": self.shared_copies()} if any(d.shared for d in self.devices) else {}),
        }

    def shared_copies(self) -> list[dict]:
        """Per shared parameter group held anywhere: its name and the devices holding a copy."""
        holders: dict[str, list[str]] = {}
        for d in self.devices:
            for name in d.shared:
                holders.setdefault(name, []).append(d.name)
        return [{"name": name, "devices": devs} for name, devs in holders.items()]


def evaluate(
    workload: Workload,
    split: Split,
    *,
    overlap_comm: bool = False,
    complete: bool = True,
    source: str = "split",
) -> Evaluation:
    """Evaluate ``split`` on ``workload`` under SPEC's cost model."""
    a = assign(workload, split, complete=complete, source=source)
    return evaluate_assignment(workload, a, overlap_comm=overlap_comm)


def evaluate_assignment(w: Workload, a: Assignment, *, overlap_comm: bool = False) -> Evaluation:
    """Evaluate a per-node device array (see :func:`evaluate`)."""
    dev = a.device
    n_dev = a.n_devices
    lp = device_loads(w, dev[None, :], a.n_acc, n_dev, overlap_comm)
    compute_fw, compute_bw, memory, load = lp.compute_fw[0], lp.compute_bw[0], lp.memory[0], lp.load[0]
    recv_fw, recv_bw, send_fw, send_bw = lp.recv_fw[0], lp.recv_bw[0], lp.send_fw[0], lp.send_bw[0]
    compute = compute_fw + compute_bw
    comm = recv_fw + send_fw + recv_bw + send_bw
    contiguous = _contiguity(w, dev, n_dev)
    node_ids = w.node_ids
    members: list[list[int]] = [[] for _ in range(n_dev)]
    for i, d in enumerate(dev.tolist()):
        if d >= 0:
            members[d].append(int(node_ids[i]))
    held = lp.held[0]  # (groups, devices)
    names = w.shared.names
    devices = tuple(
        DeviceReport(
            kind="accelerator" if d < a.n_acc else "cpu",
            index=d if d < a.n_acc else d - a.n_acc,
            nodes=tuple(sorted(members[d])),
            compute=float(compute[d]),
            communication=float(comm[d]),
            load=float(load[d]),
            memory=float(memory[d]),
            contiguous=bool(contiguous[d]),
            forward_parts=(float(recv_fw[d]), float(compute_fw[d]), float(send_fw[d])),
            backward_parts=(float(recv_bw[d]), float(compute_bw[d]), float(send_bw[d])),
            shared=tuple(names[g] for g in np.flatnonzero(held[:, d]).tolist()),
        )
        for d in range(n_dev)
    )
    violations = _violations(w, a, memory)
    lat, note = single_sample_latency(w, dev, a.n_acc)
    return Evaluation(
        max_load=float(load.max()) if n_dev else 0.0,
        devices=devices,
        violations=tuple(violations),
        latency=lat,
        latency_note=note,
        assignment=a,
        overlap_comm=overlap_comm,
    )


@dataclass(frozen=True)
class LoadParts:
    """Per assignment (rows) and device (columns): the parts of the load.

    Communication is split by the producing node's direction (forward or
    backward) and into received / sent; it is zero on CPUs.  ``held`` is
    ``(B, groups, devices)``: which devices hold a copy of each shared
    parameter group; an accelerator's ``memory`` includes the bytes of those it holds.
    """

    compute_fw: np.ndarray
    compute_bw: np.ndarray
    recv_fw: np.ndarray
    recv_bw: np.ndarray
    send_fw: np.ndarray
    send_bw: np.ndarray
    memory: np.ndarray
    load: np.ndarray
    held: np.ndarray


def device_loads(w: Workload, dev: np.ndarray, n_acc: int, n_dev: int, overlap: bool = False) -> LoadParts:
    """The cost model for a batch of assignments ``dev`` (B x n; -1 = unplaced)."""
    B = dev.shape[0]
    D = n_dev + 1  # the extra column collects unplaced nodes
    safe = np.where(dev >= 0, dev, n_dev)
    on_acc = safe < n_acc
    time = np.where(on_acc, w.acc_time, w.cpu_time)
    flat = (safe + D * np.arange(B)[:, None]).ravel()

    def per_device(weights: np.ndarray) -> np.ndarray:
        return np.bincount(flat, weights=weights.ravel(), minlength=B * D).reshape(B, D)[:, :n_dev]

    fwd = ~w.backward
    compute_fw = per_device(time * fwd)
    compute_bw = per_device(time * ~fwd)
    memory = per_device(w.size * on_acc)
    recv_fw, recv_bw, send_fw, send_bw = _communication(w, safe, n_dev)
    acc_dev = np.arange(n_dev) < n_acc
    held = w.shared.held(safe, n_dev)
    if w.shared.count:  # one copy per accelerator holding a node that uses the group
        memory += np.einsum("bgd,g->bd", held & acc_dev, w.shared.size)
    for part in (recv_fw, recv_bw, send_fw, send_bw):
        part[:, ~acc_dev] = 0.0
    compute = compute_fw + compute_bw
    comm = recv_fw + recv_bw + send_fw + send_bw
    load = np.where(acc_dev, combine(compute, comm, overlap), compute)
    return LoadParts(compute_fw, compute_bw, recv_fw, recv_bw, send_fw, send_bw, memory, load, held)


def combine(compute: np.ndarray | float, comm: np.ndarray | float, overlap: bool) -> np.ndarray | float:
    """An accelerator's time for its compute and its transfers: their sum, or their max when they overlap."""
    return np.maximum(compute, comm) if overlap else compute + comm


def max_loads(w: Workload, dev: np.ndarray, n_acc: int, n_dev: int, overlap: bool = False
              ) -> tuple[np.ndarray, np.ndarray]:
    """Max-load and memory-feasibility of each assignment in a batch (for search heuristics)."""
    lp = device_loads(w, dev, n_acc, n_dev, overlap)
    fits = (lp.memory[:, :n_acc] <= w.memory * (1 + 1e-12)).all(axis=1)
    return lp.load.max(axis=1, initial=0.0), np.asarray(fits)


def _communication(w: Workload, safe: np.ndarray, n_dev: int) -> tuple[np.ndarray, ...]:
    """Per-device transfer time for a batch, split by the producing node's direction.

    A producer ``u`` (placed) reaches the set of devices of its placed
    successors; every reached device other than its own pays ``c_u`` once,
    and its own device pays ``c_u`` once if any device is reached.
    """
    B = safe.shape[0]
    recv_fw, recv_bw = np.zeros((B, n_dev)), np.zeros((B, n_dev))
    send_fw, send_bw = np.zeros((B, n_dev)), np.zeros((B, n_dev))
    if w.m == 0:
        return recv_fw, recv_bw, send_fw, send_bw
    order = np.argsort(w.edge_src, kind="stable")
    src, dst = w.edge_src[order], w.edge_dst[order]
    starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]])
    producers = src[starts]
    c = w.comm_cost[producers]
    bw = w.backward[producers]
    reach = np.zeros((B, dst.size, n_dev + 1), dtype=bool)
    np.put_along_axis(reach, safe[:, dst][:, :, None], True, axis=2)
    reach = np.logical_or.reduceat(reach, starts, axis=1)[:, :, :n_dev]  # (B, producers, devices)
    own = safe[:, producers]
    placed = own < n_dev
    rows, cols = np.nonzero(placed)
    reach[rows, cols, own[rows, cols]] = False
    reach &= placed[:, :, None]
    recv_fw += np.einsum("bpd,p->bd", reach, c * ~bw)
    recv_bw += np.einsum("bpd,p->bd", reach, c * bw)
    sends = reach.any(axis=2)
    flat = (own + (n_dev + 1) * np.arange(B)[:, None]).ravel()
    size = B * (n_dev + 1)
    send_fw += np.bincount(flat, weights=(sends * (c * ~bw)).ravel(), minlength=size).reshape(B, -1)[:, :n_dev]
    send_bw += np.bincount(flat, weights=(sends * (c * bw)).ravel(), minlength=size).reshape(B, -1)[:, :n_dev]
    return recv_fw, recv_bw, send_fw, send_bw


def _contiguity(w: Workload, dev: np.ndarray, n_dev: int) -> np.ndarray:
    """For each device: is its forward node set contiguous?

    ``reach[v]`` is the bitset of devices having a node with a forward path to
    ``v``; a device is non-contiguous when an edge ``p -> w`` enters it from
    outside while ``p`` is already reached from it.
    """
    ok = np.ones(n_dev, dtype=bool)
    reach = [0] * w.n
    fwd = ~w.backward
    for v in w.topological_order.tolist():
        if not fwd[v]:
            continue
        dv = int(dev[v])
        r = 0
        for p in w.predecessors[v].tolist():
            if not fwd[p]:
                continue
            dp = int(dev[p])
            rp = reach[p] | ((1 << dp) if dp >= 0 else 0)
            if dv >= 0 and dp != dv and (reach[p] >> dv) & 1:
                ok[dv] = False
            r |= rp
        reach[v] = r
    return ok


def _violations(w: Workload, a: Assignment, memory: np.ndarray) -> list[Violation]:
    out: list[Violation] = []
    dev = a.device
    unplaced = np.flatnonzero(dev < 0)
    if unplaced.size:
        out.append(Violation("unplaced", f"{unplaced.size} node(s) not placed, e.g. {w.label(int(unplaced[0]))}"))
    for i in a.twice_placed:
        out.append(Violation("duplicate", f"{w.label(i)} is listed on more than one device"))
    used_acc = len({int(d) for d in dev[(dev >= 0) & (dev < a.n_acc)]})
    used_cpu = len({int(d) for d in dev[dev >= a.n_acc]})
    if used_acc > w.max_accelerators:
        out.append(Violation("devices", f"uses {used_acc} accelerators, the budget is {w.max_accelerators}"))
    if used_cpu > w.max_cpus:
        out.append(Violation("devices", f"uses {used_cpu} CPU cores, the budget is {w.max_cpus}"))
    bad = np.flatnonzero((dev >= 0) & (dev < a.n_acc) & ~w.supported)
    for i in bad[:5].tolist():
        out.append(Violation("unsupported", f"{w.label(i)} is on acc{dev[i]} but not supported on accelerators"))
    for d in np.flatnonzero(memory[: a.n_acc] > w.memory * (1 + 1e-12)).tolist():
        out.append(Violation("memory", f"acc{d} holds {memory[d]:.6g} bytes, more than {w.memory:.6g}"))
    placed = dev >= 0
    colours = w.color[placed]
    order = np.lexsort((dev[placed], colours))
    cs, ds = colours[order], dev[placed][order]
    split_classes = np.unique(cs[1:][(cs[1:] == cs[:-1]) & (ds[1:] != ds[:-1])])
    for c in split_classes[:5].tolist():
        where = sorted({int(d) for d in dev[placed & (w.color == c)]})
        out.append(Violation("colocation", f"colour class {c} is split across devices {where}"))
    return out


def crossing_outputs(w: Workload, a: Assignment) -> list[tuple[int, int, tuple[int, ...]]]:
    """Every node whose output leaves its device: (node index, its device, receiving devices)."""
    dev = a.device
    out: dict[int, set[int]] = {}
    for u, v in zip(w.edge_src.tolist(), w.edge_dst.tolist()):
        du, dv = int(dev[u]), int(dev[v])
        if du >= 0 and dv >= 0 and du != dv:
            out.setdefault(u, set()).add(dv)
    return [(u, int(dev[u]), tuple(sorted(ds))) for u, ds in sorted(out.items())]
