"""Where a sweep's points run: here, in forked workers, or on a Dask cluster; the same tasks everywhere.

Every executor takes the same input (a function such as :func:`~collsim.sweep.point.run_point`, the tasks, and the
scenarios' data by digest) and yields ``(index, PointResult)`` as points finish, so that the runner stores each
point the moment it is done, whatever ran it.

* :class:`SerialExecutor`: in this process, in order.
* :class:`PoolExecutor`: :class:`collsim.parallel.ForkPool` (what ``--jobs`` does for ``run``). A worker that dies
  (killed, out of memory) costs the points in flight: a fresh pool takes the points not finished, at most
  :attr:`PoolExecutor.restarts` times.
* :class:`DaskExecutor`: a ``distributed`` client, on a :class:`distributed.LocalCluster` (one single-threaded
  worker process per core) or on an existing scheduler (``tcp://host:8786``). Tasks are submitted a window at a
  time (a few per worker thread), so the points in flight stay few; a task whose worker dies is rescheduled by Dask
  (``distributed.scheduler.allowed-failures``, default 3), and a point whose workers keep dying is reported in
  :attr:`DaskExecutor.lost` instead of stopping the sweep.

Dask is optional (``pip install 'collsim[dask]'``): :func:`require_dask` says how to install it.

Examples
--------
>>> from collsim.sweep.point import PointResult, PointTask
>>> def echo(data, task):
...     return PointResult(task.key, [{"size_bytes": task.size}])
>>> tasks = [PointTask(str(i), "d", "nccl", 2**i) for i in range(3)]
>>> sorted(i for i, _ in PoolExecutor(2).imap(echo, tasks, {"d": {}}))
[0, 1, 2]
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from collsim.parallel import ForkPool, WorkerDied, worker_count
from collsim.sweep.point import PointTask

#: What a task function returns (:class:`~collsim.sweep.point.PointResult` for a sweep's points).
R = TypeVar("R")
#: ``fn(scenario_data, task) -> R``: what an executor runs per task.
Fn = Callable[[Mapping[str, Any], PointTask], R]

__all__ = [
    "DASK_INSTALL",
    "DaskAddressError",
    "DaskExecutor",
    "DaskMissing",
    "Executor",
    "PoolExecutor",
    "SerialExecutor",
    "WorkersKeptDying",
    "make_executor",
    "require_dask",
]

#: The one line that says how to add Dask.
DASK_INSTALL = "--dask needs Dask's distributed package; install it with: pip install 'collsim[dask]'"


class DaskMissing(ImportError):
    """``--dask`` without the ``distributed`` package; the message says how to install it."""


class DaskAddressError(ValueError):
    """``--dask`` with an address ``distributed`` cannot read (not ``local``, ``tcp://host:port`` ...)."""


class WorkersKeptDying(RuntimeError):
    """The local pool lost workers more often than it restarts them; the finished points are stored."""


def require_dask() -> Any:
    """The ``distributed`` module, or :class:`DaskMissing` saying how to install it."""
    try:
        import distributed
    except ImportError:
        raise DaskMissing(DASK_INSTALL) from None
    return distributed


class Executor(Protocol):
    """Runs tasks and yields ``(index, result)`` as they finish."""

    #: Worker processes (or threads) the points run on.
    workers: int
    #: In words, for progress lines and benchmarks.
    name: str

    def imap(
        self, fn: Fn[R], tasks: Sequence[PointTask], scenarios: Mapping[str, Mapping[str, Any]]
    ) -> Generator[tuple[int, R], None, None]:
        """``(i, fn(scenarios[tasks[i].digest], tasks[i]))`` for every task, in the order they finish."""
        ...

    def close(self) -> None:
        """Release the workers."""
        ...


class SerialExecutor:
    """Every point here, one after another."""

    workers = 1
    name = "serial"

    def imap(
        self, fn: Fn[R], tasks: Sequence[PointTask], scenarios: Mapping[str, Mapping[str, Any]]
    ) -> Generator[tuple[int, R], None, None]:
        """See :meth:`Executor.imap`."""
        for i, task in enumerate(tasks):
            yield i, fn(scenarios[task.digest], task)

    def close(self) -> None:
        """Nothing to release."""


class PoolExecutor:
    """Forked worker processes (:class:`collsim.parallel.ForkPool`); one worker or no fork: serial.

    Parameters
    ----------
    jobs : int
        Worker processes; 0: one per CPU.
    restarts : int
        Fresh pools after a worker died, before :class:`WorkersKeptDying`.
    """

    def __init__(self, jobs: int = 0, restarts: int = 3) -> None:
        self.jobs = jobs
        self.restarts = restarts
        self.workers = worker_count(jobs, 1 << 30)
        self.name = "serial" if self.workers <= 1 else f"local pool ({self.workers} processes)"

    def imap(
        self, fn: Fn[R], tasks: Sequence[PointTask], scenarios: Mapping[str, Mapping[str, Any]]
    ) -> Generator[tuple[int, R], None, None]:
        """See :meth:`Executor.imap`; the tasks start in the order given."""
        jobs = worker_count(self.jobs, len(tasks))
        if jobs <= 1:
            yield from SerialExecutor().imap(fn, tasks, scenarios)
            return
        remaining = list(range(len(tasks)))
        deaths = 0
        while remaining:
            finished: set[int] = set()
            points = ForkPool(lambda i: fn(scenarios[tasks[i].digest], tasks[i]), jobs).imap(remaining)
            try:
                for i, out in points:
                    finished.add(i)
                    yield i, out
                return
            except WorkerDied as exc:
                deaths += 1
                remaining = [i for i in remaining if i not in finished]
                if deaths > self.restarts:
                    raise WorkersKeptDying(
                        f"{exc}; workers died {deaths} times, {len(remaining)} points not run (the finished ones "
                        "are stored: run again to continue)"
                    ) from None
            finally:
                points.close()

    def close(self) -> None:
        """Each :meth:`imap` ends its workers itself."""


class DaskExecutor:
    """Points on a Dask cluster through ``distributed``.

    Parameters
    ----------
    address : str or distributed.Client
        ``"local"``: start a :class:`distributed.LocalCluster` with ``workers`` single-threaded worker processes
        (default one per CPU); ``"tcp://host:port"`` (or any address ``distributed.Client`` takes): an existing
        scheduler; or a client already connected.
    workers : int, optional
        Worker processes of a local cluster.
    per_thread : int
        Tasks submitted ahead per worker thread (the window; at least 8 in all).

    Raises
    ------
    DaskMissing
        Without the ``distributed`` package.
    """

    def __init__(self, address: Any = "local", workers: int | None = None, per_thread: int = 4) -> None:
        distributed = require_dask()
        self._own_client = not isinstance(address, distributed.Client)
        self._cluster: Any = None
        self.per_thread = per_thread
        #: Indices of points whose workers kept dying (Dask's KilledWorker): not stored, rerun to retry.
        self.lost: list[int] = []
        self.lost_reasons: list[str] = []
        if address == "local":
            n = workers or os.cpu_count() or 1
            self._cluster = distributed.LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None
            )
            self.client = distributed.Client(self._cluster)
            where = f"LocalCluster, {n} single-threaded worker processes"
        elif isinstance(address, distributed.Client):
            self.client = address
            where = f"client of {address.scheduler.address if address.scheduler else 'a scheduler'}"
        else:
            try:
                self.client = distributed.Client(address)
            except ValueError as exc:  # distributed's parse of the address ("missing port number in address ...")
                raise DaskAddressError(f"{address!r}: {exc}; expected 'local' or a scheduler's address such as "
                                       "tcp://host:8786") from None  # fmt: skip
            where = str(address)
        self.workers = max(1, self._threads())
        self.name = f"Dask ({where})"

    def _threads(self) -> int:
        try:
            return int(sum(self.client.nthreads().values()))
        except Exception:  # a scheduler that does not answer now: the window stays as it was
            return 0

    def imap(
        self, fn: Fn[R], tasks: Sequence[PointTask], scenarios: Mapping[str, Mapping[str, Any]]
    ) -> Generator[tuple[int, R], None, None]:
        """See :meth:`Executor.imap`; a window of tasks at a time, in the order given."""
        distributed = require_dask()
        client = self.client
        done = distributed.as_completed()
        index: dict[Any, int] = {}
        todo = iter(range(len(tasks)))
        checked = time.monotonic()

        def window() -> int:
            return max(8, self.per_thread * self.workers)

        def submit() -> bool:
            i = next(todo, None)
            if i is None:
                return False
            task = tasks[i]
            fut = client.submit(fn, dict(scenarios[task.digest]), task, pure=False)
            index[fut] = i
            done.add(fut)
            return True

        try:
            while len(index) < window() and submit():
                pass
            for fut in done:
                i = index.pop(fut)
                try:
                    out = fut.result()
                except distributed.KilledWorker as exc:
                    self.lost.append(i)
                    self.lost_reasons.append(str(exc))
                    out = None
                fut.release()
                if time.monotonic() - checked > 2.0:  # a cluster that scales: the window follows it
                    checked = time.monotonic()
                    self.workers = max(1, self._threads() or self.workers)
                while len(index) < window() and submit():
                    pass
                if out is not None:
                    yield i, out
        finally:
            if index:
                client.cancel(list(index))

    def close(self) -> None:
        """Close the client and the local cluster this executor started."""
        if self._own_client:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()


def make_executor(jobs: int = 0, dask: Any = None) -> Executor:
    """The executor a sweep asks for: Dask when ``dask`` is set (``"local"``, an address or a client), else the
    local pool with ``jobs`` workers (0: one per CPU, 1: serial)."""
    if dask is not None and dask is not False:
        return DaskExecutor(dask, workers=jobs or None)
    return PoolExecutor(jobs)
