"""Plotly figures from results, flow records and topologies, and the HTML report.

Figures are pure functions (see :mod:`collsim.viz.figures`); :func:`build_report` draws a
:class:`collsim.api.ReportData` (simulated by ``Simulator.report_data``) as one self-contained page; nothing here
runs a simulation.
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
    "sweep_figure",
    "timeline_figure",
    "topology_figure",
]
