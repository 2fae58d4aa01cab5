"""GPUs on NVLink-C2C (GB200's Grace CPUs): NCCL's GPU-NIC path through the Grace (P2C) and what each release does
with it (src/graph/paths.cc ncclTopoCheckGdr, ncclTopoComputePaths; tuning.cc's LL128 rule; ``c2c`` in
topologies/software/nccl.yaml): GPUDirect RDMA from 2.27 by default (NCCL_NET_GDR_C2C, settable from 2.26), the
network staged through host memory before; LL128 across nodes only where the release has the P2C class."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.backends.nccl.constants import C2cReleases
from collsim.backends.nccl.plan import gdr_near, nic_path_class

#: two NVL36 racks (36 GB200 GPUs each on the rack's NVLink, one NIC a GPU on its Grace), a rail-optimised NDR fabric
RACKS = [
    "cluster.node=gb200-nvl72",
    "cluster.node_params.gpus=36",
    "cluster.nodes=2",
    "cluster.fabric.topology=rail_optimized",
    "workload.sizes=[1GiB]",
    "backends.gloo.enabled=false",
]


def _sim(version: str | None = None, **env: str) -> Simulator:
    more = [f"backends.nccl.version={version}"] if version else []
    more += [f"backends.nccl.env.{k}={v}" for k, v in env.items()]
    return Simulator.from_source("2node-h100-ib", [*RACKS, *more])


def _net(sim: Simulator) -> set[str]:
    return {h.transport for h in sim.nccl_plan.hops.values() if h.hw == "NET"}


@pytest.mark.parametrize(
    ("version", "env", "expected"),
    [
        (None, {}, "NET/GDR"),  # NCCL_NET_GDR_C2C's default 1 (2.27 on)
        ("2.27.3", {}, "NET/GDR"),
        ("2.26.2", {}, "NET/staged"),  # the knob exists, default 0
        ("2.26.2", {"NCCL_NET_GDR_C2C": "1"}, "NET/GDR"),
        ("2.25.1", {"NCCL_NET_GDR_C2C": "1"}, "NET/staged"),  # no such knob before 2.26: PHB, past PXB
        ("2.25.1", {"NCCL_NET_GDR_LEVEL": "PHB"}, "NET/GDR"),  # raising the level reaches it in any release
        (None, {"NCCL_NET_GDR_C2C": "0"}, "NET/staged"),
        (None, {"NCCL_NET_GDR_LEVEL": "PXB"}, "NET/staged"),  # a level set by the user replaces P2C (2.27 on)
        (None, {"NCCL_NET_GDR_LEVEL": "P2C"}, "NET/GDR"),
    ],
)
def test_gpudirect_through_c2c_by_release(version: str | None, env: dict[str, str], expected: str) -> None:
    assert _net(_sim(version, **env)) == {expected}


def test_path_class_and_ll128_by_release() -> None:
    """The GPU-NIC path is P2C from 2.27 (PHB before), and NCCL turns LL128 on across nodes for Hopper and later up
    to PXN, which P2C is within; at 2.26 the PHB path keeps LL128 off."""
    new, old = _sim(), _sim("2.26.2")
    g, nic = "n0/gpu0", "n0/nic0"
    assert nic_path_class(new.topology, g, nic, new.nccl_options, new.nccl_constants) == "P2C"
    assert nic_path_class(old.topology, g, nic, old.nccl_options, old.nccl_constants) == "PHB"
    assert gdr_near(new.topology, g, nic, new.nccl_options, new.nccl_constants)
    assert not gdr_near(old.topology, g, nic, old.nccl_options, old.nccl_constants)
    assert new.nccl_plan.ll128_refusal is None
    assert old.nccl_plan.ll128_refusal is not None and "through PHB" in old.nccl_plan.ll128_refusal


def test_grace_hosts_read_as_arm() -> None:
    """The Grace host is Arm (NCCL's cpuArch ARM): NCCL 2.29's tree correction of NVLSTree's bandwidth, for
    Blackwell on x86 hosts only (tuning.cc lines 642-645), is not applied; with an x86 CPU preset in its place it is
    (at 1 MiB its factor is below 1: the modelled NVLSTree is slower)."""
    arm = _sim()
    x86 = Simulator.from_source("2node-h100-ib", [*RACKS, "cluster.node_params.cpu=xeon-8480"])
    assert arm.nccl_plan.cpu_vendor == "arm" and x86.nccl_plan.cpu_vendor == "intel"
    (row_arm,), _ = arm.explain([1 << 20])
    (row_x86,), _ = x86.explain([1 << 20])
    pair = ("NVLSTree", "Simple")
    assert row_arm.model_s[pair] < row_x86.model_s[pair]


def test_point_to_point_net_chunk_doubles_on_arm_blackwell() -> None:
    """init.cc: the net chunk of point-to-point across nodes is 2 x NCCL_P2P_NET_CHUNKSIZE on an Arm host with
    Blackwell GPUs ("GBx platforms only have 4 GPUs per host")."""
    plan = _sim().nccl_plan
    assert plan.p2p is not None and plan.p2p.chunk == 2 * 131072


def test_c2c_releases_defaults() -> None:
    rel = C2cReleases()
    assert not rel.gdr((2, 26, 2), None) and rel.gdr((2, 27, 3), None) and rel.gdr(None, None)
    assert not rel.pxn((2, 27, 7), None) and rel.pxn((2, 27, 7), True) and rel.pxn((2, 28, 3), None)
    assert not rel.pxn((2, 26, 2), True)  # no NCCL_PXN_C2C before 2.27
