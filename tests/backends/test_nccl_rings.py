"""NCCL's rings on NVLink meshes without an NVSwitch (issue 12): the DGX-1's hybrid cube-mesh, fully connected
4-GPU boards, bridged pairs. Every ring hop is a direct NVLink, channels follow distinct rings and share the
NVLinks evenly, as NCCL's ring search (src/graph/search.cc) builds them; NVSwitch and PCIe nodes keep index order."""

from __future__ import annotations

import collections
import itertools
from typing import Any

import pytest

from collsim.api import Simulator
from collsim.backends.nccl.plan import mesh_chains, node_chain, nvlink_mesh
from collsim.topology import Topology, load_topology


def _sim(node: str, nodes: int = 1, **params: Any) -> Simulator:
    cluster: dict[str, Any] = {"node": node, "nodes": nodes, "node_params": params}
    if nodes > 1:
        cluster["fabric"] = {"topology": "rail_optimized", "transport": "rdma"}
    return Simulator.from_source({"name": "rings", "cluster": cluster, "backends": {"nccl": {}}})


def _direct(topo: Topology, a: str, b: str) -> bool:
    return topo.graph.has_edge(a, b) and topo.graph.edges[a, b]["link"].kind == "nvlink"


def _directed(ring: list[str], closed: bool) -> list[tuple[str, str]]:
    return list(itertools.pairwise(ring + ring[:1] if closed else ring))


def test_dgx1_rings_follow_nvlinks_on_distinct_cycles() -> None:
    sim = _sim("dgx1-v100")
    plan, topo = sim.nccl_plan, sim.topology
    # 6 NVLinks per GPU at NCCL's 20 GB/s, 20 GB/s per channel: 2 x 6 = 12 channels (NCCL itself runs 6, see the
    # report in docs/nodes.md); the 6 of a round are distinct rings, the second round repeats them
    assert plan.channels == 12
    first = [tuple(r) for r in plan.rings[:6]]
    assert len(set(first)) == 6 and [tuple(r) for r in plan.rings[6:]] == first
    # NCCL's first two: the NV2 cycle and its reverse (NVIDIA DGX-1 logs: 0 3 2 1 5 6 7 4)
    idx = [[topo.device(g).index for g in r] for r in plan.rings]
    assert idx[0] == [0, 3, 2, 1, 5, 6, 7, 4] and idx[1] == [0, 4, 7, 6, 5, 1, 2, 3]
    uses: collections.Counter[tuple[str, str]] = collections.Counter()
    for ring in plan.rings:
        for a, b in _directed(ring, closed=True):
            assert _direct(topo, a, b), (a, b)
            uses[(a, b)] += 1
    # every NVLink carries the same number of channels: 2 per link and direction (NV2 pairs 4)
    for (a, b), n in uses.items():
        assert n == 2 * topo.link(a, b).count
    assert len(uses) == 32  # all 16 NVLinked pairs in both directions
    assert {h.transport for h in plan.hops.values()} == {"P2P/NVLink"}
    assert all(len(h.path.uses) == 1 for h in plan.hops.values())  # one direct link, never through a third GPU


def test_dgx1_index_order_would_cross_pcie() -> None:
    # what the rings avoid: GPU 3 -> 4 and 7 -> 0 have no NVLink (NVB: only through another GPU)
    topo = load_topology("dgx1-v100")
    assert topo.path_class("n0/gpu3", "n0/gpu4") == "NVB" and topo.path_class("n0/gpu7", "n0/gpu0") == "NVB"


def test_dgx1_across_nodes_chains_follow_nvlinks_between_nic_gpus() -> None:
    sim = _sim("dgx1-v100", nodes=2)
    plan, topo = sim.nccl_plan, sim.topology
    assert plan.channels == 8  # 2 per NIC, 4 NICs
    for c, ring in enumerate(plan.rings):
        for node in (0, 1):
            chain = [g for g in ring if topo.device(g).node == node]
            nic = plan.nic_for(topo, node, c)
            assert nic is not None
            assert topo.path_class(chain[0], nic) == "PIX" and topo.path_class(chain[-1], nic) == "PIX"
            assert all(_direct(topo, a, b) for a, b in _directed(chain, closed=False))
    assert collections.Counter(h.transport for h in plan.hops.values()) == {"P2P/NVLink": 112, "NET/GDR": 16}
    # node_chain (used by CollNet) gives the same chain for a channel as the plan
    assert node_chain(topo, 0, plan.nic_for(topo, 0, 3), channel=3) == [
        g for g in plan.rings[3] if topo.device(g).node == 0
    ]


@pytest.mark.parametrize(
    ("gpu", "refusal"),
    [
        ("a100-sxm4-80gb", "needs Hopper or newer"),
        ("v100-sxm2-32gb", "needs Hopper"),
        ("h100-sxm5-80gb", "needs an NVSwitch"),
    ],
)
def test_fully_connected_four_gpu_board(gpu: str, refusal: str) -> None:
    # NCCL's graph dumps on 4 fully connected GPUs (NVIDIA/nccl#713) list the 6 directed rings through GPU 0
    sim = _sim("hgx", gpus=4, gpu=gpu)
    plan, topo = sim.nccl_plan, sim.topology
    assert nvlink_mesh(topo, 0) is not None
    assert len({tuple(r) for r in plan.rings}) == 6
    assert all(_direct(topo, a, b) for r in plan.rings for a, b in _directed(r, closed=True))
    assert plan.nvswitch is None and plan.nvls_refusal is not None and refusal in plan.nvls_refusal


def test_bridged_pairs_take_the_fewest_pcie_hops() -> None:
    # 4 H100 PCIe in two bridged pairs under one PCIe switch: no ring over NVLinks alone exists, the rings cross
    # PCIe twice (P2P through the switch)
    sim = _sim("h100-pcie-nvlink-pair", gpus=4, pcie_switch=True)
    plan, topo = sim.nccl_plan, sim.topology
    for ring in plan.rings:
        pcie = [(a, b) for a, b in _directed(ring, closed=True) if not _direct(topo, a, b)]
        assert len(pcie) == 2
    kinds = collections.Counter(h.transport for h in plan.hops.values())
    assert set(kinds) == {"P2P/NVLink", "P2P/PCIe"} and kinds["P2P/NVLink"] == kinds["P2P/PCIe"]


def test_nvlink_pair_uses_p2p_over_nvlink() -> None:
    sim = _sim("h100-pcie-nvlink-pair")
    plan = sim.nccl_plan
    # 12 NVLink4 x 20.6 GB/s = 247.2 GB/s; 2 x (247.2 // 20) = 24 channels, as NCCL logs (NVIDIA/nccl#1161)
    assert plan.channels == 24 and plan.intra_hw == "NVLINK"
    assert {h.transport for h in plan.hops.values()} == {"P2P/NVLink"}
    assert plan.nvl_bw == pytest.approx(12 * 20.6e9)


@pytest.mark.parametrize("node", ["dgx-a100", "hgx-h100", "hgx-b200", "aws-p4de", "pcie-workstation", "l40s-8gpu"])
def test_switch_and_pcie_nodes_keep_index_order(node: str) -> None:
    sim = _sim(node)
    assert nvlink_mesh(sim.topology, 0) is None
    gpus = [g.name for g in sim.topology.gpus()]
    assert all(r == gpus for r in sim.nccl_plan.rings)


def test_mesh_chains_fall_back_when_links_are_exhausted() -> None:
    # more channels than a round holds: later channels start a new round from all links
    topo = load_topology("dgx1-v100")
    mesh = nvlink_mesh(topo, 0)
    assert mesh is not None and mesh[("n0/gpu0", "n0/gpu3")] == 2 and ("n0/gpu0", "n0/gpu5") not in mesh
    chains = mesh_chains(topo, 0, mesh, [None] * 14)
    assert chains[12:] == chains[:2]
    assert load_topology("h100-pcie-nvlink-pair") and nvlink_mesh(load_topology("h100-pcie-nvlink-pair"), 0) is None


def test_more_nics_than_gpus_per_switch_spread_the_rings_over_nics_and_pcie_links() -> None:
    """OCI's BM.GPU.H100.8 as NCCL 2.19 sees it (a device per port): 4 PCIe switches of 2 GPUs and 4 NICs of 200
    Gb/s. NCCL's network ring search takes a
    channel per NIC, charging its bandwidth to the NIC -> GPU and GPU -> NIC PCIe paths, and connect.cc copies the
    channels once: 32 channels, 2 per NIC, every GPU entering and leaving 4 of them. So a ring reaches the NICs' rate
    (16 x 200 Gb/s per direction) where one GPU's link carrying most of a switch's channels would halve it."""
    sim = _sim("oci-bm-gpu-h100-8", nodes=4, nic="connectx-6-roce", nics_per_gpu=2)
    plan, topo = sim.nccl_plan, sim.topology
    assert plan.channels == 32
    nics = collections.Counter(plan.nic_for(topo, 0, c) for c in range(plan.channels))
    assert sorted(nics.values()) == [2] * 16
    node0 = [[g for g in ring if g.startswith("n0/")] for ring in plan.rings]
    assert collections.Counter(r[0] for r in node0) == {f"n0/gpu{i}": 4 for i in range(8)}
    assert collections.Counter(r[-1] for r in node0) == {f"n0/gpu{i}": 4 for i in range(8)}
    for c, r in enumerate(node0):  # in and out at GPUs behind the channel's NIC's own switch
        nic = plan.nic_for(topo, 0, c)
        assert {topo.path_class(r[0], nic), topo.path_class(r[-1], nic)} == {"PIX"}
    t = sim.simulate_one("nccl", 1 << 30, choice=("Ring", "Simple")).time_s
    n = len(plan.ranks)
    busbw = (1 << 30) / t * 2 * (n - 1) / n
    assert 0.97 * 16 * plan.nic_bw < busbw <= 16 * plan.nic_bw, busbw


def test_gpus_of_an_nvlink_mesh_sharing_a_switch_of_more_nics_take_turns() -> None:
    """A 4-GPU board whose GPUs are joined by direct NVLinks (no NVSwitch: the rings follow NVLinks) with 2 HDR NICs
    a GPU, two GPUs and four NICs behind each PCIe Gen4 switch: NCCL's search charges each channel to the GPU-NIC
    PCIe paths, so every GPU enters and leaves as many channels and the ring runs at the GPUs' four PCIe links (4 x
    24 GB/s a direction: the closed form's bound). Before, a switch's lower GPU entered 3 of its 4 NICs' channels and
    the ring ran at 59 GB/s busbw."""
    sim = _sim("hgx", nodes=3, gpus=4, gpu="a100-sxm4-80gb", nic="connectx-6-hdr", nics_per_gpu=2, pcie_gen=4,
               cpu="epyc-7742")  # fmt: skip
    plan, topo = sim.nccl_plan, sim.topology
    assert not topo.devices("nvswitch", 0)
    node0 = [[g for g in ring if g.startswith("n0/")] for ring in plan.rings]
    per_gpu = plan.channels // 4
    assert collections.Counter(r[0] for r in node0) == {f"n0/gpu{i}": per_gpu for i in range(4)}
    assert collections.Counter(r[-1] for r in node0) == {f"n0/gpu{i}": per_gpu for i in range(4)}
    t = sim.simulate_one("nccl", 1 << 30, choice=("Ring", "Simple")).time_s
    n = len(plan.ranks)
    busbw = (1 << 30) / t * 2 * (n - 1) / n
    pcie = 24e9  # PCIe Gen4 x16 as NCCL rates it (links.yaml), bytes/s
    assert 0.97 * 4 * pcie < busbw <= 4 * pcie, busbw


def test_gpus_two_nvlinks_apart_talk_through_an_intermediate_gpu() -> None:
    """The DGX-1's GPU 0 and GPU 5 share no NVLink (path NVB): NCCL's P2P/indirect puts the connection's buffer on a
    GPU both reach over NVLink (p2p.cc P2P_INTERMEDIATE), so an all-to-all stays on NVLink; before, those pairs went
    over PCIe and the CPUs' link and one node's all-to-all ran at 3.5 GB/s busbw."""
    sim = _sim("dgx1-v100")
    topo = sim.topology
    assert topo.path_class("n0/gpu0", "n0/gpu5") == "NVB"
    out = sim.simulate_one("nccl", 1 << 30, collective="alltoall", record=True)
    kinds = {topo.link(*k[1:]).kind for r in out.records for k in r.keys if isinstance(k, tuple) and k[0] == "link"}
    assert kinds == {"nvlink"}
    busbw = (1 << 30) / out.time_s * 7 / 8 / 1e9
    assert busbw > 35, busbw


@pytest.mark.parametrize(("nics", "channels"), [(1, 4), (2, 8), (4, 16), (8, 16)])
def test_ring_channels_across_nodes_follow_nccls_network_search(nics: int, channels: int) -> None:
    """A channel per NDR NIC at 48 GB/s (sm90SpeedArrayInter's first speed under the GPU-NIC path's 48); with 4 or
    fewer, ncclTopoDupChannels doubles them (halving their speed) and connect.cc copies them once: 4 channels a
    NIC; with 8 it leaves them (Hopper, below 50 GB/s, more than 4) and the copy gives 2 a NIC."""
    sim = Simulator.from_source("2node-h100-ib", [f"cluster.fabric.nics_per_node={nics}"])
    assert sim.nccl_plan.channels == channels
    counts = collections.Counter(sim.nccl_plan.nic_for(sim.topology, 0, c) for c in range(channels))
    assert sorted(counts.values()) == [channels // nics] * nics


def test_one_gpu_a_node_takes_the_network_searchs_channels() -> None:
    """One GPU a node (ppn=1): NCCL's ring search has no path inside the node (typeIntra LOC), so the network
    search alone sets the channels, 4 on one NDR NIC as on an HGX node (1 channel at 48 GB/s, doubled by
    ncclTopoDupChannels, copied by connect.cc), and a ring reaches the NIC's rate. Before, a one-GPU node's own
    default of 2 bounded them and the H100 PCIe's 20 GB/s channels held the ring at 40 GB/s busbw."""
    sim = _sim("pcie-workstation", nodes=8, gpus=1, gpu="h100-pcie-80gb", pcie_gen=5, cpu="xeon-8480",
               nic="connectx-7-ndr")  # fmt: skip
    plan = sim.nccl_plan
    assert (plan.ppn, plan.channels) == (1, 4)
    t = sim.simulate_one("nccl", 1 << 30, choice=("Ring", "Simple")).time_s
    n = len(plan.ranks)
    busbw = (1 << 30) / t * 2 * (n - 1) / n
    assert 0.97 * plan.nic_bw < busbw <= plan.nic_bw, (busbw, plan.nic_bw)


@pytest.mark.parametrize(("max_ch", "min_ch", "nics"), [(2, 16, 2), (4, 32, 4), (None, 32, 8)])
def test_channels_copied_up_to_the_minimum_keep_their_originals_nics(
    max_ch: int | None, min_ch: int, nics: int
) -> None:
    # connect.cc: "combining max, then min, to only use the first channels, then duplicate them": with MAX 2 and
    # MIN 16 every channel is a copy of channel 0 or 1 and runs on their two NICs (it was spread over all eight:
    # 381.7 GB/s busbw, the eight NICs' rate); a ring then runs at its NICs' rate, nics x the one-NIC plateau
    env = {"NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": str(min_ch)}
    if max_ch is not None:
        env["NCCL_MAX_NCHANNELS"] = str(max_ch)
    sc = {"name": "c", "cluster": {"node": "hgx-h100", "nodes": 2, "fabric": {"topology": "rail_optimized"}},
          "backends": {"nccl": {"env": env}}}  # fmt: skip
    sim = Simulator.from_source(sc)
    assert sim.nccl_plan.channels == min_ch
    used = {sim.nccl_plan.nic_for(sim.topology, 0, c) for c in range(min_ch)}
    assert len(used) == nics
    one_nic = {**sc["cluster"], "fabric": {"topology": "rail_optimized", "nics": ["nic0"]}}
    one = Simulator.from_source({**sc, "backends": {"nccl": {"env": {"NCCL_ALGO": "Ring"}}}, "cluster": one_nic})
    t = sim.simulate_one("nccl", 1 << 30).time_s
    t1 = one.simulate_one("nccl", 1 << 30).time_s
    assert t1 / t == pytest.approx(nics, rel=0.02)


def test_nics_numbered_between_the_gpus_own_take_their_switchs_gpus_in_turn(tmp_path: Any) -> None:
    """A DGX A100 numbers its storage NICs mlx5_4 and mlx5_5 (on the CPUs) before the compute NICs mlx5_6-9: the
    compute NICs' slots then match no GPU behind their switch. NCCL picks GPUs by distance, not by the NIC's number,
    so nic6 and nic7 still enter at gpu4 and gpu5 in turn; matching by number sent both through gpu4's PCIe link
    and halved a two-node ring (95.86 GB/s busbw against the shipped template's 191.43)."""
    import yaml

    from collsim.topology.presets import read_yaml, topologies_dir

    data = read_yaml(topologies_dir() / "nodes" / "dgx-a100.yaml")
    data["devices"] = [{**d, "count": 10} if d.get("kind") == "nic" else d for d in data["devices"]]
    links = [lk for lk in data["links"] if "nic" not in str(lk)]
    links += [{"a": ["gpu0", "gpu1", "nic0", "nic1"], "b": "pcie0", "preset": "pcie4"},
              {"a": ["gpu2", "gpu3", "nic2", "nic3"], "b": "pcie1", "preset": "pcie4"},
              {"a": ["gpu4", "gpu5", "nic6", "nic7"], "b": "pcie2", "preset": "pcie4"},
              {"a": ["gpu6", "gpu7", "nic8", "nic9"], "b": "pcie3", "preset": "pcie4"},
              {"a": "nic4", "b": "cpu0", "preset": "pcie4"}, {"a": "nic5", "b": "cpu1", "preset": "pcie4"}]  # fmt: skip
    data["links"] = links
    data.pop("ib_names", None)
    path = tmp_path / "dgx-a100-storage.yaml"
    path.write_text(yaml.safe_dump(data))
    shipped, storage = _sim("dgx-a100", nodes=2), _sim(str(path), nodes=2)
    plan, topo = storage.nccl_plan, storage.topology
    for c in range(plan.channels):
        nic = plan.nic_for(topo, 0, c)
        ring = [g for g in plan.rings[c] if g.startswith("n0/")]
        assert {topo.path_class(ring[0], nic), topo.path_class(ring[-1], nic)} == {"PIX"}, (c, nic)
    node0 = [[g for g in ring if g.startswith("n0/")] for ring in plan.rings]
    assert sorted(collections.Counter(r[0] for r in node0).values()) == [plan.channels // 8] * 8
    one = {s.nccl_plan.channels for s in (shipped, storage)}
    times = [s.simulate_one("nccl", 1 << 30, choice=("Ring", "Simple")).time_s for s in (shipped, storage)]
    assert len(one) == 1 and times[1] == pytest.approx(times[0], rel=1e-9)


def test_bridged_pairs_price_the_ring_at_its_slowest_hop() -> None:
    """Eight H100 PCIe in NVLink-bridged pairs: a ring joins the pairs over PCIe/SHM, and NCCL's search settles on
    the speed every hop carries (search.cc ncclTopoCompute lowers it until a ring fits). The plan took the first
    pair's NVLinks (247 GB/s, 24 channels): NCCL's model priced Ring/Simple at 1 GiB 11x faster than simulated."""
    from collsim.backends.nccl.tuner import tuner_times

    sim = _sim("h100-pcie-nvlink-pair", gpus=8, sockets=2, pcie_switch=True, gpus_per_switch=2)
    plan = sim.nccl_plan
    assert plan.intra_hw != "NVLINK" and plan.intra_bw < 50e9 and plan.channels == 2
    assert any("leaves the NVLinks" in n for n in plan.notes)
    model = tuner_times(plan, sim.nccl_constants, "allreduce", 1 << 30, sim.nccl_options)[("Ring", "Simple")]
    simulated = sim.simulate_one("nccl", 1 << 30, choice=("Ring", "Simple")).time_s
    assert abs(model / simulated - 1) < 0.1, (model, simulated)
    # a pair alone is all NVLink, as before
    assert _sim("h100-pcie-nvlink-pair").nccl_plan.intra_hw == "NVLINK"
