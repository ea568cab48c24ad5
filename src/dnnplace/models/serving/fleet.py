"""A fleet of GPUs of several kinds: nodes, the GPUs in each, the links inside and between them.

Why its own reader: the question users ask is "these are the GPUs I have", written as
``--gpus "2xa100+2xt4;8xh100"`` (nodes separated by ``;``, ``COUNTxNAME`` terms joined by ``+``) or
as a TOML file that also gives each node's link; every typo is one line naming the culprit and the
names known, never a traceback.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dnnplace.core.catalogue import CATALOGUE, DeviceSpec, device_names, device_spec, resolve_device_name
from dnnplace.errors import DnnplaceError

__all__ = ["LINKS", "MAX_GPUS", "Fleet", "Gpu", "Node", "fleet_from_toml", "parse_gpus"]

#: Links a node's GPUs may share: NVLink (the datasheet's NVLink) or only PCIe.
LINKS = ("nvlink", "pcie")
#: A fleet larger than this is refused (the search is sized for one site, not a cloud region).
MAX_GPUS = 4096

_TERM = re.compile(r"^\s*(?:(-?\d+)\s*[x×*]\s*)?([A-Za-z0-9][A-Za-z0-9._-]*)\s*$")


@dataclass(frozen=True)
class Gpu:
    """One physical GPU: its node, its index inside the node (the order written: CUDA_VISIBLE_DEVICES
    with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` when the spec lists them in bus order) and its catalogue name."""

    node: int
    index: int
    name: str


@dataclass(frozen=True)
class Node:
    """One node: its GPUs in index order and the link among same-type GPUs (``nvlink`` or ``pcie``)."""

    gpus: tuple[Gpu, ...]
    link: str = "nvlink"

    def kinds(self) -> dict[str, list[Gpu]]:
        """GPU name -> this node's GPUs of that type, in index order."""
        out: dict[str, list[Gpu]] = {}
        for g in self.gpus:
            out.setdefault(g.name, []).append(g)
        return out


@dataclass(frozen=True)
class Fleet:
    """The GPUs one deployment may use (``network_bandwidth``: bytes/s between nodes, 0: the datasheet's)."""

    nodes: tuple[Node, ...]
    network_bandwidth: float = 0.0
    network_latency_s: float = 0.0
    text: str = ""

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        return tuple(g for n in self.nodes for g in n.gpus)

    def only(self, keep: Callable[[Gpu], bool]) -> Fleet:
        """The fleet with only the GPUs ``keep`` accepts, node numbers, indices, links and network kept (a plan
        on it is a plan of the whole fleet: one node, one GPU kind, one pool of a disaggregated split)."""
        nodes = tuple(Node(tuple(g for g in n.gpus if keep(g)), n.link) for n in self.nodes)
        return dataclasses.replace(self, nodes=nodes)

    def spec(self) -> str:
        """The fleet in ``--gpus`` syntax (a plan file keeps it and reads it back)."""
        parts = []
        for n in self.nodes:
            terms: list[list[Any]] = []
            for g in n.gpus:
                if terms and terms[-1][1] == g.name:
                    terms[-1][0] += 1
                else:
                    terms.append([1, g.name])
            parts.append("+".join(f"{c}x{name}" for c, name in terms))
        return ";".join(parts)

    def describe(self) -> str:
        return " ; ".join(n_desc for n_desc in self.spec().split(";"))


def _known(name: str, what: str) -> DeviceSpec:
    key = resolve_device_name(name)  # an alias (a100-80g, h100-sxm) is its catalogue key
    if key not in CATALOGUE:
        close = difflib.get_close_matches(name.lower(), list(device_names(aliases=True)), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise DnnplaceError(f"unknown GPU '{name}' in {what}{hint}; known: {', '.join(CATALOGUE)}")
    return device_spec(key)


def _node(text: str, node: int, what: str, link: str = "nvlink") -> Node:
    terms = [t for t in text.split("+")]
    gpus: list[Gpu] = []
    for term in terms:
        m = _TERM.match(term)
        if not term.strip() or m is None:
            raise DnnplaceError(f"{what}: cannot read the term '{term.strip()}' (write COUNTxNAME, e.g. 2xh100)")
        count = int(m.group(1)) if m.group(1) is not None else 1
        if count < 1:
            raise DnnplaceError(f"{what}: the count of '{term.strip()}' must be at least 1, got {count}")
        if count > MAX_GPUS or len(gpus) + count > MAX_GPUS:
            raise DnnplaceError(f"{what}: more than {MAX_GPUS} GPUs in one node ('{term.strip()}')")
        name = resolve_device_name(m.group(2))
        _known(name, f"{what} term '{term.strip()}'")
        base = len(gpus)
        gpus.extend(Gpu(node, base + i, name) for i in range(count))
    if link not in LINKS:
        raise DnnplaceError(f"{what}: unknown link '{link}'; known: {', '.join(LINKS)}")
    return Node(tuple(gpus), link)


def parse_gpus(text: Any, what: str = "--gpus") -> Fleet:
    """``"2xa100+2xt4;8xh100"`` -> a fleet of two nodes (one line naming the culprit on bad input)."""
    if not isinstance(text, str) or not text.strip():
        raise DnnplaceError(f"{what} must be a fleet such as '2xa100+2xt4;8xh100', got {text!r}")
    if len(text) > 10_000:
        raise DnnplaceError(f"{what} is longer than 10000 characters")
    nodes = []
    for i, part in enumerate(text.split(";")):
        if not part.strip():
            raise DnnplaceError(f"{what}: node {i + 1} is empty (nodes are separated by ';')")
        nodes.append(_node(part, i, f"{what} node {i + 1}"))
    fleet = Fleet(tuple(nodes), text=text.strip())
    if len(fleet.gpus) > MAX_GPUS:
        raise DnnplaceError(f"{what}: more than {MAX_GPUS} GPUs")
    return fleet


_NODE_KEYS = {"gpus", "link"}
_TOP_KEYS = {"node", "network"}
_NET_KEYS = {"bandwidth_gbps", "latency_us"}


def _number(v: Any, where: str, key: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < 1e9):
        raise DnnplaceError(f"{where}: '{key}' must be a positive number, got {v!r}")
    return float(v)


def _unknown_key(keys: set[str], known: set[str], where: str) -> None:
    extra = sorted(keys - known)
    if extra:
        close = difflib.get_close_matches(extra[0], sorted(known), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise DnnplaceError(f"{where}: unknown key '{extra[0]}'{hint}; known: {', '.join(sorted(known))}")


def fleet_from_toml(path: str | Path) -> Fleet:
    """A fleet file::

        [[node]]
        gpus = "2xa100+2xt4"
        link = "pcie"          # nvlink (default) | pcie
        [network]
        bandwidth_gbps = 50    # GB/s per GPU between nodes; default: the datasheet's NIC
        latency_us = 5
    """
    p = Path(path)
    where = str(p)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise DnnplaceError(f"cannot read the fleet file {where}: {exc.strerror or exc}") from None
    if len(raw) > 1 << 20:
        raise DnnplaceError(f"{where}: a fleet file larger than 1 MiB")
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise DnnplaceError(f"{where}: not a TOML fleet file ({str(exc).splitlines()[0]})") from None
    _unknown_key(set(doc), _TOP_KEYS, where)
    nodes_doc = doc.get("node")
    if not isinstance(nodes_doc, list) or not nodes_doc:
        raise DnnplaceError(f"{where}: no [[node]] tables")
    nodes = []
    for i, nd in enumerate(nodes_doc):
        w = f"{where} node {i + 1}"
        if not isinstance(nd, dict):
            raise DnnplaceError(f"{w}: must be a table")
        _unknown_key(set(nd), _NODE_KEYS, w)
        if not isinstance(nd.get("gpus"), str):
            raise DnnplaceError(f"{w}: 'gpus' must be a string such as '2xa100+2xt4'")
        if ";" in nd["gpus"]:
            raise DnnplaceError(f"{w}: 'gpus' is one node; give each node its own [[node]] table")
        link = nd.get("link", "nvlink")
        nodes.append(_node(nd["gpus"], i, w, link if isinstance(link, str) else repr(link)))
    net = doc.get("network", {})
    if not isinstance(net, dict):
        raise DnnplaceError(f"{where}: [network] must be a table")
    _unknown_key(set(net), _NET_KEYS, f"{where} [network]")
    bw = _number(net["bandwidth_gbps"], where, "bandwidth_gbps") * 1e9 if "bandwidth_gbps" in net else 0.0
    lat = _number(net["latency_us"], where, "latency_us") * 1e-6 if "latency_us" in net else 0.0
    fleet = Fleet(tuple(nodes), bw, lat, text=where)
    if len(fleet.gpus) > MAX_GPUS:
        raise DnnplaceError(f"{where}: more than {MAX_GPUS} GPUs")
    return fleet
