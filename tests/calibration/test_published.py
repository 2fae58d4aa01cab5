"""Published runs kept in ``scenarios/published/`` (not in shared/): mechanisms checked on runs not used to set them."""

from __future__ import annotations

from statistics import median

import pytest

from collsim.api import Simulator
from collsim.calibration import read_measurement
from collsim.calibration.validate import validate
from collsim.scenario import scenarios_dir

PUBLISHED = scenarios_dir() / "published"


def test_h200_torch_run_with_pytorchs_per_call_host_overhead() -> None:
    # stas00's 8 x H200 all_reduce_bench.py run times one call on an idle GPU: with PyTorch's per-call host overhead
    # (25 us, nccl.yaml, from the same author's "some 20-30us") collsim meets issue 12's targets on it; without it,
    # the kernel alone is 40-58% fast below 4 MiB
    case = "h200_8gpu_1node_torch_stas00"
    m = read_measurement(PUBLISHED / f"{case}.json")
    sim = Simulator.from_source(PUBLISHED / f"{case}.yaml")
    bare = Simulator.from_source(PUBLISHED / f"{case}.yaml", ["workload.host_overhead=none"])
    errors = {}
    for name, s in (("torch", sim), ("none", bare)):
        v = validate(s, m)
        big = median(abs(r.busbw_error_pct) for r in v.rows if r.size_bytes >= 16 * 2**20)
        mid = median(abs(r.time_error_pct) for r in v.rows if 64 * 2**10 <= r.size_bytes < 16 * 2**20)
        errors[name] = (big, mid)
    assert errors["torch"][0] <= 8.0 and errors["torch"][1] <= 20.0, errors
    assert errors["none"][1] > 20.0, errors  # the overhead is what closes the mid sizes
    # NCCL's choice as the author read it from NCCL_DEBUG=TUNING: Ring/LL up to 1 MiB, NVLS/Simple from 2 MiB
    choice = {r.size_bytes: (r.algorithm, r.protocol) for r in validate(sim, m).rows}
    assert {choice[s] for s in choice if s <= 2**20} == {("Ring", "LL")}
    assert {choice[s] for s in choice if s >= 2**21} == {("NVLS", "Simple")}


def test_validate_notes_an_nccl_release_the_scenario_does_not_name() -> None:
    """The tuner's tables follow backends.nccl.version: a measurement naming another release gets a note."""
    from collsim.calibration import Measurement, MeasurementRow

    m = Measurement("allreduce", 8, [MeasurementRow(1 << 20, 50.0)], backend="nccl",
                    software={"benchmark": "nccl-tests", "nccl_version": "2.26.2+cuda12.8 (printed)"})  # fmt: skip
    assert validate(Simulator.from_source("hgx-h100"), m).notes == [
        'the measurement names NCCL 2.26.2 and the scenario none (collsim follows the latest release): set '
        'backends.nccl.version: "2.26.2" if that is what ran'
    ]
    tables = ("NCCL {} (backends.nccl.version): its tuner's latency and bandwidth tables price the choice "
              "(tuning.cc of that release); the simulation takes the latest's")  # fmt: skip
    other = validate(Simulator.from_source("hgx-h100", ['backends.nccl.version="2.27.7"']), m)
    assert other.notes == [
        "the measurement names NCCL 2.26.2, the scenario's backends.nccl.version is 2.27.7", tables.format("2.27.7")
    ]
    # the scenario's release notes as run and explain print them, and nothing about the measurement's release
    assert validate(Simulator.from_source("hgx-h100", ['backends.nccl.version="2.26.2"']), m).notes == [
        tables.format("2.26.2")
    ]
    old = validate(Simulator.from_source("hgx-h100", ['backends.nccl.version="2.16.5"']), m).notes
    assert "NCCL 2.16.5 (backends.nccl.version) has no NVLS (from 2.17): not offered" in old


def test_validate_notes_a_timing_the_scenario_does_not_state() -> None:
    # the measurement's harness against workload.host_overhead: a note in the table and the JSON, none when they agree
    from collsim.calibration import Measurement, MeasurementRow

    case = "h200_8gpu_1node_torch_stas00"
    m = read_measurement(PUBLISHED / f"{case}.json")
    bare = validate(Simulator.from_source(PUBLISHED / f"{case}.yaml", ["workload.host_overhead=none"]), m)
    release = "NCCL 2.27.7 (backends.nccl.version): its tuner's latency and bandwidth tables price the choice"
    assert bare.notes[1].startswith(release)  # the scenario's release (test_validate_notes_an_nccl_release...)
    assert bare.notes[:1] == [
        "the measurement comes from a torch.distributed benchmark: if it times one call on an idle GPU, set "
        "workload.host_overhead: torch (docs/modelling.md)"
    ]
    assert bare.format_table().startswith("# note: the measurement comes from a torch.distributed benchmark")
    assert bare.to_dict()["notes"] == bare.notes
    agreed = validate(Simulator.from_source(PUBLISHED / f"{case}.yaml"), m).notes
    assert [n[: len(release)] for n in agreed] == [release]
    nccl_tests = Measurement("allreduce", 8, [MeasurementRow(1 << 20, 50.0)], backend="nccl",
                             software={"benchmark": "NVIDIA/nccl-tests all_reduce_perf"})  # fmt: skip
    timed = validate(Simulator.from_source("hgx-h100", ["workload.host_overhead=torch"]), nccl_tests)
    assert timed.notes == ["nccl-tests queues its calls back to back, which hides the host's work, but "
                           "workload.host_overhead is torch"]  # fmt: skip
    bench = Measurement("allreduce", 8, [MeasurementRow(1 << 20, 50.0)], backend="nccl", device="cuda",
                        software={"timing": "iteration"})  # fmt: skip
    assert validate(Simulator.from_source("hgx-h100"), bench).notes[0].startswith(
        "the measurement times one call per iteration on GPUs"
    )
    assert validate(Simulator.from_source("hgx-h100"), nccl_tests).notes == []


def test_aws_p5_two_nodes_as_nccl_sees_the_efa_devices() -> None:
    # AWS's published 2 x p5 run: with the 32 EFA devices as NCCL sees them (8 grouped devices of 400 Gb/s, one per
    # GPU) the NVLSTree plateau is within a few percent (it was 72 against 487 GB/s busbw with 32 devices of 100);
    # the 16-256 MiB approach is still fast, less so since NVLS's local copies (the README's accuracy table)
    case = "aws_p5_2node_efa"
    v = validate(Simulator.from_source(PUBLISHED / f"{case}.yaml"), read_measurement(PUBLISHED / f"{case}.json"))
    plateau = [abs(r.busbw_error_pct) for r in v.rows if r.size_bytes >= 4 * 2**30]
    big = median(abs(r.busbw_error_pct) for r in v.rows if r.size_bytes >= 16 * 2**20)
    assert max(plateau) <= 8.0 and big <= 20.0, (plateau, big)
    assert {r.algorithm for r in v.rows if r.size_bytes >= 64 * 2**20} == {"NVLSTree"}
    # the 75 us network latency aws-ofi-nccl reports to NCCL's cost model (twice for Simple) keeps NVLSTree/Simple
    # out below 64 MiB: Tree/LL128 at 16 MiB, Ring/LL128 at 32 MiB
    assert [r.algorithm for r in v.rows if 16 * 2**20 <= r.size_bytes < 64 * 2**20] == ["Tree", "Ring"]


#: The published runs kept here and their median |busbw error| at >= 16 MiB as measured on 2026-12-04, after NVLS's
#: local copies (docs/accuracy.md, "Published runs outside shared/"), each with a point of slack: a change that makes
#: collsim worse on hardware it was not built on fails here, one that makes it better should lower the figure.
_PUBLISHED_BIG = {
    # p5 on 2 nodes with the plugin's reported network latency in NCCL's cost model and aws-ofi-nccl 1.8.1's NVLS
    # chunk (2026-12-04: 9.7% before; its 16-32 MiB then run Tree/LL128 and Ring/LL128, 38-40% fast), and no GDR
    # flush on Hopper from NCCL 2.19 (13.6% -> 15.5%: NVLSTree's 64 MiB-2 GiB faster still); 12.6% with NCCL
    # 2.20.3's NVLSTree chunk (no NCCL_NVLS_CHUNKSIZE before 2.21.5: the Simple step, capped at the plugin's 512 KiB),
    # 6.6% with EFA's per-message cost (NIC preset message_overhead, 2026-12-05; 7.1% with a message taken as a
    # whole step and the EFA link latency at 16.36 us, the same day)
    "aws_p5_2node_efa": 7.6,
    "nebius_h100_2node_ib": 8.9,
    # 14.7% -> 12.2% with the tree's thread split (2026-12-05); 12.2% -> 6.2% with NCCL's caps priced per graph channel
    # (2026-12-06: Ring/LL128 at 16-64 MiB and Ring/Simple from 128 MiB, as the run's curve says)
    "crusoe_a100_2node_ib": 7.2,
    # NCCL 2.26.2's own NVLSTree formula (before 2.28.3: min(NVLink, NICs) x 5/6) had moved its pick to Tree/Simple
    # from 512 MiB, 10-19% slower than the run measured (2026-12-05: 5.5% -> 9.4%; 12.9% with NCCL's tree layout);
    # 12.7% -> 4.9% once the tree is priced at its search's bwIntra, 48 GB/s on 2.26.2's Blackwell ladder
    # (2026-12-06, tests/backends/test_tree_search.py): NVLSTree again from 1 MiB up
    "lambda_b200_2node_ib": 5.9,
    "gcp_a4_b200_2node_roce": 7.0,
    # with the GCP profile NCCL 2.21.5 shipped with (Ring,Tree, Simple, no NVLS: 2026-12-05; 36.8% with the current one)
    "gcp_a3mega_h100_2node_tcpxo": 17.0,  # 13.8% -> 16.0% with the tree's thread split (2026-12-05)
    "rtx4090_8gpu_pcie_nop2p": 5.2,
    # p5 at 2-16 nodes since AWS's tuner plugin and its NVLS chunk sizes are modelled (2026-12-04; 4 nodes was
    # 11.9% with NCCL's own choice, 8 and 16 nodes 26.2% and 31.8%); 4 nodes 15.3% -> 15.1% when an LL128 piece began
    # to reach the receiver's forwarding with its warp's 16-line slice (2026-12-05)
    # EFA's per-message cost (3.55 us on each NIC port, from NVIDIA/nccl#1112's 8 x p5 run; 2026-12-05): 4 nodes
    # 15.1% -> 2.0%, 8 nodes 19.6% -> 1.1%, 16 nodes 40.2% -> 1.4% (its Tree/LL128 at 32-256 MiB had run 1.7-1.9x
    # faster than measured since NCCL's tree layout; LL128's 72-576 KB steps pay the cost far more than Simple's)
    "aws_p5_4node_efa_nccl2277": 3.0,
    "aws_p5_8node_efa_nccl2277": 2.1,
    "aws_p5_16node_efa_nccl2277": 2.4,
    # four more, added after NVLS's local copies were modelled and checked with them unchanged (2026-12-04)
    "h200_2node_roce_spectrumx": 3.9,
    "h100_8node_ib_issue309": 17.8,  # 18.3% -> 16.8% with NCCL's caps priced per graph channel (2026-12-06)
    "dgx1_v100_8gpu_g8": 5.3,
    # 24.1% -> 25.5% with NVLS's 32-head limit (NCCL_MAX_NVLS_ARITY, 2026-12-06): the source moved it away
    "gb200_nvl72_1rack_coreweave": 26.5,
    # two and twenty racks of the same README, added 2026-12-06 once GB200's NVLink-C2C and NCCL's P2C path were
    # modelled: two racks carry the one rack's NVLS error (31.0%); twenty are 2.5x slower than simulated, with a
    # fixed cost of about 4.6 ms no modelled algorithm has (docs/accuracy.md, "GB200 across racks")
    "gb200_nvl72_2rack_coreweave": 32.0,
    "gb200_nvl72_20rack_coreweave": 174.6,
    # ten more, the first of other collectives than allreduce, added 2026-12-05: a cluster-acceptance report's HGX
    # B200 sweeps on one node and on two over InfiniBand, and Google's all_gather examples on A4 (B200, RoCE) and
    # A3 Mega (TCPXO). At >= 16 MiB within 12% but the two-node all_gather / reduce_scatter (28-29%: a 305-308 GB/s
    # plateau against 384, unexplained); below 16 MiB collsim and NCCL's model are both 21-62% fast
    # (docs/accuracy.md, "Other collectives and B200 acceptance sweeps")
    "vultr_b200_8gpu_allreduce": 7.5,
    "vultr_b200_8gpu_allgather": 6.6,
    "vultr_b200_8gpu_reduce_scatter": 5.8,
    # 26.8% before NCCL's point-to-point schedule was modelled (2026-12-05, the same day); sendrecv added with it
    "vultr_b200_8gpu_alltoall": 8.1,
    "vultr_b200_8gpu_sendrecv": 4.3,
    "vultr_b200_2node_ib_allreduce": 7.0,
    "vultr_b200_2node_ib_allgather": 29.8,
    "vultr_b200_2node_ib_reduce_scatter": 28.9,
    "gcp_a4_b200_2node_roce_allgather": 13.0,
    "gcp_a3mega_h100_2node_tcpxo_allgather": 11.0,
    # OCI's GB200 quick start (NCCL 2.27.3; two rows each, 4-16 GiB), added 2026-12-06 with gb200-nvl72 partitions
    # of any whole number of trays and fabric crossings spread over every spine: all-to-all on 1, 2 and 16 trays and
    # 2 and 3 racks within 2.9-16.1%, all-reduce on one tray (-g 4) and 16 trays 11.8-11.9%, on 2 and 3 racks
    # 25.1% and 32.8% (the simulated NVLSTree keeps one rack's rate, the runs lose 10% and 16%: docs/accuracy.md,
    # "GB200 racks at OCI")
    "oci_gb200_1tray_allreduce_g4": 12.8,
    "oci_gb200_16tray_allreduce": 12.9,
    "oci_gb200_2rack_allreduce": 26.1,
    "oci_gb200_3rack_allreduce": 33.8,
    "oci_gb200_1tray_alltoall_g4": 5.3,
    "oci_gb200_2tray_alltoall": 3.9,
    "oci_gb200_16tray_alltoall": 7.3,
    "oci_gb200_2rack_alltoall": 7.8,
    "oci_gb200_3rack_alltoall": 17.1,
    # Gloo on CPU, added 2026-12-06 with workload.cores_per_process (each process pinned to one core): 21.8% (63.6%
    # with the pinning left out: the sends, receives and reduction of a rank each on a core of their own)
    "gloo_cpu_2node_40gbe_pinned_issue248": 22.8,
    # OCI's BM.GPU.H100.8 tutorial (NCCL 2.21.5, 1-16 GiB), added 2026-12-06 with the template's dual-port cards as
    # NCCL merges them (one 400 Gb/s device per GPU): 6.8%; 18.1% with a device per 200 Gb/s port (rings, 380 GB/s
    # against 464 measured: no graph of NCCL's reaches the measured rate on 16 separate ports)
    "oci_h100_2node_roce": 7.8,
    # two more the same day: p4d (A100 40GB) on the shared p4de run's EFA fabric, NCCL 2.23.4 and aws-ofi-nccl 1.13.2
    # (3.1%), and Google's all_gather on two A3 Ultra (H200, 8 x 400 Gb/s RoCE, NCCL 2.26.6: 22.6%, a plateau of 325
    # against 380 GB/s simulated, as Vultr's B200 pair: docs/accuracy.md, "More published two-node runs")
    "aws_p4d_2node_efa_nccl2234": 4.1,
    "gcp_a3ultra_h200_2node_roce_allgather": 23.6,
    # Argonne's OCI guide (2 x 8 H200, 8 RDMA devices a node, NCCL 2.27.5, 1-16 GiB), added 2026-12-07: NVLSTree
    # within 2.2-4.1% in time (docs/accuracy.md, "Six more published runs, one kept")
    "oci_h200_2node_roce_argonne": 3.7,
}


@pytest.mark.parametrize("case", sorted(_PUBLISHED_BIG))
def test_published_runs_stay_within_their_measured_error(case: str) -> None:
    v = validate(Simulator.from_source(PUBLISHED / f"{case}.yaml"), read_measurement(PUBLISHED / f"{case}.json"))
    big = median(abs(r.busbw_error_pct) for r in v.rows if r.size_bytes >= 16 * 2**20)
    assert big <= _PUBLISHED_BIG[case], big


def test_the_a3_mega_run_takes_the_gcp_profile_of_its_nccl() -> None:
    """GCP's TCPXO releases with NCCL 2.21.5 set NCCL_ALGO=Ring,Tree, NCCL_PROTO=Simple and NCCL_NVLS_ENABLE=0
    (container-engine-accelerators gpudirect-tcpxo/README.md); the scenario overrides the preset's current profile
    with them. With it NCCL's own model meets the run's small sizes (8 B: 131.6 against 135.8 us measured)."""
    case = "gcp_a3mega_h100_2node_tcpxo"
    v = validate(Simulator.from_source(PUBLISHED / f"{case}.yaml"), read_measurement(PUBLISHED / f"{case}.json"))
    assert {(r.algorithm, r.protocol) for r in v.rows} == {("Ring", "Simple"), ("Tree", "Simple")}
    small = [r for r in v.rows if r.size_bytes <= 8192]
    assert all(r.model_error_pct is not None and abs(r.model_error_pct) <= 11.0 for r in small)


def test_validate_over_workers_gives_the_same_rows() -> None:
    """``validate --jobs N`` spreads the sizes over forked workers: the rows, the nearest pairs and the notes are the
    ones a serial run gives (Crusoe's run, --pairs: 10.1 s serially, 5.7 s on 2 workers here)."""
    case = "crusoe_a100_2node_ib"
    sim = Simulator.from_source(PUBLISHED / f"{case}.yaml")
    m = read_measurement(PUBLISHED / f"{case}.json")
    sizes = [1 << 20, 1 << 24, 1 << 28, 1 << 30]
    one = validate(sim, m, sizes=sizes, pairs=True)
    assert validate(sim, m, sizes=sizes, pairs=True, jobs=2).to_dict() == one.to_dict()
    assert [r.size_bytes for r in one.rows] == sizes and all(r.nearest_algorithm for r in one.rows)
