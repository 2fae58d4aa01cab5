"""A driver killed with SIGKILL mid-sweep: the store holds whole points only, and a rerun computes only the rest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from collsim.sweep import load_grid, run_sweep

GRID = """\
base: 2node-h100-ib
backends: [nccl]
axes:
  backends.nccl.env.NCCL_ALGO: [Ring, Tree]
  cluster.fabric.nic_speed: [200Gb/s, 400Gb/s]
sizes: 8B:64MiB:x4
"""
TOTAL = 2 * 2 * 12  # variants x sizes (8 B, 32 B, ... 32 MiB)


def test_a_killed_driver_loses_only_the_points_in_flight(tmp_path: Path) -> None:
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(GRID)
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "collsim", "sweep", str(grid_file), "--store", str(store), "--jobs", "2", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if store.is_dir() and len(list(store.glob("*.parquet"))) >= 4:
            break
        time.sleep(0.005)
    assert proc.poll() is None, f"the sweep ended before the kill: {proc.stderr.read() if proc.stderr else ''}"
    os.kill(proc.pid, signal.SIGKILL)  # the driver only: its forked workers die with it (collsim.parallel)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert _group_ends(proc.pid, 20.0)  # no worker outlives its driver

    kept = sorted(store.glob("*.parquet"))
    assert 4 <= len(kept) < TOTAL
    for f in kept:  # whole points only: every file reads, one row per point
        assert pq.read_table(f).num_rows == 1
    grid = load_grid(grid_file)
    assert len(grid.resolve().points) == TOTAL
    out = run_sweep(grid, store, jobs=1)
    assert (out.ran, out.skipped) == (TOTAL - len(kept), len(kept))  # only the missing points ran
    df = pd.read_parquet(store)
    assert len(df) == TOTAL and df["key"].is_unique  # every row present once
    assert not list(store.glob(".*.tmp"))  # the dead driver's temporary file, if any, is gone
    assert out.dataframe()["point"].tolist() == list(range(TOTAL))


def _group_ends(pgid: int, timeout: float) -> bool:
    """Whether every process of the group ``pgid`` is gone within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False
