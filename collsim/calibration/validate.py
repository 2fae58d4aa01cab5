"""Predicted against measured, per size and per size band: collsim's error, reported, never hidden.

Errors are relative to the measurement: time error = (predicted - measured) / measured, busbw error =
(predicted busbw - measured busbw) / measured busbw = measured time / predicted time - 1. Bands follow what limits a
collective: latency-bound (< 64 KiB), in between (64 KiB - 16 MiB), bandwidth-bound (>= 16 MiB).

Examples
--------
>>> rows = [ValidationRow(1024, 10.0, 11.0, 0.1, 0.2), ValidationRow(2**30, 1000.0, 900.0, 2000.0, 2222.2)]
>>> [round(r.time_error_pct, 1) for r in rows], [round(r.busbw_error_pct, 1) for r in rows]
([10.0, -10.0], [-9.1, 11.1])
>>> [(b.band, b.count) for b in summarise_bands(rows)]
[('< 64 KiB', 1), ('64 KiB - 16 MiB', 0), ('>= 16 MiB', 1)]
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from collsim.calibration.calls import RECORDERS
from collsim.calibration.measurement import (
    Measurement,
    MeasurementError,
    MeasurementRow,
    calls_info,
    recorded_pairs,
    straggler_text,
    uneven_hosts,
)
from collsim.nccl_env import INERT_NCCL_ENV, KNOWN_NCCL_ENV, PLUGIN_ENV, NcclEnvError, NcclOptions
from collsim.results import busbw_factor
from collsim.units import format_size
from collsim.vocab import COLLECTIVES, GLOO_ALGORITHMS

if TYPE_CHECKING:  # the simulator is only needed to predict; importing it here keeps module loading light
    from collsim.api import Simulator

__all__ = [
    "BANDS",
    "BandSummary",
    "Validation",
    "ValidationRow",
    "band_label",
    "batching_note",
    "check_ranks",
    "dtype_note",
    "env_note",
    "gloo_env_note",
    "gpu_note",
    "measurement_backend",
    "nearest_pair",
    "predict_times",
    "summarise",
    "summarise_bands",
    "timing_note",
    "validate",
    "workload_notes",
]

_KIB = 1024
_MIB = 1024 * 1024
#: (label, lower bound inclusive, upper bound exclusive) in bytes.
BANDS: tuple[tuple[str, float, float], ...] = (
    ("< 64 KiB", 0, 64 * _KIB),
    ("64 KiB - 16 MiB", 64 * _KIB, 16 * _MIB),
    (">= 16 MiB", 16 * _MIB, math.inf),
)


@dataclass(frozen=True)
class ValidationRow:
    """One size: measured and predicted time (us) and busbw (GB/s, GB = 1e9 bytes); for NCCL also the time NCCL's
    own cost model gives the pair it picks (``model_us``), so both can be held against the measurement; with
    ``validate(pairs=True)`` the simulated pair (NCCL's (algorithm, protocol); Gloo's allreduce algorithm) nearest
    the measured time (``nearest_*``): which one the run behaves like."""

    size_bytes: int
    measured_us: float
    predicted_us: float
    measured_busbw_gbps: float
    predicted_busbw_gbps: float
    algorithm: str = ""
    protocol: str = ""
    model_us: float | None = None
    nearest_algorithm: str = ""
    nearest_protocol: str = ""
    nearest_us: float | None = None

    @property
    def nearest_error_pct(self) -> float | None:
        """(nearest pair's simulated - measured) / measured time, percent; None without ``validate(pairs=True)``."""
        return None if self.nearest_us is None else (self.nearest_us / self.measured_us - 1.0) * 100.0

    @property
    def model_error_pct(self) -> float | None:
        """(NCCL's cost model - measured) / measured time, percent; None without a model time."""
        return None if self.model_us is None else (self.model_us / self.measured_us - 1.0) * 100.0

    @property
    def time_error_pct(self) -> float:
        """(predicted - measured) / measured time, percent."""
        return (self.predicted_us / self.measured_us - 1.0) * 100.0

    @property
    def busbw_error_pct(self) -> float:
        """(predicted - measured) / measured busbw, percent (= measured / predicted time - 1)."""
        return (self.measured_us / self.predicted_us - 1.0) * 100.0


@dataclass(frozen=True)
class BandSummary:
    """Median and maximum absolute errors (percent) of the rows in one size band."""

    band: str
    count: int
    median_abs_time_error_pct: float | None
    max_abs_time_error_pct: float | None
    median_abs_busbw_error_pct: float | None
    max_abs_busbw_error_pct: float | None
    median_time_error_pct: float | None = None  # signed: negative = collsim faster than measured
    median_model_error_pct: float | None = None  # signed, NCCL's cost model (rows that have one)


def summarise(label: str, rows: Sequence[ValidationRow]) -> BandSummary:
    """Median and max absolute time and busbw errors of ``rows``, and the signed medians of collsim's and NCCL's
    cost model's time errors (None when there are none)."""
    if not rows:
        return BandSummary(label, 0, None, None, None, None)
    t = [abs(r.time_error_pct) for r in rows]
    b = [abs(r.busbw_error_pct) for r in rows]
    models = [e for e in (r.model_error_pct for r in rows) if e is not None]
    return BandSummary(
        label,
        len(rows),
        statistics.median(t),
        max(t),
        statistics.median(b),
        max(b),
        statistics.median(r.time_error_pct for r in rows),
        statistics.median(models) if models else None,
    )


def summarise_bands(rows: Sequence[ValidationRow]) -> list[BandSummary]:
    """One :class:`BandSummary` per band of :data:`BANDS` (empty bands have count 0 and None errors)."""
    return [summarise(label, [r for r in rows if lo <= r.size_bytes < hi]) for label, lo, hi in BANDS]


@dataclass
class Validation:
    """Predicted against measured for one measurement on one scenario."""

    scenario: str
    measurement: str
    backend: str
    collective: str
    nranks: int
    rows: list[ValidationRow] = field(default_factory=list)
    profile: str | None = None
    notes: list[str] = field(default_factory=list)

    def bands(self) -> list[BandSummary]:
        """Errors per size band."""
        return summarise_bands(self.rows)

    def overall(self) -> BandSummary:
        """Errors over every size."""
        return summarise("all sizes", self.rows)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: header, ``rows`` (with error percentages) and ``bands`` (plus ``overall``)."""
        return {
            "scenario": self.scenario,
            "measurement": self.measurement,
            "backend": self.backend,
            "collective": self.collective,
            "nranks": self.nranks,
            "profile": self.profile,
            "notes": list(self.notes),
            "rows": [
                {
                    **asdict(r),
                    "time_error_pct": r.time_error_pct,
                    "busbw_error_pct": r.busbw_error_pct,
                    "model_error_pct": r.model_error_pct,
                    "nearest_error_pct": r.nearest_error_pct,
                }
                for r in self.rows
            ],
            "bands": [asdict(b) for b in self.bands()],
            "overall": asdict(self.overall()),
        }

    def format_table(self) -> str:
        """Per-size table and the band summary, as text (with NCCL's cost model's time and error for NCCL)."""
        model = any(r.model_us is not None for r in self.rows)
        nearest = any(r.nearest_us is not None for r in self.rows)
        head = (
            f"# validate: {self.scenario} against {self.measurement} ({self.backend} {self.collective}, "
            f"{self.nranks} ranks{', profile ' + self.profile if self.profile else ''})\n"
            f"#       size  measured us  predicted us   err %   meas busbw  pred busbw   err %  algo/proto"
            + ("        NCCL model us   err %" if model else "")
            + ("  nearest simulated      us   err %" if nearest else "")
            + "\n"
        )
        head = "".join(f"# note: {n}\n" for n in self.notes) + head
        lines = []
        for r in self.rows:
            line = (
                f"{r.size_bytes:>12}  {r.measured_us:>11.2f}  {r.predicted_us:>12.2f}  {r.time_error_pct:>+6.1f}"
                f"  {r.measured_busbw_gbps:>11.2f} {r.predicted_busbw_gbps:>11.2f}  {r.busbw_error_pct:>+6.1f}"
                f"  {r.algorithm + '/' + r.protocol:<16}"
            )
            if r.model_us is not None and r.model_error_pct is not None:
                line += f"  {r.model_us:>11.2f}  {r.model_error_pct:>+6.1f}"
            elif model and nearest:
                line += " " * 21
            if r.nearest_us is not None and r.nearest_error_pct is not None:
                pair = r.nearest_algorithm + (f"/{r.nearest_protocol}" if r.nearest_protocol else "")
                line += f"  {pair:<16} {r.nearest_us:>10.2f}  {r.nearest_error_pct:>+6.1f}"
            lines.append(line.rstrip())
        summary = [
            "#",
            "# band              sizes  median |time err|  max |time err|  median |busbw err|  max    signed median"
            + " time err: collsim" + (" | NCCL's model" if model else ""),
        ]
        for b in [*self.bands(), self.overall()]:
            if b.count == 0:
                summary.append(f"# {b.band:<17} {0:>5}  -")
                continue
            line = (
                f"# {b.band:<17} {b.count:>5}  {b.median_abs_time_error_pct:>16.1f}%"
                f"  {b.max_abs_time_error_pct:>13.1f}%"
                f"  {b.median_abs_busbw_error_pct:>17.1f}%  {b.max_abs_busbw_error_pct:>5.1f}%"
                f"  {b.median_time_error_pct:>+31.1f}%"
            )
            if b.median_model_error_pct is not None:
                line += f" | {b.median_model_error_pct:>+11.1f}%"
            summary.append(line)
        if nearest:
            same = sum(1 for r in self.rows if (r.nearest_algorithm, r.nearest_protocol) == (r.algorithm, r.protocol))
            summary.append(f"# nearest simulated pair: the one collsim ran at {same} of {len(self.rows)} sizes")
        return head + "\n".join(lines + summary) + "\n"


def measurement_backend(sim: Simulator, m: Measurement) -> str:
    """The backend to simulate for ``m``: its own (which the scenario must enable), else the first enabled; a
    :class:`MeasurementError` naming the file where there is none, or where ``m`` is of a collective collsim does
    not simulate (nccl-tests' gather, scatter)."""
    if m.collective not in COLLECTIVES:
        raise MeasurementError(f"the measurement is {m.collective}, which collsim does not simulate (it simulates "
                               f"{', '.join(COLLECTIVES)})", file=m.file, field="collective")  # fmt: skip
    enabled = sim.backends()
    if m.backend is not None:
        if m.backend not in enabled:
            raise MeasurementError(
                f"the measurement is {m.backend} but the scenario enables {', '.join(enabled) or 'no backend'}",
                file=m.file,
                field="backend",
            )
        return m.backend
    if not enabled:
        raise MeasurementError("the scenario enables no backend to compare with", file=m.file, field="backend")
    return enabled[0]


def check_ranks(sim: Simulator, m: Measurement) -> int:
    """The scenario's rank count; a :class:`MeasurementError` when ``m`` says it ran on another."""
    nranks = len(sim.topology.rank_devices())
    if m.nranks is not None and m.nranks != nranks:
        raise MeasurementError(f"the measurement has {m.nranks} ranks, the scenario {nranks}", file=m.file,
                               field="nranks")
    return nranks


def predict_times(
    sim: Simulator, m: Measurement, sizes: Sequence[int] | None = None, backend: str | None = None
) -> list[tuple[float, str, str, float | None]]:
    """Simulated (seconds, algorithm, protocol, NCCL's cost-model seconds or None) for each size (default: every
    size of ``m``).

    Raises
    ------
    MeasurementError
        When the measurement's rank count or backend does not match the scenario.
    """
    check_ranks(sim, m)
    b = backend or measurement_backend(sim, m)
    out = []
    for s in m.sizes() if sizes is None else sizes:
        o = sim.simulate_one(b, s, collective=m.collective)
        model = o.predicted_s if o.predicted_s is not None and math.isfinite(o.predicted_s) else None
        out.append((o.time_s, o.algorithm, o.protocol, model))
    return out


def nearest_pair(
    sim: Simulator, m: Measurement, size: int, measured_us: float, backend: str, ran: tuple[str, str, float]
) -> tuple[str, str, float]:
    """The simulated (algorithm, protocol, us) nearest ``measured_us`` at ``size`` bytes (nearest in ratio, so 10%
    slow and 10% fast weigh alike): every pair NCCL may pick for ``m``'s collective (after the scenario's NCCL_ALGO
    and NCCL_PROTO), each forced; for Gloo every allreduce algorithm (other collectives have one schedule, the one
    simulated). Which pair a run behaves like, where the measurement does not say what NCCL picked. ``ran`` is the
    (algorithm, protocol, us) the run itself simulated at this size: not simulated again.
    """
    if backend == "nccl":
        from collsim.backends.nccl import enabled_pairs

        keys = enabled_pairs(sim.nccl_plan, sim.nccl_options, m.collective)
    elif m.collective == "allreduce":
        keys = [(a, ran[1]) for a in GLOO_ALGORITHMS]  # a Gloo "protocol" is its transport and device
    else:
        return ran
    runs = []
    for algo, proto in keys:
        if (algo, proto) == ran[:2]:
            runs.append(ran)
            continue
        if backend == "nccl":
            o = sim.simulate_one("nccl", size, collective=m.collective, choice=(algo, proto))
        else:
            o = sim.simulate_one("gloo", size, collective=m.collective, gloo_algorithm=algo)
        runs.append((o.algorithm, o.protocol, o.time_s * 1e6))  # seconds to microseconds
    return min(runs, key=lambda r: abs(math.log(r[2] / measured_us)))


def _logged_run(
    sim: Simulator,
    m: Measurement,
    size: int,
    logged: Mapping[int, tuple[str, str]],
    offered: Collection[tuple[str, str]],
    refused: set[str],
) -> tuple[float, str, str, float | None] | None:
    """The size simulated with the pair NCCL's log says it ran, as :func:`predict_times` gives a row; None where
    the log says nothing at this size or the scenario cannot run that pair (not among ``offered``, the pairs
    collsim's NCCL enables for the collective; then ``refused`` gets a note why)."""
    pair = logged.get(size)
    if pair is None:
        return None
    if pair not in offered:
        why = "its hardware, NCCL_ALGO/NCCL_PROTO, backends.nccl.version"
        refused.add(f"the run's {'/'.join(pair)} is not a pair collsim's NCCL offers for {m.collective} on this "
                    f"scenario ({why}): collsim's pick there")  # fmt: skip
        return None
    o = sim.simulate_one("nccl", size, collective=m.collective, choice=pair)
    model = o.predicted_s if o.predicted_s is not None and math.isfinite(o.predicted_s) else None
    return o.time_s, o.algorithm, o.protocol, model


def _compared_rows(
    m: Measurement, nranks: int, sizes: Sequence[int] | None
) -> tuple[list[MeasurementRow], list[int]]:
    """The measured rows to compare (those of ``sizes``, if given) and the sizes of no elements on ``nranks`` ranks,
    which NCCL returns from at once (left out). None left is an error: an empty table would read as a pass."""
    empty = m.empty_sizes(nranks)
    wanted = None if sizes is None else set(sizes)
    rows = [r for r in m.rows if (wanted is None or r.size_bytes in wanted) and r.size_bytes not in empty]
    if not rows:
        why = (f"every row is below one element on {nranks} ranks" if wanted is None or set(m.sizes()) & wanted
               else "none of the sizes asked for is in it")  # fmt: skip
        raise MeasurementError(f"no size to compare ({why})", file=m.file)
    return rows, empty


def _row(
    r: MeasurementRow, factor: float, got: tuple[float, str, str, float | None], near: tuple[str, str, float] | None
) -> ValidationRow:
    """A measured row beside its simulation ``got`` (seconds, algorithm, protocol, NCCL's model seconds) and the
    nearest pair (with ``pairs``); busbw with nccl-tests' ``factor``."""
    t, algo, proto, model_s = got
    pred_us = t * 1e6  # seconds to microseconds
    return ValidationRow(
        size_bytes=r.size_bytes,
        measured_us=r.time_us,
        predicted_us=pred_us,
        measured_busbw_gbps=r.size_bytes * factor / r.time_us / 1e3,  # bytes/us = 1e-3 GB/s
        predicted_busbw_gbps=r.size_bytes * factor / pred_us / 1e3,
        algorithm=algo,
        protocol=proto,
        model_us=None if model_s is None else model_s * 1e6,  # seconds to microseconds
        nearest_algorithm=near[0] if near else "",
        nearest_protocol=near[1] if near else "",
        nearest_us=near[2] if near else None,
    )


def validate(
    sim: Simulator,
    m: Measurement,
    *,
    sizes: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
    pairs: bool = False,
    logged: Mapping[int, tuple[str, str]] | None = None,
    logged_by: str = "NCCL's log",
    logged_notes: Sequence[str] = (),
    jobs: int = 1,
) -> Validation:
    """Simulate every measured size of ``m`` on ``sim`` and compare.

    Parameters
    ----------
    sim : Simulator
        The scenario (with its calibration profile, if any).
    m : Measurement
        Measured times; its backend (nccl or gloo) is simulated, or the scenario's first enabled backend.
    sizes : sequence of int, optional
        Only these measured sizes (bytes).
    progress : callable, optional
        Called as ``progress(done, total)``.
    pairs : bool
        Also simulate every pair NCCL may pick (Gloo: every allreduce algorithm) at each size and keep the one
        nearest the measurement (:func:`nearest_pair`; the ``nearest_*`` fields of each row). Costs one
        simulation per pair and size.
    logged : mapping, optional
        NCCL's own (algorithm, protocol) by size, from an ``NCCL_DEBUG_SUBSYS=TUNING`` log of the run
        (:func:`~collsim.calibration.nccllog.logged_pairs`): those sizes simulate the pair NCCL ran instead of the
        one collsim's copy of its tuner picks, and a note says how many; a pair the scenario cannot run is noted and
        left to collsim's pick.
    logged_by : str
        What ``logged`` came from, for the note (``NCCL's log``; ``the measurement's record`` for
        :func:`~collsim.calibration.measurement.recorded_pairs`).
    logged_notes : sequence of str
        Notes on where ``logged`` came from (:meth:`~collsim.calibration.nccllog.NcclInitLog.run_notes`), kept
        with the validation's.
    jobs : int
        Worker processes over the sizes (:meth:`Simulator.map_points`; 1: here, in order; 0: one per CPU). The
        rows are the same whatever the count.

    Raises
    ------
    KeyboardInterrupt
        When Ctrl-C stops the workers (no partial validation is returned).
    MeasurementError
        For a measurement of a collective collsim does not simulate (nccl-tests' gather, scatter) or of a backend the
        scenario does not enable (:func:`measurement_backend`), naming its file.
    """
    backend = measurement_backend(sim, m)
    nranks = len(sim.topology.rank_devices())
    factor = busbw_factor(m.collective, nranks)
    rows, empty = _compared_rows(m, nranks, sizes)
    out: list[ValidationRow] = []
    ran_logged, refused = 0, set[str]()
    offered: set[tuple[str, str]] = set()
    if backend == "nccl" and logged:
        from collsim.backends.nccl import enabled_pairs

        offered = set(enabled_pairs(sim.nccl_plan, sim.nccl_options, m.collective))

    def point(i: int) -> tuple[tuple[float, str, str, float | None], bool, set[str], tuple[str, str, float] | None]:
        """Row ``i``'s simulation: (seconds, algorithm, protocol, model seconds), whether NCCL's logged pair ran,
        the notes of a logged pair refused, and the nearest pair (with ``pairs``)."""
        r = rows[i]
        why: set[str] = set()
        forced = _logged_run(sim, m, r.size_bytes, logged, offered, why) if backend == "nccl" and logged else None
        (got,) = [forced] if forced else predict_times(sim, m, [r.size_bytes], backend)
        near = nearest_pair(sim, m, r.size_bytes, r.time_us, backend, (got[1], got[2], got[0] * 1e6)) if pairs else None
        return got, forced is not None, why, near

    tick = None if progress is None else (lambda _i, n: progress(n, len(rows)))  # (done, total), as before
    done, stopped = sim.map_points(point, len(rows), jobs, sizes=[r.size_bytes for r in rows], progress=tick)
    if stopped:
        raise KeyboardInterrupt
    for i, r in enumerate(rows):
        got, was_logged, why, near = done[i]
        ran_logged += was_logged
        refused |= why
        out.append(_row(r, factor, got, near))
    prof = sim.profile.file if sim.profile is not None else None
    notes = _scenario_notes(sim, m, backend, out, empty)
    if logged is not None:
        notes += _logged_notes(m.collective, bool(logged), ran_logged, len(out), refused, logged_by, logged_notes)
    return Validation(
        scenario=sim.scenario.name,
        measurement=m.file,
        backend=backend,
        collective=m.collective,
        nranks=nranks,
        rows=out,
        profile=prof,
        notes=[n for n in notes if n],
    )


def _logged_notes(
    collective: str, any_logged: bool, ran: int, total: int, refused: set[str], logged_by: str,
    about: Sequence[str],
) -> list[str]:  # fmt: skip
    """What a log of NCCL's choices did (how many sizes ran its pair, the pairs refused), or that it records none
    for ``collective`` (every size then collsim's pick: said, not a plain validate unsaid); then ``about``, the
    notes on the log itself (its communicator, its release)."""
    if any_logged:
        head = [f"{ran} of {total} sizes simulated with the (algorithm, protocol) {logged_by} says it ran; the others "
                "with collsim's pick", *sorted(refused)]  # fmt: skip
    else:
        head = [f"{logged_by} records no (algorithm, protocol) NCCL chose for {collective} (NCCL prints them with "
                "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING, or INIT,TUNING): every size simulated with collsim's pick"]
    return [*head, *about]


def _scenario_notes(
    sim: Simulator, m: Measurement, backend: str, out: Sequence[ValidationRow], empty: Sequence[int]
) -> list[str | None]:
    """What the measurement records that the scenario does not say alike (harness, timing, type, tensors' device,
    GPU, recorded calls, collective and ``-g``; NCCL's release, variables and the release's own notes), and the
    sizes of no elements left out; None where a note has nothing to say."""
    gpus = {str(g.spec.get("preset")) for g in sim.topology.gpus()}
    workload = sim.scenario.workload
    gloo = sim.scenario.backends.gloo
    device = (gloo.device if gloo is not None else None) if backend == "gloo" else "cuda"
    notes = [harness_note(m, backend, workload.host_overhead), timing_note(m), batching_note(m),
             dtype_note(m, workload.dtype),
             device_note(m, backend, device),
             gpu_note(m, sim.scenario.preset_library(), gpus),
             placement_note(m, sim.topology.nodes, sim.topology.hosts_per_node()),
             *call_notes(m, out, workload.dtype, workload.host_overhead),
             *workload_notes(m, workload.collective, workload.gpus_per_process, workload.op, workload.root),
             *sim.profile_notes]  # fmt: skip
    if sim.profile is not None:  # a profile's parameters of the other backend change nothing measured here
        other = "gloo" if backend == "nccl" else "nccl"
        idle = [k for k in sim.profile.parameters if k.startswith(f"{other}.")]
        if idle:
            verb = "acts" if len(idle) == 1 else "act"
            notes.append(f"calibration {sim.profile.file or 'profile'}: {', '.join(idle)} {verb} on {other} only, "
                         f"not on this {backend} measurement")  # fmt: skip
    if empty:
        notes.append(f"left out {len(empty)} size{'s' if len(empty) > 1 else ''} of no elements on "
                     f"{len(sim.topology.rank_devices())} ranks ({', '.join(format_size(s) for s in empty[:4])}"
                     f"{' ...' if len(empty) > 4 else ''}): NCCL returns at once")  # fmt: skip
    if backend == "nccl":
        notes.append(version_note(m, sim.nccl_options.version))
        from collsim.backends.nccl.ib_hca import ib_hca_selection  # the backend only where a note needs it

        env = sim.scenario.backends.nccl.env if sim.scenario.backends.nccl is not None else {}
        # the simulator's topology keeps only the NICs the scenario's own NCCL_IB_HCA lists: compare text then
        hcas = None if "NCCL_IB_HCA" in env else (lambda v: ib_hca_selection(sim.topology, v)[0])
        notes.append(env_note(m, env, sim.nccl_plugin_env, hcas))
        notes += sim.nccl_release_notes(m.collective)
    elif backend == "gloo" and gloo is not None:
        notes.append(gloo_env_note(m, gloo.interfaces))
    return notes


def gloo_env_note(m: Measurement, interfaces: int) -> str | None:
    """A note when the run's ``GLOO_SOCKET_IFNAME`` (the measurement's ``software.env``: ``collsim bench`` records
    it) lists another number of interfaces than the scenario's ``backends.gloo.interfaces``: ProcessGroupGloo makes
    one context (one connection to each peer, one receiving thread) per entry. None when they agree or the run
    recorded no such variable.

    >>> gloo_env_note(Measurement("allreduce", software={"env": {"GLOO_SOCKET_IFNAME": "lo,lo"}}), 1)
    "the run's GLOO_SOCKET_IFNAME=lo,lo lists 2 interfaces, the scenario's backends.gloo.interfaces is 1"
    """
    run = m.software.get("env")
    value = run.get("GLOO_SOCKET_IFNAME") if isinstance(run, Mapping) else None
    if not isinstance(value, str) or not value.strip():
        return None
    count = len([name for name in value.split(",") if name.strip()])
    if count == interfaces:
        return None
    return (f"the run's GLOO_SOCKET_IFNAME={value.strip()} lists {count} interface{'s' if count != 1 else ''}, the "
            f"scenario's backends.gloo.interfaces is {interfaces}")


_VERSION = re.compile(r"(?<![\d.])(\d+)\.(\d+)\.(\d+)")


def version_note(m: Measurement, scenario: tuple[int, int, int] | None) -> str | None:
    """A note when the measurement names an NCCL release (``software.nccl_version``: its first ``X.Y.Z``) other
    than the scenario's ``backends.nccl.version``: the tuner tables, and so NCCL's choice, follow the scenario's
    (docs/modelling.md#nccl-versions). None when they agree or the file names none.

    >>> m = Measurement("allreduce", software={"nccl_version": "2.26.2+cuda12.8 (printed)"})
    >>> version_note(m, (2, 26, 2)) is None
    True
    >>> version_note(m, None)[:60]
    'the measurement names NCCL 2.26.2 and the scenario none (col'
    """
    found = _VERSION.search(str(m.software.get("nccl_version", "")))
    if found is None:
        return None
    version = (int(found[1]), int(found[2]), int(found[3]))
    if version == scenario:
        return None
    named = ".".join(map(str, version))
    if scenario is None:
        return (f"the measurement names NCCL {named} and the scenario none (collsim follows the latest release): "
                f"set backends.nccl.version: \"{named}\" if that is what ran")  # fmt: skip
    return (f"the measurement names NCCL {named}, the scenario's backends.nccl.version is "
            f"{'.'.join(map(str, scenario))}")  # fmt: skip


#: Modelled NCCL variables the simulator reads from the scenario's raw environment, not through
#: :meth:`~collsim.nccl_env.NcclOptions.from_env` (NCCL_IB_HCA: ``Simulator`` picks the NICs it leaves); compared
#: as text.
_RAW_ENV: frozenset[str] = frozenset({"NCCL_IB_HCA"})


def env_note(
    m: Measurement,
    scenario_env: Mapping[str, Any],
    plugin_env: Mapping[str, Any] | None = None,
    nic_selection: Callable[[str], Any] | None = None,
) -> str | None:
    """A note when the run's NCCL variables (the measurement's ``software.env``) and the scenario's differ.

    Compared: the variables collsim models (:data:`~collsim.nccl_env.KNOWN_NCCL_ENV`, and the plugin's
    ``OFI_NCCL_TUNER_TYPE``), value against value (case and surrounding spaces ignored); a variable the NICs'
    network plugin sets (``plugin_env``: the plugin sets it inside the process, after the environment was
    recorded) counts as the scenario's. A variable the scenario sets and the run did not is named only when the
    file records the whole environment (``software.env_complete``: an nccl-tests JSON report). The run's NCCL
    variables collsim does not model are listed apart. None when nothing differs or the file records no variables.
    ``nic_selection`` (a value of NCCL_IB_HCA -> the NICs it leaves NCCL, None for all) compares NCCL_IB_HCA by the
    NICs it selects, so a list of every NIC is the same as leaving it unset; without it the text is compared.

    Examples
    --------
    >>> m = Measurement("allreduce", software={"env": {"NCCL_ALGO": "Ring", "NCCL_IB_QPS_PER_CONNECTION": "2",
    ...                                                "NCCL_DEBUG": "INFO"}, "env_complete": True})
    >>> note = env_note(m, {"NCCL_PROTO": "Simple"})
    >>> note.split(": ", 1)[0]
    "the run's NCCL variables differ from backends.nccl.env"
    >>> "NCCL_ALGO=Ring in the run, unset in the scenario; NCCL_PROTO unset in the run, Simple in the scenario" in note
    True
    >>> note.rsplit("; ", 1)[1]
    'set in the run, not modelled: NCCL_IB_QPS_PER_CONNECTION=2'
    >>> run = Measurement("allreduce", software={"env": {"NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "8388608"}})
    >>> env_note(run, {"NCCL_ALGO": "ring"}, {"NCCL_BUFFSIZE": 8388608}) is None  # the plugin sets NCCL_BUFFSIZE
    True
    >>> env_note(Measurement("allreduce", software={"env": {"NCCL_IB_DISABLE": "0"}}), {}) is None  # NCCL's default
    True
    """
    run = m.software.get("env")
    if not isinstance(run, Mapping):
        return None
    run_env = {str(k): str(v) for k, v in run.items() if str(k).startswith(("NCCL_", "OFI_NCCL_"))}
    scen = {str(k): str(v) for k, v in (plugin_env or {}).items()}
    scen.update((str(k), str(v)) for k, v in scenario_env.items())
    modelled = set(KNOWN_NCCL_ENV) | set(PLUGIN_ENV)

    def same(key: str, a: str | None, b: str | None) -> bool:
        if a is not None and b is not None and a.strip().lower() == b.strip().lower():
            return True
        if key in _RAW_ENV:
            if nic_selection is None:
                return a is None and b is None
            try:
                return (None if a is None else nic_selection(a)) == (None if b is None else nic_selection(b))
            except ValueError:  # a list that leaves no NIC (BackendError) or does not parse
                return False
        try:  # the settings NCCL reads from each: NCCL_IB_DISABLE=0 is NCCL's default, "ring" is Ring
            sa, sb = (NcclOptions.from_env({} if v is None else {key: v}) for v in (a, b))
        except NcclEnvError:
            return False
        return replace(sa, env={}) == replace(sb, env={})

    differ = []
    for key in sorted(set(run_env) | set(scenario_env)):
        if key not in modelled:
            continue
        ran, sim = run_env.get(key), scen.get(key)
        if ran is None and (not m.software.get("env_complete") or key not in scenario_env):
            continue
        if not same(key, ran, sim):
            differ.append(f"{key}{'=' + ran if ran is not None else ' unset'} in the run, "
                          f"{'unset' if sim is None else sim} in the scenario")  # fmt: skip
    other = [f"{k}={v}" for k, v in sorted(run_env.items()) if k not in modelled and k not in INERT_NCCL_ENV]
    parts = []
    if differ:
        parts.append("the run's NCCL variables differ from backends.nccl.env: " + "; ".join(differ)
                     + " (set them alike with --set backends.nccl.env.NAME=VALUE, or remove one)")  # fmt: skip
    if other:
        parts.append("set in the run, not modelled: " + ", ".join(other))
    return "; ".join(parts) or None


def gpu_note(m: Measurement, presets: Any, scenario_gpus: Collection[str]) -> str | None:
    """A note when the run printed a GPU name (``hardware.gpu``: nccl-tests' ``#  Rank`` lines or report, a
    published case's exact device name) that a GPU preset's ``cuda_names`` list, and the scenario's GPUs are another
    preset. None when they agree or no name is known to a preset.

    >>> from collsim.topology import load_presets
    >>> m = Measurement("allreduce", hardware={"gpu": "NVIDIA B200"})
    >>> gpu_note(m, load_presets(), {"h100-sxm5-80gb"})
    "the run's GPUs are NVIDIA B200 (b200-sxm-180gb), the scenario's h100-sxm5-80gb"
    >>> gpu_note(m, load_presets(), {"b200-sxm-180gb"}) is None
    True
    """
    from collsim.topology.presets import gpu_preset_for_name

    names = [n.strip() for n in str(m.hardware.get("gpu") or "").split(", ") if n.strip()]
    other = []
    for name in names:
        preset = gpu_preset_for_name(presets, name)
        if preset is not None and preset not in scenario_gpus:
            other.append(f"{name} ({preset})")
    if not other:
        return None
    return f"the run's GPUs are {', '.join(other)}, the scenario's {', '.join(sorted(scenario_gpus))}"


def placement_note(m: Measurement, nodes: int, hosts_per_node: int) -> str | None:
    """A note when the run's hosts (``hardware.hosts``: nccl-tests' ``#  Rank`` lines or report) or, without them,
    its nodes (``hardware.nodes``, NVLink domains as a scenario's nodes are) are not the scenario's count: the same
    ranks spread otherwise cross hosts otherwise. None when they agree or the run says neither.

    >>> placement_note(Measurement("allreduce", nranks=16, hardware={"hosts": ["a", "b", "c", "d"]}), 2, 1)[:64]
    "the run's 16 ranks ran on 4 hosts, 4 a host; the scenario's on 2"
    >>> placement_note(Measurement("allreduce", nranks=72, hardware={"nodes": 1}), 1, 18) is None
    True
    """
    hosts = list(dict.fromkeys(h for h in m.hardware.get("hosts") or [] if isinstance(h, str)))
    given = m.hardware.get("nodes")
    ranks = f"{m.nranks} ranks" if m.nranks else "ranks"
    if hosts:
        if len(hosts) == nodes * hosts_per_node:
            return None
        each = f", {m.nranks // len(hosts)} a host" if m.nranks and m.nranks % len(hosts) == 0 else ""
        total = nodes * hosts_per_node
        per = f", {m.nranks // total} a host" if m.nranks and m.nranks % total == 0 else ""
        return (f"the run's {ranks} ran on {len(hosts)} host{'s' if len(hosts) > 1 else ''}{each}; the scenario's on "
                f"{nodes} node{'s' if nodes > 1 else ''} ({total} host{'s' if total > 1 else ''}){per}: what crosses "
                "hosts differs")  # fmt: skip
    if isinstance(given, int) and not isinstance(given, bool) and given > 0 and given != nodes:
        return (f"the run's {ranks} ran on {given} node{'s' if given > 1 else ''}, the scenario's on {nodes}: what "
                "crosses nodes differs")  # fmt: skip
    return None


def workload_notes(
    m: Measurement,
    collective: str | Sequence[str],
    gpus_per_process: int,
    op: str | None = None,
    root: int | None = None,
) -> list[str]:
    """Notes where the measurement ran another collective than the scenario's ``workload.collective`` (the
    measurement's is simulated), spread its ranks unevenly over its hosts (``hardware.ranks_per_host``), reduced
    with another operator than ``op`` or rooted at another rank than ``root`` (``software.op``, ``software.root``:
    nccl-tests' columns, ``collsim bench --root``), or drove another number of GPUs a process (nccl-tests' ``-g``,
    ``software.gpus_per_process``) than ``workload.gpus_per_process``, whose serial launches are in the times.

    >>> m = Measurement("allgather", software={"gpus_per_process": 8})
    >>> [n[:50] for n in workload_notes(m, "allreduce", 1)]
    ["the measurement is allgather, the scenario's workl", 'the run drove 8 GPUs a process (nccl-tests -g 8), ']
    """
    notes = []
    named = [collective] if isinstance(collective, str) else list(collective)
    if m.collective not in named:
        notes.append(f"the measurement is {m.collective}, the scenario's workload.collective {', '.join(named)}: "
                     f"{m.collective} simulated")  # fmt: skip
    uneven = uneven_hosts(m)
    if uneven:
        notes.append(f"the run's hosts ran different numbers of ranks ({uneven}); the scenario runs as many on every "
                     "node")  # fmt: skip
    run_op, run_root = m.software.get("op"), m.software.get("root")
    reducing = m.collective in ("allreduce", "reduce_scatter", "reduce")
    if op is not None and isinstance(run_op, str) and run_op.lower() != op and reducing:
        notes.append(f"the run's operator is {run_op}, the scenario's workload.op {op} (what NVLS and Gloo's "
                     f"reductions can run depends on it: --set workload.op={run_op.lower()})")  # fmt: skip
    if (root is not None and isinstance(run_root, int) and not isinstance(run_root, bool) and run_root != root
            and m.collective in ("broadcast", "reduce")):  # fmt: skip
        notes.append(f"the run's root is rank {run_root}, the scenario's workload.root {root} (--set "
                     f"workload.root={run_root})")  # fmt: skip
    ran = m.software.get("gpus_per_process")
    if isinstance(ran, int) and not isinstance(ran, bool) and ran != gpus_per_process:
        notes.append(f"the run drove {ran} GPUs a process (nccl-tests -g {ran}), the scenario's "
                     f"workload.gpus_per_process is {gpus_per_process}: set it to {ran} (one thread launches their "
                     "kernels one after another)")  # fmt: skip
    return notes


def dtype_note(m: Measurement, dtype: str) -> str | None:
    """A note when an nccl-tests or ``collsim bench`` measurement ran another element type than the scenario's
    ``workload.dtype`` (nccl-tests' ``-d``, bench's ``--dtype``): a reduction's speed and NCCL's LL128 and NVLS rules
    depend on it. None when they agree or the file is neither (others may not record their type).

    >>> dtype_note(Measurement("allreduce", dtype="bfloat16", software={"benchmark": "NVIDIA/nccl-tests"}), "float32")
    "the run's type is bfloat16, the scenario's workload.dtype float32"
    """
    bench = str(m.software.get("benchmark", "")).lower()
    if not bench.startswith(("nvidia/nccl-tests", "collsim bench")) or m.dtype == dtype:
        return None
    return f"the run's type is {m.dtype}, the scenario's workload.dtype {dtype}"


def device_note(m: Measurement, backend: str, device: str | None) -> str | None:
    """A note when the measurement's tensors were on another device than the ones the scenario's backend moves
    (``backends.gloo.device``; NCCL's are always CUDA tensors): Gloo on CUDA tensors adds the copies through host
    memory. None when they agree or the file does not say.

    >>> device_note(Measurement("allreduce", backend="gloo", device="cpu"), "gloo", "cuda")
    "the run's tensors were on cpu, the scenario's backends.gloo.device is cuda"
    """
    if m.device is None or device is None or m.device == device:
        return None
    field = "backends.gloo.device" if backend == "gloo" else f"{backend} backend's tensors"
    return f"the run's tensors were on {m.device}, the scenario's {field} is {device}"


def timing_note(m: Measurement) -> str | None:
    """A note when the measured times are the host's (nccl-tests ``-C 1``, ``software.timing: cputime``): the
    wall time of the timing loop per call, which counts the launches and the wait; collsim predicts the GPU's.

    >>> timing_note(Measurement("allreduce", software={"timing": "cputime"}))[:40]
    'the times are the host CPU time per call'
    """
    if m.software.get("timing") != "cputime":
        return None
    return ("the times are the host CPU time per call (nccl-tests -C 1), not the GPUs'; collsim predicts the GPUs': "
            "compare a run without -C 1")  # fmt: skip


def batching_note(m: Measurement) -> str | None:
    """A note when nccl-tests ran its timed calls batched: ``-m N`` (``software.agg_iters``) runs N calls in one
    NCCL group per iteration and divides the time by N (nccl-tests ``src/common.cu`` lines 731-736 and 772), so
    the calls share one launch; ``-G N`` (``software.cuda_graph_launches``) replays them from a CUDA graph (line
    747), without the host's launch of each. collsim prices each call on its own: the small sizes, where the launch
    and the per-call latency are the time, measure faster than it predicts, and a calibration would carry that
    into ``launch``.

    >>> batching_note(Measurement("allreduce", software={"agg_iters": 8}))[:44]
    'nccl-tests -m 8 ran 8 calls in one NCCL grou'
    >>> batching_note(Measurement("allreduce")) is None
    True
    """
    agg, graph = m.software.get("agg_iters"), m.software.get("cuda_graph_launches")
    parts = []
    if isinstance(agg, int) and agg > 1:
        parts.append(f"nccl-tests -m {agg} ran {agg} calls in one NCCL group per timed iteration, its time divided "
                     f"by {agg}: they share one launch")  # fmt: skip
    if isinstance(graph, int) and graph > 0:
        parts.append(f"nccl-tests -G {graph} replayed the calls from a CUDA graph, without the host's launch of each")
    if not parts:
        return None
    return ("; ".join(parts) + "; collsim prices each call on its own, so the small sizes measure faster than "
            "predicted (compare a run without them; a calibration would fit the launch too low)")


def call_notes(m: Measurement, rows: Sequence[ValidationRow], dtype: str, host_overhead: str) -> list[str]:
    """Notes for a measurement of a job's recorded calls (``software.benchmark``: ``NCCL Inspector`` or ``PyTorch
    profiler``): how they were timed and what that leaves out, the rank held back, ranks or calls missing, and the
    sizes where the (algorithm, protocol) recorded (Inspector format v4.3) is not the one simulated. Empty for any
    other measurement.

    >>> m = Measurement("allreduce", 8, software={"benchmark": "NCCL Inspector", "timing": "kernel",
    ...                 "rank_skew_us": 3.5, "calls": {"ranks_recorded": 8, "ranks": 8,
    ...                 "pairs": {"1048576": "Ring/LL128"}}})
    >>> row = ValidationRow(1048576, 50.0, 45.0, 1.0, 1.0, "Tree", "LL128")
    >>> for note in call_notes(m, [row], "float32", "none"):
    ...     print(note[:57])
    NCCL Inspector timed each call's kernel on the GPU clock,
    NCCL ran another (algorithm, protocol) than collsim's pic
    """
    kind = m.software.get("benchmark")
    if kind not in RECORDERS:
        return []
    info = calls_info(m)
    timing = m.software.get("timing")
    clock = {"kernel": "on the GPU clock", "host": "on the host's clock (kernel_cpu, collective_cpu)"}.get(
        str(timing), "partly on the host's clock (kernel_cpu, collective_cpu)")
    untyped = kind == "NCCL Inspector"
    notes = [f"{kind} timed each call's kernel {clock}, the least of its ranks' times (ranks that started earlier "
             f"waited in theirs; its ranks started a median {m.software.get('rank_skew_us', '?')} us apart): the "
             "launch is not in it, and a job's calls may share the GPU with its computation"
             + (f"; the element type is not recorded (the scenario's {dtype} is used)" if untyped else "")]
    if host_overhead != "none":
        notes.append(f"workload.host_overhead is {host_overhead}, but {kind}'s times are the kernels' alone")
    straggler = straggler_text(m)
    if straggler:
        notes.append(f"{straggler} (its computation, host or input; the skew is not in the times compared)")
    ranks, recorded = info.get("ranks"), info.get("ranks_recorded")
    if isinstance(ranks, int) and isinstance(recorded, int) and recorded < ranks:
        notes.append(f"only {recorded} of {ranks} ranks wrote records: a call's least time may be a rank's that "
                     "waited for the others (read every rank's output)")  # fmt: skip
    for key, what in (("calls_left_out", "calls some ranks did not record were left out"),
                      ("records_dropped", "records were overwritten before the plugin wrote them "
                                          "(NCCL_INSPECTOR_DUMP_COLL_RING_SIZE)")):  # fmt: skip
        if info.get(key):
            notes.append(f"{info[key]} {what}")
    pairs = {str(size): "/".join(pair) for size, pair in recorded_pairs(m).items()}
    other = [(r, pairs[str(r.size_bytes)]) for r in rows
             if str(r.size_bytes) in pairs and pairs[str(r.size_bytes)] != f"{r.algorithm}/{r.protocol}"]  # fmt: skip
    if other:
        shown = ", ".join(f"{format_size(r.size_bytes)} {ran} (collsim {r.algorithm}/{r.protocol})"
                          for r, ran in other[:4])  # fmt: skip
        notes.append(f"NCCL ran another (algorithm, protocol) than collsim's pick at {len(other)} of "
                     f"{sum(str(r.size_bytes) in pairs for r in rows)} sizes the records name: {shown}"
                     f"{' ...' if len(other) > 4 else ''}")  # fmt: skip
    return notes


def harness_note(m: Measurement, backend: str, host_overhead: str) -> str | None:
    """A note when the measurement's timing and the scenario's ``workload.host_overhead`` seem not to agree: a
    ``collsim bench`` file timed per iteration on GPUs, or a torch.distributed benchmark, against ``none``;
    nccl-tests (which queues its calls, hiding the host's work) against anything else. None when they agree or
    the file does not say how it timed.

    >>> m = Measurement("allreduce", backend="nccl", device="cuda", software={"timing": "iteration"})
    >>> harness_note(m, "nccl", "none")[:60]
    'the measurement times one call per iteration on GPUs: PyTorc'
    >>> harness_note(m, "nccl", "torch") is None
    True
    """
    if backend != "nccl":
        return None
    bench = str(m.software.get("benchmark", "")).lower()
    if host_overhead == "none":
        if m.software.get("timing") == "iteration" and m.device == "cuda":
            return ("the measurement times one call per iteration on GPUs: PyTorch's per-call host work is inside "
                    "its times; consider workload.host_overhead: torch or your own figure (docs/bench.md)")  # fmt: skip
        if "torch.distributed" in bench:
            return ("the measurement comes from a torch.distributed benchmark: if it times one call on an idle GPU, "
                    "set workload.host_overhead: torch (docs/modelling.md)")  # fmt: skip
    elif bench.startswith("nvidia/nccl-tests"):
        return (f"nccl-tests queues its calls back to back, which hides the host's work, but workload.host_overhead "
                f"is {host_overhead}")  # fmt: skip
    return None


def band_label(size_bytes: int) -> str:
    """The band of a size, e.g. ``'>= 16 MiB'`` for 1 GiB (see :data:`BANDS`).

    >>> band_label(4096), band_label(2**20)
    ('< 64 KiB', '64 KiB - 16 MiB')
    """
    return next(label for label, lo, hi in BANDS if lo <= size_bytes < hi)
