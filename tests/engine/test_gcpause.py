"""The collector relaxed for a simulation (collsim.engine.gcpause): thresholds, freezing, nesting, and the backends
holding it over their set-up."""

from __future__ import annotations

import gc

import pytest

from collsim.api import Simulator
from collsim.backends.nccl import algos as nccl_algos
from collsim.engine.gcpause import YOUNG_THRESHOLD, gc_relaxed


def test_thresholds_and_frozen_objects_come_back() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with gc_relaxed():
        assert gc.get_threshold()[0] >= YOUNG_THRESHOLD
        assert gc.get_freeze_count() >= frozen
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0  # the outermost exit returns every frozen object to the oldest generation


def test_a_nested_use_freezes_what_was_made_since_the_outer_one() -> None:
    with gc_relaxed():
        outer = gc.get_freeze_count()
        made = [[i] for i in range(1000)]  # containers the collector tracks
        with gc_relaxed():
            assert gc.get_freeze_count() >= outer + len(made)
            inner_threshold = gc.get_threshold()
        assert gc.get_threshold() == inner_threshold  # only the outermost restores
        assert made[999] == [999]
    assert gc.get_freeze_count() == 0


def test_nccl_set_up_runs_with_the_collector_relaxed(monkeypatch: pytest.MonkeyPatch) -> None:
    # the machines and routes of a large run are built before its clock starts: with the default young threshold
    # every older-generation pass walked them again
    seen: list[int] = []
    ring = nccl_algos.REGISTRY["Ring"]
    build = type(ring).build

    def spy(self: object, ctx: object) -> object:
        seen.append(gc.get_threshold()[0])
        return build(self, ctx)  # type: ignore[arg-type]

    monkeypatch.setattr(type(ring), "build", spy)
    sim = Simulator.from_source("hgx-h100", ["backends.nccl.env.NCCL_ALGO=Ring"])
    sim.simulate_one("nccl", 1 << 20)
    assert seen and all(t >= YOUNG_THRESHOLD for t in seen)
