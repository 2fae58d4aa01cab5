"""Which NICs of a node template a cluster uses when it uses fewer than all (issue 16, "NIC placement").

A node template lists NIC slots (``nic0 .. nic7`` on a DGX A100). A fabric that uses fewer of them
(``fabric.nics_per_node``, ``nics_per_switch``, ``nics_per_socket``) keeps them in the template's *population
order*; ``fabric.nics`` names the slots to keep instead.

Population order
----------------
The template key ``nic_population`` says in which order its NIC slots are filled:

``spread`` (the default when a template says nothing)
    One NIC per PCIe switch first, the switches of the CPU sockets taken in turn, then the second NIC of each
    switch in the same order, and so on. Exactly: NICs sorted by the key
    ``(rank of the NIC on its switch, rank of its switch on its socket, socket index, NIC index)``, where a NIC's
    *switch* is the PCIe switch it hangs off (a NIC directly on a CPU root port is a switch of its own), ranks
    count from 0 in template index order (a switch's rank by its lowest NIC index), and the socket is the CPU
    whose PCIe tree holds the NIC (-1 when none does). On a DGX A100 (switch i holds nic2i, nic2i+1; switches 0-1
    on socket 0): nic0, nic4, nic2, nic6, nic1, nic5, nic3, nic7, so 2 NICs are one per socket and 4 are one per
    switch. This is collsim's rule, not a vendor's: it keeps every GPU of a switch next to a NIC as long as there
    are NICs for every switch.
``index``
    Template order: nic0, nic1, ... (collsim's behaviour before the population order existed).
a list of NIC names (ranges such as ``nic[0-3]`` allowed)
    Those first, in that order; NICs the list leaves out follow in the spread order.

Kept NICs
---------
The kept NICs keep their template names (``n3/nic4`` stays ``n3/nic4``, so perturbation globs and
``fabric.nics`` name the same slot), and are renumbered ``Device.index`` 0 .. k-1 in template order, as an OS
enumerates the NICs it has: that index is the NIC's position in :meth:`~collsim.topology.Topology.nic_slots`
(NCCL's channel ``c`` uses slot ``c mod k``), its rail on a ``rail_optimized`` fabric (``fabric/rail{index}``)
and the ``NIC{index}`` label of ``collsim topo``. The population order decides *which* NICs are kept, never
their numbering.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collsim.topology.errors import TopologyError
from collsim.topology.layout import NodeLayout
from collsim.topology.names import expand_names

__all__ = ["NIC_POPULATION_RULES", "NicSlot", "nic_slots_of", "population_order", "select_nics"]

#: Named population rules a template's ``nic_population`` may give (or a list of NIC names).
NIC_POPULATION_RULES = ("spread", "index")


@dataclass(frozen=True)
class NicSlot:
    """Where one NIC slot of a node template sits.

    Attributes
    ----------
    name : str
        The NIC's local name (``nic2``).
    index : int
        Its index in the template (0-based, among the template's NICs).
    switch : str
        The PCIe switch it hangs off (local name), or its own name when it sits on a CPU root port directly.
    socket : int
        The index of the CPU socket whose PCIe tree holds it; -1 when no CPU does.
    """

    name: str
    index: int
    switch: str
    socket: int


def nic_slots_of(layout: NodeLayout) -> list[NicSlot]:
    """The NIC slots of a node layout with their PCIe switch and CPU socket, in template index order.

    Parameters
    ----------
    layout : NodeLayout
        One node's devices and links (local names).

    Returns
    -------
    list[NicSlot]
        One per NIC, sorted by template index.
    """
    kinds = {name: dev.kind for name, dev in layout.devices.items()}
    adj: dict[str, list[str]] = {name: [] for name in layout.devices}
    for (a, b), lk in layout.links.items():
        if lk.kind == "pcie":
            adj[a].append(b)
            adj[b].append(a)
    for near in adj.values():
        near.sort(key=lambda n: (layout.devices[n].index, n))
    out: list[NicSlot] = []
    nics = sorted((d for d in layout.devices.values() if d.kind == "nic"), key=lambda d: d.index)
    for dev in nics:
        name = dev.local_name
        switches = [n for n in adj[name] if kinds[n] == "pcie_switch"]
        out.append(NicSlot(name, dev.index, switches[0] if switches else name, _socket_of(name, adj, layout)))
    return out


def _socket_of(nic: str, adj: Mapping[str, list[str]], layout: NodeLayout) -> int:
    """Index of the nearest CPU over PCIe from ``nic`` (breadth first, never through a GPU or NIC), -1 if none."""
    seen = {nic}
    frontier = [nic]
    while frontier:
        cpus = [n for n in frontier if layout.devices[n].kind == "cpu"]
        if cpus:
            return min(layout.devices[n].index for n in cpus)
        nxt: list[str] = []
        for u in frontier:
            if u != nic and layout.devices[u].kind in ("gpu", "nic"):
                continue
            for v in adj[u]:
                if v not in seen:
                    seen.add(v)
                    nxt.append(v)
        frontier = nxt
    return -1


def _spread(slots: Sequence[NicSlot]) -> list[NicSlot]:
    """``slots`` in the spread order (module docstring)."""
    by_switch: dict[str, list[NicSlot]] = {}
    for s in slots:
        by_switch.setdefault(s.switch, []).append(s)
    rank_on_switch = {s.name: i for members in by_switch.values() for i, s in enumerate(members)}
    switch_first = {sw: min(s.index for s in members) for sw, members in by_switch.items()}
    per_socket: dict[int, list[str]] = {}
    for sw in sorted(by_switch, key=lambda sw: switch_first[sw]):
        per_socket.setdefault(by_switch[sw][0].socket, []).append(sw)
    rank_on_socket = {sw: i for sws in per_socket.values() for i, sw in enumerate(sws)}
    return sorted(slots, key=lambda s: (rank_on_switch[s.name], rank_on_socket[s.switch], s.socket, s.index))


def population_order(
    slots: Sequence[NicSlot], declared: Any, file: str | Path | None = None
) -> list[NicSlot]:
    """The order in which a template's NIC slots are populated.

    Parameters
    ----------
    slots : Sequence[NicSlot]
        The template's NICs (:func:`nic_slots_of`).
    declared : Any
        The template's ``nic_population``: None or ``"spread"``, ``"index"``, or a list of NIC names.
    file : str or Path, optional
        The template file, for messages.

    Returns
    -------
    list[NicSlot]
        Every slot once, the first to keep first.

    Raises
    ------
    TopologyError
        An unknown rule or NIC name, or a NIC listed twice (field ``nic_population``).
    """
    field = "nic_population"
    if declared is None or declared == "spread":
        return _spread(slots)
    if declared == "index":
        return list(slots)
    if not isinstance(declared, list) or not declared:
        raise TopologyError(
            f"expected {' or '.join(NIC_POPULATION_RULES)} or a non-empty list of NIC names, got {declared!r}",
            file=file,
            field=field,
        )
    first = _named(slots, expand_names(declared, file, field), file, field)
    return first + [s for s in _spread(slots) if s not in first]


def _named(slots: Sequence[NicSlot], names: Sequence[str], file: str | Path | None, field: str) -> list[NicSlot]:
    """The slots called ``names``, in that order; an unknown or repeated name is an error naming ``field``."""
    by_name = {s.name: s for s in slots}
    out: list[NicSlot] = []
    for i, name in enumerate(names):
        if name not in by_name:
            raise TopologyError(
                f"unknown NIC {name!r}; the node template's NICs: {', '.join(by_name) or '(none)'}",
                file=file,
                field=field,
            )
        if by_name[name] in out:
            raise TopologyError(f"NIC {name!r} is listed twice (entry {i})", file=file, field=field)
        out.append(by_name[name])
    return out


def select_nics(order: Sequence[NicSlot], cfg: Mapping[str, Any]) -> list[NicSlot]:
    """The NIC slots a fabric configuration keeps on each node.

    Parameters
    ----------
    order : Sequence[NicSlot]
        The template's population order (:func:`population_order`).
    cfg : Mapping
        The parsed fabric (:func:`collsim.topology.fabric.parse_fabric`): ``nics`` (names to keep, or None),
        ``nics_per_switch``, ``nics_per_socket`` (caps, or None) and ``nics_per_node`` (count, or None).

    Returns
    -------
    list[NicSlot]
        The kept slots in template index order.

    Raises
    ------
    TopologyError
        Naming ``fabric.nics`` (an unknown NIC: the message lists the template's) or ``fabric.nics_per_node``
        (more NICs than the node, or than the per-switch and per-socket caps leave).
    """
    if cfg.get("nics") is not None:
        names = expand_names(cfg["nics"], None, "fabric.nics")
        kept = _named(sorted(order, key=lambda s: s.index), names, None, "fabric.nics")
        return sorted(kept, key=lambda s: s.index)
    per_switch, per_socket, k = cfg.get("nics_per_switch"), cfg.get("nics_per_socket"), cfg.get("nics_per_node")
    if k is not None and k > len(order):
        raise TopologyError(
            f"the node has {len(order)} NICs; nics_per_node {k} is too many", field="fabric.nics_per_node"
        )
    on_switch: dict[str, int] = {}
    on_socket: dict[int, int] = {}
    kept = []
    for s in order:
        if per_switch is not None and on_switch.get(s.switch, 0) >= per_switch:
            continue
        if per_socket is not None and on_socket.get(s.socket, 0) >= per_socket:
            continue
        on_switch[s.switch] = on_switch.get(s.switch, 0) + 1
        on_socket[s.socket] = on_socket.get(s.socket, 0) + 1
        kept.append(s)
    if k is not None:
        if k > len(kept):
            caps = " and ".join(
                f"{name} {v}" for name, v in (("nics_per_switch", per_switch), ("nics_per_socket", per_socket)) if v
            )
            raise TopologyError(
                f"with {caps}, {len(kept)} of the node's {len(order)} NICs are left; nics_per_node {k} is too many",
                field="fabric.nics_per_node",
            )
        kept = kept[:k]
    return sorted(kept, key=lambda s: s.index)
