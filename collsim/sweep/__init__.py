"""Sweeps: grids of what-if scenarios, run here or on a Dask cluster, into a results store that survives a kill.

A grid file names a base scenario and axes over any scenario field (the paths ``--set`` takes), crossed (product)
or side by side (zip), with sizes as one more axis (:mod:`collsim.sweep.grid`). Every point's scenario is validated
before anything runs. Each point is one task that carries its scenario as data (:mod:`collsim.sweep.point`), so
the same task runs in this process, in the local fork pool or on a Dask worker (:mod:`collsim.sweep.execute`), and
each finished point is written at once to a folder of Parquet files keyed by a hash of what decides its result
(:mod:`collsim.sweep.store`): a rerun skips what is there, a killed run loses only the points in flight.
``explain --all`` and ``calibrate`` run on the same executors with ``--dask`` (:mod:`collsim.sweep.explain`,
:mod:`collsim.sweep.calibrate`: the hook :func:`collsim.calibration.fit.calibrate` takes).

The package sits beside the API: it calls :class:`collsim.api.Simulator` per point and never reaches into the
backends; it imports ``api``, ``results``, ``scenario`` and ``parallel`` and is imported by the CLI.

Examples
--------
>>> from collsim.sweep import grid_from_mapping, run_sweep
>>> gen4 = ["cluster.node_params.gpu=rtx-4090", "cluster.node_params.cpu=epyc-7742"]  # a GPU and a host of Gen4
>>> out = run_sweep(grid_from_mapping({"base": "pcie-2gpu-nop2p", "backends": ["nccl"], "sizes": "1MiB", "set": gen4,
...                                    "axes": {"cluster.node_params.pcie_gen": [3, 4]}}), jobs=1)
>>> df = out.dataframe()
>>> df["cluster.node_params.pcie_gen"].tolist(), df["busbw_gbps"].round(1).tolist()
([3, 4], [5.3, 9.5])
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas

    from collsim.sweep.execute import (
        DASK_INSTALL,
        DaskExecutor,
        DaskMissing,
        Executor,
        PoolExecutor,
        SerialExecutor,
        WorkersKeptDying,
        make_executor,
        require_dask,
    )
    from collsim.sweep.grid import Axis, Grid, GridPoint, ResolvedGrid, Variant, grid_from_mapping, load_grid
    from collsim.sweep.point import PointResult, PointTask, collsim_version, point_key, run_point
    from collsim.sweep.runner import SweepOutcome, run_sweep
    from collsim.sweep.store import SCHEMA, ResultStore, expand_params

#: Where each public name lives: imported on first use, so that the CLI's ``import collsim.sweep.command`` does
#: not load pyarrow and pandas for every command.
_WHERE = {
    **dict.fromkeys(
        ["DASK_INSTALL", "DaskExecutor", "DaskMissing", "Executor", "PoolExecutor", "SerialExecutor",
         "WorkersKeptDying", "make_executor", "require_dask"], "execute"),
    **dict.fromkeys(["Axis", "Grid", "GridPoint", "ResolvedGrid", "Variant", "grid_from_mapping", "load_grid"],
                    "grid"),
    **dict.fromkeys(["PointResult", "PointTask", "collsim_version", "point_key", "run_point"], "point"),
    **dict.fromkeys(["SweepOutcome", "run_sweep"], "runner"),
    **dict.fromkeys(["SCHEMA", "ResultStore", "expand_params"], "store"),
}  # fmt: skip

__all__ = [
    "DASK_INSTALL",
    "SCHEMA",
    "Axis",
    "DaskExecutor",
    "DaskMissing",
    "Executor",
    "Grid",
    "GridPoint",
    "PointResult",
    "PointTask",
    "PoolExecutor",
    "ResolvedGrid",
    "ResultStore",
    "SerialExecutor",
    "SweepOutcome",
    "Variant",
    "WorkersKeptDying",
    "collsim_version",
    "expand_params",
    "grid_from_mapping",
    "load_grid",
    "make_executor",
    "point_key",
    "read_store",
    "require_dask",
    "run_point",
    "run_sweep",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"collsim.sweep.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'collsim.sweep' has no attribute {name!r}")


def read_store(path: str, *, params: bool = True) -> pandas.DataFrame:
    """Every row of the results store at ``path`` as a pandas DataFrame (with ``params``: one column per axis).

    Raises
    ------
    FileNotFoundError
        When ``path`` is not a folder: reading never creates a store (a mistyped path would otherwise read as an
        empty table, and leave an empty folder behind).
    """
    from pathlib import Path

    from collsim.sweep.store import ResultStore

    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(
            f"{path}: no results store there (not a folder; `collsim sweep GRID.yaml` writes GRID.results beside "
            f"the grid, or --store DIR; relative paths are from the current folder, {Path.cwd()})"
        )
    return ResultStore(folder).read(params=params)
