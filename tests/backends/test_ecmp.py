"""Crossings between fabric leaves spread over every spine (equal-cost multipath), in the fluid limit."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.backends.common import fabric_uses, link_uses
from collsim.topology import DownRule, load_topology, take_down

#: 8 rails x 2 nodes over radix-4 spines: 4 spines, each rail leaf's uplink a quarter of its 2 NIC ports
FOUR_SPINES = {"topology": "rail_optimized", "transport": "rdma", "switch": {"radix": 4}}


def test_a_crossing_spreads_evenly_over_every_spine() -> None:
    topo = load_topology("hgx-h100", nodes=2, fabric=FOUR_SPINES)
    path = fabric_uses(topo, "n0/nic3", "n1/nic2")
    weights = {(k[1], k[2]): w for k, w in path.uses}
    spines = [f"fabric/spine{j}" for j in range(4)]
    assert weights == {
        ("n0/nic3", "fabric/rail3"): 1.0,
        **{("fabric/rail3", s): 0.25 for s in spines},
        **{(s, "fabric/rail2"): 0.25 for s in spines},
        ("fabric/rail2", "n1/nic2"): 1.0,
    }
    assert path.latency == pytest.approx(link_uses(topo.route("n0/nic3", "n1/nic2")).latency)
    # on one rail nothing crosses a spine
    assert fabric_uses(topo, "n0/nic2", "n1/nic2") == link_uses(topo.route("n0/nic2", "n1/nic2"))


def test_a_spine_uplink_down_spreads_over_the_others() -> None:
    topo = load_topology("hgx-h100", nodes=2, fabric=FOUR_SPINES)
    topo = take_down(topo, [DownRule("fabric/rail3", peer="fabric/spine0")])
    up = {k[2]: w for k, w in fabric_uses(topo, "n0/nic3", "n1/nic2").uses if k[1] == "fabric/rail3"}
    assert up == pytest.approx({f"fabric/spine{j}": 1 / 3 for j in (1, 2, 3)})


def _alltoall_time(radix: int) -> float:
    over = ["workload.collective=alltoall", "backends.gloo.enabled=false", "cluster.node=hgx-h100",
            "backends.nccl.env.NCCL_PXN_DISABLE=1", "cluster.fabric.topology=rail_optimized",
            f"cluster.fabric.switch.radix={radix}"]  # fmt: skip
    sim = Simulator.from_source("2node-h100-ib", over)
    assert len([d for d in sim.topology.devices("switch") if d.spec["tier"] == "spine"]) == (4 if radix == 4 else 1)
    return sim.simulate_one("nccl", 256 << 20).time_s


def test_cross_rail_traffic_gets_the_whole_bisection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without PXN an all-to-all's sends leave by the sender's NIC and cross rails: 4 spines of C/4 each carry them
    as one spine of C does (the one-spine fabric is radix 64's); a static route through spine 0 alone is slower."""
    four, one = _alltoall_time(4), _alltoall_time(64)
    assert four == pytest.approx(one, rel=1e-9)
    import collsim.backends.nccl.plan as plan

    monkeypatch.setattr(plan, "fabric_uses", lambda topo, a, b: link_uses(topo.route(a, b)))
    assert _alltoall_time(4) > 1.5 * four
