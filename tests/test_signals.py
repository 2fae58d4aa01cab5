"""Signals and output files: Ctrl-C (once, twice), SIGTERM and SIGKILL of a parallel sweep leave no process behind
and either the previous output file or a complete new one marked partial; every output file is written whole.

The end-to-end tests run ``python -m collsim`` in its own session (process group) and look at ``/proc``: they
start signalling once the driver has forked its workers (the sweep is running), not after a fixed sleep, and allow
generous time for a loaded machine (they assert no timings beyond "well before the sweep would have finished").
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from collsim import files
from collsim.api import Simulator
from collsim.cli import main
from collsim.files import OutputPathError, check_output_path, write_atomic
from collsim.parallel import ForkPool, map_points

LINUX_PROC = sys.platform.startswith("linux") and Path("/proc/self/stat").is_file()
needs_proc = pytest.mark.skipif(not LINUX_PROC, reason="looks at processes through Linux's /proc")

#: A parallel sweep of a few seconds: 62 points (2 backends x 31 sizes up to 8 GiB), the largest first; NCCL's tree
#: forced, whose large points take seconds each (NCCL's own model picks the quicker-to-simulate ring there)
RUN = ["run", "2node-a100-ib", "--jobs", "2", "--set", "backends.nccl.env.NCCL_ALGO=Tree"]
#: A grid whose points each take a second or more (sizes 1-8 GiB).
GRID = """\
base: 2node-a100-ib
backends: [nccl]
axes:
  backends.nccl.env.NCCL_ALGO: [Ring, Tree]
sizes: 1GiB:8GiB:x2
"""
PREVIOUS = b"the previous output\n"
#: Seconds a signalled command gets to exit; far less than the sweep would take, far more than it needs.
EXIT_S = 30.0


# ------------------------------------------------------------------------------------------------ process helpers


def _stat(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (state, ppid, pgrp, ...), or None when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _live(pid: int) -> bool:
    """Whether ``pid`` is a process that still runs (a zombie does not: it only waits to be reaped)."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def _group(pgid: int) -> list[int]:
    """Live processes of the process group ``pgid``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                out.append(int(entry))
    return out


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None and int(fields[1]) == pid and fields[0] not in ("Z", "X"):
                out.append(int(entry))
    return out


def _start(argv: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    """``python -m collsim ARGV`` in a new session (its own process group, whose id is its pid)."""
    return subprocess.Popen([sys.executable, "-m", "collsim", *argv], cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip


def _wait_for_workers(proc: subprocess.Popen[bytes], count: int = 2, timeout: float = 120.0) -> list[int]:
    """The driver's worker pids, once ``count`` are running: the sweep has started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _out, err = proc.communicate()
            pytest.fail(f"collsim ended (exit {proc.returncode}) before its workers started: {err.decode()[-2000:]}")
        kids = _children(proc.pid)
        if len(kids) >= count:
            return kids
        time.sleep(0.02)
    _kill_group(proc)
    pytest.fail(f"no {count} workers within {timeout} s")


def _finish(proc: subprocess.Popen[bytes]) -> tuple[int, str, float]:
    """Wait for the signalled driver: (exit status, stderr, seconds it took)."""
    t0 = time.monotonic()
    try:
        _out, err = proc.communicate(timeout=EXIT_S)
    except subprocess.TimeoutExpired:
        left = _group(proc.pid)
        _kill_group(proc)
        pytest.fail(f"collsim did not exit within {EXIT_S} s of the signal (processes {left})")
    return proc.returncode, err.decode(), time.monotonic() - t0


def _group_ends(pgid: int, timeout: float = 20.0) -> list[int]:
    """The group's live processes left after ``timeout`` seconds (empty as soon as none is)."""
    deadline = time.monotonic() + timeout
    while (left := _group(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def _assert_previous_or_partial(path: Path, fmt: str) -> str:
    """``path`` holds the previous bytes, or a complete new output marked partial; returns which ("previous",
    "partial")."""
    data = path.read_bytes()
    if data == PREVIOUS:
        return "previous"
    text = data.decode()
    if fmt == "json":
        doc = json.loads(text)  # complete: it parses
        assert doc["partial"] is True and doc["interrupted"] is True
        assert len(doc["results"]) == doc["rows_done"] < doc["rows_total"]
    elif fmt == "csv":
        first = text.splitlines()[0]
        assert first.startswith("# partial: "), first
        counts = json.loads(first.removeprefix("# partial: "))
        df = pd.read_csv(io.StringIO(text), comment="#")
        assert len(df) == counts["rows_done"] < counts["rows_total"]
        assert "time_us" in df.columns
    else:
        assert text.endswith("this output is partial\n"), text[-300:]
        assert text.splitlines()[-1].startswith("# interrupted: ")
    assert not list(path.parent.glob(f".{path.name}.*.tmp"))  # no temporary file left
    return "partial"


# ---------------------------------------------------------------------------------------- end to end: run, sweep


@needs_proc
@pytest.mark.parametrize("fmt", ["json", "csv", "table"])
def test_ctrl_c_twice_kills_the_workers_and_keeps_the_file_whole(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"out.{fmt}"
    out.write_bytes(PREVIOUS)
    proc = _start([*RUN, "--format", fmt, "-o", str(out)], tmp_path)
    _wait_for_workers(proc)
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(0.3)  # the second Ctrl-C while the first waits for the points running (seconds each)
    assert proc.poll() is None, "the sweep ended before the second Ctrl-C"
    os.kill(proc.pid, signal.SIGINT)
    rc, err, seconds = _finish(proc)
    assert rc == 130, err
    assert "Traceback" not in err
    assert _group_ends(proc.pid) == []
    _assert_previous_or_partial(out, fmt)
    print(f"double Ctrl-C ({fmt}): exit {rc} {seconds:.2f} s after the second; {err.strip()!r}")


@needs_proc
def test_ctrl_c_once_finishes_the_running_points_and_writes_a_partial_file(tmp_path: Path) -> None:
    out = tmp_path / "out.json"  # no previous file: the partial output is written, even with no row finished
    proc = _start([*RUN, "--format", "json", "-o", str(out)], tmp_path)
    _wait_for_workers(proc)
    os.kill(proc.pid, signal.SIGINT)
    rc, err, seconds = _finish(proc)
    assert rc == 130, err
    assert "Traceback" not in err
    assert _group_ends(proc.pid) == []
    assert _assert_previous_or_partial(out, "json") == "partial"
    print(f"one Ctrl-C: exit {rc} {seconds:.2f} s after it; {err.strip()!r}")


@needs_proc
def test_sigterm_kills_the_workers_at_once_and_keeps_the_previous_file(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    out.write_bytes(PREVIOUS)
    proc = _start([*RUN, "--format", "json", "-o", str(out)], tmp_path)
    workers = _wait_for_workers(proc)
    os.kill(proc.pid, signal.SIGTERM)
    rc, err, seconds = _finish(proc)
    assert rc == 143, err
    assert "terminated by SIGTERM" in err and "Traceback" not in err
    assert _group_ends(proc.pid) == []
    assert not any(_live(w) for w in workers)
    assert out.read_bytes() == PREVIOUS  # SIGTERM writes nothing
    assert not list(tmp_path.glob(".*.tmp"))
    print(f"SIGTERM: exit {rc} {seconds:.2f} s after it")


@needs_proc
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT twice"])
def test_a_signalled_grid_sweep_leaves_no_worker_and_a_whole_file(tmp_path: Path, how: str) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID)
    out = tmp_path / "out.csv"
    out.write_bytes(PREVIOUS)
    proc = _start(["sweep", str(grid), "--jobs", "2", "--format", "csv", "-o", str(out)], tmp_path)
    _wait_for_workers(proc)
    if how == "SIGTERM":
        os.kill(proc.pid, signal.SIGTERM)
    else:
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGINT)
    rc, err, _seconds = _finish(proc)
    assert rc == (143 if how == "SIGTERM" else 130), err
    assert "Traceback" not in err
    assert _group_ends(proc.pid) == []
    data = out.read_bytes()
    if data != PREVIOUS:  # points finished before the signal: a new file, marked partial
        assert how != "SIGTERM"
        first = data.decode().splitlines()[0]
        assert first.startswith("# partial: ") and json.loads(first[len("# partial: "):])["reason"] == "interrupted"
        pd.read_csv(out, comment="#")
    assert not list(tmp_path.glob(".*.tmp"))


@needs_proc
def test_sigkill_of_the_driver_takes_its_workers_with_it(tmp_path: Path) -> None:
    proc = _start([*RUN, "--format", "json", "-o", str(tmp_path / "out.json")], tmp_path)
    workers = _wait_for_workers(proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=EXIT_S)
    assert proc.returncode == -signal.SIGKILL
    assert _group_ends(proc.pid) == []  # the workers, running a point of seconds, die with their driver
    assert not any(_live(w) for w in workers)
    assert not (tmp_path / "out.json").exists()


# ------------------------------------------------------------------------------------------- the pool, in-process


def test_a_second_ctrl_c_stops_the_running_points_at_once() -> None:
    def task(i: int) -> int:
        time.sleep(60)  # would hold the first Ctrl-C for a minute
        return i

    pid = os.getpid()
    timers = [threading.Timer(t, lambda: os.kill(pid, signal.SIGINT)) for t in (0.5, 1.0)]
    for t in timers:
        t.start()
    t0 = time.monotonic()
    try:
        done, interrupted = map_points(task, 8, jobs=2)
    finally:
        for t in timers:
            t.cancel()
    assert interrupted and done == {}
    assert time.monotonic() - t0 < 30

    assert multiprocessing.active_children() == []  # killed and reaped


def test_an_exit_of_the_parent_kills_the_workers_at_once() -> None:
    # SystemExit (collsim.parallel.Terminated: SIGTERM) does not wait for the points running
    def task(i: int) -> int:
        if i:
            time.sleep(60)
        return i

    t0 = time.monotonic()
    points = ForkPool(task, 2).imap(range(4))
    with pytest.raises(SystemExit):
        try:  # as map_points and the sweep runner consume a pool
            for _ in points:
                raise SystemExit(143)
        finally:
            points.close()
    assert time.monotonic() - t0 < 30

    assert multiprocessing.active_children() == []


# -------------------------------------------------------------------------------------------------- atomic writes


def test_write_atomic_replaces_the_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")
    target.chmod(0o640)
    write_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the previous file's permissions
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_write_atomic_gives_a_new_file_the_usual_permissions(tmp_path: Path) -> None:
    mask = os.umask(0o027)
    try:
        write_atomic(tmp_path / "new.txt", b"x")
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o640


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
def test_an_interrupted_write_keeps_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    target = tmp_path / "out.csv"
    target.write_bytes(PREVIOUS)

    def fail(*args: Any) -> None:
        raise error

    monkeypatch.setattr(files.os, "replace", fail)
    with pytest.raises(error):
        write_atomic(target, "a,b\n1,2\n" * 1000)
    assert target.read_bytes() == PREVIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]  # the temporary file is gone


def test_write_atomic_writes_through_a_link_and_into_a_device(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    if Path("/dev/null").exists():
        write_atomic("/dev/null", "discarded")  # not a regular file: written in place, never renamed onto
        assert Path("/dev/null").is_char_device()


def test_output_options_naming_a_folder_are_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(OutputPathError, match="is a folder"):
        check_output_path(str(tmp_path), "-o")
    with pytest.raises(OutputPathError, match="does not exist"):
        check_output_path(str(tmp_path / "missing" / "out.json"), "--trace")
    for argv in (["run", "hgx-h100", "--sizes", "1MiB", "-o", str(tmp_path)],
                 ["run", "hgx-h100", "--sizes", "1MiB", "--trace", str(tmp_path)],
                 ["validate", "hgx-h100", "x.json", "--html", str(tmp_path)]):  # fmt: skip
        rc = main(argv)
        out, err = capsys.readouterr()
        option = argv[-2]
        assert rc == 2 and out == ""
        assert err == f"collsim: error: {option} {tmp_path}: is a folder; expected a file name, e.g. " \
                      f"{tmp_path}/out.json\n"  # fmt: skip


# ------------------------------------------------------------------------- partial output, in-process (Ctrl-C)


def _interrupt_on_call(monkeypatch: pytest.MonkeyPatch, nth: int) -> None:
    """``Simulator.simulate_one`` raises KeyboardInterrupt on its ``nth`` call."""
    original = Simulator.simulate_one
    calls = [0]

    def fake(self: Simulator, backend: str, size: int, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == nth:
            raise KeyboardInterrupt
        return original(self, backend, size, **kwargs)

    monkeypatch.setattr(Simulator, "simulate_one", fake)


RUN_SMALL = ["run", "hgx-h100", "--sizes", "1KiB,1MiB", "--jobs", "1"]  # 4 rows: 2 backends x 2 sizes


def test_an_interrupted_csv_says_so_in_a_comment_pandas_skips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _interrupt_on_call(monkeypatch, 3)
    out = tmp_path / "out.csv"
    out.write_bytes(PREVIOUS)
    assert main([*RUN_SMALL, "--format", "csv", "-o", str(out)]) == 130
    assert "kept 2 of 4 rows" in capsys.readouterr().err
    text = out.read_text()
    assert text.splitlines()[0] == '# partial: {"reason": "interrupted", "rows_done": 2, "rows_total": 4}'
    df = pd.read_csv(out, comment="#")
    assert df["size_bytes"].tolist() == [1024, 1048576] and set(df["backend"]) == {"nccl"}


def test_an_interrupted_json_and_table_are_marked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _interrupt_on_call(monkeypatch, 3)
    assert main([*RUN_SMALL, "--format", "json"]) == 130
    doc = json.loads(capsys.readouterr().out)
    assert (doc["partial"], doc["rows_done"], doc["rows_total"], len(doc["results"])) == (True, 2, 4, 2)
    _interrupt_on_call(monkeypatch, 3)
    assert main(RUN_SMALL) == 130
    assert capsys.readouterr().out.splitlines()[-1] == "# interrupted: 2 of 4 rows finished; this output is partial"


def test_a_complete_json_says_it_is_not_partial(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*RUN_SMALL, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["partial"], doc["rows_done"], doc["rows_total"]) == (False, 4, 4)


def test_an_interrupt_before_any_row_keeps_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _interrupt_on_call(monkeypatch, 1)
    out = tmp_path / "out.json"
    out.write_bytes(PREVIOUS)
    assert main([*RUN_SMALL, "--format", "json", "-o", str(out)]) == 130
    assert "left as it was" in capsys.readouterr().err
    assert out.read_bytes() == PREVIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_an_interrupted_grid_sweep_is_marked_in_every_format(tmp_path: Path) -> None:
    from collsim.sweep import run_sweep
    from collsim.sweep.grid import grid_from_mapping
    from collsim.sweep.output import format_table, to_csv, to_json
    from collsim.sweep.point import PointResult, PointTask, run_point

    def interrupting(data: Any, task: PointTask) -> PointResult:
        if task.size == 8:  # sizes run largest first: 4 MiB, 64 KiB, then 8 B is interrupted
            raise KeyboardInterrupt
        return run_point(data, task)

    grid = grid_from_mapping({"base": "pcie-2gpu-nop2p", "backends": ["nccl"], "sizes": "8B,64KiB,4MiB"})
    out = run_sweep(grid, tmp_path, jobs=1, task=interrupting)
    assert out.interrupted and out.partial and (out.finished, len(out.points)) == (2, 3)
    doc = json.loads(to_json(out))
    assert (doc["partial"], doc["points_done"], doc["points_total"], len(doc["rows"])) == (True, 2, 3, 2)
    text = to_csv(out)
    assert text.splitlines()[0] == '# partial: {"reason": "interrupted", "points_done": 2, "points_total": 3}'
    assert len(pd.read_csv(io.StringIO(text), comment="#")) == 2
    assert format_table(out).splitlines()[-1].startswith("# interrupted: 2 of 3 points finished")
    whole = run_sweep(grid, tmp_path, jobs=1)
    assert not whole.partial and json.loads(to_json(whole))["partial"] is False
    assert not to_csv(whole).startswith("#")
