"""Where communicators running at once on one cluster meet (:mod:`collsim.topology.groups`)."""

from __future__ import annotations

from collsim.topology import load_topology
from collsim.topology.groups import counterparts, leaves_crossed, node_name, uplinks

RAILS = {"topology": "rail_optimized", "transport": "rdma"}


def test_a_node_devices_link_is_the_same_link_on_every_node() -> None:
    topo = load_topology("hgx-h100", nodes=3, fabric=RAILS)
    assert [counterparts(topo, "n0/pcie1", "n0/nic2", n) for n in range(3)] == [
        [(f"n{n}/pcie1", f"n{n}/nic2")] for n in range(3)
    ]
    assert counterparts(topo, "fabric/rail2", "n0/nic2", 2) == [("fabric/rail2", "n2/nic2")]
    assert counterparts(topo, "n0/nic2", "n0/pcie1", 5) == []  # no node 5
    assert node_name("n0/nic2", 12) == "n12/nic2"


def test_a_slot_over_several_leaves_crosses_the_spines_and_one_leaf_does_not() -> None:
    """A fat tree of 16-port leaves holds one node's 8 NICs a leaf: NIC slot 2 of four nodes hangs off four leaves,
    joined by the spines. On rails a slot is one leaf."""
    tree = load_topology("hgx-h100", nodes=4, fabric={"topology": "fat_tree", "switch": {"radix": 16}})
    crossed = leaves_crossed(tree, ["nic2"])
    assert crossed == {f"fabric/leaf{i}" for i in range(4)}
    whole = load_topology("hgx-h100", nodes=4, fabric=RAILS)
    assert leaves_crossed(whole, ["nic2", "nic3"]) == set()
    for leaf in crossed:
        ups = uplinks(tree, leaf)
        assert ups and all(leaf in pair for pair in ups)
        assert {(b, a) for a, b in ups} == set(ups)  # both directions
        assert all(tree.graph.has_edge(a, b) and tree.device(a).node < 0 and tree.device(b).node < 0 for a, b in ups)
