"""The Python API behind the CLI: load a scenario, simulate it with each backend, compare, get records.

Examples
--------
>>> sim = Simulator.from_source("pcie-2gpu-nop2p", ["workload.sizes=1MiB"])
>>> [round(r.busbw_gbps, 1) for r in sim.run(backends=["nccl"]).records]
[3.8]
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import signal
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from collsim.backends import (
    BackendError,
    GlooConstants,
    GlooOptions,
    NcclConstants,
    NcclOptions,
    Outcome,
    plan_nccl,
    simulate_gloo,
    simulate_nccl,
)
from collsim.backends.nccl import NcclPlan, enabled_pairs, tuner_times
from collsim.results import REDUCING_COLLECTIVES, Record, make_record, records_to_dataframe
from collsim.scenario import Scenario, ScenarioError, load_scenario
from collsim.scenario.profile import Profile, load_profile
from collsim.topology import Topology, TopologyError, topologies_dir

__all__ = ["BACKENDS", "Comparison", "Simulator", "SweepResult", "load", "simulate"]

BACKENDS = ("nccl", "gloo")
Progress = Callable[[str, int, int, int], None]


def load(source: str | Path | Mapping[str, Any], overrides: Sequence[str] = ()) -> Scenario:
    """Load and validate a scenario from a file, a built-in name or a dict (see ``collsim.scenario.load_scenario``)."""
    return load_scenario(source, overrides)


def _software(name: str) -> dict[str, Any]:
    path = topologies_dir() / "software" / f"{name}.yaml"
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioError(f"cannot read backend constants: {exc}", file=str(path)) from None
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping of constants", file=str(path))
    return data


@dataclass
class SweepResult:
    """Records of a sweep (one per backend and size, in order), the raw outcomes, and whether it was interrupted."""

    scenario: Scenario
    records: list[Record] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    interrupted: bool = False

    def dataframe(self) -> Any:
        """The records as a pandas DataFrame (one row per backend and size)."""
        return records_to_dataframe(self.records)

    def by_backend(self, backend: str) -> list[Record]:
        """Records of one backend."""
        return [r for r in self.records if r.backend == backend]


@dataclass(frozen=True)
class Comparison:
    """NCCL against Gloo at one size: both records, the speedup, and where each spends its time."""

    size_bytes: int
    nccl: Record
    gloo: Record

    @property
    def speedup(self) -> float:
        """Gloo time / NCCL time."""
        return self.gloo.time_us / self.nccl.time_us if self.nccl.time_us > 0 else math.inf

    @staticmethod
    def shares(rec: Record) -> list[tuple[str, float]]:
        """Breakdown as (category, fraction of the time), largest first; the fractions add up to 1."""
        total = sum(rec.breakdown.values())
        if total <= 0:
            return []
        return sorted(((k, v / total) for k, v in rec.breakdown.items()), key=lambda kv: -kv[1])


@dataclass(frozen=True)
class Explanation:
    """NCCL's choice at one size: the cost model's time for every enabled (algorithm, protocol) pair, the pair it
    picks, and simulated times (of the choice, or of every pair)."""

    collective: str
    size_bytes: int
    model_s: dict[tuple[str, str], float]
    choice: tuple[str, str]
    simulated_s: dict[tuple[str, str], float]

    @property
    def simulated_best(self) -> tuple[str, str] | None:
        """The pair the simulation finds fastest (when every pair was simulated)."""
        if len(self.simulated_s) < 2:
            return None
        return min(self.simulated_s, key=lambda k: self.simulated_s[k])

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form."""
        return {
            "collective": self.collective,
            "size_bytes": self.size_bytes,
            "choice": {"algorithm": self.choice[0], "protocol": self.choice[1]},
            "pairs": [
                {
                    "algorithm": a,
                    "protocol": p,
                    "model_us": t * 1e6,
                    "simulated_us": (self.simulated_s[(a, p)] * 1e6 if (a, p) in self.simulated_s else None),
                }
                for (a, p), t in self.model_s.items()
            ],
        }


class Simulator:
    """A scenario made ready to simulate: its topology, each backend's options, constants and plan.

    Parameters
    ----------
    scenario : Scenario
        A validated scenario (see :func:`load`).
    profile : Profile, optional
        Calibration to apply; default: the profile the scenario's ``calibration`` field names, if any.
    """

    def __init__(self, scenario: Scenario, profile: Profile | None = None) -> None:
        self.scenario = scenario
        file = scenario.source_file
        cal = scenario.calibration_path()
        self.profile: Profile | None = profile if profile is not None else (load_profile(cal) if cal else None)
        try:
            self.topology: Topology = scenario.build_topology()
        except TopologyError as exc:
            field_ = "cluster" + (f".{exc.field}" if exc.field and not str(exc.field).startswith("cluster") else "")
            where = f"{exc.file}: " if exc.file and exc.file != file else ""
            raise ScenarioError(f"{where}{exc.message}", file=file, field=field_) from None
        if self.profile is not None:
            self.topology = self.profile.apply_topology(self.topology)
        per_node = sum(1 for d in self.topology.rank_devices() if d.node == 0)
        if scenario.workload.gpus_per_process > per_node:
            raise ScenarioError(
                f"expected at most the {per_node} ranks of one node, got {scenario.workload.gpus_per_process}",
                file=file,
                field="workload.gpus_per_process",
            )
        nccl = scenario.backends.nccl
        user_env = dict(nccl.env) if nccl else {}
        #: NCCL variables the NICs' network plugin sets because the scenario leaves them unset (NIC preset field
        #: ``nccl_plugin_env``; the plugin loads at NCCL's init, so a one-node run gets them too)
        self.nccl_plugin_env: dict[str, str] = {}
        for nic in self.topology.nics():
            for key, value in (nic.spec.get("nccl_plugin_env") or {}).items():
                if key not in user_env:
                    self.nccl_plugin_env.setdefault(key, value)
        try:
            self.nccl_options = dataclasses.replace(
                NcclOptions.from_env({**self.nccl_plugin_env, **user_env}),
                gpus_per_process=scenario.workload.gpus_per_process,
            )
        except BackendError as exc:
            raise ScenarioError(str(exc), file=file, field="backends.nccl.env") from None
        gloo = scenario.backends.gloo
        self.gloo_options = (
            GlooOptions(algorithm=gloo.algorithm, device=gloo.device, transport=getattr(gloo, "transport", "tcp"))
            if gloo
            else GlooOptions()
        )
        self.fabric = scenario.topology_kwargs().get("fabric") or {}

    @classmethod
    def from_source(
        cls, source: str | Path | Mapping[str, Any], overrides: Sequence[str] = (), profile: Profile | None = None
    ) -> Simulator:
        """Load a scenario (file, built-in name or dict), apply ``--set`` style overrides, and prepare it."""
        return cls(load(source, overrides), profile)

    @cached_property
    def nccl_constants(self) -> NcclConstants:
        """NCCL's constants from ``topologies/software/nccl.yaml`` (with the calibration profile's overheads)."""
        consts = NcclConstants.from_mapping(_software("nccl"))
        return self.profile.apply_nccl(consts) if self.profile else consts

    @cached_property
    def gloo_constants(self) -> GlooConstants:
        """Gloo's constants from ``topologies/software/gloo.yaml`` (with the calibration profile's overheads)."""
        consts = GlooConstants.from_mapping(_software("gloo"))
        return self.profile.apply_gloo(consts) if self.profile else consts

    @cached_property
    def nccl_plan(self) -> NcclPlan:
        """Channels, rings and transports NCCL would use on this topology."""
        try:
            return plan_nccl(self.topology, self.nccl_options, self.nccl_constants, self.fabric)
        except BackendError as exc:
            raise ScenarioError(str(exc), file=self.scenario.source_file, field="backends.nccl") from None

    def backends(self) -> list[str]:
        """Backends the scenario enables, in order nccl, gloo."""
        return [b for b in self.scenario.backend_names() if b in BACKENDS]

    def simulate_one(
        self,
        backend: str,
        size: int,
        *,
        collective: str | None = None,
        record: bool = False,
        choice: tuple[str, str] | None = None,
    ) -> Outcome:
        """Simulate one collective of ``size`` bytes with ``backend`` ("nccl" or "gloo").

        ``choice`` forces NCCL's (algorithm, protocol) instead of its cost model's pick."""
        coll = collective or self.scenario.collectives()[0]
        sym = self.scenario.engine.symmetry
        try:
            if backend == "nccl":
                return simulate_nccl(
                    self.topology,
                    self.nccl_options,
                    self.nccl_constants,
                    size,
                    collective=coll,
                    fabric=self.fabric,
                    plan=self.nccl_plan,
                    symmetry=sym,
                    record=record,
                    choice=choice,
                )
            if backend == "gloo":
                return simulate_gloo(
                    self.topology,
                    self.gloo_options,
                    self.gloo_constants,
                    size,
                    collective=coll,
                    symmetry=sym,
                    record=record,
                )
        except BackendError as exc:
            raise ScenarioError(str(exc), file=self.scenario.source_file, field=f"backends.{backend}") from None
        raise ScenarioError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}", field="backend")

    def to_record(self, out: Outcome) -> Record:
        """The nccl-tests style record of an outcome."""
        return make_record(
            backend=out.backend,
            collective=out.collective,
            algorithm=out.algorithm,
            protocol=out.protocol,
            nranks=out.nranks,
            dtype=self.scenario.workload.dtype,
            size_bytes=out.size_bytes,
            time_s=out.time_s,
            redop=self.scenario.workload.op if out.collective in REDUCING_COLLECTIVES else None,
            root=0 if out.collective in ("broadcast", "reduce") else -1,
            channels=out.channels,
            breakdown=out.breakdown,
            notes=out.notes,
        )

    def run(
        self,
        backends: Sequence[str] | None = None,
        sizes: Sequence[int] | None = None,
        *,
        record: bool = False,
        breakdown: bool = False,
        progress: Progress | None = None,
        jobs: int = 1,
    ) -> SweepResult:
        """Simulate every size with every backend; Ctrl-C stops cleanly and keeps the rows already computed.

        Parameters
        ----------
        backends : sequence of str, optional
            Default: the scenario's enabled backends.
        sizes : sequence of int, optional
            Bytes; default: the scenario's ``workload.sizes``.
        record : bool
            Keep every flow (for traces); implies ``breakdown``.
        breakdown : bool
            Attribute each collective's time to activities (records' ``breakdown``).
        progress : callable, optional
            Called as ``progress(backend, size, index, total)`` before each simulation (with ``jobs > 1``, as
            each one finishes).
        jobs : int
            Worker processes (each simulates whole (backend, size) points; results and their order are the same
            as with 1). ``0`` means one per CPU. Needs the ``fork`` start method (Linux, macOS); elsewhere 1.
        """
        todo = [
            (b, s)
            for b in (self.backends() if backends is None else backends)
            for s in (self.scenario.sizes() if sizes is None else sizes)
        ]
        result = SweepResult(self.scenario)
        keep = record or breakdown
        done, result.interrupted = self.map_points(
            lambda i: self._point(todo[i][0], todo[i][1], keep, record),
            len(todo),
            jobs,
            sizes=[s for _b, s in todo],
            progress=(lambda i, n: progress(todo[i][0], todo[i][1], n, len(todo))) if progress else None,
        )
        for i in sorted(done):
            for out in done[i]:
                result.outcomes.append(out)
                result.records.append(self.to_record(out))
        return result

    def _point(self, backend: str, size: int, keep: bool, record: bool) -> list[Outcome]:
        """Every collective of the scenario at one (backend, size); flow records dropped unless ``record``."""
        outs = []
        for coll in self.scenario.collectives():
            out = self.simulate_one(backend, size, collective=coll, record=keep)
            if not record:
                out.records = []
            outs.append(out)
        return outs

    def explain(
        self,
        sizes: Sequence[int] | None = None,
        *,
        all_pairs: bool = False,
        progress: Progress | None = None,
        jobs: int = 1,
    ) -> tuple[list[Explanation], bool]:
        """NCCL's cost model per size for every enabled pair, its choice, and the simulated time of the choice
        (of every pair with ``all_pairs``); returns (rows, interrupted). ``jobs`` as in :meth:`run`."""
        sizes = self.scenario.sizes() if sizes is None else sizes
        todo = [(c, s) for c in self.scenario.collectives() for s in sizes]
        done, interrupted = self.map_points(
            lambda i: self._explain_point(*todo[i], all_pairs),
            len(todo),
            jobs,
            sizes=[s for _c, s in todo],
            progress=(lambda i, n: progress("nccl", todo[i][1], n, len(todo))) if progress else None,
        )
        return [done[i] for i in sorted(done)], interrupted

    def map_points(
        self,
        task: Callable[[int], Any],
        count: int,
        jobs: int = 1,
        *,
        sizes: Sequence[int] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[dict[int, Any], bool]:
        """``{i: task(i)}`` for ``i`` in ``range(count)`` and whether Ctrl-C stopped it early (the dict then holds
        the points that finished).

        With ``jobs`` 1, here, in order, ``progress(i, n)`` before the n-th point. Otherwise (0: one per CPU) in
        forked workers that inherit ``task`` and this simulator (its topology and NCCL plan are built before they
        fork), largest ``sizes`` first to balance them, ``progress(i, n)`` as the n-th point finishes.
        """
        jobs = _workers(jobs, count)
        done: dict[int, Any] = {}
        try:
            if jobs <= 1:
                for i in range(count):
                    if progress:
                        progress(i, i)
                    done[i] = task(i)
                return done, False
            _ = self.topology
            if "nccl" in self.backends():
                _ = self.nccl_plan
            order = sorted(range(count), key=lambda i: -sizes[i]) if sizes is not None else range(count)
            points = _forked_map(task, order, jobs)
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

    def _explain_point(self, coll: str, size: int, all_pairs: bool) -> Explanation:
        """One (collective, size) of :meth:`explain`."""
        plan = self.nccl_plan
        try:
            pairs = enabled_pairs(plan, self.nccl_options, coll)
            model = tuner_times(plan, self.nccl_constants, coll, size, self.nccl_options)
            model = {k: v for k, v in model.items() if k in pairs}
            choice = min(model, key=lambda k: model[k])
            sim: dict[tuple[str, str], float] = {}
            for pair in model if all_pairs else [choice]:
                sim[pair] = self.simulate_one("nccl", size, collective=coll, choice=pair).time_s
        except BackendError as exc:
            raise ScenarioError(str(exc), file=self.scenario.source_file, field="backends.nccl") from None
        return Explanation(coll, size, model, choice, sim)

    def compare(
        self, sizes: Sequence[int] | None = None, *, progress: Progress | None = None, jobs: int = 1
    ) -> tuple[list[Comparison], bool]:
        """NCCL and Gloo side by side per size, with time breakdowns; returns (rows, interrupted). ``jobs`` as in
        :meth:`run`."""
        sweep = self.run(backends=list(BACKENDS), sizes=sizes, breakdown=True, progress=progress, jobs=jobs)
        nccl = {(r.collective, r.size_bytes): r for r in sweep.by_backend("nccl")}
        gloo = {(r.collective, r.size_bytes): r for r in sweep.by_backend("gloo")}
        rows = [Comparison(k[1], nccl[k], gloo[k]) for k in nccl if k in gloo]
        return rows, sweep.interrupted


_TASK: Callable[[int], Any] | None = None  # what forked workers run, set by _forked_map before it forks


def _workers(jobs: int, count: int) -> int:
    """Worker processes for ``count`` points: ``jobs`` (0: one per CPU), at most ``count``; 1 (serial) when fork
    is not available."""
    jobs = (os.cpu_count() or 1) if jobs == 0 else jobs
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(jobs, count))


def _forked_map(task: Callable[[int], Any], order: Sequence[int], jobs: int) -> Generator[tuple[int, Any], None, None]:
    """``(i, task(i))`` for every ``i`` of ``order``, computed by ``jobs`` forked worker processes, as they finish
    (they start in ``order``).

    The workers inherit ``task`` (nothing is pickled but indices and results) and ignore SIGINT: Ctrl-C, or a
    KeyboardInterrupt inside a worker, raises KeyboardInterrupt here, after the points already running have
    finished (one simulation each) and the others are cancelled.
    """
    global _TASK
    _TASK = task
    pool = ProcessPoolExecutor(
        max_workers=min(jobs, len(order)), mp_context=multiprocessing.get_context("fork"), initializer=_ignore_sigint
    )
    finished = False
    try:
        futures = [pool.submit(_run_task, i) for i in order]
        for fut in as_completed(futures):
            i, out, interrupted = fut.result()
            if interrupted:
                raise KeyboardInterrupt
            yield i, out
        finished = True
    finally:
        pool.shutdown(wait=True, cancel_futures=not finished)
        _TASK = None


def _run_task(i: int) -> tuple[int, Any, bool]:
    """In a forked worker: ``_TASK(i)``, and whether it was interrupted."""
    assert _TASK is not None
    try:
        return i, _TASK(i), False
    except KeyboardInterrupt:
        return i, None, True


def _ignore_sigint() -> None:
    """Pool initializer: Ctrl-C is the parent's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def simulate(
    source: str | Path | Mapping[str, Any] | Scenario, overrides: Sequence[str] = (), **kwargs: Any
) -> SweepResult:
    """Load (unless given a Scenario) and run a scenario's sweep; keyword arguments go to :meth:`Simulator.run`."""
    scenario = source if isinstance(source, Scenario) else load(source, overrides)
    return Simulator(scenario).run(**kwargs)
