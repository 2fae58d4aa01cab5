"""``collsim step`` and ``Simulator.step``: the training section, one DDP iteration per backend, sweeps, outputs."""

from __future__ import annotations

import csv
import io
import itertools
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


@pytest.mark.parametrize("fsdp", [False, True])
def test_the_benchmark_harness_is_not_charged_to_a_training_step(fsdp: bool) -> None:
    # workload.host_overhead and gpus_per_process say how a benchmark timed its calls; DDP and FSDP issue their
    # collectives from the training loop, so the step is the same with them, and a note says they were left out
    name = "fsdp-gpt2xl-2node-h100" if fsdp else "ddp-resnet50-dgx1-v100"
    plain = Simulator.from_source(name).step(["nccl"])[0]
    harness = ["workload.host_overhead=torch", "workload.gpus_per_process=2"]
    timed = Simulator.from_source(name, harness).step(["nccl"])[0]
    assert timed.iteration_s == plain.iteration_s and timed.comm_s == plain.comm_s
    note = ("workload.gpus_per_process and workload.host_overhead describe a benchmark's timing: not applied to the "
            "step's collectives")  # fmt: skip
    assert note in timed.notes and note not in plain.notes
    sim = Simulator.from_source(name, harness)
    assert sim.simulate_one("nccl", 1 << 20).time_s > sim.simulate_one("nccl", 1 << 20, harness=False).time_s


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


def test_a_compute_dtype_the_gpu_has_no_math_for_names_the_scenarios_field() -> None:
    # a V100 has no TF32: the user's choice, not the GPU preset file (the error named gpus.yaml's peak_tflops)
    sim = Simulator.from_source("ddp-resnet50-dgx1-v100", ["training.compute_dtype=tf32"])
    with pytest.raises(ScenarioError, match=r"'tf32': .* expected one of float32, float16") as err:
        sim.step(["nccl"])
    assert err.value.field == "training.compute_dtype" and err.value.file == sim.scenario.source_file


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


def test_two_sweeps_give_every_combination(capsys: pytest.CaptureFixture[str]) -> None:
    # a second --sweep used to replace the first (argparse's last value), with exit status 0
    rc, out, _ = _run(capsys, "step", str(SCENARIO), *ONE_NODE, "--sweep", "bucket_cap_mb=1,100", "--sweep",
                      "cluster.nodes=1,2", "--format", "csv", "--backend", "nccl")  # fmt: skip
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["label"], r["world"]) for r in rows] == [
        ("bucket_cap_mb=1 nodes=1", "8"), ("bucket_cap_mb=1 nodes=2", "16"),
        ("bucket_cap_mb=100 nodes=1", "8"), ("bucket_cap_mb=100 nodes=2", "16"),
    ]  # fmt: skip
    assert rows[0]["buckets"] == rows[1]["buckets"] != rows[2]["buckets"] == rows[3]["buckets"]
    twice = ["--sweep", "bucket_cap_mb=1", "--sweep", "training.bucket_cap_mb=2"]
    rc, _, err = _run(capsys, "step", str(SCENARIO), *twice)
    assert rc == 2 and "swept twice" in err


def test_a_sweep_lists_yaml_lists_whole(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "step", str(SCENARIO), "--sweep", "cluster.visible_gpus=[0],[0, 1]", "--format", "csv",
                      "--backend", "nccl")  # fmt: skip
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["label"], r["world"]) for r in rows] == [("visible_gpus=[0]", "2"), ("visible_gpus=[0, 1]", "4")]


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


def test_measured_layer_times_are_their_batchs(tmp_path: Path) -> None:
    # a batch-size sweep on measured times gave every batch the same compute time, with no word: the model file's
    # batch_size (collsim bench --ddp --model-out writes it) now refuses another batch, naming the field
    measured = Path(__file__).resolve().parents[1] / "scenarios" / "measurements" / "ddp-cpu-2proc-mlp.scenario.yaml"
    (at32,) = Simulator.from_source(measured, ["backends.nccl.enabled=false"]).step()
    assert not any("measured layer times" in n for n in at32.notes)
    with pytest.raises(ScenarioError, match=r"training\.batch_size: 64, but the layer times .* at batch 32"):
        Simulator.from_source(measured, ["training.batch_size=64"]).step()
    # a file that does not say its batch: the times as they are, and a note saying so
    (gloo,) = Simulator.from_source(CPU_RANKS).step()
    assert any("used as they are, at any training.batch_size" in n for n in gloo.notes)


def test_a_cpu_ranks_memory_passes_stream_no_faster_than_its_threads_copy() -> None:
    # one process alone on a 1 TB/s socket: its one intra-op thread copies 5 GB/s, 15 GB/s of traffic with the
    # write-allocate reads, and that caps its memory passes; a faster copy rate leaves the socket's share
    vm = str(Path(__file__).resolve().parents[1] / "scenarios" / "measurements" / "fsdp-cpu-2proc-mlp.scenario.yaml")
    cpu = "presets.cpus.epyc-2vcpu-vm"
    alone = ["cluster.node_params.processes=1", f"{cpu}.memory_bandwidth=1TB/s"]
    slow = Simulator.from_source(vm, [*alone, f"{cpu}.copy_bw_per_core=5GB/s"]).gpu_compute()
    assert slow.hbm_bandwidth == pytest.approx(15e9) and slow.write_allocate == 1.0
    two = Simulator.from_source(vm, [*alone, f"{cpu}.copy_bw_per_core=5GB/s", "training.intra_op_threads=2"])
    assert two.gpu_compute().hbm_bandwidth == pytest.approx(30e9)
    fast = Simulator.from_source(vm, [*alone, f"{cpu}.copy_bw_per_core=1000GB/s"]).gpu_compute()
    assert fast.hbm_bandwidth == pytest.approx(1e12)


def test_cpu_ranks_without_measured_times_are_refused_naming_the_model() -> None:
    sim = Simulator.from_source(CPU_RANKS, ["training.model=resnet50"])
    with pytest.raises(ScenarioError, match=r"training\.model.*measured per-layer times"):
        sim.step()


# --------------------------------------------------------------------------------------------------------- FSDP
FSDP = Path(__file__).resolve().parents[1] / "scenarios" / "fsdp-gpt2xl-2node-h100.yaml"


def test_fsdp_step_all_gathers_each_block_twice_and_reduce_scatters_it_once(capsys: pytest.CaptureFixture[str]) -> None:
    sim = Simulator.from_source(FSDP, ["cluster.nodes=1"])
    (r,) = sim.step(["nccl"])
    assert r.backend == "nccl" and len(r.buckets) == 49  # 48 GPT2Blocks + the root
    ags = [s for s in r.spans if s.lane == "NCCL all-gather stream"]
    assert len(ags) == 1 + 2 * 48
    assert r.iteration_s >= max(s.end for s in r.spans) - 1e-12
    rc, out, _ = _run(capsys, "step", str(FSDP), "--set", "cluster.nodes=1")
    assert rc == 0 and "one FSDP iteration" in out and "# units' reduce-scatters, nccl" in out


def test_fsdp_with_gloo_blocks_on_every_collective(capsys: pytest.CaptureFixture[str]) -> None:
    sim = Simulator.from_source(FSDP, ["cluster.nodes=1", "training.batch_size=2"])
    (r,) = sim.step(["gloo"])
    assert r.backend == "gloo" and len(r.buckets) == 49
    kinds = ("all-gather", "reduce-scatter")
    calls = sorted((s for s in r.spans if s.lane.startswith("Gloo") and s.label.split(" unit ")[0] in kinds),
                   key=lambda s: s.start)  # fmt: skip
    assert len(calls) == (1 + 2 * 48) + 49
    assert all(b.start >= a.end - 1e-12 for a, b in itertools.pairwise(calls))
    rc, out, _ = _run(capsys, "step", str(FSDP), "--set", "cluster.nodes=1", "--backend", "gloo", "--no-buckets")
    assert rc == 0 and "gloo" in out


def test_fsdp_with_nccl_on_cpu_ranks_is_refused_naming_the_field() -> None:
    sim = Simulator.from_source(CPU_RANKS, ["training.style=fsdp", "backends.nccl.enabled=true"])
    with pytest.raises(ScenarioError, match=r"backends\.nccl.*GPU ranks"):
        sim.step(["nccl"])


def test_ddp_and_fsdp_on_the_same_cluster() -> None:
    ddp = Simulator.from_source(FSDP, ["cluster.nodes=1", "training.style=ddp"]).step(["nccl"])[0]
    fsdp = Simulator.from_source(FSDP, ["cluster.nodes=1"]).step()[0]
    assert ddp.compute_s == fsdp.compute_s
    # FSDP moves 1.5x DDP's bytes (all-gather twice + reduce-scatter vs allreduce), and its optimizer is 1/8
    assert fsdp.comm_s > ddp.comm_s


def test_bucket_size_matters_by_up_to_2x_with_gloo_as_the_ddp_paper_observed() -> None:
    # Li et al. 2020 (PyTorch Distributed, VLDB), section 5: the bucket size changes the iteration time by up to 2x.
    # collsim: Gloo on 2 x DGX-1 V100, ResNet-50: small buckets overlap backward, one 100 MB bucket cannot
    it = {}
    for cap in (1, 100):
        (gloo,) = Simulator.from_source(SCENARIO, [f"training.bucket_cap_mb={cap}"]).step(["gloo"])
        it[cap] = gloo.iteration_s
    assert 1.5 < it[100] / it[1] < 2.5


def _mixed_model_scenario(tmp_path: Path, extra: str = "") -> Path:
    """One HGX H100 training a three-linear model whose file says bfloat16, with fc1.weight in float16."""
    (tmp_path / "m.model.yaml").write_text(
        "name: mixed\nsource: test\ndtype: bfloat16\nparams:\n"
        "- {name: fc0.weight, numel: 1048576}\n- {name: fc1.weight, numel: 4194304, dtype: float16}\n"
        "- {name: fc2.weight, numel: 4194304}\n"
        "layers:\n- {name: fc0, params: [fc0.weight], fwd_flops: 1.0e+9}\n"
        "- {name: fc1, params: [fc1.weight], fwd_flops: 1.0e+9}\n"
        "- {name: fc2, params: [fc2.weight], fwd_flops: 1.0e+9}\n",
        encoding="utf-8",
    )
    path = tmp_path / "s.yaml"
    text = f"name: s\ncluster: {{node: hgx-h100}}\ntraining:\n  model: m.model.yaml\n{extra}"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_model_files_dtypes_stand_unless_param_dtype_casts_them(tmp_path: Path) -> None:
    # training.param_dtype unset: the file's bfloat16 and fc1's float16, DDP's Reducer never mixing dtypes in a bucket
    (own,) = Simulator.from_source(_mixed_model_scenario(tmp_path)).step(["nccl"])
    # (reverse order: fc2 fills the 1 MiB first bucket, fc1 opens float16's, fc0 a second bfloat16 one)
    assert [b.nbytes for b in own.buckets] == [4194304 * 2, 4194304 * 2, 1048576 * 2]
    # set: every tensor cast (model.float()), one dtype, 4 bytes each
    (cast,) = Simulator.from_source(_mixed_model_scenario(tmp_path, "  param_dtype: float32\n")).step(["nccl"])
    assert sum(b.nbytes for b in cast.buckets) == (1048576 + 2 * 4194304) * 4


def test_fsdp_refuses_a_unit_of_mixed_dtypes_naming_the_field(tmp_path: Path) -> None:
    # torch's FSDP1 flattens a unit (uniform dtype required) and FSDP2 asserts one original dtype a group
    sim = Simulator.from_source(_mixed_model_scenario(tmp_path, "  style: fsdp\n"))
    with pytest.raises(ScenarioError, match=r"training\.param_dtype.*mixes parameter dtypes bfloat16, float16"):
        sim.step(["nccl"])
    (ok,) = Simulator.from_source(_mixed_model_scenario(tmp_path, "  style: fsdp\n  param_dtype: bfloat16\n")).step(
        ["nccl"]
    )
    assert ok.comm_s > 0


def test_the_other_styles_knobs_and_a_gloo_device_not_used_are_named() -> None:
    # DDP's bucket cap under FSDP, an FSDP section under DDP and a Gloo device the ranks do not have were silently
    # ignored (compression under FSDP is refused: it changes what moves)
    (fsdp,) = Simulator.from_source("fsdp-gpt2xl-2node-h100", ["training.bucket_cap_mb=5"]).step(["nccl"])
    assert "training.bucket_cap_mb: DDP's (its Reducer's buckets); not used with style: fsdp" in fsdp.notes
    (ddp,) = Simulator.from_source("fsdp-gpt2xl-2node-h100", ["training.style=ddp"]).step(["nccl"])
    assert "training.fsdp is FSDP's: not used with style: ddp" in ddp.notes
    (gloo,) = Simulator.from_source(CPU_RANKS, ["backends.gloo.device=cuda"]).step()
    assert gloo.notes[-1] == "backends.gloo.device cuda not used: a training step hands Gloo the ranks' own cpu tensors"
    (plain,) = Simulator.from_source(SCENARIO, ["cluster.nodes=1"]).step(["nccl"])
    assert not any("not used" in n for n in plain.notes)


@pytest.mark.parametrize(("field", "value"), [("bucket_cap_mb", "true"), ("gradient_as_bucket_view", "'yes'")])
def test_a_boolean_for_a_number_or_a_string_for_a_boolean_is_refused(field: str, value: str) -> None:
    with pytest.raises(ScenarioError, match=rf"training\.{field}"):
        Simulator.from_source(SCENARIO, [f"training.{field}={value}"])


def test_fsdps_overlap_is_what_the_compute_stream_does_not_wait() -> None:
    # FSDP's exposed (iteration - the unsharded step on one GPU) nets the sharded optimizer's saving and went below
    # zero, so overlap read 100% while the compute stream waited about 1 ms for the first all-gathers (float32
    # parameters, whose unsharded optimizer costs most, gathered in bf16: exposed -3.9 ms)
    mixed = ["training.param_dtype=float32", "training.fsdp.param_dtype=bfloat16"]
    (r,) = Simulator.from_source("fsdp-gpt2xl-2node-h100", mixed).step(["nccl"])
    first = min(s.start for s in r.spans if s.lane == "compute")
    gather0 = next(s for s in r.spans if s.label == "all-gather unit 0")
    assert r.exposed_s < 0 and r.waited_s is not None and r.waited_s >= first >= gather0.end > 0
    assert r.overlap == pytest.approx(1 - r.waited_s / r.comm_wall_s) and r.overlap < 1
    (ddp,) = Simulator.from_source(SCENARIO, ["cluster.nodes=1"]).step(["nccl"])
    assert ddp.waited_s is None
    assert ddp.overlap == pytest.approx(max(0.0, min(1.0, 1 - ddp.exposed_s / ddp.comm_wall_s)))


def test_gloos_overlap_counts_two_buckets_at_once_once() -> None:
    # Gloo's two worker threads run two buckets together: comm sums both, and overlap against that sum counted
    # communication hidden behind other communication as hidden behind computation (ResNet-50 on 2 x DGX-1: 90.7%)
    (r,) = Simulator.from_source(SCENARIO).step(["gloo"])
    spans = sorted((b.end_s - b.comm_s, b.end_s) for b in r.buckets)
    assert any(s1 < e0 for (_, e0), (s1, _) in itertools.pairwise(spans))  # two at once
    assert r.comm_wall_s < r.comm_s
    assert r.overlap == pytest.approx(1 - r.exposed_s / r.comm_wall_s)
    assert r.overlap < 1 - r.exposed_s / r.comm_s


def test_no_buckets_keeps_the_notes(capsys: pytest.CaptureFixture[str]) -> None:
    # --no-buckets dropped every note with the tables: a setting not used went unsaid
    assert main(["step", "fsdp-gpt2xl-2node-h100", "--no-buckets", "--backend", "nccl",
                 "--set", "training.bucket_cap_mb=5"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "# training.bucket_cap_mb: DDP's (its Reducer's buckets); not used with style: fsdp" in out
    assert out.count("not used with style: fsdp") == 1
