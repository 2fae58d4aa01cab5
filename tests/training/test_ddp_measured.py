"""Issue 14's acceptance on this machine: real DDP iterations (``collsim bench --ddp``: 2 processes, Gloo over TCP
loopback, CPU tensors) against ``collsim step`` on the machine's scenario, uncalibrated on the DDP runs themselves
(the layers' times and the Gloo profile come from other measurements: see the scenario's header)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collsim.api import Simulator
from collsim.scenario import ScenarioError

DATA = Path(__file__).resolve().parents[2] / "scenarios" / "measurements"
SCENARIO = DATA / "ddp-cpu-2proc-mlp.scenario.yaml"
RUNS = {r["name"]: r for r in json.loads((DATA / "ddp-cpu-2proc-mlp.json").read_text(encoding="utf-8"))["runs"]}


def _predict(cap: float, accumulation: int = 1) -> float:
    sim = Simulator.from_source(SCENARIO, [f"training.bucket_cap_mb={cap}", f"training.accumulation={accumulation}"])
    (gloo,) = sim.step()
    return gloo.iteration_s


@pytest.fixture(scope="module")
def predicted() -> dict[str, float]:
    return {
        "ddp_cap1": _predict(1),
        "ddp_cap25": _predict(25),
        "ddp_cap100": _predict(100),
        "ddp_cap25_k4": _predict(25, 4),
    }


@pytest.mark.parametrize("name", ["ddp_cap1", "ddp_cap25", "ddp_cap100", "ddp_cap25_k4"])
def test_each_configuration_within_15_percent(predicted: dict[str, float], name: str) -> None:
    measured = RUNS[name]["median_s"]
    assert abs(predicted[name] / measured - 1) <= 0.15, (name, predicted[name], measured)


def test_bucket_sizes_ordered_as_measured(predicted: dict[str, float]) -> None:
    names = ["ddp_cap1", "ddp_cap25", "ddp_cap100"]
    assert sorted(names, key=predicted.__getitem__) == sorted(names, key=lambda n: RUNS[n]["median_s"])


def test_the_computation_alone_within_15_percent() -> None:
    (gloo,) = Simulator.from_source(SCENARIO).step()
    assert abs(gloo.compute_s / RUNS["compute"]["median_s"] - 1) <= 0.15


def test_a_step_with_processes_sharing_a_gpu_is_refused() -> None:
    sim = Simulator.from_source(
        "scenarios/ddp-resnet50-dgx1-v100.yaml", ["cluster.ranks_per_gpu=2", "backends.nccl.enabled=false"]
    )
    with pytest.raises(ScenarioError, match=r"cluster\.ranks_per_gpu: a training step with 2 processes sharing"):
        sim.step()


def test_a_cpu_rank_confined_to_half_a_core_takes_twice_as_long() -> None:
    # this VM's 2 cores over its 2 processes give each rank one core: confining it to one changes nothing, to half
    # a core halves every rate of its computation, copies and Gloo's CPU work alike
    base = Simulator.from_source(SCENARIO).step()[0].iteration_s
    one = Simulator.from_source(SCENARIO, ["workload.cores_per_process=1"]).step()[0].iteration_s
    half = Simulator.from_source(SCENARIO, ["workload.cores_per_process=0.5"]).step()[0].iteration_s
    assert one == base
    assert half == pytest.approx(2 * base, rel=0.01)
