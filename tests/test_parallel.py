"""collsim.parallel: forked workers that inherit the task, with the serial path's results and Ctrl-C semantics."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from collsim import parallel
from collsim.parallel import ForkPool, WorkerDied, map_points, worker_count
from collsim.scenario import ScenarioError


def test_workers_compute_what_the_serial_path_computes() -> None:
    offset = 7  # a closure: it reaches the workers by fork, not by pickling

    def task(i: int) -> int:
        return i * i + offset

    seen: list[tuple[int, int]] = []
    serial = map_points(task, 9, jobs=1)
    forked = map_points(task, 9, jobs=3, sizes=list(range(9)), progress=lambda i, n: seen.append((i, n)))
    assert serial == ({i: i * i + 7 for i in range(9)}, False)
    assert forked == serial
    assert sorted(i for i, _ in seen) == list(range(9)) and [n for _, n in seen] == list(range(9))


def test_no_module_state_holds_the_task() -> None:
    # two pools with different tasks, one after the other and interleaved, each sees its own
    before = dict(vars(parallel))
    a, b = ForkPool(lambda i: ("a", i), 2), ForkPool(lambda i: ("b", i), 2)
    ia, ib = a.imap(range(3)), b.imap(range(3))
    got = [next(ia), next(ib)]
    assert dict(vars(parallel)) == before  # nothing stored at module level while the pools run
    got += [*ia, *ib]
    assert sorted(got) == sorted((i, (p, i)) for p in "ab" for i in range(3))


def test_points_start_in_the_order_given() -> None:
    order = [3, 0, 2, 1]
    assert [i for i, _ in ForkPool(lambda i: i, 1).imap(order)] == order  # one worker: one point after another


def test_an_error_reaches_the_caller_whole() -> None:
    def task(i: int) -> int:
        if i == 2:
            raise ScenarioError("bad value", file="s.yaml", field="backends.nccl")
        return i

    with pytest.raises(ScenarioError) as err:
        map_points(task, 6, jobs=2)
    assert (err.value.file, err.value.field, err.value.message) == ("s.yaml", "backends.nccl", "bad value")


def test_an_interrupted_task_stops_the_sweep_and_keeps_what_finished() -> None:
    def task(i: int) -> int:
        if i == 3:
            raise KeyboardInterrupt
        return i

    done, interrupted = map_points(task, 8, jobs=2)
    assert interrupted and 3 not in done and all(done[i] == i for i in done)


def test_ctrl_c_waits_for_running_points_then_stops() -> None:
    def task(i: int) -> int:
        time.sleep(0.3)
        return i

    # SIGINT to this process only: the workers ignore it anyway (they are told to; Ctrl-C is the parent's)
    timer = threading.Timer(0.45, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.perf_counter()
    try:
        done, interrupted = map_points(task, 40, jobs=2)
    finally:
        timer.cancel()
    assert interrupted and 2 <= len(done) < 40
    assert time.perf_counter() - t0 < 3.0


def test_ctrl_c_keeps_the_points_it_waited_for(tmp_path: Path) -> None:
    # the points running at the Ctrl-C finish, and their answers are kept (they were waited for, then dropped)
    started = tmp_path / "started"

    def task(i: int) -> int:
        with started.open("a") as f:
            f.write(f"{i}\n")
        time.sleep(0.4)
        return i

    timer = threading.Timer(0.6, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        done, interrupted = map_points(task, 40, jobs=2)
    finally:
        timer.cancel()
    ran = {int(x) for x in started.read_text().split()}
    assert interrupted and set(done) == ran and len(ran) < 40


def test_a_worker_that_dies_is_an_error_not_a_hang() -> None:
    def task(i: int) -> int:
        if i == 1:
            os._exit(3)
        return i

    with pytest.raises(WorkerDied, match="exit code 3"):
        map_points(task, 4, jobs=2)


def test_a_result_that_does_not_pickle_is_named() -> None:
    with pytest.raises(RuntimeError, match=r"point \d: cannot send its result back"):
        map_points(lambda i: (lambda: i), 2, jobs=2)


@pytest.mark.parametrize(("jobs", "count", "expected"), [(1, 5, 1), (4, 2, 2), (3, 10, 3), (2, 0, 1)])
def test_worker_count(jobs: int, count: int, expected: Any) -> None:
    assert worker_count(jobs, count) == expected
    assert 1 <= worker_count(0, 100) <= (os.cpu_count() or 1)


def test_sigterm_raised_inside_nested_simpy_processes_keeps_its_signal() -> None:
    """SimPy re-raises a process's exception in the process waiting on it as ``type(exc)(*exc.args)``, once a level:
    SIGTERM inside a rank's nested processes must still exit 143 (its args were the exit code, so each level added
    128: 143, 271, 399, and the CLI's ``signal.Signals(399)`` failed)."""
    import simpy

    from collsim.parallel import Terminated

    env = simpy.Environment()

    def inner() -> Any:
        yield env.timeout(1)
        raise Terminated(15)

    def middle() -> Any:
        yield env.process(inner())

    def outer() -> Any:
        yield env.process(middle())

    env.process(outer())
    with pytest.raises(Terminated) as info:
        env.run()
    assert (info.value.signum, info.value.code) == (15, 143)
