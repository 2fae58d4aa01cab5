"""A perturbed cluster against its closed form (issue 13): one NIC at half rate bounds the ring."""

from __future__ import annotations

import pytest

from collsim.api import Simulator

GiB = 2**30


def _two_nodes(perturb: dict | None, extra: dict | None = None) -> Simulator:  # type: ignore[type-arg]
    scenario = {
        "name": "p",
        "cluster": {"node": "hgx-h100", "nodes": 2, "fabric": {"topology": "rail_optimized"}},
        "backends": {"nccl": {"env": {"NCCL_ALGO": "Ring"}}},
        "engine": extra or {},
    }
    if perturb is not None:
        scenario["perturb"] = perturb
    return Simulator.from_source(scenario)


def _plateau(sim: Simulator) -> float:
    """Marginal ring busbw between 1 and 2 GiB, bytes/s."""
    t1, t2 = (sim.simulate_one("nccl", s, choice=("Ring", "Simple")).time_s for s in (GiB, 2 * GiB))
    n = len(sim.nccl_plan.ranks)
    return GiB * 2 * (n - 1) / n / (t2 - t1)


def test_one_nic_at_half_rate_bounds_the_ring_at_its_channels_share() -> None:
    # 16 channels, 2 per NIC (NIC c mod 8). NCCL gives every channel the same bytes, so the ring runs at its slowest
    # channel: the two on n1/nic2 get half of a 400 Gb/s port's delivered rate each. Closed form:
    # busbw = channels x min(r0, 0.5 x port / 2), with r0 = the healthy ring's per-channel busbw
    healthy = _two_nodes(None)
    plan = healthy.nccl_plan
    port = healthy.topology.link("n1/nic2", "fabric/rail2").bandwidth
    r0 = _plateau(healthy) / plan.channels
    slow = _two_nodes({"links": [{"device": "n1/nic2", "kind": "ib", "scale": 0.5}]})
    expected = plan.channels * min(r0, 0.5 * port / 2)
    assert _plateau(slow) == pytest.approx(expected, rel=0.01)
    assert _plateau(slow) < 0.55 * _plateau(healthy)


def test_perturbed_symmetry_is_exact() -> None:
    # the slow NIC splits the symmetry classes; the quotient must still equal the full simulation
    rule = {"links": [{"device": "n1/nic2", "kind": "ib", "scale": 0.5}]}
    on, off = _two_nodes(rule), _two_nodes(rule, {"symmetry": False})
    for size in (4096, 3 * 2**20):
        a, b = on.simulate_one("nccl", size), off.simulate_one("nccl", size)
        assert a.time_s == pytest.approx(b.time_s, rel=1e-9)
        assert a.classes < b.classes


def test_a_random_nic_is_the_same_nic_for_the_same_seed() -> None:
    rule = {"links": [{"device": "n*/nic*", "kind": "ib", "scale": 0.5, "choose": 1}], "seed": 11}
    a, b = _two_nodes(rule), _two_nodes(rule)
    slow = [ln for ln in a.topology.links() if ln.kind == "ib" and ln.efficiency < 0.5]
    assert len(slow) == 2 and [ln.src for ln in slow] == [ln.src for ln in b.topology.links() if ln.efficiency < 0.5]


def test_a_rule_matching_nothing_is_one_scenario_error() -> None:
    from collsim.scenario import ScenarioError

    with pytest.raises(ScenarioError) as info:
        _two_nodes({"links": [{"device": "n1/nic2", "scale": 0.5}, {"device": "n9/nic2", "scale": 0.5}]})
    assert info.value.field == "perturb.links[1].device" and "n9/nic2" in str(info.value)
    with pytest.raises(ScenarioError) as info:  # the schema refuses a scale that is not positive
        _two_nodes({"links": [{"device": "n1/nic2", "scale": 0}]})
    assert info.value.field == "perturb.links[0].scale"


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_a_straggler_adds_its_delay_to_a_small_allreduce(backend: str) -> None:
    # rank 3 of one HGX H100 launches 20 us late: at 8 B every rank waits for it, so the allreduce ends 20 us later
    # (to a nanosecond), with the symmetry reduction on (rank 3 splits off its ring) as without it
    scenario = {"name": "s", "cluster": {"node": "hgx-h100"}, "backends": {"nccl": {}, "gloo": {}}}
    late = {**scenario, "perturb": {"ranks": [{"rank": 3, "launch_delay": "20us"}]}}
    t0 = Simulator.from_source(scenario).simulate_one(backend, 8).time_s
    on = Simulator.from_source(late).simulate_one(backend, 8)
    off = Simulator.from_source({**late, "engine": {"symmetry": False}}).simulate_one(backend, 8)
    assert on.time_s == pytest.approx(t0 + 20e-6, abs=1e-9)
    assert off.time_s == pytest.approx(on.time_s, rel=1e-9) and on.classes <= off.classes
    rec = Simulator.from_source(late).simulate_one(backend, 8, record=True)
    waits = [r for r in rec.records if r.tag.label == "straggler delay"]
    assert waits and {r.owner.rank for r in waits} == {3}
    assert all(r.t_end - r.t_start == pytest.approx(20e-6) for r in waits)


def test_straggler_rank_out_of_range_is_one_error() -> None:
    from collsim.scenario import ScenarioError

    late = {"name": "s", "cluster": {"node": "hgx-h100"}, "perturb": {"ranks": [{"rank": 8, "launch_delay": "5us"}]}}
    with pytest.raises(ScenarioError) as info:
        Simulator.from_source(late)
    assert info.value.field == "perturb.ranks[0].rank" and "below 8" in str(info.value)
