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
"""

from __future__ import annotations

import dataclasses
import fnmatch
import random
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

from collsim.topology.errors import TopologyError
from collsim.topology.model import Link, Topology

__all__ = ["LinkRule", "matching_devices", "perturb_links"]


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


def matching_devices(topo: Topology, rule: LinkRule) -> list[str]:
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
        if fnmatch.fnmatchcase(d.name, rule.device) and any(_kind_ok(ln.kind, rule) for ln in _links_at(topo, d.name))
    ]
    if rule.choose is not None and rule.choose < len(names):
        names = sorted(random.Random(rule.seed).sample(names, rule.choose), key=names.index)
    return names


def _kind_ok(kind: str, rule: LinkRule) -> bool:
    return rule.kind is None or kind == rule.kind


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
    for i, rule in enumerate(rules):
        where = f"{field}[{i}]"
        if not rule.scale > 0:
            raise TopologyError(f"expected a positive bandwidth scale, got {rule.scale!r}", field=f"{where}.scale")
        devices = set(matching_devices(topo, rule))
        if not devices:
            kind = f" of kind {rule.kind!r}" if rule.kind else ""
            raise TopologyError(f"no device matching {rule.device!r} has a link{kind}", field=f"{where}.device")
        for u, v, data in graph.edges(data=True):
            ln = data["link"]
            if (u in devices or v in devices) and _kind_ok(ln.kind, rule):
                graph.edges[u, v]["link"] = dataclasses.replace(ln, bandwidth=ln.bandwidth * rule.scale)
    return Topology(topo.name, graph, topo.nodes, topo.params, topo.source_file, topo.fabric)
