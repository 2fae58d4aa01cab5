"""validate and calibrate: exact errors on synthetic data, parameter recovery, and the published cases."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median

import pytest
from tests_support import shared_calibration_dir

from collsim.api import Simulator, load
from collsim.calibration import Measurement, MeasurementError, MeasurementRow, read_measurement
from collsim.calibration.fit import calibrate, split_sizes
from collsim.calibration.validate import validate
from collsim.cli import main
from collsim.profile import Profile, load_profile

PCIE = "pcie-2gpu-nop2p"
SIZES = [2**k for k in range(3, 28, 2)]  # 8 B .. 128 MiB, x4


def _synthetic(profile: Profile | None, factor: float = 1.0, overrides: tuple[str, ...] = ()) -> Measurement:
    """What the simulator predicts (times ``factor``), as a measurement."""
    sim = Simulator.from_source(PCIE, list(overrides), profile=profile)
    rows = [MeasurementRow(s, sim.simulate_one("nccl", s).time_s * 1e6 * factor) for s in SIZES]
    return Measurement("allreduce", 2, rows, backend="nccl", file="synthetic.json")


def test_validate_reports_exact_errors_and_bands() -> None:
    v = validate(Simulator.from_source(PCIE), _synthetic(None, factor=1.25))
    assert all(r.time_error_pct == pytest.approx(-20.0) for r in v.rows)  # 1/1.25 - 1
    assert all(r.busbw_error_pct == pytest.approx(25.0) for r in v.rows)
    assert [b.count for b in v.bands()] == [7, 4, 2]  # < 64 KiB, 64 KiB - 16 MiB, >= 16 MiB
    assert v.overall().median_abs_time_error_pct == pytest.approx(20.0)
    doc = v.to_dict()
    assert set(doc) >= {"rows", "bands", "overall"} and doc["rows"][0]["time_error_pct"] == pytest.approx(-20.0)


def test_validate_holds_nccls_own_cost_model_against_the_measurement() -> None:
    # every NCCL row also carries the time NCCL's cost model gives the pair it picks; the bands report the signed
    # medians of both errors (the synthetic measurement is collsim x1.25: collsim -20%, the model its own distance)
    sim = Simulator.from_source(PCIE)
    v = validate(sim, _synthetic(None, factor=1.25))
    for r in v.rows:
        out = sim.simulate_one("nccl", r.size_bytes)
        assert r.model_us == pytest.approx(out.predicted_s * 1e6)
        assert r.model_error_pct == pytest.approx((out.predicted_s * 1e6 / r.measured_us - 1) * 100)
    overall = v.overall()
    assert overall.median_time_error_pct == pytest.approx(-20.0)
    assert overall.median_model_error_pct == pytest.approx(median(r.model_error_pct for r in v.rows))
    text = v.format_table()
    assert "NCCL model us" in text and "NCCL's model" in text
    assert v.to_dict()["rows"][0]["model_error_pct"] == pytest.approx(v.rows[0].model_error_pct)


def test_validate_refuses_a_rank_count_mismatch() -> None:
    m = Measurement("allreduce", 8, [MeasurementRow(8, 10.0)], backend="nccl", file="m.json")
    with pytest.raises(MeasurementError, match="8 ranks, the scenario 2"):
        validate(Simulator.from_source(PCIE), m)


@pytest.mark.parametrize("collective", ["alltoall", "sendrecv"])
def test_point_to_point_has_no_nccl_model_column(collective: str) -> None:
    """NCCL has no cost model for point-to-point: the column showed collsim's own estimate as "NCCL's model" (the
    same 1406.5 us at 16 MiB for sendrecv and alltoall, where sendrecv moves twice the bytes per peer)."""
    m = Measurement(collective, 2, [MeasurementRow(16 << 20, 2000.0)], backend="nccl", file="m.json")
    v = validate(Simulator.from_source(PCIE), m)
    assert v.rows[0].model_us is None and "NCCL model us" not in v.format_table()


def test_validate_notes_a_run_on_other_hosts_than_the_scenarios() -> None:
    """Its ranks' count alike, a run over more hosts crosses hosts where the scenario does not (it was compared
    unsaid); the run's hosts, else its nodes, against the scenario's."""
    rows = [MeasurementRow(1 << 20, 100.0)]
    two = Measurement("allreduce", 2, rows, backend="nccl", hardware={"hosts": ["a", "b"]}, file="m.json")
    notes = validate(Simulator.from_source(PCIE), two).notes
    assert "the run's 2 ranks ran on 2 hosts, 1 a host; the scenario's on 1 node (1 host), 2 a host: what crosses " \
           "hosts differs" in notes  # fmt: skip
    one = Measurement("allreduce", 2, rows, backend="nccl", hardware={"hosts": ["a"], "nodes": 1}, file="m.json")
    assert not any("crosses" in n for n in validate(Simulator.from_source(PCIE), one).notes)
    nodes = Measurement("allreduce", 2, rows, backend="nccl", hardware={"nodes": 2}, file="m.json")
    assert "the run's 2 ranks ran on 2 nodes, the scenario's on 1: what crosses nodes differs" in validate(
        Simulator.from_source(PCIE), nodes).notes  # fmt: skip
    from collsim.topology import load_topology

    assert load_topology("gb200-nvl72").hosts_per_node() == 18  # a rack's compute trays are its hosts


def test_split_sizes_alternates_and_keeps_the_ends() -> None:
    fit, held = split_sizes(SIZES, "alternate")
    assert held == SIZES[1:-1:2] and fit[0] == SIZES[0] and fit[-1] == SIZES[-1]
    assert sorted(fit + held) == SIZES


def test_calibrate_recovers_known_parameters() -> None:
    truth = Profile({"link.pcie.bandwidth_scale": 0.8, "nccl.launch_overhead_us": 6.0})
    res = calibrate(load(PCIE), [_synthetic(truth)], parameters=list(truth.parameters))
    assert res.profile.parameters["link.pcie.bandwidth_scale"] == pytest.approx(0.8, rel=1e-3)
    assert res.profile.parameters["nccl.launch_overhead_us"] == pytest.approx(6.0, abs=0.05)
    held = res.error("after", held_out=True)
    assert held.count == 6 and held.max_abs_time_error_pct is not None and held.max_abs_time_error_pct < 0.1


def test_a_scale_fitted_from_its_neutral_start_moves_on_one_size() -> None:
    # a scale starts at 1 (0 in its log search space), where a step relative to x is nothing: the fit must still
    # find the slope (it stalled at 1.0 when scipy's relative diff_step fell back to 1.5e-8 there)
    # (2 x HGX H100 at 1 GiB: 1 + 1.5e-8 of NVLink came out 0.12 ns slower)
    name, size = "link.nvlink.bandwidth_scale", 2**30
    sim = Simulator.from_source("2node-h100-ib", profile=Profile({name: 0.9}))
    row = MeasurementRow(size, sim.simulate_one("nccl", size).time_s * 1e6)
    one = Measurement("allreduce", 16, [row], backend="nccl", file="one.json")
    res = calibrate(load("2node-h100-ib"), [one], parameters=[name], holdout="none")
    assert res.profile.parameters[name] == pytest.approx(0.9, rel=2e-3)
    assert res.error("after", held_out=False).median_abs_time_error_pct < 0.1


def test_calibrate_says_what_it_does_not_apply_and_what_cannot_be_told(tmp_path: Path) -> None:
    # a scenario naming its own profile: the fit starts from the presets; two parameters on one size: the fit
    # sizes' error proves nothing (both passed silently)
    prof = tmp_path / "own.yaml"
    Profile({"link.pcie.bandwidth_scale": 0.8}).write(prof)
    scen = tmp_path / "s.yaml"
    shipped = Path(__file__).resolve().parents[2] / "scenarios" / f"{PCIE}.yaml"
    scen.write_text(shipped.read_text() + "\ncalibration: own.yaml\n")
    m = _synthetic(None)
    one = Measurement("allreduce", 2, [r for r in m.rows if r.size_bytes == 2**27], backend="nccl", file="one.json")
    names = ["link.pcie.bandwidth_scale", "nccl.launch_overhead_us"]
    res = calibrate(load(scen), [one], parameters=names, holdout="none")
    assert any(n.startswith(f"the scenario's own calibration profile ({prof}) is not applied") for n in res.notes)
    assert any(n.startswith("2 parameters fitted on 1 size: as many unknowns as data or more") for n in res.notes)


def test_validate_notes_a_profiles_parameters_of_the_other_backend(tmp_path: Path) -> None:
    # a Gloo profile on an NCCL validation changed nothing and said nothing
    prof = tmp_path / "gloo.yaml"
    Profile({"gloo.reduce_bw_scale": 0.5}).write(prof)
    sim = Simulator.from_source(PCIE, profile=load_profile(prof))
    v = validate(sim, _synthetic(None))
    assert any(n == f"calibration {prof}: gloo.reduce_bw_scale acts on gloo only, not on this nccl measurement"
               for n in v.notes)  # fmt: skip
    assert v.overall().median_abs_time_error_pct == pytest.approx(0.0, abs=1e-9)


def test_calibrate_with_workers_fits_the_same_profile() -> None:
    truth = Profile({"link.pcie.bandwidth_scale": 0.8, "nccl.launch_overhead_us": 6.0})
    args = (load(PCIE), [_synthetic(truth)])
    serial = calibrate(*args, parameters=list(truth.parameters), jobs=1)
    parallel = calibrate(*args, parameters=list(truth.parameters), jobs=2)
    assert parallel.profile.parameters == serial.profile.parameters
    assert parallel.evaluations == serial.evaluations


def test_calibrate_chooses_only_parameters_that_matter() -> None:
    res = calibrate(load(PCIE), [_synthetic(Profile({"nccl.launch_overhead_us": 6.0}))])
    assert "nccl.launch_overhead_us" in res.parameters or "link.pcie.latency_us" in res.parameters
    assert all(res.sensitivity[p] >= 0.5 for p in res.parameters)
    assert res.error("after", held_out=True).median_abs_time_error_pct < 1.0


SHARED = shared_calibration_dir()
needs_shared = pytest.mark.skipif(SHARED is None, reason="shared/calibration-data not found (set COLLSIM_SHARED)")
VALIDATION = Path(__file__).resolve().parents[2] / "scenarios" / "validation"


def _case(name: str) -> Measurement:
    assert SHARED is not None
    return read_measurement(SHARED / f"{name}.json")


# Uncalibrated errors, presets only, as measured (README accuracy table). The issue's targets: median |busbw error|
# <= 20% on sizes >= 16 MiB and median |time error| <= 35% on sizes <= 64 KiB for every NCCL case.
NCCL_CASES = {
    "a100_8gpu_1node_stas00": (True, True),
    "aws_p4de_2node_efa_a100": (True, True),
    "azure_nd_h100_v5_1node": (True, True),
    "h100_4node_vm_ib_ndr_issue309": (True, True),
    "hgx_h100_2node_ib_ndr_issue309": (True, True),  # issue 12's first error: +11.5% to +47% busbw at >= 16 MiB
    # the SHM plateau is now predicted from the hardware, no longer fitted to this case: 6.0 against 4.00 GB/s, +50%
    # busbw at >= 16 MiB (docs/host-paths.md)
    "rtx2080ti_2gpu_pcie3_switch_nop2p": (False, True),
    # torch.distributed timing one call on an idle GPU: PyTorch's per-call host overhead in every time, which the
    # scenario states (workload.host_overhead: torch); small sizes 68.2% -> 18.4% with it (docs/accuracy.md)
    "b200_8gpu_1node_p6_torch_stas00": (True, True),
}


@needs_shared
@pytest.mark.parametrize("case", sorted(p.stem for p in VALIDATION.glob("*.yaml")))
def test_every_validation_scenario_validates_against_its_case(case: str) -> None:
    m = _case(case)
    v = validate(Simulator.from_source(VALIDATION / f"{case}.yaml"), m)
    assert len(v.rows) == len(m.rows)
    if case not in NCCL_CASES:
        return
    big = [abs(r.busbw_error_pct) for r in v.rows if r.size_bytes >= 16 * 2**20]
    small = [abs(r.time_error_pct) for r in v.rows if r.size_bytes <= 64 * 2**10]
    busbw_ok, time_ok = NCCL_CASES[case]
    assert (median(big) <= 20.0) == busbw_ok, median(big)
    assert (median(small) <= 35.0) == time_ok, median(small)  # the misses are explained in the README


# Issue 12's targets on the NVLink cases, uncalibrated: median |busbw error| <= 8% at >= 16 MiB and median |time
# error| <= 20% at 64 KiB-16 MiB, as measured (README accuracy table; docs/accuracy.md explains each miss).
ISSUE12_CASES = {
    "a100_8gpu_1node_stas00": (True, False),
    "aws_p4de_2node_efa_a100": (True, True),
    # NCCL 2.18.5's one-node NVLS gives a buffer below one loop (2 MiB) to its first channels only
    # (backends.nccl.version): mid sizes 27.5% -> 18.0%
    "azure_nd_h100_v5_1node": (True, True),
    "h100_4node_vm_ib_ndr_issue309": (True, True),  # mid sizes 24.8% -> 10.1%: NCCL's hops pay hwLat alone
    "hgx_h100_2node_ib_ndr_issue309": (True, True),
    # torch.distributed timing one call on an idle GPU: PyTorch's per-call host overhead at every size
    # (workload.host_overhead: torch); before it was modelled, mid sizes were 60.3% off and busbw >= 16 MiB 9.0%
    "b200_8gpu_1node_p6_torch_stas00": (True, True),
}


@needs_shared
@pytest.mark.parametrize("case", sorted(ISSUE12_CASES))
def test_issue12_targets_on_the_nvlink_cases(case: str) -> None:
    v = validate(Simulator.from_source(VALIDATION / f"{case}.yaml"), _case(case))
    big = [abs(r.busbw_error_pct) for r in v.rows if r.size_bytes >= 16 * 2**20]
    mid = [abs(r.time_error_pct) for r in v.rows if 64 * 2**10 <= r.size_bytes < 16 * 2**20]
    assert (median(big) <= 8.0, median(mid) <= 20.0) == ISSUE12_CASES[case], (median(big), median(mid))
    if case.startswith("b200"):  # the B200 target: within 10% at >= 256 MiB
        assert median(abs(r.busbw_error_pct) for r in v.rows if r.size_bytes >= 256 * 2**20) <= 10.0


@needs_shared
def test_calibrated_on_held_out_sizes_meets_the_target() -> None:
    """Calibrated on the 2-GPU PCIe case, held-out sizes: median |time error| <= 5%, max <= 15%."""
    res = calibrate(load(VALIDATION / "rtx2080ti_2gpu_pcie3_switch_nop2p.yaml"),
                    [_case("rtx2080ti_2gpu_pcie3_switch_nop2p")])
    held = res.error("after", held_out=True)
    assert held.median_abs_time_error_pct is not None and held.max_abs_time_error_pct is not None
    assert held.median_abs_time_error_pct <= 5.0 and held.max_abs_time_error_pct <= 15.0
    assert held.median_abs_time_error_pct < res.error("before", held_out=True).median_abs_time_error_pct  # type: ignore[operator]


@needs_shared
def test_cli_calibrate_then_validate_with_the_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert SHARED is not None
    case = str(SHARED / "rtx2080ti_2gpu_pcie3_switch_nop2p.json")
    prof = tmp_path / "p.yaml"
    assert main(["calibrate", PCIE, case, "-o", str(prof), "--quiet"]) == 0
    assert "held-out sizes (13)" in capsys.readouterr().out
    assert load_profile(prof).meta["fitted_on"]["measurements"] == [case]
    html = tmp_path / "v.html"
    assert main(["validate", PCIE, case, "--profile", str(prof), "--format", "json", "--html", str(html)]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    assert doc["profile"] == str(prof) and doc["overall"]["median_abs_time_error_pct"] < 2.0
    assert "plotly" in html.read_text()[:200000].lower()


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "m.json"
    bad.write_text('{"collective": "allreduce", "rows": [{"size_bytes": 8}]}')
    assert main(["validate", PCIE, str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"collsim: error: {bad}: rows[0]: missing time_us") and err.count("\n") == 1


def test_real_gloo_loopback_calibration_predicts_held_out_sizes() -> None:
    """Measured here with `collsim bench` (Gloo, CPU, 2 processes, loopback): fitted on half the sizes, the other half
    is predicted with median |time error| <= 15% for sizes >= 64 KiB."""
    root = Path(__file__).resolve().parents[2] / "scenarios"
    m = read_measurement(root / "measurements" / "gloo-cpu-2proc-loopback.json")
    assert m.backend == "gloo" and m.nranks == 2 and len(m.rows) >= 16
    res = calibrate(load(root / "loopback-gloo-cpu.yaml"), [m])
    (after,) = res.after
    held = [abs(r.time_error_pct) for r in after.rows if r.size_bytes in res.heldout_sizes and r.size_bytes >= 2**16]
    assert len(held) >= 4
    assert median(held) <= 15.0


def test_the_h200_hosts_gloo_profile_fitted_on_two_ranks_predicts_four_and_eight() -> None:
    """The H200 probe's host (16 vCPUs): Gloo on CPU tensors over loopback with 2, 4 and 8 processes. Uncalibrated,
    the xeon-8480 estimates are 2-4x fast; the committed profile, fitted on the 2-rank file alone (message latency
    and TCP rate), predicts the 4- and 8-rank files within 10% (median over all sizes)."""
    root = Path(__file__).resolve().parents[2] / "scenarios" / "measurements"
    scenario = root / "h200-host-gloo-cpu.scenario.yaml"
    prof = load_profile(root / "h200-host-gloo-cpu.profile.yaml")
    assert set(prof.parameters) == {"gloo.message_latency_us", "gloo.tcp_bw_scale"}
    assert prof.meta["fitted_on"]["measurements"] == ["scenarios/measurements/h200-probe/gloo-cpu-2rank.json"]
    for n in (2, 4, 8):
        m = read_measurement(root / "h200-probe" / f"gloo-cpu-{n}rank.json")
        assert m.nranks == n and m.backend == "gloo" and len(m.rows) == 10
        sets = [f"cluster.node_params.processes={n}"]
        before = validate(Simulator.from_source(scenario, sets), m)
        after = validate(Simulator.from_source(scenario, sets, profile=prof), m)
        assert median(abs(r.time_error_pct) for r in before.rows) > 50  # the estimates: far too fast here
        assert all(r.time_error_pct < 0 for r in before.rows)
        if n > 2:  # not fitted on
            assert median(abs(r.time_error_pct) for r in after.rows) <= 10.0


def test_gloo_on_cuda_tensors_with_ranks_sharing_the_h200_adds_the_copies_on_its_one_pcie_link() -> None:
    """The H200 probe's Gloo runs on CUDA tensors, 1-8 processes sharing the one GPU: the CPU ring at the host's
    rates (the CPU-tensor profile, fitted on 2 processes' CPU runs) plus each rank's two staging copies, the ranks'
    copies sharing the GPU's PCIe Gen5 link at its measured copy rate. Nothing was fitted to these files: from
    16 MiB on, the median |time error| is within 10% for every rank count, and the 8-rank 256 MiB point (78 of its
    311 ms are the 16 copies of 256 MiB through one link) within 2%. Below 64 KiB it is too fast by 30-80%: the
    per-call cost of ProcessGroupGloo's CUDA path (85-105 us with one rank, about 140 us per rank sharing the GPU,
    scenarios/measurements/README.md) is not modelled."""
    root = Path(__file__).resolve().parents[2] / "scenarios" / "measurements"
    scenario = root / "h200-host-gloo-cuda.scenario.yaml"
    for n in (1, 2, 4, 8):
        m = read_measurement(root / "h200-probe" / f"gloo-cuda-{n}rank.json")
        assert m.nranks == n and m.device == "cuda" and len(m.rows) == 10
        sim = Simulator.from_source(scenario, [f"cluster.ranks_per_gpu={n}"])
        assert sim.profile is not None and sim.topology.gpus() and len(sim.topology.rank_devices()) == n
        rows = validate(sim, m).rows
        big = [abs(r.time_error_pct) for r in rows if r.size_bytes >= 16 * 2**20]
        assert median(big) <= 10.0, (n, big)
        assert all(r.time_error_pct < -30 for r in rows if r.size_bytes < 64 * 2**10), n
        if n == 8:
            last = rows[-1]
            assert last.size_bytes == 256 * 2**20 and abs(last.time_error_pct) <= 2.0


@needs_shared
def test_the_two_node_a100_profile_holds_efa_parameters_only() -> None:
    """The two-node A100 run used NCCL's Simple protocol over EFA (AWS's plugin sets it on a p4de), so the profile
    `collsim calibrate` fits to it (committed) is about EFA alone: applied to the one-node A100 case, which has no
    EFA link, it changes no time. That is why the README shows no A100 transfer any more."""
    prof = load_profile(VALIDATION / "profiles" / "aws_p4de_2node_efa_a100.yaml")
    assert prof.parameters and set(prof.parameters) <= {"link.roce.latency_us", "link.roce.bandwidth_scale"}
    m = _case("a100_8gpu_1node_stas00")
    scenario = VALIDATION / "a100_8gpu_1node_stas00.yaml"
    before = validate(Simulator.from_source(scenario), m)
    after = validate(Simulator.from_source(scenario, profile=prof), m)
    assert [r.predicted_us for r in after.rows] == [r.predicted_us for r in before.rows]


def test_calibrate_refuses_a_rank_count_mismatch() -> None:
    m = Measurement("allreduce", 8, [MeasurementRow(8, 10.0)], backend="nccl", file="m.json")
    with pytest.raises(MeasurementError, match="8 ranks, the scenario 2"):
        calibrate(load(PCIE), [m])


def test_a_stuck_parameter_gives_way_to_a_parallel_one() -> None:
    # 8 us less per collective: the PCIe latency moves the small sizes most, so it is chosen first, but it clamps
    # at zero before it gets there; the launch overhead, parallel to it and held in reserve, takes its place.
    # With P2P on: without it the PCIe latency also sets the SHM channels' read cap (Little's law,
    # docs/host-paths.md), so it is not stuck at zero there
    p2p = ("cluster.node_params.p2p=true",)
    res = calibrate(load(PCIE, list(p2p)), [_synthetic(Profile({"nccl.launch_overhead_us": -8.0}), overrides=p2p)])
    assert "nccl.launch_overhead_us" in res.parameters and "link.pcie.latency_us" not in res.parameters
    assert res.notes and res.notes[0].startswith("link.pcie.latency_us was stuck at")
    assert res.error("after", held_out=True).median_abs_time_error_pct < 1.0


def test_the_fit_says_what_its_measurements_could_not_determine() -> None:
    from types import SimpleNamespace

    import numpy as np

    from collsim.calibration.fit import _confounded

    # two latencies every row pays alike (columns nearly equal) and a factor at its upper bound (x10 = log 10)
    jac = np.array([[1.0, 4.0, 0.1], [1.0, 4.01, 0.5], [1.0, 3.99, 1.0]])
    names = ["gloo.enqueue_latency_us", "gloo.message_latency_us", "gloo.reduce_bw_scale"]
    notes = _confounded(names, SimpleNamespace(jac=jac, x=np.array([100.0, 40.0, np.log(10.0)])))
    assert notes[0].startswith("gloo.reduce_bw_scale ended at its bound 10:")
    assert notes[1].startswith("gloo.enqueue_latency_us and gloo.message_latency_us are correlated at")
    assert len(notes) == 2
    # independent effects, inside the bounds: nothing to say
    free = SimpleNamespace(jac=np.eye(3), x=np.array([100.0, 40.0, 0.0]))
    assert _confounded(names, free) == []


def test_sizes_of_no_elements_are_left_out_with_a_note() -> None:
    """An all-gather row below one element a rank (nccl-tests' -b 8 on 8 GPUs prints size 0; 16 B of floats on 2
    ranks is 2 elements, 4 B is none): NCCL returns at once, so nothing to compare and nothing to divide by."""
    sim = Simulator.from_source(PCIE, ["workload.collective=allgather"])
    m = Measurement("allgather", 2, [MeasurementRow(4, 3.0), MeasurementRow(1024, 20.0)], backend="nccl",
                    file="ag.json")  # fmt: skip
    v = validate(sim, m)
    assert [r.size_bytes for r in v.rows] == [1024]
    assert "left out 1 size of no elements on 2 ranks (4B): NCCL returns at once" in v.notes
    empty = Measurement("allgather", 2, [MeasurementRow(4, 3.0)], backend="nccl", file="ag.json")
    with pytest.raises(MeasurementError, match="no size with elements to move"):
        calibrate(sim.scenario, [empty])
    # validate refuses it too (it printed an empty table and exited 0: a check that compared nothing passed)
    with pytest.raises(MeasurementError, match=r"no size to compare \(every row is below one element on 2 ranks"):
        validate(sim, empty)
    with pytest.raises(MeasurementError, match=r"none of the sizes asked for is in it"):
        validate(sim, m, sizes=[2048])


def test_validate_notes_a_collective_or_gpus_per_process_other_than_the_scenarios() -> None:
    m = Measurement("allgather", 2, [MeasurementRow(1024, 20.0)], backend="nccl", file="ag.json",
                    software={"gpus_per_process": 2})  # fmt: skip
    notes = validate(Simulator.from_source(PCIE), m).notes
    assert "the measurement is allgather, the scenario's workload.collective allreduce: allgather simulated" in notes
    assert any(n.startswith("the run drove 2 GPUs a process (nccl-tests -g 2), the scenario's "
                            "workload.gpus_per_process is 1: set it to 2") for n in notes)  # fmt: skip
    same = validate(Simulator.from_source(PCIE, ["workload.collective=allgather", "workload.gpus_per_process=2"]), m)
    assert not any("workload." in n for n in same.notes)
