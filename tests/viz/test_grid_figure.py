"""The sweep's figure (``collsim sweep --plot``): a line per combination of the other axes, sizes included."""

from __future__ import annotations

import pandas as pd

from collsim.viz.grid import grid_figure


def _rows() -> pd.DataFrame:
    rows = []
    for nodes in (2, 4, 8):
        for size in (1 << 20, 1 << 26):
            rows.append({"cluster.nodes": nodes, "size_bytes": size, "backend": "nccl", "collective": "allreduce",
                         "algorithm": "Ring", "protocol": "Simple", "time_us": nodes * size / 1e6,
                         "busbw_gbps": 1.0, "algbw_gbps": 1.0, "error": None})  # fmt: skip
    return pd.DataFrame(rows)


def test_an_axis_on_x_draws_a_line_a_size() -> None:
    """With --x nic_speed every size's points went into one line, joined up and down at each x."""
    fig = grid_figure(_rows(), x="cluster.nodes", y="time", lines=["cluster.nodes"])
    assert sorted(t.name for t in fig.data) == ["size=1MiB", "size=64MiB"]
    for trace in fig.data:
        assert list(trace.x) == [2, 4, 8]  # one point an x, in order


def test_sizes_on_x_are_not_a_line_key() -> None:
    fig = grid_figure(_rows(), x="size_bytes", y="time", lines=["cluster.nodes"])
    assert sorted(t.name for t in fig.data) == ["cluster.nodes=2", "cluster.nodes=4", "cluster.nodes=8"]
