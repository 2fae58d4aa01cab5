"""Sub-communicators running at once on one cluster: where they meet.

HSDP's replica groups (and any set of communicators alike on every node) run the same collective at the same time.
What one of them uses on its first node, it uses on each of its nodes; what they cross together they share
(:meth:`collsim.topology.Topology.shared`). These helpers carry a node's resources to the other nodes and find the
fabric links the groups cross together.

Examples
--------
>>> from collsim.topology import load_topology
>>> topo = load_topology("hgx-h100", nodes=2, fabric={"topology": "rail_optimized"})
>>> counterparts(topo, "n0/nic2", "fabric/rail2", 1)
[('n1/nic2', 'fabric/rail2')]
>>> sorted(leaves_crossed(topo, ["nic2"]))  # one rail: the traffic turns at its leaf
[]
"""

from __future__ import annotations

from collections.abc import Collection

from collsim.topology.model import Topology

__all__ = ["counterparts", "leaves_crossed", "node_name", "uplinks"]


def node_name(name: str, node: int) -> str:
    """Node 0's device ``name`` on ``node``; a fabric device's name unchanged.

    Examples
    --------
    >>> node_name("n0/cpu1", 3), node_name("fabric/spine0", 3)
    ('n3/cpu1', 'fabric/spine0')
    """
    return f"n{node}/{name[3:]}" if name.startswith("n0/") else name


def counterparts(topo: Topology, src: str, dst: str, node: int) -> list[tuple[str, str]]:
    """Node 0's directed link ``src -> dst`` on ``node``: the link between the node's devices of the same names,
    or, for a link between a device and the fabric, every link of the node's device to (or from) the fabric (the
    node may hang off another leaf). Empty where the node has no such device.

    Examples
    --------
    >>> from collsim.topology import load_topology
    >>> tree = load_topology("hgx-h100", nodes=2, fabric={"topology": "fat_tree", "switch": {"radix": 16}})
    >>> counterparts(tree, "n0/nic0", "fabric/leaf0", 1)  # node 1 hangs off leaf 1
    [('n1/nic0', 'fabric/leaf1')]
    """
    a, b = node_name(src, node), node_name(dst, node)
    g = topo.graph
    if g.has_edge(a, b):
        return [(a, b)]
    if b != dst and b in g:  # fabric -> node device
        return [(u, b) for u in g.predecessors(b) if topo.device(u).node < 0]
    if a != src and a in g:  # node device -> fabric
        return [(a, v) for v in g.successors(a) if topo.device(v).node < 0]
    return []


def leaves_crossed(topo: Topology, nics: Collection[str], nodes: Collection[int] | None = None) -> set[str]:
    """The fabric switches whose links up to the spines carry a communicator's traffic between nodes, when its
    channels run between the same NIC slots (local names, ``"nic2"``) of each of its ``nodes`` (default every
    node), as NCCL's graph, the same on every node, has them, and Gloo's socket on each node's first NIC: for each
    slot whose NICs hang off two or more switches, those switches (on one switch the traffic turns there and
    reaches no spine).

    Examples
    --------
    >>> from collsim.topology import load_topology
    >>> tree = load_topology("hgx-h100", nodes=2, fabric={"topology": "fat_tree", "switch": {"radix": 16}})
    >>> sorted(leaves_crossed(tree, ["nic0"]))
    ['fabric/leaf0', 'fabric/leaf1']
    >>> sorted(leaves_crossed(tree, ["nic0"], nodes=[1]))  # one node: one leaf
    []
    """
    crossed: set[str] = set()
    for nic in nics:
        leaves = {
            w
            for node in (range(topo.nodes) if nodes is None else nodes)
            if f"n{node}/{nic}" in topo.graph
            for w in topo.graph.successors(f"n{node}/{nic}")
            if topo.device(w).node < 0
        }
        if len(leaves) > 1:
            crossed |= leaves
    return crossed


def uplinks(topo: Topology, leaf: str) -> list[tuple[str, str]]:
    """A fabric switch's links to the switches it joins and back, both directions.

    Examples
    --------
    >>> from collsim.topology import load_topology
    >>> tree = load_topology("hgx-h100", nodes=2, fabric={"topology": "fat_tree", "switch": {"radix": 16}})
    >>> uplinks(tree, "fabric/leaf0")
    [('fabric/leaf0', 'fabric/spine0'), ('fabric/spine0', 'fabric/leaf0')]
    """
    g = topo.graph
    above = [s for s in g.successors(leaf) if topo.device(s).node < 0]
    return [(leaf, s) for s in above] + [(s, leaf) for s in above if g.has_edge(s, leaf)]
