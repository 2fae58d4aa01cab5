"""``collsim run --repeat K``: the median and p50/p99/min/max per size over K seeded runs (issue 13, noise)."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import pytest

from collsim.calibration.nccltests import parse_nccl_tests
from collsim.cli import main

NOISE = ["--set", "noise.launch_skew=5us", "--set", "noise.jitter=500ns", "--set", "engine.seed=7"]
SMALL = ["hgx-h100", "--sizes", "8B,64KiB", "--jobs", "1"]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    rc, out, err = _run(capsys, *argv)
    assert rc == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_repeat_1_without_noise_is_the_plain_run(capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    plain = _run(capsys, "run", *SMALL, "--format", fmt)
    once = _run(capsys, "run", *SMALL, "--format", fmt, "--repeat", "1")
    assert plain == once
    assert "p99" not in plain[1] and "runs" not in plain[1]


def test_repeat_without_noise_says_the_runs_are_identical(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "run", *SMALL, "--backend", "nccl", "--format", "json", "--repeat", "4")
    assert rc == 0
    assert "no noise" in err and "identical" in err and "4 runs" in err
    for row in json.loads(out)["results"]:
        assert row["runs"] == 4 and len(row["times_us"]) == 4
        assert row["time_p50_us"] == row["time_p99_us"] == row["time_min_us"] == row["time_max_us"] == row["time_us"]


def test_repeat_with_noise_reports_an_ordered_spread_deterministically(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", *SMALL, *NOISE, "--format", "json", "--repeat", "4"]
    doc = _json(capsys, *argv)
    assert doc == _json(capsys, *argv)  # the same seed, the same draws
    assert doc["scenario"]["noise"] == {"launch_skew": "5us", "jitter": "500ns"}
    assert {(r["backend"], r["size_bytes"]) for r in doc["results"]} == {
        (b, s) for b in ("nccl", "gloo") for s in (8, 65536)
    }
    for row in doc["results"]:
        assert row["runs"] == 4 and len(set(row["times_us"])) == 4
        assert row["time_min_us"] <= row["time_p50_us"] <= row["time_p99_us"] <= row["time_max_us"]
        assert row["time_us"] == row["time_p50_us"]
    other = _json(capsys, *argv, "--set", "engine.seed=8", "--backend", "nccl")
    nccl = [r["times_us"] for r in doc["results"] if r["backend"] == "nccl"]
    assert [r["times_us"] for r in other["results"]] != nccl


def test_repeat_csv_has_the_statistics_columns(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "run", *SMALL, *NOISE, "--format", "csv", "--repeat", "3", "--backend", "nccl")
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 2
    for row in rows:
        assert row["runs"] == "3"
        assert float(row["time_min_us"]) <= float(row["time_p50_us"]) <= float(row["time_p99_us"])
        assert float(row["time_p99_us"]) <= float(row["time_max_us"])


def test_repeat_table_keeps_the_nccl_tests_layout(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "run", *SMALL, *NOISE, "--repeat", "5")
    assert rc == 0, err
    assert out.count("the median of 5 runs per size (noise: launch_skew 5us, jitter 500ns, seed 7)") == 2
    data = [ln.split() for ln in out.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(data) == 4 and all(len(row) == 9 for row in data)  # the spread lines are comments
    spread = [ln.split()[1:] for ln in out.splitlines() if re.match(r"^#\s+\d+\s+[\d.]+\s+[\d.]+", ln)]
    assert len(spread) == 4
    for _size, p50, p99, lo, hi in spread:
        assert float(lo) <= float(p50) <= float(p99) <= float(hi)
    nccl_table = out.split("\n\n")[0]
    log = parse_nccl_tests(nccl_table)  # an nccl-tests reader still reads it
    assert [r.size_bytes for r in log.rows] == [8, 65536]


def test_noise_alone_reports_one_run_with_its_spread(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "run", *SMALL, *NOISE, "--backend", "nccl")
    assert rc == 0 and err == ""
    assert "the median of 1 run per size" in out


def test_repeat_below_one_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "run", *SMALL, "--repeat", "0")
    assert rc == 2 and "--repeat" in err and out == ""
