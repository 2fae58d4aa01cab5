"""Tests of the HTML report (collsim.viz.report) and ``collsim report``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from collsim.api import Simulator
from collsim.cli import main
from collsim.viz import Report, build_report, coarse_sizes

MiB = 2**20


@pytest.fixture(scope="module")
def pcie_report() -> Report:
    sim = Simulator.from_source("pcie-2gpu-nop2p")
    return build_report(sim.report_data([4096, MiB, 4 * MiB]))


def test_coarse_sizes() -> None:
    assert coarse_sizes([8, 16, 32, 64, 128, 256]) == [8, 32, 128, 256]
    assert coarse_sizes([2**k for k in range(3, 34)])[:3] == [8, 32, 128]
    assert coarse_sizes([2**k for k in range(3, 34)])[-1] == 8 * 1024**3
    assert coarse_sizes([]) == []


def test_report_contents(pcie_report: Report) -> None:
    rep = pcie_report
    page = rep.html
    assert rep.sizes == [4096, MiB, 4 * MiB]
    assert rep.timeline_size == 4 * MiB  # the largest size, below 64 MiB
    assert list(rep.figures) == [
        "topology",
        "path-matrix",
        "comparison",
        "breakdown",
        "timeline-nccl",
        "bottlenecks-nccl",
        "links-nccl",
        "timeline-gloo",
        "bottlenecks-gloo",
        "links-gloo",
    ]
    # self-contained: plotly.js inline once, no external scripts or stylesheets
    assert page.count("<script type='text/javascript'>") == 1
    assert len(re.findall(r"plotly\.js v\d", page)) == 1
    assert not re.search(r"<script[^>]+src=", page) and "<link" not in page
    assert page.count('class="plotly-graph-div"') == 10
    assert page.count("Plotly.newPlot(") == 10
    assert "<b id='timeline-size'>4MiB</b>" in page
    assert "collsim-js-errors" in page and "window.onerror" in page
    # the comparison table: one row per size, NCCL's and Gloo's times from the records
    table = page[page.index("<table id='comparison-table'>") : page.index("</table>")]
    assert table.count("<tr>") == 4
    recs = {(r.backend, r.size_bytes): r for r in rep.records}
    row = f"<td>1MiB</td><td>{recs[('nccl', MiB)].time_us:.2f}</td>"
    assert row in table
    speed = recs[("gloo", MiB)].time_us / recs[("nccl", MiB)].time_us
    assert f"<td>{speed:.1f}x</td>" in table


def test_the_table_has_every_collective_of_the_workload() -> None:
    """A workload of several collectives: the table names each and holds all their rows (it showed the first's
    alone, while the page's header listed them all)."""
    sim = Simulator.from_source("pcie-2gpu-nop2p", ["workload.collective=[allgather, broadcast]"])
    html = build_report(sim.report_data([4096, MiB])).html
    table = html[html.index("<table id='comparison-table'>") : html.index("</table>")]
    assert "<th class='l'>collective</th>" in table
    rows = re.findall(r"<tr><td class='l'>(\w+)</td><td>(\w+)</td>", table)
    assert rows == [("allgather", "4KiB"), ("allgather", "1MiB"), ("broadcast", "4KiB"), ("broadcast", "1MiB")]
    # and where the time goes, a figure for each (it drew the first collective's alone)
    rep = build_report(sim.report_data([4096, MiB]))
    assert [f for f in rep.figures if f.startswith("breakdown")] == ["breakdown-allgather", "breakdown-broadcast"]
    assert "(broadcast)" in rep.figures["breakdown-broadcast"].layout.title.text
    assert "id='fig-breakdown-broadcast'" in rep.html or 'id="fig-breakdown-broadcast"' in rep.html


def test_a_perturbed_clusters_report_says_so_beside_the_healthy_times() -> None:
    # the page showed the degraded numbers as the cluster's own, with no word of the slow link or the straggler
    late = ["perturb.ranks=[{rank: 1, launch_delay: 20us}]"]
    rep = build_report(Simulator.from_source("pcie-2gpu-nop2p", late).report_data([8, MiB]))
    section = rep.html[rep.html.index("<h2 id='perturbed'>") : rep.html.index("<h2>Topology</h2>")]
    assert "<li>rank 1 launches 20us late</li>" in section
    rows = re.findall(r"<tr><td>(\w+)</td><td>allreduce</td><td>(\w+)</td><td>([\d.]+)</td><td>([\d.]+)</td>", section)
    assert [(b, size) for b, size, _, _ in rows] == [("nccl", "8B"), ("nccl", "1MiB"), ("gloo", "8B"), ("gloo", "1MiB")]
    healthy, slow = float(rows[0][2]), float(rows[0][3])
    assert slow == pytest.approx(healthy + 20.0, abs=0.011)  # 8 B: every rank waits for the straggler
    assert "id='perturbed'" not in build_report(Simulator.from_source("pcie-2gpu-nop2p").report_data([8])).html


def test_report_stops_on_an_error_as_run_does() -> None:
    # a work limit hit or a variable NCCL refuses left a page with the backend missing, exit 0, nothing on stderr
    from collsim.scenario import ScenarioError

    for bad in ("engine.max_flows=50", "backends.nccl.env.NCCL_ALGO=Tree"):
        sim = Simulator.from_source("hgx-h100", [bad, "workload.collective=allgather"])
        with pytest.raises(ScenarioError):
            sim.report_data([64 * MiB])


def test_report_notes_a_backend_it_cannot_run() -> None:
    sim = Simulator.from_source(
        {"name": "cpu", "cluster": {"node": "cpu-host"}, "backends": {"gloo": {"device": "cpu"}}}
    )
    rep = build_report(sim.report_data([4096, MiB]))
    assert [f for f in rep.figures if f.endswith("-gloo")] == ["timeline-gloo", "bottlenecks-gloo", "links-gloo"]
    assert not any(f.endswith("-nccl") for f in rep.figures)
    assert len(rep.notes) == 1 and rep.notes[0].startswith("nccl: not simulated") and "GPUs" in rep.notes[0]
    assert "nccl: not simulated" in rep.html


def test_report_leaves_out_a_backend_the_scenario_disables() -> None:
    # as run and compare: an imported nccl-tests scenario (gloo disabled) got a Gloo column and timeline
    sim = Simulator.from_source("pcie-2gpu-nop2p", ["backends.gloo.enabled=false"])
    rep = build_report(sim.report_data([4096]))
    assert not any(f.endswith("-gloo") for f in rep.figures) and any(f.endswith("-nccl") for f in rep.figures)
    assert rep.notes == ["gloo: not simulated: the scenario disables it (backends.gloo.enabled)"]
    assert {r.backend for r in sim.report_data([4096]).records} == {"nccl"}


def test_report_with_no_backend_enabled_is_an_error_as_run_gives() -> None:
    # it wrote a page with an empty table and no timeline, and exited 0
    from collsim.scenario import ScenarioError

    sim = Simulator.from_source("pcie-2gpu-nop2p", ["backends.gloo.enabled=false", "backends.nccl.enabled=false"])
    with pytest.raises(ScenarioError, match="no backend enabled") as err:
        sim.report_data([4096])
    assert err.value.field == "backends"


def test_cli_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    rc = main(["report", "pcie-2gpu-nop2p", "--sizes", "1KiB,1MiB", "--size", "64KiB", "-o", str(out)])
    stdout, err = capsys.readouterr()
    assert rc == 0, err
    assert stdout.startswith(f"collsim: wrote {out}: 10 figures, sizes 1KiB-1MiB, timeline at 64KiB")
    page = out.read_text(encoding="utf-8")
    assert "<b id='timeline-size'>64KiB</b>" in page


def test_cli_report_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["report", "pcie-2gpu-nop2p", "--size", "12QB", "-o", str(tmp_path / "r.html")])
    _, err = capsys.readouterr()
    assert rc == 2 and err.startswith("collsim: error: --size: ") and err.count("\n") == 1
    rc = main(["report", "no-such-scenario", "-o", str(tmp_path / "r.html")])
    _, err = capsys.readouterr()
    assert rc == 2 and "no-such-scenario" in err and err.count("\n") == 1
    rc = main(["report", "pcie-2gpu-nop2p", "--set", "cluster.nodes=two", "-o", str(tmp_path / "r.html")])
    _, err = capsys.readouterr()
    assert rc == 2 and "cluster.nodes" in err
    assert not (tmp_path / "r.html").exists()


def test_build_report_draws_what_the_api_simulated(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = Simulator.from_source("pcie-2gpu-nop2p")
    data = sim.report_data([4096, MiB], 64 * 1024)
    assert data.timeline_size == 64 * 1024 and [o.backend for o in data.outcomes] == ["nccl", "gloo"]
    assert all(o.records and o.size_bytes == 64 * 1024 for o in data.outcomes)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the report simulated")

    monkeypatch.setattr(Simulator, "simulate_one", refuse)
    rep = build_report(data)
    assert rep.records == data.records and rep.outcomes == data.outcomes and rep.sizes == [4096, MiB]
    assert "<b id='timeline-size'>64KiB</b>" in rep.html
