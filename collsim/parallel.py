"""Independent points of a sweep computed in forked worker processes, with Ctrl-C stopping cleanly.

:func:`map_points` runs ``task(i)`` for ``i`` in ``range(count)``: here and in order with one job, otherwise in
forked workers (:class:`ForkPool`). Results and their order are the same either way; only indices and results
cross process boundaries.

How the task reaches the workers, without a global
--------------------------------------------------
A sweep's task is a closure over a prepared simulator (its topology, its NCCL plan): it cannot be pickled, and it
need not be. :class:`ForkPool` starts each worker as ``multiprocessing`` ``Process(target=pool._serve)`` with the
*fork* start method: fork copies the parent's memory, so the worker runs the bound method ``_serve`` on its own
copy of the pool object, whose ``task`` attribute is the closure itself. Nothing is looked up by name, nothing is
stored at module level, and two pools (nested or concurrent) cannot see each other's task. Each worker talks to
the parent over its own pipe: the parent sends an index, the worker answers ``(index, result, error)``, and the
parent sends the next index to that worker as soon as it answers (so work is handed out one point at a time, in
the order given). This needs the ``fork`` start method (Linux, macOS); where it is missing, :func:`worker_count`
makes the sweep serial.

Ctrl-C
------
Workers ignore SIGINT: Ctrl-C is the parent's. It raises KeyboardInterrupt in the parent, which stops handing out
points, lets every worker finish the one point it is running (one simulation each), and re-raises. A
KeyboardInterrupt inside a worker's task is sent back as such and stops the sweep the same way. Any other
exception of a task reaches the caller whole (file, field and message of a ScenarioError), after the running
points finish. A worker that dies (killed, out of memory) raises :class:`WorkerDied`.

Examples
--------
>>> done, interrupted = map_points(lambda i: i * i, 4, jobs=2)
>>> sorted(done.items()), interrupted
([(0, 0), (1, 1), (2, 4), (3, 9)], False)
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Generator, Iterable, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ["ForkPool", "WorkerDied", "map_points", "worker_count"]

#: What a worker answers when its task was interrupted (KeyboardInterrupt does not pickle as an error to re-raise).
_INTERRUPTED = "interrupted"


class WorkerDied(RuntimeError):
    """A worker process ended without answering (killed, out of memory, a crash in native code)."""


def worker_count(jobs: int, count: int) -> int:
    """Worker processes for ``count`` points.

    Parameters
    ----------
    jobs : int
        Requested workers; 0 means one per CPU.
    count : int
        Points to compute.

    Returns
    -------
    int
        ``jobs`` (0: the CPU count) capped at ``count``, at least 1; 1 (serial) where fork is not available.
    """
    jobs = (os.cpu_count() or 1) if jobs == 0 else jobs
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(jobs, count))


class ForkPool:
    """``jobs`` forked worker processes that compute ``task(i)`` for the indices given to :meth:`imap`.

    Parameters
    ----------
    task : callable
        ``task(i) -> result`` for an index ``i``; any callable (closures included): the workers inherit it by
        fork (see the module docstring). Results must pickle.
    jobs : int
        Worker processes, at least 1.
    """

    def __init__(self, task: Callable[[int], Any], jobs: int) -> None:
        self.task = task
        self.jobs = max(1, jobs)

    def imap(self, order: Iterable[int]) -> Generator[tuple[int, Any], None, None]:
        """``(i, task(i))`` for every ``i`` of ``order``, as the points finish (they start in ``order``).

        Raises
        ------
        KeyboardInterrupt
            On Ctrl-C, or when a task was interrupted; after the running points have finished.
        Exception
            The first exception a task raised, after the running points have finished.
        WorkerDied
            When a worker ended without answering.
        """
        todo = iter(order)
        ctx = multiprocessing.get_context("fork")
        workers: dict[Connection, BaseProcess] = {}
        busy: set[Connection] = set()
        try:
            for _ in range(self.jobs):
                i = next(todo, None)
                if i is None:
                    break
                here, there = ctx.Pipe()
                proc = ctx.Process(target=self._serve, args=(there, here), daemon=True)
                proc.start()
                there.close()
                workers[here] = proc
                here.send(i)
                busy.add(here)
            while busy:
                conn, (i, out, error) = _next_answer(busy, workers)
                busy.discard(conn)
                if error is not None:
                    raise KeyboardInterrupt if error == _INTERRUPTED else error
                nxt = next(todo, None)
                if nxt is not None:
                    conn.send(nxt)
                    busy.add(conn)
                yield i, out
        finally:
            _stop(workers, busy)

    def _serve(self, conn: Connection, parent_end: Connection) -> None:
        """A worker's loop (runs in the forked child): answer each index with ``(i, task(i), None)``, or with the
        error the task raised, until the pipe closes or sends ``None``."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
        parent_end.close()  # the parent's end, inherited by fork: closed here, so that the parent's exit ends us
        while True:
            try:
                i = conn.recv()
            except (EOFError, OSError):
                return
            if i is None:
                return
            try:
                answer: tuple[int, Any, Any] = (i, self.task(i), None)
            except KeyboardInterrupt:
                answer = (i, None, _INTERRUPTED)
            except Exception as exc:
                answer = (i, None, exc)
            _send(conn, answer)


def _send(conn: Connection, answer: tuple[int, Any, Any]) -> None:
    """Send a worker's answer; one that does not pickle becomes an error naming the point."""
    try:
        conn.send(answer)
    except Exception as exc:  # the result or the exception does not pickle
        conn.send((answer[0], None, RuntimeError(f"point {answer[0]}: cannot send its result back: {exc!r}")))


def _next_answer(busy: set[Connection], workers: dict[Connection, BaseProcess]) -> tuple[Connection, Any]:
    """The next answer of a busy worker; :class:`WorkerDied` when one ended without answering (its pipe is at
    its end, or its process ended with nothing to read)."""
    by_sentinel = {workers[c].sentinel: c for c in busy}
    for obj in wait([*busy, *by_sentinel]):
        conn = obj if isinstance(obj, Connection) else by_sentinel[obj]  # type: ignore[index]
        try:
            if conn.poll():
                return conn, conn.recv()
        except (EOFError, OSError):
            pass
        busy.discard(conn)
        workers[conn].join(1.0)
        raise WorkerDied(f"a worker process ended without answering (exit code {workers[conn].exitcode})")
    raise AssertionError("wait() returned nothing")  # pragma: no cover - wait without a timeout blocks until ready


def _stop(workers: dict[Connection, BaseProcess], busy: set[Connection]) -> None:
    """Let busy workers finish their point (answers dropped), then end every worker and close the pipes."""
    for conn, proc in workers.items():
        try:
            if conn in busy and proc.is_alive():
                wait([conn, proc.sentinel])
                if conn.poll():
                    conn.recv()
            conn.send(None)
        except (EOFError, OSError):
            pass
    for conn, proc in workers.items():
        proc.join()
        conn.close()


def map_points(
    task: Callable[[int], Any],
    count: int,
    jobs: int = 1,
    *,
    sizes: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
    prepare: Callable[[], None] | None = None,
) -> tuple[dict[int, Any], bool]:
    """``{i: task(i)}`` for ``i`` in ``range(count)``, and whether Ctrl-C stopped it early (the dict then holds the
    points that finished).

    Parameters
    ----------
    task : callable
        ``task(i)`` computes point ``i``.
    count : int
        Number of points.
    jobs : int
        1: here, in order, ``progress(i, n)`` before the n-th point. Otherwise (0: one per CPU, see
        :func:`worker_count`) in forked workers (:class:`ForkPool`), ``progress(i, n)`` as the n-th point finishes.
    sizes : sequence of int, optional
        Bytes per point: with workers the largest start first, to balance them.
    progress : callable, optional
        ``progress(i, n)``.
    prepare : callable, optional
        Called once before the workers fork (with workers only): build what every point shares, so that each
        worker inherits it instead of building its own.

    Returns
    -------
    (dict, bool)
        The results by index, and whether the sweep was interrupted.
    """
    jobs = worker_count(jobs, count)
    done: dict[int, Any] = {}
    try:
        if jobs <= 1:
            for i in range(count):
                if progress:
                    progress(i, i)
                done[i] = task(i)
            return done, False
        if prepare:
            prepare()
        order = sorted(range(count), key=lambda i: -sizes[i]) if sizes is not None else range(count)
        points = ForkPool(task, jobs).imap(order)
        try:
            for i, out in points:
                done[i] = out
                if progress:
                    progress(i, len(done) - 1)
        finally:
            points.close()
    except KeyboardInterrupt:
        return done, True
    return done, False
