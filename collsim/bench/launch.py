"""Start N local ranks of a sweep as processes, torchrun-style, and collect rank 0's result.

Each rank is ``python -m collsim.bench.worker`` with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1`` and a free ``MASTER_PORT``, and ``OMP_NUM_THREADS=1`` unless set
(as torchrun does). Rank 0's progress comes back on its stdout; every rank's stderr goes to a log file that is
quoted, one line per failed rank, when a rank fails. Ctrl-C, SIGTERM or a failure terminates the ranks still
running.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import collsim
from collsim.bench.config import BenchConfig, BenchError
from collsim.bench.report import SweepOutput
from collsim.bench.worker import ERROR_MARK, PROGRESS_MARK

__all__ = ["free_port", "launch_local", "launch_ranks"]

#: Called with each progress event of rank 0: (index, number of sizes, size in bytes, median in us, wrong or None).
EventFn = Callable[[int, int, int, float, int | None], None]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _pump(stream: IO[str], q: queue.Queue[dict[str, Any]]) -> None:
    for line in stream:
        if line.startswith(PROGRESS_MARK):
            try:
                q.put(json.loads(line[len(PROGRESS_MARK):]))
            except json.JSONDecodeError:
                continue


def _failure_line(rank: int, code: int | None, log: Path) -> str:
    try:
        lines = [x.strip() for x in log.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        lines = []
    marked = [x[len(ERROR_MARK):] for x in lines if x.startswith(ERROR_MARK)]
    if marked:
        return f"rank {rank}: {marked[-1]}"
    last = lines[-1][:300] if lines else "no output"
    return f"rank {rank} exited with status {code}: {last}"


def _merged(lines: list[str]) -> str:
    """Ranks' failure lines, those saying the same once (``ranks 0, 1: BenchError: ...``).

    >>> _merged(["rank 0: BenchError: x", "rank 1: BenchError: x", "rank 2 exited with status 1: y"])
    'ranks 0, 1: BenchError: x; rank 2 exited with status 1: y'
    """
    groups: dict[str, list[str]] = {}
    for line in lines:
        rank, sep, text = line.partition(": ")
        if not sep or not re.fullmatch(r"rank \d+", rank):
            groups.setdefault(line, [])
            continue
        groups.setdefault(text, []).append(rank.split()[1])
    return "; ".join(text if not ranks else f"rank{'s' if len(ranks) > 1 else ''} {', '.join(ranks)}: {text}"
                     for text, ranks in groups.items())  # fmt: skip


def _child_env(rank: int, nprocs: int, port: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(nprocs),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(nprocs),
        GROUP_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        PYTHONUNBUFFERED="1",
    )
    env.setdefault("OMP_NUM_THREADS", "1")
    # The workers import collsim from where this process did (a source tree need not be installed).
    root = str(Path(collsim.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def launch_local(cfg: BenchConfig, *, on_event: EventFn | None = None) -> SweepOutput:
    """Run ``cfg`` with ``cfg.nprocs`` local processes and return rank 0's result.

    Raises
    ------
    BenchError
        When a rank fails: one line per failed rank, with its error.
    KeyboardInterrupt
        After terminating the ranks.
    """
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminated)  # so that the ranks are stopped too
    try:
        return _launch(cfg, on_event)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _launch(cfg: BenchConfig, on_event: EventFn | None) -> SweepOutput:
    def event(e: dict[str, Any]) -> None:
        if on_event is not None:
            on_event(int(e["i"]), int(e["total"]), int(e["size_bytes"]), float(e["median_us"]), e.get("wrong"))

    return SweepOutput.from_dict(launch_ranks(cfg.to_dict(), "collsim.bench.worker", cfg.nprocs, on_event=event))


def launch_ranks(
    config: dict[str, Any],
    module: str,
    nprocs: int,
    *,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``python -m MODULE CONFIG.json RESULT.json`` as ``nprocs`` local ranks (torchrun's variables, a free
    port) and return the JSON rank 0 wrote to RESULT.json.

    Rank 0's progress events (its stdout lines marked :data:`PROGRESS_MARK`) go to ``on_event`` as they come;
    ``env`` adds variables to every rank's environment. Waits for: every rank to exit (or, once one has failed,
    2 s more for the others to fail on their own). The ranks still running are terminated on a failure, Ctrl-C or
    SIGTERM.

    Raises
    ------
    BenchError
        When a rank fails (one line per failed rank, quoting its log) or rank 0 wrote no result.
    """
    with tempfile.TemporaryDirectory(prefix="collsim-bench-") as tmpdir:
        tmp = Path(tmpdir)
        cfg_path, result_path = tmp / "config.json", tmp / "result.json"
        cfg_path.write_text(json.dumps(config))
        port = free_port()
        procs: list[subprocess.Popen[str]] = []
        logs: list[Path] = []
        handles: list[IO[str]] = []
        events: queue.Queue[dict[str, Any]] = queue.Queue()
        try:
            for rank in range(nprocs):
                log = tmp / f"rank{rank}.log"
                fh = open(log, "w", encoding="utf-8")  # noqa: SIM115 - closed in the finally block
                handles.append(fh)
                logs.append(log)
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", module, str(cfg_path), str(result_path)],
                        env={**_child_env(rank, nprocs, port), **(env or {})},
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
                        stderr=fh,
                        text=True,
                    )
                )
            stdout0 = procs[0].stdout
            assert stdout0 is not None  # rank 0 was started with stdout=PIPE
            pump = threading.Thread(target=_pump, args=(stdout0, events), daemon=True)
            pump.start()
            failed_at: float | None = None
            while True:
                _drain(events, on_event, wait_s=0.2)  # wakes up for progress, else 5 times a second
                codes = [p.poll() for p in procs]
                if all(c == 0 for c in codes):
                    break
                if any(c not in (None, 0) for c in codes):
                    failed_at = failed_at or time.monotonic()
                    # Give the other ranks a moment to fail on their own (their error is often the cause).
                    if all(c is not None for c in codes) or time.monotonic() - failed_at > 2.0:
                        break
            pump.join(timeout=5.0)
            _drain(events, on_event)
            codes = [p.poll() for p in procs]
            if any(c != 0 for c in codes):
                _stop(procs)
                bad = [_failure_line(r, c, logs[r]) for r, c in enumerate(codes) if c not in (None, 0)]
                raise BenchError(_merged(bad))
            if not result_path.exists():
                raise BenchError(f"rank 0 finished without writing its result ({_failure_line(0, 0, logs[0])})")
            result: dict[str, Any] = json.loads(result_path.read_text())
            return result
        finally:
            _stop(procs)
            for handle in handles:
                handle.close()


def _drain(
    events: queue.Queue[dict[str, Any]], on_event: Callable[[dict[str, Any]], None] | None, wait_s: float = 0.0
) -> None:
    """Pass the queued progress events on; wait up to ``wait_s`` seconds for the first."""
    while True:
        try:
            e = events.get(timeout=wait_s) if wait_s > 0 else events.get_nowait()
        except queue.Empty:
            return
        wait_s = 0.0
        if on_event is not None:
            on_event(e)


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    """Terminate the ranks still running (each by its own process), then kill any that linger."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 5.0
    for p in procs:
        if p.poll() is None:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p.stdout is not None:
            p.stdout.close()
