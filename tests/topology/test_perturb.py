"""Perturbed topologies (issue 13): slower links by device glob, kind and a seeded draw."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.topology import LinkRule, TopologyError, load_topology, perturb_links
from collsim.topology.errors import TopologyWarning
from collsim.topology.perturb import matching_devices

FABRIC = {"topology": "rail_optimized"}


@pytest.fixture(scope="module")
def topo():  # type: ignore[no-untyped-def]
    return load_topology("hgx-h100", nodes=2, fabric=FABRIC)


def test_scale_applies_to_both_directions_of_the_matched_links_only(topo) -> None:  # type: ignore[no-untyped-def]
    slow = perturb_links(topo, [LinkRule("n1/nic2", 0.25, kind="ib")])
    changed = {(ln.src, ln.dst) for ln in slow.links() if ln != topo.link(ln.src, ln.dst)}
    assert changed == {("n1/nic2", "fabric/rail2"), ("fabric/rail2", "n1/nic2")}
    for a, b in changed:
        assert slow.link(a, b).bandwidth == topo.link(a, b).bandwidth * 0.25
        assert slow.link(a, b).raw_bandwidth == topo.link(a, b).raw_bandwidth  # the port's rate is what degraded
    assert topo.link("n1/nic2", "fabric/rail2").bandwidth == 50e9 * topo.link("n1/nic2", "fabric/rail2").efficiency


def test_without_kind_every_link_of_the_device_and_globs_on_the_fabric(topo) -> None:  # type: ignore[no-untyped-def]
    nic = perturb_links(topo, [LinkRule("n0/nic5", 0.5)])
    assert {(ln.src, ln.dst) for ln in nic.links() if ln != topo.link(ln.src, ln.dst)} == {
        ("n0/nic5", "fabric/rail5"),
        ("fabric/rail5", "n0/nic5"),
        ("n0/nic5", "n0/pcie2"),
        ("n0/pcie2", "n0/nic5"),
    }
    pcie = nic.link("n0/nic5", "n0/pcie2")
    assert pcie.dma_ratio == topo.link("n0/nic5", "n0/pcie2").dma_ratio > 1  # a slowed link's copies slow alike
    rails = perturb_links(topo, [LinkRule("fabric/rail*", 0.5)])
    changed = [ln for ln in rails.links() if ln != topo.link(ln.src, ln.dst)]
    # the 16 NIC ports and the 8 rail-spine uplinks, both ways
    assert sum("/nic" in ln.src + ln.dst for ln in changed) == 2 * 16
    assert sum("spine" in ln.src + ln.dst for ln in changed) == 2 * 8 and len(changed) == 48


def test_two_rules_on_one_link_multiply(topo) -> None:  # type: ignore[no-untyped-def]
    with pytest.warns(TopologyWarning, match=r"perturb.links\[1\] scales 2 link\(s\) perturb.links\[0\] scaled too: "
                      r"the scales multiply \(x0.5 x0.5 = x0.25\)"):  # fmt: skip
        slow = perturb_links(topo, [LinkRule("n0/nic0", 0.5, kind="ib"), LinkRule("fabric/rail0", 0.5)])
    assert slow.link("n0/nic0", "fabric/rail0").bandwidth == topo.link("n0/nic0", "fabric/rail0").bandwidth * 0.25
    assert slow.link("n1/nic0", "fabric/rail0").bandwidth == topo.link("n1/nic0", "fabric/rail0").bandwidth * 0.5


def test_bad_rules_name_the_field(topo) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TopologyError) as info:
        perturb_links(topo, [LinkRule("n0/nic0", 0.5), LinkRule("n7/nic0", 0.5)])
    assert info.value.field == "perturb.links[1].device" and "n7/nic0" in str(info.value)
    with pytest.raises(TopologyError) as info:
        perturb_links(topo, [LinkRule("n0/gpu0", 0.5, kind="ib")])  # a GPU has no InfiniBand link
    assert info.value.field == "perturb.links[0].device"
    with pytest.raises(TopologyError) as info:
        perturb_links(topo, [LinkRule("n0/nic0", 0.0)])
    assert info.value.field == "perturb.links[0].scale"
    # a NIC left out of the cluster built (here fabric.nics) is named as such, not only as unmatched
    four = load_topology("hgx-h100", nodes=2, fabric={"topology": "rail_optimized", "nics": ["nic0", "nic2"]})
    with pytest.raises(TopologyError, match=r"a NIC that fabric.nics, fabric.nics_per_node or NCCL_IB_HCA leaves out"):
        perturb_links(four, [LinkRule("n1/nic3", 0.5)])
    with pytest.raises(TopologyError) as info:
        perturb_links(four, [LinkRule("n1/gpu0", 0.5, kind="ib")])
    assert "leaves out" not in str(info.value)  # a GPU that exists, without such a link: no NIC hint


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), choose=st.integers(1, 16))
def test_seeded_draw_is_deterministic_and_picks_that_many(seed: int, choose: int) -> None:
    topo = load_topology("hgx-h100", nodes=2, fabric=FABRIC)
    rule = LinkRule("n*/nic*", 0.5, kind="ib", choose=choose, seed=seed)
    picked = matching_devices(topo, rule)
    assert picked == matching_devices(topo, rule) and len(picked) == choose and len(set(picked)) == choose
    slow = perturb_links(topo, [rule])
    assert sum(ln != topo.link(ln.src, ln.dst) for ln in slow.links()) == 2 * choose


# ---------------------------------------------------------------------------------------------- down (issue 13)
def test_a_nic_down_is_removed_and_its_channels_go_to_the_nearest_nic_left(topo) -> None:  # type: ignore[no-untyped-def]
    from collsim.topology import DownRule, take_down

    down = take_down(topo, [DownRule("n1/nic2")])
    assert "n1/nic2" not in down.graph and "n1/nic2" in topo.graph  # a copy: the healthy topology is untouched
    assert not any("n1/nic2" in (ln.src, ln.dst) for ln in down.links())
    # nic2 and nic3 share GPU2's PCIe switch on an HGX H100: nic3 is the nearest NIC left to GPU2
    assert down.nic_slots(1) == [f"n1/nic{i}" for i in (0, 1, 3, 3, 4, 5, 6, 7)]
    assert down.nic_slots(0) == [d.name for d in topo.nics(0)] == topo.nic_slots(0)
    assert down.nic_substitutes["n1/nic2"][1] == "n1/nic3"


def test_perturbed_links_are_the_slowed_ones_and_those_of_a_nic_standing_in(topo) -> None:  # type: ignore[no-untyped-def]
    from collsim.topology import DownRule, take_down

    assert topo.perturbed_links() == frozenset()
    slow = perturb_links(topo, [LinkRule("n1/nic2", 0.5, kind="ib")])
    assert slow.perturbed_links() == {("n1/nic2", "fabric/rail2"), ("fabric/rail2", "n1/nic2")}
    down = take_down(topo, [DownRule("n1/nic2")])
    nic3 = {(a, b) for a, b in down.graph.edges if "n1/nic3" in (a, b)}
    assert down.perturbed_links() == nic3 and ("n1/nic3", "fabric/rail3") in nic3
    # a slowed link that goes down with its NIC is no longer listed
    both = take_down(slow, [DownRule("n1/nic2")])
    assert both.perturbed_links() == nic3


def test_a_port_down_through_peer_takes_its_nic_down(topo) -> None:  # type: ignore[no-untyped-def]
    from collsim.topology import DownRule, take_down

    down = take_down(topo, [DownRule("fabric/rail5", peer="n0/nic5")])
    assert "n0/nic5" not in down.graph and "fabric/rail5" in down.graph and down.nic_slots(0)[5] == "n0/nic4"


def test_a_rail_switch_down_takes_its_nics_down_as_their_ports_would(topo) -> None:  # type: ignore[no-untyped-def]
    """With its switch gone no NIC on it has an ACTIVE port: the same cluster as the rail's ports down through
    peer (it was refused as partitioned, the NICs kept with no fabric link)."""
    from collsim.topology import DownRule, take_down

    switch = take_down(topo, [DownRule("fabric/rail2")])
    ports = take_down(topo, [DownRule("fabric/rail2", peer="n*/nic2")])
    for down in (switch, ports):
        assert "n0/nic2" not in down.graph and "n1/nic2" not in down.graph
        assert down.nic_slots(0) == ports.nic_slots(0) and down.nic_slots(1) == ports.nic_slots(1)
    assert "fabric/rail2" not in switch.graph


def test_a_spine_link_down_routes_over_another_spine() -> None:
    from collsim.topology import DownRule, take_down

    topo = load_topology("hgx-h100", nodes=2, fabric={"topology": "rail_optimized", "switch": {"radix": 4}})
    assert [ln.dst for ln in topo.route("n0/nic3", "n1/nic2")][1] == "fabric/spine0"
    down = take_down(topo, [DownRule("fabric/rail3", peer="fabric/spine0")])
    assert not down.graph.has_edge("fabric/rail3", "fabric/spine0")
    assert not down.graph.has_edge("fabric/spine0", "fabric/rail3")
    assert [ln.dst for ln in down.route("n0/nic3", "n1/nic2")][1] == "fabric/spine1"


def test_what_cannot_go_down_names_the_rule(topo) -> None:  # type: ignore[no-untyped-def]
    from collsim.topology import DownRule, take_down

    cases = [
        ([DownRule("n1/nic*")], "perturb.down[0].device", "leaves node n1 with no NIC"),
        ([DownRule("n0/gpu1")], "perturb.down[0].device", "not modelled"),
        ([DownRule("n0/nic2", peer="n0/pcie*")], "perturb.down[0].peer", "not modelled"),
        ([DownRule("n9/nic1")], "perturb.down[0].device", "no device matching 'n9/nic1' has a link (the cluster has "
         "nodes n0-n1)"),  # it blamed fabric.nics and NCCL_IB_HCA
        # one spine only: without it the rails are islands, and nic2's channels would cross from rail 2 to rail 3
        ([DownRule("fabric/spine0"), DownRule("n1/nic2")], "perturb.down[1].device", "partitioned"),
    ]
    for rules, field, text in cases:
        with pytest.raises(TopologyError) as info:
            take_down(topo, rules)
        assert info.value.field == field and text in info.value.message
    assert take_down(topo, [DownRule("fabric/spine0")]).nic_slots(1) == topo.nic_slots(1)  # rails aligned: fine


# ---------------------------------------------------------------------------------------------- background
def test_background_streams_per_matched_link_direction(topo) -> None:  # type: ignore[no-untyped-def]
    from collsim.topology import BackgroundRule, add_background

    bg = add_background(
        topo, [BackgroundRule("fabric/spine*", load=0.5), BackgroundRule("n1/nic2", rate=1e9, kind="ib")]
    )
    spine = [(s, d, r) for s, d, r in bg.background if "spine" in s + d]
    assert len(spine) == 16 and all(r == 0.5 * topo.link(s, d).bandwidth for s, d, r in spine)
    assert [x for x in bg.background if "nic2" in x[0] + x[1]] == [
        ("fabric/rail2", "n1/nic2", 1e9),
        ("n1/nic2", "fabric/rail2", 1e9),
    ]
    assert add_background(topo, [BackgroundRule("fabric/spine*", load=0.0)]) is topo  # zero load: nothing at all
    for rule, field in [
        (BackgroundRule("fabric/spine*"), "perturb.background[0]"),
        (BackgroundRule("fabric/spine*", load=2.0), "perturb.background[0].load"),
        (BackgroundRule("fabric/nothing", load=0.5), "perturb.background[0].device"),
    ]:
        with pytest.raises(TopologyError) as info:
            add_background(topo, [rule])
        assert info.value.field == field


def test_the_scenario_names_its_file_in_the_perturb_warning() -> None:
    # the warning reaches the user as the scenario's (file and perturb. field), as the template's warnings do
    from collsim.api import Simulator
    from collsim.scenario import ScenarioWarning

    rule = "{device: n1/nic2, kind: ib, scale: 0.5}"
    with pytest.warns(ScenarioWarning, match=r"2node-h100-ib.yaml: perturb.links\[1\] scales 2 link\(s\) links\[0\]"):
        Simulator.from_source("2node-h100-ib", [f"perturb.links=[{rule}, {rule}]"])
