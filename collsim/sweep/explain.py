"""``collsim explain --dask``: NCCL's cost model against the simulation of every pair, one size per task, on the
sweep's executors (the local pool or a Dask cluster), with the same results as :meth:`collsim.api.Simulator.explain`.

``explain --all`` simulates every enabled (algorithm, protocol) pair at every size: tens of simulations per size,
minutes at scale. Here each size is one task carrying the scenario as data (:mod:`collsim.sweep.point`), so the
sizes spread over a cluster's workers, largest first.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from collsim.api import Simulator
from collsim.results import Explanation
from collsim.sweep.execute import Executor
from collsim.sweep.point import PointTask, remember_simulator, scenario_digest, simulator_for

__all__ = ["explain_on", "explain_task"]


def explain_task(all_pairs: bool, data: Mapping[str, Any], task: PointTask) -> list[Explanation]:
    """One size of ``explain``: every collective of the scenario ``data`` at ``task.size`` bytes."""
    rows, _ = simulator_for(data, task.digest).explain([task.size], all_pairs=all_pairs)
    return rows


def explain_on(
    sim: Simulator,
    executor: Executor,
    sizes: Sequence[int] | None = None,
    *,
    all_pairs: bool = False,
    progress: Callable[[str, int, int, int], None] | None = None,
) -> tuple[list[Explanation], bool]:
    """:meth:`Simulator.explain` with one task per size on ``executor``; returns (rows, interrupted).

    Parameters
    ----------
    sim : Simulator
        The scenario (its data travels to the workers).
    executor : Executor
        Where the sizes run (not closed here).
    sizes : sequence of int, optional
        Bytes; default the scenario's.
    all_pairs : bool
        Simulate every enabled pair, not only NCCL's choice.
    progress : callable, optional
        ``progress("nccl", size, n, total)`` as each size finishes.

    Examples
    --------
    >>> from collsim.sweep.execute import SerialExecutor
    >>> sim = Simulator.from_source("pcie-2gpu-nop2p")
    >>> rows, _ = explain_on(sim, SerialExecutor(), [2**20, 2**10], all_pairs=True)
    >>> rows == sim.explain([2**20, 2**10], all_pairs=True)[0]
    True
    """
    sizes = list(sim.scenario.sizes() if sizes is None else sizes)
    data = sim.scenario.to_dict()
    digest = scenario_digest(data)
    remember_simulator(digest, sim)  # here and in forked workers: the plan is built once
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    tasks = [PointTask(f"explain-{i}", digest, "nccl", sizes[i]) for i in order]
    done: dict[int, list[Explanation]] = {}
    interrupted = False
    points = executor.imap(functools.partial(explain_task, all_pairs), tasks, {digest: data})
    try:
        for j, rows in points:
            done[order[j]] = rows
            if progress:
                progress("nccl", sizes[order[j]], len(done) - 1, len(sizes))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        points.close()
    colls = sim.scenario.collectives()
    by_size = [row for i in sorted(done) for row in done[i]]
    return sorted(by_size, key=lambda r: colls.index(r.collective)), interrupted
