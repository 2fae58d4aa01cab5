"""``validate --pairs``: every pair NCCL may pick (Gloo: every allreduce algorithm) simulated at each measured size,
and the one nearest the measurement kept: which pair a run behaves like when the measurement does not say what NCCL
picked."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from collsim.api import Simulator
from collsim.backends.nccl import enabled_pairs
from collsim.calibration import Measurement, MeasurementRow
from collsim.calibration.validate import nearest_pair, validate
from collsim.cli import main

MIB = 2**20
SIZES = [64 * 1024, MIB, 64 * MIB]


def _forced(
    source: str, backend: str, *, choice: tuple[str, str] | None = None, gloo: str | None = None
) -> Measurement:
    """What the simulator gives one forced pair (or Gloo algorithm), as a measurement."""
    sim = Simulator.from_source(source)
    rows = [
        MeasurementRow(s, sim.simulate_one(backend, s, choice=choice, gloo_algorithm=gloo).time_s * 1e6) for s in SIZES
    ]
    nranks = len(sim.topology.rank_devices())
    return Measurement("allreduce", nranks, rows, backend=backend, file="forced.json")


def test_a_run_of_another_pair_is_recognised_as_that_pair() -> None:
    # measured = the simulated Ring/Simple on one HGX H100, where NCCL's model picks other pairs (NVLS, Ring/LL)
    sim = Simulator.from_source("hgx-h100")
    v = validate(sim, _forced("hgx-h100", "nccl", choice=("Ring", "Simple")), pairs=True)
    for r in v.rows:
        assert (r.nearest_algorithm, r.nearest_protocol) == ("Ring", "Simple")
        assert r.nearest_error_pct == pytest.approx(0.0, abs=1e-9)
    assert any((r.algorithm, r.protocol) != ("Ring", "Simple") for r in v.rows)  # collsim ran other pairs
    ran = sum((r.algorithm, r.protocol) == ("Ring", "Simple") for r in v.rows)
    assert f"the one collsim ran at {ran} of {len(SIZES)} sizes" in v.format_table()
    assert "nearest simulated" in v.format_table()


def _ran(sim: Simulator) -> tuple[str, str, float]:
    """What the scenario itself runs at 1 MiB: (algorithm, protocol, us)."""
    o = sim.simulate_one("nccl", MIB)
    return o.algorithm, o.protocol, o.time_s * 1e6


def test_nearest_is_by_ratio_and_among_the_pairs_nccl_may_pick() -> None:
    # 2 x HGX H100 at 1 MiB: every enabled pair simulated; the nearest to a time is the one with the smallest
    # |log(simulated / measured)|
    sim = Simulator.from_source("2node-h100-ib")
    m = Measurement("allreduce", 16, [MeasurementRow(MIB, 100.0)], backend="nccl", file="m.json")
    pairs = enabled_pairs(sim.nccl_plan, sim.nccl_options, "allreduce")
    times = {p: sim.simulate_one("nccl", MIB, choice=p).time_s * 1e6 for p in pairs}
    want = min(times, key=lambda p: abs(math.log(times[p] / 100.0)))
    algo, proto, us = nearest_pair(sim, m, MIB, 100.0, "nccl", _ran(sim))
    assert (algo, proto) == want and us == pytest.approx(times[want])
    # NCCL_ALGO narrows the pairs as it narrows NCCL's choice
    ring = Simulator.from_source("2node-h100-ib", ["backends.nccl.env.NCCL_ALGO=Ring"])
    assert nearest_pair(ring, m, MIB, 100.0, "nccl", _ran(ring))[0] == "Ring"


def test_gloo_allreduce_algorithms_are_the_pairs() -> None:
    v = validate(
        Simulator.from_source("loopback-gloo-cpu"),
        _forced("loopback-gloo-cpu", "gloo", gloo="halving_doubling"),
        pairs=True,
    )
    assert {r.nearest_algorithm for r in v.rows} == {"halving_doubling"}
    assert all(r.nearest_error_pct == pytest.approx(0.0, abs=1e-9) for r in v.rows)


def test_without_pairs_the_rows_have_no_nearest_and_the_table_no_column() -> None:
    v = validate(Simulator.from_source("hgx-h100"), _forced("hgx-h100", "nccl"))
    assert all(r.nearest_us is None and r.nearest_error_pct is None for r in v.rows)
    assert "nearest" not in v.format_table()


def test_cli_pairs_in_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "m.json"
    f.write_text(_forced("hgx-h100", "nccl", choice=("Tree", "Simple")).to_json())
    assert main(["validate", "hgx-h100", str(f), "--pairs", "--format", "json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    assert {(r["nearest_algorithm"], r["nearest_protocol"]) for r in doc["rows"]} == {("Tree", "Simple")}
    assert all(abs(r["nearest_error_pct"]) < 1e-6 for r in doc["rows"])
