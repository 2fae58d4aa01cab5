"""NCCL's point-to-point schedule (send/receive, all-to-all): channels, parts, protocol, rounds, and the simulated
times they give, against closed forms and the published B200 sweeps (docs/modelling.md "Point-to-point")."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.api import Simulator
from collsim.backends.nccl.algos.p2p import channel_rate, p2p_sends
from collsim.backends.nccl.p2p_sched import P2pChannels, p2p_rounds, round_base
from collsim.nccl_env import NcclOptions
from collsim.scenario import scenarios_dir

MiB, GiB = 2**20, 2**30
B200 = str(scenarios_dir() / "published" / "vultr_b200_8gpu_alltoall.yaml")


def _sim(source: str, *overrides: str) -> Simulator:
    return Simulator.from_source(source, list(overrides))


def test_channels_per_peer_follow_nvlink_and_nics() -> None:
    # one HGX H100: 24 ring channels -> 32; a peer 2 x 18 NVLinks -> 64 -> at most 32; NVLink's 512 KiB chunk
    assert _sim("hgx-h100").nccl_plan.p2p == P2pChannels(32, 32, 524288)
    # two nodes (16 ring channels): a network peer max(1 NIC, ceil(50 GB/s / 14)) = 4; the net chunk, 128 KiB
    assert _sim("2node-h100-ib").nccl_plan.p2p == P2pChannels(16, 4, 131072)
    # 16 nodes: 4 x ceil(128 / 8) > 16 channels, halved down to 1 ("fit all the peers within a single round")
    assert _sim("16node-h100-ib").nccl_plan.p2p == P2pChannels(16, 1, 131072)
    # NCCL 2.26 (before 2.29): 2 per network peer, at least the NICs, not halved by rank count here
    assert _sim("2node-h100-ib", 'backends.nccl.version="2.26.2"').nccl_plan.p2p == P2pChannels(16, 2, 131072)
    # DGX-1's cube-mesh: a pair without a direct NVLink goes through another GPU: 2 channels; PCIe: 2
    assert _sim(str(scenarios_dir() / "published" / "dgx1_v100_8gpu_g8.yaml")).nccl_plan.p2p.per_peer == 2
    assert _sim("pcie-2gpu-nop2p").nccl_plan.p2p == P2pChannels(2, 2, 131072)
    # the knobs
    plan = _sim("hgx-h100", "backends.nccl.env.NCCL_P2P_NVL_CHUNKSIZE=131072",
                "backends.nccl.env.NCCL_MAX_P2P_NCHANNELS=8").nccl_plan  # fmt: skip
    assert plan.p2p == P2pChannels(8, 8, 131072)
    assert _sim("2node-h100-ib", "backends.nccl.env.NCCL_NCHANNELS_PER_NET_PEER=8").nccl_plan.p2p.per_peer == 8


def test_parts_and_protocol_per_peer() -> None:
    sim = _sim(B200)
    plan, opts, consts = sim.nccl_plan, sim.options("nccl"), sim.nccl_constants
    # 16 MiB all-to-all: 2 MiB a peer on nChannelsMin = 4 channels (4 x 8 ranks fill the 32), 512 KiB parts
    sends = p2p_sends(plan, opts, consts, "alltoall", 16 * MiB)
    assert len(sends) == 7 and {(s.op.parts, s.op.part_bytes, s.op.protocol) for s in sends} == {(4, 512 * 1024,
                                                                                                    "Simple")}
    # 16 GiB: parts double while above 32 x 512 KiB, up to the 32 channels a peer may use
    assert {s.op.parts for s in p2p_sends(plan, opts, consts, "alltoall", 16 * GiB)} == {32}
    # LL while a peer's bytes <= its parts x 16 KiB (2.29 on): 16 KiB a peer at 128 KiB, not 32 KiB at 256 KiB
    assert sim.simulate_one("nccl", 128 * 1024).protocol == "LL"
    assert sim.simulate_one("nccl", 256 * 1024).protocol == "Simple"
    # 2.22-2.28 compared with p2pnChannelsPerPeer (32) x 16 KiB: LL up to 512 KiB a peer, 4 MiB in all
    old = _sim(B200, 'backends.nccl.version="2.27.7"')
    assert old.simulate_one("nccl", 4 * MiB).protocol == "LL"
    assert old.simulate_one("nccl", 8 * MiB).protocol == "Simple"
    # a peer on another node has no LL buffers (NCCL_ALLOC_P2P_NET_LL_BUFFERS=0): Simple, with the net chunk cut
    two = _sim("2node-h100-ib")
    net = [s for s in p2p_sends(two.nccl_plan, two.options("nccl"), two.nccl_constants, "alltoall", 16 * 1024)
           if s.network]  # fmt: skip
    assert len(net) == 8 and {(s.op.protocol, s.op.chunk) for s in net} == {("Simple", 131072 // 4)}


def test_a_part_streams_at_half_an_nvlink_shared_with_its_channel() -> None:
    # one HGX H100, 256 MiB all-to-all: 4 parts of 8 MiB a peer, rounds 1-7 on disjoint channels (bit-reversed
    # bases 16, 8, 24, 4, 20, 12, 28), so each part has its channel alone: 8 MiB at 20.6 / 2 GB/s, plus the launch
    # and one step's latency (the 28 parts' 288 GB/s stay under the GPU's 371 GB/s of NVLink)
    sim = _sim("hgx-h100")
    rate = channel_rate(sim.nccl_plan, sim.nccl_constants, sim.options("nccl"), network=False)
    assert rate == pytest.approx(10.3e9)
    t = sim.simulate_one("nccl", 256 * MiB, collective="alltoall").time_s
    stream = 8 * MiB / rate
    assert stream < t < stream + 20e-6
    # 1 GiB: 8 parts a peer, so rounds overlap on channels 8-31: those parts share their channel (half the rate)
    t1 = sim.simulate_one("nccl", GiB, collective="alltoall").time_s
    assert 32 * MiB / rate < t1 < 32 * MiB / rate + 20e-6


def test_sendrecv_time_stays_flat_while_parts_double() -> None:
    # nccl-tests sendrecv (each rank to the next) on one B200 node: 128 MiB on 8 parts of 16 MiB, 512 MiB on 32 of
    # 16 MiB: the same time, as the published sweep measured (798-857 us from 64 to 512 MiB)
    sim = _sim(B200, "workload.collective=sendrecv")
    t128, t512 = (sim.simulate_one("nccl", s).time_s for s in (128 * MiB, 512 * MiB))
    assert t512 / t128 == pytest.approx(1.0, abs=0.01)
    assert t128 == pytest.approx(16 * MiB / 20.05e9, rel=0.02)


@settings(max_examples=60, deadline=None)
@given(ppn=st.sampled_from([1, 2, 4, 8]), nnodes=st.integers(1, 9), rank=st.integers(0, 71))
def test_every_round_schedule_is_a_permutation(ppn: int, nnodes: int, rank: int) -> None:
    n = ppn * nnodes
    rank %= n
    rounds = p2p_rounds(rank, ppn, nnodes, 8)
    assert sorted(rounds) == list(range(n)) and rounds[0] == rank
    # a round's base channel is within the channels
    assert all(0 <= round_base(r, 16, nnodes, 8) < 16 for r in range(n))


def test_published_p2p_runs_stay_within_their_error() -> None:
    # the B200 acceptance report's one-node sweeps: all-to-all >= 16 MiB 26.8% before this schedule, sendrecv kept
    from statistics import median

    from collsim.calibration import read_measurement
    from collsim.calibration.validate import validate

    for case, most in (("vultr_b200_8gpu_alltoall", 8.1), ("vultr_b200_8gpu_sendrecv", 4.3)):
        path = Path(scenarios_dir()) / "published" / case
        v = validate(Simulator.from_source(f"{path}.yaml"), read_measurement(f"{path}.json"))
        big = median(abs(r.busbw_error_pct) for r in v.rows if r.size_bytes >= 16 * MiB)
        assert big <= most, (case, big)


def test_workload_peers_make_sendrecv_one_send() -> None:
    # unset: NCCL as nccl-tests (every rank to the next), Gloo rank 0 to 1; set: one send from the first to the second
    def sim(*peers: str) -> Simulator:  # Gloo on CPU tensors (its send/recv on CUDA tensors is refused)
        return _sim("2node-h100-ib", "workload.collective=sendrecv", "backends.gloo.device=cpu", *peers)

    ring, one, cross = sim(), sim("workload.peers=[0, 1]"), sim("workload.peers=[0, 8]")
    t = {k: s.simulate_one("nccl", 256 * MiB).time_s for k, s in (("ring", ring), ("one", one), ("cross", cross))}
    # two GPUs of one node: 4 parts (a 16-rank communicator's channels a peer) at half an NVLink each
    assert t["one"] == pytest.approx(t["ring"], rel=1e-3)
    assert t["one"] == pytest.approx(256 * MiB / (4 * 10.3e9), rel=0.01)
    # across nodes: 4 parts at NCCL_P2P_PER_CHANNEL_NET_BW, bound by the 400 Gb/s NIC
    assert t["cross"] < t["one"]
    assert cross.simulate_one("gloo", MiB).notes == ["rank 0 -> rank 8", "transport: TCP over network"]
    assert ring.simulate_one("gloo", MiB).notes[0] == "rank 0 -> rank 1"
    from collsim.scenario import ScenarioError

    with pytest.raises(ScenarioError, match=r"workload\.peers\[1\].*below 16"):
        sim("workload.peers=[0, 16]")


def test_the_protocol_follows_every_ranks_send() -> None:
    """A network peer has no LL buffers (NCCL_ALLOC_P2P_NET_LL_BUFFERS): nccl-tests' sendrecv across two nodes
    runs 7 -> 8 with Simple, and takes at least that send's time (it ran LL from rank 0's send inside its node,
    11.6 us against the cross send's 22.4). One send between neighbours is the same whichever ranks they are."""
    ring = _sim("2node-h100-ib", "workload.collective=sendrecv")
    cross = _sim("2node-h100-ib", "workload.collective=sendrecv", "workload.peers=[7, 8]")
    for size in (8, 4096):
        whole, one = ring.simulate_one("nccl", size), cross.simulate_one("nccl", size)
        assert (whole.protocol, one.protocol) == ("Simple", "Simple")
        assert whole.time_s >= one.time_s
    pairs = [_sim("hgx-h100", "workload.collective=sendrecv", f"workload.peers={p}").simulate_one("nccl", 8)
             for p in ("[0, 1]", "[1, 2]", "[5, 4]")]  # fmt: skip
    assert {(o.protocol, o.time_s) for o in pairs} == {(pairs[0].protocol, pairs[0].time_s)}
    assert pairs[0].protocol == "LL"


def test_pxn_relays_through_the_nics_own_gpu_and_alltoall_reaches_the_nics() -> None:
    # NCCL's PXN relay for a NIC is the NIC's local GPU (topo.cc ncclTopoGetLocalGpu): on HGX H100 NIC i's is GPU i
    # (two GPUs and two NICs a PCIe switch); on p4de (one NIC for two GPUs) NIC k's is GPU 2k
    from collsim.backends.nccl.plan import nic_local_gpu

    hgx = _sim("2node-h100-ib").topology
    assert [nic_local_gpu(hgx, n.name) for n in hgx.nics(0)] == [f"n0/gpu{i}" for i in range(8)]
    p4de = _sim(str(scenarios_dir() / "validation" / "aws_p4de_2node_efa_a100.yaml")).topology
    assert [nic_local_gpu(p4de, n.name) for n in p4de.nics(0)] == [f"n0/gpu{i}" for i in (0, 2, 4, 6)]

    # all-to-all across nodes: every GPU's sends to another node leave through the NIC on the peer's rail, relayed
    # by that NIC's GPU, so the node's 8 NICs share the load: on 2 nodes half the bytes stay on NVLink (busbw about
    # 2 NICs' worth, NVIDIA's rule of thumb), on many nodes nearly all cross (about one NIC's, "alltoall cannot
    # aggregate the bandwidth of multiple NICs", NVIDIA/nccl-tests#267)
    def busbw(nodes: int) -> float:
        sim = _sim("2node-h100-ib", f"cluster.nodes={nodes}", "workload.collective=alltoall")
        out = sim.simulate_one("nccl", GiB)
        return GiB / out.time_s * (out.nranks - 1) / out.nranks / 1e9

    assert 80 < busbw(2) < 96
    assert 45 < busbw(16) < 52


def test_no_pxn_without_gpudirect_so_sockets_leave_through_the_senders_own_nic() -> None:
    """search.cc ncclTopoGetNetDev relays by PXN only where ncclTopoCheckGdr allows GPUDirect to the NIC; NCCL's
    socket transport offers host memory only, so over TCP a send leaves through the sender's own NIC (before, it
    took the peer's rail through another GPU's NIC, and on a GB200 rack's other tray found no route at all)."""
    from collsim.backends.nccl.plan import p2p_send_slots

    sim = _sim("2node-h100-ib")
    topo, opts, consts = sim.topology, sim.options("nccl"), sim.nccl_constants
    tcp = {"topology": "rail_optimized", "transport": "tcp"}
    assert isinstance(opts, NcclOptions)
    assert p2p_send_slots(topo, "n0/gpu1", "n1/gpu6", 0, opts, consts) == (6, 6)  # PXN through GPU 6's NIC
    assert p2p_send_slots(topo, "n0/gpu1", "n1/gpu6", 0, opts, consts, tcp) == (1, 6)
    # NCCL_CROSS_NIC=0 keeps the rail without PXN: staged through the CPUs to NIC 6
    assert p2p_send_slots(topo, "n0/gpu1", "n1/gpu6", 0, dataclasses.replace(opts, cross_nic=0), consts, tcp) == (6, 6)

    # a GB200 rack of two trays over TCP: every tray's sends leave through its own NICs
    fabric = "cluster.fabric={topology: single_switch, transport: tcp}"
    rack = _sim("2node-h100-ib", "cluster.node=gb200-nvl72", "cluster.node_params={gpus: 8}", fabric)
    for coll in ("alltoall", "sendrecv"):
        out = rack.simulate_one("nccl", 64 * MiB, collective=coll)
        assert out.time_s > 0


@pytest.mark.parametrize(
    ("node", "nics"),
    [
        ("hgx-h100", {0: [0], 1: [1], 5: [5]}),  # a NIC per GPU: its own, on every channel
        ("oci-ports", {0: [0, 1], 1: [2, 3], 2: [4, 5], 7: [14, 15]}),  # 4 NICs, 2 GPUs a switch: 2 each
        ("gcp-a3-high", {0: [0], 1: [0], 2: [1], 7: [3]}),  # a NIC for 2 GPUs: both use it
    ],
)
def test_a_network_peer_is_reached_through_its_gpus_own_nics(node: str, nics: dict[int, list[int]]) -> None:
    """ncclTopoGetLocalNet: a GPU's point-to-point NICs are those on its best path class, shared out among the GPUs
    that share them (ceil(NICs / GPUs) each), the channel picking among its own; a send to another node goes through
    the receiving GPU's (search.cc ncclTopoGetNetDev; the sender reaches the same slot by PXN). Before, the slot was
    the peer's GPU index, which on OCI put GPUs 4-7's traffic on NICs 4-7, across the CPUs, and on A3 High on
    another switch's NIC."""
    from collsim.backends.nccl.plan import p2p_net_slot
    from collsim.topology import load_topology

    ports = {"nic": "connectx-6-roce", "nics_per_gpu": 2}  # OCI's BM.GPU.H100.8 as NCCL 2.19 sees it
    topo = load_topology("oci-bm-gpu-h100-8", node_params=ports) if node == "oci-ports" else load_topology(node)
    got = {g: sorted({p2p_net_slot(topo, f"n0/gpu{g}", c) for c in range(4)}) for g in nics}
    assert got == nics


def test_alltoall_across_oci_nodes_reaches_its_sixteen_nics() -> None:
    """16 x 200 Gb/s is 8 x 400 Gb/s per node: a 2-node all-to-all moves as much as on HGX H100's 8 NDR NICs, and
    every NIC carries the same share (before: 10 GB/s busbw, staged through host memory across the CPUs)."""

    def run(node: str, *params: str) -> tuple[float, list[float]]:
        sim = _sim("2node-h100-ib", f"cluster.node={node}", "workload.collective=alltoall", *params)
        out = sim.simulate_one("nccl", GiB, record=True, symmetry=False)
        per_nic: dict[str, float] = {}
        for r in out.records:
            for key, c in zip(r.keys, r.coefficients, strict=True):
                if isinstance(key, tuple) and key[0] == "link" and key[1].startswith("n0/nic") and key[2].startswith(
                    "fabric/"
                ):
                    per_nic[key[1]] = per_nic.get(key[1], 0.0) + r.size * c
        busbw = GiB / out.time_s * (out.nranks - 1) / out.nranks / 1e9
        return busbw, sorted(per_nic.values())

    # OCI's 16 RDMA ports as NCCL 2.19 sees them, a device each
    ports = ("cluster.node_params.nic=connectx-6-roce", "cluster.node_params.nics_per_gpu=2")
    oci, loads = run("oci-bm-gpu-h100-8", *ports)
    hgx, _ = run("hgx-h100")
    assert len(loads) == 16 and loads[-1] == pytest.approx(loads[0], rel=1e-9)
    assert oci == pytest.approx(hgx, rel=0.02)


def test_rounds_across_nodes_step_by_the_schedules_group_of_the_gpus_a_node() -> None:
    """channel.h ncclP2pChannelBaseForRound steps by comm->p2pSchedGroupSize, gcd(8, GPUs a node) with fewer than 8
    (init.cc ncclP2pSchedule): with 4 GPUs a node the rounds to the other node start at channel 8, not on the first
    rounds' channels (all seven sends on channels 0-3: 2 x 4 GPUs' 256 MiB all-to-all 5713 us, not 2819)."""
    from collsim.backends.nccl.algos.p2p import _part_channels

    sim = Simulator.from_source("2node-h100-ib", ["cluster.visible_gpus=[0,1,2,3]"])
    sends = p2p_sends(sim.nccl_plan, sim.nccl_options, sim.nccl_constants, "alltoall", 64 << 20)
    bases = {s.round: _part_channels(s, sim.nccl_plan, 8)[0] for s in sends}
    assert bases == {1: 0, 2: 0, 3: 0, 4: 8, 5: 8, 6: 8, 7: 8}
    t = sim.simulate_one("nccl", 256 << 20, collective="alltoall").time_s
    assert t < 0.6 * 5713e-6


def test_nccl_2_22_to_2_28_cut_an_ll_send_by_lls_step() -> None:
    """enqueue.cc v2.27.7-1: the protocol is chosen first and its step (LL: buffSizes[LL] / NCCL_STEPS = 64 KiB)
    sets the parts' minimum, 8 KiB on one node: a 32 KiB LL send is 4 parts (it was 1, cut by Simple's chunk);
    2.29 on cut by the Simple chunk before choosing."""
    sim = Simulator.from_source("hgx-h100", ["backends.nccl.version='2.27.7'"])
    (op,) = {s.op for s in p2p_sends(sim.nccl_plan, sim.nccl_options, sim.nccl_constants, "alltoall", 256 << 10)}
    assert (op.protocol, op.parts, op.part_bytes) == ("LL", 4, 8192)
    new = Simulator.from_source("hgx-h100", ["backends.nccl.version='2.29.7'"])
    assert {s.op.parts for s in p2p_sends(new.nccl_plan, new.nccl_options, new.nccl_constants, "alltoall",
                                          256 << 10)} == {1}  # fmt: skip


def test_network_peers_halve_against_p2p_channels_before_the_round_up() -> None:
    """paths.cc v2.27.7-1: a network peer's channels halve while 2 x nRanks > p2pnChannels x 4, p2pnChannels not yet
    rounded up to a power of two (12 here, 16 after): 32 ranks give 1 channel a peer, not 2."""
    sets = ["cluster.nodes=4", "backends.nccl.version='2.27.7'", "backends.nccl.env.NCCL_MAX_NCHANNELS=12",
            "backends.nccl.env.NCCL_NVLS_ENABLE=0"]  # fmt: skip
    p2p = Simulator.from_source("2node-h100-ib", sets).nccl_plan.p2p
    assert p2p is not None and (p2p.channels, p2p.per_peer) == (16, 1)
