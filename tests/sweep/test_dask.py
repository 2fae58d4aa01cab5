"""Sweeps on a real ``distributed.LocalCluster`` (2 single-threaded workers): the serial run's results, a worker
killed mid-task retried, a point whose workers keep dying reported as lost."""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from collsim.sweep import DaskExecutor, PointResult, PointTask, grid_from_mapping, run_point, run_sweep

distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the wrappers below travel to the workers by value

GRID = {
    "base": "pcie-2gpu-nop2p",
    "set": ["cluster.node_params.gpu=rtx-4090", "cluster.node_params.cpu=epyc-7742"],  # PCIe Gen4 GPU and host
    "sizes": "8B,64KiB,4MiB",
    "axes": {"backends.nccl.env.NCCL_PROTO": ["LL", "Simple"], "cluster.node_params.pcie_gen": [3, 4]},
}
COLUMNS = ["backends.nccl.env.NCCL_PROTO", "cluster.node_params.pcie_gen", "point", "backend", "size_bytes",
           "algorithm", "protocol", "time_us", "busbw_gbps", "key"]  # fmt: skip


@pytest.fixture(scope="module")
def client() -> Generator[Any, None, None]:
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


def test_results_equal_the_serial_run(client: Any, tmp_path: Path) -> None:
    grid = grid_from_mapping(GRID)
    serial = run_sweep(grid, tmp_path / "serial", jobs=1).dataframe()
    out = run_sweep(grid, tmp_path / "dask", dask=client)
    assert out.executor.startswith("Dask") and out.ran == 18 and not out.lost
    pd.testing.assert_frame_equal(out.dataframe()[COLUMNS], serial[COLUMNS])
    workers = set(out.dataframe()["worker"])
    assert len(workers) == 2 and all(f":{os.getpid()}" not in w for w in workers)  # ran on the cluster's workers
    files = [sorted(p.name for p in (tmp_path / d).iterdir()) for d in ("dask", "serial")]
    assert files[0] == files[1]


def _die_once(marker: str, data: Mapping[str, Any], task: PointTask) -> PointResult:
    """Kill this worker process the first time the 64 KiB LL point runs."""
    if task.size == 65536 and data["backends"]["nccl"]["env"].get("NCCL_PROTO") == "LL" and not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return run_point(data, task)


def test_a_worker_killed_mid_task_is_retried(client: Any, tmp_path: Path) -> None:
    grid = grid_from_mapping({**GRID, "backends": ["nccl"], "axes": {"backends.nccl.env.NCCL_PROTO": ["LL", "Simple"]}})
    marker = tmp_path / "killed"
    out = run_sweep(grid, tmp_path / "store", dask=client, task=functools.partial(_die_once, str(marker)))
    assert marker.exists()  # a worker did die, mid-task
    assert out.ran == 6 and not out.lost and not out.interrupted
    df = out.dataframe()
    assert df["key"].is_unique and len(df) == 6 and df["error"].isna().all()
    again = run_sweep(grid, tmp_path / "serial", jobs=1).dataframe()
    pd.testing.assert_frame_equal(df[["point", "time_us"]], again[["point", "time_us"]])
    assert not any(w.endswith(f":{marker.read_text()}") for w in df["worker"])  # the killed process finished none


def _always_die(data: Mapping[str, Any], task: PointTask) -> PointResult:
    if task.size == 8:
        os.kill(os.getpid(), signal.SIGKILL)
    return run_point(data, task)


def test_a_point_whose_workers_keep_dying_is_lost_not_stored(client: Any, tmp_path: Path) -> None:
    grid = grid_from_mapping({**GRID, "backends": ["nccl"], "axes": {}})
    def allow(n: int) -> Any:
        return client.run_on_scheduler(lambda dask_scheduler: setattr(dask_scheduler, "allowed_failures", n))

    before = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.allowed_failures)
    allow(0)  # the first death of its worker loses the point (Dask's KilledWorker)
    try:
        ex = DaskExecutor(client)
        out = run_sweep(grid, tmp_path, executor=ex, task=_always_die)
    finally:
        allow(before)
    # the 8 B point is lost; a point queued behind it on the same worker may be counted with it (Dask)
    assert 8 in [p.size for p in out.lost] and out.ran + len(out.lost) == 3
    assert len(list(tmp_path.glob("*.parquet"))) == out.ran  # lost points are not stored
    assert "KilledWorker" in ex.lost_reasons[0] or "died" in ex.lost_reasons[0]


def test_explain_all_on_the_cluster_equals_the_local_one(client: Any) -> None:
    from collsim.api import Simulator
    from collsim.sweep.explain import explain_on

    sim = Simulator.from_source("pcie-2gpu-nop2p", ["workload.collective=[allreduce, allgather]"])
    sizes = [2**10, 2**16, 2**22]
    rows, interrupted = explain_on(sim, DaskExecutor(client), sizes, all_pairs=True)
    assert not interrupted and rows == sim.explain(sizes, all_pairs=True)[0]
    assert [(r.collective, r.size_bytes) for r in rows][:4] == [("allreduce", 1024), ("allreduce", 65536),
                                                                ("allreduce", 2**22), ("allgather", 1024)]  # fmt: skip


def test_a_calibration_fit_on_the_cluster_is_the_local_fit(client: Any) -> None:
    from collsim.api import Simulator, load
    from collsim.calibration import Measurement, MeasurementRow
    from collsim.calibration.fit import calibrate
    from collsim.profile import Profile
    from collsim.sweep.calibrate import ExecutorEvaluate

    truth = Simulator.from_source("pcie-2gpu-nop2p", profile=Profile({"nccl.launch_overhead_us": 6.0}))
    rows = [MeasurementRow(s, truth.simulate_one("nccl", s).time_s * 1e6) for s in (8, 2**10, 2**16, 2**22, 2**26)]
    m = Measurement("allreduce", 2, rows, backend="nccl", file="synthetic.json")
    local = calibrate(load("pcie-2gpu-nop2p"), [m], parameters=["nccl.launch_overhead_us"], jobs=1)
    remote = calibrate(load("pcie-2gpu-nop2p"), [m], parameters=["nccl.launch_overhead_us"],
                       evaluate=ExecutorEvaluate(DaskExecutor(client)))  # fmt: skip
    assert remote.profile.parameters == local.profile.parameters and remote.evaluations == local.evaluations
    assert remote.profile.parameters["nccl.launch_overhead_us"] == pytest.approx(6.0, abs=0.01)
