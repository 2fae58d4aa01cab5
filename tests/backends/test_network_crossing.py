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
