"""Grace hosts: the ``gh200`` template (1, 2 or 4 GH200 superchips), the ``grace`` CPU preset and the NVLink-C2C
link, as NVIDIA's GH200 datasheet and the quad-GH200 blade describe them."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.topology import TopologyError, load_topology
from collsim.topology.presets import load_presets


def test_quad_blade_wiring() -> None:
    """4 superchips: every GPU pair NV6 (18 NVLinks / 3), each GPU on its own Grace over C2C with its own NIC (P2C);
    another superchip's NIC is SYS."""
    t = load_topology("gh200", node_params={"superchips": 4})
    gpus = [g.name for g in t.gpus()]
    assert len(gpus) == 4 and len(t.devices("cpu", 0)) == 4 and len(t.nics(0)) == 4
    assert {t.path_type(a, b) for a in gpus for b in gpus if a != b} == {"NV6"}
    for i, g in enumerate(gpus):
        assert t.host_cpu(g).name == f"n0/cpu{i}" and t.link(g, f"n0/cpu{i}").kind == "c2c"
        assert t.path_class(g, f"n0/nic{i}") == "P2C"
        assert t.path_class(g, f"n0/nic{(i + 1) % 4}") == "SYS"
    c2c = t.link(gpus[0], "n0/cpu0")
    assert c2c.raw_bandwidth == 450e9  # 900 GB/s total, 450 GB/s each way (GH200 datasheet)


def test_one_superchip_and_a_workstation_without_nvlink() -> None:
    one = load_topology("gh200")
    assert len(one.gpus()) == 1 and one.path_class("n0/gpu0", "n0/nic0") == "P2C"
    box = load_topology("gh200", node_params={"superchips": 2, "nvlink": False})
    assert box.path_class("n0/gpu0", "n0/gpu1") == "SYS" and box.nvlink_route("n0/gpu0", "n0/gpu1") is None


def test_workstation_gpus_exchange_through_host_memory() -> None:
    """Two GH200 without NVLink: SYS is past NCCL_P2P_LEVEL's PXB, so NCCL's ring runs SHM through the Graces."""
    sim = Simulator.from_source(
        "hgx-h100",
        ["cluster.node=gh200", "cluster.node_params.superchips=2", "cluster.node_params.nvlink=false",
         "backends.gloo.enabled=false", "workload.sizes=[16MiB]"],
    )  # fmt: skip
    assert {h.transport for h in sim.nccl_plan.hops.values()} == {"SHM"}
    assert sim.run().records[0].time_us > 0


def test_one_gpu_a_node_runs_gpudirect() -> None:
    sim = Simulator.from_source(
        "2node-h100-ib", ["cluster.node=gh200", "cluster.nodes=4", "backends.gloo.enabled=false"]
    )
    assert sim.nccl_plan.ppn == 1
    assert {h.transport for h in sim.nccl_plan.hops.values() if h.hw == "NET"} == {"NET/GDR"}


def test_grace_preset_is_arm_with_nccls_socket_figure() -> None:
    presets = load_presets()
    grace = presets.cpus["grace"]
    assert grace["vendor"] == "arm" and grace["cores"] == 72
    assert presets.links[grace["socket_link"]]["bandwidth"] == 6e9  # NCCL ARM_BW


def test_nvlink_needs_a_gpu_with_nvlinks() -> None:
    with pytest.raises(TopologyError, match="has no NVLinks") as ei:
        load_topology("gh200", node_params={"superchips": 2, "gpu": "l40s"})
    assert ei.value.field is not None and "nvlink" in ei.value.field
