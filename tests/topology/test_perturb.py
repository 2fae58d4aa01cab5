"""Perturbed topologies (issue 13): slower links by device glob, kind and a seeded draw."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.topology import LinkRule, TopologyError, load_topology, perturb_links
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
        ("n0/nic5", "fabric/rail5"), ("fabric/rail5", "n0/nic5"), ("n0/nic5", "n0/pcie2"), ("n0/pcie2", "n0/nic5")
    }
    rails = perturb_links(topo, [LinkRule("fabric/rail*", 0.5)])
    changed = [ln for ln in rails.links() if ln != topo.link(ln.src, ln.dst)]
    # the 16 NIC ports and the 8 rail-spine uplinks, both ways
    assert sum("/nic" in ln.src + ln.dst for ln in changed) == 2 * 16
    assert sum("spine" in ln.src + ln.dst for ln in changed) == 2 * 8 and len(changed) == 48


def test_two_rules_on_one_link_multiply(topo) -> None:  # type: ignore[no-untyped-def]
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


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), choose=st.integers(1, 16))
def test_seeded_draw_is_deterministic_and_picks_that_many(seed: int, choose: int) -> None:
    topo = load_topology("hgx-h100", nodes=2, fabric=FABRIC)
    rule = LinkRule("n*/nic*", 0.5, kind="ib", choose=choose, seed=seed)
    picked = matching_devices(topo, rule)
    assert picked == matching_devices(topo, rule) and len(picked) == choose and len(set(picked)) == choose
    slow = perturb_links(topo, [rule])
    assert sum(ln != topo.link(ln.src, ln.dst) for ln in slow.links()) == 2 * choose
