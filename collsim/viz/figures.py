"""Plotly figures from results, flow records and topologies.

Every function is pure: it reads records (:class:`~collsim.results.Record`), recorded outcomes
(:class:`~collsim.backends.Outcome` with ``records``), NCCL explanations (:class:`~collsim.api.Explanation`) or a
:class:`~collsim.topology.Topology`, and returns a ``plotly.graph_objects.Figure``; nothing is simulated here.
Units on the axes follow nccl-tests: sizes in bytes (binary prefixes on the ticks), times in microseconds, bandwidths
in GB/s with GB = 1e9 bytes.

Figures
-------
* :func:`sweep_figure`: busbw and time against size (log axes), a line per backend (optionally per NCCL algorithm
  and protocol), measured data overlaid.
* :func:`breakdown_figure`: where the time goes per size, stacked, in the categories of :data:`BREAKDOWN_CATEGORIES`
  (each breakdown key is a declared tag's label; its category comes from the tag registry,
  :mod:`collsim.backends.tags`).
* :func:`timeline_figure`: one collective, a row per rank and channel, a bar per chunk.
* :func:`link_utilisation_figure`: per link over time (heatmap); :func:`bottleneck_figure`: the busiest links.
* :func:`topology_figure`: devices and links; :func:`path_matrix_figure`: the ``nvidia-smi topo -m`` matrix.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from collsim.backends.tags import TAGS, tag_for
from collsim.engine import FlowRecord
from collsim.results import Record, busbw_factor
from collsim.topology import Topology
from collsim.trace import (
    ACTIVITIES,
    Bar,
    Lane,
    LinkUse,
    MergedBar,
    flow_bars,
    link_usage,
    merge_bars,
    pack_lanes,
    rank_map,
    resource_capacities,
)
from collsim.units import format_size
from collsim.vocab import BREAKDOWN_CATEGORIES

if TYPE_CHECKING:
    import pandas as pd

    from collsim.api import Explanation
    from collsim.backends import Outcome

__all__ = [
    "ACTIVITY_COLORS",
    "BACKEND_COLORS",
    "BREAKDOWN_CATEGORIES",
    "CATEGORY_COLORS",
    "PATH_TYPE_ORDER",
    "TAG_CATEGORIES",
    "bottleneck_figure",
    "breakdown_category",
    "breakdown_figure",
    "group_breakdown",
    "link_utilisation_figure",
    "path_matrix_figure",
    "size_ticks",
    "sweep_figure",
    "timeline_figure",
    "topology_figure",
]

#: Line colour per backend.
BACKEND_COLORS: dict[str, str] = {"nccl": "#76b900", "gloo": "#1f77b4"}
_BACKEND_NAMES = {"nccl": "NCCL", "gloo": "Gloo"}

#: Every declared tag label (``Record.breakdown`` keys) and the category it is drawn in: a view of the tag registry
#: (:data:`collsim.backends.tags.TAGS`), not a table of its own. Categories and their order:
#: :data:`collsim.vocab.BREAKDOWN_CATEGORIES`.
TAG_CATEGORIES: Mapping[str, str] = MappingProxyType({label: tag.category for label, tag in TAGS.items()})

#: Fill colour per breakdown category.
CATEGORY_COLORS: dict[str, str] = {
    "latency and overheads": "#9e9e9e",
    "transfer: NVLink": "#76b900",
    "transfer: PCIe P2P": "#8c564b",
    "transfer: SHM (PCIe + host memory)": "#c49c94",
    "transfer: TCP loopback (CPU + host memory)": "#ff7f0e",
    "transfer: network (RDMA)": "#1f77b4",
    "transfer: network (TCP)": "#9467bd",
    "transfer: within node (RDMA)": "#17becf",
    "host copies (D2H/H2D)": "#d62728",
    "CPU reduction": "#e377c2",
    "GPU reduction": "#bcbd22",
    "waiting (peers, contention)": "#f2f2f2",
}

#: Bar colour per timeline activity.
ACTIVITY_COLORS: dict[str, str] = {
    "send": "#1f77b4",
    "receive": "#76b900",
    "reduce": "#e377c2",
    "copy": "#d62728",
    "overhead": "#9e9e9e",
}

#: ``nvidia-smi topo -m`` cell types, closest first (the path matrix's colour order); ``NV#`` stands for any NVn.
PATH_TYPE_ORDER: tuple[str, ...] = ("X", "NV#", "PIX", "PXB", "PHB", "SYS", "NET")

_KIND_STYLE: dict[str, tuple[str, str, int]] = {  # device kind -> (colour, marker symbol, size)
    "gpu": ("#76b900", "square", 16),
    "cpu": ("#1f77b4", "diamond", 16),
    "pcie_switch": ("#8c564b", "triangle-up", 12),
    "nic": ("#9467bd", "circle", 11),
    "nvswitch": ("#2ca02c", "hexagon", 18),
    "switch": ("#7f7f7f", "star", 16),
}
_LINK_COLORS: dict[str, str] = {
    "nvlink": "#76b900",
    "pcie": "#8c564b",
    "upi": "#1f77b4",
    "ib": "#9467bd",
    "roce": "#ff7f0e",
    "eth": "#d62728",
}


def _backend_label(backend: str) -> str:
    return _BACKEND_NAMES.get(backend, backend)


def size_ticks(sizes: Sequence[float]) -> tuple[list[int], list[str]]:
    """Tick positions (bytes) and labels for a log size axis: powers of 2 at most about 10 ticks apart.

    >>> size_ticks([8, 1024**3])
    ([8, 128, 2048, 32768, 524288, 8388608, 134217728], ['8B', '128B', '2KiB', '32KiB', '512KiB', '8MiB', '128MiB'])
    """
    pos = [s for s in sizes if s > 0]
    if not pos:
        return [], []
    lo = math.floor(math.log2(min(pos)))
    hi = math.ceil(math.log2(max(pos)))
    step = max(1, math.ceil((hi - lo) / 8))
    vals = [2**k for k in range(lo, hi + 1, step) if 2**k <= max(pos)] or [2**lo]
    return vals, [format_size(v) for v in vals]


# ------------------------------------------------------------------------------------------------ size sweep


def _size_axes(fig: go.Figure, sizes: Sequence[float], cols: int) -> None:
    vals, text = size_ticks(sizes)
    for c in range(1, cols + 1):
        fig.update_xaxes(type="log", title_text="size (bytes)", tickvals=vals, ticktext=text, row=1, col=c)


_PALETTE = ["#76b900", "#1f77b4", "#ff7f0e", "#9467bd", "#d62728", "#17becf", "#8c564b", "#e377c2"]

#: A line's points in one panel: sizes (bytes), values (GB/s or us) and the hover template.
_Points = tuple[Sequence[float], Sequence[float], str]


def sweep_figure(
    records: Sequence[Record],
    *,
    explanations: Sequence[Explanation] = (),
    measured: Mapping[str, pd.DataFrame] | None = None,
    by_algorithm: bool = False,
    nranks: int | None = None,
    title: str | None = None,
) -> go.Figure:
    """busbw (left) and time (right) against size, log axes: a line per backend, measurements as markers.

    Parameters
    ----------
    records : sequence of Record
        Simulated records (e.g. ``SweepResult.records``); one line per backend (and collective, when there are
        several), NCCL first. Hover shows the algorithm/protocol of each point.
    explanations : sequence of Explanation
        From :meth:`collsim.api.Simulator.explain` (``all_pairs=True`` for every pair): a dashed line per NCCL
        (algorithm, protocol) through its simulated times; pairs without a simulated time are left out.
    measured : mapping of str to pandas.DataFrame
        Label to a table with columns ``size_bytes``, ``time_us``, ``busbw_gbps`` (busbw may be NaN: those points
        are left out of the busbw panel): one marker trace per label in each panel.
    by_algorithm : bool
        One line per (backend, algorithm, protocol) instead of per backend (for records of forced pairs).
    nranks : int, optional
        Ranks, for the busbw of explanations (default: the first record's).
    title : str, optional
        Figure title.

    Returns
    -------
    plotly.graph_objects.Figure
        Two panels (x axes ``x``, ``x2``); each line is a trace in both, the busbw one listed first, with the same
        name and legend group (only the busbw trace shows in the legend). y: busbw in GB/s (1e9 bytes/s), time in us.
    """
    fig = make_subplots(rows=1, cols=2, subplot_titles=("bus bandwidth", "time"), horizontal_spacing=0.1)
    n = nranks if nranks is not None else (records[0].nranks if records else None)
    sizes = _record_lines(fig, records, by_algorithm)
    sizes += _explanation_lines(fig, explanations, n)
    sizes += _measured_markers(fig, measured or {})
    _size_axes(fig, sizes, 2)
    fig.update_yaxes(type="log", title_text="busbw (GB/s)", row=1, col=1)
    fig.update_yaxes(type="log", title_text="time (us)", row=1, col=2)
    fig.update_layout(
        title_text=title or "busbw and time against size",
        hovermode="closest",
        legend={"orientation": "h", "y": -0.2},
        height=480,
        margin={"t": 70, "b": 40},
    )
    return fig


def _panel_pair(
    fig: go.Figure, style: Mapping[str, Any], bus: _Points | None, time: _Points, *, time_legend: bool = False
) -> None:
    """One line in both panels of a sweep figure: busbw (left, in the legend; left out when ``bus`` is None) and
    time (right, in the legend only with ``time_legend``); a point's hover text is its size."""
    for col, points in ((1, bus), (2, time)):
        if points is None:
            continue
        xs, ys, hover = points
        extra = {} if col == 1 else {"showlegend": time_legend}
        text = [format_size(x) for x in xs]
        fig.add_trace(go.Scatter(x=xs, y=ys, text=text, hovertemplate=hover, **extra, **style), row=1, col=col)


def _record_lines(fig: go.Figure, records: Sequence[Record], by_algorithm: bool) -> list[float]:
    """A line per (backend, collective[, algorithm/protocol]) of ``records``, NCCL first; returns the sizes."""
    groups: dict[tuple[str, str, str], list[Record]] = {}
    collectives = {r.collective for r in records}
    for r in records:
        pair = f"{r.algorithm}/{r.protocol}" if by_algorithm else ""
        groups.setdefault((r.backend, r.collective, pair), []).append(r)
    order = sorted(groups, key=lambda k: ({"nccl": 0, "gloo": 1}.get(k[0], 2), k[0], k[1], k[2]))
    sizes: list[float] = []
    for i, key in enumerate(order):
        backend, coll, pair = key
        recs = sorted(groups[key], key=lambda r: r.size_bytes)
        name = " ".join(x for x in (_backend_label(backend), coll if len(collectives) > 1 else "", pair) if x)
        fallback = _PALETTE[i % len(_PALETTE)]
        color = fallback if by_algorithm else BACKEND_COLORS.get(backend, fallback)
        style = {
            "name": name,
            "legendgroup": name,
            "mode": "lines+markers",
            "line": {"color": color},
            "customdata": [f"{r.algorithm}/{r.protocol}" for r in recs],
        }
        xs = [r.size_bytes for r in recs]
        tail = " (%{customdata})<extra>" + name + "</extra>"
        bus = (xs, [r.busbw_gbps for r in recs], "%{text}: %{y:.2f} GB/s" + tail)
        _panel_pair(fig, style, bus, (xs, [r.time_us for r in recs], "%{text}: %{y:.2f} us" + tail))
        sizes += xs
    return sizes


def _explanation_lines(fig: go.Figure, explanations: Sequence[Explanation], n: int | None) -> list[float]:
    """A dashed line per simulated NCCL (collective, algorithm, protocol) of ``explanations``; busbw needs the rank
    count ``n`` (without it, only the time panel, with the line in the legend). Returns the sizes."""
    pairs: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for ex in explanations:
        for (algo, proto), t in ex.simulated_s.items():
            pairs.setdefault((ex.collective, algo, proto), []).append((ex.size_bytes, t))
    dashes = ["dash", "dot", "dashdot", "longdash", "longdashdot"]
    ex_colls = {k[0] for k in pairs}
    sizes: list[float] = []
    for j, (coll, algo, proto) in enumerate(sorted(pairs)):
        pts = sorted(pairs[(coll, algo, proto)])
        name = f"NCCL {algo}/{proto}" + (f" {coll}" if len(ex_colls) > 1 else "") + " (simulated)"
        style = {
            "name": name,
            "legendgroup": name,
            "mode": "lines",
            "line": {"dash": dashes[j % len(dashes)], "color": _PALETTE[(j + 2) % len(_PALETTE)], "width": 1.5},
        }
        xs = [s for s, _ in pts]
        bus: _Points | None = None
        if n is not None:
            factor = busbw_factor(coll, n)
            ys = [s / t / 1e9 * factor if t > 0 else 0.0 for s, t in pts]  # bytes/s to GB/s (1e9 bytes)
            bus = (xs, ys, "%{text}: %{y:.2f} GB/s")
        time = (xs, [t * 1e6 for _, t in pts], "%{text}: %{y:.2f} us")  # seconds to microseconds
        _panel_pair(fig, style, bus, time, time_legend=n is None)
        sizes += xs
    return sizes


def _measured_markers(fig: go.Figure, measured: Mapping[str, pd.DataFrame]) -> list[float]:
    """Markers per measured table (columns ``size_bytes``, ``time_us``, ``busbw_gbps``; NaN busbw left out of the
    busbw panel); returns the sizes."""
    symbols = ["circle-open", "square-open", "diamond-open", "triangle-up-open", "x", "cross"]
    sizes: list[float] = []
    for k, (label, df) in enumerate(measured.items()):
        missing = {"size_bytes", "time_us", "busbw_gbps"} - set(df.columns)
        if missing:
            raise ValueError(
                f"measured[{label!r}]: missing column(s) {', '.join(sorted(missing))}; expected size_bytes, "
                "time_us, busbw_gbps"
            )
        d = df.sort_values("size_bytes")
        style = {
            "name": label,
            "legendgroup": f"measured {label}",
            "mode": "markers",
            "marker": {"symbol": symbols[k % len(symbols)], "size": 9, "color": "#333333"},
        }
        bus_d = d[d["busbw_gbps"].notna()]
        bus_xs = [float(x) for x in bus_d["size_bytes"]]
        bus = (bus_xs, [float(y) for y in bus_d["busbw_gbps"]], "%{text}: %{y:.2f} GB/s (measured)")
        mxs = [float(x) for x in d["size_bytes"]]
        _panel_pair(fig, style, bus, (mxs, [float(y) for y in d["time_us"]], "%{text}: %{y:.2f} us (measured)"))
        sizes += mxs
    return sizes


# ------------------------------------------------------------------------------------------------ breakdown


def breakdown_category(tag: str) -> str:
    """The category a breakdown tag label is drawn in: its declared tag's (:func:`collsim.backends.tags.tag_for`).

    Raises
    ------
    KeyError
        For a label no backend declared (never a silent "other").

    Examples
    --------
    >>> breakdown_category("TCP over loopback"), breakdown_category("waiting (peers, slots)")
    ('transfer: TCP loopback (CPU + host memory)', 'waiting (peers, contention)')
    """
    return tag_for(tag).category


def _category_order(categories: Iterable[str]) -> list[str]:
    """``categories`` once each, in :data:`BREAKDOWN_CATEGORIES` order."""
    rank = {c: i for i, c in enumerate(BREAKDOWN_CATEGORIES)}
    return sorted(dict.fromkeys(categories), key=lambda c: (rank.get(c, len(rank)), c))


def group_breakdown(breakdown: Mapping[str, float]) -> dict[str, float]:
    """Seconds per category of a record's breakdown (keys: declared tag labels), in :data:`BREAKDOWN_CATEGORIES`
    order.

    >>> group_breakdown({"D2H copy (PCIe)": 2.0, "H2D copy (PCIe)": 1.0, "CPU reduction": 0.5})
    {'host copies (D2H/H2D)': 3.0, 'CPU reduction': 0.5}
    """
    acc: dict[str, float] = {}
    for tag, seconds in breakdown.items():
        cat = breakdown_category(tag)
        acc[cat] = acc.get(cat, 0.0) + float(seconds)
    return {c: acc[c] for c in _category_order(acc)}


def breakdown_figure(
    records: Sequence[Record],
    *,
    normalize: bool = True,
    collective: str | None = None,
    title: str | None = None,
) -> go.Figure:
    """Where the time goes per size: stacked bars of each record's breakdown, grouped into categories.

    Every breakdown key is a declared tag's label, drawn in its tag's category (:data:`TAG_CATEGORIES`, from the
    tag registry): launch, per-step and per-message latencies and the work enqueue are *latency and overheads*;
    streaming over a transport is *transfer* by link kind (NVLink including NVLS, PCIe P2P, SHM through host memory,
    TCP over loopback, network RDMA (GPUDirect, staged, in-network reduction), network TCP, RDMA within a node);
    Gloo's D2H/H2D staging is *host copies*; Gloo's CPU reduction and receive-buffer copies are *CPU reduction* (GPU
    kernels with ibverbs: *GPU reduction*); the rest of the time, when the rank waits for peers, slots, notices or
    contended resources, is *waiting*.

    Parameters
    ----------
    records : sequence of Record
        Records with a breakdown (``Simulator.compare`` or ``run(breakdown=True)``); those without are skipped.
    normalize : bool
        Bars as percent of each collective's time (default) instead of microseconds.
    collective : str, optional
        Which collective (default: the first record's).
    title : str, optional
        Figure title.

    Returns
    -------
    plotly.graph_objects.Figure
        One panel per backend (NCCL first), a bar trace per (backend, category present), x = size labels in size
        order, y = percent or us; each category has one legend entry.

    Raises
    ------
    KeyError
        For a breakdown key that is not a declared tag label.
    """
    recs = [r for r in records if r.breakdown]
    if collective is None and recs:
        collective = recs[0].collective
    recs = [r for r in recs if r.collective == collective]
    backends = sorted({r.backend for r in recs}, key=lambda b: ({"nccl": 0, "gloo": 1}.get(b, 2), b))
    fig = make_subplots(
        rows=1,
        cols=max(1, len(backends)),
        subplot_titles=[_backend_label(b) for b in backends] or [""],
        horizontal_spacing=0.08,
    )
    shown: set[str] = set()
    for col, backend in enumerate(backends, start=1):
        rows = sorted((r for r in recs if r.backend == backend), key=lambda r: r.size_bytes)
        _breakdown_panel(fig, rows, col, normalize, shown)
    fig.update_layout(
        barmode="stack",
        title_text=title or f"Where the time goes ({collective or 'no records'})",
        legend={"orientation": "h", "y": -0.25},
        height=500,
        margin={"t": 70, "b": 40},
    )
    return fig


def _breakdown_panel(fig: go.Figure, rows: Sequence[Record], col: int, normalize: bool, shown: set[str]) -> None:
    """One backend's stacked bars (``rows`` in size order) in panel ``col``: a bar trace per category present, in
    the legend unless already ``shown`` (updated)."""
    labels = [format_size(r.size_bytes) for r in rows]
    grouped = [group_breakdown(r.breakdown) for r in rows]
    totals = [sum(g.values()) for g in grouped]
    for cat in _category_order(c for g in grouped for c in g):
        secs = [g.get(cat, 0.0) for g in grouped]
        if normalize:
            ys = [100.0 * s / t if t > 0 else 0.0 for s, t in zip(secs, totals, strict=True)]
        else:
            ys = [s * 1e6 for s in secs]  # seconds to microseconds
        hover = "%{x}: %{customdata[0]:.2f} us" + (" (%{y:.1f}%)" if normalize else "") + ", %{customdata[1]}"
        fig.add_trace(
            go.Bar(
                x=labels,
                y=ys,
                name=cat,
                legendgroup=cat,
                showlegend=cat not in shown,
                marker={"color": CATEGORY_COLORS.get(cat, "#bbbbbb"), "line": {"width": 0.5, "color": "#666"}},
                customdata=[[s * 1e6, f"{r.algorithm}/{r.protocol}"] for s, r in zip(secs, rows, strict=True)],
                hovertemplate=hover + "<extra>" + cat + "</extra>",
            ),
            row=1,
            col=col,
        )
        shown.add(cat)
    fig.update_xaxes(title_text="size", type="category", row=1, col=col)
    fig.update_yaxes(title_text="share of time (%)" if normalize else "time (us)", row=1, col=col)
    if normalize:
        fig.update_yaxes(range=[0, 100], row=1, col=col)


# ------------------------------------------------------------------------------------------------ timeline


def _bar_hover(b: Bar) -> str:
    text = f"{b.lane.label}: {b.activity} {b.tag.label}<br>{(b.end - b.start) * 1e6:.3f} us from {b.start * 1e6:.3f} us"
    if b.nbytes > 0:
        text += f"<br>{format_size(b.nbytes)}"
    if b.peer:
        text += f" {'to' if b.activity == 'send' else 'from'} {b.peer}"
    if b.latency > 0 and b.activity == "send":
        text += f"<br>arrives {b.latency * 1e6:.3f} us after it left"
    return text


def timeline_figure(
    outcome: Outcome,
    topology: Topology,
    *,
    max_rows: int = 64,
    max_bars: int = 4000,
    receives: bool = True,
    title: str | None = None,
) -> go.Figure:
    """One collective as a timeline: a row per rank and channel, a horizontal bar per chunk, zoomable.

    Bars (``collsim.trace.flow_bars``): each record's declared activity (*send* over a flow's streaming interval on
    its owner's row, *reduce*, *copy* (D2H/H2D staging, memcpy), *overhead* (kernel launch, work enqueue)), and
    *receive* on the receiving rank's row where the path ends at that rank's GPU. Simulate with
    ``engine.symmetry=false`` so that every rank has rows: with symmetry on only the representatives appear.

    Parameters
    ----------
    outcome : Outcome
        A recorded simulation (``simulate_one(..., record=True)``).
    topology : Topology
        Its topology (rank order).
    max_rows : int
        At most this many rows: when ranks x channels exceed it, only the lowest channels are shown (every rank
        keeps its rows); the title says so.
    max_bars : int
        At most this many bars: first fewer channels are shown (down to one), then each row's bars of one activity
        are merged into equal time bins, as many bins as keep the shapes within ``max_bars`` (a merged bar spans
        its bin's first start to last end; its hover gives the number of bars, their busy time and bytes), so the
        whole collective stays drawn; the title says what is shown. A row's activities that fit in no fewer shapes
        (one per row and activity) are never cut.
    receives : bool
        Draw receive bars.
    title : str, optional
        Replaces the generated title (the notes on what was cut are appended).

    Returns
    -------
    plotly.graph_objects.Figure
        A ``go.Bar`` trace per activity present (in :data:`collsim.trace.ACTIVITIES` order), horizontal: ``y`` =
        row label, ``base`` = start in us, ``x`` = duration in us; rows top to bottom in rank, then channel order.
        Bars that overlap in time on one row share its height (``width``/``offset`` per bar).
    """
    if max_rows < 1 or max_bars < 1:
        raise ValueError(f"max_rows and max_bars must be >= 1, got {max_rows!r} and {max_bars!r}")
    every = flow_bars(outcome.records, rank_map(topology), receives=receives)
    bars, lanes, notes = _cut_bars(every, max_rows, max_bars)
    hovers: list[str] | None = None
    if len(bars) > max_bars:
        merged = merge_bars(bars, max_bars, max(outcome.time_s, max(b.end for b in bars)))
        bars, hovers = [m.bar for m in merged.bars], [_merged_hover(m) for m in merged.bars]
        notes.append(merged.note)
    labels = [lane.label for lane in lanes]
    fig = go.Figure(_activity_traces(bars, hovers))
    head = title or (
        f"{_backend_label(outcome.backend)} {outcome.collective} {format_size(outcome.size_bytes)}: "
        f"{outcome.algorithm}/{outcome.protocol}, {outcome.nranks} ranks, {outcome.time_s * 1e6:.1f} us"
    )
    if outcome.entities and outcome.classes and outcome.classes < outcome.entities:
        notes.append(f"symmetry on: {outcome.classes} of {outcome.entities} entities simulated")
    fig.update_layout(
        title_text=head + (f"<br><sup>showing {'; '.join(notes)}</sup>" if notes else ""),
        barmode="overlay",
        xaxis={"title": {"text": "time (us)"}, "range": [0, outcome.time_s * 1e6 * 1.01]},
        yaxis={"categoryorder": "array", "categoryarray": labels, "autorange": "reversed", "type": "category"},
        height=min(1600, 170 + (16 if len(labels) > 30 else 30) * max(len(labels), 4)),
        bargap=0.15,
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right"},
        margin={"t": 90},
    )
    return fig


def _cut_bars(bars: list[Bar], max_rows: int, max_bars: int) -> tuple[list[Bar], list[Lane], list[str]]:
    """The bars a timeline shows, its rows (sorted lanes) and notes on what was cut: the lowest channels when there
    are more than ``max_rows`` rows or ``max_bars`` bars (down to one channel); more than ``max_bars`` bars may
    remain (:func:`collsim.trace.merge_bars` bins them)."""
    notes: list[str] = []
    lanes = {b.lane for b in bars}
    ranks = {lane.rank for lane in lanes if lane.group == 0}
    channels = sorted({lane.channel for lane in lanes if lane.group == 0})
    keep = len(channels)
    if len(lanes) > max_rows:
        keep = max(1, max_rows // max(len(ranks), 1))
    per_channel: dict[int, int] = {}
    for b in bars:
        per_channel[b.lane.channel] = per_channel.get(b.lane.channel, 0) + 1
    while keep > 1 and sum(per_channel.get(c, 0) for c in channels[:keep]) > max_bars:
        keep -= 1  # fewer channels, whole time span, before cutting the time span
    if keep < len(channels):
        kept = set(channels[:keep])
        bars = [b for b in bars if b.lane.group == 1 or b.lane.channel in kept]
        notes.append(
            f"channel{'s' if keep > 1 else ''} {channels[0]}"
            + (f"-{channels[keep - 1]}" if keep > 1 else "")
            + f" of {len(channels)}"
        )
        lanes = {b.lane for b in bars}
    return bars, sorted(lanes), notes


def _merged_hover(m: MergedBar) -> str:
    """Hover text of a merged bar: its row, activity, how many bars and which tags, its span, busy time, bytes."""
    b = m.bar
    text = (
        f"{b.lane.label}: {b.activity}, {m.count} bar{'s' if m.count > 1 else ''} merged "
        f"({', '.join(sorted(t.label for t in m.tags))})<br>{b.start * 1e6:.3f}-{b.end * 1e6:.3f} us, "
        f"busy {m.busy_s * 1e6:.3f} us"
    )
    if b.nbytes > 0:
        text += f"<br>{format_size(b.nbytes)}"
        text += f" {'to' if b.activity == 'send' else 'from'} {b.peer}" if b.peer else ""
    return text


def _activity_traces(bars: Sequence[Bar], hovers: Sequence[str] | None = None) -> list[go.Bar]:
    """A horizontal bar trace per activity present, in :data:`collsim.trace.ACTIVITIES` order; bars that overlap on
    one row share its 0.8 height (sub-lane ``s`` of ``k`` draws in the ``s``-th slice). ``hovers``: each bar's
    hover text (default: :func:`_bar_hover`)."""
    sub = pack_lanes(bars)
    depth: dict[Lane, int] = {}
    for b, s in zip(bars, sub, strict=True):
        depth[b.lane] = max(depth.get(b.lane, 0), s + 1)
    traces: list[go.Bar] = []
    for act in ACTIVITIES:
        idx = [i for i, b in enumerate(bars) if b.activity == act]
        if not idx:
            continue
        sel = [bars[i] for i in idx]
        widths = [0.8 / depth[b.lane] for b in sel]
        traces.append(
            go.Bar(
                orientation="h",
                name=act,
                y=[b.lane.label for b in sel],
                base=[b.start * 1e6 for b in sel],  # seconds to microseconds
                x=[(b.end - b.start) * 1e6 for b in sel],
                width=widths,
                offset=[-0.4 + sub[i] * w for i, w in zip(idx, widths, strict=True)],
                marker={"color": ACTIVITY_COLORS[act], "line": {"width": 0.6, "color": "white"}},
                hovertext=[_bar_hover(bars[i]) if hovers is None else hovers[i] for i in idx],
                hoverinfo="text",
            )
        )
    return traces


# ------------------------------------------------------------------------------------------------ links


def _usage(
    records: Sequence[FlowRecord],
    topology: Topology | Mapping[str, tuple[str, float]],
    total_s: float | None,
    bins: int,
) -> list[LinkUse]:
    caps = resource_capacities(topology) if isinstance(topology, Topology) else topology
    return link_usage(records, caps, total_s=total_s, bins=bins)


def link_utilisation_figure(
    records: Sequence[FlowRecord],
    topology: Topology | Mapping[str, tuple[str, float]],
    *,
    total_s: float | None = None,
    bins: int = 100,
    max_links: int = 40,
    title: str | None = None,
) -> go.Figure:
    """Per link over time: a heatmap of utilisation (what the engine charged the link per second over its capacity).

    See :mod:`collsim.trace` for what the records allow: flows at their average rate, each times its units per data
    byte on the link (LL's flags, TCP's host-memory copies, NVLS's switch reduction), so a saturated link shows 1.

    Parameters
    ----------
    records : sequence of FlowRecord
        ``Outcome.records`` of a recorded simulation.
    topology : Topology or mapping
        For capacities (:func:`collsim.trace.resource_capacities`), or the mapping itself.
    total_s : float, optional
        The collective's time in seconds (``Outcome.time_s``; default: the last flow's end).
    bins : int
        Time bins.
    max_links : int
        Rows: the links with the highest load share; the title says when some were left out.
    title : str, optional
        Figure title.

    Returns
    -------
    plotly.graph_objects.Figure
        One ``go.Heatmap``: ``x`` = bin centres in us, ``y`` = ``"<link> (<kind>)"``, ``z`` = utilisation per
        (link, bin).
    """
    usage = _usage(records, topology, total_s, bins)
    shown = usage[:max_links]
    fig = go.Figure()
    if shown:
        edges = shown[0].edges
        centres = [(a + b) / 2 * 1e6 for a, b in itertools.pairwise(edges)]  # seconds to us
        z = [[float(v) for v in u.utilisation] for u in shown]
        zmax = max(1.0, max(max(row) for row in z))
        fig.add_trace(
            go.Heatmap(
                x=centres,
                y=[f"{u.name} ({u.kind})" for u in shown],
                z=z,
                zmin=0.0,
                zmax=zmax,
                colorscale="Viridis",
                colorbar={"title": {"text": "data rate /<br>bandwidth"}},
                hovertemplate="%{y}<br>%{x:.2f} us: %{z:.2f}<extra></extra>",
            )
        )
    note = f"<br><sup>top {len(shown)} of {len(usage)} busy links by load</sup>" if len(usage) > len(shown) else ""
    fig.update_layout(
        title_text=(title or "Link utilisation over time") + note,
        xaxis={"title": {"text": "time (us)"}},
        yaxis={"autorange": "reversed", "type": "category"},
        height=min(1400, 200 + 18 * max(len(shown), 4)),
        margin={"l": 260, "t": 80},
    )
    return fig


def bottleneck_figure(
    records: Sequence[FlowRecord],
    topology: Topology | Mapping[str, tuple[str, float]],
    *,
    total_s: float | None = None,
    top: int = 10,
    title: str | None = None,
) -> go.Figure:
    """The top bottleneck links: load share and busy share of the collective's time, highest load first.

    *load* = units charged (bytes x coefficient) / bandwidth / collective time (the mean utilisation; 100% = the
    link alone would take the whole time at full speed); *busy* = share of the time with at least one flow on it.

    Returns
    -------
    plotly.graph_objects.Figure
        Two horizontal ``go.Bar`` traces, ``"load (charged / bandwidth)"`` and ``"busy (>= 1 flow)"``, x in percent,
        y = ``"<link> (<kind>)"`` for the ``top`` links.
    """
    usage = _usage(records, topology, total_s, 1)[:top]
    names = [f"{u.name} ({u.kind})" for u in usage]
    load: dict[str, Any] = {
        "x": [100.0 * u.load_share for u in usage],
        "marker": {"color": "#d62728"},
        "customdata": [[u.nbytes / 1e6, u.capacity / 1e9] for u in usage],  # bytes to MB, bytes/s to GB/s
        "hovertemplate": "%{y}<br>load %{x:.1f}%: %{customdata[0]:.2f} MB at %{customdata[1]:.1f} GB/s<extra></extra>",
    }
    busy: dict[str, Any] = {
        "x": [100.0 * u.busy_share for u in usage],
        "marker": {"color": "#1f77b4"},
        "hovertemplate": "%{y}<br>busy %{x:.1f}% of the time<extra></extra>",
    }
    fig = go.Figure()
    for name, bar in (("load (charged / bandwidth)", load), ("busy (>= 1 flow)", busy)):
        fig.add_trace(go.Bar(orientation="h", name=name, y=names, **bar))
    fig.update_layout(
        title_text=title or f"Top {len(usage)} bottleneck links",
        barmode="group",
        xaxis={"title": {"text": "share of the collective's time (%)"}},
        yaxis={"autorange": "reversed", "type": "category"},
        height=200 + 36 * max(len(usage), 3),
        margin={"l": 260, "t": 60},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right"},
    )
    return fig


# ------------------------------------------------------------------------------------------------ topology


def _fmt_spec(key: str, value: Any) -> str | None:
    if key.endswith("_source"):
        return None
    low = key.lower()
    if isinstance(value, bool) or value is None:
        return f"{key}: {value}"
    if isinstance(value, (int, float)):
        if "bandwidth" in low or low.endswith("_bw") or "_bw_" in low or low == "speed":
            return f"{key}: {value / 1e9:.2f} GB/s"  # bytes/s to GB/s (1e9 bytes)
        if "latency" in low:
            return f"{key}: {value * 1e6:.2f} us"  # seconds to microseconds
        return f"{key}: {value:g}"
    text = str(value)
    return f"{key}: {text[:70] + '...' if len(text) > 70 else text}"


def _device_hover(dev: Any) -> str:
    lines = [f"<b>{dev.name}</b> ({dev.kind})"]
    for key, value in dev.spec.items():
        line = _fmt_spec(key, value)
        if line:
            lines.append(line)
    return "<br>".join(lines)


def _layout(topology: Topology, nodes: Sequence[int]) -> dict[str, tuple[float, float]]:
    """Positions: a column block per node; rows top to bottom CPU sockets, PCIe switches, GPUs and NICs,
    NVSwitch; fabric switches below (leaves, then spines)."""
    level = {"cpu": 4.0, "pcie_switch": 3.0, "gpu": 2.0, "nic": 2.0, "nvswitch": 1.0}
    pos: dict[str, tuple[float, float]] = {}
    g = topology.graph
    width = 0.0
    blocks: list[tuple[int, dict[float, list[Any]]]] = []
    for node in nodes:
        rows: dict[float, list[Any]] = {}
        devs = topology.devices(node=node)

        def parent(d: Any) -> tuple[int, int, int]:
            # order GPUs and NICs under their PCIe switch, switches under their CPU
            for nb in sorted(g.predecessors(d.name)):
                nd = topology.device(nb)
                if nd.kind in ("pcie_switch", "cpu") and g.edges[nb, d.name]["link"].kind in ("pcie", "c2c"):
                    return (nd.index, 0 if d.kind == "gpu" else 1, d.index)
            return (99, 0 if d.kind == "gpu" else 1, d.index)

        for d in devs:
            rows.setdefault(level.get(d.kind, 0.0), []).append(d)
        for y, lst in rows.items():
            if y in (2.0, 3.0):
                lst.sort(key=parent)
        width = max(width, *(len(v) for v in rows.values())) if rows else width
        blocks.append((node, rows))
    for b, (_node, rows) in enumerate(blocks):
        x0 = b * (width + 2)
        for y, lst in rows.items():
            for i, d in enumerate(lst):
                pos[d.name] = (x0 + (i + 0.5) * width / len(lst), y)
    fabric = [d for d in topology.devices() if d.node < 0]
    leaves = [d for d in fabric if any(topology.device(nb).kind == "nic" for nb in g.predecessors(d.name))]
    spines = [d for d in fabric if d not in leaves]
    total = max(len(blocks) * (width + 2) - 2, 1.0)
    for y, lst in ((-0.5, leaves), (-1.5, spines)):
        for i, d in enumerate(lst):
            pos[d.name] = ((i + 0.5) * total / len(lst), y)
    return pos


def topology_figure(
    topology: Topology,
    *,
    nodes: Sequence[int] | None = None,
    max_nodes: int = 4,
    title: str | None = None,
) -> go.Figure:
    """Devices by kind and links coloured by kind, wider for more bandwidth; specs on hover.

    Parameters
    ----------
    topology : Topology
        The cluster.
    nodes : sequence of int, optional
        Nodes to draw (default: all, at most ``max_nodes``; the title says when some are left out). Fabric switches
        are always drawn.
    max_nodes : int
        Cap on the default node selection.
    title : str, optional
        Figure title.

    Returns
    -------
    plotly.graph_objects.Figure
        Link traces first: one line trace per (kind, width class) with ``name`` = the kind (legend once per kind,
        width 1-8 px growing with log bandwidth per direction), then one invisible marker trace ``"link specs"``
        at link midpoints for hover, then one marker trace per device kind (``name`` = kind, hover = its spec).
    """
    chosen = list(nodes) if nodes is not None else list(range(topology.nodes))[:max_nodes]
    for n in chosen:
        if not 0 <= n < topology.nodes:
            raise ValueError(f"node {n}: the cluster has nodes 0..{topology.nodes - 1}")
    pos = _layout(topology, chosen)
    fig = go.Figure([*_link_traces(topology, pos), *_device_traces(topology, pos)])
    note = ""
    if nodes is None and topology.nodes > len(chosen):
        note = f"<br><sup>nodes {chosen[0]}-{chosen[-1]} of {topology.nodes} shown</sup>"
    fig.update_layout(
        title_text=(title or f"Topology: {topology.name}, {topology.nodes} node(s)") + note,
        xaxis={"visible": False},
        yaxis={"visible": False},
        hovermode="closest",
        plot_bgcolor="white",
        height=520,
        legend={"orientation": "h", "y": -0.05},
        margin={"t": 70},
    )
    return fig


def _link_hover(lns: Sequence[Any]) -> str:
    """Hover text of the links between two devices (one per direction): kind, count, preset, bandwidths (GB/s),
    efficiency, latency (us) and source."""
    ln = lns[0]
    dirs = "<br>".join(
        f"{x.src} -> {x.dst}: {x.bandwidth / 1e9:.2f} GB/s"  # bytes/s to GB/s (1e9 bytes)
        for x in lns
    )
    return (
        f"<b>{ln.kind}</b> x{ln.count} ({ln.preset})<br>{dirs}<br>raw {ln.raw_bandwidth / 1e9:.2f} GB/s per "
        f"direction, efficiency {ln.efficiency:.3g}<br>latency {ln.latency * 1e6:.2f} us<br>{ln.source}"
    )


def _link_traces(topology: Topology, pos: Mapping[str, tuple[float, float]]) -> list[go.Scatter]:
    """Line traces per (link kind, width class) between the placed devices, widest first within a kind, then the
    invisible ``"link specs"`` hover markers at link midpoints."""
    pairs: dict[tuple[str, str], list[Any]] = {}
    for ln in topology.links():
        if ln.src in pos and ln.dst in pos:
            pairs.setdefault((min(ln.src, ln.dst), max(ln.src, ln.dst)), []).append(ln)
    bws = [max(ln.bandwidth for ln in lns) for lns in pairs.values()]
    lo, hi = (min(bws), max(bws)) if bws else (1.0, 1.0)

    def width_of(bw: float) -> int:
        if hi <= lo:
            return 3
        return 1 + round(7 * math.log(bw / lo) / math.log(hi / lo))

    segments: dict[tuple[str, int], tuple[list[float | None], list[float | None]]] = {}
    mid_x: list[float] = []
    mid_y: list[float] = []
    for (a, b), lns in sorted(pairs.items()):
        xs, ys = segments.setdefault((lns[0].kind, width_of(max(x.bandwidth for x in lns))), ([], []))
        (xa, ya), (xb, yb) = pos[a], pos[b]
        xs += [xa, xb, None]
        ys += [ya, yb, None]
        mid_x.append((xa + xb) / 2)
        mid_y.append((ya + yb) / 2)
    traces: list[go.Scatter] = []
    legend_kinds: set[str] = set()
    for (kind, w), (xs, ys) in sorted(segments.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        traces.append(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name=kind,
                legendgroup=f"link {kind}",
                showlegend=kind not in legend_kinds,
                line={"color": _LINK_COLORS.get(kind, "#aaaaaa"), "width": w},
                hoverinfo="skip",
            )
        )
        legend_kinds.add(kind)
    hover = [_link_hover(lns) for _, lns in sorted(pairs.items())]
    marker = {"size": 10, "opacity": 0.0}
    traces.append(
        go.Scatter(
            x=mid_x,
            y=mid_y,
            mode="markers",
            name="link specs",
            showlegend=False,
            marker=marker,
            hovertext=hover,
            hoverinfo="text",
        )
    )
    return traces


def _device_traces(topology: Topology, pos: Mapping[str, tuple[float, float]]) -> list[go.Scatter]:
    """A marker trace per device kind among the placed devices (in :data:`_KIND_STYLE` order), spec on hover."""
    kinds: dict[str, list[Any]] = {}
    for d in topology.devices():
        if d.name in pos:
            kinds.setdefault(d.kind, []).append(d)
    traces: list[go.Scatter] = []
    for kind in sorted(kinds, key=lambda k: list(_KIND_STYLE).index(k) if k in _KIND_STYLE else 99):
        devs = kinds[kind]
        color, symbol, size = _KIND_STYLE.get(kind, ("#333333", "circle", 10))
        traces.append(
            go.Scatter(
                x=[pos[d.name][0] for d in devs],
                y=[pos[d.name][1] for d in devs],
                mode="markers+text" if len(pos) <= 80 else "markers",
                text=[d.local_name if d.node >= 0 else d.name.split("/", 1)[-1] for d in devs],
                textposition="top center",
                textfont={"size": 9},
                name=kind,
                legendgroup=f"device {kind}",
                marker={"color": color, "symbol": symbol, "size": size, "line": {"width": 1, "color": "#222"}},
                hovertext=[_device_hover(d) for d in devs],
                hoverinfo="text",
            )
        )
    return traces


def _path_rank(cell: str) -> int:
    key = "NV#" if cell.startswith("NV") and cell != "NET" else cell
    return PATH_TYPE_ORDER.index(key) if key in PATH_TYPE_ORDER else len(PATH_TYPE_ORDER)


def path_matrix_figure(topology: Topology, *, node: int = 0, title: str | None = None) -> go.Figure:
    """The ``collsim topo`` matrix of one node as a heatmap: GPU rows, GPU and NIC columns, each cell the
    ``nvidia-smi topo -m`` connection type (X, NV#, PIX, PXB, PHB, SYS, NET), coloured closest (green) to farthest.

    A node without GPUs shows its CPU sockets against its NICs.

    Returns
    -------
    plotly.graph_objects.Figure
        One ``go.Heatmap``: ``y`` = rows (``GPU0``...), ``x`` = columns (``GPU0``..., ``NIC0``...), ``text`` = the
        cells, ``z`` = their position in :data:`PATH_TYPE_ORDER`.
    """
    if not 0 <= node < topology.nodes:
        raise ValueError(f"node {node}: the cluster has nodes 0..{topology.nodes - 1}")
    gpus = topology.devices("gpu", node)
    nics = topology.nics(node)
    rows = gpus or topology.devices("cpu", node)
    cols = [*gpus, *nics] if gpus else nics
    rlabel = [f"GPU{d.index}" if d.kind == "gpu" else d.local_name for d in rows]
    clabel = [f"GPU{d.index}" if d.kind == "gpu" else f"NIC{d.index}" for d in cols]
    text = [[topology.path_type(r.name, c.name) for c in cols] for r in rows]
    z = [[_path_rank(cell) for cell in row] for row in text]
    scale = ["#1a9850", "#66bd63", "#a6d96a", "#fee08b", "#fdae61", "#f46d43", "#d73027", "#a50026"]
    n = len(PATH_TYPE_ORDER)
    colorscale = [[i / n, scale[i]] for i in range(n)] + [[1.0, scale[n]]]
    fig = go.Figure(
        go.Heatmap(
            x=clabel,
            y=rlabel,
            z=z,
            text=text,
            texttemplate="%{text}",
            zmin=0,
            zmax=n,
            colorscale=colorscale,
            showscale=False,
            hovertemplate="%{y} - %{x}: %{text}<extra></extra>",
            xgap=2,
            ygap=2,
        )
    )
    fig.update_layout(
        title_text=title or f"GPU path matrix, node {node} (nvidia-smi topo -m)",
        yaxis={"autorange": "reversed", "type": "category"},
        xaxis={"type": "category", "side": "top"},
        height=130 + 32 * max(len(rows), 2),
        margin={"t": 100},
    )
    return fig
