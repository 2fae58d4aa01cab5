"""``collsim benchmark --sweep``: one grid run three ways on this machine, in one run: serially, on the local fork
pool and on a Dask LocalCluster; throughput of each and what Dask costs per point.

Each mode runs every point of the grid into a fresh results store (so store writes are counted), after the grid
was validated (not counted: the same for every mode). The Dask cluster's start-up is timed apart. The overhead of a
mode per point is what its workers spent on anything but simulating: ``(workers x wall - sum of the points'
simulation seconds) / points`` (scheduling, transfers, store writes, the idle tail). Dask's overhead per point is
the difference between Dask's and the pool's; a point of 1 s or more pays it once, so its share of such a point is
at most that overhead over 1 s. The difference of the wall times, ``(wall_dask - wall_pool) x workers / points``,
is printed too: it also counts simulations that ran slower in one mode (a machine shared with other work).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from collsim.sweep.execute import DaskExecutor, DaskMissing, Executor, PoolExecutor, SerialExecutor
from collsim.sweep.grid import Grid, grid_from_mapping, load_grid
from collsim.sweep.runner import SweepOutcome, run_sweep

__all__ = ["BENCH_GRID", "run_sweep_benchmark"]

#: The built-in 200-point grid: 2 HGX H100 nodes, NCCL, 4 NIC speeds x 2 algorithms x 25 sizes (8 B-128 MiB);
#: about 35 ms a point on a 2-core machine.
BENCH_GRID: Mapping[str, Any] = {
    "name": "sweep-benchmark",
    "base": "2node-h100-ib",
    "backends": ["nccl"],
    "axes": {
        "cluster.fabric.nic_speed": ["100Gb/s", "200Gb/s", "400Gb/s", "800Gb/s"],
        "backends.nccl.env.NCCL_ALGO": ["Ring", "Tree"],
    },
    "sizes": "8B:128MiB:x2",
}


def _sim_seconds(out: SweepOutcome) -> float:
    """The points' simulation seconds, each point once."""
    seen: dict[str, float] = {}
    for key, s in zip(out.table["key"].to_pylist(), out.table["sim_seconds"].to_pylist(), strict=True):
        seen[key] = s or 0.0
    return sum(seen.values())


def _times(out: SweepOutcome) -> dict[tuple[str, str | None], float]:
    keys, colls, times = (out.table[c].to_pylist() for c in ("key", "collective", "time_us"))
    return {(k, c): t for k, c, t in zip(keys, colls, times, strict=True)}


def run_sweep_benchmark(grid_file: str | None = None, jobs: int = 0) -> int:
    """Print the table (see the module docstring); returns 0, or 1 when the modes' results differ.

    Parameters
    ----------
    grid_file : str, optional
        A grid file; default :data:`BENCH_GRID`.
    jobs : int
        Workers of the pool and of the Dask cluster (0: one per CPU).
    """
    grid: Grid = load_grid(grid_file) if grid_file else grid_from_mapping(dict(BENCH_GRID))
    workers = jobs or os.cpu_count() or 1
    t0 = time.perf_counter()
    npoints = len(grid.resolve(check=True).points)
    print(f"sweep benchmark: {grid.name}, {npoints} points ({', '.join(a.path for a in grid.axes)} x sizes), "
          f"validated in {time.perf_counter() - t0:.2f} s; {workers} workers, {os.cpu_count()} CPUs", flush=True)
    modes: list[tuple[str, Executor | None]] = [("serial", SerialExecutor()), ("local pool", PoolExecutor(workers))]
    start_s = None
    try:
        t = time.perf_counter()
        dask: Executor | None = DaskExecutor("local", workers=workers)
        start_s = time.perf_counter() - t
    except DaskMissing as exc:
        dask = None
        print(f"Dask LocalCluster: skipped ({exc})")
    modes.append(("Dask LocalCluster", dask))
    print(f"{'mode':<18} {'workers':>7} {'wall s':>8} {'points/s':>9} {'speedup':>8} {'sim s':>8} "
          f"{'overhead ms/point':>18}", flush=True)  # fmt: skip
    results: dict[str, tuple[float, dict[tuple[str, str | None], float], float, float]] = {}
    serial_wall = None
    try:
        for name, ex in modes:
            if ex is None:
                continue
            with tempfile.TemporaryDirectory(prefix="collsim-sweep-bench-") as store:
                out = run_sweep(grid, store, executor=ex)
            wall, n = out.run_seconds, max(1, out.ran)
            serial_wall = serial_wall or wall
            sim = _sim_seconds(out)
            overhead = (ex.workers * wall - sim) / n
            results[name] = (wall, _times(out), overhead, sim / n)
            print(f"{name:<18} {ex.workers:>7} {wall:8.2f} {n / wall:9.1f} {serial_wall / wall:7.2f}x {sim:8.2f} "
                  f"{overhead * 1e3:18.2f}", flush=True)  # fmt: skip
    finally:
        if dask is not None:
            dask.close()
    status = 0
    base = results["serial"][1]
    same = all(r[1] == base for r in results.values())
    print(f"results: {'identical in every mode' if same else 'DIFFER between modes'}")
    if not same:
        status = 1
    print(f"mean point: {results['serial'][3] * 1e3:.1f} ms of simulation (serial)")
    if "Dask LocalCluster" in results:
        dk, pool = results["Dask LocalCluster"], results["local pool"]
        by_wall = (dk[0] - pool[0]) * workers / npoints
        extra = dk[2] - pool[2]
        print(f"Dask LocalCluster start: {start_s:.2f} s (not in its wall time)")
        print(f"Dask's overhead per point beyond the local pool's: {extra * 1e3:+.2f} ms = {extra * 100:+.2f}% of a "
              f"1 s point (from the wall times alone, simulation slowdowns included: {by_wall * 1e3:+.2f} ms)")
    return status
