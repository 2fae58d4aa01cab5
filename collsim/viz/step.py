"""Plotly figures of the DDP training step (``collsim step``, :meth:`collsim.api.Simulator.step`).

Pure functions of :class:`~collsim.training.StepResult` (one simulated iteration of one backend) and
:class:`~collsim.results.step.StepRow` (a result under its sweep label); nothing is simulated here. Times are
seconds in the results and milliseconds on the axes (converted where drawn).

Figures
-------
* :func:`step_timeline_figure`: one iteration per backend, a panel each, a row per stream (the compute stream, the
  Reducer's copies on it, NCCL's stream or each of Gloo's worker threads), a bar per kernel or allreduce.
* :func:`step_sweep_figure`: iteration time and exposed communication against a swept field (``bucket_cap_mb``,
  the GPU count ...), a line per backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from collsim.results.step import StepRow
from collsim.training import BucketTiming, Span, StepResult
from collsim.training.step import compute_gaps
from collsim.units import format_size
from collsim.viz.figures import BACKEND_COLORS, _backend_label

__all__ = [
    "STEP_CATEGORY_COLORS",
    "exposed_intervals",
    "span_category",
    "step_sweep_figure",
    "step_timeline_figure",
    "timeline_row",
]

_MS = 1e3  # seconds -> milliseconds

#: Row of the compute stream's layers and optimizer, and of the Reducer's copies (the same CUDA stream, drawn on
#: its own row so that the short copies show).
COMPUTE_ROW = "compute stream"
COPIES_ROW = "compute stream: DDP copies"

#: Bar colour per category of :func:`span_category` (allreduces: the backend's colour, as in the other figures).
STEP_CATEGORY_COLORS: dict[str, str] = {
    "forward": "#c7c7c7",
    "backward": "#7f7f7f",
    "recompute (activation checkpointing)": "#98df8a",
    "DDP copy": "#d62728",
    "optimizer": "#ff7f0e",
    "gradient clipping": "#ffbb78",
    "NCCL allreduce": BACKEND_COLORS["nccl"],
    "Gloo allreduce (D2H, CPU ring, H2D)": BACKEND_COLORS["gloo"],
    "FSDP copy": "#9467bd",
    "CPU page faults (fresh allocation)": "#8c564b",
    "NCCL all-gather": BACKEND_COLORS["nccl"],
    "NCCL reduce-scatter": BACKEND_COLORS["nccl"],
    "Gloo all-gather (blocking)": BACKEND_COLORS["gloo"],
    "Gloo reduce-scatter (blocking)": BACKEND_COLORS["gloo"],
    "waiting for allreduce (exposed)": "#f2c4c4",
    "other": "#bcbd22",
}
_CATEGORY_ORDER = list(STEP_CATEGORY_COLORS)


def span_category(span: Span) -> str:
    """The category a span is drawn in (a key of :data:`STEP_CATEGORY_COLORS`).

    Examples
    --------
    >>> span_category(Span("compute", "bwd layer4.2.conv3", 0.0, 1e-3))
    'backward'
    >>> span_category(Span("compute", "copy-in fc.weight", 0.0, 1e-5, 0))
    'DDP copy'
    >>> span_category(Span("Gloo thread 1", "allreduce bucket 3", 0.0, 1e-2, 3))
    'Gloo allreduce (D2H, CPU ring, H2D)'
    >>> span_category(Span("Gloo all-gather (blocking)", "all-gather unit 2", 0.0, 1e-2, 2))
    'Gloo all-gather (blocking)'
    >>> span_category(Span("NCCL reduce-scatter stream", "clone unit 2", 0.0, 1e-4))
    'FSDP copy'
    >>> span_category(Span("compute", "page faults: flat gradient unit 1", 0.0, 1e-2))
    'CPU page faults (fresh allocation)'
    >>> span_category(Span("compute", "recompute transformer.h.3.mlp.c_fc", 0.0, 1e-3))
    'recompute (activation checkpointing)'
    >>> span_category(Span("compute", "clip: gradient norm", 0.0, 1e-4))
    'gradient clipping'
    """
    label = span.label
    if label.startswith("fwd "):
        return "forward"
    if label.startswith("bwd "):
        return "backward"
    if label.startswith("recompute "):
        return "recompute (activation checkpointing)"
    if label in ("optimizer", "optimizer (shard)"):
        return "optimizer"
    if label.startswith("clip: "):
        return "gradient clipping"
    if label.startswith(("copy-in", "copy-out", "compress", "decompress")):
        return "DDP copy"
    if label.startswith(("pre-divide", "post-divide", "clone", "chunk copy", "flat gradient")):
        return "FSDP copy"
    if label.startswith("page faults"):
        return "CPU page faults (fresh allocation)"
    for kind in ("all-gather", "reduce-scatter"):
        if label.startswith(kind + " unit"):
            if span.lane.startswith("Gloo"):
                return f"Gloo {kind} (blocking)"
            if span.lane.startswith("NCCL"):
                return f"NCCL {kind}"
    if label.startswith("allreduce"):
        if span.lane.startswith("Gloo"):
            return "Gloo allreduce (D2H, CPU ring, H2D)"
        if span.lane.startswith("NCCL"):
            return "NCCL allreduce"
    return "other"


def timeline_row(span: Span) -> str:
    """The row a span is drawn on: the compute stream's layers and optimizer on :data:`COMPUTE_ROW`, its Reducer
    copies (copy-in, compression cast, copy-out) on :data:`COPIES_ROW`, any other lane on its own row (``NCCL
    stream``, ``Gloo thread 0`` ...)."""
    if span.lane == "compute":
        return COPIES_ROW if span_category(span) == "DDP copy" else COMPUTE_ROW
    return span.lane


def exposed_intervals(result: StepResult) -> list[tuple[float, float]]:
    """When the compute stream waits (seconds from the iteration's start; :func:`collsim.training.step.compute_gaps`).
    DDP's compute stream only waits in ``finalize_backward``, for allreduces not yet done: the exposed communication
    (the rest of ``exposed_s`` is the SM and HBM share NCCL's kernels take from the layers they overlap, and the
    Reducer's copies)."""
    return compute_gaps(result.spans, result.iteration_s)


def _overlap(a: float, b: float, intervals: Sequence[tuple[float, float]]) -> float:
    """Seconds of [a, b] covered by ``intervals`` (disjoint)."""
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in intervals)


def _ms(t: float) -> str:
    return f"{t * _MS:.3f} ms"  # seconds to milliseconds


def _hover(
    span: Span, result: StepResult, buckets: dict[int, BucketTiming], gaps: Sequence[tuple[float, float]]
) -> str:
    """Hover text of one bar: what it is, when, and for an allreduce its bucket (params, bytes, ready, start, end,
    the allreduce's own time and how much of it the compute stream waited for)."""
    cat = span_category(span)
    head = f"<b>{span.label}</b> ({span.lane})<br>{_ms(span.start)} to {_ms(span.end)}: {_ms(span.end - span.start)}"
    b = buckets.get(span.bucket) if span.bucket is not None else None
    if b is None:
        return head
    what = "unit" if " unit " in f" {span.label} " else "bucket"  # FSDP's spans name their unit
    text = f"{head}<br>{what} {b.index}: {b.params} parameter(s), {format_size(b.nbytes)} ({b.nbytes} bytes)"
    if cat in ("NCCL allreduce", "Gloo allreduce (D2H, CPU ring, H2D)"):
        exposed = _overlap(b.start_s, b.end_s, gaps)
        text += (
            f"<br>gradients ready {_ms(b.ready_s)}, allreduce {_ms(b.start_s)} to {_ms(b.end_s)}"
            f"<br>allreduce {_ms(b.comm_s)}, exposed {_ms(exposed)} (the compute stream waits)"
        )
        if result.backend == "gloo":
            text += "<br>on this worker thread: D2H copy, CPU ring over TCP, H2D copy"
    return text


def _row_order(spans: Sequence[Span]) -> list[str]:
    rows = {timeline_row(s) for s in spans}
    head = [r for r in (COMPUTE_ROW, COPIES_ROW) if r in rows]
    return head + sorted(rows - set(head))


def step_timeline_figure(results: Sequence[StepResult], *, title: str | None = None) -> go.Figure:
    """One DDP iteration per backend as a timeline: a panel per result, a row per stream, a bar per kernel.

    Rows, top to bottom: the compute stream (forward and backward layers, the optimizer, and, in a light red, the
    time it waits for allreduces in ``finalize_backward``: the exposed communication), the Reducer's copies on
    the same stream (copy into the buckets, compression casts, copy back; their own row so that the short ones
    show), then NCCL's stream (a kernel per bucket, in launch order) or each of ProcessGroupGloo's worker threads
    (a bar per bucket, from the thread taking it to the end of its H2D copy: the D2H copy, the CPU ring over TCP
    and the H2D copy of Gloo's simulation, which are not told apart here). Hover a bar for its times; an
    allreduce's for its bucket (parameters, bytes, when its gradients were ready, start, end, the allreduce's
    time, and how much of it the compute stream waited for). A dotted line marks the computation alone (one GPU,
    no DDP).

    Parameters
    ----------
    results : sequence of StepResult
        From :meth:`collsim.api.Simulator.step` (one per backend); one panel each, in order.
    title : str, optional
        Figure title.

    Returns
    -------
    plotly.graph_objects.Figure
        Panel ``i`` (y axis ``y``, ``y2`` ...) has a horizontal ``go.Bar`` trace per category present (see
        :func:`span_category`; ``name`` = the category, ``meta`` = the backend), ``y`` = the row
        (:func:`timeline_row`), ``base`` = start and ``x`` = duration in ms; the waiting bars are
        :func:`exposed_intervals`. x: ms from the start of the iteration, shared by the panels.
    """
    n = max(1, len(results))
    rows_of = [_row_order(r.spans) for r in results]
    heights = [len(rows) + 1.5 for rows in rows_of] or [1.0]
    titles = [
        f"{_backend_label(r.backend)}, {r.world} ranks: iteration {r.iteration_s * _MS:.2f} ms = compute "
        f"{r.compute_s * _MS:.2f} ms + {r.exposed_s * _MS:.2f} ms exposed; {len(r.buckets)} bucket(s), "
        f"{r.overlap:.0%} of {r.comm_s * _MS:.2f} ms allreduce hidden"  # seconds to milliseconds
        for r in results
    ]
    fig = make_subplots(
        rows=n,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=min(0.12, 0.3 / n),
        row_heights=heights,
        subplot_titles=titles or [""],
    )
    shown: set[str] = set()
    for i, r in enumerate(results, start=1):
        _timeline_panel(fig, r, i, rows_of[i - 1], shown)
    end = max((r.iteration_s for r in results), default=0.0)
    fig.update_xaxes(range=[0.0, end * _MS * 1.01])  # seconds to milliseconds
    fig.update_xaxes(title_text="time from the start of the iteration (ms)", row=n, col=1)
    fig.update_layout(
        title_text=title or "One DDP iteration per backend",
        barmode="overlay",
        bargap=0.2,
        hovermode="closest",
        height=min(1400, 140 + sum(40 * h for h in heights)),
        legend={"orientation": "h", "y": -0.12, "yanchor": "top"},
        margin={"t": 90, "l": 190},
    )
    return fig


def _timeline_panel(fig: go.Figure, r: StepResult, row: int, rows: Sequence[str], shown: set[str]) -> None:
    """Panel ``row``: a bar trace per category of ``r``'s spans (and the waiting bars), then the compute line."""
    buckets = {b.index: b for b in r.buckets}
    gaps = exposed_intervals(r)
    bars: dict[str, list[tuple[str, float, float, str]]] = {}  # category -> (row, start s, end s, hover)
    for s in r.spans:
        bars.setdefault(span_category(s), []).append((timeline_row(s), s.start, s.end, _hover(s, r, buckets, gaps)))
    waiting = "waiting for allreduce (exposed)"
    for a, b in gaps:
        hover = f"<b>the compute stream waits</b> for allreduces<br>{_ms(a)} to {_ms(b)}: {_ms(b - a)}"
        bars.setdefault(waiting, []).append((COMPUTE_ROW, a, b, hover))
    for cat in sorted(bars, key=lambda c: _CATEGORY_ORDER.index(c) if c in _CATEGORY_ORDER else len(_CATEGORY_ORDER)):
        items = bars[cat]
        edge = 0.6 if "allreduce" in cat and "waiting" not in cat else 0.0  # a white edge between adjacent buckets
        fig.add_trace(
            go.Bar(
                orientation="h",
                name=cat,
                legendgroup=cat,
                showlegend=cat not in shown,
                meta=r.backend,
                y=[it[0] for it in items],
                base=[it[1] * _MS for it in items],  # seconds to milliseconds
                x=[(it[2] - it[1]) * _MS for it in items],
                marker={"color": STEP_CATEGORY_COLORS.get(cat, "#bbbbbb"), "line": {"width": edge, "color": "white"}},
                hovertext=[it[3] for it in items],
                hoverinfo="text",
            ),
            row=row,
            col=1,
        )
        shown.add(cat)
    fig.update_yaxes(
        type="category", categoryorder="array", categoryarray=list(rows), autorange="reversed", row=row, col=1
    )
    if r.compute_s > 0:
        fig.add_vline(
            x=r.compute_s * _MS,  # seconds to milliseconds
            line={"dash": "dot", "color": "#333333", "width": 1},
            annotation_text="compute alone",
            annotation_position="top left",
            annotation_font_size=10,
            row=row,
            col=1,
        )


# ------------------------------------------------------------------------------------------------ sweep


def _sweep_point(row: StepRow, x: str | None) -> tuple[str, str]:
    """(field, value) of a row: ``x == "world"``: the ranks; otherwise the label's ``field=value`` (a label
    without ``=`` is its own value, the field ``x`` or ``"configuration"``)."""
    if x == "world":
        return "GPUs (ranks)", str(row.result.world)
    field, sep, value = row.label.partition("=")
    if not sep:
        return x or "configuration", row.label
    return x or field, value


def _number(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def step_sweep_figure(rows: Sequence[StepRow], *, x: str | None = None, title: str | None = None) -> go.Figure:
    """Iteration time (left) and exposed communication (right) against a swept field, a line per backend.

    Parameters
    ----------
    rows : sequence of StepRow
        ``collsim step --sweep``'s rows: each result under the label ``field=value`` (``bucket_cap_mb=25``,
        ``nodes=2``), as :func:`collsim.results.step.format_step` reads them.
    x : str, optional
        ``"world"``: against the rows' rank counts (GPUs) instead of the label's value; any other string names the
        x axis (default: the label's field).
    title : str, optional
        Figure title.

    Returns
    -------
    plotly.graph_objects.Figure
        Two panels (x axes ``x``, ``x2``). Per backend (NCCL first) a ``lines+markers`` trace in each, ``name`` =
        the backend, the left one in the legend: y = ``iteration_s`` and ``exposed_s`` in ms; in the left panel a
        dotted ``"computation alone"`` line (``compute_s``). Numeric values make a numeric x axis (logarithmic when
        they are positive and span at least 10x), otherwise a category axis in row order.
    """
    points = [(_sweep_point(r, x), r) for r in rows]
    fields = list(dict.fromkeys(p[0] for p, _ in points))
    values = list(dict.fromkeys(p[1] for p, _ in points))
    nums = [_number(v) for v in values]
    numeric = bool(values) and all(v is not None for v in nums)
    pos = [v for v in nums if v is not None and v > 0]
    log = numeric and len(pos) == len(nums) and max(pos) >= 10 * min(pos)

    def xval(v: str) -> Any:
        return _number(v) if numeric else v

    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("iteration time", "exposed communication"), horizontal_spacing=0.1
    )
    backends = sorted({r.result.backend for _, r in points}, key=lambda b: ({"nccl": 0, "gloo": 1}.get(b, 2), b))
    for k, backend in enumerate(backends):
        mine = [(p[1], r.result) for p, r in points if r.result.backend == backend]
        if numeric:
            mine.sort(key=lambda vr: _number(vr[0]) or 0.0)
        xs = [xval(v) for v, _ in mine]
        name = _backend_label(backend)
        style = {
            "name": name,
            "legendgroup": name,
            "mode": "lines+markers",
            "line": {"color": BACKEND_COLORS.get(backend, ["#ff7f0e", "#9467bd"][k % 2])},
            "text": [v for v, _ in mine],
            "customdata": [[r.overlap * 100, len(r.buckets), r.world] for _, r in mine],
        }
        tail = "<br>%{customdata[1]} bucket(s), %{customdata[0]:.0f}% overlap, %{customdata[2]} ranks<extra>"
        hover = "%{text}: %{y:.2f} ms" + tail + name + "</extra>"
        for col, ys in ((1, [r.iteration_s for _, r in mine]), (2, [r.exposed_s for _, r in mine])):
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=[y * _MS for y in ys],  # seconds to milliseconds
                    hovertemplate=hover,
                    showlegend=col == 1,
                    **style,
                ),
                row=1,
                col=col,
            )
    compute: dict[str, float] = {}
    for p, r in points:
        compute.setdefault(p[1], r.result.compute_s)
    cvals = sorted(compute, key=lambda v: _number(v) or 0.0) if numeric else list(compute)
    if cvals:
        fig.add_trace(
            go.Scatter(
                x=[xval(v) for v in cvals],
                y=[compute[v] * _MS for v in cvals],  # seconds to milliseconds
                name="computation alone",
                mode="lines",
                line={"color": "#333333", "dash": "dot", "width": 1.5},
                hovertemplate="%{x}: %{y:.2f} ms (one GPU, no DDP)<extra></extra>",
            ),
            row=1,
            col=1,
        )
    axis: dict[str, Any] = {"title_text": " / ".join(fields) or "configuration"}
    if numeric:
        axis["type"] = "log" if log else "linear"
    else:
        axis |= {"type": "category", "categoryorder": "array", "categoryarray": values}
    fig.update_xaxes(**axis)
    fig.update_yaxes(title_text="iteration (ms)", row=1, col=1)
    fig.update_yaxes(title_text="exposed = iteration - compute (ms)", rangemode="tozero", row=1, col=2)
    fig.update_layout(
        title_text=title or "DDP iteration against " + (" / ".join(fields) or "configuration"),
        hovermode="closest",
        legend={"orientation": "h", "y": -0.2},
        height=460,
        margin={"t": 70, "b": 40},
    )
    return fig
