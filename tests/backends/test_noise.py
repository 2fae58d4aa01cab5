"""Seeded noise (issue 13): per-rank launch skew and per-message jitter, deterministic for a seed, off by default."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.api import Simulator
from collsim.noise import add_delays, jitter_stream, launch_skews, repetition_seed
from collsim.results import make_record, repeated_record
from collsim.results.repeat import quantile
from collsim.scenario import ScenarioError

US = 1e-6
BACKENDS = ["nccl", "gloo"]


def _scenario(noise: dict[str, Any] | None = None, seed: int | None = None, **engine: Any) -> dict[str, Any]:
    """One HGX H100 node with both backends; ``noise`` and ``engine.seed`` when given."""
    scenario: dict[str, Any] = {
        "name": "noise",
        "cluster": {"node": "hgx-h100"},
        "backends": {"nccl": {}, "gloo": {}},
        "engine": {**engine, **({"seed": seed} if seed is not None else {})},
    }
    if noise is not None:
        scenario["noise"] = noise
    return scenario


def _times(sim: Simulator, backend: str, size: int, runs: int) -> list[float]:
    return [sim.simulate_one(backend, size, repetition=r).time_s for r in range(runs)]


@pytest.fixture(scope="module")
def quiet() -> Simulator:
    return Simulator.from_source(_scenario())


# ------------------------------------------------------------------------------------------------ off by default


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("noise", [{}, {"jitter": 0}, {"launch_skew": "0us", "jitter": "0s"}])
def test_zero_noise_is_the_same_simulation(quiet: Simulator, backend: str, noise: dict[str, Any]) -> None:
    sim = Simulator.from_source(_scenario(noise, seed=5))
    assert not sim.noisy
    for size in (8, 65536):
        a, b = quiet.simulate_one(backend, size), sim.simulate_one(backend, size, repetition=3)
        assert (a.time_s, a.classes, a.entities, a.solves) == (b.time_s, b.classes, b.entities, b.solves)
    assert sim.options(backend, 7) is (sim.nccl_options if backend == "nccl" else sim.gloo_options)


def test_a_scenario_without_noise_writes_no_noise_key() -> None:
    assert "noise" not in Simulator.from_source(_scenario()).scenario.to_dict()
    assert Simulator.from_source(_scenario({"jitter": "1us"})).scenario.to_dict()["noise"]["jitter"] == "1us"


# ------------------------------------------------------------------------------------------------ launch skew


def test_launch_skews_are_seeded_bounded_and_start_at_zero() -> None:
    a = launch_skews(8, 10 * US, seed=1, repetition=0)
    assert a == launch_skews(8, 10 * US, seed=1, repetition=0)
    assert a != launch_skews(8, 10 * US, seed=2, repetition=0)
    assert a != launch_skews(8, 10 * US, seed=1, repetition=1)
    assert len(a) == 7  # the earliest rank launches at 0 and is left out
    assert all(0 < s <= 10 * US for _rank, s in a)
    assert launch_skews(1, 10 * US, seed=1, repetition=0) == () == launch_skews(8, 0.0, seed=1, repetition=0)


def test_skew_adds_to_the_stragglers_delay() -> None:
    sim = Simulator.from_source(
        {**_scenario({"launch_skew": "4us"}), "perturb": {"ranks": [{"rank": 3, "launch_delay": "20us"}]}}
    )
    skews = dict(launch_skews(8, 4 * US, seed=0, repetition=2))
    delays = dict(sim.options("nccl", 2).launch_delay)
    assert delays[3] == pytest.approx(20 * US + skews.get(3, 0.0))
    expected = add_delays(((3, 20 * US),), tuple(skews.items()))
    gloo = sim.options("gloo", 2).launch_delay
    assert [r for r, _ in gloo] == [r for r, _ in expected]
    assert [s for _, s in gloo] == pytest.approx([s for _, s in expected])


@pytest.mark.parametrize("backend", BACKENDS)
def test_skew_adds_between_zero_and_the_skew_to_a_small_allreduce(quiet: Simulator, backend: str) -> None:
    # at 8 B every rank waits for the last one to launch: the allreduce ends that rank's offset later, which is
    # the spread of the draws (between 0 and 10 us), to a nanosecond
    t0 = quiet.simulate_one(backend, 8).time_s
    sim = Simulator.from_source(_scenario({"launch_skew": "10us"}, seed=3))
    for r in range(3):
        spread = max(s for _rank, s in sim.options(backend, r).launch_delay)
        t = sim.simulate_one(backend, 8, repetition=r).time_s
        assert 0 < t - t0 <= 10 * US
        assert t - t0 == pytest.approx(spread, abs=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_skew_keeps_the_symmetry_quotient_exact(backend: str) -> None:
    on = Simulator.from_source(_scenario({"launch_skew": "10us"}, seed=9))
    off = Simulator.from_source(_scenario({"launch_skew": "10us"}, seed=9, symmetry=False))
    for size in (8, 2**20):
        a, b = on.simulate_one(backend, size, repetition=1), off.simulate_one(backend, size, repetition=1)
        assert a.time_s == pytest.approx(b.time_s, rel=1e-9)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31), repetition=st.integers(0, 1000), skew_us=st.floats(0.5, 50.0))
def test_skew_is_bounded_for_any_seed(seed: int, repetition: int, skew_us: float) -> None:
    sim = Simulator.from_source(_scenario({"launch_skew": f"{skew_us}us"}, seed=seed))
    t0 = _T0_NCCL_8B
    t = sim.simulate_one("nccl", 8, repetition=repetition).time_s
    assert -1e-12 <= t - t0 <= skew_us * US + 1e-12


_T0_NCCL_8B = Simulator.from_source(_scenario()).simulate_one("nccl", 8).time_s


# ------------------------------------------------------------------------------------------------ jitter


def test_jitter_streams_are_seeded_per_key() -> None:
    seed = repetition_seed(0, 0)
    a = jitter_stream(1 * US, seed, (0, "n0/gpu0"), "send")
    b = jitter_stream(1 * US, seed, (0, "n0/gpu0"), "send")
    c = jitter_stream(1 * US, seed, (1, "n0/gpu0"), "send")
    xs = [a() for _ in range(200)]
    assert xs == [b() for _ in range(200)] and xs != [c() for _ in range(200)]
    assert all(x >= 0 for x in xs) and 0.7 * US < sum(xs) / len(xs) < 1.3 * US  # mean 1 us (200 draws)
    with pytest.raises(ValueError):
        jitter_stream(0.0, seed, "x")


@pytest.mark.parametrize("backend", BACKENDS)
def test_jitter_is_deterministic_for_a_seed_and_differs_across_seeds(backend: str) -> None:
    noise = {"jitter": "1us", "launch_skew": "2us"}
    a = _times(Simulator.from_source(_scenario(noise, seed=1)), backend, 8, 3)
    b = _times(Simulator.from_source(_scenario(noise, seed=1)), backend, 8, 3)
    c = _times(Simulator.from_source(_scenario(noise, seed=2)), backend, 8, 3)
    assert a == b
    assert a != c
    assert len(set(a)) == 3  # every repetition draws anew


@pytest.mark.parametrize("backend", BACKENDS)
def test_jitter_only_delays_and_simulates_every_rank(quiet: Simulator, backend: str) -> None:
    # each message arrives later by its draw: nothing gets faster; every entity has its own draws, so the symmetry
    # quotient is off (classes == entities) and the result is the full simulation's
    sim = Simulator.from_source(_scenario({"jitter": "1us"}))
    for size in (8, 65536):
        base = quiet.simulate_one(backend, size)
        out = sim.simulate_one(backend, size)
        assert out.time_s > base.time_s
        assert out.classes == out.entities
        full = sim.simulate_one(backend, size, symmetry=False)
        assert full.time_s == out.time_s


def test_jitter_is_drawn_per_nccl_step_not_per_simulated_piece(quiet: Simulator) -> None:
    # a 8 B Ring/LL allreduce on one channel: 2(n-1) = 14 steps in a chain, each cut in pieces (a simulation
    # device). One draw per step with mean J adds about 14 J to the chain (a little more: the slowest channel and
    # rank); a draw per piece would add the max of the pieces' draws per step, several J each
    sim = Simulator.from_source(_scenario({"jitter": "1us"}))
    t0 = quiet.simulate_one("nccl", 8).time_s
    extra = [sim.simulate_one("nccl", 8, repetition=r).time_s - t0 for r in range(6)]
    mean = sum(extra) / len(extra)
    assert 8 * US < mean < 30 * US


def test_bad_noise_values_name_the_field() -> None:
    with pytest.raises(ScenarioError) as info:
        Simulator.from_source(_scenario({"jitter": "-1us"}))
    assert info.value.field == "noise.jitter"
    with pytest.raises(ScenarioError) as info:
        Simulator.from_source(_scenario({"launch_skew": "fast"}))
    assert info.value.field == "noise.launch_skew"
    with pytest.raises(ScenarioError) as info:
        Simulator.from_source(_scenario({"skew": "1us"}))
    assert "launch_skew" in str(info.value)


# ------------------------------------------------------------------------------------------------ repetitions


def test_repeated_run_reports_median_and_spread() -> None:
    sim = Simulator.from_source(_scenario({"jitter": "500ns", "launch_skew": "3us"}, seed=4))
    res = sim.run_repeated(5, backends=["nccl"], sizes=[8, 4096])
    assert [r.size_bytes for r in res.records] == [8, 4096]
    for rec in res.records:
        times = [t * US for t in rec.times_us]  # type: ignore[attr-defined]
        assert times == pytest.approx(_times(sim, "nccl", rec.size_bytes, 5), rel=1e-12)
        assert rec.runs == 5  # type: ignore[attr-defined]
        assert rec.time_min_us <= rec.time_p50_us <= rec.time_p99_us <= rec.time_max_us  # type: ignore[attr-defined]
        assert rec.time_us == rec.time_p50_us  # type: ignore[attr-defined]
    again = sim.run_repeated(5, backends=["nccl"], sizes=[8, 4096], jobs=2)
    assert [r.to_dict() for r in again.records] == [r.to_dict() for r in res.records]


def test_repeated_run_without_noise_simulates_once(quiet: Simulator) -> None:
    res = quiet.run_repeated(4, backends=["nccl"], sizes=[8])
    (rec,) = res.records
    assert len(res.outcomes) == 1
    assert rec.runs == 4 and rec.time_p50_us == rec.time_p99_us == rec.time_min_us == rec.time_max_us  # type: ignore[attr-defined]
    assert rec.time_us == quiet.run(backends=["nccl"], sizes=[8]).records[0].time_us
    with pytest.raises(ScenarioError):
        quiet.run_repeated(0)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(1e-7, 1e-2), min_size=1, max_size=40))
def test_quantiles_are_ordered(times: list[float]) -> None:
    r = make_record(backend="nccl", collective="allreduce", algorithm="Ring", protocol="LL", nranks=8,
                    dtype="float32", size_bytes=1024, time_s=times[0])  # fmt: skip
    rr = repeated_record(r, times)
    assert rr.time_min_us <= rr.time_p50_us <= rr.time_p99_us <= rr.time_max_us
    assert rr.time_min_us == min(times) * 1e6 and rr.time_max_us == max(times) * 1e6
    assert rr.busbw_gbps == pytest.approx(1024 / (rr.time_us * 1e-6) / 1e9 * 1.75)
    assert quantile(times, 0.0) == min(times) and quantile(times, 1.0) == max(times)
