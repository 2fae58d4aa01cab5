"""``collsim sweep`` and ``collsim benchmark --sweep`` from the command line (``collsim.cli.main``, in-process)."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import pytest

from collsim.cli import main
from collsim.sweep.output import ProgressLine

GRID = """\
name: demo
base: pcie-2gpu-nop2p
set: [cluster.node_params.gpu=rtx-4090, cluster.node_params.cpu=epyc-7742]  # a GPU and a host of PCIe Gen4
backends: [nccl]
axes:
  cluster.node_params.pcie_gen: [3, 4]
  backends.nccl.env.NCCL_ALGO: [Ring, NVLS]
sizes: 64KiB,4MiB
"""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    path = tmp_path / "demo.yaml"
    path.write_text(GRID)
    return path


def test_table_then_a_rerun_from_the_store(capsys: pytest.CaptureFixture[str], grid: Path) -> None:
    rc, out, err = _run(capsys, "sweep", str(grid), "--jobs", "1")
    assert rc == 0 and err == ""  # no progress off a terminal
    lines = out.splitlines()
    assert lines[0].startswith(f"# collsim sweep: demo ({grid}): 8 points, 8 run, 0 from the store; store ")
    assert (grid.parent / "demo.results").is_dir()  # the default store: next to the grid
    assert lines[1].split() == ["#", "pcie_gen", "NCCL_ALGO", "backend", "collective", "size", "algo/proto",
                                "time", "us", "busbw", "GB/s"]  # fmt: skip
    assert lines[2].split()[:4] == ["3", "Ring", "nccl", "allreduce"]
    assert lines[4].split()[:6] == ["3", "NVLS", "nccl", "-", "64KiB", "error"]
    assert "# point 2 (cluster.node_params.pcie_gen=3, backends.nccl.env.NCCL_ALGO=NVLS, nccl, 64KiB): " in out
    assert "NCCL would refuse" in out
    rc, out2, _ = _run(capsys, "sweep", str(grid))
    assert rc == 0 and "8 points, 0 run, 8 from the store" in out2
    assert out2.splitlines()[1:] == lines[1:]


def test_csv_json_check_force_and_store(capsys: pytest.CaptureFixture[str], grid: Path, tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    rc, out, _ = _run(capsys, "sweep", str(grid), "--check", "--store", store)
    assert rc == 0 and "8 points valid" in out and "0 stored" in out and "8 to run" in out
    assert not Path(store).exists()  # --check writes nothing (it made an empty store folder)
    rc, out, err = _run(capsys, "sweep", str(grid), "--store", store, "--format", "csv", "--jobs", "2")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and len(rows) == 8
    assert list(rows[0])[:3] == ["cluster.node_params.pcie_gen", "backends.nccl.env.NCCL_ALGO", "backend"]
    assert rows[0]["nranks"] == "2" and rows[2]["nranks"] == "" and rows[2]["error"]
    assert err.startswith("collsim: note: 4 points have no result (stored as such); first: point 2 (")
    rc, out, _ = _run(capsys, "sweep", str(grid), "--store", store, "--format", "json", "--force", "-o",
                      str(tmp_path / "o.json"))  # fmt: skip
    doc = json.loads((tmp_path / "o.json").read_text())
    assert rc == 0 and out == "" and (doc["ran"], doc["skipped"], doc["points"]) == (8, 0, 8)
    assert doc["axes"] == ["cluster.node_params.pcie_gen", "backends.nccl.env.NCCL_ALGO"]
    assert isinstance(doc["rows"][0]["notes"], list) and doc["rows"][0]["cluster.node_params.pcie_gen"] == 3
    # the JSON's figures are the CSV's (and the store's) to the last digit: pandas' to_json kept 10 decimals
    rc, out, _ = _run(capsys, "sweep", str(grid), "--store", store, "--format", "csv")
    by_csv = {(r["cluster.node_params.pcie_gen"], r["backends.nccl.env.NCCL_ALGO"], r["size_bytes"]): r["time_us"]
              for r in csv.DictReader(io.StringIO(out))}  # fmt: skip
    for row in doc["rows"]:
        key = (str(row["cluster.node_params.pcie_gen"]), str(row["backends.nccl.env.NCCL_ALGO"]),
               str(row["size_bytes"]))
        assert (row["time_us"] is None and by_csv[key] == "") or row["time_us"] == float(by_csv[key])
    assert any(row["time_us"] is not None and len(repr(row["time_us"])) > 13 for row in doc["rows"])


def test_plot(capsys: pytest.CaptureFixture[str], grid: Path, tmp_path: Path) -> None:
    page = tmp_path / "p.html"
    rc, _, _ = _run(capsys, "sweep", str(grid), "--jobs", "1", "--plot", str(page), "--facet", "pcie_gen",
                    "--y", "time")  # fmt: skip
    text = page.read_text()
    assert rc == 0 and text.startswith("<!DOCTYPE html>") and "plotly" in text and "time (us)" in text
    assert "NCCL_ALGO=Ring" in text and "no result" in text
    store = str(tmp_path / "fresh.results")
    rc, out, err = _run(capsys, "sweep", str(grid), "--plot", str(page), "--x", "nodes", "--store", store)
    assert rc == 2 and err == ("collsim: error: --x: unknown axis 'nodes'; expected one of size, backend, "
                               "cluster.node_params.pcie_gen, backends.nccl.env.NCCL_ALGO\n")  # fmt: skip
    assert out == "" and not Path(store).exists()  # refused before any point ran (it ran the whole sweep first)
    rc, _, err = _run(capsys, "sweep", str(grid), "--check", "--plot", str(page), "--facet", "bogus")
    assert rc == 2 and "--facet: unknown axis 'bogus'" in err
    rc, _, err = _run(capsys, "sweep", str(grid), "--check", "--facet", "pcie_gen")
    assert rc == 0 and err == "collsim: note: --facet shapes the figure; without --plot there is none\n"


def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("base: pcie-2gpu-nop2p\naxes:\n  cluster.node_params.gpus: [2, -1]\n")
    rc, out, err = _run(capsys, "sweep", str(bad))
    assert rc == 2 and out == ""
    assert err.startswith(f"collsim: error: {bad}: point 1 (cluster.node_params.gpus=-1): ") and err.count("\n") == 1
    assert not (tmp_path / "bad.results").exists()  # nothing created for a grid that does not validate
    rc, _, err = _run(capsys, "sweep", str(tmp_path / "none.yaml"))
    assert rc == 2 and err == f"collsim: error: {tmp_path / 'none.yaml'}: file not found\n"


def test_dask_without_dask(capsys: pytest.CaptureFixture[str], grid: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed: importing it fails
    rc, out, err = _run(capsys, "sweep", str(grid), "--dask", "local")
    assert (rc, out) == (2, "")
    assert err == ("collsim: error: --dask needs Dask's distributed package; install it with: "
                   "pip install 'collsim[dask]'\n")  # fmt: skip


@pytest.mark.parametrize("argv", [["explain", "pcie-2gpu-nop2p", "--all"],
                                  ["calibrate", "pcie-2gpu-nop2p", "m.json", "-o", "p.yaml"]])  # fmt: skip
def test_explain_and_calibrate_dask_without_dask(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)
    rc, out, err = _run(capsys, *argv, "--dask", "local")
    assert (rc, out) == (2, "")
    assert err == ("collsim: error: --dask needs Dask's distributed package; install it with: "
                   "pip install 'collsim[dask]'\n")  # fmt: skip


def test_dask_local(capsys: pytest.CaptureFixture[str], grid: Path, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    rc, out, _ = _run(capsys, "sweep", str(grid), "--dask", "local", "--jobs", "2", "--store", str(tmp_path / "d"))
    assert rc == 0 and "8 points, 8 run" in out and "Dask (LocalCluster, 2 single-threaded worker processes)" in out


def test_progress_line() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    prog = ProgressLine(stream=tty)
    prog(0, 4)
    prog(4, 4)
    prog.done()
    assert "[0/4] starting" in tty.getvalue() and "[4/4]" in tty.getvalue() and "points/s, ETA 0 s" in tty.getvalue()
    quiet = Tty()
    ProgressLine(quiet=True, stream=quiet)(1, 2)
    assert quiet.getvalue() == ""
    assert ProgressLine(stream=io.StringIO()).on is False  # off a terminal


def test_benchmark_sweep(capsys: pytest.CaptureFixture[str], grid: Path) -> None:
    pytest.importorskip("distributed")
    rc, out, _ = _run(capsys, "benchmark", "--sweep", "--sweep-grid", str(grid), "--jobs", "2")
    assert rc == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("sweep benchmark: demo, 8 points")
    assert [ln.split()[0] for ln in lines[2:5]] == ["serial", "local", "Dask"]
    assert "results: identical in every mode" in out
    assert "Dask's overhead per point beyond the local pool's:" in out


@pytest.mark.parametrize("argv", [["sweep", "GRID"], ["explain", "pcie-2gpu-nop2p", "--all"]])
def test_a_dask_address_distributed_cannot_read_is_one_line(
    capsys: pytest.CaptureFixture[str], grid: Path, tmp_path: Path, argv: list[str]
) -> None:
    """``--dask locl`` (a typo of ``local``) gave distributed's traceback, "missing port number in address"."""
    pytest.importorskip("distributed")
    args = [str(grid) if a == "GRID" else a for a in argv]
    rc, out, err = _run(capsys, *args, "--dask", "locl", "--store", str(tmp_path / "s")) if argv[0] == "sweep" else \
        _run(capsys, *args, "--dask", "locl")  # fmt: skip
    assert (rc, out) == (2, "")
    assert err.startswith("collsim: error: --dask: 'locl': ") and "tcp://host:8786" in err and err.count("\n") == 1
