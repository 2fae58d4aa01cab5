"""Repeated runs (``collsim run --repeat K``): the spread of a collective's time over K runs with seeded noise.

A :class:`RepeatedRecord` is a :class:`~collsim.results.records.Record` whose time (and so algbw and busbw) is the
median of the runs, with the runs' p50, p99, min and max beside it, like nccl-tests' repeated runs summarised.
Quantiles interpolate linearly between the closest ranks (NumPy's default ``linear`` method), so with K = 1 every
statistic is the one time, and with K < 100 the p99 lies between the two largest times.

Examples
--------
>>> from collsim.results import make_record
>>> r = make_record(backend="nccl", collective="allreduce", algorithm="Ring", protocol="LL", nranks=8,
...                 dtype="float32", size_bytes=8, time_s=20e-6)
>>> rr = repeated_record(r, [20e-6, 22e-6, 21e-6, 30e-6])
>>> round(rr.time_us, 3), round(rr.time_p99_us, 3), rr.time_min_us, rr.time_max_us, rr.runs
(21.5, 29.76, 20.0, 30.0, 4)
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from collsim.results.records import BUSBW_FACTORS, FLAT_FIELDS, Record
from collsim.results.text import _fit, format_sweep, groups

__all__ = [
    "REPEAT_FIELDS",
    "RepeatedRecord",
    "format_repeated_sweep",
    "quantile",
    "repeated_record",
    "repeated_to_csv",
]


@dataclass
class RepeatedRecord(Record):
    """A record over repeated runs: ``time_us``, ``algbw_gbps`` and ``busbw_gbps`` are the runs' median (p50).

    Attributes
    ----------
    runs : int
        Runs the statistics are over (K).
    time_p50_us, time_p99_us, time_min_us, time_max_us : float
        The runs' median, 99th percentile, fastest and slowest time, microseconds.
    times_us : list of float
        Every run's time in run order, microseconds (JSON only; not a CSV column).
    """

    runs: int = 1
    time_p50_us: float = 0.0
    time_p99_us: float = 0.0
    time_min_us: float = 0.0
    time_max_us: float = 0.0
    times_us: list[float] = field(default_factory=list)


#: The flat statistics columns a RepeatedRecord adds (CSV, after the Record's own columns).
REPEAT_FIELDS: tuple[str, ...] = ("runs", "time_p50_us", "time_p99_us", "time_min_us", "time_max_us")


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (0 <= q <= 1), interpolated linearly between the closest ranks.

    >>> quantile([4.0, 1.0, 3.0, 2.0], 0.5), quantile([1.0, 2.0], 0.99), quantile([7.0], 0.99)
    (2.5, 1.99, 7.0)
    """
    if not values:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q must be in [0, 1], got {q!r}")
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def repeated_record(record: Record, times_s: Sequence[float]) -> RepeatedRecord:
    """``record`` (one run's: what ran) with the statistics of ``times_s`` (each run's time, seconds).

    The time is the runs' median (p50), and algbw and busbw follow from it (nccl-tests' definitions); the breakdown
    is dropped (it was one run's, and would not add up to the median).
    """
    if not times_s:
        raise ValueError("repeated_record: no run times")
    p50 = quantile(times_s, 0.5)
    algbw = record.size_bytes / p50 / 1e9 if p50 > 0 else 0.0  # bytes/s to GB/s, GB = 1e9 bytes
    base = {f.name: getattr(record, f.name) for f in fields(Record)}
    base.update(
        time_us=p50 * 1e6,
        algbw_gbps=algbw,
        busbw_gbps=algbw * BUSBW_FACTORS[record.collective](record.nranks),
        breakdown={},
        notes=list(record.notes),
    )
    return RepeatedRecord(
        **base,
        runs=len(times_s),
        time_p50_us=p50 * 1e6,
        time_p99_us=quantile(times_s, 0.99) * 1e6,
        time_min_us=min(times_s) * 1e6,
        time_max_us=max(times_s) * 1e6,
        times_us=[t * 1e6 for t in times_s],
    )


def format_repeated_sweep(
    records: Sequence[RepeatedRecord],
    *,
    name: str,
    backends: Sequence[str],
    collectives: Sequence[str],
    nccl_notes: Sequence[str] = (),
    noise: str = "",
) -> str:
    """``collsim run --repeat K``'s tables: :func:`~collsim.results.text.format_sweep`'s nccl-tests tables with the
    runs' median time, each followed by comment lines with the spread per size (us): p50, p99, min, max.

    Every added line starts with ``#``, so the tables still read as nccl-tests output.

    Parameters
    ----------
    records : sequence of RepeatedRecord
        One per (backend, collective, size).
    name, backends, collectives, nccl_notes
        As :func:`~collsim.results.text.format_sweep`.
    noise : str
        What was drawn (e.g. ``"launch_skew 5us, jitter 1us, seed 0"``), printed in each table's spread header.
    """
    parts = []
    for b, coll, recs in groups(records, backends, collectives):
        table = format_sweep(recs, name=name, backends=[b], collectives=[coll], nccl_notes=nccl_notes)
        runs = max(r.runs for r in recs)
        lines = [
            f"# time, algbw and busbw above: the median of {runs} run{'s' if runs != 1 else ''} per size"
            + (f" (noise: {noise})" if noise else ""),
            f"# {'size':>10s}  {'p50':>7s}  {'p99':>7s}  {'min':>7s}  {'max':>7s}",
            f"# {'(B)':>10s}  {'(us)':>7s}  {'(us)':>7s}  {'(us)':>7s}  {'(us)':>7s}",
        ]
        for r in recs:
            stats = (r.time_p50_us, r.time_p99_us, r.time_min_us, r.time_max_us)
            lines.append(f"# {r.size_bytes:10d}  " + "  ".join(f"{_fit(v, 7):>7s}" for v in stats))
        parts.append(table + "\n".join(lines) + "\n")
    return "\n".join(parts)


def repeated_to_csv(records: Sequence[RepeatedRecord]) -> str:
    """Repeated records as CSV: the Record's flat columns, then :data:`REPEAT_FIELDS` (times in us).

    Breakdowns are not written (a repeated record has none); neither are ``notes`` nor each run's time.
    """
    columns = [*FLAT_FIELDS, *REPEAT_FIELDS]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for r in records:
        d = r.to_dict()
        writer.writerow({k: ("" if d[k] is None else d[k]) for k in columns})
    return buf.getvalue()
