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
    # two NICs spread over the sockets (collsim/topology/nic_placement.py): nic0 on socket 0, nic4 on socket 1
    assert [n.local_name for n in topo.nics(2)] == ["nic0", "nic4"]
    assert topo.device("n2/nic4").spec["preset"] == "eth-100g"
    lk = topo.link("n1/nic4", "fabric/sw0")
    assert (lk.kind, lk.preset, lk.raw_bandwidth) == ("eth", "eth-100g", 12.5e9)
    assert topo.fabric is not None and topo.fabric["gpudirect"] is False and topo.fabric["nics_per_node"] == 2
    assert topo.nearest_nic("n0/gpu7") == topo.device("n0/nic4")  # the unused NICs are gone
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
    # the template's own 'nic' parameter is named, for every template that has one
    for name in ("pcie-workstation", "l40s-8gpu", "rtx5090-4gpu"):
        with pytest.raises(TopologyError, match=r"set cluster\.node_params\.nic"):
            load_topology(name, nodes=2, fabric={"topology": "single_switch"})
    ok = load_topology(
        "pcie-workstation",
        nodes=2,
        fabric={"topology": "single_switch", "transport": "tcp"},
        node_params={"nic": "eth-40g"},
    )
    assert ok.link("n1/nic0", "fabric/sw0").raw_bandwidth == 5e9


# ---------------------------------------------------------------------------------------------------------------
# Oversubscription and switch presets (issue 12)


def _uplinks(topo: Any) -> list[Any]:
    """Every leaf -> spine link of the fabric."""
    return [
        topo.link(a.name, b.name)
        for a in topo.devices("switch")
        for b in topo.devices("switch")
        if a.spec["tier"] == "leaf" and b.spec["tier"] == "spine"
    ]


@pytest.mark.parametrize(
    ("node", "fabric"),
    [
        ("dgx-a100", {"topology": "fat_tree", "switch": {"radix": 8}}),  # 4 leaves of 4 NICs, 2 spines
        ("hgx-h100", {"topology": "rail_optimized"}),  # 8 rail leaves, 1 spine, 2 ports each
        ("hgx-h100", {"topology": "rail_optimized", "switch": {"radix": 8}}),  # 8 rails x 2 nodes / 8: 2 spines
    ],
)
def test_oversubscription_two_halves_spine_capacity(node: str, fabric: dict[str, Any]) -> None:
    full = load_topology(node, nodes=2, fabric=fabric)
    half = load_topology(node, nodes=2, fabric={**fabric, "oversubscription": 2})
    up_full, up_half = _uplinks(full), _uplinks(half)
    assert len(up_full) == len(up_half) > 1
    for a, b in zip(up_full, up_half, strict=True):
        assert (a.src, a.dst) == (b.src, b.dst)
        assert b.raw_bandwidth == a.raw_bandwidth / 2  # exact: halving a float is exact
        assert b.bandwidth == a.bandwidth / 2
        assert b.count == max(1, -(-a.count // 2))  # uplink ports after oversubscription (at least one)
    assert sum(lk.raw_bandwidth for lk in up_half) == sum(lk.raw_bandwidth for lk in up_full) / 2
    # the NIC ports (leaf down-links) keep their speed
    nic_port = full.route("n0/nic0", "n1/nic0")[0]
    assert half.link(nic_port.src, nic_port.dst).raw_bandwidth == nic_port.raw_bandwidth


def test_rail_optimized_spine_capacity_is_full_bisection() -> None:
    # 4 nodes, 8 rails of 400 Gb/s: each rail leaf has 4 x 50e9 B/s down, so 4 x 50e9 B/s up over its spines
    topo = load_topology("hgx-h100", nodes=4, fabric={"topology": "rail_optimized", "switch": {"radix": 16}})
    spines = [d.name for d in topo.devices("switch") if d.spec["tier"] == "spine"]
    assert len(spines) == 2  # ceil(8 rails x 4 nodes / 16)
    assert sum(topo.link("fabric/rail3", s).raw_bandwidth for s in spines) == 4 * 50e9


def test_switch_presets_load() -> None:
    from collsim.topology import load_presets
    from collsim.topology.fabric import switch_presets

    sw = switch_presets(load_presets())
    assert sw["quantum-2-qm9700"]["radix"] == 64 and sw["quantum-2-qm9700"]["port_speed"] == 50e9  # 400 Gb/s / 8
    assert sw["quantum-x800-q3400"]["radix"] == 144 and sw["quantum-x800-q3400"]["port_speed"] == 100e9  # 800 Gb/s
    assert sw["quantum-qm8700"]["radix"] == 40 and sw["quantum-qm8700"]["port_speed"] == 25e9
    assert sw["spectrum-x-sn5600"]["link_kinds"] == ("roce", "eth")
    for name, rec in sw.items():
        for field in ("radix", "port_speed"):
            assert rec.get(f"{field}_source"), f"{name}.{field} has no source"


def test_switch_preset_radix_and_port_speed() -> None:
    # QM8700: radix 40, so 16 NICs of 2 nodes x 8 fill one leaf of 20 ports
    hdr = load_topology("hgx-h100", nodes=3, fabric={"topology": "fat_tree", "switch": {"preset": "quantum-qm8700"}})
    assert [d.local_name for d in hdr.devices("switch")] == ["leaf0", "leaf1", "spine0"]  # 24 NICs, 20 per leaf
    # the ConnectX-7's 400 Gb/s port runs at the QM8700's 200 Gb/s
    assert hdr.link("n0/nic0", "fabric/leaf0").raw_bandwidth == 25e9
    assert hdr.fabric is not None and hdr.fabric["switch"]["preset"] == "quantum-qm8700"
    xdr = load_topology(
        "hgx-h100",
        nodes=2,
        fabric={"topology": "rail_optimized", "nic": "connectx-8-xdr", "switch": {"preset": "quantum-x800-q3400"}},
    )
    assert xdr.link("n1/nic7", "fabric/rail7").raw_bandwidth == 100e9  # 800 Gb/s end to end
    # an explicit radix overrides the preset's
    small = load_topology(
        "dgx-a100", nodes=2, fabric={"topology": "fat_tree", "switch": {"preset": "quantum-2-qm9700", "radix": 8}}
    )
    assert len([d for d in small.devices("switch") if d.spec["tier"] == "leaf"]) == 4


@pytest.mark.parametrize(
    ("fabric", "text"),
    [
        ({"topology": "fat_tree", "switch": {"preset": "qm9999"}}, "quantum-2-qm9700"),
        (
            {"topology": "fat_tree", "nic": "connectx-7-roce-400g", "switch": {"preset": "quantum-2-qm9700"}},
            "need roce",
        ),
        ({"topology": "fat_tree", "switch": {"preset": "spectrum-x-sn5600"}}, "has roce, eth ports"),
    ],
)
def test_switch_preset_errors(fabric: dict[str, Any], text: str) -> None:
    with pytest.raises(TopologyError) as ei:
        load_topology("hgx-h100", nodes=2, fabric=fabric)
    assert ei.value.field == "fabric.switch.preset"
    assert text in ei.value.message


def test_nic_shared_by_two_gpus_fabric() -> None:
    # aws-p4de: each PCIe switch holds 2 GPUs and 1 EFA, 4 EFAs per node
    topo = load_topology("aws-p4de", nodes=2, fabric={"topology": "rail_optimized"})
    assert [d.local_name for d in topo.devices("switch")] == ["rail0", "rail1", "rail2", "rail3", "spine0"]
    assert topo.nearest_nic("n1/gpu5") == topo.device("n1/nic2")
    assert topo.link("fabric/rail2", "fabric/spine0").raw_bandwidth == 2 * 12.5e9


def test_switch_preset_bad_link_kinds(topo_dir: Any) -> None:
    from tests_support import edit_file

    edit_file(topo_dir / "presets/fabric.yaml", "link_kinds: [roce, eth]", "link_kinds: [nvlink]")
    with pytest.raises(TopologyError) as ei:
        load_topology("hgx-h100", nodes=2, fabric={"topology": "fat_tree", "switch": {"preset": "quantum-qm8700"}})
    assert ei.value.field == "switches.spectrum-x-sn5600.link_kinds" and "ib, roce, eth" in ei.value.message


@pytest.mark.parametrize("order", [("hdr", "ndr"), ("ndr", "hdr")])
def test_a_fat_tree_leaf_carries_the_sum_of_its_nics_whatever_their_order(order: tuple[str, str]) -> None:
    """A leaf's uplinks are its down ports' capacity (NICs of 200 and 400 Gb/s: 600), not its first NIC's rate
    times the port count (400 or 800 before, by the order the template listed its NICs)."""
    from collsim.topology import topology_from_template

    presets = {"hdr": "connectx-6-hdr", "ndr": "connectx-7-ndr"}
    template = {
        "name": "mixed",
        "devices": [{"name": "gpu", "count": 2, "kind": "gpu", "preset": "h100-sxm5-80gb"},
                    {"name": "cpu", "count": 1, "kind": "cpu", "preset": "xeon-8480"},
                    *({"name": f"nic{i}", "kind": "nic", "preset": presets[k]} for i, k in enumerate(order))],
        "links": [{"a": "gpu0", "b": "gpu1", "preset": "nvlink4", "count": 18},
                  {"a": ["gpu0", "gpu1", "nic0", "nic1"], "b": "cpu0", "preset": "pcie5"}],
    }  # fmt: skip
    topo = topology_from_template(template, nodes=2, fabric={"topology": "fat_tree", "switch": {"radix": 4}})
    up = topo.link("fabric/leaf0", "fabric/spine0")
    assert up.raw_bandwidth == pytest.approx(25e9 + 50e9)  # 200 + 400 Gb/s, bits to bytes
    assert topo.link("fabric/spine0", "fabric/leaf1").raw_bandwidth == pytest.approx(75e9)


def test_an_oversubscription_with_nothing_to_cross_is_warned_about() -> None:
    """Two HGX nodes' 16 NIC ports fit one leaf of the default radix 64: no spine, so oversubscription 2 changed
    nothing, silently. With radix 16 (8 ports a leaf) there are spines and it takes effect, without a word."""
    import warnings

    from collsim.topology.errors import TopologyWarning

    with pytest.warns(TopologyWarning, match=r"fabric.oversubscription 2 has no effect: all 16 NIC ports fit one "
                                             r"leaf of radix 64"):
        load_topology("hgx-h100", nodes=2, fabric={"topology": "fat_tree", "oversubscription": 2})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        topo = load_topology("hgx-h100", nodes=2, fabric={"topology": "fat_tree", "oversubscription": 2,
                                                           "switch": {"radix": 16}})  # fmt: skip
    assert topo.link("fabric/leaf0", "fabric/spine0").bandwidth < topo.link("n0/nic0", "fabric/leaf0").bandwidth * 8
