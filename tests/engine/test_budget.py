"""The work budget (collsim.engine.budget): limits on the flows of one simulation, and the heartbeat."""

from __future__ import annotations

import pickle

import pytest
import simpy

from collsim.api import Simulator
from collsim.engine import FluidNetwork
from collsim.engine.budget import Meter, WorkLimitExceeded, current_budget, work_budget
from collsim.parallel import map_points
from collsim.scenario import ScenarioError


def _flows(n: int, record: bool = False) -> FluidNetwork:
    env = simpy.Environment()
    net = FluidNetwork(env, record=record)
    link = net.resource("a->b", 1e9)
    for _ in range(n):
        net.transfer(1e6, [(link, 1.0)])
    env.run()
    return net


def test_no_limit_outside_a_budget() -> None:
    assert current_budget().max_flows is None and current_budget().max_records is None
    assert _flows(3 * Meter.EVERY + 5).flows == 3 * Meter.EVERY + 5


@pytest.mark.parametrize("limit", [1, 2, Meter.EVERY - 1, Meter.EVERY, Meter.EVERY + 1, 3 * Meter.EVERY + 7])
def test_the_flow_past_the_limit_stops_the_run(limit: int) -> None:
    """Exactly ``limit`` flows run; the next one raises, naming the field."""
    with work_budget(max_flows=limit):
        assert _flows(limit).flows == limit
        with pytest.raises(WorkLimitExceeded) as info:
            _flows(limit + 1)
    assert (info.value.flows, info.value.limit, info.value.field) == (limit + 1, limit, "engine.max_flows")
    assert f"more than {limit} flows (engine.max_flows)" in str(info.value)


def test_a_recorded_run_has_the_smaller_record_limit() -> None:
    with work_budget(max_flows=100, max_records=10):
        assert _flows(50).flows == 50  # not recording: 100
        with pytest.raises(WorkLimitExceeded, match=r"engine\.max_records"):
            _flows(11, record=True)
    with work_budget(max_flows=5, max_records=10), pytest.raises(WorkLimitExceeded, match=r"engine\.max_flows"):
        _flows(6, record=True)


def test_heartbeat_every_interval() -> None:
    beats: list[tuple[str, int, float, float]] = []
    with work_budget(heartbeat=lambda *a: beats.append(a), heartbeat_s=0.0, label="x"):
        _flows(3 * Meter.EVERY)
    assert [b[1] for b in beats] == [Meter.EVERY, 2 * Meter.EVERY, 3 * Meter.EVERY]
    assert all(b[0] == "x" and b[3] >= 0 for b in beats)


def test_the_error_survives_simpy_and_pickling() -> None:
    exc = WorkLimitExceeded(11, 10, "engine.max_flows", 2e-6)
    for copy in (type(exc)(*exc.args), pickle.loads(pickle.dumps(exc))):
        assert (copy.flows, copy.limit, copy.field, copy.simulated_s) == (11, 10, "engine.max_flows", 2e-6)
        assert str(copy) == str(exc)


def test_forked_workers_inherit_the_budget() -> None:
    def task(i: int) -> int:
        return current_budget().max_flows or 0

    with work_budget(max_flows=1234):
        done, _ = map_points(task, 2, jobs=2)
    assert done == {0: 1234, 1: 1234}


def test_scenario_limits_reach_the_simulation_as_a_one_line_error() -> None:
    """engine.max_flows stops a point with a ScenarioError naming the field, the point and how far it got;
    engine.max_records applies when recording; the defaults let the shipped cases run."""
    sim = Simulator.from_source("hgx-h100", ["engine.max_flows=1000"])
    with pytest.raises(ScenarioError, match=r"engine\.max_flows: gloo allreduce 1GiB \(symmetry on\) passed the limit "
                       r"of 1000 flows after [0-9.]+ us"):  # fmt: skip
        sim.simulate_one("gloo", 2**30)
    assert sim.simulate_one("nccl", 2**20).time_s > 0  # fewer flows
    rec = Simulator.from_source("hgx-h100", ["engine.max_records=100"])
    assert rec.simulate_one("nccl", 2**26).time_s > 0
    with pytest.raises(ScenarioError, match=r"engine\.max_records: .*every rank simulated"):
        rec.recorded("nccl", 2**26)
    default = Simulator.from_source("hgx-h100").scenario.engine
    assert (default.max_flows, default.max_records) == (20_000_000, 2_000_000)
    assert Simulator.from_source("hgx-h100", ["engine.max_flows=null"]).scenario.engine.max_flows is None


def test_the_flow_limit_on_a_slowed_link_suggests_decoupling() -> None:
    slow = ["cluster.nodes=4", "backends.nccl.env.NCCL_ALGO=Ring", "perturb.links=[{device: n1/nic2, scale: 0.5}]"]
    sim = Simulator.from_source("16node-h100-ib", [*slow, "engine.max_flows=2000"])
    with pytest.raises(ScenarioError, match=r"or --set engine\.decouple=true: the channels that reach a slowed link"):
        sim.simulate_one("nccl", 2**26)
    healthy = Simulator.from_source("16node-h100-ib", ["cluster.nodes=4", "engine.max_flows=10"])
    with pytest.raises(ScenarioError) as info:
        healthy.simulate_one("nccl", 2**26)
    assert "decouple" not in str(info.value)
