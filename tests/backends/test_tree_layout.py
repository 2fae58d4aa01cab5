"""NCCL's tree layout (connect.cc connectTrees): the graph's channels run tree 0 and their copies, channel c +
nChannels on the same graph channel (NIC and chain), run tree 1. Every NIC carries one channel of each tree, and a
collective that runs on at most half the channels (the small-size shrink) runs on tree 0 alone. NVLSTree alternates
by channel parity instead (connect.cc ``treeUp[c%2]``)."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.backends.nccl.trees import binary_tree, tree_links

FOUR_NODES = "scenarios/validation/h100_4node_vm_ib_ndr_issue309.yaml"


def _nic(sim: Simulator, c: int, node: int) -> str | None:
    return sim.nccl_plan.nic_for(sim.topology, node, c)


def _head(sim: Simulator, parent: dict[str, str | None], node: int) -> str:
    """The GPU of ``node`` whose parent is on another node (or none: the root's head)."""
    topo = sim.topology
    return next(g for g in sim.nccl_plan.ranks if topo.device(g).node == node and
                ((up := parent[g]) is None or topo.device(up).node != node))  # fmt: skip


def _node(sim: Simulator, gpu: str | None) -> int | None:
    return None if gpu is None else sim.topology.device(gpu).node


def test_a_channel_and_its_copy_share_the_nic_and_chain_and_run_the_two_trees() -> None:
    sim = Simulator.from_source(FOUR_NODES)
    plan, topo = sim.nccl_plan, sim.topology
    half = plan.channels // 2
    assert plan.nnodes == 4 and plan.channels == 16
    for c in range(half):
        parent0, _kids0 = tree_links(plan, c, topo)
        parent1, _kids1 = tree_links(plan, c + half, topo)
        for node in range(plan.nnodes):
            assert _nic(sim, c, node) == _nic(sim, c + half, node)
        # across nodes the heads follow tree 0 in channel c, tree 1 in its copy
        for node in range(plan.nnodes):
            assert _node(sim, parent0[_head(sim, parent0, node)]) == binary_tree(node, plan.nnodes, mirror=False)[0]
            assert _node(sim, parent1[_head(sim, parent1, node)]) == binary_tree(node, plan.nnodes, mirror=True)[0]


def test_each_nic_sends_one_channel_of_each_tree() -> None:
    """Per pair of channels on a NIC, an inner node sends 3 slices (up, and down to two children) in one tree and 1
    in the other: 4 in all. Both channels on one tree (the parity layout collsim had) would give it 6."""
    sim = Simulator.from_source(FOUR_NODES)
    plan, topo = sim.nccl_plan, sim.topology
    half = plan.channels // 2
    for node in range(plan.nnodes):
        for c in range(half):
            sends = 0
            for ch in (c, c + half):
                parent, kids = tree_links(plan, ch, topo)
                head = _head(sim, parent, node)
                off_node = [k for k in kids[head] if topo.device(k).node != node]
                sends += (parent[head] is not None) + len(off_node)
            assert sends == (4 if node in (1, 2) else 2), (node, c, sends)  # inner in one tree, leaf in the other


@pytest.mark.parametrize(("nbytes", "shrunk"), [(64 * 1024, True), (1 << 30, False)])
def test_a_shrunk_tree_runs_tree_0_alone(nbytes: int, shrunk: bool) -> None:
    """Tree/Simple at 64 KiB runs 2 of the 16 channels (bytes < channels x 512 threads x 64 B): both on tree 0, as
    NCCL's channels 0 and 1 are; at 1 GiB all 16, eight on each tree."""
    sim = Simulator.from_source(FOUR_NODES)
    plan, topo = sim.nccl_plan, sim.topology
    channels = sim.simulate_one("nccl", nbytes, choice=("Tree", "Simple")).channels or 0
    assert (channels <= plan.channels // 2) == shrunk
    # node 0 is tree 0's root and a leaf of tree 1 (4 nodes): its head has a parent in tree 1 only
    trees = [tree_links(plan, c, topo)[0][_head(sim, tree_links(plan, c, topo)[0], 0)] is not None
             for c in range(channels)]  # fmt: skip
    assert trees.count(True) == (0 if shrunk else channels // 2)
