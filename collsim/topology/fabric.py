"""Cluster fabrics: the network joining the NICs of several nodes.

Configuration (a plain mapping, passed through by the scenario layer)::

    topology: single_switch | rail_optimized | fat_tree     # required
    transport: rdma | tcp                                   # default rdma
    nic: connectx-7-ndr            # optional NIC preset replacing the node's NICs
    nic_speed: 100Gb/s             # optional NIC speed override (per direction; Gb/s are bits)
    nics_per_node: 4               # optional: keep k NICs of each node, the first k of the template's population
                                   #   order (default: spread over PCIe switches and sockets; the others are removed)
    nics_per_switch: 1             # optional: at most this many NICs on each PCIe switch (population order)
    nics_per_socket: 2             # optional: at most this many NICs on each CPU socket (population order)
    nics: [nic0, nic3]             # optional, instead of the three above: the template's NIC slots to keep
    gpudirect: true                # default true; recorded for the backends (only meaningful with rdma)
    switch: {latency: 0.3us, radix: 40}   # optional; default radix from presets/fabric.yaml
    switch: {preset: quantum-2-qm9700}    # or a switch preset of presets/fabric.yaml (radix, port speed, kinds)
    oversubscription: 1.0          # leaf uplink capacity divisor (fat_tree and rail_optimized)
    in_network_reduction: false    # switches can reduce (SHARP / CollNet), recorded on switch specs

Which NICs are kept and how they are numbered: :mod:`collsim.topology.nic_placement` (kept NICs keep their names
and are renumbered 0 .. k-1 in template order; NIC ``index`` i is rail i).

Layouts
-------
single_switch
    Every NIC to ``fabric/sw0``.
rail_optimized
    NIC i of every node to leaf ``fabric/rail{i}``; with more than one rail, every leaf joins every spine
    ``fabric/spine{j}`` (``ceil(rails * nodes / radix)`` spines) with full-bisection capacity (divided by
    ``oversubscription``). With ``switch.radix`` given, a leaf serves at most ``radix / 2`` nodes (``radix`` with one
    rail); otherwise a rail leaf is a logical switch of any size.
fat_tree
    NICs, node-major, fill leaves ``fabric/leaf{k}`` with ``radix / 2`` ports each; with several leaves every leaf
    joins every spine (``ceil(NICs / radix)`` spines) with its down-port capacity divided by ``oversubscription``.

A route through a spine is one of several equal-cost paths: the backends spread a crossing between two leaves over
every spine joining them (:func:`collsim.backends.common.fabric_uses`), so the spines together carry a leaf's
uplink capacity.

Fabric links: kind ``ib`` or ``roce`` (the NIC port's preset) for rdma, ``eth`` for tcp (the NIC's Ethernet
preset, or the IPoIB preset of presets/fabric.yaml on an InfiniBand or RoCE NIC). Their raw rate per port is the NIC
speed, capped at the switch preset's ``port_speed`` when ``switch.preset`` names one (a port runs at the slower
end's rate); efficiency and latency come from the port's link preset, ``switch.latency`` replacing the latency
(every fabric link's latency is one hop into or out of a switch). A leaf-spine link aggregates ports (``count``,
the uplink ports after oversubscription); its bandwidth is the capacity described above, so ``count`` is
informative.

Switch presets (``switches`` in presets/fabric.yaml, :func:`switch_presets`) give ``radix`` (ports per switch),
``port_speed`` (per direction, Gb/s are bits) and ``link_kinds`` (the port kinds the switch speaks: ib, roce,
eth). ``switch.radix`` given next to ``switch.preset`` overrides the preset's radix. A switch preset sets no latency:
the per-hop latency stays the link preset's (or ``switch.latency``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx

from collsim.topology.errors import TopologyError, TopologyWarning
from collsim.topology.model import Device, FrozenMap, Link
from collsim.topology.presets import PresetLibrary, dma_ratio, parse_field, parse_record, read_yaml
from collsim.vocab import FABRIC_TOPOLOGIES, FABRIC_TRANSPORTS

__all__ = ["SWITCH_SCHEMA", "add_fabric", "parse_fabric", "switch_presets"]

#: Fields of a switch preset (``switches`` in presets/fabric.yaml): field -> (type, required). ``link_kinds`` is a
#: list of fabric link kinds, checked by :func:`switch_presets`.
SWITCH_SCHEMA: dict[str, tuple[str, bool]] = {
    "model": ("text", True),
    "radix": ("positive_int", True),
    "port_speed": ("bandwidth", True),
    "source": ("text", True),
}
_FABRIC_PORT_KINDS = ("ib", "roce", "eth")

_KEYS = (
    "topology",
    "transport",
    "nic",
    "nic_speed",
    "nics_per_node",
    "nics_per_switch",
    "nics_per_socket",
    "nics",
    "gpudirect",
    "switch",
    "oversubscription",
    "in_network_reduction",
)


def _optional_field(value: Any, ftype: str, key: str) -> Any:
    """``value`` parsed as a preset field of type ``ftype`` (SI units), None when absent; errors name ``key``."""
    if value is None:
        return None
    try:
        return parse_field(ftype, value)
    except ValueError as exc:
        raise _err(str(exc), key) from None


def _err(message: str, key: str) -> TopologyError:
    return TopologyError(message, field=f"fabric.{key}")


def switch_presets(presets: PresetLibrary) -> dict[str, dict[str, Any]]:
    """The switch presets of ``presets/fabric.yaml`` (its ``switches`` mapping; none when absent).

    Parameters
    ----------
    presets : PresetLibrary
        The preset library whose ``fabric.yaml`` to read.

    Returns
    -------
    dict
        Preset name to fields: ``model``, ``radix`` (ports), ``port_speed`` (bytes/s per direction),
        ``link_kinds`` (tuple of ``ib``/``roce``/``eth``), ``source``, ``preset`` (the name) and any
        ``<field>_source``/``notes`` text.

    Raises
    ------
    TopologyError
        A malformed preset, naming fabric.yaml and the field.
    """
    file = presets.files["fabric"]
    data = read_yaml(file)
    raw = data.get("switches") if isinstance(data, Mapping) else None
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise TopologyError("expected a mapping of switch preset name to fields", file=file, field="switches")
    out: dict[str, dict[str, Any]] = {}
    for name, rec in raw.items():
        field = f"switches.{name}"
        body = dict(rec) if isinstance(rec, Mapping) else rec
        kinds = body.pop("link_kinds", None) if isinstance(body, dict) else None
        parsed = parse_record(body, SWITCH_SCHEMA, file, field)
        if not isinstance(kinds, list) or not kinds or any(k not in _FABRIC_PORT_KINDS for k in kinds):
            raise TopologyError(
                f"expected a non-empty list from {', '.join(_FABRIC_PORT_KINDS)}, got {kinds!r}",
                file=file,
                field=f"{field}.link_kinds",
            )
        parsed["link_kinds"] = tuple(str(k) for k in kinds)
        parsed["preset"] = str(name)
        out[str(name)] = parsed
    return out


def parse_fabric(fabric: Mapping[str, Any], presets: PresetLibrary) -> dict[str, Any]:
    """Check a fabric configuration and fill in defaults.

    Parameters
    ----------
    fabric : Mapping
        The configuration (see the module docstring).
    presets : PresetLibrary
        For NIC presets and defaults.

    Returns
    -------
    dict
        Keys as in the module docstring, values in SI (``nic_speed`` bytes/s, ``switch.latency`` seconds or None).
    """
    if not isinstance(fabric, Mapping):
        raise TopologyError(f"expected a mapping with a 'topology' key, got {type(fabric).__name__}", field="fabric")
    for key in fabric:
        if key not in _KEYS:
            raise _err(f"unknown fabric key {key!r}; valid: {', '.join(_KEYS)}", str(key))
    topo = fabric.get("topology")
    if topo not in FABRIC_TOPOLOGIES:
        raise _err(f"unknown fabric topology {topo!r}; valid: {', '.join(FABRIC_TOPOLOGIES)}", "topology")
    transport = fabric.get("transport", "rdma")
    if transport not in FABRIC_TRANSPORTS:
        raise _err(f"unknown transport {transport!r}; valid: {', '.join(FABRIC_TRANSPORTS)}", "transport")
    nic = fabric.get("nic")
    if nic is not None:
        presets.get("nics", nic, None, "fabric.nic")
    nic_speed = _optional_field(fabric.get("nic_speed"), "bandwidth", "nic_speed")
    counts, nics = _parse_nic_choice(fabric)
    flags: dict[str, bool] = {}
    for key, default in (("gpudirect", True), ("in_network_reduction", False)):
        value = fabric.get(key, default)
        if not isinstance(value, bool):
            raise _err(f"expected true or false, got {value!r}", key)
        flags[key] = value
    over = fabric.get("oversubscription", 1.0)
    if isinstance(over, bool) or not isinstance(over, (int, float)) or not over > 0:
        raise _err(
            f"expected a positive number (1 = full bisection, 2 = half the uplinks), got {over!r}", "oversubscription"
        )
    return {
        "topology": topo,
        "transport": transport,
        "nic": nic,
        "nic_speed": nic_speed,
        "nics_per_node": counts["nics_per_node"],
        "nics_per_switch": counts["nics_per_switch"],
        "nics_per_socket": counts["nics_per_socket"],
        "nics": nics,
        "gpudirect": flags["gpudirect"],
        "in_network_reduction": flags["in_network_reduction"],
        "oversubscription": float(over),
        "switch": _parse_switch(fabric.get("switch") or {}, presets),
    }


def _parse_nic_choice(fabric: Mapping[str, Any]) -> tuple[dict[str, int | None], list[str] | None]:
    """The fabric's NIC counts (``nics_per_node``, ``nics_per_switch``, ``nics_per_socket``) and its ``nics`` list,
    checked: positive integers, or a non-empty list of NIC names given instead of any count."""
    counts: dict[str, int | None] = {}
    for key in ("nics_per_node", "nics_per_switch", "nics_per_socket"):
        value = fabric.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise _err(f"expected a positive integer, got {value!r}", key)
        counts[key] = value
    nics = fabric.get("nics")
    if nics is None:
        return counts, None
    if not isinstance(nics, (list, tuple)) or not nics or not all(isinstance(n, str) and n for n in nics):
        raise _err(f"expected a non-empty list of the node template's NIC names (nic0, ...), got {nics!r}", "nics")
    given = [key for key, value in counts.items() if value is not None]
    if given:
        raise _err(f"give either nics (the NIC slots to keep) or {', '.join(given)} (how many), not both", "nics")
    return counts, [str(n) for n in nics]


def _parse_switch(switch: Any, presets: PresetLibrary) -> dict[str, Any]:
    """The fabric's ``switch`` section checked and filled in: latency (seconds or None), radix (given, from the
    switch preset, or fabric.yaml's default) and the preset's port speed and link kinds."""
    if not isinstance(switch, Mapping):
        raise _err("expected a mapping with latency, radix and/or preset", "switch")
    for key in switch:
        if key not in ("latency", "radix", "preset"):
            raise _err(f"unknown switch key {key!r}; valid: latency, radix, preset", f"switch.{key}")
    latency = _optional_field(switch.get("latency"), "time", "switch.latency")
    sw_preset: dict[str, Any] | None = None
    if switch.get("preset") is not None:
        known = switch_presets(presets)
        name = switch["preset"]
        if not isinstance(name, str) or name not in known:
            raise _err(
                f"unknown switch preset {name!r}; known: {', '.join(sorted(known)) or '(none)'} (in fabric.yaml)",
                "switch.preset",
            )
        sw_preset = known[name]
    radix = switch.get("radix")
    radix_given = radix is not None or sw_preset is not None
    if radix is None:
        radix = sw_preset["radix"] if sw_preset is not None else presets.fabric["radix"]
    if isinstance(radix, bool) or not isinstance(radix, int) or radix < 2:
        raise _err(f"expected a number of ports >= 2, got {radix!r}", "switch.radix")
    return {
        "latency": latency,
        "radix": radix,
        "radix_given": radix_given,
        "preset": None if sw_preset is None else sw_preset["preset"],
        "port_speed": None if sw_preset is None else float(sw_preset["port_speed"]),
        "link_kinds": None if sw_preset is None else sw_preset["link_kinds"],
    }


def _port_preset(nic: Device, transport: str, presets: PresetLibrary) -> dict[str, Any]:
    link = presets.links[nic.spec["link"]]
    if transport == "rdma":
        if not nic.spec.get("rdma") or link["kind"] not in ("ib", "roce"):
            raise _err(
                f"NIC {nic.name} ({nic.spec.get('preset')}) cannot do RDMA; use transport: tcp or an RDMA NIC preset",
                "transport",
            )
        return link
    if link["kind"] == "eth":
        return link
    return presets.links[presets.fabric["ipoib_link"]]


class _Builder:
    def __init__(self, g: nx.DiGraph, cfg: Mapping[str, Any], presets: PresetLibrary) -> None:
        self.g = g
        self.cfg = cfg
        self.presets = presets
        self.switches = 0
        self.spines = 0
        self.radix = int(cfg["switch"]["radix"])
        self.over = float(cfg["oversubscription"])

    def speed(self, nic: Device) -> float:
        """Raw rate of ``nic``'s fabric port, bytes/s: the NIC speed, capped at the switch preset's port speed."""
        s = float(nic.spec["speed"])
        cap = self.cfg["switch"].get("port_speed")
        return s if cap is None else min(s, float(cap))

    def switch(self, name: str, tier: str) -> str:
        full = f"fabric/{name}"
        spec = {
            "tier": tier,
            "radix": self.cfg["switch"]["radix"],
            "latency": self.cfg["switch"]["latency"],
            "in_network_reduction": self.cfg["in_network_reduction"],
        }
        self.g.add_node(full, device=Device(full, "switch", -1, self.switches, FrozenMap(spec)))
        self.switches += 1
        self.spines += tier == "spine"
        return full

    def connect(self, a: str, b: str, preset: Mapping[str, Any], port_bw: float, ports: float, count: int) -> None:
        """Join a and b both ways; capacity = port_bw * ports (ports may be fractional after oversubscription)."""
        raw = port_bw * ports
        latency = self.cfg["switch"]["latency"]
        lat = float(preset["latency"]) if latency is None else float(latency)
        for s, d in ((a, b), (b, a)):
            lk = Link(
                src=s,
                dst=d,
                kind=str(preset["kind"]),
                bandwidth=raw * float(preset["efficiency"]),
                raw_bandwidth=raw,
                latency=lat,
                count=count,
                preset=str(preset["preset"]),
                source=str(preset["source"]),
                dma_ratio=dma_ratio(preset),
            )
            self.g.add_edge(s, d, link=lk)


def add_fabric(g: nx.DiGraph, nodes: int, cfg: Mapping[str, Any], presets: PresetLibrary) -> dict[str, Any]:
    """Add the fabric switches and links of ``cfg`` (from :func:`parse_fabric`) to the cluster graph ``g``.

    Returns
    -------
    dict
        The resolved configuration stored as ``Topology.fabric`` (adds ``nics_per_node`` actually used, ``nics``
        the local names of the NICs kept on each node, and the fabric ``link_kind``; ``gpudirect`` is true only
        with rdma).
    """
    per_node: list[list[Device]] = []
    devs = [d["device"] for _, d in g.nodes(data=True)]
    for n in range(nodes):
        per_node.append(sorted((d for d in devs if d.kind == "nic" and d.node == n), key=lambda d: d.index))
    k = len(per_node[0])
    b = _Builder(g, cfg, presets)
    transport = cfg["transport"]
    radix = b.radix
    ports = [(nic, _port_preset(nic, transport, presets)) for nics in per_node for nic in nics]
    kinds = sorted({str(p["kind"]) for _, p in ports})
    topo = cfg["topology"]
    sw_kinds = cfg["switch"].get("link_kinds")
    if sw_kinds is not None and not set(kinds) <= set(sw_kinds):
        raise _err(
            f"switch preset {cfg['switch']['preset']!r} has {', '.join(sw_kinds)} ports; the NICs need "
            f"{', '.join(kinds)}",
            "switch.preset",
        )
    {"single_switch": _single_switch, "rail_optimized": _rails, "fat_tree": _fat_tree}[topo](b, ports, nodes, k)
    if b.over != 1.0 and topo != "single_switch" and not b.spines:
        where = ("every rail's NICs fit one leaf" if topo == "rail_optimized"
                 else f"all {len(ports)} NIC ports fit one leaf of radix {radix}")  # fmt: skip
        warnings.warn(
            f"fabric.oversubscription {b.over:g} has no effect: {where}, so nothing crosses a spine (a smaller "
            "fabric.switch.radix, or more nodes, gives leaves and spines)",
            TopologyWarning,
            stacklevel=2,
        )
    out = dict(cfg)
    out["switch"] = {"latency": cfg["switch"]["latency"], "radix": radix, "radix_given": cfg["switch"]["radix_given"]}
    if cfg["switch"].get("preset") is not None:
        out["switch"]["preset"] = cfg["switch"]["preset"]
        out["switch"]["port_speed"] = cfg["switch"]["port_speed"]
    out["nics_per_node"] = k
    out["nics"] = tuple(nic.local_name for nic in per_node[0])
    out["gpudirect"] = bool(cfg["gpudirect"]) and transport == "rdma"
    out["link_kind"] = kinds[0] if len(kinds) == 1 else kinds
    return out


_Ports = Sequence[tuple[Device, Mapping[str, Any]]]


def _single_switch(b: _Builder, ports: _Ports, nodes: int, k: int) -> None:
    """Every NIC port on ``fabric/sw0``."""
    if b.cfg["switch"]["radix_given"] and len(ports) > b.radix:
        raise _err(f"{len(ports)} NIC ports do not fit one switch of radix {b.radix}", "switch.radix")
    sw = b.switch("sw0", "single")
    for nic, preset in ports:
        b.connect(nic.name, sw, preset, b.speed(nic), 1, 1)


def _rails(b: _Builder, ports: _Ports, nodes: int, k: int) -> None:
    """NIC i of every node on rail leaf i; with several rails, every leaf joins every spine with its nodes' ports'
    capacity, divided by the oversubscription."""
    limit = b.radix // 2 if k > 1 else b.radix
    if b.cfg["switch"]["radix_given"] and nodes > limit:
        raise _err(
            f"rail_optimized with radix {b.radix} serves at most {limit} nodes per rail leaf; got {nodes} "
            "(set fabric.switch.radix)",
            "switch.radix",
        )
    rails = [b.switch(f"rail{i}", "leaf") for i in range(k)]
    for nic, preset in ports:
        b.connect(nic.name, rails[nic.index], preset, b.speed(nic), 1, 1)
    if k > 1:
        n_spines = max(1, math.ceil(k * nodes / b.radix))
        spines = [b.switch(f"spine{j}", "spine") for j in range(n_spines)]
        for i, leaf in enumerate(rails):
            nic0, preset = ports[i]
            share = nodes / n_spines / b.over
            for sp in spines:
                b.connect(leaf, sp, preset, b.speed(nic0), share, max(1, math.ceil(share)))


def _fat_tree(b: _Builder, ports: _Ports, nodes: int, k: int) -> None:
    """NICs, node-major, fill leaves of radix / 2 ports; with several leaves every leaf joins every spine with its
    ports' capacity, divided by the oversubscription."""
    down = b.radix // 2
    if len(ports) > b.radix * down:
        raise _err(
            f"{len(ports)} NIC ports need more than two tiers with radix {b.radix} (at most {b.radix * down})",
            "switch.radix",
        )
    groups = [ports[i : i + down] for i in range(0, len(ports), down)]
    leaves = [b.switch(f"leaf{i}", "leaf") for i in range(len(groups))]
    for leaf, group in zip(leaves, groups, strict=False):
        for nic, preset in group:
            b.connect(nic.name, leaf, preset, b.speed(nic), 1, 1)
    if len(leaves) > 1:
        n_spines = max(1, math.ceil(len(ports) / b.radix))
        spines = [b.switch(f"spine{j}", "spine") for j in range(n_spines)]
        for leaf, group in zip(leaves, groups, strict=False):
            # the leaf's down ports' capacity (NICs of different speeds: their sum, not the first one's rate
            # times their count), spread over the spines and divided by the oversubscription
            rates = [b.speed(nic) for nic, _ in group]
            mean = rates[0] if len(set(rates)) == 1 else sum(rates) / len(rates)
            share = len(group) / n_spines
            for sp in spines:
                b.connect(leaf, sp, group[0][1], mean, share / b.over, max(1, math.ceil(share / b.over)))

