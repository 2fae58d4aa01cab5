"""Result records, nccl-tests metrics and output formats.

One :class:`Record` describes one simulated (or measured) collective at one message size. This module knows
how to derive nccl-tests' metrics from a size and a time and how to write records as nccl-tests text, JSON, CSV
or a pandas DataFrame. It knows nothing about how a time was produced.

Conventions (nccl-tests, ``src/*.cu`` and ``src/common.cu`` of NVIDIA/nccl-tests 2.19)
--------------------------------------------------------------------------------------
* ``size`` is the larger of the send and receive buffers in bytes. For allgather, reduce_scatter, alltoall,
  gather and scatter that is the total ``count * nranks * typesize``; for the others it is ``count * typesize``.
* ``count`` is the element count passed to the NCCL call: per-rank elements for allgather, reduce_scatter,
  alltoall, gather and scatter (``size // typesize // nranks``); all elements of the buffer otherwise.
* ``algbw = size / time`` in GB/s with GB = 1e9 bytes; ``busbw = algbw * factor`` (:data:`BUSBW_FACTORS`).
* Times are reported in microseconds.

Examples
--------
>>> r = make_record(backend="nccl", collective="allreduce", algorithm="ring", protocol="simple", nranks=8,
...                 dtype="float32", size_bytes=1024**3, time_s=4643.20e-6)
>>> r.count, round(r.time_us, 2), round(r.algbw_gbps, 2), round(r.busbw_gbps, 2)
(268435456, 4643.2, 231.25, 404.69)
"""

from __future__ import annotations

import csv
import io
import json
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from collsim.units import DTYPE_SIZES, NCCL_TESTS_TYPE_NAMES

if TYPE_CHECKING:
    import pandas

__all__ = [
    "BUSBW_FACTORS",
    "COLLECTIVE_ALIASES",
    "PER_RANK_COUNT_COLLECTIVES",
    "REDUCING_COLLECTIVES",
    "Record",
    "busbw_factor",
    "canonical_collective",
    "format_nccl_tests",
    "make_record",
    "records_to_csv",
    "records_to_dataframe",
    "records_to_json",
]


def _ring_allreduce_factor(n: int) -> float:
    return 2.0 * (n - 1) / n


def _all_to_all_factor(n: int) -> float:
    return (n - 1) / n


def _one(n: int) -> float:
    return 1.0


#: nccl-tests' bus-bandwidth factors as functions of the number of ranks ``n`` (``*GetBw`` in nccl-tests'
#: ``src/<collective>.cu``). busbw = algbw * factor is the bandwidth each rank's busiest link would need in an
#: optimal algorithm, so it is comparable with the hardware's link speed whatever the rank count.
BUSBW_FACTORS: dict[str, Callable[[int], float]] = {
    "allreduce": _ring_allreduce_factor,
    "allgather": _all_to_all_factor,
    "reduce_scatter": _all_to_all_factor,
    "alltoall": _all_to_all_factor,
    "gather": _all_to_all_factor,
    "scatter": _all_to_all_factor,
    "broadcast": _one,
    "reduce": _one,
    "sendrecv": _one,
}

#: Collectives whose nccl-tests ``count`` is per rank (size = count * nranks * typesize).
PER_RANK_COUNT_COLLECTIVES: frozenset[str] = frozenset({"allgather", "reduce_scatter", "alltoall", "gather", "scatter"})

#: Collectives that apply a reduction operator; nccl-tests prints ``none`` as the redop of the others.
REDUCING_COLLECTIVES: frozenset[str] = frozenset({"allreduce", "reduce_scatter", "reduce", "sendrecv"})

#: Other spellings accepted for collective names (after lower-casing and turning ``-`` into ``_``).
COLLECTIVE_ALIASES: dict[str, str] = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "reducescatter": "reduce_scatter",
    "all_to_all": "alltoall",
    "all2all": "alltoall",
    "bcast": "broadcast",
    "send_recv": "sendrecv",
}


def canonical_collective(collective: str) -> str:
    """Return collsim's name for a collective, accepting nccl-tests and PyTorch spellings.

    Parameters
    ----------
    collective : str
        E.g. ``"allreduce"``, ``"all_reduce"``, ``"AllReduce"``, ``"reduce-scatter"``, ``"all_to_all"``.

    Returns
    -------
    str
        One of the keys of :data:`BUSBW_FACTORS`.

    Raises
    ------
    ValueError
        For an unknown name; the message lists the valid ones.

    Examples
    --------
    >>> canonical_collective("All_Reduce"), canonical_collective("reduce-scatter"), canonical_collective("all_to_all")
    ('allreduce', 'reduce_scatter', 'alltoall')
    """
    if not isinstance(collective, str):
        raise ValueError(f"collective must be a string, got {type(collective).__name__}")
    key = collective.strip().lower().replace("-", "_")
    key = COLLECTIVE_ALIASES.get(key, key)
    if key not in BUSBW_FACTORS:
        raise ValueError(f"unknown collective {collective!r}; expected one of: {', '.join(BUSBW_FACTORS)}")
    return key


def busbw_factor(collective: str, nranks: int) -> float:
    """Return nccl-tests' bus-bandwidth factor (dimensionless) for a collective over ``nranks`` ranks.

    Parameters
    ----------
    collective : str
        A collective name (see :func:`canonical_collective`).
    nranks : int
        Number of ranks, at least 1.

    Returns
    -------
    float
        ``2(n-1)/n`` for allreduce; ``(n-1)/n`` for allgather, reduce_scatter, alltoall, gather, scatter;
        ``1`` for broadcast, reduce, sendrecv.

    Raises
    ------
    ValueError
        For an unknown collective (the message lists the valid ones) or ``nranks < 1``.

    Examples
    --------
    >>> busbw_factor("allreduce", 8), busbw_factor("allgather", 8), busbw_factor("broadcast", 8)
    (1.75, 0.875, 1.0)
    """
    name = canonical_collective(collective)
    if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 1:
        raise ValueError(f"nranks must be an integer >= 1, got {nranks!r}")
    return BUSBW_FACTORS[name](nranks)


@dataclass
class Record:
    """One collective at one size: what ran, how long it took and nccl-tests' derived metrics.

    Build it with :func:`make_record`, which derives ``count``, ``time_us``, ``algbw_gbps`` and ``busbw_gbps``.

    Attributes
    ----------
    backend : str
        E.g. ``"nccl"`` or ``"gloo"``.
    collective : str
        Canonical collective name (a key of :data:`BUSBW_FACTORS`).
    algorithm : str
        E.g. ``"ring"``, ``"tree"``, ``"nvls"``.
    protocol : str
        E.g. ``"simple"``, ``"ll"``, ``"ll128"``; backends without protocols may use ``"-"``.
    nranks : int
        Number of ranks in the communicator.
    dtype : str
        Element type, a key of :data:`collsim.units.DTYPE_SIZES` (PyTorch-style name, e.g. ``"float32"``).
    size_bytes : int
        nccl-tests' size column, bytes (the larger of the send and receive buffers).
    count : int
        nccl-tests' count column, elements (per rank for allgather/reduce_scatter/alltoall/gather/scatter).
    time_us : float
        Time of one collective, microseconds.
    algbw_gbps : float
        size / time, GB/s with GB = 1e9 bytes.
    busbw_gbps : float
        algbw * busbw factor, GB/s with GB = 1e9 bytes.
    redop : str
        Reduction operator (``"sum"``, ``"max"`` ...) or ``"none"`` for collectives that do not reduce.
    root : int
        Root rank for rooted collectives, -1 otherwise (as nccl-tests prints it).
    channels : int or None
        Number of NCCL channels used, if known.
    breakdown : dict of str to float
        Time per category, seconds; the values add up to the record's time.
    notes : list of str
        Free-text remarks (why an algorithm was chosen, what was assumed).
    """

    backend: str
    collective: str
    algorithm: str
    protocol: str
    nranks: int
    dtype: str
    size_bytes: int
    count: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    redop: str = "sum"
    root: int = -1
    channels: int | None = None
    breakdown: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict with the fields in declaration order.

        Numbers are plain Python ``int``/``float``, ``breakdown`` (seconds) and ``notes`` are copies.

        Examples
        --------
        >>> r = make_record(backend="gloo", collective="broadcast", algorithm="ring", protocol="-", nranks=2,
        ...                 dtype="int8", size_bytes=1000, time_s=1e-6, root=0)
        >>> list(r.to_dict())[:6], r.to_dict()["algbw_gbps"], r.to_dict()["redop"]
        (['backend', 'collective', 'algorithm', 'protocol', 'nranks', 'dtype'], 1.0, 'none')
        """
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "breakdown":
                out[f.name] = {str(k): float(v) for k, v in value.items()}
            elif f.name == "notes":
                out[f.name] = [str(n) for n in value]
            elif f.name == "channels":
                out[f.name] = None if value is None else int(value)
            elif isinstance(value, str):
                out[f.name] = value
            elif f.name in ("time_us", "algbw_gbps", "busbw_gbps"):
                out[f.name] = float(value)
            else:
                out[f.name] = int(value)
        return out


#: Record fields in order, without the nested ``breakdown`` and ``notes``: the flat columns of CSV and DataFrames.
_FLAT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Record) if f.name not in ("breakdown", "notes"))

#: Relative tolerance on "the breakdown adds up to the time".
_BREAKDOWN_RTOL = 1e-6
#: Absolute tolerance on the same check, seconds (1 ps: float noise on sums of tiny terms).
_BREAKDOWN_ATOL_S = 1e-12


def _check_int(name: str, value: Any, minimum: int) -> int:
    """Return ``value`` as an int (NumPy integers accepted), or raise naming ``name`` and the expected range."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    try:
        ivalue = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}") from None
    if ivalue < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return ivalue


def _check_label(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


def make_record(
    *,
    backend: str,
    collective: str,
    algorithm: str,
    protocol: str,
    nranks: int,
    dtype: str,
    size_bytes: int,
    time_s: float,
    redop: str | None = None,
    root: int = -1,
    channels: int | None = None,
    breakdown: Mapping[str, float] | None = None,
    notes: Sequence[str] | None = None,
) -> Record:
    """Build a :class:`Record`, deriving count, time in us, algbw and busbw the way nccl-tests does.

    Parameters
    ----------
    backend, algorithm, protocol : str
        Labels, non-empty.
    collective : str
        Collective name (aliases accepted, stored in canonical form, see :func:`canonical_collective`).
    nranks : int
        Number of ranks, >= 1.
    dtype : str
        A key of :data:`collsim.units.DTYPE_SIZES`, e.g. ``"float32"``.
    size_bytes : int
        nccl-tests' size, bytes: the whole buffer, i.e. ``count * nranks * typesize`` for allgather,
        reduce_scatter, alltoall, gather and scatter and ``count * typesize`` otherwise.
    time_s : float
        Time of one collective, seconds, >= 0. A time of 0 gives algbw = busbw = 0 instead of a division error.
    redop : str, optional
        Reduction operator. Default: ``"sum"`` for reducing collectives, ``"none"`` for the others (as
        nccl-tests prints them).
    root : int, optional
        Root rank for broadcast/reduce/gather/scatter, -1 (default) otherwise.
    channels : int, optional
        NCCL channels used.
    breakdown : mapping of str to float, optional
        Time per category in seconds, each >= 0, adding up to ``time_s`` (relative tolerance 1e-6).
    notes : sequence of str, optional
        Free-text remarks.

    Returns
    -------
    Record
        ``count = size_bytes // typesize // nranks`` for per-rank-count collectives, ``size_bytes // typesize``
        otherwise; ``algbw_gbps = size_bytes / time_s / 1e9``; ``busbw_gbps = algbw_gbps * busbw_factor``.

    Raises
    ------
    ValueError
        For an unknown collective or dtype, negative size or time, a non-finite time, or a breakdown that does
        not add up to the time; the message names the argument and what was expected.

    Notes
    -----
    nccl-tests additionally rounds the per-rank count of allgather/reduce_scatter/alltoall down to a multiple
    of 16 bytes and prints the rounded total as size; collsim keeps the size it simulated.

    Examples
    --------
    >>> r = make_record(backend="nccl", collective="all_gather", algorithm="ring", protocol="ll128", nranks=4,
    ...                 dtype="float16", size_bytes=4096, time_s=2e-6)
    >>> r.collective, r.count, r.algbw_gbps, r.busbw_gbps, r.redop
    ('allgather', 512, 2.048, 1.536, 'none')
    """
    coll = canonical_collective(collective)
    n = _check_int("nranks", nranks, 1)
    if dtype not in DTYPE_SIZES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of: {', '.join(DTYPE_SIZES)}")
    size = _check_int("size_bytes", size_bytes, 0)
    if isinstance(time_s, (bool, str)):
        raise ValueError(f"time_s must be a number of seconds >= 0, got {time_s!r}")
    try:
        t = float(time_s)
    except (TypeError, ValueError):
        raise ValueError(f"time_s must be a number of seconds >= 0, got {time_s!r}") from None
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"time_s must be a finite number of seconds >= 0, got {time_s!r}")
    if redop is None:
        redop = "sum" if coll in REDUCING_COLLECTIVES else "none"
    _check_label("redop", redop)
    if any(c.isspace() for c in redop):
        raise ValueError(f"redop must be one word (it is a column of nccl-tests text), got {redop!r}")
    root_i = _check_int("root", root, -1)
    ch = None if channels is None else _check_int("channels", channels, 1)

    typesize = DTYPE_SIZES[dtype]  # bytes per element
    count = size // typesize // n if coll in PER_RANK_COUNT_COLLECTIVES else size // typesize

    bd: dict[str, float] = {}
    if breakdown:
        for key, value in breakdown.items():
            v = float(value)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"breakdown[{key!r}] must be a finite number of seconds >= 0, got {value!r}")
            bd[str(key)] = v
        total = math.fsum(bd.values())
        if not math.isclose(total, t, rel_tol=_BREAKDOWN_RTOL, abs_tol=_BREAKDOWN_ATOL_S):
            raise ValueError(
                f"breakdown must add up to time_s: categories sum to {total!r} s but time_s is {t!r} s "
                f"({', '.join(f'{k}={v!r}' for k, v in bd.items())})"
            )

    algbw = size / t / 1e9 if t > 0 else 0.0  # bytes/s to GB/s, GB = 1e9 bytes (nccl-tests)
    return Record(
        backend=_check_label("backend", backend),
        collective=coll,
        algorithm=_check_label("algorithm", algorithm),
        protocol=_check_label("protocol", protocol),
        nranks=n,
        dtype=dtype,
        size_bytes=size,
        count=count,
        time_us=t * 1e6,  # seconds to microseconds
        algbw_gbps=algbw,
        busbw_gbps=algbw * BUSBW_FACTORS[coll](n),
        redop=redop,
        root=root_i,
        channels=ch,
        breakdown=bd,
        notes=[str(x) for x in notes] if notes else [],
    )


def _fit(value: float, width: int) -> str:
    """Format like nccl-tests' ``getFloatStr``: 2 decimals, else 1, else 0, else exponent, to fit ``width``."""
    for spec in (".2f", ".1f", ".0f"):
        text = f"{value:{width}{spec}}"
        if len(text) <= width:
            return text
    return f"{value:{width}.{1 if width >= 7 else 0}e}"


def _word(name: str, value: str) -> str:
    if not value or any(c.isspace() for c in value):
        raise ValueError(f"{name} {value!r} cannot be a column of nccl-tests text: it must be one non-empty word")
    return value


def format_nccl_tests(records: Sequence[Record], *, header: str | None = None) -> str:
    """Write records as nccl-tests' text table (out-of-place columns only).

    Widths follow nccl-tests 2.19 (``src/util.cu``): ``%12li  %12li  %8s  %6s  %6s`` for size, count, type,
    redop, root, then time (7 characters, 2 decimals while they fit, then 1, then 0) and algbw/busbw (6 characters,
    same rule). ``#wrong`` is ``N/A``: a simulation checks no data. The footer gives the mean busbw over the rows as
    ``# Avg bus bandwidth    : X`` (``%g``, as nccl-tests). Every data row splits on whitespace into 9 columns.

    Parameters
    ----------
    records : sequence of Record
        Rows, printed in the given order.
    header : str, optional
        Comment lines printed first (each prefixed with ``# `` unless it already starts with ``#``).

    Returns
    -------
    str
        The text, ending with a newline.

    Examples
    --------
    >>> r = make_record(backend="nccl", collective="allreduce", algorithm="ring", protocol="simple", nranks=8,
    ...                 dtype="float32", size_bytes=1024**3, time_s=4643.20e-6)
    >>> print(format_nccl_tests([r]))  # doctest: +NORMALIZE_WHITESPACE
    #                                                      out-of-place
    #       size         count      type   redop    root     time   algbw   busbw  #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)
      1073741824     268435456     float     sum      -1  4643.20  231.25  404.69     N/A
    # Avg bus bandwidth    : 404.688
    <BLANKLINE>
    """
    lines: list[str] = []
    if header:
        for line in header.splitlines():
            lines.append(line if line.startswith("#") else f"# {line}".rstrip())
        lines.append("#")
    lines.append(f"# {'':>10s}  {'':>12s}  {'':>8s}  {'':>6s}  {'':>6s}           out-of-place")
    lines.append(
        f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}"
        f"  {'time':>7s}  {'algbw':>6s}  {'busbw':>6s}  {'#wrong':>6s}"
    )
    lines.append(
        f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}"
        f"  {'(us)':>7s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}"
    )
    for r in records:
        type_name = NCCL_TESTS_TYPE_NAMES.get(r.dtype)
        if type_name is None:
            raise ValueError(
                f"record dtype {r.dtype!r} has no nccl-tests type name; expected one of: "
                f"{', '.join(NCCL_TESTS_TYPE_NAMES)}"
            )
        lines.append(
            f"{r.size_bytes:12d}  {r.count:12d}  {type_name:>8s}  {_word('redop', r.redop):>6s}  {r.root:6d}"
            f"  {_fit(r.time_us, 7):>7s}  {_fit(r.algbw_gbps, 6):>6s}  {_fit(r.busbw_gbps, 6):>6s}    N/A"
        )
    avg = math.fsum(r.busbw_gbps for r in records) / len(records) if records else 0.0
    lines.append(f"# Avg bus bandwidth    : {avg:g}")
    return "\n".join(lines) + "\n"


def _json_default(obj: Any) -> Any:
    """Turn NumPy scalars/arrays, paths, sets and records into JSON values; refuse anything else clearly."""
    if isinstance(obj, Record):
        return obj.to_dict()
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if hasattr(obj, "tolist") and callable(obj.tolist):  # NumPy scalars and arrays
        return obj.tolist()
    if hasattr(obj, "model_dump") and callable(obj.model_dump):  # pydantic v2 models
        return obj.model_dump(mode="json")
    raise TypeError(f"cannot write a {type(obj).__name__} as JSON: {obj!r}")


def records_to_json(records: Sequence[Record], scenario: Mapping[str, Any] | None = None, **extra: Any) -> str:
    """Write records as one JSON object ``{"scenario": ..., "results": [...], **extra}`` (indent 2).

    Parameters
    ----------
    records : sequence of Record
        Each becomes :meth:`Record.to_dict` (time in us, bandwidths in GB/s, breakdown in seconds).
    scenario : mapping, optional
        The scenario that produced them (``null`` if not given). NumPy values, paths and pydantic models in it
        are converted.
    **extra
        More top-level keys (e.g. ``collsim_version``); ``results`` is reserved.

    Returns
    -------
    str
        The JSON text (strict: no NaN or Infinity).

    Raises
    ------
    ValueError
        If ``extra`` uses the key ``results`` or a value is NaN/infinite.
    TypeError
        If a value cannot be written as JSON; the message names its type.

    Examples
    --------
    >>> r = make_record(backend="nccl", collective="reduce", algorithm="ring", protocol="ll", nranks=2,
    ...                 dtype="float64", size_bytes=64, time_s=1e-6, root=0)
    >>> doc = json.loads(records_to_json([r], {"name": "demo"}, collsim_version="0.1.0"))
    >>> list(doc), doc["results"][0]["count"], doc["results"][0]["busbw_gbps"]
    (['scenario', 'results', 'collsim_version'], 8, 0.064)
    """
    if "results" in extra:
        raise ValueError("records_to_json: 'results' is reserved for the records; pass other keys in **extra")
    doc: dict[str, Any] = {"scenario": scenario, "results": [r.to_dict() for r in records], **extra}
    try:
        return json.dumps(doc, indent=2, allow_nan=False, default=_json_default)
    except ValueError as exc:
        raise ValueError(f"records_to_json: {exc} (JSON has no NaN or Infinity; replace them with null)") from exc


def _flat_rows(records: Sequence[Record]) -> tuple[list[str], list[dict[str, Any]]]:
    categories: dict[str, None] = {}  # insertion-ordered set of breakdown categories, first seen first
    for r in records:
        for key in r.breakdown:
            categories.setdefault(key, None)
    columns = [*_FLAT_FIELDS, *(f"breakdown_{c}" for c in categories)]
    rows: list[dict[str, Any]] = []
    for r in records:
        d = r.to_dict()
        row = {name: d[name] for name in _FLAT_FIELDS}
        for c in categories:
            row[f"breakdown_{c}"] = r.breakdown.get(c)
        rows.append(row)
    return columns, rows


def records_to_csv(records: Sequence[Record]) -> str:
    """Write records as CSV: the flat Record fields, then one ``breakdown_<category>`` column per category.

    Breakdown columns are in seconds, in the order categories are first seen; a record without a category
    leaves its cell empty, as does ``channels`` when unknown. ``notes`` are not written.

    Parameters
    ----------
    records : sequence of Record
        Rows in the given order.

    Returns
    -------
    str
        CSV text with a header line and ``\\n`` line endings.

    Examples
    --------
    >>> r = make_record(backend="gloo", collective="allreduce", algorithm="ring", protocol="-", nranks=2,
    ...                 dtype="float32", size_bytes=400, time_s=3e-6, breakdown={"net": 2e-6, "reduce": 1e-6})
    >>> print(records_to_csv([r]).splitlines()[0])
    backend,collective,algorithm,protocol,nranks,dtype,size_bytes,count,time_us,algbw_gbps,busbw_gbps,redop,root,channels,breakdown_net,breakdown_reduce
    """
    columns, rows = _flat_rows(records)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


def records_to_dataframe(records: Sequence[Record]) -> pandas.DataFrame:
    """Return records as a pandas DataFrame with the same columns as :func:`records_to_csv`.

    Missing breakdown categories (seconds) and unknown ``channels`` are NaN/None. pandas is imported here,
    so the rest of this module works without it.

    Parameters
    ----------
    records : sequence of Record
        Rows in the given order.

    Returns
    -------
    pandas.DataFrame
        One row per record.

    Examples
    --------
    >>> r = make_record(backend="nccl", collective="allreduce", algorithm="tree", protocol="ll", nranks=2,
    ...                 dtype="float32", size_bytes=8, time_s=1e-6)
    >>> df = records_to_dataframe([r])
    >>> df.shape, float(df.loc[0, "busbw_gbps"])
    ((1, 14), 0.008)
    """
    import pandas as pd

    columns, rows = _flat_rows(records)
    return pd.DataFrame(rows, columns=columns)
