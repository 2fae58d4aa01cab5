"""Figures of predicted against measured times (``collsim validate --html``)."""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from collsim.calibration.validate import Validation

__all__ = ["validation_figure", "validation_html"]


def validation_figure(validations: Sequence[Validation]) -> go.Figure:
    """Time and busbw against size (log axes), measured as markers and predicted as lines, plus the error in percent.

    Parameters
    ----------
    validations : sequence of Validation
        One per measurement (see :func:`collsim.calibration.validate.validate`).

    Returns
    -------
    plotly.graph_objects.Figure
        Three rows sharing the size axis: time (us), busbw (GB/s), time error (%); per validation the traces
        ``"<measurement> measured"``, ``"<measurement> predicted"``, ``"<measurement> error"``, then
        ``"<measurement> measured busbw"`` and ``"<measurement> predicted busbw"``; for NCCL also
        ``"<measurement> NCCL model"`` (time) and ``"<measurement> NCCL model error"``, NCCL's own cost model for the
        pair it picks.

    Examples
    --------
    >>> from collsim.calibration.validate import ValidationRow
    >>> v = Validation("s", "m.json", "nccl", "allreduce", 2, [ValidationRow(1024, 10.0, 11.0, 0.1, 0.09)])
    >>> fig = validation_figure([v])
    >>> [t.name for t in fig.data][:3], [round(y, 6) for y in fig.data[2].y]
    (['m measured', 'm predicted', 'm error'], [10.0])
    """
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=("time per collective (us)", "bus bandwidth (GB/s)", "time error (predicted vs measured, %)"),
    )
    for v in validations:
        label = v.measurement.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        x = [r.size_bytes for r in v.rows]
        algo = [f"{r.algorithm}/{r.protocol}" for r in v.rows]
        # (name suffix, row, mode, y, hover): the legend shows the first three, busbw shares their colours' groups
        traces: list[tuple[str, int, str, list[float | None], str]] = [
            ("measured", 1, "markers", [r.measured_us for r in v.rows], "%{x} B: %{y:.2f} us measured"),
            ("predicted", 1, "lines", [r.predicted_us for r in v.rows], "%{x} B: %{y:.2f} us predicted (%{text})"),
            ("error", 3, "lines+markers", [r.time_error_pct for r in v.rows], "%{x} B: %{y:+.1f}%"),
            ("measured busbw", 2, "markers", [r.measured_busbw_gbps for r in v.rows], "%{x} B: %{y:.2f} GB/s"),
            ("predicted busbw", 2, "lines", [r.predicted_busbw_gbps for r in v.rows], "%{x} B: %{y:.2f} GB/s"),
        ]
        if any(r.model_us is not None for r in v.rows):
            traces += [
                ("NCCL model", 1, "lines", [r.model_us for r in v.rows], "%{x} B: %{y:.2f} us, NCCL's cost model"),
                ("NCCL model error", 3, "lines", [r.model_error_pct for r in v.rows], "%{x} B: %{y:+.1f}% (model)"),
            ]
        for suffix, row, mode, y, hover in traces:
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    mode=mode,
                    name=f"{label} {suffix}",
                    legendgroup=label,
                    showlegend=row != 2,
                    text=algo,
                    hovertemplate=hover + "<extra></extra>",
                    line={"dash": "dot"} if suffix.startswith("NCCL model") else None,
                ),
                row=row,
                col=1,
            )
    for row in (1, 2, 3):
        fig.update_xaxes(type="log", row=row, col=1)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_xaxes(title_text="size (bytes)", row=3, col=1)
    fig.update_layout(height=900, title="collsim validate: predicted vs measured")
    return fig


def validation_html(validations: Sequence[Validation]) -> str:
    """A self-contained HTML page (plotly.js embedded, works offline): the figure and the band summary table."""
    rows = []
    for v in validations:
        for b in [*v.bands(), v.overall()]:
            cells = [v.measurement, b.band, str(b.count)] + [
                "-" if x is None else f"{x:.1f}%"
                for x in (b.median_abs_time_error_pct, b.max_abs_time_error_pct, b.median_abs_busbw_error_pct)
            ] + ["-" if x is None else f"{x:+.1f}%" for x in (b.median_time_error_pct, b.median_model_error_pct)]
            rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    table = (
        "<table border=1 cellpadding=4><tr><th>measurement</th><th>band</th><th>sizes</th>"
        "<th>median |time err|</th><th>max |time err|</th><th>median |busbw err|</th>"
        "<th>signed median time err</th><th>NCCL's cost model: signed median time err</th></tr>"
        + "".join(rows)
        + "</table>"
    )
    body = validation_figure(validations).to_html(full_html=False, include_plotlyjs=True)
    title = html.escape(", ".join(v.scenario for v in validations))
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>collsim validate: {title}</title></head>"
        f"<body><h1>collsim validate: {title}</h1>{table}{body}</body></html>\n"
    )
