"""NCCL's cost model latencies as tuning.cc (v2.30.7-1, lines 386-430) writes them, for the algorithms whose formulas
are not the ring's: checked as closed forms on NCCL's own tables (``NcclConstants``), at 8 bytes where the
bandwidth term is nanoseconds."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.backends.nccl import tuner_times

US = 1e-6
#: one-GPU nodes (a PCIe workstation each, a 100 GbE NIC): one rank per node, where PAT runs
ONE_PER_NODE = ["cluster.node=pcie-workstation", "cluster.node_params.gpus=1", "cluster.node_params.nic=eth-100g"]


def _times(sim: Simulator, collective: str, nbytes: int = 8) -> dict[tuple[str, str], float]:
    return tuner_times(sim.nccl_plan, sim.nccl_constants, collective, nbytes, sim.nccl_options)


@pytest.mark.parametrize("nodes", [2, 5, 16])
def test_pat_latency_has_nccls_linear_part(nodes: int) -> None:
    """PAT: baseLat + log2i(nNodes) x (interLat / 3.5) + nRanks x 2.8 us; interLat is Tree's network step with one
    rank per node (2.23 on) plus twice the NIC's reported latency for Simple (0 here)."""
    sim = Simulator.from_source("2node-a100-tcp", [*ONE_PER_NODE, f"cluster.nodes={nodes}"])
    c = sim.nccl_constants
    inter = c.hw_latency["NET"]["Tree"]["Simple"]
    expected = c.base_latency["PAT"]["Simple"] + (nodes.bit_length() - 1) * inter / 3.5 + nodes * 2.8 * US
    t = _times(sim, "allgather")[("PAT", "Simple")]
    assert t == pytest.approx(expected, abs=1e-8)  # the bandwidth term of 8 bytes: < 10 ns


def test_ring_broadcast_latency_is_one_step() -> None:
    """Broadcast and reduce run the ring as a chain: baseLat + one hwLat of the ring's class (NVLink on one node,
    NET across), not one per rank."""
    one = Simulator.from_source("hgx-h100")
    two = Simulator.from_source("2node-h100-ib")
    for sim, hw in ((one, "NVLINK"), (two, "NET")):
        c = sim.nccl_constants
        for proto in ("LL", "Simple"):
            t = _times(sim, "broadcast")[("Ring", proto)]
            assert t == pytest.approx(c.base_latency["Ring"][proto] + c.hw_latency[hw]["Ring"][proto], abs=1e-8)


def test_nvlstree_latency_takes_the_floor_of_log2() -> None:
    """NVLSTree: baseLat + intraLat + 2 x log2i(nNodes) x interLat; three nodes price one tree level, as two do."""
    lat = {}
    for nodes in (2, 3, 4):
        sim = Simulator.from_source("2node-h100-ib", [f"cluster.nodes={nodes}"])
        c = sim.nccl_constants
        t = _times(sim, "allreduce")[("NVLSTree", "Simple")]
        lat[nodes] = t
        levels = nodes.bit_length() - 1
        expected = (c.base_latency["NVLSTree"]["Simple"] + c.hw_latency["NVLINK"]["NVLSTree"]["Simple"]
                    + 2 * levels * c.hw_latency["NET"]["NVLSTree"]["Simple"])  # fmt: skip
        assert t == pytest.approx(expected, abs=1e-8)
    assert lat[3] == pytest.approx(lat[2], abs=1e-8) and lat[4] > lat[3]


def test_nvlstree_latency_is_linear_in_the_nodes_in_2_18() -> None:
    """NCCL 2.18 (v2.18.6-1 tuning.cc line 238): NVLSTree's latency baseLat + 2 (nNodes - 1) x interLat; the log2i
    form came with 2.19.1 (collsim gave 2.18 the later one: 175 us where 2.18 prices 593 on 16 H100 nodes)."""
    sim = Simulator.from_source("16node-h100-ib", ["backends.nccl.version='2.18.6'"])
    t = sim.nccl_tuner_table("allreduce")[("NVLSTree", "Simple")][0]
    assert t == pytest.approx((23.0 + 2 * 15 * 19.0) * 1e-6, rel=1e-9)  # baseLat 23, hwLat[NET][NVLSTree] 19 us


def test_collnet_direct_latency_has_the_arity_term() -> None:
    """CollNetDirect: baseLat + 2 x (min(1, ppn - 1) x intraLat + (ppn - 1) x 0.4 us) + interLat; Chain:
    baseLat + 2 (ppn - 1) intraLat + interLat."""
    sim = Simulator.from_source(
        "2node-a100-ib", ["cluster.fabric.in_network_reduction=true", "backends.nccl.env.NCCL_COLLNET_ENABLE=1"]
    )
    c, ppn = sim.nccl_constants, sim.nccl_plan.ppn
    times = _times(sim, "allreduce")
    for algo in ("CollNetDirect", "CollNetChain"):
        intra = c.hw_latency["NVLINK"][algo]["Simple"]
        inter = c.hw_latency["NET"][algo]["Simple"]
        if algo == "CollNetDirect":
            expected = 2 * (intra + (ppn - 1) * 0.4 * US) + inter
        else:
            expected = 2 * (ppn - 1) * intra + inter
        assert times[(algo, "Simple")] == pytest.approx(c.base_latency[algo]["Simple"] + expected, abs=1e-8)
