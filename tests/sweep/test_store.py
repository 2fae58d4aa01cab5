"""collsim.sweep.store and the keys: schema, whole points only, no duplicates, skip and --force."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
import yaml

from collsim.api import load
from collsim.sweep import SCHEMA, ResultStore, grid_from_mapping, point_key, read_store, run_sweep

GRID = {
    "base": "loopback-gloo-cpu",
    "sizes": "1KiB,64KiB",
    "axes": {"backends.gloo.algorithm": ["ring", "ring_chunked"], "cluster.node_params.processes": [2, 4]},
}


def test_the_key_follows_what_decides_the_result() -> None:
    s = load("pcie-2gpu-nop2p")
    key = point_key(s, "nccl", 1024, version="1")
    assert key == point_key(load("pcie-2gpu-nop2p", ["name=x", "description=y"]), "nccl", 1024, version="1")
    # the other backend's section, the training section and the size list do not decide an NCCL point
    assert key == point_key(load("pcie-2gpu-nop2p", ["backends.gloo.threads=4"]), "nccl", 1024, version="1")
    assert key == point_key(load("pcie-2gpu-nop2p", ["workload.sizes=8B"]), "nccl", 1024, version="1")
    different = [
        point_key(s, "nccl", 2048, version="1"),
        point_key(s, "gloo", 1024, version="1"),
        point_key(s, "nccl", 1024, version="2"),
        point_key(s, "nccl", 1024, version="1", breakdown=True),
        point_key(load("pcie-2gpu-nop2p", ["backends.nccl.env.NCCL_PROTO=LL"]), "nccl", 1024, version="1"),
        point_key(load("pcie-2gpu-nop2p", ["cluster.node_params.pcie_gen=4"]), "nccl", 1024, version="1"),
    ]
    assert len({key, *different}) == 7


def test_the_key_reads_a_node_template_file_by_its_content(tmp_path: Path) -> None:
    template = Path(__file__).resolve().parents[2] / "topologies" / "nodes" / "pcie-workstation.yaml"
    if not template.is_file():
        pytest.skip("no pcie-workstation template file")
    mine = tmp_path / "node.yaml"
    mine.write_text(template.read_text())
    data = {"name": "t", "cluster": {"node": str(mine), "node_params": {"gpus": 2}}, "backends": {"nccl": {}}}
    before = point_key(load(data), "nccl", 8, version="1")
    mine.write_text(template.read_text() + "\n# edited\n")
    assert point_key(load(data), "nccl", 8, version="1") != before


@pytest.mark.parametrize("kind", ["preset file", "preset folder", "tuner csv"])
def test_the_key_reads_every_file_the_scenario_names_by_its_content(tmp_path: Path, kind: str) -> None:
    # a preset file or the example tuner's CSV edited between two sweeps found the first sweep's stored points
    nic = "nics: {my-nic: {base: connectx-7-ndr, speed: 400Gb/s, source: test}}\n"
    (tmp_path / "presets").mkdir()
    edited = tmp_path / ("presets/nic.yaml" if kind == "preset folder" else "nic.yaml")
    edited.write_text(nic)
    fabric = {"topology": "rail_optimized", "nic": "my-nic"}
    data: dict = {"name": "t", "cluster": {"node": "hgx-h100", "nodes": 2, "fabric": fabric},  # type: ignore[type-arg]
                  "preset_files": ["presets" if kind == "preset folder" else "nic.yaml"], "backends": {"nccl": {}}}
    if kind == "tuner csv":
        edited = tmp_path / "nccl_tuner.conf"  # the plugin's default name, from the scenario's folder
        edited.write_text("allreduce,0,4294967295,ring,simple,16,-1,-1\n")
        data["backends"]["nccl"]["env"] = {"NCCL_TUNER_PLUGIN": "libnccl-tuner-example.so"}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    before = point_key(load(path), "nccl", 8, version="1")
    assert point_key(load(path), "nccl", 8, version="1") == before
    edited.write_text(edited.read_text().replace("400Gb/s", "100Gb/s").replace("ring", "tree"))
    assert point_key(load(path), "nccl", 8, version="1") != before


def test_every_file_has_the_schema_and_pandas_pyarrow_read_the_folder(tmp_path: Path) -> None:
    out = run_sweep(grid_from_mapping(GRID), tmp_path, jobs=1)
    assert (out.ran, out.skipped, len(out.points)) == (8, 0, 8)
    files = sorted(tmp_path.glob("*.parquet"))
    assert len(files) == 8 and {f.stem for f in files} == set(out.keys)
    for f in files:
        schema = pq.read_schema(f)
        assert schema.equals(SCHEMA, check_metadata=False)
        assert schema.metadata[b"collsim.schema"] == b"1"
    df = pd.read_parquet(tmp_path)  # the folder as one table, as a user would read it
    assert len(df) == 8 and df["key"].is_unique
    assert list(pads.dataset(tmp_path).schema.names) == SCHEMA.names
    store = ResultStore(tmp_path).read()  # the axes spread into columns
    assert {"backends.gloo.algorithm", "cluster.node_params.processes"} <= set(store.columns)
    assert sorted(store["cluster.node_params.processes"].unique()) == [2, 4]
    assert read_store(str(tmp_path)).equals(store)  # the notebook's entry point reads the same table
    # a mistyped store is an error, not an empty table (and no empty folder is left behind)
    with pytest.raises(FileNotFoundError, match="no results store there"):
        read_store(str(tmp_path / "nic-speed.results"))
    assert not (tmp_path / "nic-speed.results").exists()


def test_duckdb_reads_the_store_when_installed(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    run_sweep(grid_from_mapping(GRID), tmp_path, jobs=1)
    [(n, procs)] = duckdb.sql(
        f"select count(*), count(distinct json_extract(params, '$.\"cluster.node_params.processes\"')) "
        f"from read_parquet('{tmp_path}/*.parquet')"
    ).fetchall()
    assert (n, procs) == (8, 2)


def test_a_rerun_skips_finished_points_and_force_replaces_them(tmp_path: Path) -> None:
    grid = grid_from_mapping(GRID)
    first = run_sweep(grid, tmp_path, jobs=1)
    again = run_sweep(grid, tmp_path, jobs=1)
    assert (again.ran, again.skipped) == (0, 8)
    assert again.executor.startswith("none")
    pd.testing.assert_frame_equal(first.dataframe(), again.dataframe())
    stamps = {f.name: f.stat().st_mtime_ns for f in tmp_path.glob("*.parquet")}
    forced = run_sweep(grid, tmp_path, jobs=1, force=True)
    assert (forced.ran, forced.skipped) == (8, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(stamps)  # replaced in place: no second copy
    assert all(f.stat().st_mtime_ns >= stamps[f.name] for f in tmp_path.glob("*.parquet"))
    assert pd.read_parquet(tmp_path)["key"].is_unique
    # a bigger grid reuses what is stored: only the new size runs
    bigger = run_sweep(grid_from_mapping({**GRID, "sizes": "1KiB,64KiB,1MiB"}), tmp_path, jobs=1)
    assert (bigger.ran, bigger.skipped) == (4, 8)


def test_a_write_is_whole_or_absent(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    # what a driver killed mid-write leaves: a temporary file of a process that is gone
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    leftover = tmp_path / f".{'a' * 32}~{socket.gethostname()}~{pid}~0000.tmp"
    leftover.write_bytes(b"PAR1 half a file")
    store.write("d" * 32, [{"backend": "nccl", "size_bytes": 8}])
    assert store.keys() == {"d" * 32}
    assert len(pd.read_parquet(tmp_path)) == 1  # readers skip the hidden temporary file
    ResultStore(tmp_path)  # opening the store again removes it
    assert not leftover.exists()
    # one of a live process (this one) stays: another driver may be writing it
    mine = tmp_path / f".{'b' * 32}~{socket.gethostname()}~{os.getpid()}~0000.tmp"
    mine.write_bytes(b"")
    ResultStore(tmp_path)
    assert mine.exists()


def test_a_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ResultStore(tmp_path)

    def boom(*_a: object, **_k: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", boom)
    with pytest.raises(OSError, match="disk full"):
        store.write("c" * 32, [{"backend": "nccl"}])
    assert list(tmp_path.iterdir()) == []


def test_error_points_are_stored_with_their_reason(tmp_path: Path) -> None:
    grid = grid_from_mapping({"base": "pcie-2gpu-nop2p", "backends": ["nccl"], "sizes": "1MiB",
                              "axes": {"backends.nccl.env.NCCL_ALGO": ["Ring", "NVLS"]}})  # fmt: skip
    out = run_sweep(grid, tmp_path, jobs=1)
    [(point, why)] = out.errors()
    assert point.index == 1 and "NVLS" in why and "NCCL would refuse" in why
    df = out.dataframe()
    assert df["error"].isna().tolist() == [True, False]
    assert pd.isna(df.loc[1, "time_us"]) and df.loc[1, "backend"] == "nccl" and df.loc[1, "size_bytes"] == 2**20
    assert run_sweep(grid, tmp_path, jobs=1).skipped == 2  # an answer, not a failure: not rerun
