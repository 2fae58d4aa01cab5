"""Run a grid: validate every point, skip the stored ones, run the rest anywhere, store each point as it finishes.

:func:`run_sweep` is the whole of ``collsim sweep``: the grid is resolved (every point's scenario validated: one
error naming the point and field, before anything runs), each point gets its key
(:func:`~collsim.sweep.point.point_key`), the keys already in the store are skipped unless ``force``, and the
others go to an executor (serial, the local fork pool, or Dask: :mod:`collsim.sweep.execute`). Each point is
written to the store the moment its result arrives, so an interrupted sweep (Ctrl-C, kill -9, a worker lost) keeps
every finished point and the next run computes only the missing ones.

Examples
--------
>>> from collsim.sweep.grid import grid_from_mapping
>>> grid = grid_from_mapping({"base": "pcie-2gpu-nop2p", "backends": ["nccl"], "sizes": "1MiB,4MiB",
...                           "axes": {"backends.nccl.env.NCCL_PROTO": ["LL", "Simple"]}})
>>> out = run_sweep(grid, jobs=1)
>>> out.dataframe()[["backends.nccl.env.NCCL_PROTO", "size_bytes", "protocol"]].values.tolist()
[['LL', 1048576, 'LL'], ['LL', 4194304, 'LL'], ['Simple', 1048576, 'Simple'], ['Simple', 4194304, 'Simple']]
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from collsim.api import Simulator
from collsim.sweep.execute import Executor, make_executor
from collsim.sweep.grid import Grid, GridPoint, Variant
from collsim.sweep.point import (
    PointResult,
    PointTask,
    TaskFunction,
    collsim_version,
    point_key,
    remember_simulator,
    run_point,
    scenario_digest,
)
from collsim.sweep.store import SCHEMA, ResultStore, rows_table
from collsim.vocab import BACKENDS

if TYPE_CHECKING:
    import pandas

__all__ = ["FIRST_COLUMNS", "SweepOutcome", "SweepProgress", "run_sweep"]

#: ``progress(done, total)``: points computed so far in this run and the points this run computes.
SweepProgress = Callable[[int, int], None]

#: The columns :meth:`SweepOutcome.dataframe` puts right after the axes, in this order; the store's others follow.
FIRST_COLUMNS = (
    "point", "backend", "collective", "size_bytes", "algorithm", "protocol", "nranks", "time_us", "algbw_gbps",
    "busbw_gbps", "error",
)  # fmt: skip


@dataclass
class SweepOutcome:
    """What :func:`run_sweep` did and found.

    Attributes
    ----------
    grid : Grid
        The grid run.
    points : list of GridPoint
        Every point, in sweep order.
    keys : list of str
        Each point's store key (same order).
    table : pyarrow.Table
        Every finished point's rows (:data:`collsim.sweep.store.SCHEMA`), those stored before included.
    ran, skipped : int
        Points computed by this run, and points found in the store.
    lost : list of GridPoint
        Points whose worker kept dying (Dask): not stored; run again to retry.
    interrupted : bool
        Ctrl-C stopped the run (what finished is stored).
    validate_seconds, run_seconds : float
        Wall time of the validation and of the run.
    store : ResultStore or None
        Where the points are stored (None: nowhere, kept in memory only).
    executor : str
        What ran the points, in words.
    """

    grid: Grid
    points: list[GridPoint]
    keys: list[str]
    table: pa.Table
    ran: int = 0
    skipped: int = 0
    lost: list[GridPoint] = field(default_factory=list)
    interrupted: bool = False
    validate_seconds: float = 0.0
    run_seconds: float = 0.0
    store: ResultStore | None = None
    executor: str = ""

    @property
    def axes(self) -> list[str]:
        """The grid's axis paths, in order."""
        return [a.path for a in self.grid.axes]

    @property
    def finished(self) -> int:
        """Points that have a result (run now or found in the store); fewer than ``len(points)`` when the run was
        interrupted or lost points."""
        have = set(self.table["key"].to_pylist())
        return sum(k in have for k in self.keys)

    @property
    def partial(self) -> bool:
        """Whether points are missing because the run was interrupted or lost them."""
        return self.interrupted or bool(self.lost)

    def errors(self) -> list[tuple[GridPoint, str]]:
        """Points that have no result and why (NCCL would refuse the choice ...), in sweep order."""
        err = {k: e for k, e in zip(self.table["key"].to_pylist(), self.table["error"].to_pylist(), strict=True) if e}
        return [(p, err[k]) for p, k in zip(self.points, self.keys, strict=True) if k in err]

    def dataframe(self) -> pandas.DataFrame:
        """One row per finished point and collective, in sweep order: the axes (one column per axis path, its
        label), then :data:`FIRST_COLUMNS`, then the store's other columns (:data:`~collsim.sweep.store.SCHEMA`;
        ``scenario_name``, ``breakdown`` and ``notes`` as stored, JSON text for the last two)."""
        import pandas as pd

        ints = {pa.int64(): pd.Int64Dtype()}  # nullable: a point without a result keeps the column's integers
        stored = self.table.to_pandas(types_mapper=ints.get).drop(columns=["params"])
        stored["_row"] = range(len(stored))
        grid = pd.DataFrame(
            [{**p.variant.params, "point": p.index, "key": k} for p, k in zip(self.points, self.keys, strict=True)],
            columns=[*self.axes, "point", "key"],
        )
        df = grid.merge(stored, on="key", how="inner").sort_values(["point", "_row"], kind="stable")
        df = df.drop(columns=["_row"]).reset_index(drop=True)
        first = [*self.axes, *FIRST_COLUMNS]
        return df[first + [c for c in df.columns if c not in first]]


def _order(points: list[GridPoint]) -> list[GridPoint]:
    """Variant after variant (a worker's simulator serves the points after it), larger sizes first within one."""
    return sorted(points, key=lambda p: (p.variant.index, BACKENDS.index(p.backend), -p.size))


def run_sweep(
    grid: Grid,
    store: ResultStore | str | Path | None = None,
    *,
    jobs: int = 0,
    dask: Any = None,
    executor: Executor | None = None,
    force: bool = False,
    progress: SweepProgress | None = None,
    task: TaskFunction = run_point,
) -> SweepOutcome:
    """Run every point of ``grid`` not already in ``store``; store each one as it finishes.

    Parameters
    ----------
    grid : Grid
        See :mod:`collsim.sweep.grid`.
    store : ResultStore or path, optional
        The results store (:class:`~collsim.sweep.store.ResultStore`); None: results in memory only.
    jobs : int
        Local worker processes (0: one per CPU, 1: serial); with ``dask="local"``, the local cluster's workers.
    dask : str or distributed.Client, optional
        ``"local"`` (a LocalCluster here), a scheduler address (``"tcp://host:8786"``) or a client.
    executor : Executor, optional
        Run on this executor (not closed here) instead of one made from ``jobs`` and ``dask``.
    force : bool
        Recompute the points already stored (each replaced in place).
    progress : callable, optional
        ``progress(done, total)`` before the first point and as each one finishes.
    task : callable
        What runs one point (:func:`~collsim.sweep.point.run_point`; a wrapper for instrumentation).

    Returns
    -------
    SweepOutcome

    Raises
    ------
    ScenarioError
        The first invalid point (before anything runs).
    DaskMissing
        ``dask`` without the ``distributed`` package.
    """
    t0 = time.perf_counter()
    version = collsim_version()
    variant_data: dict[int, tuple[str, dict[str, Any]]] = {}

    def keep(variant: Variant, sim: Simulator) -> None:
        data = sim.scenario.to_dict()
        digest = scenario_digest(data)
        variant_data[variant.index] = (digest, data)
        remember_simulator(digest, sim)  # this process (and forked workers) start with the last few built

    resolved = grid.resolve(check=True, on_simulator=keep)
    keys = [point_key(p.scenario, p.backend, p.size, breakdown=grid.breakdown, version=version)
            for p in resolved.points]  # fmt: skip
    first: dict[str, GridPoint] = {}
    for p, k in zip(resolved.points, keys, strict=True):
        first.setdefault(k, p)
    out = SweepOutcome(grid, resolved.points, keys, SCHEMA.empty_table())
    out.validate_seconds = time.perf_counter() - t0
    if store is not None and not isinstance(store, ResultStore):
        store = ResultStore(store)
    out.store = store
    stored = store.keys() if store is not None else set()
    todo = [p for p in _order(list(first.values())) if force or keys[p.index] not in stored]
    out.skipped = len(first) - len(todo)
    tasks = [PointTask(keys[p.index], variant_data[p.variant.index][0], p.backend, p.size, grid.breakdown)
             for p in todo]  # fmt: skip
    scenarios = {d: data for d, data in variant_data.values()}
    rows: list[dict[str, Any]] = []

    t1 = time.perf_counter()
    runner = executor if executor is not None else (make_executor(jobs, dask) if tasks else None)
    out.executor = runner.name if runner is not None else "none (every point stored)"
    if progress:
        progress(0, len(tasks))
    try:
        if runner is not None and tasks:
            points = runner.imap(task, tasks, scenarios)
            try:
                for i, result in points:
                    rows += _finish(todo[i], result, store, version)
                    out.ran += 1
                    if progress:
                        progress(out.ran, len(tasks))
            except KeyboardInterrupt:  # unless the points it waited for were the last ones
                out.interrupted = out.ran < len(tasks)
            finally:
                points.close()
            out.lost = [todo[i] for i in getattr(runner, "lost", [])]
    finally:
        if runner is not None and executor is None:
            runner.close()
    out.run_seconds = time.perf_counter() - t1
    fresh = rows_table(rows)
    new_keys = {r["key"] for r in rows}
    old = store.table([k for k in first if k not in new_keys]) if store is not None else SCHEMA.empty_table()
    out.table = pa.concat_tables([fresh, old])
    return out


def _finish(point: GridPoint, result: PointResult, store: ResultStore | None, version: str) -> list[dict[str, Any]]:
    """Store one finished point (when there is a store) and return its rows as stored."""
    common: dict[str, Any] = {
        "collsim_version": version,
        "scenario_name": point.scenario.name,
        "params": json.dumps(point.variant.params, default=str),
        "backend": point.backend,
        "size_bytes": point.size,
        "error": result.error,
        "sim_seconds": result.seconds,
        "worker": result.worker,
        "finished_at": datetime.datetime.now(datetime.UTC),
    }
    if store is not None:
        store.write(result.key, result.rows, **common)
    return [{**common, **row, "key": result.key} for row in result.rows] or [{**common, "key": result.key}]
