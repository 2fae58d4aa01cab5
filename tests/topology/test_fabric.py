"""Cluster fabrics: layouts, transports, overrides and errors."""

from __future__ import annotations

from typing import Any

import pytest

from collsim.topology import TopologyError, load_topology


def _names(route: list[Any]) -> list[str]:
    return [route[0].src] + [lk.dst for lk in route]


def test_rail_optimized_two_nodes() -> None:
    topo = load_topology("dgx-a100", nodes=2, fabric={"topology": "rail_optimized"})
    assert topo.nodes == 2 and len(topo.gpus()) == 16
    assert [g.name for g in topo.gpus()][7:9] == ["n0/gpu7", "n1/gpu0"]
    route = topo.route("n0/nic3", "n1/nic3")
    assert _names(route) == ["n0/nic3", "fabric/rail3", "n1/nic3"]
    assert [lk.kind for lk in route] == ["ib", "ib"]
    assert route[0].raw_bandwidth == 25e9 and route[0].bandwidth == pytest.approx(24e9)
    # Across rails: leaf, spine, leaf.
    assert _names(topo.route("n0/nic0", "n1/nic5")) == [
        "n0/nic0",
        "fabric/rail0",
        "fabric/spine0",
        "fabric/rail5",
        "n1/nic5",
    ]
    up = topo.link("fabric/rail0", "fabric/spine0")
    assert up.count == 2 and up.raw_bandwidth == pytest.approx(2 * 25e9)  # full bisection: 2 nodes per rail
    assert topo.path_type("n0/gpu0", "n1/gpu0") == "NET"
    assert topo.device("fabric/rail3").node == -1 and topo.device("fabric/rail3").kind == "switch"
    assert topo.fabric is not None and topo.fabric["gpudirect"] is True and topo.fabric["link_kind"] == "ib"
    assert [n.name for n in topo.nics(1)][:2] == ["n1/nic0", "n1/nic1"]
    with pytest.raises(TopologyError, match="no route from 'n0/gpu0' to 'n1/gpu0'"):
        topo.route("n0/gpu0", "n1/gpu0")  # never through a NIC: backends join gpu->nic, nic->nic, nic->gpu


def test_single_switch_tcp_override() -> None:
    topo = load_topology(
        "hgx-h100",
        nodes=3,
        fabric={"topology": "single_switch", "transport": "tcp", "nic": "eth-100g", "nics_per_node": 2},
    )
    assert [n.local_name for n in topo.nics(2)] == ["nic0", "nic1"]
    assert topo.device("n2/nic1").spec["preset"] == "eth-100g"
    lk = topo.link("n1/nic1", "fabric/sw0")
    assert (lk.kind, lk.preset, lk.raw_bandwidth) == ("eth", "eth-100g", 12.5e9)
    assert topo.fabric is not None and topo.fabric["gpudirect"] is False and topo.fabric["nics_per_node"] == 2
    assert topo.nearest_nic("n0/gpu7") == topo.device("n0/nic0")  # the unused NICs are gone
    assert len(topo.devices("switch")) == 1


def test_tcp_over_infiniband_uses_ipoib() -> None:
    topo = load_topology("dgx-a100", nodes=2, fabric={"topology": "single_switch", "transport": "tcp"})
    lk = topo.link("n0/nic0", "fabric/sw0")
    assert (lk.kind, lk.preset, lk.raw_bandwidth) == ("eth", "ipoib", 25e9)


def test_nic_speed_and_switch_latency() -> None:
    topo = load_topology(
        "dgx-a100",
        nodes=2,
        fabric={"topology": "single_switch", "nic_speed": "100Gb/s", "switch": {"latency": "1us"}},
    )
    lk = topo.link("fabric/sw0", "n1/nic2")
    assert lk.raw_bandwidth == 12.5e9 and lk.latency == pytest.approx(1e-6)
    assert topo.device("n1/nic2").spec["speed"] == 12.5e9


def test_roce() -> None:
    topo = load_topology("dgx-a100", nodes=2, fabric={"topology": "single_switch", "nic": "connectx-6-roce"})
    assert topo.link("n0/nic0", "fabric/sw0").kind == "roce"


def test_fat_tree_leaves_and_oversubscription() -> None:
    fabric = {"topology": "fat_tree", "switch": {"radix": 8}, "oversubscription": 2.0}
    topo = load_topology("dgx-a100", nodes=2, fabric=fabric)
    # 16 NIC ports, 4 down ports per leaf -> 4 leaves; 16 / 8 = 2 spines.
    assert [d.local_name for d in topo.devices("switch")] == ["leaf0", "leaf1", "leaf2", "leaf3", "spine0", "spine1"]
    assert _names(topo.route("n0/nic0", "n0/nic3")) == ["n0/nic0", "fabric/leaf0", "n0/nic3"]
    assert len(topo.route("n0/nic0", "n1/nic0")) == 4
    up = topo.link("fabric/leaf1", "fabric/spine1")
    assert up.raw_bandwidth == pytest.approx(4 * 25e9 / 2 / 2.0)  # 4 ports over 2 spines, oversubscribed 2:1
    one_leaf = load_topology("dgx-a100", nodes=2, fabric={"topology": "fat_tree"})
    assert [d.local_name for d in one_leaf.devices("switch")] == ["leaf0"]


def test_single_node_with_fabric() -> None:
    topo = load_topology("cpu-host", fabric={"topology": "single_switch", "transport": "tcp"})
    assert topo.route("n0/nic0", "fabric/sw0")[0].kind == "eth"


@pytest.mark.parametrize(
    ("fabric", "field", "text"),
    [
        ({"topology": "torus"}, "fabric.topology", "single_switch, rail_optimized, fat_tree"),
        ({"topology": "fat_tree", "transport": "udp"}, "fabric.transport", "rdma, tcp"),
        ({"topology": "fat_tree", "nic": "cx9"}, "fabric.nic", "connectx-6-hdr"),
        ({"topology": "fat_tree", "nic_speed": "fast"}, "fabric.nic_speed", "bandwidth"),
        ({"topology": "fat_tree", "nics_per_node": 0}, "fabric.nics_per_node", "positive integer"),
        ({"topology": "fat_tree", "nics_per_node": 9}, "fabric.nics_per_node", "too many"),
        ({"topology": "fat_tree", "gpudirect": "yes"}, "fabric.gpudirect", "true or false"),
        ({"topology": "fat_tree", "oversubscription": 0}, "fabric.oversubscription", "positive"),
        ({"topology": "fat_tree", "switch": {"ports": 4}}, "fabric.switch.ports", "latency, radix"),
        ({"topology": "fat_tree", "switch": {"radix": 4}}, "fabric.switch.radix", "more than two tiers"),
        ({"topology": "rail_optimized", "switch": {"radix": 2}}, "fabric.switch.radix", "at most 1 nodes"),
        ({"topology": "rail_optimized", "nics_per_node": 1, "switch": {"radix": 1}}, "fabric.switch.radix", ">= 2"),
        ({"topology": "single_switch", "switch": {"radix": 8}}, "fabric.switch.radix", "do not fit"),
        ({"topology": "fat_tree", "nic": "eth-100g"}, "fabric.transport", "cannot do RDMA"),
        ({"topology": "fat_tree", "speed": 1}, "fabric.speed", "unknown fabric key"),
    ],
)
def test_fabric_errors(fabric: dict[str, Any], field: str, text: str) -> None:
    with pytest.raises(TopologyError) as ei:
        load_topology("dgx-a100", nodes=2, fabric=fabric)
    assert ei.value.field == field
    assert text in ei.value.message


def test_nodes_without_fabric() -> None:
    with pytest.raises(TopologyError) as ei:
        load_topology("dgx-a100", nodes=2)
    assert ei.value.field == "fabric" and "2 nodes need a fabric" in ei.value.message


def test_fabric_needs_a_nic() -> None:
    with pytest.raises(TopologyError) as ei:
        load_topology("pcie-workstation", nodes=2, fabric={"topology": "single_switch"})
    assert ei.value.field == "fabric" and "no NIC" in ei.value.message
    ok = load_topology(
        "pcie-workstation",
        nodes=2,
        fabric={"topology": "single_switch", "transport": "tcp"},
        node_params={"nic": "eth-40g"},
    )
    assert ok.link("n1/nic0", "fabric/sw0").raw_bandwidth == 5e9
