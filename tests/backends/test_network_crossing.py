"""A ring's network crossing pays NCCL's exposed network latency (the Tree row of hwLat NET, which tuning.cc uses
"with ppn=1 [where] latencies are fully exposed"), as a tree's does: the same GPU -> proxy -> NIC -> NIC -> GPU
path (``SimContext.hop_role``; docs/accuracy.md, "A ring's network crossing, exposed")."""

from __future__ import annotations

import pytest

from collsim.api import Simulator

RING = ["backends.nccl.env.NCCL_ALGO=Ring"]


@pytest.mark.parametrize(("proto", "crossing_us", "inside_us"), [("LL", 5.0, 1.0), ("LL128", 8.5, 1.9)])
def test_a_two_node_ring_all_gather_crosses_twice_at_the_exposed_latency(
    proto: str, crossing_us: float, inside_us: float
) -> None:
    # 2 x HGX H100, 16 ranks: the slowest chain of 15 steps takes 13 steps inside the nodes (NVLink hwLat, at least
    # netOverhead 1.0 us on Intel hosts for a multi-node ring, tuning.cc) and both crossings; base latency
    # Ring LL 6.6 / LL128 14.0 us. The Ring row's NET figures (2.7 / 4.0 us) would give 4.6 / 9.0 us less.
    sim = Simulator.from_source("2node-h100-ib", [*RING, f"backends.nccl.env.NCCL_PROTO={proto}"])
    base = {"LL": 6.6, "LL128": 14.0}[proto]
    expected = base + 13 * inside_us + 2 * crossing_us
    t = sim.simulate_one("nccl", 256, collective="allgather").time_s * 1e6  # 16 B a rank: nccl-tests' least
    assert t == pytest.approx(expected, abs=0.05)


def test_the_tuner_keeps_the_ring_row() -> None:
    # NCCL's cost model is not changed: its Ring closed form keeps its own NET figure (one crossing at 2.7 us)
    from collsim.backends.nccl import tuner_times

    sim = Simulator.from_source("2node-h100-ib")
    model = tuner_times(sim.nccl_plan, sim.nccl_constants, "allgather", 64, sim.nccl_options)
    assert model[("Ring", "LL")] * 1e6 == pytest.approx(6.6 + 14 * 1.0 + 2.7, abs=0.05)


def test_a_two_node_simple_ring_is_bound_by_its_chain_not_by_one_buffer() -> None:
    # 8 B, Ring/Simple on 2 x HGX H100: 30 steps a chain, 4 of them crossings at 14 us. A network connection holds
    # NCCL_STEPS steps at each end (net.cc: the sender's own buffer, the receiver's posted receives), 4 ring steps
    # of Simple's 4-step chunks: the sender waits for its step four back once per 4 steps, under the chain's pace.
    # With the receiver's 8 steps alone (2 ring steps) it waited every second step for one crossing: 15 x 15.7 us,
    # 247.3 us, 1.9x NCCL's own model (131.6 us); now 156.6 us, +19%.
    from collsim.backends.nccl import tuner_times

    sim = Simulator.from_source("2node-h100-ib", [*RING, "backends.nccl.env.NCCL_PROTO=Simple"])
    t = sim.simulate_one("nccl", 8, collective="allreduce").time_s
    model = tuner_times(sim.nccl_plan, sim.nccl_constants, "allreduce", 8, sim.nccl_options)[("Ring", "Simple")]
    assert model * 1e6 == pytest.approx(131.6, abs=0.05)
    assert t * 1e6 == pytest.approx(156.6, abs=0.05)
    assert t < 1.2 * model
