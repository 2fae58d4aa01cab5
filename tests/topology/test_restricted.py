"""A sub-communicator's view of a cluster (:meth:`Topology.restricted`): the communicator's GPUs, every NIC, switch
and CPU, as NCCL's topology holds them."""

from __future__ import annotations

from pathlib import Path

import pytest

from collsim.topology import TopologyError, load_topology, topology_from_template
from collsim.topology.importer import template_from_nvidia_smi

FABRIC = {"topology": "rail_optimized", "transport": "rdma", "gpudirect": True}


def test_node_zeros_gpus_are_a_one_node_topology() -> None:
    four = load_topology("hgx-h100", nodes=4, fabric=FABRIC)
    one = load_topology("hgx-h100", nodes=1)
    view = four.restricted([g.name for g in four.gpus() if g.node == 0])
    assert view.nodes == 1 and view.fabric is None
    assert {d.name for d in view.devices()} == {d.name for d in one.devices()}
    assert sorted((a, b) for a, b in view.graph.edges) == sorted((a, b) for a, b in one.graph.edges)
    assert four.nodes == 4 and len(four.gpus()) == 32  # the cluster itself is unchanged


def test_one_gpu_a_node_keeps_its_near_nics_the_switches_and_the_fabric() -> None:
    four = load_topology("hgx-h100", nodes=4, fabric=FABRIC)
    view = four.restricted([f"n{n}/gpu3" for n in range(4)])
    assert [d.name for d in view.rank_devices()] == ["n0/gpu3", "n1/gpu3", "n2/gpu3", "n3/gpu3"]
    assert view.nodes == 4 and view.fabric == four.fabric
    # of a node's 8 NICs the two on GPU 3's PCIe switch (PIX); the others are PHB or SYS from it, which NCCL's
    # search takes only without a nearer solution
    assert {n: four.path_class("n1/gpu3", n) for n in view.nic_slots(1)} == {"n1/nic2": "PIX", "n1/nic3": "PIX"}
    gone = {g.name for g in four.gpus() if g.index != 3} | {n.name for n in four.nics() if n.index not in (2, 3)}
    assert {d.name for d in view.devices()} == {d.name for d in four.devices()} - gone
    assert not [e for e in view.graph.edges if "gpu0" in e[0] or "gpu0" in e[1]]  # the others' links are gone
    # the route from the GPU to its own NIC is the cluster's
    assert view.route("n1/gpu3", "n1/nic3") == four.route("n1/gpu3", "n1/nic3")
    # a GPU with only far NICs keeps them all (a PCIe box whose NIC hangs off the CPU)
    box = load_topology("pcie-workstation", nodes=2, fabric=FABRIC, node_params={"nic": "connectx-7-ndr"})
    assert box.restricted(["n0/gpu1", "n1/gpu1"]).nic_slots(0) == box.nic_slots(0)


def test_nodes_without_a_gpu_of_the_group_are_left_out_and_the_rest_renumbered() -> None:
    """A group on nodes 1 and 3 of four (HSDP's replica group when a shard group spans two nodes): a two-node
    cluster of nodes n0 (was n1) and n1 (was n3), with what was slowed on them."""
    from collsim.topology import LinkRule, perturb_links

    four = perturb_links(load_topology("hgx-h100", nodes=4, fabric=FABRIC), [LinkRule("n3/nic3", 0.25, kind="ib")])
    view = four.restricted(["n1/gpu3", "n3/gpu3"])
    assert view.nodes == 2 and view.fabric == four.fabric
    assert [(d.name, d.node) for d in view.rank_devices()] == [("n0/gpu3", 0), ("n1/gpu3", 1)]
    assert {d.node for d in view.devices()} == {-1, 0, 1}
    assert view.link("n1/nic3", "fabric/rail3").bandwidth == four.link("n3/nic3", "fabric/rail3").bandwidth
    assert view.link("n0/nic3", "fabric/rail3").bandwidth == four.link("n1/nic3", "fabric/rail3").bandwidth
    assert ("n1/nic3", "fabric/rail3") in view.scaled and ("n3/nic3", "fabric/rail3") not in view.scaled
    assert all(ln.src in view.graph and ln.dst in view.graph for ln in view.links())
    assert [ln.src for ln in view.route("n0/nic3", "n1/nic3")] == ["n0/nic3", "fabric/rail3"]
    # a NIC taken down on node 3 is node 1's in the view, its channels on the NIC standing in for it
    from collsim.topology import DownRule, take_down

    down = take_down(four, [DownRule("n3/nic3")]).restricted(["n1/gpu3", "n3/gpu3"])
    assert set(down.nic_substitutes) == {"n1/nic3"}
    dev, sub = down.nic_substitutes["n1/nic3"]
    assert dev.name == "n1/nic3" and dev.node == 1 and sub in down.graph and sub.startswith("n1/")
    assert "n1/nic3" in down.nic_slots(1) or sub in down.nic_slots(1)
    # one node elsewhere is a one-node topology like node 0's
    alone = four.restricted([f"n2/gpu{i}" for i in range(8)])
    node0 = four.restricted([f"n0/gpu{i}" for i in range(8)])
    assert alone.nodes == 1 and alone.fabric is None
    assert sorted(alone.graph.edges) == sorted(node0.graph.edges)


def test_gloos_view_keeps_every_nic() -> None:
    """Gloo's sockets leave by the host's route and its verbs contexts by the nearest RDMA NIC, not by NCCL's
    search: its view of a group keeps all of a node's NICs."""
    four = load_topology("hgx-h100", nodes=4, fabric=FABRIC)
    view = four.restricted([f"n{n}/gpu3" for n in range(4)], all_nics=True)
    assert [d.name for d in view.nics(1)] == [d.name for d in four.nics(1)]
    assert [d.name for d in view.rank_devices()] == [f"n{n}/gpu3" for n in range(4)]


def test_a_share_divides_links_memory_and_cores_and_nothing_else() -> None:
    """k communicators running the same collective at once: each sees 1/k of what they cross together."""
    two = load_topology("hgx-h100", nodes=2, fabric=FABRIC)
    nic = ("n0/nic0", "fabric/rail0")
    got = two.shared(links={nic: 2}, memory={"n1/cpu0": 8}, cores={0: 4})
    assert got.link(*nic).bandwidth == two.link(*nic).bandwidth / 2
    assert got.link("fabric/rail0", "n0/nic0") == two.link("fabric/rail0", "n0/nic0")  # one direction only
    assert got.device("n1/cpu0").spec["memory_bandwidth"] == two.device("n1/cpu0").spec["memory_bandwidth"] / 8
    assert got.device("n1/cpu1").spec == two.device("n1/cpu1").spec
    for cpu in ("n0/cpu0", "n0/cpu1"):
        assert got.device(cpu).spec["cores"] == two.device(cpu).spec["cores"] / 4
        assert got.device(cpu).spec["memory_bandwidth"] == two.device(cpu).spec["memory_bandwidth"]
    assert not got.scaled  # the same on every node: no perturbation for the engine to decouple
    assert two.link(*nic).bandwidth == 48e9  # the cluster itself is unchanged
    for bad, message in [({"links": {("n0/gpu0", "n1/gpu0"): 2}}, "no link"), ({"links": {nic: 0}}, ">= 1"),
                         ({"memory": {"n0/gpu0": 2}}, "not a CPU socket")]:  # fmt: skip
        with pytest.raises(TopologyError, match=message):
            two.shared(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        ([], "at least one GPU"),
        (["n0/gpu9"], "not GPUs of topology"),
        (["n0/nic0"], "not GPUs of topology"),
    ],
)
def test_bad_groups_are_refused(gpus: list[str], message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        load_topology("hgx-h100", nodes=2, fabric=FABRIC).restricted(gpus)


def test_a_nic_far_from_every_gpu_carries_no_channel() -> None:
    """NVIDIA/nccl#933's 8 x H800 node: eight NICs PIX to one GPU each and mlx5_0 on the CPU (NODE or SYS from every
    GPU). NCCL's search takes a NIC past PXN only without a nearer solution, so NCCL's channels use the eight."""
    path = Path(__file__).parent / "data" / "h800-9nic.nvidia-smi-topo.txt"
    t = template_from_nvidia_smi(path.read_text(), file=path, gpu="h100-sxm5-80gb", nic="connectx-7-ndr",
                                 cpu="xeon-8480")  # fmt: skip
    node = topology_from_template(t)
    assert node.far_nics(0) == ["n0/nic0"]
    assert node.nic_slots(0) == [f"n0/nic{i}" for i in range(1, 9)]
    assert node.far_nics(0, ["n0/gpu0"]) == [f"n0/nic{i}" for i in range(9) if i != 2]  # GPU 0 alone: its own NIC
    assert load_topology("hgx-h100").far_nics(0) == []  # every NIC of the shipped nodes is near a GPU
