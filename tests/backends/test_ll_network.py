"""LL across nodes: NCCL reads llMaxBw's multi-node columns by CPU vendor (tuning.cc), and a tree's network hop
streams at the ring's per-channel network figure (the proxy of one GPU sending one direction of one channel), the
two-node one at any node count."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from collsim.api import Simulator
from collsim.backends.nccl import REGISTRY
from collsim.backends.nccl.plan import cpu_vendor
from collsim.backends.nccl.simulate import _context

MiB = 2**20
GB = 1e9  # GB/s in NCCL's tables are 1e9 bytes/s


@pytest.mark.parametrize(("cpu", "vendor", "two_nodes", "more"), [("xeon-8480", "intel", 39.0, 20.4),
                                                                   ("epyc-7742", "amd", 22.5, 19.0)])
def test_multi_node_llmaxbw_is_the_cpu_vendors_row(cpu: str, vendor: str, two_nodes: float, more: float) -> None:
    """tuning.cc: index1 = nNodes == 1 ? GPU generation : (AMD or mixed ? 1 : 0); two HGX H100 boards (the generic
    template, H100 by default) with either CPU."""
    sim = Simulator.from_source("2node-h100-ib", ["cluster.node=hgx", f"cluster.node_params.cpu={cpu}"])
    plan, consts = sim.nccl_plan, sim.nccl_constants
    assert plan.cpu_vendor == vendor
    assert [consts.ll_bw(plan.arch, plan.cpu_vendor, i) / GB for i in range(3)] == [141.0, two_nodes, more]


def test_nccls_ring_ll_model_across_nodes_streams_at_the_cpu_rows_llmaxbw() -> None:
    """Ring/LL's model time is latency + bytes / (llMaxBw x n / nsteps) once llMaxBw binds: the difference between
    two sizes on two HGX H100 nodes (Intel hosts) gives 39 GB/s, not the Hopper row's 45."""
    sim = Simulator.from_source("2node-h100-ib")
    n = len(sim.nccl_plan.ranks)
    t = [sim.simulate_one("nccl", s, choice=("Ring", "LL")).predicted_s for s in (16 * MiB, 32 * MiB)]
    assert t[0] is not None and t[1] is not None
    algbw = 16 * MiB / (t[1] - t[0])
    assert algbw == pytest.approx(39.0 * GB * n / (2 * (n - 1)), rel=1e-9)


def test_ranks_on_different_cpu_vendors_are_mixed() -> None:
    """init.cc: a rank whose allgathered cpuVendor differs from its own sets MIXED (read as AMD's row)."""
    cpus = {"a": "intel", "b": "amd"}
    topo = SimpleNamespace(host_cpu=lambda g: SimpleNamespace(spec={"vendor": cpus[g]}))
    assert cpu_vendor(topo, ["a", "b"]) == "mixed"  # type: ignore[arg-type]
    assert cpu_vendor(topo, ["a", "a"]) == "intel"  # type: ignore[arg-type]


def test_a_trees_network_hop_streams_at_the_rings_per_channel_figure() -> None:
    """Tree/LL on two HGX H100 nodes: its network hops get llMaxBw / nChannels like the ring's, its hops inside a
    node half the one-node figure per channel, the two directions sharing the channel's threads (runTreeSplit; the
    root's down the whole)."""
    sim = Simulator.from_source("2node-h100-ib")
    plan, consts, opts = sim.nccl_plan, sim.nccl_constants, sim.options("nccl")
    caps = {}
    for algo in ("Tree", "Ring"):
        alg = REGISTRY[algo]
        ctx = _context(sim.topology, plan, opts, consts, alg, "LL", "allreduce", 4 * MiB)
        assert ctx.nc == 16
        caps[algo] = {(ro.net, ro.cap) for roles in alg.build(ctx).roles.values() for ro in roles.values()}
    per_channel = min(plan.channel_bw, 39.0 * GB / 16)
    inside = min(plan.channel_bw, 141.0 * GB / 16)
    assert caps["Tree"] == {(True, per_channel), (False, inside / 2), (False, inside)}
    assert (True, per_channel) in caps["Ring"]


@pytest.mark.parametrize("nodes", [3, 4, 16])
def test_a_network_hop_takes_the_two_node_figure_at_any_node_count(nodes: int) -> None:
    """The proxy's check of every LL line (net.cc) is per hop: on more than two HGX H100 nodes the network hops still
    stream at llMaxBw's two-node figure / nChannels (39 GB/s, Intel), while NCCL's model, which picks the algorithm,
    reads the lower figure (20.4 GB/s) for the whole collective."""
    sim = Simulator.from_source("2node-h100-ib", [f"cluster.nodes={nodes}"])
    plan, consts, opts = sim.nccl_plan, sim.nccl_constants, sim.options("nccl")
    for algo in ("Tree", "Ring"):
        alg = REGISTRY[algo]
        ctx = _context(sim.topology, plan, opts, consts, alg, "LL", "allreduce", 4 * MiB)
        net = {ro.cap for roles in alg.build(ctx).roles.values() for ro in roles.values() if ro.net}
        assert net == {min(plan.channel_bw, 39.0 * GB / ctx.nc)}, algo
    n = len(plan.ranks)
    t = [sim.simulate_one("nccl", s, choice=("Ring", "LL")).predicted_s for s in (16 * MiB, 32 * MiB)]
    assert t[0] is not None and t[1] is not None
    assert 16 * MiB / (t[1] - t[0]) == pytest.approx(20.4 * GB * n / (2 * (n - 1)), rel=1e-9)
