"""``collsim report``: one self-contained HTML page with the topology, NCCL against Gloo, where the time goes and a
timeline of one collective; with a ``training:`` section, one DDP or FSDP iteration per backend too.

The page draws what :meth:`collsim.api.Simulator.report_data` simulated (a :class:`~collsim.api.ReportData`). The
one simulation here is the training step, when the caller does not pass it (:func:`build_report`'s ``steps``):
:class:`~collsim.api.ReportData` does not carry it.

The page embeds plotly.js once (inline, no network access needed) and every figure as a div with its data; it opens
offline in any browser. A small script installed before plotly.js records JavaScript errors into the element
``#collsim-js-errors`` (shown in red when not empty), so a headless browser can check the page.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from collsim.files import write_atomic
from collsim.results import Record
from collsim.results.step import StepRow
from collsim.units import format_size
from collsim.viz.figures import (
    bottleneck_figure,
    breakdown_figure,
    link_utilisation_figure,
    path_matrix_figure,
    sweep_figure,
    timeline_figure,
    topology_figure,
)
from collsim.viz.step import step_timeline_figure

if TYPE_CHECKING:
    from collsim.api import ReportData
    from collsim.backends import Outcome
    from collsim.training import StepResult

__all__ = ["ERROR_HOOK_JS", "Report", "build_report", "coarse_sizes"]

_PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}

#: JavaScript run before plotly.js: records errors, unhandled rejections and console.error calls into
#: ``window.collsimErrors`` and the text of the element ``#collsim-js-errors``.
ERROR_HOOK_JS = """
window.collsimErrors = [];
window.collsimRecordError = function (text) {
  window.collsimErrors.push(String(text));
  var el = document.getElementById("collsim-js-errors");
  if (el) { el.textContent = window.collsimErrors.join("\\n"); el.style.display = "block"; }
};
window.onerror = function (msg, src, line, col) {
  window.collsimRecordError("error: " + msg + " at " + src + ":" + line + ":" + col);
};
window.addEventListener("unhandledrejection", function (ev) {
  window.collsimRecordError("unhandled rejection: " + (ev.reason && ev.reason.message ? ev.reason.message : ev.reason));
});
(function () {
  var orig = console.error;
  console.error = function () {
    window.collsimRecordError("console.error: " + Array.prototype.join.call(arguments, " "));
    if (orig) { orig.apply(console, arguments); }
  };
})();
"""

_FINISH = """
(function () {
  var divs = document.querySelectorAll("div.plotly-graph-div");
  var drawn = 0;
  divs.forEach(function (d) { if (d.querySelector(".main-svg")) { drawn += 1; } });
  document.body.setAttribute("data-figures", String(divs.length));
  document.body.setAttribute("data-figures-drawn", String(drawn));
  var el = document.getElementById("collsim-js-errors");
  if (el && window.collsimErrors.length) {
    el.textContent = window.collsimErrors.join("\\n");
    el.style.display = "block";
  }
})();
"""

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto; max-width: 1250px;
       color: #222; padding: 0 1em; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
.meta { color: #555; } .note { color: #555; font-size: 0.92em; }
table { border-collapse: collapse; font-size: 0.92em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; } th { background: #f3f3f3; }
td.l, th.l { text-align: left; }
#collsim-js-errors { display: none; color: #b00; white-space: pre-wrap; border: 1px solid #b00; padding: 0.5em; }
"""


def coarse_sizes(sizes: Sequence[int], factor: float = 4.0) -> list[int]:
    """Sizes at least ``factor`` apart (bytes): the first, every next one >= factor x the last kept, and the largest.

    The report's default sweep: the scenario's sizes, coarsened.

    >>> coarse_sizes([8, 16, 32, 64, 128, 256])
    [8, 32, 128, 256]
    """
    out: list[int] = []
    for s in sorted(set(sizes)):
        if not out or s >= out[-1] * factor:
            out.append(s)
    if sizes and max(sizes) not in out:
        out.append(max(sizes))
    return out


@dataclass
class Report:
    """What :func:`build_report` produced: the page, its figures, and the simulated data it shows.

    Attributes
    ----------
    html : str
        The page.
    data : ReportData
        What the page draws (see :class:`collsim.api.ReportData`); :attr:`sizes`, :attr:`timeline_size`,
        :attr:`records`, :attr:`outcomes` and :attr:`notes` are its fields.
    figures : dict of str to plotly Figure
        By name, in page order.
    seconds : float
        Wall time of the simulations and of building the page, seconds.
    steps : list of StepResult
        The training step per backend the page shows (empty without a ``training:`` section, or when it could not
        be simulated: the page says why).
    """

    html: str
    data: ReportData
    figures: dict[str, go.Figure] = field(default_factory=dict)
    seconds: float = 0.0
    steps: list[StepResult] = field(default_factory=list)

    @property
    def sizes(self) -> list[int]:
        """The sweep's sizes, bytes."""
        return self.data.sizes

    @property
    def timeline_size(self) -> int:
        """Bytes of the collective drawn as a timeline."""
        return self.data.timeline_size

    @property
    def records(self) -> list[Record]:
        """The sweep's records, per backend that ran."""
        return self.data.records

    @property
    def outcomes(self) -> list[Outcome]:
        """One recorded collective per backend that ran."""
        return self.data.outcomes

    @property
    def notes(self) -> list[str]:
        """Backends left out, and why."""
        return self.data.notes

    def write(self, path: str | Path) -> None:
        """Write the page to ``path`` (UTF-8), whole or not at all (:func:`collsim.files.write_atomic`)."""
        write_atomic(path, self.html)


def _table(records: Sequence[Record]) -> str:
    """NCCL against Gloo by size, a row block per collective (named in a first column when there are several)."""
    colls = list(dict.fromkeys(r.collective for r in records))
    several = len(colls) > 1
    head = (
        ("<tr><th class='l'>collective</th>" if several else "<tr>")
        + "<th>size</th><th>NCCL time (us)</th><th>NCCL busbw (GB/s)</th><th class='l'>NCCL algorithm</th>"
        "<th>Gloo time (us)</th><th>Gloo busbw (GB/s)</th><th>speedup (Gloo / NCCL)</th></tr>"
    )
    rows = []
    for coll in colls:
        nccl = {r.size_bytes: r for r in records if r.backend == "nccl" and r.collective == coll}
        gloo = {r.size_bytes: r for r in records if r.backend == "gloo" and r.collective == coll}
        for s in sorted(set(nccl) | set(gloo)):
            n, g = nccl.get(s), gloo.get(s)
            cells = [f"<td class='l'>{html.escape(coll)}</td>"] if several else []
            cells.append(f"<td>{format_size(s)}</td>")
            if n:
                cells.append(
                    f"<td>{n.time_us:.2f}</td><td>{n.busbw_gbps:.2f}</td>"
                    f"<td class='l'>{html.escape(n.algorithm)}/{html.escape(n.protocol)}</td>"
                )
            else:
                cells.append("<td>-</td><td>-</td><td class='l'>-</td>")
            cells.append(f"<td>{g.time_us:.2f}</td><td>{g.busbw_gbps:.2f}</td>" if g else "<td>-</td><td>-</td>")
            cells.append(f"<td>{g.time_us / n.time_us:.1f}x</td>" if (n and g and n.time_us > 0) else "<td>-</td>")
            rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table id='comparison-table'>{head}{''.join(rows)}</table>"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("collsim")
    except Exception:  # the package may run from a checkout without metadata
        return "unknown"


def build_report(data: ReportData, *, max_bars: int = 3000, steps: Sequence[StepResult] | None = None) -> Report:
    """Assemble the page from what :meth:`collsim.api.Simulator.report_data` simulated.

    Parameters
    ----------
    data : ReportData
        The sweep's records, one recorded outcome per backend, the scenario and its topology.
    max_bars : int
        Cap on each timeline's bars (see :func:`collsim.viz.timeline_figure`).
    steps : sequence of StepResult, optional
        One DDP iteration per backend (:meth:`collsim.api.Simulator.step`) for the "Training step" section. Default:
        simulated here when the scenario has a ``training:`` section (a scenario error becomes a note on the
        page); an empty sequence leaves the section out.

    Returns
    -------
    Report
        The HTML and what it shows; a backend left out of ``data`` is named in a note on the page.

    Examples
    --------
    What ``collsim report pcie-2gpu-nop2p`` does::

        sim = Simulator.from_source("pcie-2gpu-nop2p")
        build_report(sim.report_data(coarse_sizes(sim.scenario.sizes()))).write("report.html")
    """
    t0 = time.perf_counter()
    step_notes: list[str] = []
    if steps is None:
        steps, step_notes = _training_steps(data)
    topo = data.topology
    figs: dict[str, go.Figure] = {
        "topology": topology_figure(topo),
        "path-matrix": path_matrix_figure(topo),
        "comparison": sweep_figure(data.records, title="NCCL against Gloo: busbw and time against size"),
    }
    colls: list[str | None] = list(dict.fromkeys(r.collective for r in data.records if r.breakdown))
    for coll in colls or [None]:  # one figure a collective (it drew the first one's alone)
        figs["breakdown" if len(colls) <= 1 else f"breakdown-{coll}"] = breakdown_figure(data.records, collective=coll)
    for out in data.outcomes:
        figs[f"timeline-{out.backend}"] = timeline_figure(out, topo, max_bars=max_bars)
        figs[f"bottlenecks-{out.backend}"] = bottleneck_figure(
            out.records, topo, total_s=out.time_s, title=f"{out.backend.upper()}: top bottleneck links"
        )
        figs[f"links-{out.backend}"] = link_utilisation_figure(
            out.records, topo, total_s=out.time_s, title=f"{out.backend.upper()}: link utilisation over time"
        )
    if steps:
        style = "FSDP" if data.scenario.training is not None and data.scenario.training.style == "fsdp" else "DDP"
        figs["step-timeline"] = step_timeline_figure(
            steps, title=f"One {style} iteration per backend: {data.scenario.name}"
        )
    page = _page(data, figs, steps, step_notes)
    return Report(page, data, figs, data.seconds + time.perf_counter() - t0, list(steps))


def _training_steps(data: ReportData) -> tuple[list[StepResult], list[str]]:
    """The scenario's training step per enabled backend, and a note when it could not be simulated; nothing
    without a ``training:`` section."""
    if data.scenario.training is None:
        return [], []
    from collsim.api import Simulator  # here: collsim.api is the layer above this one
    from collsim.backends import BackendError
    from collsim.scenario import ScenarioError

    try:
        return Simulator(data.scenario).step(), []
    except (ScenarioError, BackendError) as exc:
        return [], [f"training step: not simulated: {exc}"]


def _step_table(steps: Sequence[StepResult]) -> str:
    """Per backend: ranks, iteration, computation alone, allreduce, exposed (ms), overlap, scaling, buckets."""
    head = (
        "<tr><th class='l'>backend</th><th>ranks</th><th>iteration (ms)</th><th>compute (ms)</th>"
        "<th>allreduce (ms)</th><th>exposed (ms)</th><th>overlap</th><th>scaling</th><th>buckets</th></tr>"
    )
    rows = []
    for r in steps:
        f = StepRow("", r).flat()
        rows.append(
            f"<tr><td class='l'>{html.escape(r.backend)}</td><td>{f['world']}</td>"
            f"<td>{f['iteration_s'] * 1e3:.3f}</td><td>{f['compute_s'] * 1e3:.3f}</td>"  # seconds to milliseconds
            f"<td>{f['comm_s'] * 1e3:.3f}</td><td>{f['exposed_s'] * 1e3:.3f}</td>"
            f"<td>{f['overlap']:.1%}</td><td>{f['scaling_efficiency']:.1%}</td><td>{f['buckets']}</td></tr>"
        )
    return f"<table id='step-table'>{head}{''.join(rows)}</table>"


def _fig_html(fig: go.Figure, div_id: str) -> str:
    body: str = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_PLOTLY_CONFIG)
    return f"<div class='collsim-figure' data-figure='{div_id}'>{body}</div>"


def _perturbation_section(data: ReportData) -> list[str]:
    """A perturbed scenario's warning and table: each backend's time per size on the healthy cluster and on this
    one, and the slowdown (nothing for a healthy cluster)."""
    if not data.perturbations:
        return []
    esc = html.escape
    base = {(r.backend, r.collective, r.size_bytes): r for r in data.healthy}
    rows = []
    for r in data.records:
        h = base.get((r.backend, r.collective, r.size_bytes))
        if h is None:
            continue
        slow = f"{r.time_us / h.time_us:.3f}x" if h.time_us > 0 else "-"
        rows.append(f"<tr><td>{esc(r.backend)}</td><td>{esc(r.collective)}</td><td>{esc(format_size(r.size_bytes))}"
                    f"</td><td>{h.time_us:.2f}</td><td>{r.time_us:.2f}</td><td>{slow}</td></tr>")  # fmt: skip
    return [
        "<h2 id='perturbed'>A perturbed cluster</h2>",
        "<p class='note'>Every figure below is this perturbed cluster's; the table sets it beside the same sweep on "
        "the healthy cluster (the scenario without <code>perturb</code>).</p>",
        "<ul>" + "".join(f"<li>{esc(w)}</li>" for w in data.perturbations) + "</ul>",
        "<table><tr><th>backend</th><th>collective</th><th>size</th><th>healthy us</th><th>perturbed us</th>"
        "<th>slowdown</th></tr>" + "".join(rows) + "</table>",
    ]


def _page(
    data: ReportData, figs: dict[str, go.Figure], steps: Sequence[StepResult] = (), step_notes: Sequence[str] = ()
) -> str:
    sc, topo, sweep, rep_size = data.scenario, data.topology, data.sizes, data.timeline_size
    esc = html.escape
    nranks = len(topo.rank_devices())
    parts: list[str] = [
        "<!DOCTYPE html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        f"<title>collsim report: {esc(sc.name)}</title>",
        f"<style>{_STYLE}</style>",
        f"<script>{ERROR_HOOK_JS}</script>",
        f"<script type='text/javascript'>{get_plotlyjs()}</script>",
        "</head><body>",
        "<pre id='collsim-js-errors'></pre>",
        f"<h1>collsim report: {esc(sc.name)}</h1>",
        f"<p class='meta'>{esc(sc.description or '')}</p>",
        f"<p class='meta'>{nranks} ranks on {topo.nodes} node(s) of {esc(topo.name)}; workload "
        f"{esc(', '.join(sc.collectives()))} {esc(sc.workload.dtype)}; collsim {esc(_version())}. "
        "Times in us, bandwidths in GB/s (1e9 bytes/s), as nccl-tests prints them.</p>",
    ]
    for note in data.notes:
        parts.append(f"<p class='note'>{esc(note)}</p>")
    parts += _perturbation_section(data)
    parts += [
        "<h2>Topology</h2>",
        "<p class='note'>Devices by kind; links coloured by kind, wider for more bandwidth per direction; hover for "
        "specs. The matrix is <code>collsim topo</code>'s (<code>nvidia-smi topo -m</code>'s) view of node 0.</p>",
        _fig_html(figs["topology"], "fig-topology"),
        _fig_html(figs["path-matrix"], "fig-path-matrix"),
        "<h2>NCCL against Gloo</h2>",
        f"<p class='note'>Sizes {esc(', '.join(format_size(s) for s in sweep))}. NCCL runs the (algorithm, "
        "protocol) its cost model picks (hover a point to see it); Gloo runs PyTorch's host-staged path as "
        "configured.</p>",
        _fig_html(figs["comparison"], "fig-comparison"),
        _table(data.records),
        "<h2>Where the time goes</h2>",
        "<p class='note'>Each collective's time split among activities of a representative rank (the parts add up "
        "to 100%). Categories: latency and overheads (launch, per-step and per-message latency, work enqueue), "
        "transfer by link kind, host copies (D2H/H2D), CPU reduction, and waiting for peers or contended "
        "resources.</p>",
        *(_fig_html(fig, f"fig-{key}") for key, fig in figs.items() if key.startswith("breakdown")),
        f"<h2>One collective at {esc(format_size(rep_size))}</h2>",
        f"<p class='note'>Timeline size: <b id='timeline-size'>{esc(format_size(rep_size))}</b> "
        f"({rep_size} bytes), {esc(sc.collectives()[0])}, simulated with <code>engine.symmetry=false</code> so "
        "that every rank appears. Rows are ranks and channels, bars the chunks each sends, receives, reduces or "
        "copies; drag to zoom, double-click to reset. Link utilisation is what the simulation charged each link "
        "(protocol overheads included) over its capacity, at each flow's rate from each change to the next.</p>",
    ]
    for out in data.outcomes:
        b = out.backend
        parts += [
            f"<h3>{esc(b.upper())}: {esc(out.algorithm)}/{esc(out.protocol)}, {out.time_s * 1e6:.1f} us</h3>",
            _fig_html(figs[f"timeline-{b}"], f"fig-timeline-{b}"),
            _fig_html(figs[f"bottlenecks-{b}"], f"fig-bottlenecks-{b}"),
            _fig_html(figs[f"links-{b}"], f"fig-links-{b}"),
        ]
    parts += _step_section(data, figs, steps, step_notes)
    parts += [f"<script>{_FINISH}</script>", "</body></html>"]
    return "\n".join(parts)


def _step_section(
    data: ReportData, figs: dict[str, go.Figure], steps: Sequence[StepResult], notes: Sequence[str]
) -> list[str]:
    """The "Training step" section: the timeline and the summary table (nothing without steps or notes)."""
    if not steps and not notes:
        return []
    esc = html.escape
    tr = data.scenario.training
    what = (
        f"model {esc(str(tr.model))}, batch {tr.batch_size} per GPU, {esc(tr.compute_dtype)}" if tr is not None else ""
    )
    if tr is not None and tr.style == "fsdp":
        intro = (
            f"<p class='note'>One iteration of PyTorch's FullyShardedDataParallel per backend ({what}), as "
            "<code>collsim step</code> simulates it. <i>compute</i> is the iteration on one GPU without FSDP; "
            "<i>exposed</i> = iteration - compute; <i>overlap</i> = the share of the collectives' time hidden behind "
            "computation; <i>scaling</i> = compute / iteration. Rows of the timeline: the compute stream (light red: "
            "waiting), then the all-gathers and the reduce-scatters (NCCL: two streams; Gloo: each call blocks the "
            "thread issuing it) with FSDP's gradient divisions and copies. Hover a collective for its unit's bytes "
            "and times.</p>"
        )
    else:
        intro = (
            f"<p class='note'>One iteration of PyTorch's DistributedDataParallel per backend ({what}), as "
            "<code>collsim step</code> simulates it. <i>compute</i> is the iteration on one GPU without DDP; "
            "<i>exposed</i> = iteration - compute; <i>overlap</i> = the share of the buckets' allreduce time hidden "
            "behind computation; <i>scaling</i> = compute / iteration. Rows of the timeline: the compute stream "
            "(light red: waiting for allreduces), the Reducer's copies on it, then NCCL's stream or Gloo's worker "
            "threads (each bar: D2H copy, CPU ring, H2D copy of one bucket). Hover a bucket for its bytes and "
            "times.</p>"
        )
    parts = ["<h2 id='training-step'>Training step</h2>", intro]
    parts += [f"<p class='note'>{esc(n)}</p>" for n in notes]
    if steps:
        parts += [_fig_html(figs["step-timeline"], "fig-step-timeline"), _step_table(steps)]
        for r in steps:
            parts += [f"<p class='note'>{esc(r.backend)}: {esc(n)}</p>" for n in r.notes]
    return parts
