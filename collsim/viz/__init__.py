"""Plotly figures from results, flow records and topologies, and the HTML report.

Figures are pure functions (see :mod:`collsim.viz.figures`, and :mod:`collsim.viz.step` for the DDP training
step); :func:`build_report` draws a :class:`collsim.api.ReportData` (simulated by ``Simulator.report_data``) as one
self-contained page; nothing here runs a simulation but the report's training step, when not given one.
"""

from __future__ import annotations

from collsim.viz.figures import (
    BREAKDOWN_CATEGORIES,
    TAG_CATEGORIES,
    bottleneck_figure,
    breakdown_category,
    breakdown_figure,
    group_breakdown,
    link_utilisation_figure,
    path_matrix_figure,
    sweep_figure,
    timeline_figure,
    topology_figure,
)
from collsim.viz.report import Report, build_report, coarse_sizes
from collsim.viz.step import step_sweep_figure, step_timeline_figure

__all__ = [
    "BREAKDOWN_CATEGORIES",
    "TAG_CATEGORIES",
    "Report",
    "bottleneck_figure",
    "breakdown_category",
    "breakdown_figure",
    "build_report",
    "coarse_sizes",
    "group_breakdown",
    "link_utilisation_figure",
    "path_matrix_figure",
    "step_sweep_figure",
    "step_timeline_figure",
    "sweep_figure",
    "timeline_figure",
    "topology_figure",
]
