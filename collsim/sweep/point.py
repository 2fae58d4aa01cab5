"""One point of a sweep as a task that can travel: its key, and the function a worker runs.

A task carries no simulator and no closure: the worker gets the variant's resolved scenario as data
(:meth:`collsim.scenario.Scenario.to_dict`, the same on every machine that has the files it names) and builds the
:class:`~collsim.api.Simulator` itself, keeping the last few it built (:data:`CACHE_SIZE`), so that the points of
one variant that land on the same worker share one topology and one NCCL plan. That is what lets the same task run
here, in a forked worker, or on a Dask worker on another machine.

The key of a point (:func:`point_key`) is a hash of what decides its result: the resolved scenario without what
cannot change it (its name and description, the size list, the other backend's section, the training section; a
node template or calibration file by its content, not its path), the backend, the size, whether the breakdown is
kept, and collsim's version.

Examples
--------
>>> from collsim.api import load
>>> s = load("pcie-2gpu-nop2p")
>>> k = point_key(s, "nccl", 2**20, version="0.1.0")
>>> len(k), k == point_key(load("pcie-2gpu-nop2p", ["name=renamed"]), "nccl", 2**20, version="0.1.0")
(32, True)
>>> k == point_key(s, "nccl", 2**21, version="0.1.0")
False
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collsim.api import Simulator, input_files
from collsim.scenario import Scenario, ScenarioError, ScenarioWarning, load_scenario

__all__ = [
    "CACHE_SIZE",
    "PointResult",
    "PointTask",
    "TaskFunction",
    "collsim_version",
    "point_key",
    "remember_simulator",
    "run_point",
    "scenario_digest",
    "simulator_for",
]

#: Simulators a worker keeps (one per variant, most recently used).
CACHE_SIZE = 8


def collsim_version() -> str:
    """collsim's installed version (``importlib.metadata``), ``"unknown"`` when run from a tree without metadata."""
    try:
        from importlib.metadata import version

        return version("collsim")
    except Exception:
        return "unknown"


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def _file_digest(path: str) -> str:
    """``sha256:<hex>`` of a file's bytes, or the path itself when it cannot be read (the run will say why)."""
    try:
        return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return path


def scenario_digest(data: Mapping[str, Any]) -> str:
    """A hash of a resolved scenario's data (what a worker caches its simulator under)."""
    return hashlib.sha256(_canonical(data).encode()).hexdigest()[:32]


def _key_scenario(scenario: Scenario, backend: str) -> dict[str, Any]:
    """The resolved scenario without what cannot change ``backend``'s result at one size."""
    data = scenario.to_dict()
    for name in ("name", "description", "training"):
        data.pop(name, None)
    data.get("workload", {}).pop("sizes", None)
    data["backends"] = {backend: (data.get("backends") or {}).get(backend)}
    # every file the simulation reads enters by its content, not its path: a preset file or tuner CSV edited
    # between two runs must not find the earlier run's points (and a moved folder finds them still)
    files = {field: [_file_digest(str(p)) for p in paths] for field, paths in input_files(scenario).items()}
    if "cluster.node" in files:
        data["cluster"]["node"] = files.pop("cluster.node")[0]
    if "calibration" in files:
        data["calibration"] = files.pop("calibration")[0]
    if "preset_files" in files:
        data["preset_files"] = files.pop("preset_files")
    tuner = "backends.nccl.env.NCCL_TUNER_CONFIG_FILE"
    if tuner in files:  # the CSV by its content alone (to_dict made its path absolute: a moved folder finds it)
        (((data.get("backends") or {}).get("nccl") or {}).get("env") or {}).pop("NCCL_TUNER_CONFIG_FILE", None)
    data.update(files)  # the tuner's CSV, beside the variable naming it
    return data


def point_key(
    scenario: Scenario, backend: str, size: int, *, breakdown: bool = False, version: str | None = None
) -> str:
    """The store's key of one point: 32 hex digits of a SHA-256 (see the module docstring).

    Parameters
    ----------
    scenario : Scenario
        The point's resolved scenario.
    backend : str
        ``"nccl"`` or ``"gloo"``.
    size : int
        Bytes.
    breakdown : bool
        Whether the point keeps its time breakdown.
    version : str, optional
        Default: :func:`collsim_version`.
    """
    ident = {
        "scenario": _key_scenario(scenario, backend),
        "backend": backend,
        "size": int(size),
        "breakdown": bool(breakdown),
        "collsim": collsim_version() if version is None else version,
    }
    return hashlib.sha256(_canonical(ident).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class PointTask:
    """What a worker needs besides the scenario's data: which point, and the scenario's digest.

    Attributes
    ----------
    key : str
        The store's key (:func:`point_key`).
    digest : str
        :func:`scenario_digest` of the scenario data sent with it.
    backend : str
        ``"nccl"`` or ``"gloo"``.
    size : int
        Bytes.
    breakdown : bool
        Keep the time breakdown.
    collective : str or None
        Only this collective (default: every collective of the scenario).
    """

    key: str
    digest: str
    backend: str
    size: int
    breakdown: bool = False
    collective: str | None = None


@dataclass
class PointResult:
    """What a worker sends back for one point.

    Attributes
    ----------
    key : str
        The point's key.
    rows : list of dict
        One :meth:`collsim.results.Record.to_dict` per collective of the scenario; empty when ``error`` is set.
    error : str or None
        A scenario error the simulation raised (NCCL would refuse the choice ...): deterministic, so stored.
    seconds : float
        Wall time of the point on its worker, seconds (building the simulator included when it was built).
    worker : str
        ``host:pid`` of the process that ran it.
    """

    key: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    worker: str = ""


#: ``fn(scenario_data, task) -> PointResult``: what an executor runs per point (:func:`run_point`, or a wrapper).
TaskFunction = Callable[[Mapping[str, Any], PointTask], PointResult]

#: This process's simulators by scenario digest, most recently used last (a worker's cache; see the module
#: docstring). Forked workers inherit the parent's.
_SIMULATORS: OrderedDict[str, Simulator] = OrderedDict()


def remember_simulator(digest: str, sim: Simulator) -> None:
    """Keep ``sim`` as this process's simulator for ``digest`` (the oldest beyond :data:`CACHE_SIZE` dropped)."""
    _SIMULATORS[digest] = sim
    _SIMULATORS.move_to_end(digest)
    while len(_SIMULATORS) > CACHE_SIZE:
        _SIMULATORS.popitem(last=False)


def simulator_for(data: Mapping[str, Any], digest: str) -> Simulator:
    """This process's simulator of the scenario ``data`` (digest ``digest``): the one kept, or a new one (kept)."""
    sim = _SIMULATORS.get(digest)
    if sim is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ScenarioWarning)  # the driver showed them once when it validated
            sim = Simulator(load_scenario(data))
    remember_simulator(digest, sim)
    return sim


def run_point(scenario: Mapping[str, Any], task: PointTask) -> PointResult:
    """Simulate one point: every collective of ``scenario`` with ``task.backend`` at ``task.size`` bytes.

    A :class:`~collsim.scenario.ScenarioError` (a choice NCCL would refuse at this size ...) becomes the result's
    ``error``; any other exception propagates (a bug, not an answer).

    Examples
    --------
    >>> from collsim.api import load
    >>> data = load("pcie-2gpu-nop2p").to_dict()
    >>> r = run_point(data, PointTask("k", scenario_digest(data), "nccl", 2**20))
    >>> r.error, [round(row["busbw_gbps"], 1) for row in r.rows]
    (None, [5.3])
    """
    t0 = time.perf_counter()
    worker = f"{socket.gethostname()}:{os.getpid()}"
    try:
        sim = simulator_for(scenario, task.digest)
        rows = []
        for coll in [task.collective] if task.collective else sim.scenario.collectives():
            out = sim.simulate_one(task.backend, task.size, collective=coll, record=task.breakdown)
            out.records = []
            rows.append(sim.to_record(out).to_dict())
    except ScenarioError as exc:
        text = f"{exc.field}: {exc.message}" if exc.field else exc.message
        return PointResult(task.key, [], text, time.perf_counter() - t0, worker)
    return PointResult(task.key, rows, None, time.perf_counter() - t0, worker)
