"""Routes, path classes, host CPUs, NIC choice and the links summary."""

from __future__ import annotations

from typing import Any

import pytest

from collsim.topology import PATH_CLASS_ORDER, Topology, TopologyError, load_topology, path_class_rank


def _names(route: list[Any]) -> list[str]:
    return [route[0].src] + [lk.dst for lk in route] if route else []


def test_route_prefers_lower_latency(dgx: Topology) -> None:
    # NVLink hops (0.2 us each) beat PCIe hops (0.25 us each) between GPUs on one PCIe switch.
    assert _names(dgx.route("n0/gpu0", "n0/gpu1")) == ["n0/gpu0", "n0/nvswitch", "n0/gpu1"]
    assert _names(dgx.route("n0/gpu0", "n0/gpu1", kinds=["pcie"])) == ["n0/gpu0", "n0/pcie0", "n0/gpu1"]
    assert dgx.route("n0/gpu0", "n0/gpu0") == []


def test_pcie_route_across_sockets(dgx: Topology) -> None:
    route = dgx.pcie_route("n0/gpu0", "n0/nic7")
    assert _names(route) == ["n0/gpu0", "n0/pcie0", "n0/cpu0", "n0/cpu1", "n0/pcie3", "n0/nic7"]
    assert [lk.kind for lk in route] == ["pcie", "pcie", "upi", "pcie", "pcie"]
    assert sum(lk.latency for lk in route) == pytest.approx(4 * 0.25e-6 + 0.1e-6)


def test_nvlink_route(dgx: Topology) -> None:
    route = dgx.nvlink_route("n0/gpu0", "n0/gpu5")
    assert route is not None and _names(route) == ["n0/gpu0", "n0/nvswitch", "n0/gpu5"]
    assert dgx.nvlink_route("n0/gpu0", "n0/nic0") is None


def test_no_route_names_both_devices(dgx: Topology) -> None:
    with pytest.raises(TopologyError, match=r"no route from 'n0/gpu0' to 'n0/gpu1' over upi links"):
        dgx.route("n0/gpu0", "n0/gpu1", kinds=["upi"])
    with pytest.raises(TopologyError, match="valid kinds"):
        dgx.route("n0/gpu0", "n0/gpu1", kinds=["warp"])
    with pytest.raises(TopologyError, match="no device 'n0/gpu9'"):
        dgx.route("n0/gpu0", "n0/gpu9")


def test_route_never_transits_a_gpu(build: Any) -> None:
    # gpu0 - gpu1 - gpu2 chain over NVLink only: no route from gpu0 to gpu2 (that would transit gpu1).
    topo = build(
        [
            {"name": "gpu", "count": 3, "kind": "gpu", "preset": "a100-sxm4-80gb"},
            {"name": "cpu", "kind": "cpu", "count": 1, "preset": "generic-x86"},
        ],
        [
            {"a": "gpu0", "b": "gpu1", "preset": "nvlink3", "count": 4},
            {"a": "gpu1", "b": "gpu2", "preset": "nvlink3", "count": 2},
            {"a": "gpu[0-2]", "b": "cpu0", "preset": "pcie4"},
        ],
    )
    assert topo.nvlink_route("n0/gpu0", "n0/gpu2") is None
    assert topo.path_type("n0/gpu0", "n0/gpu1") == "NV4"
    assert topo.path_type("n0/gpu1", "n0/gpu2") == "NV2"
    assert topo.path_type("n0/gpu0", "n0/gpu2") == "PHB"  # like nvidia-smi
    assert topo.path_class("n0/gpu0", "n0/gpu2") == "NVB"  # like NCCL
    assert topo.path_class("n0/gpu0", "n0/gpu1") == "NVL"
    assert _names(topo.route("n0/gpu0", "n0/gpu2")) == ["n0/gpu0", "n0/cpu0", "n0/gpu2"]


def test_pxb(build: Any) -> None:
    topo = build(
        [
            {"name": "gpu", "count": 2, "kind": "gpu", "preset": "rtx-2080ti"},
            {"name": "sw", "count": 3, "kind": "pcie_switch"},
            {"name": "cpu", "kind": "cpu", "count": 1, "preset": "generic-x86"},
        ],
        [
            {"a": "gpu0", "b": "sw1", "preset": "pcie3"},
            {"a": "gpu1", "b": "sw2", "preset": "pcie3"},
            {"a": ["sw1", "sw2"], "b": "sw0", "preset": "pcie3"},
            {"a": "sw0", "b": "cpu0", "preset": "pcie3"},
        ],
    )
    assert topo.path_type("n0/gpu0", "n0/gpu1") == "PXB"
    assert topo.host_cpu("n0/gpu1").name == "n0/cpu0"
    assert topo.path_type("n0/gpu0", "n0/cpu0") == "PHB"


def test_path_classes(dgx: Topology) -> None:
    assert dgx.path_class("n0/gpu0", "n0/gpu0") == "LOC"
    assert dgx.path_class("n0/gpu0", "n0/gpu4") == "NVL"
    assert dgx.path_class("n0/gpu0", "n0/nic0") == "PIX"
    assert dgx.path_class("n0/gpu0", "n0/nic3") == "PHB"
    assert dgx.path_class("n0/gpu0", "n0/nic4") == "SYS"
    assert PATH_CLASS_ORDER == ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PHB", "SYS", "NET")
    assert path_class_rank("PIX") == 4
    with pytest.raises(TopologyError):
        path_class_rank("C2X")


def test_c2c_path_classes() -> None:
    """A GB200 tray: each GPU on its Grace over NVLink-C2C, the NICs on the Grace's PCIe. NCCL's classes: C2C to the
    CPU, P2C to the CPU's NICs (nvidia-smi's PHB), SYS to the other Grace's; the host CPU is found over C2C."""
    rack = load_topology("gb200-nvl72", node_params={"gpus": 36})
    g0 = "n0/gpu0"
    assert rack.link(g0, "n0/cpu0").kind == "c2c" and rack.host_cpu(g0).name == "n0/cpu0"
    assert rack.path_class(g0, "n0/cpu0") == "C2C" and rack.path_class("n0/cpu0", g0) == "C2C"
    assert rack.path_class(g0, "n0/nic0") == "P2C" and rack.path_class("n0/nic1", g0) == "P2C"
    assert rack.path_type(g0, "n0/nic0") == "PHB"  # nvidia-smi has no C2C or P2C
    assert rack.path_class(g0, "n0/nic2") == "SYS" and rack.path_class(g0, "n0/gpu1") == "NVL"
    assert rack.path_class("n0/nic0", "n0/nic1") == "PHB"  # no GPU end: an ordinary host path
    assert [lk.kind for lk in rack.pcie_route(g0, "n0/nic0")] == ["c2c", "pcie"]
    assert path_class_rank("PXB") < path_class_rank("P2C") < path_class_rank("PHB")


def test_host_cpu(dgx: Topology) -> None:
    assert dgx.host_cpu("n0/gpu3").name == "n0/cpu0"
    assert dgx.host_cpu("n0/gpu4").name == "n0/cpu1"
    assert dgx.host_cpu("n0/nic6").name == "n0/cpu1"
    assert dgx.host_cpu("n0/cpu1").name == "n0/cpu1"
    with pytest.raises(TopologyError, match="not attached to any CPU"):
        dgx.host_cpu("n0/nvswitch")


def test_nearest_nic(dgx: Topology) -> None:
    nearest = [dgx.nearest_nic(g.name) for g in dgx.gpus()]
    expected = ["nic0", "nic0", "nic2", "nic2", "nic4", "nic4", "nic6", "nic6"]
    assert [n.local_name if n else None for n in nearest] == expected


def test_p2p(dgx: Topology) -> None:
    assert dgx.p2p_supported("n0/gpu0", "n0/gpu7") is True
    assert dgx.p2p_supported("n0/gpu0", "n0/nic0") is False


def test_devices_and_lookups(dgx: Topology) -> None:
    assert [d.local_name for d in dgx.devices("cpu")] == ["cpu0", "cpu1"]
    assert [d.kind for d in dgx.devices(node=0)][:9] == ["gpu"] * 8 + ["cpu"]
    assert dgx.devices(node=1) == []
    assert dgx.device("n0/pcie2").index == 2 and dgx.device("n0/pcie2").kind == "pcie_switch"
    with pytest.raises(TopologyError, match="no link from 'n0/gpu0' to 'n0/gpu1'"):
        dgx.link("n0/gpu0", "n0/gpu1")
    assert len(dgx.links()) == dgx.graph.number_of_edges() == 58


def test_summary_exact(dgx: Topology) -> None:
    summary = dgx.summary()
    assert [(k, n) for k, n, _ in summary] == [("nvlink", 16), ("pcie", 40), ("upi", 2)]
    total = {k: t for k, _, t in summary}
    assert total["nvlink"] == pytest.approx(16 * 240e9, rel=1e-12)
    assert total["pcie"] == pytest.approx(40 * 24e9, rel=1e-9)
    assert total["upi"] == 32e9


def test_topology_pickles() -> None:
    import copy
    import pickle

    from collsim.topology import load_topology

    topo = load_topology(
        "pcie-workstation",
        nodes=2,
        fabric={"topology": "single_switch", "transport": "tcp"},
        node_params={"nic": "eth-40g"},
    )
    back = pickle.loads(pickle.dumps(topo))
    assert back.params["nic"] == "eth-40g" and back.fabric is not None and back.fabric["transport"] == "tcp"
    assert back.device("n1/gpu1").spec["p2p"] is False
    assert back.path_type("n1/gpu0", "n1/gpu1") == "PIX"
    assert copy.deepcopy(topo).link("n0/nic0", "fabric/sw0") == topo.link("n0/nic0", "fabric/sw0")
