"""workload.root: broadcast and reduce start from (or end at) the scenario's root rank, on both backends, and the
record says which rank it was."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.scenario import ScenarioError

MiB = 2**20


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
@pytest.mark.parametrize(("root", "device"), [(0, "n0/gpu0"), (3, "n0/gpu3"), (9, "n1/gpu1")])
def test_broadcast_starts_at_the_root(backend: str, root: int, device: str) -> None:
    sim = Simulator.from_source("2node-h100-ib", ["workload.collective=broadcast", f"workload.root={root}"])
    out = sim.simulate_one(backend, MiB, record=True, symmetry=False)
    first = min((r for r in out.records if r.size > 0), key=lambda r: r.t_start)
    assert first.owner.device == device  # NCCL's chain's first send, Gloo's first copy out of the root's GPU
    assert sim.to_record(out).root == root


def test_reduce_ends_at_the_root_and_a_root_beyond_the_cluster_is_an_error() -> None:
    sim = Simulator.from_source("hgx-h100", ["workload.collective=reduce", "workload.root=5"])
    out = sim.simulate_one("nccl", MiB, record=True, symmetry=False)
    last = max((r for r in out.records if r.size > 0), key=lambda r: r.t_end)
    assert last.resources[-1].endswith("n0/gpu5")  # the chain's last hop lands on the root
    with pytest.raises(ScenarioError, match=r"workload\.root.*below 8"):
        Simulator.from_source("hgx-h100", ["workload.collective=reduce", "workload.root=8"])
