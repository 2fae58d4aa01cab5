"""``collsim step`` and ``Simulator.step``: the training section, one DDP iteration per backend, sweeps, outputs."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from collsim.api import Simulator
from collsim.cli import main
from collsim.results.step import STEP_FIELDS, StepRow, step_rows_to_dataframe
from collsim.scenario import ScenarioError

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "ddp-resnet50-dgx1-v100.yaml"
ONE_NODE = ["--set", "cluster.nodes=1"]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_nccl_beats_gloo_and_neither_beats_the_computation() -> None:
    sim = Simulator.from_source(SCENARIO, ["cluster.nodes=1"])
    nccl, gloo = sim.step()
    assert (nccl.backend, gloo.backend) == ("nccl", "gloo")
    assert nccl.compute_s == gloo.compute_s
    assert nccl.compute_s < nccl.iteration_s < gloo.iteration_s
    assert 0 < gloo.scaling_efficiency < nccl.scaling_efficiency <= 1
    # ResNet-50's 25,557,032 float32 gradients, every one in exactly one bucket
    assert sum(b.nbytes for b in nccl.buckets) == 25_557_032 * 4
    assert [b.index for b in nccl.buckets] == list(range(len(nccl.buckets)))


def test_first_iteration_has_one_bucket_and_no_overlap() -> None:
    sim = Simulator.from_source(SCENARIO, ["cluster.nodes=1", "training.first_iteration=true"])
    (nccl,) = sim.step(["nccl"])
    assert len(nccl.buckets) == 1
    assert nccl.overlap == pytest.approx(0.0, abs=0.01)


def test_a_scenario_without_training_section_is_refused_naming_the_field() -> None:
    sim = Simulator.from_source("hgx-h100")
    with pytest.raises(ScenarioError, match="training"):
        sim.step()


def test_unknown_model_names_the_field() -> None:
    sim = Simulator.from_source(SCENARIO, ["training.model=resnet5000"])
    with pytest.raises(ScenarioError, match=r"training\.model"):
        sim.step()


def test_step_table_and_bucket_tables(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "step", str(SCENARIO), *ONE_NODE)
    assert rc == 0
    lines = [ln.split() for ln in out.splitlines() if ln and not ln.startswith("#")]
    rows = [r for r in lines if r[0] in ("nccl", "gloo")]
    assert [r[0] for r in rows] == ["nccl", "gloo"]
    assert "# buckets, nccl" in out and "# buckets, gloo" in out


def test_sweep_bucket_cap_gives_one_row_per_value_and_backend(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "step", str(SCENARIO), *ONE_NODE, "--sweep", "bucket_cap_mb=1,100", "--format", "csv")
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["label"], r["backend"]) for r in rows] == [
        ("bucket_cap_mb=1", "nccl"), ("bucket_cap_mb=1", "gloo"),
        ("bucket_cap_mb=100", "nccl"), ("bucket_cap_mb=100", "gloo"),
    ]  # fmt: skip
    assert int(rows[0]["buckets"]) > int(rows[2]["buckets"])


def test_json_has_timeline_and_bucket_table(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "step", str(SCENARIO), *ONE_NODE, "--format", "json", "--backend", "nccl")
    assert rc == 0
    (step,) = json.loads(out)["steps"]
    assert set(STEP_FIELDS) <= set(step)
    lanes = {s["lane"] for s in step["timeline"]}
    assert lanes == {"compute", "NCCL stream"}
    assert len(step["bucket_table"]) == step["buckets"]


def test_bad_sweep_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(capsys, "step", str(SCENARIO), "--sweep", "bucket_cap_mb")
    assert rc == 2 and "--sweep" in err and "Traceback" not in err


def test_dataframe_has_the_step_fields() -> None:
    sim = Simulator.from_source(SCENARIO, ["cluster.nodes=1"])
    df = step_rows_to_dataframe([StepRow("", r) for r in sim.step()])
    assert list(df.columns) == list(STEP_FIELDS)
    assert len(df) == 2


# ---------------------------------------------------------------------------------------------------- CPU ranks
CPU_RANKS = Path(__file__).resolve().parent / "training" / "data" / "cpu-ranks.yaml"


def test_cpu_ranks_compute_the_measured_layer_times_and_run_gloo_on_cpu_tensors() -> None:
    sim = Simulator.from_source(CPU_RANKS)
    (gloo,) = sim.step()
    # fwd 10 + 10 + 1 ms, bwd 20 + 20 + 2 ms, then SGD: 3 float32 passes over 2,109,440 parameters at the socket's
    # 102.4 GB/s shared by its 2 processes, times training.yaml's memory efficiency
    eff = sim.gpu_compute().memory_efficiency
    optimizer_s = 3 * 4 * 2_109_440 / (102.4e9 / 2 * eff)
    assert gloo.compute_s == pytest.approx(0.063 + optimizer_s, rel=1e-9)
    assert sim.gpu_compute().sm_count == 0
    assert gloo.iteration_s > gloo.compute_s
    # CPU tensors: no D2H/H2D copies in Gloo's notes of the bucket allreduces (the GPU path would stage them)
    assert [b.nbytes for b in gloo.buckets] == [(10_240 + 1_048_576 + 1_024) * 4, (1_048_576 + 1_024) * 4]


def test_cpu_ranks_without_measured_times_are_refused_naming_the_model() -> None:
    sim = Simulator.from_source(CPU_RANKS, ["training.model=resnet50"])
    with pytest.raises(ScenarioError, match=r"training\.model.*measured per-layer times"):
        sim.step()
