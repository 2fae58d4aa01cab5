"""Tests of collsim.viz.step (the DDP training step's timeline and sweep figures) and the report's training section:
tiny models with measured layer times and made-up allreduce times, so every bar's time is known."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import plotly.graph_objects as go
import pytest

from collsim.api import Simulator
from collsim.cli import main
from collsim.results.step import StepRow
from collsim.training import DdpConfig, GlooTimes, GpuCompute, Layer, ModelSpec, Param, StepConstants, StepResult
from collsim.training import simulate_ddp_step as simulate
from collsim.viz import Report, build_report, step_sweep_figure, step_timeline_figure
from collsim.viz.step import COMPUTE_ROW, COPIES_ROW, exposed_intervals

MiB = 2**20
MB4 = 1 << 20  # float32 elements of a 4 MiB parameter
MLP = Path(__file__).resolve().parents[1] / "training" / "data" / "mlp-measured.yaml"
#: copy-in and copy-out 2 bytes of HBM per byte, SGD 3 x 4 bytes per element (at the test GPU's 1e12 B/s)
CONSTS = StepConstants(2.0, 2.0, {"none": (0.0, 0.0), "sgd": (3.0, 0.0)}, 0.0)
#: nothing but the layers and the allreduces takes time
BARE = StepConstants(0.0, 0.0, {"none": (0.0, 0.0)}, 0.0)
NCCL_ALLREDUCE = "NCCL allreduce"
GLOO_ALLREDUCE = "Gloo allreduce (D2H, CPU ring, H2D)"
WAITING = "waiting for allreduce (exposed)"


def _model(n_layers: int, fwd: float = 1e-3, bwd: float = 2e-3) -> ModelSpec:
    """``n_layers`` layers of one 4 MiB float32 parameter each, with measured forward and backward seconds."""
    params = tuple(Param(f"l{i}.weight", MB4) for i in range(n_layers))
    layers = tuple(Layer(f"l{i}", (i,), 0.0, 0.0, 0.0, fwd_time_s=fwd, bwd_time_s=bwd) for i in range(n_layers))
    return ModelSpec("tiny", params, layers, "test")


def _gpu() -> GpuCompute:
    """1e12 B/s of HBM; so many SMs that NCCL's 8 CTAs take nothing from the layers."""
    return GpuCompute("test", 1e14, 1e12, 10**9, 1.0, 1.0)


def _nccl(seconds: float) -> Callable[[int], tuple[float, int]]:
    return lambda nbytes: (seconds, 8)


def _gloo(seconds: float, threads: int = 2) -> Callable[[Sequence[int], Sequence[float]], list[GlooTimes]]:
    """Each allreduce takes ``seconds`` on the first free of ``threads`` worker threads, in issue order."""

    def run(sizes: Sequence[int], issue_at: Sequence[float]) -> list[GlooTimes]:
        free, out = [0.0] * threads, []
        for t in issue_at:
            k = min(range(threads), key=lambda j: (free[j], j))
            start = max(t, free[k])
            free[k] = start + seconds
            out.append(GlooTimes(start, free[k], free[k]))
        return out

    return run


def _steps(cap: float = 1, n_layers: int = 4, consts: StepConstants = CONSTS) -> list[StepResult]:
    """NCCL (0.5 ms per bucket) and Gloo (5 ms per bucket, two threads: the third bucket waits for a thread)."""
    cfg = DdpConfig(batch_size=1, bucket_cap_mb=cap, optimizer="sgd" if consts is CONSTS else "none")
    model = _model(n_layers)
    return [
        simulate(model, cfg, _gpu(), consts, 8, nccl=_nccl(0.5e-3)),
        simulate(model, cfg, _gpu(), consts, 8, gloo=_gloo(5e-3), gloo_threads=2),
    ]


def _panel(fig: go.Figure, backend: str) -> list[go.Bar]:
    return [t for t in fig.data if isinstance(t, go.Bar) and t.meta == backend]


def _bars(traces: Sequence[go.Bar]) -> list[tuple[str, str, float, float]]:
    """(trace name, row, start ms, end ms) of every bar."""
    return [(t.name, y, b, b + x) for t in traces for y, b, x in zip(t.y, t.base, t.x, strict=True)]


# ------------------------------------------------------------------------------------------------ timeline


def test_timeline_has_a_panel_per_backend_with_its_streams_as_rows() -> None:
    nccl, gloo = _steps()
    assert len(gloo.buckets) == 4 and gloo.buckets[2].start_s > gloo.buckets[2].ready_s  # a bucket queued
    fig = step_timeline_figure([nccl, gloo])
    n, g = _panel(fig, "nccl"), _panel(fig, "gloo")
    assert len(n) + len(g) == len(fig.data)
    assert {t.yaxis for t in n} == {"y"} and {t.yaxis for t in g} == {"y2"}
    assert [t.name for t in n] == ["forward", "backward", "DDP copy", "optimizer", NCCL_ALLREDUCE, WAITING]
    assert [t.name for t in g] == ["forward", "backward", "DDP copy", "optimizer", GLOO_ALLREDUCE, WAITING]
    assert list(fig.layout.yaxis.categoryarray) == [COMPUTE_ROW, COPIES_ROW, "NCCL stream"]
    assert list(fig.layout.yaxis2.categoryarray) == [COMPUTE_ROW, COPIES_ROW, "Gloo thread 0", "Gloo thread 1"]
    # every row has bars; each category once in the legend
    for traces, axis in ((n, fig.layout.yaxis), (g, fig.layout.yaxis2)):
        assert {row for _, row, _, _ in _bars(traces)} == set(axis.categoryarray)
    legend = [t.name for t in fig.data if t.showlegend is not False]
    assert sorted(legend) == sorted(set(legend))
    # a bar per layer pass and per bucket; the Reducer's copies on their row
    by_name = {t.name: t for t in n}
    assert len(by_name["forward"].x) == len(by_name["backward"].x) == 4
    assert len(by_name[NCCL_ALLREDUCE].x) == len(nccl.buckets) == 4
    assert set(by_name["DDP copy"].y) == {COPIES_ROW} and len(by_name["DDP copy"].x) == 4 + 1  # copy-in, copy-out
    assert "NCCL, 8 ranks" in fig.layout.annotations[0].text


def test_fsdp_timeline_draws_each_backends_collectives_and_copies() -> None:
    from collsim.training.fsdp import FsdpConfig, simulate_fsdp_step

    model, cfg = _model(3), FsdpConfig(batch_size=1, optimizer="none", wrap="l*")
    nccl = simulate_fsdp_step(model, cfg, _gpu(), BARE, 4, lambda kind, n: (1e-3, 1))
    gloo = simulate_fsdp_step(model, cfg, _gpu(), BARE, 4, gloo=lambda kind, n: (2e-3, 0.0))
    fig = step_timeline_figure([nccl, gloo])
    names = {b: {t.name for t in _panel(fig, b)} for b in ("nccl", "gloo")}
    assert {"NCCL all-gather", "NCCL reduce-scatter", "FSDP copy"} <= names["nccl"]
    assert {"Gloo all-gather (blocking)", "Gloo reduce-scatter (blocking)", "FSDP copy"} <= names["gloo"]
    assert "other" not in names["nccl"] | names["gloo"]


def test_bars_do_not_overlap_within_a_stream() -> None:
    fig = step_timeline_figure(_steps())
    for backend in ("nccl", "gloo"):
        streams: dict[str, list[tuple[float, float]]] = {}
        for _, row, a, b in _bars(_panel(fig, backend)):
            assert b >= a
            streams.setdefault("compute" if row in (COMPUTE_ROW, COPIES_ROW) else row, []).append((a, b))
        assert len(streams) == (2 if backend == "nccl" else 3)
        for bars in streams.values():
            bars.sort()
            for (_, end), (start, _) in itertools.pairwise(bars):
                assert end <= start + 1e-9


def test_bar_ends_are_the_step_results_times() -> None:
    results = _steps()
    fig = step_timeline_figure(results)
    for r in results:
        bars = _bars(_panel(fig, r.backend))
        comm = sorted(t for name, _, a, b in bars if "allreduce" in name and name != WAITING for t in (a, b))
        assert comm == pytest.approx(sorted(t * 1e3 for b in r.buckets for t in (b.start_s, b.end_s)), abs=1e-9)
        assert max(b for *_, b in bars) == pytest.approx(r.iteration_s * 1e3, abs=1e-9)
        # the compute stream is always busy or waiting: its bars add up to the iteration
        compute = [b - a for _, row, a, b in bars if row in (COMPUTE_ROW, COPIES_ROW)]
        assert sum(compute) == pytest.approx(r.iteration_s * 1e3, rel=1e-9)
        # it waits from the end of backward (and the last copy-in) until the last allreduce is done
        (wait,) = [(a, b) for name, _, a, b in bars if name == WAITING]
        assert wait[1] == pytest.approx(max(b.end_s for b in r.buckets) * 1e3, abs=1e-9)
        ((a, b),) = exposed_intervals(r)
        assert wait == pytest.approx((a * 1e3, b * 1e3), abs=1e-9)
    # the computation alone: a dotted line per panel
    assert [s.x0 for s in fig.layout.shapes] == pytest.approx([r.compute_s * 1e3 for r in results])


def test_hover_gives_bucket_bytes_times_and_the_exposed_part() -> None:
    # the closed form of tests/training: two buckets, the first hidden behind the last layer's backward, the last
    # exposed whole (0.5 ms)
    nccl, _ = _steps(n_layers=2, consts=BARE)
    ((a, b),) = exposed_intervals(nccl)
    assert (a, b) == pytest.approx((6e-3, 6.5e-3), rel=1e-8)
    fig = step_timeline_figure([nccl])
    (comm,) = [t for t in fig.data if t.name == NCCL_ALLREDUCE]
    first, last = comm.hovertext
    assert "bucket 0: 1 parameter(s), 4MiB (4194304 bytes)" in first and "exposed 0.000 ms" in first
    assert "gradients ready 4.000 ms, allreduce 4.000 ms to 4.500 ms" in first
    assert "bucket 1:" in last and "allreduce 0.500 ms, exposed 0.500 ms" in last
    _, gloo = _steps()
    (g,) = [t for t in step_timeline_figure([gloo]).data if t.name == GLOO_ALLREDUCE]
    assert all("D2H copy, CPU ring over TCP, H2D copy" in h for h in g.hovertext)


# ------------------------------------------------------------------------------------------------ sweep


def _sweep_rows(caps: Sequence[int]) -> list[StepRow]:
    return [StepRow(f"bucket_cap_mb={c}", r) for c in caps for r in _steps(cap=c)]


def test_sweep_figure_has_a_line_per_backend_against_the_swept_value() -> None:
    rows = _sweep_rows([16, 1, 4])  # out of order: the lines are sorted by value
    fig = step_sweep_figure(rows)
    assert [(t.name, t.xaxis) for t in fig.data] == [
        ("NCCL", "x"),
        ("NCCL", "x2"),
        ("Gloo", "x"),
        ("Gloo", "x2"),
        ("computation alone", "x"),
    ]
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.title.text == "bucket_cap_mb"
    for trace, backend, field in [
        (fig.data[0], "nccl", "iteration_s"),
        (fig.data[1], "nccl", "exposed_s"),
        (fig.data[2], "gloo", "iteration_s"),
        (fig.data[3], "gloo", "exposed_s"),
    ]:
        want = {float(row.label.split("=")[1]): getattr(row.result, field) * 1e3 for row in rows
                if row.result.backend == backend}  # fmt: skip
        assert list(trace.x) == [1.0, 4.0, 16.0]
        assert list(trace.y) == pytest.approx([want[x] for x in trace.x], rel=1e-12)
    assert list(fig.data[4].y) == pytest.approx([rows[0].result.compute_s * 1e3] * 3)
    # a bigger cap: fewer buckets, less overlap; here the 16 MiB bucket holds every gradient: nothing hides
    gloo16 = next(r.result for r in rows if r.label.endswith("=16") and r.result.backend == "gloo")
    assert len(gloo16.buckets) == 1 and fig.data[2].y[-1] == pytest.approx(gloo16.iteration_s * 1e3)


def test_sweep_figure_against_ranks_or_categories() -> None:
    rows = _sweep_rows([1])
    fig = step_sweep_figure(rows, x="world")
    assert list(fig.data[0].x) == [8.0] and fig.layout.xaxis.title.text == "GPUs (ranks)"
    labels = ("fast", "fast", "slow", "slow")
    named = [StepRow(label, r.result) for label, r in zip(labels, _sweep_rows([1, 4]), strict=True)]
    fig = step_sweep_figure(named)
    assert fig.layout.xaxis.type == "category" and list(fig.data[0].x) == ["fast", "slow"]


# ------------------------------------------------------------------------------------------------ report


@pytest.fixture(scope="module")
def training_sim() -> Simulator:
    """Two RTX 2080 Ti without P2P training the three-layer MLP of tests/training (measured layer times)."""
    return Simulator.from_source("pcie-2gpu-nop2p", [f"training={{model: {MLP}, batch_size: 8}}"])


@pytest.fixture(scope="module")
def training_report(training_sim: Simulator) -> Report:
    return build_report(training_sim.report_data([4096, MiB]))


def test_report_has_a_training_step_section(training_sim: Simulator, training_report: Report) -> None:
    rep, page = training_report, training_report.html
    assert list(rep.figures)[-1] == "step-timeline"
    assert page.count('class="plotly-graph-div"') == len(rep.figures) == 11
    assert "<h2 id='training-step'>Training step</h2>" in page
    assert page.index("id='training-step'") > page.index("fig-links-gloo")  # after the collective's section
    assert [r.backend for r in rep.steps] == ["nccl", "gloo"]
    assert [r.iteration_s for r in rep.steps] == [r.iteration_s for r in training_sim.step()]
    table = page[page.index("<table id='step-table'>") :]
    table = table[: table.index("</table>")]
    assert table.count("<tr>") == 3
    for r in rep.steps:
        row = f"<td class='l'>{r.backend}</td><td>2</td><td>{r.iteration_s * 1e3:.3f}</td>"
        assert row + f"<td>{r.compute_s * 1e3:.3f}</td>" in table
        assert f"<td>{r.exposed_s * 1e3:.3f}</td><td>{r.overlap:.1%}</td>" in table


def test_report_without_training_section_or_steps_has_no_section(training_report: Report) -> None:
    rep = build_report(training_report.data, steps=[])
    assert "step-timeline" not in rep.figures and "training-step" not in rep.html and rep.steps == []
    plain = build_report(Simulator.from_source("pcie-2gpu-nop2p").report_data([4096]))
    assert "training-step" not in plain.html and len(plain.figures) == 10


def test_report_notes_a_training_step_it_cannot_simulate() -> None:
    sim = Simulator.from_source("pcie-2gpu-nop2p", ["training={model: no-such-model}"])
    rep = build_report(sim.report_data([4096]))
    assert rep.steps == [] and "step-timeline" not in rep.figures
    assert re.search(r"<p class='note'>training step: not simulated: [^<]*no-such-model", rep.html)


def test_cli_report_draws_the_training_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    rc = main(["report", "pcie-2gpu-nop2p", "--set", f"training={{model: {MLP}, batch_size: 8}}", "--sizes", "1KiB",
               "--size", "1KiB", "-o", str(out)])  # fmt: skip
    stdout, err = capsys.readouterr()
    assert rc == 0, err
    assert "11 figures" in stdout
    assert "fig-step-timeline" in out.read_text(encoding="utf-8")


def test_cli_report_of_an_fsdp_step_says_fsdp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "f.html"
    rc = main(["report", "fsdp-gpt2xl-2node-h100", "--set", "cluster.nodes=1", "--sizes", "1MiB", "--size", "1MiB",
               "-o", str(out)])  # fmt: skip
    _, err = capsys.readouterr()
    assert rc == 0, err
    page = out.read_text(encoding="utf-8")
    assert "One iteration of PyTorch's FullyShardedDataParallel per backend" in page
    assert "One FSDP iteration per backend" in page and "Gloo all-gather (blocking)" in page
    assert "Reducer's copies" not in page
