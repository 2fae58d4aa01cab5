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

Ctrl-C, SIGTERM, a killed parent
--------------------------------
Workers ignore SIGINT: Ctrl-C is the parent's. It raises KeyboardInterrupt in the parent, which stops handing out
points, lets every worker finish the one point it is running (one simulation each), and re-raises. A second
KeyboardInterrupt while it waits (Ctrl-C again) kills the workers at once, reaps them and re-raises. A
KeyboardInterrupt inside a worker's task is sent back as such and stops the sweep the same way. Any other
exception of a task reaches the caller whole (file, field and message of a ScenarioError), after the running
points finish. Any other BaseException in the parent (SystemExit, :class:`Terminated`) kills the workers at once.
A worker that dies (killed, out of memory) raises :class:`WorkerDied`.

:func:`handle_signals` is what the command line runs under: a second Ctrl-C kills the workers wherever the parent
is, and SIGTERM (SIGHUP) kills them and raises :class:`Terminated` (exit status 143, 129). Workers never outlive
the parent, even one killed with SIGKILL: on Linux each asks the kernel for SIGKILL when its parent dies
(``prctl(PR_SET_PDEATHSIG)``), elsewhere a thread of the worker watches ``os.getppid()``; and a worker holds no
other worker's pipe, so none waits on a pipe that a sibling keeps open. (On Linux "the parent" is the thread that
forked the workers: the one that first iterates :meth:`ForkPool.imap`; it must outlive the pool.)

Examples
--------
>>> done, interrupted = map_points(lambda i: i * i, 4, jobs=2)
>>> sorted(done.items()), interrupted
([(0, 0), (1, 1), (2, 4), (3, 9)], False)
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

from collsim.files import signals_held

__all__ = ["ForkPool", "Terminated", "WorkerDied", "handle_signals", "kill_workers", "map_points", "worker_count"]

#: What a worker answers when its task was interrupted (KeyboardInterrupt does not pickle as an error to re-raise).
_INTERRUPTED = "interrupted"


#: Seconds a worker that was told to stop gets to exit before it is killed.
_EXIT_GRACE_S = 5.0
#: Signals that end a command (:func:`handle_signals`) and a worker.
_ENDING = (signal.SIGTERM, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()))
#: ``prctl`` option: the signal the kernel sends this process when its parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


class WorkerDied(RuntimeError):
    """A worker process ended without answering (killed, out of memory, a crash in native code)."""


class Terminated(SystemExit):
    """SIGTERM (or SIGHUP) under :func:`handle_signals`: the process ends with ``128 + signal`` (143, 129).

    A SystemExit, so that no ``except Exception`` stops it and every ``finally`` runs on its way out.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum
        # SimPy re-raises a process's exception in the process waiting on it as ``type(exc)(*exc.args)``: the
        # args must give the signal back, not the exit code (``code`` keeps 128 + signal)
        self.args = (signum,)


def kill_workers() -> int:
    """Kill (SIGKILL) every live child process that :mod:`multiprocessing` started here; returns how many.

    The pools that own them reap them (:meth:`ForkPool.imap` joins its workers on its way out)."""
    children = multiprocessing.active_children()
    for proc in children:
        proc.kill()
    return len(children)


@contextlib.contextmanager
def handle_signals(notice: str | None = None, *, then_exit: bool = False) -> Iterator[None]:
    """Signal handlers for a command that runs sweeps (the CLI runs every command under them); the previous
    handlers are restored after the block. Only in the main thread (elsewhere: nothing is installed).

    * The first SIGINT raises KeyboardInterrupt, as Python's own handler: a sweep stops handing out points and
      waits for the points running (``notice`` is written to stderr then, when workers run).
    * Every later SIGINT kills the workers first (:func:`kill_workers`), then raises KeyboardInterrupt: the
      sweep stops at once with the points that finished.
    * SIGTERM and SIGHUP kill the workers and raise :class:`Terminated`.

    Parameters
    ----------
    notice : str, optional
        One line for stderr on the first Ctrl-C while workers run (e.g. how to stop them at once).
    then_exit : bool
        The block is the whole program (``collsim`` run from the shell): after it, stdout and stderr are flushed,
        Ctrl-C is ignored (the command is done: the process exits with its status, without a traceback; Python
        resets its own handlers to the default late in its exit, where a Ctrl-C would kill it) and SIGTERM or
        SIGHUP ends the process at once with ``128 + signal``, instead of the previous handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    interrupts = 0

    def on_interrupt(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            kill_workers()
        elif notice and multiprocessing.active_children():
            with contextlib.suppress(OSError):  # os.write: the main thread may be inside a write to sys.stderr
                os.write(2, ("\r\x1b[K" if _isatty(2) else "").encode() + notice.encode() + b"\n")
        raise KeyboardInterrupt

    def on_terminate(signum: int, frame: FrameType | None) -> None:
        kill_workers()
        raise Terminated(signum)

    wanted: dict[int, Callable[[int, FrameType | None], None]] = {signal.SIGINT: on_interrupt}
    for sig in _ENDING:
        wanted[sig] = on_terminate
    previous: dict[int, Any] = {}
    for sig, handler in wanted.items():
        previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        if then_exit:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
        for sig, handler in previous.items():
            if then_exit:
                signal.signal(sig, signal.SIG_IGN if sig == signal.SIGINT else _exit_now)
            else:
                signal.signal(sig, handler)


def _exit_now(signum: int, frame: FrameType | None) -> None:
    """End the process at once with ``128 + signum`` (the command is done; only the interpreter's exit is left)."""
    os._exit(128 + signum)


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


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
            On Ctrl-C, or when a task was interrupted; after the running points have finished (a Ctrl-C while
            waiting for them: after their answers have been yielded; a second one stops them at once).
        Exception
            The first exception a task raised, after the running points have finished.
        WorkerDied
            When a worker ended without answering.
        """
        todo = iter(order)
        ctx = multiprocessing.get_context("fork")
        workers: dict[Connection, BaseProcess] = {}
        busy: set[Connection] = set()
        graceful = True
        try:
            for _ in range(self.jobs):
                i = next(todo, None)
                if i is None:
                    break
                here, there = ctx.Pipe()
                # the parent's ends of every pipe so far: the worker closes them, so that it holds no other
                # worker's pipe open (a worker waits for its pipe to end when the parent dies)
                inherited = (here, *workers)
                proc = ctx.Process(target=self._serve, args=(there, inherited, os.getpid()), daemon=True)
                with signals_held():  # a worker starts with signals held: it sets its own handlers first
                    proc.start()
                    workers[here] = proc
                there.close()
                here.send(i)
                busy.add(here)
            stopping = False
            while busy:
                try:
                    conn, (i, out, error) = _next_answer(busy, workers)
                except KeyboardInterrupt:  # Ctrl-C while waiting: no more points; the running ones answer first
                    if stopping:  # again: stop them now (handle_signals has killed them already)
                        graceful = False
                        raise
                    stopping = True
                    continue
                busy.discard(conn)
                if error is not None:
                    raise KeyboardInterrupt if error == _INTERRUPTED else error
                nxt = None if stopping else next(todo, None)
                if nxt is not None:
                    conn.send(nxt)
                    busy.add(conn)
                yield i, out
            if stopping:
                raise KeyboardInterrupt
        except BaseException as exc:  # Ctrl-C, a task's error, close(): finish the points running; else kill
            why = exc.__context__ if isinstance(exc, GeneratorExit) else exc  # close(): while the caller unwinds
            graceful = graceful and (why is None or isinstance(why, (Exception, KeyboardInterrupt)))
            raise
        finally:
            _stop(workers, busy, graceful)

    def _serve(self, conn: Connection, inherited: Sequence[Connection], parent: int) -> None:
        """A worker's loop (runs in the forked child): answer each index with ``(i, task(i), None)``, or with the
        error the task raised, until the pipe closes or sends ``None``.

        It starts with the signals the parent held (see :meth:`imap`): SIGINT is ignored (Ctrl-C is the
        parent's), SIGTERM and SIGHUP end it (whatever handlers the parent had), and it dies with the parent."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for sig in _ENDING:
            signal.signal(sig, signal.SIG_DFL)
        for end in inherited:  # the parent's ends, inherited by fork: closed, so that the parent's exit ends us
            end.close()
        _die_with_parent(parent)
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, *_ENDING})
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
            try:
                _send(conn, answer)
            except OSError:  # the parent is gone or closed the pipe
                return


def _die_with_parent(parent: int) -> None:
    """Make this worker end when its parent process ends, even by SIGKILL: Linux's ``PR_SET_PDEATHSIG``
    (SIGKILL), elsewhere a daemon thread that watches ``os.getppid()``; at once if the parent is already gone."""
    armed = False
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):  # no libc to call (a static build): watch instead
            libc = ctypes.CDLL(None, use_errno=True)
            zero = ctypes.c_ulong(0)
            armed = libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), zero, zero, zero) == 0
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), name="collsim-parent-watch", daemon=True).start()


def _watch_parent(parent: int, period: float = 0.5) -> None:
    """End this process when its parent ``parent`` is gone (it is then adopted: ``os.getppid()`` changes)."""
    while os.getppid() == parent:
        time.sleep(period)
    os._exit(1)


def _send(conn: Connection, answer: tuple[int, Any, Any]) -> None:
    """Send a worker's answer; one that does not pickle becomes an error naming the point."""
    try:
        conn.send(answer)
    except OSError:
        raise
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


def _stop(workers: dict[Connection, BaseProcess], busy: set[Connection], graceful: bool = True) -> None:
    """End every worker, reap it and close the pipes. ``graceful``: busy workers first finish their point
    (answers dropped) and every worker is told to stop; any exception meanwhile (Ctrl-C again, SIGTERM) kills
    them at once instead, and is re-raised after they are reaped. Not graceful: killed at once."""
    try:
        if graceful:
            for conn, proc in workers.items():
                try:
                    if conn in busy and proc.is_alive():
                        wait([conn, proc.sentinel])
                        if conn.poll():
                            conn.recv()
                    conn.send(None)
                except (EOFError, OSError):
                    pass
            deadline = time.monotonic() + _EXIT_GRACE_S
            for proc in workers.values():
                proc.join(max(0.0, deadline - time.monotonic()))
    finally:
        with signals_held():  # kill, reap and close whatever happens: no worker outlives this
            for proc in workers.values():
                if proc.is_alive():
                    proc.kill()
            for conn, proc in workers.items():
                proc.join(_EXIT_GRACE_S)
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
    except KeyboardInterrupt:  # interrupted, unless the points it waited for were the last ones
        return done, len(done) < count
    return done, False
