"""NCCL's NVLS heads (issue 12): a node has at most NCCL_MAX_NVLS_ARITY = 32 of them (search.cc caps the NVLS graph's
channels, one head GPU each; connect.cc gives every other rank headRank -1, whose reduce warps stay idle in
all_reduce.h). Only heads load the switch's sums and multicast them; each kernel loop covers nHeads chunks and NCCL
sizes the chunk by channels x nHeads (enqueue.cc). Checked on GB200 NVL72's one node of 72 GPUs, where it matters,
and on nodes where every GPU is a head or the NICs decide."""

from __future__ import annotations

from typing import Any

import pytest

from collsim.api import Simulator
from collsim.backends.nccl import REGISTRY
from collsim.backends.nccl.plan import nvls_heads_by_node
from collsim.backends.nccl.simulate import _context

MIB, GIB = 1 << 20, 1 << 30
RACK = "scenarios/published/gb200_nvl72_1rack_coreweave.yaml"


def _nvls_roles(sim: Simulator, nbytes: int) -> tuple[Any, Any]:
    plan, consts, opts = sim.nccl_plan, sim.nccl_constants, sim.options("nccl")
    alg = REGISTRY["NVLS"]
    ctx = _context(sim.topology, plan, opts, consts, alg, "Simple", "allreduce", nbytes)
    return ctx, alg.build(ctx)


def test_a_node_has_at_most_32_heads() -> None:
    assert Simulator.from_source(RACK).nccl_constants.nvls_max_arity == 32
    assert Simulator.from_source(RACK).nccl_plan.nvls_head_count == 32
    assert Simulator.from_source("hgx-h100").nccl_plan.nvls_head_count == 8
    # across nodes, one head per NIC (the NICs' local GPUs): two NICs in use, two heads
    two = Simulator.from_source("2node-h100-ib", ["cluster.fabric.nics=[nic0,nic5]"])
    assert two.nccl_plan.nvls_head_count == 2


def test_the_first_32_gpus_reduce_and_multicast_the_rest_only_send_and_receive() -> None:
    """Per byte of a channel's slice, on its GPU's NVLinks: a head sends it up and its 1/32 share of the sum up for
    the multicast, and receives its share of the sum and the whole multicast; a GPU that is no head sends it up and
    receives the multicast. So the heads' shares add up to the slice once (bytes conserved)."""
    sim = Simulator.from_source(RACK)
    _ctx, layout = _nvls_roles(sim, GIB)
    ranks = sim.nccl_plan.ranks
    eff = sim.nccl_constants.nvls_efficiency[sim.nccl_plan.arch]

    def per_byte(gpu: str, role: str) -> float:
        return sum(c for _k, c in layout.roles[(0, gpu)][role].uses)

    links = per_byte(ranks[40], "rs") * eff  # a GPU that is no head: its slice up, nothing back
    head_rs, head_ag = per_byte(ranks[0], "rs"), per_byte(ranks[0], "ag")
    assert head_rs == pytest.approx(links * (1 + 1 / 32) / eff, rel=1e-12)
    assert head_ag == pytest.approx(links * (1 + 1 / 32) / eff, rel=1e-12)
    assert per_byte(ranks[40], "ag") == pytest.approx(links / eff, rel=1e-12)
    heads = [g for g in ranks if per_byte(g, "rs") > links / eff * (1 + 1e-9)]
    assert heads == ranks[:32]
    assert sum(per_byte(g, "rs") - links / eff for g in ranks) == pytest.approx(links / eff, rel=1e-9)


def test_the_chunk_is_sized_by_channels_times_heads() -> None:
    """enqueue.cc: NVLS's chunk starts at NCCL_NVLS_CHUNKSIZE (128 KiB in 2.26.2) and falls to 64 KiB while the
    buffer is under 64 x channels x nHeads x chunk (32 x 32: 8 GiB) and to 32 KiB under 8 x that x 64 KiB (512 MiB);
    a step of the simulation is one loop, nHeads chunks."""
    sim = Simulator.from_source(RACK)
    assert sim.options("nccl").version == (2, 26, 2)
    steps = {}
    for size in (256 * MIB, 512 * MIB, 4 * GIB, 8 * GIB):
        ctx, layout = _nvls_roles(sim, size)
        assert ctx.nc == 32
        steps[size] = REGISTRY["NVLS"].sim_chunking(ctx, layout).chunk_bytes / 32
    assert steps == {256 * MIB: 32 << 10, 512 * MIB: 64 << 10, 4 * GIB: 64 << 10, 8 * GIB: 128 << 10}


def test_a_node_that_lost_a_nic_gives_every_node_its_head_count() -> None:
    # 2 x HGX H100 on 4 NICs (nic0, 2, 4, 6): 4 heads a node. With n1/nic2 down node 1 has 3 (gpu0, 4, 6): NCCL keeps
    # the fewest heads of any node (connect.cc minHeadNum) and joins head c of every node in the trees, whichever
    # GPU it is (node 0's gpu2 with node 1's gpu4); it ran into a head node 1 did not have before (KeyError)
    sets = ["backends.nccl.env.NCCL_ALGO=NVLSTree", "cluster.fabric.nics_per_node=4"]
    down = Simulator.from_source("2node-h100-ib", [*sets, "perturb.down=[{device: n1/nic2}]"])
    three = Simulator.from_source("2node-h100-ib", [*sets[:1], "cluster.fabric.nics_per_node=3"])
    assert down.nccl_plan.nvls_head_count == three.nccl_plan.nvls_head_count == 3
    t = down.simulate_one("nccl", GIB).time_s
    assert t == pytest.approx(three.simulate_one("nccl", GIB).time_s, rel=1e-9)
    assert t > Simulator.from_source("2node-h100-ib", sets).simulate_one("nccl", GIB).time_s


def test_a_nic_down_on_a_node_of_a_nic_a_gpu_takes_its_gpu_out_of_the_heads() -> None:
    # 2 x HGX H100, 8 NICs: n1/nic2 down leaves node 1 7 NICs, whose local GPUs are its heads (NCCL lists no
    # inactive port; its NVLS search takes each listed NIC's GPU), and node 0 keeps 7 too (minHeadNum): as with
    # mlx5_4 (nic2) left out of both by NCCL_IB_HCA. All 8 stayed heads before, two on the NIC that stood in
    # (348.0 GB/s busbw at 1 GiB, now 470.9).
    down = Simulator.from_source("2node-h100-ib", ["perturb.down=[{device: n1/nic2}]"])
    hca = Simulator.from_source("2node-h100-ib", ["backends.nccl.env.NCCL_IB_HCA=^=mlx5_4"])
    assert down.nccl_plan.nvls_head_count == hca.nccl_plan.nvls_head_count == 7
    heads = nvls_heads_by_node(down.topology, [0, 1])
    # nic3, alone under gpu2's and gpu3's switch now, is the first one's (ncclTopoGetLocalGpu's first GPU whose
    # local NIC it is): gpu3 is no head
    assert "n1/gpu3" not in heads[1] and heads[1]["n1/gpu2"] == "n1/nic3" and len(heads[0]) == len(heads[1]) == 7
    t = down.simulate_one("nccl", GIB)
    assert t.algorithm == "NVLSTree"
    busbw = GIB / t.time_s * 2 * 15 / 16 / 1e9  # bytes/s -> GB/s (1e9 bytes), allreduce on 16 ranks
    assert busbw == pytest.approx(470.9, abs=0.1)
    assert t.time_s > Simulator.from_source("2node-h100-ib").simulate_one("nccl", GIB).time_s
