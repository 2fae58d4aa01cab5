"""Figures of a sweep over a grid (``collsim sweep --plot``): busbw or time against one axis, a line per value of
the others, a panel per value of one more; and the page that holds it.

The figure reads a DataFrame with the columns of :meth:`collsim.sweep.SweepOutcome.dataframe` (one column per axis,
``size_bytes``, ``backend``, ``time_us``, ``busbw_gbps`` ...); it runs no simulation.

Examples
--------
>>> import pandas as pd
>>> df = pd.DataFrame({"cluster.nodes": [1, 1, 2, 2], "size_bytes": [1024, 2048] * 2, "backend": ["nccl"] * 4,
...                    "algorithm": ["Ring"] * 4, "protocol": ["LL"] * 4, "time_us": [10.0, 11, 20, 21],
...                    "busbw_gbps": [0.1, 0.2, 0.1, 0.2], "algbw_gbps": [0.1, 0.2, 0.1, 0.2]})
>>> fig = grid_figure(df, lines=["cluster.nodes"])
>>> [t.name for t in fig.data]
['cluster.nodes=1', 'cluster.nodes=2']
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

import plotly.express as px
import plotly.graph_objects as go

from collsim.units import format_size
from collsim.viz.figures import size_ticks

if TYPE_CHECKING:
    import pandas

__all__ = ["METRICS", "grid_figure", "grid_html"]

#: ``--y`` choices: column and axis title.
METRICS = {
    "busbw": ("busbw_gbps", "busbw (GB/s)"),
    "algbw": ("algbw_gbps", "algbw (GB/s)"),
    "time": ("time_us", "time (us)"),
}


def grid_figure(
    df: pandas.DataFrame,
    *,
    x: str = "size_bytes",
    y: str = "busbw",
    lines: Sequence[str] = (),
    facet: str | None = None,
    title: str = "",
) -> go.Figure:
    """``y`` against column ``x``, a line per combination of ``lines`` (and per backend when there are several), a
    panel per value of ``facet``.

    Parameters
    ----------
    df : pandas.DataFrame
        A sweep's rows; rows with an ``error`` are left out.
    x : str
        A column: ``"size_bytes"`` (log axis with size ticks) or an axis path.
    y : str
        ``"busbw"``, ``"algbw"`` or ``"time"`` (:data:`METRICS`).
    lines : sequence of str
        Columns whose values name the lines (the backend, the collective and, with ``x`` another column than
        ``size_bytes``, the size too, where they take several values).
    facet : str, optional
        A column whose values get a panel each.
    title : str
        Figure title.
    """
    column, label = METRICS[y]
    data = df
    if "error" in data.columns:
        data = data[data["error"].isna() | (data["error"] == "")]
    data = data.copy()
    keys = [c for c in lines if c not in (x, facet)]
    if data["backend"].nunique() > 1 and "backend" not in keys:
        keys.append("backend")
    if "collective" in data.columns and data["collective"].nunique() > 1 and "collective" not in keys:
        keys.append("collective")
    if x != "size_bytes" and facet != "size_bytes" and data["size_bytes"].nunique() > 1:
        keys.append("size_bytes")  # sizes are an axis too: one line a size (they zigzagged up and down one line)

    def value(k: str, v: object) -> str:
        return f"size={format_size(float(v))}" if k == "size_bytes" else f"{k}={v}"  # type: ignore[arg-type]

    data["line"] = [", ".join(value(k, r[k]) for k in keys) or "all" for r in data.to_dict("records")]
    data["algo"] = data["algorithm"].astype(str) + "/" + data["protocol"].astype(str)
    numeric_x = x == "size_bytes" or data[x].map(lambda v: isinstance(v, (int, float))).all()
    data = data.sort_values(x) if numeric_x else data
    fig = px.line(
        data,
        x=x,
        y=column,
        color="line",
        facet_col=facet,
        facet_col_wrap=3 if facet else 0,
        markers=True,
        log_x=x == "size_bytes",
        log_y=x == "size_bytes",
        hover_data={"algo": True, "time_us": ":.2f", "busbw_gbps": ":.2f", "line": False},
        labels={"size_bytes": "size (bytes)", column: label, "line": ""},
        title=title,
    )
    if x == "size_bytes":
        vals, text = size_ticks(data["size_bytes"].tolist())
        fig.update_xaxes(tickvals=vals, ticktext=text)
    fig.update_layout(height=480 if not facet else 360 * ((data[facet].nunique() + 2) // 3) + 120,
                      legend={"orientation": "h", "y": -0.2})  # fmt: skip
    return fig


def grid_html(fig: go.Figure, title: str, notes: Sequence[str] = ()) -> str:
    """A self-contained HTML page (plotly.js embedded, works offline) with the figure and a few lines of notes."""
    esc = html.escape
    body = fig.to_html(full_html=False, include_plotlyjs=True, config={"displaylogo": False, "responsive": True})
    text = "".join(f"<p>{esc(n)}</p>" for n in notes)
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title></head>"
        f"<body style='font-family: system-ui, sans-serif; max-width: 1250px; margin: 2em auto'>"
        f"<h1>{esc(title)}</h1>{text}{body}</body></html>\n"
    )
