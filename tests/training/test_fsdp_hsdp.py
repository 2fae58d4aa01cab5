"""HYBRID_SHARD through the API: each collective simulated on its group's view of the cluster (a node's GPUs for
the all-gathers and reduce-scatters, one GPU a node for the all-reduce across the groups)."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.results.step import StepRow, format_step
from collsim.scenario import ScenarioError

SCENARIO = "fsdp-gpt2xl-2node-h100"
HYBRID = ["training.fsdp.sharding=hybrid_shard"]


def test_the_groups_are_a_node_and_one_gpu_a_node() -> None:
    sim = Simulator.from_source(SCENARIO, [*HYBRID, "cluster.nodes=4"])
    groups = sim._hsdp_groups("nccl")
    shard, replicas = groups.shard, groups.replicas
    assert [d.name for d in shard.topology.rank_devices()] == [f"n0/gpu{i}" for i in range(8)]
    assert shard.topology.nodes == 1
    assert len(replicas) == 8
    assert [d.name for d in replicas[3].topology.rank_devices()] == [f"n{n}/gpu3" for n in range(4)]
    # a node's all-gather is what a one-node cluster's is, exactly
    one = Simulator.from_source(SCENARIO, [*HYBRID, "cluster.nodes=1"])
    for kind in ("allgather", "reduce_scatter"):
        got = shard.simulate_one("nccl", 64 << 20, collective=kind, harness=False).time_s
        assert got == one.simulate_one("nccl", 64 << 20, collective=kind, harness=False).time_s
    # one GPU a node all-reduces through its switch's two NICs, which the switch's other GPU's group crosses too
    # (each group gets half of each): a ring's busbw is at most the GPU's 48 GB/s PCIe link, which binds first
    ar = replicas[0].simulate_one("nccl", 256 << 20, collective="allreduce", harness=False)
    busbw = 2 * 3 / 4 * (256 << 20) / ar.time_s
    assert 0.8 * 48e9 < busbw <= 48e9
    assert groups.shared == {2: 32}  # per pair of groups: 2 NICs x (fabric, PCIe) x 2 directions = 8; 4 pairs


def test_hybrid_shard_runs_both_backends_and_says_what_its_groups_are() -> None:
    sim = Simulator.from_source(SCENARIO, HYBRID)
    nccl, gloo = sim.step()
    full_nccl, _ = Simulator.from_source(SCENARIO).step()
    assert nccl.iteration_s > 0 and gloo.iteration_s > nccl.iteration_s
    assert any("HSDP groups: all-gathers and reduce-scatters within shard groups of 8 GPU(s) on 1 node(s); each "
               "all-reduce across the 2 GPU(s) of a replica group (2 node(s)) takes the slowest of the 8" in n
               for n in nccl.notes)  # fmt: skip
    # the same units; with 2 nodes each all-reduce across the groups moves a node's shard over the network, where
    # FULL_SHARD's all-gathers and reduce-scatters cross it in full
    assert len(nccl.buckets) == len(full_nccl.buckets)
    assert {s.lane for s in nccl.spans} >= {"NCCL allreduce stream (HSDP)", "NCCL all-gather stream"}
    # the unit table says what its comm column times
    text = format_step([StepRow("", nccl)], name="x", model="gpt2-xl", style="fsdp")
    assert "# units' reductions, nccl (ms from the iteration's start; comm: the reduce-scatter and allreduce across " \
        "groups alone)" in text
    assert "comm: the reduce-scatter alone" in format_step([StepRow("", full_nccl)], name="x", model="m", style="fsdp")


def test_groups_that_share_a_nic_get_half_of_it_each() -> None:
    """With one NIC a PCIe switch (fabric.nics_per_switch 1) the groups of the switch's two GPUs all-reduce
    through the same NIC at the same time: each gets half of its 48 GB/s. Two ranks' ring all-reduce moves the
    whole buffer each way over the NIC (algbw = the NIC's rate), so algbw is 24 GB/s; alone it would be 48."""
    sim = Simulator.from_source(SCENARIO, [*HYBRID, "cluster.fabric.nics_per_switch=1"])
    groups = sim._hsdp_groups("nccl")
    nbytes = 256 << 20
    algbw = [nbytes / g.simulate_one("nccl", nbytes, collective="allreduce", harness=False).time_s
             for g in groups.replicas]  # fmt: skip
    assert all(0.97 * 24e9 < bw <= 24e9 for bw in algbw)
    alone = sim._on_topology(sim.topology.restricted(["n0/gpu0", "n1/gpu0"]))
    assert nbytes / alone.simulate_one("nccl", nbytes, collective="allreduce", harness=False).time_s > 0.97 * 48e9
    # NCCL plans on the NIC's nominal rate: 4 ring channels as alone (planned on the halved NIC it would take 2)
    assert groups.replicas[0].nccl_plan_facts() == alone.nccl_plan_facts()
    assert groups.replicas[0].nccl_plan_facts()["ring_channels"] == 4
    assert sim._on_topology(groups.replicas[0].topology).nccl_plan_facts()["ring_channels"] == 2


def test_groups_crossing_an_oversubscribed_fat_tree_share_its_spine() -> None:
    """A fat tree of 16-port leaves (8 NICs each: one node a leaf) at 4:1 has 8 x 48 / 4 = 96 GB/s from a leaf to
    its spine. Alone a group would cross it at its NICs' rate; the 8 groups crossing together get 12 GB/s each, and a
    two-rank ring all-reduce's algbw is that rate."""
    fabric = "cluster.fabric={topology: fat_tree, transport: rdma, switch: {radix: 16}, oversubscription: 4}"
    sim = Simulator.from_source(SCENARIO, [*HYBRID, fabric])
    assert sim.topology.link("fabric/leaf0", "fabric/spine0").bandwidth == 96e9
    groups = sim._hsdp_groups("nccl")
    nbytes = 256 << 20
    for g in groups.replicas:
        assert g.topology.link("fabric/leaf0", "fabric/spine0").bandwidth == 96e9 / 8
        seconds = g.simulate_one("nccl", nbytes, collective="allreduce", harness=False).time_s
        assert 0.97 * 12e9 < nbytes / seconds <= 12e9
    assert groups.shared == {2: 32, 8: 4}  # 2 leaves x 2 directions of switch-to-switch links, by all 8 groups


def test_gloos_groups_all_leave_by_the_nodes_first_nic() -> None:
    """Gloo's sockets take the host's route, the node's first NIC, for every process: all 8 replica groups cross
    it, and each node's socket memory and cores their copies and sockets use."""
    sim = Simulator.from_source(SCENARIO, HYBRID)
    groups = sim._hsdp_groups("gloo")
    cores = sim.topology.device("n1/cpu0").spec["cores"]
    for g in groups.replicas:
        assert g.topology.link("n1/nic0", "fabric/rail0").bandwidth == 48e9 / 8
        assert g.topology.device("n1/cpu0").spec["cores"] == cores / 8
    # GPUs 0-3 stage through socket 0's memory, 4-7 through socket 1's (4 groups each), and 4-7 cross to NIC 0 over
    # the sockets' link; a PCIe switch's link to its socket carries its two GPUs' copies (2)
    assert groups.shared == {8: 7, 4: 4, 2: 6}
    (gloo,) = Simulator.from_source(SCENARIO, HYBRID).step(["gloo"])
    assert any("shared by 8 groups" in n for n in gloo.notes)


def test_a_slow_nic_slows_the_all_reduce_of_the_group_that_crosses_it() -> None:
    """Each all-reduce across the groups costs the slowest replica group's: a NIC at a quarter of its rate on node 1
    slows the group of the GPU it serves (GPU 3 runs its channels over its switch's two NICs, 2 and 3, behind its
    48 GB/s PCIe link: at half rate NIC 3 would still keep up), and with it every unit's all-reduce."""

    def ar_seconds(sets: list[str]) -> list[float]:
        (nccl,) = Simulator.from_source(SCENARIO, [*HYBRID, *sets]).step(["nccl"])
        return [s.end - s.start for s in nccl.spans if s.label.startswith("allreduce across groups")]

    healthy = ar_seconds([])
    slow = ar_seconds(["perturb={links: [{device: n1/nic3, kind: ib, scale: 0.25}]}"])
    assert len(slow) == len(healthy) and all(b >= a for a, b in zip(healthy, slow, strict=True))
    assert sum(slow) > 1.2 * sum(healthy)


def test_a_device_mesh_makes_shard_groups_of_any_whole_nodes_or_part_of_one() -> None:
    """training.fsdp.shard_group n: DeviceMesh (world / n, n), shard groups of n consecutive ranks and replica
    groups of ranks j, j+n, ... Sixteen on four HGX H100 nodes: shard groups of two nodes, and replica groups of one
    GPU on every other node, each on a view of its two nodes; such a group all-reduces as a two-node cluster's
    does, in the same company (every node holds 8 replica groups sharing its NICs two by two)."""
    four = Simulator.from_source(SCENARIO, [*HYBRID, "cluster.nodes=4", "training.fsdp.shard_group=16"])
    groups = four._hsdp_groups("nccl")
    assert groups.shard.topology.nodes == 2 and len(groups.shard.topology.rank_devices()) == 16
    assert len(groups.replicas) == 16
    view = groups.replicas[9].topology  # ranks 9 and 25: n1/gpu1 and n3/gpu1, renumbered
    assert view.nodes == 2 and [d.name for d in view.rank_devices()] == ["n0/gpu1", "n1/gpu1"]
    two = Simulator.from_source(SCENARIO, HYBRID)._hsdp_groups("nccl")
    for size in (1 << 20, 64 << 20):
        got = {g.simulate_one("nccl", size, collective="allreduce", harness=False).time_s for g in groups.replicas}
        assert got == {g.simulate_one("nccl", size, collective="allreduce", harness=False).time_s
                       for g in two.replicas}  # fmt: skip
    assert groups.shared == two.shared == {2: 32}
    # four GPUs: half a node shards, and each replica group holds two GPUs of every node
    half = Simulator.from_source(SCENARIO, [*HYBRID, "cluster.nodes=4", "training.fsdp.shard_group=4"])
    groups = half._hsdp_groups("nccl")
    assert [d.name for d in groups.shard.topology.rank_devices()] == [f"n0/gpu{i}" for i in range(4)]
    assert [d.name for d in groups.replicas[1].topology.rank_devices()] == [
        f"n{n}/gpu{i}" for n in range(4) for i in (1, 5)
    ]
    (nccl,) = half.step(["nccl"])
    assert any("within shard groups of 4 GPU(s) on 1 node(s)" in n for n in nccl.notes)


def test_shard_groups_across_nodes_share_the_leaves_they_both_cross() -> None:
    """Fat-tree leaves of 24 ports (12 NICs) at 4:1, 144 GB/s up each (72 to each of 2 spines): node 0 and NICs 0-3
    of node 1 on leaf 0, NICs 4-7 of node 1 and node 2 on leaf 1, node 3 on leaf 2. Shard groups of two nodes: the
    first (nodes 0, 1) crosses between leaves 0 and 1 on NIC slots 4-7, the second (nodes 2, 3) between leaves 1
    and 2, so each gets half of leaf 1's uplinks. A two-node ring all-gather sends half its busbw through them
    (4 of 8 slots, 2 channels each): alone busbw <= 2 x 144 = 288 GB/s, shared 2 x 72 = 144."""
    fabric = "cluster.fabric={topology: fat_tree, transport: rdma, switch: {radix: 24}, oversubscription: 4}"
    sim = Simulator.from_source(SCENARIO, [*HYBRID, "cluster.nodes=4", "training.fsdp.shard_group=16", fabric])
    shard = sim._hsdp_groups("nccl").shard
    assert [shard.topology.link("fabric/leaf1", f"fabric/spine{i}").bandwidth for i in (0, 1)] == [36e9, 36e9]
    assert shard.topology.link("fabric/leaf0", "fabric/spine0").bandwidth == 72e9
    alone = sim._on_topology(sim.topology.restricted([d.name for d in sim.topology.rank_devices()][:16]))
    nbytes = 256 << 20

    def busbw(s: Simulator) -> float:
        return 15 / 16 * nbytes / s.simulate_one("nccl", nbytes, collective="allgather", harness=False).time_s

    assert 0.95 * 288e9 < busbw(alone) <= 288e9
    assert 0.95 * 144e9 < busbw(shard) <= 144e9
    assert shard.nccl_plan_facts() == alone.nccl_plan_facts()


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["training.fsdp.shard_group=3"], "must divide the world"),
        (["training.fsdp.shard_group=12", "cluster.nodes=3"], "divide or be a multiple of the GPUs of a node"),
        (["training.fsdp.sharding=full_shard", "training.fsdp.shard_group=8"], "applies to hybrid_shard only"),
    ],
)
def test_a_shard_group_that_no_mesh_makes_is_refused(sets: list[str], message: str) -> None:
    with pytest.raises(ScenarioError, match=message) as err:
        Simulator.from_source(SCENARIO, [*HYBRID, *sets]).step()
    assert err.value.field == "training.fsdp.shard_group"


CPU_RANKS = "scenarios/measurements/fsdp-cpu-2proc-mlp.scenario.yaml"


@pytest.mark.parametrize(
    ("scenario", "sets", "message"),
    [
        (CPU_RANKS, [], "hybrid_shard needs one rank per GPU"),
        (SCENARIO, ["perturb={ranks: [{rank: 1, launch_delay: 5us}]}"], "perturb.ranks"),
    ],
)
def test_what_hybrid_shard_does_not_model_is_refused(scenario: str, sets: list[str], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        Simulator.from_source(scenario, [*HYBRID, *sets]).step()
