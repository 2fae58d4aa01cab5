"""Which network hops NCCL runs with GPUDirect RDMA (src/graph/paths.cc ncclTopoCheckGdr): only GPUs the driver says
can (the GPU preset's ``gpudirect_rdma``: GeForce parts cannot), and NIC reads of a sender's buffer (GDR reads) before
compute capability 8.0 only on GPUs with an NVLink peer, unless NCCL_NET_GDR_READ says otherwise."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.backends.nccl.plan import gdr_capable, gdr_read

#: two PCIe workstations, each with its GPUs and a 200 Gb/s HDR NIC under one Gen4 switch (PIX: within GDR's level)
BOX = ["cluster.node=pcie-workstation", "cluster.node_params.nic=connectx-6-hdr", "cluster.node_params.pcie_gen=4"]


def _net(sim: Simulator) -> set[str]:
    return {h.transport for h in sim.nccl_plan.hops.values() if h.hw == "NET"}


def _sim(gpu: str, gpus: int, *more: str) -> Simulator:
    return Simulator.from_source(
        "2node-a100-ib", [*BOX, f"cluster.node_params.gpu={gpu}", f"cluster.node_params.gpus={gpus}", *more]
    )


def test_geforce_cards_stage_every_network_byte_in_host_memory() -> None:
    """RTX 4090 (gpudirect_rdma: false): the NIC never touches GPU memory, so NCCL stages both sides (NET/staged);
    the A100 box beside it runs NET/GDR."""
    geforce = _sim("rtx-4090", 2)
    assert not gdr_capable(geforce.topology, geforce.nccl_plan.ranks[0])
    assert _net(geforce) == {"NET/staged"}
    a100 = _sim("a100-sxm4-80gb", 2, "cluster.node_params.p2p=true")
    assert gdr_capable(a100.topology, a100.nccl_plan.ranks[0]) and _net(a100) == {"NET/GDR"}


@pytest.mark.parametrize(
    ("gpus", "env", "expected"),
    [
        (2, None, "NET/staged"),  # V100 without an NVLink peer: no GDR reads by default (pre-Ampere)
        (2, "1", "NET/GDR"),  # NCCL_NET_GDR_READ=1 allows them
        (1, None, "NET/GDR"),  # a node's only GPU keeps them ("keep things local if we have a single GPU")
    ],
)
def test_gdr_reads_before_ampere(gpus: int, env: str | None, expected: str) -> None:
    more = [f"backends.nccl.env.NCCL_NET_GDR_READ={env}"] if env else []
    sim = _sim("v100-sxm2-32gb", gpus, "cluster.node_params.p2p=true", *more)
    assert _net(sim) == {expected}


def test_gdr_reads_off_on_any_gpu_with_the_knob() -> None:
    sim = _sim("a100-sxm4-80gb", 2, "cluster.node_params.p2p=true", "backends.nccl.env.NCCL_NET_GDR_READ=0")
    assert not gdr_read(sim.topology, sim.nccl_plan.ranks[0], sim.nccl_options)
    assert _net(sim) == {"NET/staged"}


def test_nvlink_volta_keeps_gdr() -> None:
    """DGX-1 V100: NVLink peers, so GDR reads stay on (the shipped two-node scenario is unchanged)."""
    assert _net(Simulator.from_source("ddp-resnet50-dgx1-v100")) == {"NET/GDR"}


@pytest.mark.parametrize(
    ("cpu", "gpus", "transport"),
    [("threadripper-pro-7985wx", 2, "P2P/PCIe"), ("xeon-8480", 2, "SHM"), ("threadripper-pro-7985wx", 4, "SHM")],
)
def test_p2p_across_the_host_bridge_for_a_pair_on_amd(cpu: str, gpus: int, transport: str) -> None:
    """NCCL_P2P_LEVEL's default is PXB, and SYS on an AMD host with at most two GPUs (paths.cc ncclTopoCheckP2p,
    "Allow P2P between pairs of GPUs on AMD systems"): two P2P-capable GPUs on an AMD CPU's root ports (PHB) talk
    P2P; on Intel, or four of them, through host memory. NCCL_P2P_LEVEL set by the user wins."""
    box = {"gpus": gpus, "gpu": "a100-sxm4-80gb", "p2p": True, "pcie_switch": False, "cpu": cpu, "pcie_gen": 4}
    scenario = {"name": "box", "cluster": {"node": "pcie-workstation", "node_params": box}, "backends": {"nccl": {}}}
    sim = Simulator.from_source(scenario)
    assert sim.topology.path_class(sim.nccl_plan.ranks[0], sim.nccl_plan.ranks[1]) == "PHB"
    assert {h.transport for h in sim.nccl_plan.hops.values()} == {transport}
    pinned = {**scenario, "backends": {"nccl": {"env": {"NCCL_P2P_LEVEL": "PXB"}}}}
    assert {h.transport for h in Simulator.from_source(pinned).nccl_plan.hops.values()} == {"SHM"}


@pytest.mark.parametrize(("level", "across"), [(None, "SHM"), ("SYS", "P2P/PCIe")])
def test_rtx_pro_6000_box_of_two_switches(level: str | None, across: str) -> None:
    """Four RTX PRO 6000 (P2P-capable) under two PCIe switches of one AMD socket: at NCCL's default P2P level (PXB
    with more than two GPUs) the pairs inside a switch (PIX) talk P2P and the pairs across the switches (PHB) through
    host memory, as the ASUS ESC8000A-E13P's NCCL log shows ('via SHM/direct/direct' for NODE pairs); with
    NCCL_P2P_LEVEL=SYS every pair talks P2P ('via P2P/direct pointer')."""
    box = {"gpus": 4, "gpu": "rtx-pro-6000-blackwell", "pcie_gen": 5, "gpus_per_switch": 2, "cpu": "epyc-9654"}
    env = {"NCCL_P2P_LEVEL": level} if level else {}
    scenario = {"name": "box", "cluster": {"node": "pcie-workstation", "node_params": box}}
    sim = Simulator.from_source({**scenario, "backends": {"nccl": {"env": env}}})
    by_class: dict[str, set[str]] = {}
    for h in sim.nccl_plan.hops.values():
        by_class.setdefault(sim.topology.path_class(h.src, h.dst), set()).add(h.transport)
    assert by_class == {"PIX": {"P2P/PCIe"}, "PHB": {across}}
