"""The report in a real browser: Debian's headless Chromium renders hgx-h100's report.html offline, with no
JavaScript error and every figure drawn.

Chromium is installed by ``.ci/run``; where it is missing the browser tests skip, unless ``COLLSIM_REQUIRE_BROWSER=1``
(set by CI), which makes them fail instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

from collsim.api import Simulator
from collsim.viz import Report, build_report, coarse_sizes
from collsim.viz.report import ERROR_HOOK_JS

MiB = 2**20
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _browser() -> str:
    path = CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")
    if not path:
        if os.environ.get("COLLSIM_REQUIRE_BROWSER") == "1":
            pytest.fail(f"COLLSIM_REQUIRE_BROWSER=1 but {CHROMIUM} is missing (apt-get install chromium)")
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium; .ci/run does)")
    return path


def _render(page: Path, tmp: Path) -> str:
    """The DOM after the page's scripts ran (virtual time lets Plotly finish), via ``--dump-dom``."""
    browser = _browser()
    cmd = [
        browser,
        *FLAGS,
        f"--user-data-dir={tmp / 'chromium-profile'}",
        "--virtual-time-budget=20000",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "<html" in proc.stdout, proc.stderr[-2000:]
    return proc.stdout


@dataclass
class Dom:
    """What the checks read from a dumped DOM."""

    figures: dict[str, int]  # figure div id -> elements of class "main-svg" inside it
    errors: str  # text of #collsim-js-errors
    body: dict[str, str]  # attributes of <body>


class _Scan(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, int] = {}
        self.errors = ""
        self.body: dict[str, str] = {}
        self._stack: list[tuple[str, str | None]] = []  # (tag, figure id when the element is a figure div)
        self._in_errors = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = a.get("class", "").split()
        fig = a.get("id") if tag == "div" and "plotly-graph-div" in classes else None
        if fig:
            self.figures[fig] = 0
        if "main-svg" in classes:
            for _tag, owner in reversed(self._stack):
                if owner:
                    self.figures[owner] += 1
                    break
        if tag == "body":
            self.body = a
        if a.get("id") == "collsim-js-errors":
            self._in_errors += 1
        if tag not in ("br", "img", "input", "meta", "link", "hr", "path", "rect", "line", "stop") or fig:
            self._stack.append((tag, fig))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                del self._stack[i:]
                break
        if tag == "pre" and self._in_errors:
            self._in_errors -= 1

    def handle_data(self, data: str) -> None:
        if self._in_errors:
            self.errors += data


def _scan(dom: str) -> Dom:
    s = _Scan()
    s.feed(dom)
    return Dom(s.figures, s.errors.strip(), s.body)


@pytest.fixture(scope="module")
def hgx_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Report, Path, float]:
    """``collsim report hgx-h100`` with its defaults (the whole sweep in x4 steps, a 64 MiB timeline)."""
    t0 = time.perf_counter()
    sim = Simulator.from_source("hgx-h100")
    rep = build_report(sim.report_data(coarse_sizes(sim.scenario.sizes())))
    seconds = time.perf_counter() - t0
    path = tmp_path_factory.mktemp("report") / "report.html"
    rep.write(path)
    return rep, path, seconds


def test_hgx_report_is_fast(hgx_report: tuple[Report, Path, float]) -> None:
    rep, _, seconds = hgx_report
    assert rep.timeline_size == 64 * MiB and rep.sizes[0] == 8 and rep.sizes[-1] == 8 * 1024**3
    assert seconds < 15, seconds  # about 3.5 s on a 2-core machine


def test_report_renders_in_chromium(hgx_report: tuple[Report, Path, float], tmp_path: Path) -> None:
    rep, path, _ = hgx_report
    dom = _scan(_render(path, tmp_path))
    assert dom.errors == "", dom.errors
    expected = {f"fig-{name}" for name in rep.figures}
    assert set(dom.figures) == expected
    undrawn = {k: v for k, v in dom.figures.items() if v < 1}
    assert not undrawn, f"figures without an SVG: {undrawn}"
    assert dom.body.get("data-figures") == str(len(expected))
    assert dom.body.get("data-figures-drawn") == str(len(expected))


def test_error_hook_reports_errors(tmp_path: Path) -> None:
    """The check can fail: a page with the report's error hook and a broken script shows the error in the DOM."""
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<script>{ERROR_HOOK_JS}</script><script>notDefinedAnywhere();</script></head>"
        "<body><pre id='collsim-js-errors'></pre><div class='plotly-graph-div' id='fig-x'></div>"
        "<script>console.error('boom'); document.getElementById('collsim-js-errors').textContent = "
        "window.collsimErrors.join('\\n');</script></body></html>",
        encoding="utf-8",
    )
    dom = _scan(_render(page, tmp_path))
    assert "notDefinedAnywhere" in dom.errors and "console.error: boom" in dom.errors
    assert dom.figures == {"fig-x": 0}
