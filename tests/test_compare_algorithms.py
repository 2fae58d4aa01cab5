"""``collsim compare`` with one backend enabled: that backend's algorithms against each other
(:meth:`collsim.api.Simulator.compare_algorithms`)."""

from __future__ import annotations

import csv
import io
import json

import pytest

from collsim.api import Simulator
from collsim.cli import main
from collsim.scenario import ScenarioError
from collsim.vocab import GLOO_ALGORITHMS

MIB = 2**20

MiB = 2**20


@pytest.fixture(scope="module")
def gloo_only() -> Simulator:
    return Simulator.from_source("loopback-gloo-cpu")


@pytest.fixture(scope="module")
def nccl_only() -> Simulator:
    return Simulator.from_source("hgx-h100", ["backends.gloo.enabled=false"])


def test_gloo_variants_are_gloos_algorithms_each_as_run_would_simulate_it(gloo_only: Simulator) -> None:
    """Every Gloo allreduce algorithm, each time exactly what ``run`` gives with that algorithm set; the default
    is the scenario's (ring, what PyTorch runs)."""
    (row,) = gloo_only.compare_algorithms(sizes=[MiB])[0]
    assert list(row.records) == list(GLOO_ALGORITHMS) and row.default == "ring" and row.backend == "gloo"
    for algo, rec in row.records.items():
        alone = Simulator.from_source("loopback-gloo-cpu", [f"backends.gloo.algorithm={algo}"])
        want = alone.run(sizes=[MiB]).records[0]
        assert rec.time_us == want.time_us and rec.algorithm == want.algorithm
    assert row.records[row.best].time_us == min(r.time_us for r in row.records.values())
    assert row.against_default("ring") == 1.0


def test_nccl_variants_are_its_algorithms_with_the_cost_models_protocol(nccl_only: Simulator) -> None:
    """One variant per enabled algorithm, run with the protocol NCCL's cost model prices fastest for it; the
    default is NCCL's own pick, with the time ``run`` gives."""
    rows, interrupted = nccl_only.compare_algorithms(sizes=[8, MiB, 1024 * MiB])
    assert not interrupted and len(rows) == 3
    for row, want in zip(rows, nccl_only.run(sizes=[8, MiB, 1024 * MiB]).records, strict=True):
        assert set(row.records) == {"Ring", "Tree", "NVLS"}  # hgx-h100's enabled allreduce algorithms
        assert row.default == want.algorithm
        assert row.records[row.default].time_us == want.time_us
        assert row.records[row.default].protocol == want.protocol
        explained = nccl_only._explain_point("allreduce", row.size_bytes, all_pairs=True)
        for algo, rec in row.records.items():
            fastest_modelled = min((t, p) for (a, p), t in explained.model_s.items() if a == algo)[1]
            if algo != row.default:
                assert rec.protocol == fastest_modelled
            assert rec.time_us == pytest.approx(explained.simulated_s[(algo, rec.protocol)] * 1e6, rel=1e-12)
    assert rows[-1].default == "NVLS" and rows[-1].best == "NVLS"  # 1 GiB: NVLS, the fastest simulated too


def test_nccl_algo_limits_the_variants() -> None:
    sim = Simulator.from_source("hgx-h100", ["backends.gloo.enabled=false", "backends.nccl.env.NCCL_ALGO=Ring,Tree"])
    (row,) = sim.compare_algorithms(sizes=[MiB])[0]
    assert set(row.records) == {"Ring", "Tree"}


def test_compare_algorithms_needs_one_backend() -> None:
    both = Simulator.from_source("hgx-h100")
    with pytest.raises(ScenarioError, match="needs one backend"):
        both.compare_algorithms(sizes=[MiB])
    (row,) = both.compare_algorithms("gloo", sizes=[MiB])[0]  # named explicitly: fine
    assert row.backend == "gloo"
    with pytest.raises(ScenarioError, match="disabled"):
        Simulator.from_source("loopback-gloo-cpu").compare_algorithms("nccl", sizes=[MiB])


def test_cli_table_csv_and_explain_without_nccl(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "loopback-gloo-cpu", "--sizes", "1KiB,1MiB", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "gloo algorithms against each other" in out and "ProcessGroupGloo runs ring" in out
    assert all(a in out for a in GLOO_ALGORITHMS) and "*" in out
    assert main(["compare", "loopback-gloo-cpu", "--sizes", "1MiB", "--format", "csv", "--quiet"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["variant"] for r in rows] == list(GLOO_ALGORITHMS)
    assert [r["default"] for r in rows].count("True") == 1 and [r["fastest"] for r in rows].count("True") == 1
    assert main(["explain", "loopback-gloo-cpu", "--sizes", "1MiB", "--format", "json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["backend"] == "gloo" and list(doc["algorithms"][0]["variants"]) == list(GLOO_ALGORITHMS)
    assert main(["explain", "loopback-gloo-cpu", "--sizes", "1MiB", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("# collsim explain: loopback-gloo-cpu")  # it said compare


def test_wide_cells_never_run_into_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    # eight processes sharing an H200 at 256 MiB: six-digit times with Gloo's protocol (19 characters and a mark)
    argv = ["compare", "scenarios/measurements/h200-host-gloo-cuda.scenario.yaml", "--set", "cluster.ranks_per_gpu=8",
            "--sizes", "256MiB", "--quiet"]
    assert main(argv) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("256MiB"))
    cells = row.split()
    # size, then per algorithm a time and its protocol (marks attached), then the verdict
    assert cells[0] == "256MiB" and cells[2:9:2] == ["tcp/cuda*+", "tcp/cuda", "tcp/cuda", "tcp/cuda"]
    assert all(float(c) > 3e5 for c in cells[1:9:2])


def test_other_collectives_have_one_gloo_variant() -> None:
    sim = Simulator.from_source("loopback-gloo-cpu", ["workload.collective=allgather"])
    (row,) = sim.compare_algorithms(sizes=[MiB])[0]
    assert list(row.records) == ["ring"] and row.best == row.default == "ring"


def test_gloo_variants_are_named_as_run_names_them() -> None:
    """compare with NCCL off labelled a broadcast 'ring' (it runs binomial) and gave reduce_scatter, which runs an
    allreduce algorithm, one column; a non-default allreduce algorithm for an all-gather is noted, not ignored."""
    sim = Simulator.from_source("hgx-h100", ["backends.nccl.enabled=false"])
    assert sim.algorithm_variants("gloo", "broadcast", MIB) == ({"binomial": {}}, "binomial")
    assert sim.algorithm_variants("gloo", "alltoall", MIB)[1] == "direct"
    variants, default = sim.algorithm_variants("gloo", "reduce_scatter", MIB)
    assert list(variants) == ["ring", "ring_chunked", "halving_doubling", "bcube"] and default == "ring"
    ran = sim.simulate_one("gloo", MIB, collective="broadcast")
    assert ran.algorithm == "binomial"
    bcube = Simulator.from_source("hgx-h100", ["backends.gloo.algorithm=bcube"])
    notes = bcube.simulate_one("gloo", MIB, collective="allgather").notes
    assert "backends.gloo.algorithm bcube is an allreduce algorithm (allreduce and reduce_scatter); Gloo runs " \
           "allgather with ring" in notes
    assert not any("allreduce algorithm" in n for n in sim.simulate_one("gloo", MIB, collective="allgather").notes)
