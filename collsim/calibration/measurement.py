"""collsim's measurement format: measured collective times with the hardware and software they came from.

One measurement is one collective swept over sizes on one system. It is stored as JSON or CSV and read back by
:func:`read_measurement`, which also takes nccl-tests logs (see :mod:`collsim.calibration.nccltests`) and the
published cases of ``shared/calibration-data/*.json`` (same fields, no ``format`` key).

JSON layout (``format: collsim-measurement/1``)::

    {"format": "collsim-measurement/1", "collective": "allreduce", "backend": "gloo", "device": "cpu",
     "nranks": 2, "dtype": "float32",
     "hardware": {"gpu": ..., "nodes": 1, "gpus_per_node": ..., "interconnect": ..., "cpu": ...},
     "software": {"nccl_version": ..., "torch_version": ..., "env": {"NCCL_ALGO": "Ring"}},
     "source": {"command": ..., "machine": ..., "date": ..., "url": ...},
     "notes": "...",
     "rows": [{"size_bytes": 1024, "time_us": 12.3, "statistic": "median", "iterations": 20,
               "spread_us": 0.4, "algbw_gbps": 0.08, "busbw_gbps": 0.08}]}

Row fields: ``size_bytes`` (bytes, as nccl-tests' ``size`` column), ``time_us`` (one collective, microseconds),
``statistic`` (how ``time_us`` summarises the iterations: ``median``, ``mean`` (nccl-tests prints the mean of its
iterations), ``min``, or ``derived`` when computed from a published bandwidth), ``iterations`` (timed iterations),
``spread_us`` (interquartile range of the per-iteration times, microseconds), ``algbw_gbps`` and ``busbw_gbps``
(GB/s, GB = 1e9 bytes, busbw with nccl-tests' factor; derived from the time when absent). Unknown keys are kept in
``extra``.

The CSV form carries the same: metadata lines ``# key: <JSON value>`` first, then a header row and one row per size.

Examples
--------
>>> m = Measurement(collective="allreduce", nranks=4, rows=[MeasurementRow(1048576, 100.0)])
>>> r = m.rows[0]
>>> round(r.algbw_gbps, 4), round(m.busbw_gbps(r), 4)   # 1 MiB in 100 us; busbw = 2(n-1)/n x algbw
(10.4858, 15.7286)
>>> back = parse_measurement_json(m.to_json())
>>> back.rows[0].time_us, back.nranks
(100.0, 4)
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import statistics
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collsim.calibration.calls import CallGroup, CallLog, CallLogError, simulated_collective
from collsim.calibration.inspector import INSPECTOR_SUFFIXES, read_inspector, starts_like_inspector
from collsim.calibration.nccltests import (
    MeasuredRow,
    NcclTestsFormatError,
    NcclTestsLog,
    ParseWarning,
    is_nccl_tests_json,
    parse_nccl_tests,
    parse_nccl_tests_json,
)
from collsim.calibration.torchtrace import read_torch_traces, starts_like_torch_trace
from collsim.files import FileReadError, read_text_file, write_atomic
from collsim.results import busbw_factor
from collsim.safeyaml import short_repr
from collsim.units import DTYPE_SIZES, format_size
from collsim.units import NCCL_TESTS_TYPE_NAMES as _NCCL_TYPE
from collsim.vocab import (
    BACKENDS,
    COLLECTIVES,
    MEASURED_COLLECTIVES,
    NCCL_PRINTED_ALGORITHMS,
    NCCL_PRINTED_PROTOCOLS,
    canonical_collective,
)

__all__ = [
    "FORMAT",
    "Measurement",
    "MeasurementError",
    "MeasurementRow",
    "call_file_stem",
    "call_measurements",
    "calls_info",
    "format_call_groups",
    "measurement_from_calls",
    "measurement_from_nccl_tests",
    "parse_measurement_csv",
    "parse_measurement_json",
    "read_call_log",
    "read_measurement",
    "recorded_pairs",
    "straggler_text",
    "summarise_times",
    "uneven_hosts",
]

#: The value of the ``format`` key of collsim measurement files.
FORMAT = "collsim-measurement/1"

_STATISTICS = ("median", "mean", "min", "derived")
#: Largest measurement file read, bytes (an nccl-tests log of every size from 8 B to 16 GiB is about 20 KB).
MAX_MEASUREMENT_BYTES = 64 * 1024 * 1024
_ROW_FIELDS = ("size_bytes", "time_us", "statistic", "iterations", "spread_us", "algbw_gbps", "busbw_gbps")
_META_KEYS = ("format", "collective", "backend", "device", "nranks", "dtype", "hardware", "software", "source", "notes")


class MeasurementError(ValueError):
    """A measurement file that cannot be read; the message names the file, the field and what was expected."""

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        self.file = file
        self.field = field
        where = ": ".join(p for p in (file, field) if p)
        super().__init__(f"{where}: {message}" if where else message)


@dataclass(frozen=True)
class MeasurementRow:
    """One measured size.

    Parameters
    ----------
    size_bytes : int
        Message size in bytes (nccl-tests' ``size``: the larger of the send and receive buffers).
    time_us : float
        Time of one collective, microseconds.
    statistic : str
        How ``time_us`` summarises the iterations: ``"median"``, ``"mean"``, ``"min"`` or ``"derived"``.
    iterations : int or None
        Number of timed iterations.
    spread_us : float or None
        Interquartile range of the per-iteration times, microseconds.
    """

    size_bytes: int
    time_us: float
    statistic: str = "median"
    iterations: int | None = None
    spread_us: float | None = None

    @property
    def algbw_gbps(self) -> float:
        """Algorithm bandwidth in GB/s (GB = 1e9 bytes), from size and time (published ones are rounded)."""
        return self.size_bytes / self.time_us / 1e3  # bytes/us = 1e6 bytes/s = 1e-3 GB/s


#: Collectives whose nccl-tests size is every rank's share together (its ``count`` column is one rank's).
_PER_RANK_SIZES = frozenset({"allgather", "reduce_scatter", "alltoall"})


@dataclass
class Measurement:
    """A measured sweep of one collective on one system.

    Attributes
    ----------
    collective : str
        Canonical collective name (``allreduce`` ...).
    nranks : int or None
        Number of ranks; needed for busbw.
    backend : str or None
        ``"nccl"`` or ``"gloo"`` (None when unknown).
    device : str or None
        ``"cuda"`` or ``"cpu"`` tensors.
    dtype : str
        Element type (``float32`` ...).
    hardware, software, source : dict
        Free-form metadata: GPU, nodes, interconnect; NCCL/torch versions and environment; the command, machine and
        date (or URL) that produced the numbers.
    rows : list of MeasurementRow
        One per size, in increasing size.
    file : str
        Where it was read from (``"<memory>"`` otherwise); used in messages.
    """

    collective: str
    nranks: int | None = None
    rows: list[MeasurementRow] = field(default_factory=list)
    backend: str | None = None
    device: str | None = None
    dtype: str = "float32"
    hardware: dict[str, Any] = field(default_factory=dict)
    software: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    notes: str = ""
    file: str = "<memory>"

    @property
    def name(self) -> str:
        """The file's stem, or ``"measurement"``."""
        return Path(self.file).stem if self.file != "<memory>" else "measurement"

    def busbw_gbps(self, row: MeasurementRow) -> float | None:
        """nccl-tests' bus bandwidth of ``row`` in GB/s, or None when ``nranks`` is unknown."""
        if self.nranks is None:
            return None
        return row.algbw_gbps * busbw_factor(self.collective, self.nranks)

    def sizes(self) -> list[int]:
        """Measured sizes in bytes."""
        return [r.size_bytes for r in self.rows]

    def empty_sizes(self, nranks: int) -> list[int]:
        """Sizes (bytes) of no elements on ``nranks`` ranks, which NCCL returns from at once: below one element of
        ``dtype`` (one a rank for all-gather, reduce-scatter and all-to-all, whose size is every rank's).

        >>> Measurement("allgather", rows=[MeasurementRow(16, 5.0), MeasurementRow(64, 9.0)]).empty_sizes(8)
        [16]
        """
        unit = DTYPE_SIZES.get(self.dtype, 1) * (nranks if self.collective in _PER_RANK_SIZES else 1)
        return [r.size_bytes for r in self.rows if r.size_bytes < unit]

    def subset(self, sizes: Sequence[int]) -> Measurement:
        """A copy holding only the rows whose size is in ``sizes`` (for held-out validation)."""
        keep = set(sizes)
        return _replace_rows(self, [r for r in self.rows if r.size_bytes in keep])

    def dataframe(self) -> Any:
        """pandas DataFrame with ``size_bytes, time_us, algbw_gbps, busbw_gbps, statistic, iterations, spread_us``."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "size_bytes": r.size_bytes,
                    "time_us": r.time_us,
                    "algbw_gbps": r.algbw_gbps,
                    "busbw_gbps": self.busbw_gbps(r) if self.nranks else math.nan,
                    "statistic": r.statistic,
                    "iterations": r.iterations,
                    "spread_us": r.spread_us,
                }
                for r in self.rows
            ]
        )

    def metadata(self) -> dict[str, Any]:
        """The header fields as a JSON-ready dict (``format`` first)."""
        return {
            "format": FORMAT,
            "collective": self.collective,
            "backend": self.backend,
            "device": self.device,
            "nranks": self.nranks,
            "dtype": self.dtype,
            "hardware": self.hardware,
            "software": self.software,
            "source": self.source,
            "notes": self.notes,
        }

    def _row_dict(self, r: MeasurementRow) -> dict[str, Any]:
        busbw = self.busbw_gbps(r)
        return {
            "size_bytes": r.size_bytes,
            "time_us": r.time_us,
            "statistic": r.statistic,
            "iterations": r.iterations,
            "spread_us": r.spread_us,
            "algbw_gbps": round(r.algbw_gbps, 6),
            "busbw_gbps": None if busbw is None else round(busbw, 6),
        }

    def to_json(self) -> str:
        """The measurement as collsim JSON (see the module docstring)."""
        return json.dumps({**self.metadata(), "rows": [self._row_dict(r) for r in self.rows]}, indent=2) + "\n"

    def to_csv(self) -> str:
        """The measurement as collsim CSV: ``# key: <JSON>`` metadata lines, a header row, one row per size."""
        buf = io.StringIO()
        for key, value in self.metadata().items():
            buf.write(f"# {key}: {json.dumps(value)}\n")
        writer = csv.DictWriter(buf, fieldnames=list(_ROW_FIELDS), lineterminator="\n")
        writer.writeheader()
        for r in self.rows:
            writer.writerow({k: ("" if v is None else v) for k, v in self._row_dict(r).items()})
        return buf.getvalue()

    def write(self, path: str | Path) -> None:
        """Write JSON or CSV, chosen by the suffix of ``path`` (``.json`` or ``.csv``), whole or not at all
        (:func:`collsim.files.write_atomic`)."""
        p = Path(path)
        write_atomic(p, self.to_csv() if p.suffix.lower() == ".csv" else self.to_json())


def _replace_rows(m: Measurement, rows: list[MeasurementRow]) -> Measurement:
    return Measurement(
        collective=m.collective,
        nranks=m.nranks,
        rows=rows,
        backend=m.backend,
        device=m.device,
        dtype=m.dtype,
        hardware=dict(m.hardware),
        software=dict(m.software),
        source=dict(m.source),
        notes=m.notes,
        file=m.file,
    )


def summarise_times(times_s: Sequence[float]) -> tuple[float, float]:
    """Median and interquartile range of per-iteration times given in seconds, both returned in microseconds.

    Examples
    --------
    >>> summarise_times([1e-6, 2e-6, 3e-6, 4e-6, 100e-6])
    (3.0, 2.0)
    """
    return _median_iqr([t * 1e6 for t in times_s])  # seconds to microseconds


def _median_iqr(values: Sequence[float]) -> tuple[float, float]:
    """Median and interquartile range (inclusive quartiles) of ``values``, in their unit."""
    if not values:
        raise ValueError("no times to summarise")
    ordered = sorted(values)
    if len(ordered) < 2:
        return ordered[0], 0.0
    q = statistics.quantiles(ordered, n=4, method="inclusive")
    return statistics.median(ordered), q[2] - q[0]


# --- reading ----------------------------------------------------------------------------------------------------


def _number(value: Any, file: str, where: str, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise MeasurementError(f"expected a number, got {short_repr(value)}", file=file, field=where)
    try:
        x = float(value)
    except ValueError:
        raise MeasurementError(f"expected a number, got {short_repr(value)}", file=file, field=where) from None
    if not math.isfinite(x) or (positive and x <= 0):
        raise MeasurementError(f"expected a positive finite number, got {short_repr(value)}", file=file, field=where)
    return x


def _optional(value: Any, file: str, where: str) -> float | None:
    if value is None or value == "":
        return None
    return _number(value, file, where, positive=False)


def _infer_backend(meta: Mapping[str, Any], file: str) -> str | None:
    """The ``backend`` field (any letter case), else a guess from ``software``; a value that is no backend is an
    error naming the field (it was dropped and the guess, or the scenario's first backend, taken silently)."""
    given = meta.get("backend")
    if given not in (None, ""):
        name = str(given).strip().lower()
        if name not in BACKENDS:
            raise MeasurementError(f"expected one of {', '.join(BACKENDS)}, got {short_repr(given)}", file=file,
                                   field="backend")  # fmt: skip
        return name
    text = json.dumps(meta.get("software", {})).lower()
    if "nccl-tests" in text or "nccl_version" in text:
        return "nccl"
    if "gloo" in text:
        return "gloo"
    return None


def _infer_nranks(meta: Mapping[str, Any], file: str) -> int | None:
    value = meta.get("nranks")
    if value is None:
        hw = meta.get("hardware") or {}
        for key in ("total_gpus", "processes", "ranks"):
            if isinstance(hw.get(key), int):
                return int(hw[key])
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MeasurementError(f"expected an integer >= 1, got {short_repr(value)}", file=file, field="nranks")
    return value


def _row_from_mapping(
    d: Mapping[str, Any], i: int, file: str, collective: str, nranks: int | None, default_stat: str
) -> MeasurementRow:
    where = f"rows[{i}]"
    if not isinstance(d, Mapping):
        raise MeasurementError(f"expected a mapping with size_bytes and time_us, got {short_repr(d)}", file=file,
                               field=where)
    if "size_bytes" not in d:
        raise MeasurementError("missing size_bytes (bytes)", file=file, field=where)
    size = _number(d["size_bytes"], file, f"{where}.size_bytes")
    if size != int(size):
        raise MeasurementError(f"expected a whole number of bytes, got {short_repr(d['size_bytes'])}", file=file,
                               field=f"{where}.size_bytes")
    stat = str(d.get("statistic") or default_stat)
    if stat not in _STATISTICS:
        raise MeasurementError(f"expected one of {', '.join(_STATISTICS)}, got {short_repr(stat)}", file=file,
                               field=f"{where}.statistic")
    _optional(d.get("algbw_gbps"), file, f"{where}.algbw_gbps")  # checked, then recomputed from size and time
    time_raw, time_field = d.get("time_us"), "time_us"
    if (time_raw is None or time_raw == "") and d.get("inplace_time_us") not in (None, ""):
        # nccl-tests prints both; a row with only the in-place time is timed, not a bandwidth to derive one from
        time_raw, time_field = d.get("inplace_time_us"), "inplace_time_us"
    if time_raw is None or time_raw == "":
        # Published tables sometimes give only a bandwidth (e.g. in-place busbw): time = size x factor / busbw.
        busbw = _optional(d.get("busbw_gbps"), file, f"{where}.busbw_gbps")
        if busbw is None:
            busbw = _optional(d.get("inplace_busbw_gbps"), file, f"{where}.inplace_busbw_gbps")
        if busbw is None or busbw <= 0 or nranks is None:
            raise MeasurementError("missing time_us (and no busbw with nranks to derive it from)", file=file,
                                   field=where)
        time_us = size * busbw_factor(collective, nranks) / (busbw * 1e3)  # GB/s x 1e3 = bytes/us
        stat = "derived"
    else:
        time_us = _number(time_raw, file, f"{where}.{time_field}")
    iters = d.get("iterations", d.get("samples"))
    spread = _optional(d.get("spread_us"), file, f"{where}.spread_us")
    return MeasurementRow(
        size_bytes=int(size),
        time_us=time_us,
        statistic=stat,
        iterations=None if iters in (None, "") else int(_number(iters, file, f"{where}.iterations")),
        spread_us=spread,
    )


def _from_mapping(data: Any, file: str) -> Measurement:
    if not isinstance(data, Mapping):
        raise MeasurementError("expected a JSON object with collective and rows", file=file)
    fmt = data.get("format")
    if fmt is not None and fmt != FORMAT:
        raise MeasurementError(f"expected {FORMAT!r}, got {short_repr(fmt)}", file=file, field="format")
    if not data.get("collective"):
        names = ", ".join(MEASURED_COLLECTIVES)
        raise MeasurementError(f"required field is missing; expected one of: {names}", file=file, field="collective")
    try:
        collective = canonical_collective(data["collective"])
    except ValueError as exc:
        raise MeasurementError(str(exc), file=file, field="collective") from None
    for key in ("hardware", "software", "source"):
        value = data.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise MeasurementError(f"expected a mapping (key: value), got {short_repr(value)}", file=file, field=key)
    hosts = (data.get("hardware") or {}).get("hosts")
    if hosts is not None and not (isinstance(hosts, list) and all(isinstance(h, str) and h for h in hosts)):
        raise MeasurementError(f"expected a list of host names, got {short_repr(hosts)}", file=file,
                               field="hardware.hosts")  # fmt: skip
    per_host = (data.get("hardware") or {}).get("ranks_per_host")
    if per_host is not None and not (
        isinstance(per_host, list) and isinstance(hosts, list) and len(per_host) == len(hosts)
        and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in per_host)
    ):  # fmt: skip
        raise MeasurementError(f"expected a count of ranks for each of hardware.hosts, got {short_repr(per_host)}",
                               file=file, field="hardware.ranks_per_host")  # fmt: skip
    nranks = _infer_nranks(data, file)
    rows_raw = data.get("rows")
    if not isinstance(rows_raw, list) or not rows_raw:
        raise MeasurementError("expected a non-empty list of rows", file=file, field="rows")
    software = dict(data.get("software") or {})
    default_stat = "median" if fmt else ("mean" if "nccl-tests" in json.dumps(software) else "median")
    rows = [_row_from_mapping(d, i, file, collective, nranks, default_stat) for i, d in enumerate(rows_raw)]
    first: dict[int, int] = {}
    for i, r in enumerate(rows):
        if r.size_bytes in first:
            raise MeasurementError(f"size {r.size_bytes} B is also rows[{first[r.size_bytes]}]: give one row a size "
                                   "(its median or mean over runs)", file=file, field=f"rows[{i}]")  # fmt: skip
        first[r.size_bytes] = i
    rows.sort(key=lambda r: r.size_bytes)
    dtype = data.get("dtype") or software.get("dtype") or "float32"
    return Measurement(
        collective=collective,
        nranks=nranks,
        rows=rows,
        backend=_infer_backend(data, file),
        device=data.get("device"),
        dtype=str(dtype).split()[0],
        hardware=dict(data.get("hardware") or {}),
        software=software,
        source=dict(data.get("source") or {}),
        notes=str(data.get("notes") or ""),
        file=file,
    )


def parse_measurement_json(text: str, *, file: str = "<text>") -> Measurement:
    """Parse collsim measurement JSON (or a published case of ``calibration-data/``).

    Raises
    ------
    MeasurementError
        Naming ``file`` and the field, for invalid JSON or fields.
    """
    data = _json(text, file, None)
    return _from_mapping(data, file)


def _json(text: str, file: str, where: str | None) -> Any:
    """``json.loads`` with every failure a MeasurementError: bad JSON, nesting deeper than Python's stack, an
    integer of more than 4300 digits (Python's limit)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MeasurementError(f"invalid JSON: {exc.msg} (line {exc.lineno})", file=file, field=where) from None
    except RecursionError:
        raise MeasurementError("invalid JSON: nested too deeply", file=file, field=where) from None
    except ValueError:  # an integer longer than sys.get_int_max_str_digits()
        raise MeasurementError("invalid JSON: an integer of more than 4300 digits", file=file, field=where) from None


def parse_measurement_csv(text: str, *, file: str = "<text>") -> Measurement:
    """Parse collsim measurement CSV: ``# key: <JSON>`` metadata lines, then a header and rows.

    Raises
    ------
    MeasurementError
        Naming ``file`` and the field (or line) for bad metadata, a missing column or a bad value.
    """
    meta: dict[str, Any] = {}
    body: list[str] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if not sep:
                continue
            try:
                meta[key.strip()] = _json(value.strip(), file, key.strip()) if value.strip() else None
            except MeasurementError:
                raise MeasurementError(f"line {n}: expected '# key: <JSON value>', got {short_repr(line)}",
                                       file=file, field=short_repr(key.strip(), 40)) from None
        elif line.strip():
            body.append(line)
    reader = csv.DictReader(body)
    if reader.fieldnames is None or "size_bytes" not in reader.fieldnames:
        raise MeasurementError("expected a header row with size_bytes and time_us columns", file=file)
    meta["rows"] = [dict(r) for r in reader]
    return _from_mapping(meta, file)


_Series = tuple[str | None, str | None, int | None]  # (type, redop, root) of an nccl-tests row


def _series_name(key: _Series) -> str:
    """A series as the warning and ``series=`` name it: nccl-tests' type, the operator, the root (``half sum``,
    ``float none root 0``)."""
    parts = [_NCCL_TYPE.get(key[0] or "", key[0]), key[1], None if key[2] in (None, -1) else f"root {key[2]}"]
    return " ".join(str(x) for x in parts if x)


def _first_series(
    rows: Sequence[MeasuredRow], file: str, wanted: str | None = None
) -> tuple[_Series, list[MeasuredRow]]:
    """The (type, redop, root) of the series compared and its rows: the first the run printed, or the first whose
    name has every word of ``wanted`` (a type as collsim or nccl-tests names it, an operator, ``root N``); a
    :class:`ParseWarning` names the others (``-d all``, ``-o all``, ``-r all``).

    Raises
    ------
    MeasurementError
        When no series matches ``wanted`` (the message lists the series).
    """
    series: dict[_Series, list[MeasuredRow]] = {}
    for r in rows:
        series.setdefault((r.dtype, r.redop, r.root), []).append(r)
    names = {key: _series_name(key) for key in series}
    if wanted is None:
        chosen = next(iter(series))
    else:
        words = [_NCCL_TYPE.get(w, w) for w in wanted.lower().replace(",", " ").split()]
        matching = [key for key in series if all(w in names[key].lower().split() for w in words)]
        if not matching:
            raise MeasurementError(f"no series {wanted!r} in this run; it printed: {', '.join(names.values())}",
                                   file=file, field="series")  # fmt: skip
        chosen = matching[0]
    if len(series) > 1:
        others = ", ".join(names[k] for k in series if k != chosen)
        how = "the first" if wanted is None else f"{wanted!r}"
        warnings.warn(f"{file}: the run printed {len(series)} series; comparing {how} ({names[chosen]}), not "
                      f"{others}: --series names another", ParseWarning, stacklevel=3)  # fmt: skip
    return chosen, series[chosen]


def _cycle_means(rows: Sequence[MeasuredRow]) -> list[MeasurementRow]:
    """One row a size, in increasing size: a size printed more than once (``-N`` cycles) is the mean of its rows'
    times (nccl-tests' means of equal iteration counts: the mean of all), their iterations summed."""
    by_size: dict[int, list[MeasuredRow]] = {}
    for r in rows:
        by_size.setdefault(r.size_bytes, []).append(r)
    out = []
    for size in sorted(by_size):
        same = by_size[size]
        iters = [r.iterations for r in same]
        out.append(
            MeasurementRow(
                size,
                statistics.fmean(r.time_us for r in same),
                "mean",
                None if None in iters else sum(i for i in iters if i is not None),
                same[0].spread_us if len(same) == 1 else None,
            )
        )
    return out


def read_measurement(
    path: str | Path, *, collective: str | None = None, nranks: int | None = None, series: str | None = None
) -> Measurement:
    """Read a measurement: collsim JSON or CSV, a published ``calibration-data`` case, an nccl-tests JSON report
    (``-J``), an nccl-tests log, an NCCL Inspector log or dump folder, or PyTorch profiler traces.

    Parameters
    ----------
    path : str or Path
        A file that opens as a PyTorch profiler trace (``{"traceEvents": ...}``) or whose first line is an
        Inspector record, or a folder of either: a job's recorded calls (:func:`read_call_log`,
        :func:`call_measurements` with communicators of one shape pooled); else ``.json`` is collsim's format, a
        published case or nccl-tests' report (told apart by their keys), ``.csv`` collsim's format, and anything
        else nccl-tests output.
    collective, nranks : optional
        For nccl-tests output that does not say (a trimmed table): the collective and the rank count. For recorded
        calls: which of their collectives and communicator sizes to take, where they hold several.
    series : str, optional
        For nccl-tests output of several series (``-d all``, ``-o all``, ``-r all``): the one to compare, by the
        words of its name (``bfloat16``, ``half sum``, ``root 2``); default the first.

    Raises
    ------
    MeasurementError
        For a missing file, bad content, or a log with no rows; the message names the file.
    """
    p = Path(path)
    file = str(path)
    if p.is_dir() or starts_like_inspector(p) or starts_like_torch_trace(p):
        return _calls_measurement(read_call_log(p), collective, nranks)
    try:
        if p.is_file() and p.stat().st_size > MAX_MEASUREMENT_BYTES:
            raise MeasurementError(f"larger than {MAX_MEASUREMENT_BYTES >> 20} MiB; not a measurement", file=file)
        suffix = p.suffix.lower()
        text = read_text_file(p, replace=suffix not in (".json", ".csv"))  # a log's other lines may hold any bytes
    except FileReadError as exc:
        raise MeasurementError(str(exc), file=file) from None
    if suffix == ".json":
        data = _json(text, file, None)
        if not is_nccl_tests_json(data):
            return _from_mapping(data, file)
        try:
            log = parse_nccl_tests_json(data, source=file, collective=collective)
        except NcclTestsFormatError as exc:
            raise MeasurementError(exc.reason, file=file, field=exc.field) from None
        return measurement_from_nccl_tests(log, collective=collective, nranks=nranks, series=series)
    if suffix == ".csv":
        return parse_measurement_csv(text, file=file)
    try:
        log = parse_nccl_tests(text, collective=collective, source=file)
    except NcclTestsFormatError as exc:
        raise MeasurementError(exc.reason, file=file, field=exc.field) from None
    return measurement_from_nccl_tests(log, collective=collective, nranks=nranks, series=series)


def measurement_from_nccl_tests(
    log: NcclTestsLog, *, collective: str | None = None, nranks: int | None = None, series: str | None = None
) -> Measurement:
    """A :class:`Measurement` of an nccl-tests run: its out-of-place times (nccl-tests' mean over iterations).

    One series is kept: the rows of the first (type, redop, root) the run printed, or of the one ``series`` names
    (``-d all``, ``-o all`` and ``-r all`` print several; a :class:`~collsim.calibration.nccltests.ParseWarning`
    names the others). A size
    printed more than once in it (``-N`` cycles) becomes the mean of its rows' times, its iterations summed.
    The run's NCCL release, its ``NCCL_*`` variables (a JSON report records the whole environment:
    ``software.env_complete``), how it timed (``software.timing``: ``cputime`` with ``-C 1``; ``agg_iters`` with
    ``-m N``, ``cuda_graph_launches`` with ``-G N``), the series'
    operator and root (``op``, ``root``) and the GPUs a thread drove (``gpus_per_process``, nccl-tests' ``-g``) go
    into ``software``; its hosts and GPU names into ``hardware``.

    Parameters
    ----------
    log : NcclTestsLog
        A parsed log or report (``source`` names its file in messages).
    collective, nranks : optional
        Used when the log does not say.
    series : str, optional
        The series to compare, by the words of its name: a type (``bfloat16``; collsim's ``float16`` or
        nccl-tests' ``half``), an operator, ``root N`` (``"half sum"``); default the first.

    Raises
    ------
    MeasurementError
        For a log with no rows, no collective, or only rows timed 0 us.

    Examples
    --------
    >>> from collsim.calibration.nccltests import parse_nccl_tests
    >>> log = parse_nccl_tests('''# Collective test starting: all_reduce_perf
    ...   1024  256  float  sum  -1  10.0  0.10  0.18  0  9.0  0.11  0.20  0
    ...   1024  256  float  sum  -1  12.0  0.09  0.15  0  9.0  0.11  0.20  0
    ...   1024  512  half   sum  -1  11.0  0.09  0.16  0  9.0  0.11  0.20  0''', source="ar.txt")
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     m = measurement_from_nccl_tests(log, nranks=4)
    >>> [(r.size_bytes, r.time_us) for r in m.rows], m.dtype
    ([(1024, 11.0)], 'float32')
    >>> "half sum" in str(caught[0].message)
    True
    """
    file = log.source
    if not log.rows:
        raise MeasurementError("no nccl-tests data rows found", file=file)
    coll = log.collective or collective
    if coll is None:
        raise MeasurementError("the log does not name its collective; give --collective (collective= in Python)",
                               file=file, field="collective")
    # A row of no elements (size 0, or count 0: all_gather_perf's -b below ranks x the type's size, an all-reduce
    # of 1-3 B floats) times a call NCCL returns from at once: nothing to compare.
    empty = sorted({r.size_bytes for r in log.rows if r.size_bytes == 0 or r.count == 0})
    if empty:
        shown = ", ".join(f"{s} B" for s in empty[:4]) + (" ..." if len(empty) > 4 else "")
        warnings.warn(f"{file}: skipped the rows of no elements (count 0: {shown}); NCCL moves nothing for them",
                      ParseWarning, stacklevel=2)  # fmt: skip
    timed = [r for r in log.rows if r.time_us > 0 and r.size_bytes not in empty]
    if not timed:  # every data row timed 0 us (a size of 0 B, or a run that printed no time): nothing to compare
        raise MeasurementError(f"no valid rows: all {len(log.rows)} data rows have a time of 0 us or no elements",
                               file=file)  # fmt: skip
    (dtype, redop, root), kept = _first_series(timed, file, series)
    software, hardware = _nccl_tests_facts(log, redop, root)
    return Measurement(
        collective=coll,
        nranks=log.nranks or nranks,
        rows=_cycle_means(kept),
        backend=log.backend,
        device=log.device,
        dtype=dtype or "float32",
        hardware=hardware,
        software=software,
        source={"log": file},
        file=file,
    )


def _nccl_tests_facts(log: NcclTestsLog, redop: str | None, root: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """What an nccl-tests run (or a ``collsim bench`` text) records beside its rows, as a measurement's ``software``
    and ``hardware`` (see :func:`measurement_from_nccl_tests`); ``redop`` and ``root`` are the kept series'."""
    bench = log.device is not None  # collsim bench's text: torch.distributed, the backend and device it names
    software: dict[str, Any] = {"benchmark": "collsim bench" if bench else "NVIDIA/nccl-tests"}  # as the cases say
    if log.nccl_version:
        software["nccl_version"] = log.nccl_version
    if redop is not None and redop != "none":
        software["op"] = redop
    if root is not None and root >= 0:
        software["root"] = root
    if log.gpus_per_thread is not None:
        software["gpus_per_process"] = log.gpus_per_thread  # nccl-tests -g: GPUs one thread drives
    if log.timing != "gpu":
        software["timing"] = log.timing
    if log.agg_iters is not None and log.agg_iters > 1:
        software["agg_iters"] = log.agg_iters  # nccl-tests -m: calls a group ran per timed iteration
    if log.graph_launches:
        software["cuda_graph_launches"] = log.graph_launches  # nccl-tests -G: calls replayed from a CUDA graph
    if log.env is not None:
        software["env"] = dict(sorted(log.env.items()))
        software["env_complete"] = True
    hardware: dict[str, Any] = {}
    if log.gpus:
        hardware["gpu"] = ", ".join(log.gpus)
    if log.hosts:
        hardware["hosts"] = list(log.hosts)
    if len(set(log.host_ranks)) > 1:  # ranks spread unevenly over the hosts (mpirun -H a:8,b:4)
        hardware["ranks_per_host"] = list(log.host_ranks)
    return software, hardware


# --- a profiler's calls (NCCL Inspector, PyTorch profiler) ------------------------------------------------------------


def measurement_from_calls(group: CallGroup, log: CallLog) -> Measurement:
    """A :class:`Measurement` of one group of recorded calls (:meth:`CallLog.groups`: NCCL Inspector logs, PyTorch
    profiler traces).

    A call's time is the least of its ranks' times, plus what the recorder's rounding takes on average
    (``log.rounding_us``: half a microsecond for the Inspector's whole microseconds) (the rank that started its
    kernel last timed the collective; the others waited in theirs); each size's row is the median over its calls
    (``iterations``: the calls, ``spread_us``: their interquartile range). Sizes are nccl-tests' ``size``.
    ``software`` records the benchmark (``log.kind``), the timing (``kernel``: every record on the GPU's clock;
    ``host`` or ``mixed`` otherwise), the median spread between one call's ranks (``rank_skew_us``), the NCCL
    release where the output names it, and under ``calls`` the group (communicators, ranks that wrote records, calls,
    calls left out; NCCL's (algorithm, protocol) by size where recorded, the most frequent, in collsim's names; the
    rank that started last most often; records the recorder overwrote); ``hardware`` the nodes where recorded, and
    the hosts when one communicator's every rank wrote records.

    Raises
    ------
    MeasurementError
        For an operation collsim does not simulate, or a group without a call every rank recorded.

    Examples
    --------
    >>> from collsim.calibration.calls import Call, CallGroup, CallLog, Communicator
    >>> comm = Communicator("0x1", "DP", 4, 1, ranks={0, 1, 2, 3}, hosts={"n1"})
    >>> calls = [Call(4 << 20, t, t + 30.0, 4) for t in (99.0, 100.0, 104.0)]
    >>> log = CallLog("dump", rounding_us=0.5)
    >>> m = measurement_from_calls(CallGroup("AllGather", None, [comm], 4, 1, calls, 0, 4), log)
    >>> m.collective, m.rows[0].size_bytes, m.rows[0].time_us, m.rows[0].iterations, m.software["rank_skew_us"]
    ('allgather', 4194304, 100.5, 3, 30.0)
    """
    source = log.source
    coll = simulated_collective(group.operation)
    if coll is None:
        raise MeasurementError(f"collsim does not simulate {group.operation} (it does: "
                               f"{', '.join(c for c in COLLECTIVES if c != 'sendrecv')})", file=source)  # fmt: skip
    if not group.calls:
        raise MeasurementError(f"{group.operation} on {group.label}: no call that every rank recorded "
                               f"({group.incomplete} recorded by some)", file=source)  # fmt: skip
    by_size: dict[int, list[float]] = {}
    pairs: dict[int, Counter[str]] = {}
    for call in group.calls:
        by_size.setdefault(call.size_bytes, []).append(call.least_us + log.rounding_us)
        if call.pair is not None:
            algo, proto = call.pair
            named = f"{NCCL_PRINTED_ALGORITHMS.get(algo, algo)}/{NCCL_PRINTED_PROTOCOLS.get(proto, proto)}"
            pairs.setdefault(call.size_bytes, Counter())[named] += 1
    rows = []
    for size in sorted(by_size):
        median, iqr = _median_iqr(by_size[size])
        rows.append(MeasurementRow(size, median, "median", len(by_size[size]), iqr))
    timing = group.timing
    kernel = timing.get("kernel_gpu", 0)
    info: dict[str, Any] = {
        "communicators": [c.label for c in group.comms],
        "operation": group.operation,
        "ranks_recorded": group.ranks_recorded,
        "ranks": group.nranks * len(group.comms),
        "calls": len(group.calls),
        "calls_left_out": group.incomplete,
        "timing_sources": dict(sorted(timing.items())),
    }
    if pairs:  # the (algorithm, protocol) the records name: the most frequent at each size
        info["pairs"] = {str(size): c.most_common(1)[0][0] for size, c in sorted(pairs.items())}
    last = group.last_to_start()
    if last is not None:
        rank, count, calls = last
        info["last_to_start"] = {"rank": rank, "host": group.comms[0].rank_hosts.get(rank), "calls": count,
                                 "of": calls}  # fmt: skip
    dropped = sum(sum(c.dropped.values()) for c in group.comms)
    if dropped:
        info["records_dropped"] = dropped
    software: dict[str, Any] = {
        "benchmark": log.kind,
        "timing": "kernel" if kernel == sum(timing.values()) else "host" if kernel == 0 else "mixed",
        "rank_skew_us": round(statistics.median(c.most_us - c.least_us for c in group.calls), 1),
        **({"nccl_version": log.nccl_version} if log.nccl_version else {}),
        "calls": info,
    }
    hardware: dict[str, Any] = {"nodes": group.nnodes} if group.nnodes > 0 else {}
    (first,) = group.comms[:1]
    if len(group.comms) == 1 and len(first.ranks) == group.nranks and len(first.hosts) == max(group.nnodes, 1):
        hardware["hosts"] = sorted(first.hosts)
    return Measurement(
        collective=coll,
        nranks=group.nranks,
        rows=rows,
        backend="nccl",
        device="cuda",
        dtype=group.dtype or "float32",
        hardware=hardware,
        software=software,
        source={"log": source, "communicator": group.label},
        notes=f"{log.kind}: {group.operation} on {group.label}, {len(group.calls)} calls"
              + ("" if group.dtype else "; the element type is not recorded"),
        file=source,
    )


def _group_text(group: CallGroup) -> str:
    nodes = f"{group.nnodes} node{'s' if group.nnodes > 1 else ''}, " if group.nnodes else ""
    return f"{group.operation} on {group.nranks} ranks ({nodes}{group.label})"


def call_measurements(log: CallLog, *, pool: bool = False) -> list[tuple[CallGroup, Measurement | None, str]]:
    """Every group of recorded calls (:meth:`CallLog.groups`) with its measurement, or None and why not (an
    operation collsim does not simulate, no complete call)."""
    out: list[tuple[CallGroup, Measurement | None, str]] = []
    for group in log.groups(pool=pool):
        try:
            out.append((group, measurement_from_calls(group, log), ""))
        except MeasurementError as exc:
            out.append((group, None, str(exc).removeprefix(f"{log.source}: ")))
    return out


def call_file_stem(group: CallGroup, pooled: bool) -> str:
    """A file name stem for a group's measurement: the communicator's name and id (or its shape when pooled), the
    collective and the element type where recorded, e.g. ``DP-0x7f8c-allreduce`` or
    ``allreduce-bfloat16-16ranks-2nodes``.

    >>> from collsim.calibration.calls import CallGroup, Communicator
    >>> g = CallGroup("AllReduce", None, [Communicator("0x7f8c", "DP Group 0", 16, 2)], 16, 2)
    >>> call_file_stem(g, False), call_file_stem(g, True)
    ('DP-Group-0-0x7f8c-allreduce', 'allreduce-16ranks-2nodes')
    """
    coll = simulated_collective(group.operation) or group.operation.lower().strip("_")
    what = "-".join(x for x in (coll, group.dtype) if x)
    if pooled:
        nodes = f"-{group.nnodes}nodes" if group.nnodes else ""
        return f"{what}-{group.nranks}ranks{nodes}"
    comm = group.comms[0]
    who = f"{comm.name}-{comm.comm_id}" if comm.name and comm.name != comm.comm_id else comm.comm_id
    return "-".join(x for x in (re.sub(r"[^A-Za-z0-9_.]+", "-", who).strip("-"), what) if x)


def format_call_groups(
    log: CallLog, entries: Sequence[tuple[CallGroup, Measurement | None, str]], written: Mapping[int, str]
) -> str:
    """The table ``collsim import inspector`` and ``import torch-trace`` print: one line a group (communicator or
    shape, operation, type, ranks, nodes, calls, sizes, the ranks' median skew, the median busbw at the largest
    size) and where it was written, or why not (``written`` maps an entry's index to its file); then a line for each
    rank that started last at most calls (:func:`straggler_text`)."""
    hosts = len(log.hosts)
    head = (f"# {log.kind}: {len(log.files)} file{'s' if len(log.files) != 1 else ''} from {hosts} "
            f"host{'s' if hosts != 1 else ''}, {len(log.comms)} communicator{'s' if len(log.comms) != 1 else ''}, "
            f"{log.records:,} records{' (format ' + ', '.join(sorted(log.versions)) + ')' if log.versions else ''}")
    lines = [head, f"{'communicator':<32} {'operation':<17} {'ranks':>5} {'nodes':>5} {'calls':>7} {'sizes':>5} "
                   f"{'skew us':>8} {'largest':>9} {'busbw':>8}  written"]  # fmt: skip
    for i, (group, m, why) in enumerate(entries):
        label = group.label if len(group.label) <= 32 else group.label[:29] + "..."
        op = f"{group.operation}{' ' + group.dtype if group.dtype else ''}"
        nodes = str(group.nnodes) if group.nnodes else "?"
        common = f"{label:<32} {op:<17} {group.nranks:>5} {nodes:>5} {len(group.calls):>7}"
        if m is None:
            lines.append(f"{common} {'-':>5} {'-':>8} {'-':>9} {'-':>8}  not written: {why}")
            continue
        last = m.rows[-1]
        busbw = m.busbw_gbps(last)
        lines.append(f"{common} {len(m.rows):>5} {m.software['rank_skew_us']:>8.1f} {format_size(last.size_bytes):>9} "
                     f"{busbw if busbw is not None else float('nan'):>8.2f}  {written.get(i, '-')}")  # fmt: skip
    lines += [f"# {text}" for group, m, _ in entries if m is not None and (text := straggler_text(m))]
    return "\n".join(lines) + "\n"


def recorded_pairs(m: Measurement) -> dict[int, tuple[str, str]]:
    """The (algorithm, protocol) NCCL ran at each size, as a profiler recorded them (``software.calls.pairs``: an
    NCCL Inspector log of format v4.3), in :func:`~collsim.calibration.validate.validate`'s ``logged`` form; empty
    when the measurement has none.

    >>> recorded_pairs(Measurement("allreduce", software={"calls": {"pairs": {"1048576": "Ring/LL128"}}}))
    {1048576: ('Ring', 'LL128')}
    """
    pairs = calls_info(m).get("pairs")
    out: dict[int, tuple[str, str]] = {}
    for size, pair in (pairs if isinstance(pairs, Mapping) else {}).items():
        algo, _, proto = str(pair).partition("/")
        if str(size).isdigit() and algo and proto:
            out[int(size)] = (algo, proto)
    return out


def calls_info(m: Measurement) -> Mapping[str, Any]:
    """``software.calls`` of a measurement of a job's recorded calls (:func:`measurement_from_calls`), or an empty
    mapping."""
    info = m.software.get("calls")
    return info if isinstance(info, Mapping) else {}


def uneven_hosts(m: Measurement) -> str | None:
    """The run's hosts with their rank counts (``"a 8, b 4"``) where they ran different numbers of ranks
    (``hardware.ranks_per_host``: ``mpirun -H a:8,b:4``), else None.

    >>> uneven_hosts(Measurement("allreduce", 12, hardware={"hosts": ["a", "b"], "ranks_per_host": [8, 4]}))
    'a 8, b 4'
    """
    per_host, hosts = m.hardware.get("ranks_per_host"), m.hardware.get("hosts")
    if not (isinstance(per_host, list) and isinstance(hosts, list) and len(set(per_host)) > 1):
        return None
    return ", ".join(f"{h} {n}" for h, n in zip(hosts, per_host, strict=False))


#: The chance at most that :func:`straggler_text` names a rank of a communicator where none is held back.
STRAGGLER_FALSE_ALARM = 0.01


def straggler_chance(count: int, calls: int, nranks: int) -> float:
    """The chance that some rank of ``nranks``, each equally likely to start a call last, starts last in at least
    ``count`` of ``calls`` calls: ``nranks`` times the binomial tail P(Binomial(calls, 1/nranks) >= count) (a union
    bound over the ranks, 1 at most).

    >>> round(straggler_chance(5, 39, 16), 2)  # the busiest of 16 ranks over 39 calls: chance, not a straggler
    1.0
    >>> straggler_chance(30, 40, 16) < 1e-20
    True
    """
    from scipy.stats import binom

    if nranks < 2 or calls < 1 or count < 1:
        return 1.0
    return float(min(1.0, nranks * binom.sf(count - 1, calls, 1.0 / nranks)))


def straggler_text(m: Measurement) -> str | None:
    """A line naming the rank that started last more often than chance explains, from a measurement of recorded
    calls (``software.calls.last_to_start``): at least 3 times, and so often that the busiest of ``nranks`` ranks
    equally likely to start last would reach it with a chance below :data:`STRAGGLER_FALSE_ALARM`
    (:func:`straggler_chance`); None otherwise.

    >>> m = Measurement("allreduce", 16, software={"calls": {"communicators": ["DP (0x1)"],
    ...     "last_to_start": {"rank": 13, "host": "node1", "calls": 30, "of": 40}}})
    >>> straggler_text(m)
    'DP (0x1) allreduce: rank 13 (node1) started last in 30 of 40 calls (1 in 16 by chance): a rank held back'
    """
    info = calls_info(m)
    last = info.get("last_to_start")
    if not isinstance(last, Mapping) or m.nranks is None:
        return None
    count, calls = int(last.get("calls", 0)), int(last.get("of", 0))
    if count < 3 or straggler_chance(count, calls, m.nranks) >= STRAGGLER_FALSE_ALARM:
        return None
    where = f" ({last['host']})" if last.get("host") else ""
    comm = ", ".join(info.get("communicators") or []) or "the communicator"
    return (f"{comm} {m.collective}: rank {last['rank']}{where} started last in {count} of {calls} calls (1 in "
            f"{m.nranks} by chance): a rank held back")  # fmt: skip


def read_call_log(path: str | Path, *, progress: Callable[[int, int], None] | None = None) -> CallLog:
    """A profiler's record of a job's calls: NCCL Inspector logs (a log, or a folder holding some) or PyTorch
    profiler traces (a trace, or a folder of them).

    Raises
    ------
    MeasurementError
        Neither kind at ``path``, or output that cannot be read; the message names the file.
    """
    p = Path(path)
    try:
        if starts_like_torch_trace(p) or (p.is_dir() and _holds_traces_only(p)):
            return read_torch_traces(p, progress=progress)
        return read_inspector(p, progress=progress)
    except CallLogError as exc:
        raise MeasurementError(exc.reason, file=exc.file, field=exc.field) from None


def _holds_traces_only(folder: Path) -> bool:
    """True for a folder with PyTorch profiler traces below it and no NCCL Inspector log."""
    files = [f for f in folder.rglob("*") if f.is_file()]
    logs = (f for f in files if f.name.endswith(INSPECTOR_SUFFIXES) and starts_like_inspector(f))
    return not any(logs) and any(starts_like_torch_trace(f) for f in files)


def _calls_measurement(log: CallLog, collective: str | None, nranks: int | None) -> Measurement:
    """The one measurement ``read_measurement`` returns for a profiler's calls: communicators of one shape pooled,
    narrowed by ``collective`` and ``nranks``."""
    file = log.source
    command = "inspector" if log.kind == "NCCL Inspector" else "torch-trace"
    found = [(g, m) for g, m, _ in call_measurements(log, pool=True) if m is not None]
    picked = [(g, m) for g, m in found
              if (collective is None or m.collective == canonical_collective(collective))
              and (nranks is None or m.nranks == nranks)]  # fmt: skip
    if len(picked) == 1:
        return picked[0][1]
    listed = "; ".join(_group_text(g) for g, _ in found) or "no collective collsim simulates"
    if not picked:
        asked = " and ".join(x for x in (collective and f"collective {collective}",
                                         nranks and f"{nranks} ranks") if x)  # fmt: skip
        raise MeasurementError(f"no collective {'with ' + asked + ' ' if asked else ''}in this {log.kind} "
                               f"output; it holds: {listed}", file=file)  # fmt: skip
    raise MeasurementError(f"this {log.kind} output holds {len(picked)} collectives ({listed}): pick one with "
                           f"--collective and --nranks, or write each as a measurement with collsim import "
                           f"{command} {file} -o FOLDER", file=file)  # fmt: skip
