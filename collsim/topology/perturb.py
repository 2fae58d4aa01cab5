"""Perturbed clusters: the same topology with some links slower (a NIC at half rate, a degraded rail or spine).

A pure function over a :class:`~collsim.topology.Topology`: :func:`perturb_links` returns a copy in which the links
matched by each :class:`LinkRule` carry ``scale`` times their bandwidth, both directions. Which links a rule
matches: every link with an end whose device name matches the rule's ``device`` glob (``fnmatch``: ``n3/nic2``,
``fabric/rail5``, ``fabric/spine*``, ``n*/nic*``), restricted to the link ``kind`` when given. With ``choose`` the
rule applies to that many of the matching devices, drawn with the rule's ``seed`` (the same seed, the same
devices), so "one random NIC at 50%" is ``LinkRule("n*/nic*", 0.5, kind="ib", choose=1, seed=7)``.

Examples
--------
>>> from collsim.topology import load_topology
>>> topo = load_topology("hgx-h100", nodes=2, fabric={"topology": "rail_optimized"})
>>> slow = perturb_links(topo, [LinkRule("n1/nic2", 0.5, kind="ib")])
>>> slow.link("n1/nic2", "fabric/rail2").bandwidth / topo.link("n1/nic2", "fabric/rail2").bandwidth
0.5
>>> slow.link("fabric/rail2", "n1/nic2").bandwidth / topo.link("fabric/rail2", "n1/nic2").bandwidth
0.5
>>> slow.link("n1/nic2", "n1/pcie1") == topo.link("n1/nic2", "n1/pcie1")  # kind "ib" only: its PCIe link is kept
True

Links or devices down (:func:`take_down`, :class:`DownRule`) follow NCCL at init: a NIC whose port is down is not
listed by NCCL's IB plugin (``src/transport/net_ib.cc``, ``ncclIbInitDevices``: ``if (portAttr.state !=
IBV_PORT_ACTIVE) continue;``, line 682 in v2.27.7-1), so the NIC is removed from the graph and the channels that used
it go to the nearest NIC left on its node (:attr:`Topology.nic_substitutes`), as NCCL's search picks NICs close to
the GPU first (``ncclTopoSelectNets``, ``src/graph/search.cc``). A fabric switch or a switch-to-switch link down
is removed too; routing then takes the remaining links. What leaves a node without a NIC, or two NICs whose
channels must meet without a route, is an error naming the rule. Background traffic (:func:`add_background`,
:class:`BackgroundRule`) is another job's greedy streams on the matched links, run by the backends as flows
competing max-min fairly with the collective.

>>> down = take_down(topo, [DownRule("n1/nic2")])
>>> "n1/nic2" in down.graph, down.nic_slots(1)[2]   # its channels go to nic3, under the same PCIe switch
(False, 'n1/nic3')
>>> bg = add_background(topo, [BackgroundRule("n1/nic2", load=0.5, kind="ib")])
>>> [(s, d) for s, d, _ in bg.background]
[('fabric/rail2', 'n1/nic2'), ('n1/nic2', 'fabric/rail2')]
"""

from __future__ import annotations

import dataclasses
import fnmatch
import random
import re
import warnings
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import networkx as nx

from collsim.topology.errors import TopologyError, TopologyWarning
from collsim.topology.model import Device, Link, Topology, gpu_nearness, path_class_rank

__all__ = [
    "BackgroundRule",
    "DownRule",
    "LinkRule",
    "add_background",
    "matching_devices",
    "perturb_links",
    "take_down",
]


@dataclass(frozen=True)
class LinkRule:
    """Scale the bandwidth of the links at some devices.

    Parameters
    ----------
    device : str
        Glob on device names (``fnmatch``), e.g. ``"n3/nic2"``, ``"fabric/spine*"``.
    scale : float
        Factor on the matched links' bandwidth (bytes/s), > 0: 0.5 is half rate.
    kind : str, optional
        Only links of this kind (``nvlink``, ``pcie``, ``upi``, ``ib``, ``roce``, ``eth``).
    choose : int, optional
        Apply to this many of the matching devices, drawn at random with ``seed``; all of them when None.
    seed : int
        Seed of that draw.
    """

    device: str
    scale: float
    kind: str | None = None
    choose: int | None = None
    seed: int = 0


@dataclass(frozen=True)
class DownRule:
    """Take devices or links down: NICs (their port down), fabric switches, or the links between two globs.

    Parameters
    ----------
    device : str
        Glob on device names (``fnmatch``): ``"n1/nic2"``, ``"n1/nic*"``, ``"fabric/spine0"``.
    peer : str, optional
        Only the links from a matched device to a device matching this glob (``device: fabric/rail3, peer:
        fabric/spine0``: one leaf-spine uplink); without it the matched devices themselves go down.
    kind : str, optional
        Only devices with a link of this kind.
    choose : int, optional
        Take this many of the matching devices down, drawn at random with ``seed``; all of them when None.
    seed : int
        Seed of that draw.
    """

    device: str
    peer: str | None = None
    kind: str | None = None
    choose: int | None = None
    seed: int = 0


@dataclass(frozen=True)
class BackgroundRule:
    """Another job's traffic: one greedy stream on every directed link at the matched devices.

    Parameters
    ----------
    device : str
        Glob on device names (``fnmatch``), e.g. ``"fabric/spine*"``, ``"n1/nic2"``.
    rate : float, optional
        Offered rate of each stream, bytes/s (one of ``rate`` and ``load``).
    load : float, optional
        Offered rate as a fraction of each link's bandwidth, in [0, 1].
    kind, peer, choose, seed
        As :class:`DownRule` (``peer``: only the links to devices matching it).
    """

    device: str
    rate: float | None = None
    load: float | None = None
    kind: str | None = None
    peer: str | None = None
    choose: int | None = None
    seed: int = 0


_Rule = LinkRule | DownRule | BackgroundRule


def matching_devices(topo: Topology, rule: _Rule) -> list[str]:
    """Device names the rule applies to: those matching its glob with at least one link of its kind, in the
    topology's device order, then the seeded draw of ``choose`` of them.

    >>> from collsim.topology import load_topology
    >>> topo = load_topology("hgx-h100", nodes=2, fabric={"topology": "rail_optimized"})
    >>> len(matching_devices(topo, LinkRule("n*/nic*", 0.5, kind="ib")))
    16
    >>> a = matching_devices(topo, LinkRule("n*/nic*", 0.5, kind="ib", choose=1, seed=7))
    >>> a == matching_devices(topo, LinkRule("n*/nic*", 0.5, kind="ib", choose=1, seed=7)) and len(a) == 1
    True
    """
    names = [
        d.name
        for d in topo.devices()
        if fnmatch.fnmatchcase(d.name, rule.device)
        and any(_link_ok(ln, d.name, rule) for ln in _links_at(topo, d.name))
    ]
    if rule.choose is not None and rule.choose < len(names):
        names = sorted(random.Random(rule.seed).sample(names, rule.choose), key=names.index)
    return names


def _kind_ok(kind: str, rule: _Rule) -> bool:
    return rule.kind is None or kind == rule.kind


def _link_ok(ln: Link, end: str, rule: _Rule) -> bool:
    """Whether link ``ln`` at device ``end`` is one ``rule`` applies to: its kind, and its other end matching the
    rule's ``peer`` glob when it has one."""
    peer = getattr(rule, "peer", None)
    other = ln.dst if ln.src == end else ln.src
    return _kind_ok(ln.kind, rule) and (peer is None or fnmatch.fnmatchcase(other, peer))


def _rule_edges(topo: Topology, rule: _Rule, devices: set[str]) -> list[tuple[str, str]]:
    """The directed links ``rule`` applies to, given its matched ``devices``, sorted."""
    out = []
    for u, v, data in topo.graph.edges(data=True):
        ln = data["link"]
        if (u in devices and _link_ok(ln, u, rule)) or (v in devices and _link_ok(ln, v, rule)):
            out.append((u, v))
    return sorted(out)


def _matched(topo: Topology, rule: _Rule, where: str) -> set[str]:
    """:func:`matching_devices` of ``rule``, or a :class:`TopologyError` naming ``where`` when it matches none."""
    devices = set(matching_devices(topo, rule))
    if not devices:
        kind = f" of kind {rule.kind!r}" if rule.kind else ""
        peer = getattr(rule, "peer", None)
        to = f" to a device matching {peer!r}" if peer else ""
        named = any(fnmatch.fnmatchcase(d.name, rule.device) for d in topo.devices())
        node = re.match(r"n(\d+)/", rule.device)
        if not named and node is not None and int(node.group(1)) >= topo.nodes:  # a node the cluster does not have
            hint = f" (the cluster has nodes n0-n{topo.nodes - 1})"
        else:
            hint = ("" if named or "nic" not in rule.device else " (a NIC that fabric.nics, fabric.nics_per_node "
                    "or NCCL_IB_HCA leaves out, or one an earlier rule took down, is not in the cluster built)")
        raise TopologyError(f"no device matching {rule.device!r} has a link{kind}{to}{hint}", field=f"{where}.device")
    return devices


def _links_at(topo: Topology, name: str) -> list[Link]:
    g = topo.graph
    return [g.edges[e]["link"] for e in [*g.out_edges(name), *g.in_edges(name)]]


def perturb_links(topo: Topology, rules: Sequence[LinkRule], field: str = "perturb.links") -> Topology:
    """A copy of ``topo`` with each rule's links scaled (rules apply one after another: two rules on one link
    multiply).

    Raises
    ------
    TopologyError
        A scale that is not positive, or a rule matching no link (naming ``field[i]``).
    """
    if not rules:
        return topo
    graph: nx.DiGraph = topo.graph.copy()
    scaled = set(topo.scaled)
    by: dict[tuple[str, str], int] = {}  # link -> the rule that scaled it first here
    for i, rule in enumerate(rules):
        where = f"{field}[{i}]"
        if not rule.scale > 0:
            raise TopologyError(f"expected a positive bandwidth scale, got {rule.scale!r}", field=f"{where}.scale")
        again: dict[int, int] = {}  # earlier rule -> links of it this one scales again
        for u, v in _rule_edges(topo, rule, _matched(topo, rule, where)):
            ln = graph.edges[u, v]["link"]
            graph.edges[u, v]["link"] = dataclasses.replace(ln, bandwidth=ln.bandwidth * rule.scale)
            if (u, v) in by:
                again[by[(u, v)]] = again.get(by[(u, v)], 0) + 1
            else:
                by[(u, v)] = i
        for j, count in again.items():
            warnings.warn(f"{where} scales {count} link(s) {field}[{j}] scaled too: the scales multiply "
                          f"(x{rules[j].scale:g} x{rule.scale:g} = x{rules[j].scale * rule.scale:g})",
                          TopologyWarning, stacklevel=2)  # fmt: skip
    # the slowed links only (what engine.decouple simulates apart): a rule of scale 1, a faster link, or two rules
    # that cancel change nothing a decoupling could approximate (they gave the decoupled model, slower than exact)
    scaled |= {e for e in by if graph.edges[e]["link"].bandwidth < topo.graph.edges[e]["link"].bandwidth}
    return _like(topo, graph, scaled=scaled)


def _like(
    topo: Topology,
    graph: nx.DiGraph,
    substitutes: dict[str, tuple[Device, str]] | None = None,
    background: tuple[tuple[str, str, float], ...] | None = None,
    scaled: Collection[tuple[str, str]] | None = None,
) -> Topology:
    """A topology like ``topo`` over ``graph`` (its NIC substitutes, background and scaled links unless given;
    scaled links no longer in ``graph`` are dropped)."""
    kept = [e for e in (topo.scaled if scaled is None else scaled) if graph.has_edge(*e)]
    return topo.replaced(
        graph,
        nic_substitutes=topo.nic_substitutes if substitutes is None else substitutes,
        background=topo.background if background is None else background,
        scaled=kept,
    )


#: Device kinds a :class:`DownRule` may take down (a NIC: its port; a fabric switch), and the kinds a link it takes
#: down may join: NICs and switches only. GPUs, NVLinks, PCIe and inter-socket links are not taken down (see
#: docs/perturbations.md: NCCL's behaviour there is not modelled).
_DOWN_KINDS = ("nic", "switch")


def take_down(topo: Topology, rules: Sequence[DownRule], field: str = "perturb.down") -> Topology:
    """A copy of ``topo`` with each rule's devices (or, with ``peer``, links) removed, both directions.

    A NIC goes down with its port: it is removed with all its links, as NCCL's IB plugin skips a port that is not
    ACTIVE at init (``src/transport/net_ib.cc:682``, v2.27.7-1); a NIC left without a fabric link (its port taken
    down through ``peer``, or its leaf, rail or single switch down) goes the same way. The channels of a removed
    NIC go to the NIC left on its node nearest the GPU that used it (best path class, then the next index):
    :attr:`Topology.nic_substitutes`, which :meth:`Topology.nic_slots` applies. A switch, or a link between
    switches, is removed and routes take what is left (collsim routes statically, one shortest path per pair,
    without ECMP).

    Raises
    ------
    TopologyError
        Naming ``field[i]``: a rule matching nothing, a device or link kind that cannot go down (GPU, NVLink, PCIe:
        not modelled), a node left without a NIC, or NICs whose channels must meet left without a route.
    """
    if not rules:
        return topo
    graph: nx.DiGraph = topo.graph.copy()
    removed: list[Device] = []
    for i, rule in enumerate(rules):
        where = f"{field}[{i}]"
        current = _like(topo, graph)
        devices = _matched(current, rule, where)
        if rule.peer is None:
            for name in sorted(devices):
                dev = current.device(name)
                if dev.kind not in _DOWN_KINDS:
                    raise TopologyError(
                        f"taking {dev.kind} {name} down is not modelled (only NICs and fabric switches or links); "
                        "for fewer NVLinks or a slower PCIe link use perturb.links with a scale "
                        "(one of a GPU's 18 NVLinks down: scale 17/18)",
                        field=f"{where}.device",
                    )
                graph.remove_node(name)
                if dev.kind == "nic":
                    removed.append(dev)
        else:
            for u, v in _rule_edges(current, rule, devices):
                ku, kv = current.device(u).kind, current.device(v).kind
                if ku not in _DOWN_KINDS or kv not in _DOWN_KINDS:
                    raise TopologyError(
                        f"taking the link {u} -> {v} down is not modelled (only NIC ports and links between fabric "
                        "switches); for a slower link use perturb.links with a scale",
                        field=f"{where}.peer",
                    )
                graph.remove_edge(u, v)
        # a NIC left without a fabric link (its port taken down through peer, or its switch down: a leaf, a rail,
        # the single switch) has no ACTIVE port: NCCL does not list it (a switch down was refused as partitioned)
        for name in sorted(n for n in list(graph.nodes) if graph.nodes[n]["device"].kind == "nic"):
            dev = graph.nodes[name]["device"]
            if topo.fabric is not None and not any(graph.nodes[m]["device"].kind == "switch" for m in graph[name]):
                graph.remove_node(name)
                removed.append(dev)
        _check_nics_left(topo, graph, rule, where)
        result = _like(topo, graph, {**topo.nic_substitutes, **_substitutes(topo, graph, removed)})
        _check_routes(result, rule, where)
    return result


def _check_nics_left(topo: Topology, graph: nx.DiGraph, rule: DownRule, where: str) -> None:
    """Every node of a multi-node cluster keeps a NIC."""
    if topo.nodes <= 1:
        return
    for node in range(topo.nodes):
        if topo.nics(node) and not any(
            d["device"].kind == "nic" and d["device"].node == node for _, d in graph.nodes(data=True)
        ):
            raise TopologyError(
                f"taking {rule.device} down leaves node n{node} with no NIC, no network path: NCCL would fail at init "
                "(its IB plugin lists only ACTIVE ports, src/transport/net_ib.cc:682, so no NET device is left; "
                "at best it falls back to sockets over an interface this cluster model does not have)",
                field=f"{where}.device",
            )


def _substitutes(healthy: Topology, graph: nx.DiGraph, removed: Sequence[Device]) -> dict[str, tuple[Device, str]]:
    """Per removed NIC, the NIC left on its node that carries its channels: the nearest to the GPU that used it
    (that GPU: the nearest to the removed NIC, the one with its index among equals), then the next index."""
    out: dict[str, tuple[Device, str]] = {}
    for nic in removed:
        left = [d for d in healthy.nics(nic.node) if d.name in graph]
        if not left:
            continue
        gpus = healthy.devices("gpu", nic.node)
        ref = nic.name
        if gpus:
            ref = min((g.name for g in gpus), key=gpu_nearness(healthy, nic.name, len(gpus)))
        span = 1 + max(d.index for d in healthy.nics(nic.node))
        best = min(left, key=lambda n: (path_class_rank(healthy.path_class(ref, n.name)), (n.index - nic.index) % span))
        out[nic.name] = (nic, best.name)
    return out


def _check_routes(topo: Topology, rule: DownRule, where: str) -> None:
    """The NICs NCCL's channel ``c`` uses on every node (:meth:`Topology.nic_slots`) still reach each other."""
    if topo.nodes <= 1 or topo.fabric is None:
        return
    slots = [topo.nic_slots(node) for node in range(topo.nodes)]
    for a in range(topo.nodes):
        for b in range(topo.nodes):
            if a == b or not slots[a] or not slots[b]:
                continue
            for i in range(max(len(slots[a]), len(slots[b]))):
                src, dst = slots[a][i % len(slots[a])], slots[b][i % len(slots[b])]
                try:
                    topo.route(src, dst)
                except TopologyError:
                    raise TopologyError(
                        f"taking {rule.device}{f' -> {rule.peer}' if rule.peer else ''} down leaves no route from "
                        f"{src} to {dst} (the fabric is partitioned); NCCL would fail to connect its rings at init",
                        field=f"{where}.device",
                    ) from None


def add_background(topo: Topology, rules: Sequence[BackgroundRule], field: str = "perturb.background") -> Topology:
    """A copy of ``topo`` carrying another job's traffic: per rule, one greedy stream on every directed link at its
    matched devices (of its ``kind``, to its ``peer``), offered ``rate`` bytes/s or ``load`` x the link's bandwidth.
    Streams of zero rate are left out (no background at all: the same topology).

    Raises
    ------
    TopologyError
        Naming ``field[i]``: not exactly one of rate and load, a negative rate, a load outside [0, 1], or a rule
        matching no link.
    """
    streams = list(topo.background)
    for i, rule in enumerate(rules):
        where = f"{field}[{i}]"
        if (rule.rate is None) == (rule.load is None):
            raise TopologyError("expected exactly one of rate and load", field=where)
        if rule.rate is not None and not rule.rate >= 0:
            raise TopologyError(f"expected a rate >= 0, got {rule.rate!r}", field=f"{where}.rate")
        if rule.load is not None and not 0 <= rule.load <= 1:
            raise TopologyError(f"expected a load in [0, 1], got {rule.load!r}", field=f"{where}.load")
        for u, v in _rule_edges(topo, rule, _matched(topo, rule, where)):
            rate = rule.rate if rule.rate is not None else float(rule.load or 0.0) * topo.link(u, v).bandwidth
            if rate > 0:
                streams.append((u, v, float(rate)))
    if len(streams) == len(topo.background):
        return topo
    return _like(topo, topo.graph, background=tuple(streams))
