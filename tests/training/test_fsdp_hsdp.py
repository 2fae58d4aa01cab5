"""HYBRID_SHARD through the API: each collective simulated on its group's view of the cluster (a node's GPUs for
the all-gathers and reduce-scatters, one GPU a node for the all-reduce across the groups)."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.scenario import ScenarioError

SCENARIO = "fsdp-gpt2xl-2node-h100"
HYBRID = ["training.fsdp.sharding=hybrid_shard"]


def test_the_groups_are_a_node_and_one_gpu_a_node() -> None:
    sim = Simulator.from_source(SCENARIO, [*HYBRID, "cluster.nodes=4"])
    shard, replicas = sim._hsdp_groups()
    assert [d.name for d in shard.topology.rank_devices()] == [f"n0/gpu{i}" for i in range(8)]
    assert shard.topology.nodes == 1
    assert [d.name for d in replicas.topology.rank_devices()] == [f"n{n}/gpu0" for n in range(4)]
    # a node's all-gather is what a one-node cluster's is, exactly
    one = Simulator.from_source(SCENARIO, [*HYBRID, "cluster.nodes=1"])
    for kind in ("allgather", "reduce_scatter"):
        got = shard.simulate_one("nccl", 64 << 20, collective=kind, harness=False).time_s
        assert got == one.simulate_one("nccl", 64 << 20, collective=kind, harness=False).time_s
    # one GPU a node all-reduces through its own NIC: a ring's busbw is at most one 400 Gb/s port (50e9 B/s)
    ar = replicas.simulate_one("nccl", 256 << 20, collective="allreduce", harness=False)
    busbw = 2 * 3 / 4 * (256 << 20) / ar.time_s
    assert 0.8 * 50e9 < busbw <= 50e9


def test_hybrid_shard_runs_both_backends_and_says_what_its_groups_are() -> None:
    sim = Simulator.from_source(SCENARIO, HYBRID)
    nccl, gloo = sim.step()
    full_nccl, _ = Simulator.from_source(SCENARIO).step()
    assert nccl.iteration_s > 0 and gloo.iteration_s > nccl.iteration_s
    assert any("HSDP groups: all-gathers and reduce-scatters within a node's 8 GPU(s)" in n for n in nccl.notes)
    # the same units; with 2 nodes each all-reduce across the groups moves a node's shard over the network, where
    # FULL_SHARD's all-gathers and reduce-scatters cross it in full
    assert len(nccl.buckets) == len(full_nccl.buckets)
    assert {s.lane for s in nccl.spans} >= {"NCCL allreduce stream (HSDP)", "NCCL all-gather stream"}


CPU_RANKS = "scenarios/measurements/fsdp-cpu-2proc-mlp.scenario.yaml"


@pytest.mark.parametrize(
    ("scenario", "sets", "message"),
    [
        (CPU_RANKS, [], "hybrid_shard needs one rank per GPU"),
        (SCENARIO, ["perturb={ranks: [{rank: 1, launch_delay: 5us}]}"], "perturb.ranks"),
    ],
)
def test_what_hybrid_shard_does_not_model_is_refused(scenario: str, sets: list[str], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        Simulator.from_source(scenario, [*HYBRID, *sets]).step()
