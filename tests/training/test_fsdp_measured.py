"""FSDP over Gloo on this machine: real ``FullyShardedDataParallel`` iterations (``collsim bench --ddp --fsdp``: 2
processes, Gloo over TCP loopback, CPU tensors, every Linear a unit) against ``collsim step`` on the machine's
scenario. Nothing is fitted to the FSDP runs: the layers' times come from the same run without FSDP, Gloo's rates
from a calibration on that day's Gloo benchmarks (the scenario's header says which file is which)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collsim.api import Simulator
from collsim.calibration import read_measurement

DATA = Path(__file__).resolve().parents[2] / "scenarios" / "measurements"
SCENARIO = DATA / "fsdp-cpu-2proc-mlp.scenario.yaml"
RUNS = {r["name"]: r for r in json.loads((DATA / "fsdp-cpu-2proc-mlp.json").read_text(encoding="utf-8"))["runs"]}


@pytest.fixture(scope="module")
def predicted() -> dict[str, float]:
    out = {}
    for sharding in ("full_shard", "shard_grad_op"):
        (gloo,) = Simulator.from_source(SCENARIO, [f"training.fsdp.sharding={sharding}"]).step()
        out[f"fsdp_{sharding}"] = gloo.iteration_s
    return out


@pytest.mark.parametrize("name", ["fsdp_full_shard", "fsdp_shard_grad_op"])
def test_each_fsdp_configuration_is_under_predicted_by_at_most_40_percent(predicted: dict[str, float],
                                                                          name: str) -> None:
    # what is missing is known and reported (docs/training.md, "FSDP with Gloo"): the simulated allgather is 25-39%
    # fast at the units' 8-16 MiB, and FSDP's own CPU work beyond its copies (hooks, page faults of its buffers) is
    # not modelled: -34.8% and -27.9% on the stored runs. A prediction above the measurement would be a new error.
    measured = RUNS[name]["median_s"]
    assert -0.40 <= predicted[name] / measured - 1 < 0.0, (name, predicted[name], measured)


def test_full_shard_costs_more_than_shard_grad_op_as_measured(predicted: dict[str, float]) -> None:
    assert RUNS["fsdp_full_shard"]["median_s"] > RUNS["fsdp_shard_grad_op"]["median_s"]
    assert predicted["fsdp_full_shard"] > predicted["fsdp_shard_grad_op"]


def _errors(collective: str, file: str, from_bytes: int) -> dict[int, float]:
    """Size (bytes) -> collsim's relative time error against the stored Gloo benchmark ``file``, from ``from_bytes``."""
    meas = read_measurement(DATA / file)
    sim = Simulator.from_source(SCENARIO, [f"workload.collective={collective}"])
    return {r.size_bytes: sim.simulate_one("gloo", r.size_bytes, collective=collective).time_s / (r.time_us * 1e-6) - 1
            for r in meas.rows if r.size_bytes >= from_bytes}  # fmt: skip


def test_the_held_out_gloo_allgather_at_large_sizes() -> None:
    # Gloo's allgather as ProcessGroupGloo runs it (a fresh flat output whose pages fault in, the ring, then the flat
    # output copied into the output tensors), at the calibrated rates (fitted with three other collectives on every
    # other size: 32 MiB held out, 64 and 128 MiB fitted): -10.4 / -14.8 / -11.9%, the allgather pays something not
    # modelled (docs/training.md, "FSDP with Gloo")
    errors = _errors("allgather", "gloo-cpu-2proc-loopback-epyc-1205-allgather.json", 32 << 20)
    assert len(errors) == 3 and all(abs(e) <= 0.20 for e in errors.values()), errors


def test_the_never_fitted_gloo_reduce_scatter_at_large_sizes() -> None:
    # reduce_scatter_tensor as ProcessGroupGloo runs it (the clone, from 32 MiB a fresh mapping, the allreduce of the
    # clone, the chunk copied out), measured the same afternoon and in no calibration: -14.7 / -4.7 / -11.4 / -8.7%
    # at 16-128 MiB (the allreduce alone was 42% fast from 32 MiB)
    errors = _errors("reduce_scatter", "gloo-cpu-2proc-loopback-epyc-1205-reduce-scatter.json", 16 << 20)
    assert len(errors) == 4 and all(abs(e) <= 0.16 for e in errors.values()), errors


BIG = {r["name"]: r for r in json.loads((DATA / "fsdp-cpu-2proc-mlp4096.json").read_text(encoding="utf-8"))["runs"]}


@pytest.mark.parametrize("sharding", ["full_shard", "shard_grad_op"])
def test_units_of_64_mib_pay_the_page_faults_of_their_fresh_allocations(sharding: str) -> None:
    # The same machine and scenario, an MLP whose three 4096 x 4096 units are 64 MiB (fsdp-cpu-2proc-mlp4096.*,
    # measured the same day): from 32 MiB every new tensor is a fresh mapping (glibc), and FSDP allocates the
    # unsharded parameters at each all-gather, the flat gradient, the clone and the sharded gradient. Charged at
    # the preset's measured first_touch_bw: -18.7% (full_shard) and -15.9% (shard_grad_op) on the stored runs;
    # without them -45% and -43%. Counted on real iterations (getrusage): 1376-1410 and 1024-1104 MiB of page
    # faults per iteration and rank, against the 1248 and 864 MiB these allocations and Gloo's flat outputs make
    # (plus the computation's own 136 MiB, inside its measured times).
    overrides = ["training.model=fsdp-cpu-2proc-mlp4096.model.yaml", f"training.fsdp.sharding={sharding}"]
    (gloo,) = Simulator.from_source(SCENARIO, overrides).step()
    measured = BIG[f"fsdp_{sharding}"]["median_s"]
    assert -0.25 <= gloo.iteration_s / measured - 1 < 0.0, (gloo.iteration_s, measured)
    faults = sum(s.end - s.start for s in gloo.spans if s.label.startswith("page faults"))
    unit = (4096 * 4096 + 4096) * 4  # bytes of a 4096 x 4096 Linear's weight and bias, float32
    gathers = 2 if sharding == "full_shard" else 1  # FULL_SHARD frees the unit after forward and gathers it again
    per_unit = gathers * unit + unit + unit + unit / 2  # unsharded storage(s), flat gradient, clone, shard
    assert faults == pytest.approx(3 * per_unit / 2.89e9, rel=1e-6)  # the preset's first_touch_bw
    assert (gloo.iteration_s - faults) / measured - 1 < -0.35  # without them (CPU ranks: everything in turn)


#: the 2026-12-06 run (the three strategies and DDP in one sitting, on a day this VM ran its layers and Gloo 9-35%
#: slower than on 2026-12-05's, whose Gloo profile the scenario keeps): scenarios/measurements/README.md
RUNS_1206 = {r["name"]: r for r in json.loads((DATA / "fsdp-cpu-2proc-mlp-noshard.json").read_text(
    encoding="utf-8"))["runs"]}  # fmt: skip


@pytest.fixture(scope="module")
def predicted_1206() -> dict[str, float]:
    out = {}
    for sharding in ("full_shard", "shard_grad_op", "no_shard"):
        sets = [f"training.fsdp.sharding={sharding}", "training.model=fsdp-cpu-2proc-mlp-noshard.model.yaml"]
        (gloo,) = Simulator.from_source(SCENARIO, sets).step()
        out[f"fsdp_{sharding}"] = gloo.iteration_s
    return out


def test_no_shard_is_the_cheapest_fsdp_strategy_as_measured_and_under_predicted_by_at_most_40_percent(
    predicted_1206: dict[str, float],
) -> None:
    # measured 615.1, 466.9 and 332.1 ms; collsim 341.2, 289.1 and 229.2 ms (-44.5%, -38.1%, -31.0%): NO_SHARD has
    # no all-gathers, whose cost is the known shortfall of the other two
    order = ["fsdp_full_shard", "fsdp_shard_grad_op", "fsdp_no_shard"]
    measured = [RUNS_1206[n]["median_s"] for n in order]
    assert measured == sorted(measured, reverse=True)
    assert [predicted_1206[n] for n in order] == sorted(predicted_1206.values(), reverse=True)
    ratio = predicted_1206["fsdp_no_shard"] / RUNS_1206["fsdp_no_shard"]["median_s"]
    assert -0.40 <= ratio - 1 < 0.0, ratio


FSDP2 = {r["name"]: r for r in json.loads((DATA / "fsdp2-cpu-2proc-mlp.json").read_text(encoding="utf-8"))["runs"]}


@pytest.fixture(scope="module")
def predicted2() -> dict[str, float]:
    """FSDP1 and FSDP2 (``training.fsdp.version``) on the 2026-12-06 run's model (fsdp2-cpu-2proc-mlp.*: both in
    one sitting, interleaved)."""
    out = {}
    for version, prefix in ((1, "fsdp_"), (2, "fsdp2_")):
        for sharding in ("full_shard", "shard_grad_op"):
            sets = ["training.model=fsdp2-cpu-2proc-mlp.model.yaml", f"training.fsdp.sharding={sharding}",
                    f"training.fsdp.version={version}"]  # fmt: skip
            (gloo,) = Simulator.from_source(SCENARIO, sets).step()
            out[prefix + sharding] = gloo.iteration_s
    return out


@pytest.mark.parametrize("sharding", ["full_shard", "shard_grad_op"])
def test_fsdp2_costs_more_than_fsdp1_here_and_is_under_predicted_as_fsdp1_is(predicted2: dict[str, float],
                                                                            sharding: str) -> None:
    # fully_shard's copy-in and copy-out around every all-gather and its gradients' copy-in cost a CPU rank more
    # than FSDP1's flat gradient and divisions: measured 1.166x (full_shard) and 1.083x (shard_grad_op) FSDP1's
    # iteration, simulated 1.052x and 1.022x. Both are under-predicted by what FSDP1 misses here (its CPU work and
    # copies at the contended rate: docs/training.md), FSDP2 a few points more as it copies twice as often
    # (torch.profiler: 161 aten::copy_ an iteration against 81): -47.4% and -37.2% against -41.7% and -33.5%.
    v1, v2 = FSDP2[f"fsdp_{sharding}"]["median_s"], FSDP2[f"fsdp2_{sharding}"]["median_s"]
    p1, p2 = predicted2[f"fsdp_{sharding}"], predicted2[f"fsdp2_{sharding}"]
    assert v2 > v1 and p2 > p1
    assert 1.0 < p2 / p1 < v2 / v1
    assert -0.50 <= p2 / v2 - 1 <= p1 / v1 - 1 < 0.0, (sharding, p1, v1, p2, v2)


ACC = {r["name"]: r for r in json.loads((DATA / "fsdp-accumulation-cpu-2proc-mlp.json").read_text(encoding="utf-8"))
       ["runs"]}  # fmt: skip


@pytest.fixture(scope="module")
def predicted_acc() -> dict[str, float]:
    """The four FSDP configurations at 1 and 4 micro-steps on the run's model (fsdp-accumulation-cpu-2proc-mlp.*,
    2026-12-06: all in one sitting)."""
    out = {}
    for version, prefix in ((1, "fsdp_"), (2, "fsdp2_")):
        for sharding in ("full_shard", "shard_grad_op"):
            for k, suffix in ((1, ""), (4, "_k4")):
                sets = ["training.model=fsdp-accumulation-cpu-2proc-mlp.model.yaml", f"training.fsdp.version={version}",
                        f"training.fsdp.sharding={sharding}", f"training.accumulation={k}"]  # fmt: skip
                (gloo,) = Simulator.from_source(SCENARIO, sets).step()
                out[prefix + sharding + suffix] = gloo.iteration_s
    return out


@pytest.mark.parametrize("name", ["fsdp_full_shard", "fsdp_shard_grad_op", "fsdp2_full_shard", "fsdp2_shard_grad_op"])
def test_four_micro_steps_cost_what_they_measured_against_one(predicted_acc: dict[str, float], name: str) -> None:
    # What 4 micro-steps cost against 1 (measured 3.46 / 2.21 / 3.03 / 2.82, simulated 3.10 / 2.39 / 3.13 / 2.93):
    # within 12% of the measured ratio each; the absolute times are under-predicted as FSDP is here (-29% to -48%
    # at 4 micro-steps: docs/training.md, "Gradient accumulation").
    measured = ACC[f"{name}_k4"]["median_s"] / ACC[name]["median_s"]
    simulated = predicted_acc[f"{name}_k4"] / predicted_acc[name]
    assert abs(simulated / measured - 1) <= 0.12, (name, simulated, measured)
    assert -0.50 <= predicted_acc[f"{name}_k4"] / ACC[f"{name}_k4"]["median_s"] - 1 < 0.0


def test_fsdp1_shard_grad_op_gathers_once_under_no_sync_and_fsdp2_does_not(predicted_acc: dict[str, float]) -> None:
    # FSDP1's no_sync keeps shard_grad_op's parameters from one micro-step to the next (_should_free_in_backward);
    # FSDP2 reshards after every backward: 4 micro-steps cost FSDP1 2.21x one step and FSDP2 2.82x, measured
    def ratio(runs: dict[str, float], name: str) -> float:
        return runs[f"{name}_k4"] / runs[name]

    measured = {n: r["median_s"] for n, r in ACC.items()}
    for runs in (measured, predicted_acc):
        assert ratio(runs, "fsdp_shard_grad_op") < ratio(runs, "fsdp2_shard_grad_op") - 0.3
        assert runs["fsdp_shard_grad_op_k4"] < runs["fsdp2_shard_grad_op_k4"]
