"""``collsim calibrate --dask``: each sweep the fit predicts, one task per point on the sweep's executors.

A fit simulates the measured sizes again for every profile it tries (tens to hundreds of sweeps):
:class:`ExecutorEvaluate` is the ``evaluate`` hook of :func:`collsim.calibration.fit.calibrate` that sends each
point of such a sweep, with the scenario and the profile's values as data, to an executor (the local pool or a Dask
cluster). The fit is the same as with local workers.

Examples
--------
>>> from collsim.api import Simulator, load
>>> from collsim.sweep.execute import SerialExecutor
>>> times = ExecutorEvaluate(SerialExecutor())(load("pcie-2gpu-nop2p"), {}, [("nccl", 2**20, "allreduce")])
>>> round(times[0], 2) == round(Simulator.from_source("pcie-2gpu-nop2p").simulate_one("nccl", 2**20).time_s * 1e6, 2)
True
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from collsim.api import Simulator
from collsim.profile import Profile
from collsim.scenario import Scenario, ScenarioWarning, load_scenario
from collsim.sweep.execute import Executor
from collsim.sweep.point import PointTask, scenario_digest

__all__ = ["ExecutorEvaluate", "calibrate_task"]

#: This process's simulators of the profiles tried last, by digest (a fit tries one profile per sweep).
_SIMULATORS: OrderedDict[str, Simulator] = OrderedDict()
_KEEP = 2


def _simulator(data: Mapping[str, Any], digest: str) -> Simulator:
    sim = _SIMULATORS.get(digest)
    if sim is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ScenarioWarning)
            sim = Simulator(load_scenario(data["scenario"]), Profile(dict(data["profile"])))
        _SIMULATORS[digest] = sim
        while len(_SIMULATORS) > _KEEP:
            _SIMULATORS.popitem(last=False)
    return sim


def calibrate_task(data: Mapping[str, Any], task: PointTask) -> float:
    """One point of a predicted sweep: ``task.collective`` with ``task.backend`` at ``task.size`` bytes, on the
    scenario ``data["scenario"]`` with the profile ``data["profile"]``; microseconds."""
    sim = _simulator(data, task.digest)
    return sim.simulate_one(task.backend, task.size, collective=task.collective).time_s * 1e6  # s to us


class ExecutorEvaluate:
    """The ``evaluate`` hook of :func:`collsim.calibration.fit.calibrate` on an executor (not closed here).

    Parameters
    ----------
    executor : Executor
        Where the points run.
    """

    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    def __call__(
        self, scenario: Scenario, values: dict[str, float], points: Sequence[tuple[str, int, str]]
    ) -> list[float]:
        data = {"scenario": scenario.to_dict(), "profile": dict(values)}
        digest = scenario_digest(data)
        order = sorted(range(len(points)), key=lambda i: -points[i][1])  # the largest first
        tasks = [PointTask(str(i), digest, points[i][0], points[i][1], collective=points[i][2]) for i in order]
        out: dict[int, float] = {}
        for j, t in self.executor.imap(calibrate_task, tasks, {digest: data}):
            out[order[j]] = t
        if len(out) != len(points):  # points lost with their workers (Dask): the fit cannot go on without them
            raise RuntimeError(f"{len(points) - len(out)} of a predicted sweep's points were lost with their workers")
        return [out[i] for i in range(len(points))]
