"""collsim.sweep.runner on the local executors: the run API's results, point order, progress, a worker that dies."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from collsim.api import Simulator
from collsim.sweep import PointResult, PointTask, PoolExecutor, grid_from_mapping, run_point, run_sweep
from collsim.sweep.execute import WorkersKeptDying

AXES = {"backends.nccl.env.NCCL_PROTO": ["LL", "Simple"], "cluster.node_params.pcie_gen": [3, 4]}
GRID = {"base": "pcie-2gpu-nop2p", "sizes": "8B,64KiB,4MiB", "axes": AXES}


def _expected() -> list[tuple[Any, ...]]:
    """What Simulator.run gives for every variant of GRID, in sweep order."""
    rows = []
    for proto in ("LL", "Simple"):
        for gen in (3, 4):
            sim = Simulator.from_source("pcie-2gpu-nop2p", [f"backends.nccl.env.NCCL_PROTO={proto}",
                                                            f"cluster.node_params.pcie_gen={gen}"])  # fmt: skip
            for r in sim.run(sizes=[8, 65536, 4 * 2**20]).records:
                rows.append((proto, gen, r.backend, r.size_bytes, r.algorithm, r.protocol, r.time_us, r.busbw_gbps))
    return rows


def _got(df: Any) -> list[tuple[Any, ...]]:
    cols = [*AXES, "backend", "size_bytes", "algorithm", "protocol", "time_us", "busbw_gbps"]
    return [tuple(r) for r in df[cols].itertuples(index=False)]


@pytest.mark.parametrize("jobs", [1, 2])
def test_results_equal_the_run_api(jobs: int) -> None:
    out = run_sweep(grid_from_mapping(GRID), jobs=jobs)
    # a Gloo point does not depend on NCCL_PROTO: the two protocols' Gloo points are one point, run once
    assert (len(out.points), out.ran, out.interrupted) == (24, 18, False)
    df = out.dataframe()
    assert _got(df) == _expected()  # bit for bit, in sweep order
    assert df["point"].tolist() == list(range(24))
    assert list(df.columns[:4]) == [*AXES, "point", "backend"]
    assert df["worker"].str.contains(":").all() and (df["sim_seconds"] > 0).all()
    assert out.executor == ("serial" if jobs == 1 else "local pool (2 processes)")


def test_every_collective_and_the_breakdown() -> None:
    grid = grid_from_mapping({"base": "pcie-2gpu-nop2p", "backends": ["nccl"], "sizes": "1MiB", "breakdown": True,
                              "set": ["workload.collective=[allreduce, allgather]"]})  # fmt: skip
    df = run_sweep(grid, jobs=1).dataframe()
    assert df["collective"].tolist() == ["allreduce", "allgather"] and df["point"].tolist() == [0, 0]
    breakdown = json.loads(df.loc[0, "breakdown"])
    assert breakdown and sum(breakdown.values()) == pytest.approx(df.loc[0, "time_us"] * 1e-6, rel=1e-6)


def test_identical_points_run_once() -> None:
    out = run_sweep(grid_from_mapping({"base": "loopback-gloo-cpu", "sizes": "1KiB",
                                       "axes": {"backends.gloo.threads": [2, 2, 3]}}), jobs=1)  # fmt: skip
    assert (len(out.points), out.ran) == (3, 2)
    df = out.dataframe()
    assert df["point"].tolist() == [0, 1, 2] and df.loc[0, "key"] == df.loc[1, "key"]


def test_progress_counts_the_points_this_run_computes(tmp_path: Path) -> None:
    grid = grid_from_mapping({**GRID, "backends": ["nccl"]})
    seen: list[tuple[int, int]] = []
    run_sweep(grid_from_mapping({**GRID, "backends": ["nccl"], "sizes": "8B"}), tmp_path, jobs=1)
    run_sweep(grid, tmp_path, jobs=2, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(n, 8) for n in range(9)]  # 12 points, 4 already stored


def test_ctrl_c_keeps_what_finished(tmp_path: Path) -> None:
    def interrupting(data: Mapping[str, Any], task: PointTask) -> PointResult:
        if task.size == 8:
            raise KeyboardInterrupt
        return run_point(data, task)

    grid = grid_from_mapping({**GRID, "backends": ["nccl"], "axes": {"cluster.node_params.pcie_gen": [3]}})
    out = run_sweep(grid, tmp_path, jobs=1, task=interrupting)  # sizes run largest first: 4 MiB, 64 KiB, 8 B
    assert out.interrupted and out.ran == 2 and len(list(tmp_path.glob("*.parquet"))) == 2
    assert sorted(out.dataframe()["size_bytes"]) == [65536, 4 * 2**20]
    again = run_sweep(grid, tmp_path, jobs=1)
    assert (again.ran, again.skipped) == (1, 2)


def _die_once(marker: str, data: Mapping[str, Any], task: PointTask) -> PointResult:
    """Kill this worker process the first time a 64 KiB point runs (the marker file remembers)."""
    if task.size == 65536 and not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return run_point(data, task)


def test_a_pool_worker_that_dies_costs_only_its_point(tmp_path: Path) -> None:
    import functools

    grid = grid_from_mapping({**GRID, "backends": ["nccl"]})
    task = functools.partial(_die_once, str(tmp_path / "marker"))
    out = run_sweep(grid, tmp_path / "store", executor=PoolExecutor(2), task=task)
    assert (tmp_path / "marker").exists()
    assert out.ran == 12 and not out.lost
    assert _got(out.dataframe()) == [r for r in _expected() if r[2] == "nccl"]


def test_a_pool_whose_workers_keep_dying_stops(tmp_path: Path) -> None:
    def die(data: Mapping[str, Any], task: PointTask) -> PointResult:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError

    grid = grid_from_mapping({**GRID, "backends": ["nccl"], "axes": {}})
    with pytest.raises(WorkersKeptDying, match="workers died 2 times, 3 points not run"):
        run_sweep(grid, tmp_path, executor=PoolExecutor(2, restarts=1), task=die)
