"""Result records and nccl-tests' metrics.

One :class:`Record` describes one simulated (or measured) collective at one message size. This module derives
nccl-tests' metrics from a size and a time; it knows nothing about how a time was produced. Collective names and
their spellings are :mod:`collsim.vocab`'s.

Conventions (nccl-tests, ``src/*.cu`` and ``src/common.cu`` of NVIDIA/nccl-tests 2.19)
--------------------------------------------------------------------------------------
* ``size`` is the larger of the send and receive buffers in bytes. For allgather, reduce_scatter, alltoall,
  gather and scatter that is the total ``count * nranks * typesize``; for the others it is ``count * typesize``.
* ``count`` is the element count passed to the NCCL call: per-rank elements for allgather, reduce_scatter,
  alltoall, gather and scatter (``size // typesize // nranks``); all elements of the buffer otherwise.
  nccl-tests (from v2.13.12) also rounds the per-rank count of allgather/reduce_scatter/alltoall down to a multiple
  of 16 bytes and prints the rounded total as size: so does collsim's NCCL (:func:`nccl_tests_bytes`); Gloo's
  tensors are whole elements (:func:`whole_element_bytes`). The size printed is the size simulated.
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

import functools
import math
import operator
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, cast

from collsim.units import DTYPE_SIZES
from collsim.vocab import PER_RANK_COUNT_COLLECTIVES, REDUCING_COLLECTIVES, canonical_collective

__all__ = [
    "BUSBW_FACTORS",
    "FLAT_FIELDS",
    "REPRESENTATIVE_SIZE",
    "Record",
    "busbw_factor",
    "make_record",
    "nccl_tests_bytes",
    "representative_size",
    "whole_element_bytes",
]


def _ring_allreduce_factor(n: int) -> float:
    return 2.0 * (n - 1) / n


def _all_to_all_factor(n: int) -> float:
    return (n - 1) / n


def _one(n: int) -> float:
    return 1.0


#: nccl-tests' bus-bandwidth factors as functions of the number of ranks ``n`` (``*GetBw`` in nccl-tests'
#: ``src/<collective>.cu``). busbw = algbw * factor is the bandwidth each rank's busiest link would need in an
#: optimal algorithm, so it is comparable with the hardware's link speed whatever the rank count. The keys are
#: :data:`collsim.vocab.MEASURED_COLLECTIVES`.
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


def busbw_factor(collective: str, nranks: int) -> float:
    """Return nccl-tests' bus-bandwidth factor (dimensionless) for a collective over ``nranks`` ranks.

    Parameters
    ----------
    collective : str
        A collective name (see :func:`collsim.vocab.canonical_collective`).
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

        Each value is converted to its field's declared type (``int``, ``float``, ``str``, ``X | None``, a
        ``dict``/``list`` of them), so NumPy numbers become plain Python ones and a field added later (in a
        subclass too) keeps its type: a ``float`` field is never truncated. ``breakdown`` (seconds) and ``notes``
        are copies.

        Examples
        --------
        >>> r = make_record(backend="gloo", collective="broadcast", algorithm="ring", protocol="-", nranks=2,
        ...                 dtype="int8", size_bytes=1000, time_s=1e-6, root=0)
        >>> list(r.to_dict())[:6], r.to_dict()["algbw_gbps"], r.to_dict()["redop"]
        (['backend', 'collective', 'algorithm', 'protocol', 'nranks', 'dtype'], 1.0, 'none')
        """
        return {name: _as_declared(getattr(self, name), hint) for name, hint in _field_types(cast(type, type(self)))}


@functools.cache
def _field_types(cls: type) -> tuple[tuple[str, Any], ...]:
    """(name, resolved type annotation) of each dataclass field of ``cls``, in declaration order."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in fields(cls))


def _as_declared(value: Any, hint: Any) -> Any:
    """``value`` as a plain JSON value of the type ``hint`` declares (``None`` stays ``None``).

    A union takes the first member the value is an instance of, else its first member; ``dict[K, V]`` and
    ``list[T]`` convert their items.

    >>> import numpy as np
    >>> _as_declared(np.float64(2.5), float), _as_declared(np.int64(3), int | None)
    (2.5, 3)
    >>> _as_declared({1: 2}, dict[str, float]), _as_declared(("a", 1), list[str])
    ({'1': 2.0}, ['a', '1'])
    """
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        match = next((m for m in members if m in (str, int, float, bool) and isinstance(value, m)), members[0])
        return _as_declared(value, match)
    if origin is dict:
        key_t, value_t = typing.get_args(hint)
        return {_as_declared(k, key_t): _as_declared(v, value_t) for k, v in value.items()}
    if origin in (list, tuple, Sequence):
        (item_t, *_) = typing.get_args(hint)
        return [_as_declared(v, item_t) for v in value]
    if hint in (str, int, float, bool):
        return hint(value)
    raise TypeError(f"no JSON form for a record field of type {hint!r}")


#: Record fields in order, without the nested ``breakdown`` and ``notes``: the flat columns of CSV and DataFrames.
FLAT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Record) if f.name not in ("breakdown", "notes"))

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


def _check_time(time_s: Any) -> float:
    """``time_s`` as a finite float of seconds >= 0, or a ValueError naming it."""
    if isinstance(time_s, (bool, str)):
        raise ValueError(f"time_s must be a number of seconds >= 0, got {time_s!r}")
    try:
        t = float(time_s)
    except (TypeError, ValueError):
        raise ValueError(f"time_s must be a number of seconds >= 0, got {time_s!r}") from None
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"time_s must be a finite number of seconds >= 0, got {time_s!r}")
    return t


def _check_redop(redop: str | None, collective: str) -> str:
    """The redop column: ``redop``, or nccl-tests' default (``sum`` for reducing collectives, else ``none``)."""
    if redop is None:
        redop = "sum" if collective in REDUCING_COLLECTIVES else "none"
    _check_label("redop", redop)
    if any(c.isspace() for c in redop):
        raise ValueError(f"redop must be one word (it is a column of nccl-tests text), got {redop!r}")
    return redop


def _check_breakdown(breakdown: Mapping[str, float] | None, time_s: float) -> dict[str, float]:
    """The breakdown as {category: seconds}, each finite and >= 0, adding up to ``time_s`` (seconds)."""
    bd: dict[str, float] = {}
    for key, value in (breakdown or {}).items():
        v = float(value)
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"breakdown[{key!r}] must be a finite number of seconds >= 0, got {value!r}")
        bd[str(key)] = v
    total = math.fsum(bd.values())
    if bd and not math.isclose(total, time_s, rel_tol=_BREAKDOWN_RTOL, abs_tol=_BREAKDOWN_ATOL_S):
        raise ValueError(
            f"breakdown must add up to time_s: categories sum to {total!r} s but time_s is {time_s!r} s "
            f"({', '.join(f'{k}={v!r}' for k, v in bd.items())})"
        )
    return bd


def nccl_tests_bytes(size_bytes: int, dtype: str, collective: str, nranks: int) -> int:
    """nccl-tests' size column for a requested ``size_bytes``: what ``*_perf -b/-e`` moves and prints.

    ``count = size // typesize`` (``setupArgs``, src/common.cu); for allgather, reduce_scatter, alltoall, gather and
    scatter the per-rank count ``count // nranks`` rounded down to a multiple of 16 bytes (``(count/nranks) &
    ~(16/eltSize - 1)`` in their ``*GetCollByteCount``, NVIDIA/nccl-tests since v2.13.12, "so that non-pow2 ranks
    have buffer addresses aligned"), times ``nranks``; whole elements otherwise. Older nccl-tests rounded only to
    whole elements per rank (:func:`whole_element_bytes`): the two differ only where ``nranks`` is not a power of
    two or the per-rank buffer is below 16 bytes. The parameters are :func:`whole_element_bytes`'s.

    Examples
    --------
    >>> nccl_tests_bytes(1 << 20, "float32", "allgather", 3)  # 87381 floats a rank -> 87380 (16-byte multiple)
    1048560
    >>> nccl_tests_bytes(1000, "int8", "allgather", 8), nccl_tests_bytes(15, "float32", "allreduce", 8)
    (896, 12)
    """
    elem = DTYPE_SIZES[dtype]
    count = size_bytes // elem
    if collective in PER_RANK_COUNT_COLLECTIVES:
        per_rank = (count // nranks) & ~(max(16 // elem, 1) - 1)  # a multiple of 16 bytes (of one element if larger)
        return per_rank * nranks * elem
    return count * elem


def whole_element_bytes(size_bytes: int, dtype: str, collective: str, nranks: int) -> int:
    """The bytes a collective of ``size_bytes`` really moves: a whole number of elements, as nccl-tests passes a
    ``count`` to the library (``size // typesize``, per rank and times ``nranks`` for per-rank-count collectives).

    One rule for sizes that are not whole elements: they round down, so anything below one element is a
    collective of ``count`` 0 (which NCCL discards and Gloo's allreduce and reduce return from at once).

    Parameters
    ----------
    size_bytes : int
        nccl-tests' size, bytes.
    dtype : str
        Element type (:data:`collsim.units.DTYPE_SIZES`).
    collective : str
        Canonical name.
    nranks : int
        Ranks (>= 1).

    Examples
    --------
    >>> whole_element_bytes(3, "float32", "allreduce", 8), whole_element_bytes(4097, "float32", "allreduce", 8)
    (0, 4096)
    >>> whole_element_bytes(100, "float32", "allgather", 8)  # 3 elements per rank, 8 ranks
    96
    """
    elem = DTYPE_SIZES[dtype]
    if collective in PER_RANK_COUNT_COLLECTIVES:
        return size_bytes // (elem * nranks) * elem * nranks
    return size_bytes // elem * elem


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
        Collective name (aliases accepted, stored in canonical form).
    nranks : int
        Number of ranks, >= 1.
    dtype : str
        A key of :data:`collsim.units.DTYPE_SIZES`, e.g. ``"float32"``.
    size_bytes : int
        nccl-tests' size, bytes (the whole buffer, see the module's conventions).
    time_s : float
        Time of one collective, seconds, >= 0. A time of 0 gives algbw = busbw = 0 instead of a division error.
    redop : str, optional
        Reduction operator; default ``"sum"`` for reducing collectives, ``"none"`` for the others (as nccl-tests).
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
        ``count`` in elements (per rank for per-rank-count collectives), ``algbw_gbps = size_bytes / time_s / 1e9``
        and ``busbw_gbps = algbw_gbps * busbw_factor``.

    Raises
    ------
    ValueError
        For an unknown collective or dtype, negative size or time, a non-finite time, or a breakdown that does
        not add up to the time; the message names the argument and what was expected.

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
    t = _check_time(time_s)
    redop = _check_redop(redop, coll)
    root = _check_int("root", root, -1)
    channels = None if channels is None else _check_int("channels", channels, 1)
    bd = _check_breakdown(breakdown, t)
    elements = size // DTYPE_SIZES[dtype]
    algbw = size / t / 1e9 if t > 0 else 0.0  # bytes/s to GB/s, GB = 1e9 bytes (nccl-tests)
    return Record(
        backend=_check_label("backend", backend),
        collective=coll,
        algorithm=_check_label("algorithm", algorithm),
        protocol=_check_label("protocol", protocol),
        nranks=n,
        dtype=dtype,
        size_bytes=size,
        count=elements // n if coll in PER_RANK_COUNT_COLLECTIVES else elements,
        time_us=t * 1e6,  # seconds to microseconds
        algbw_gbps=algbw,
        busbw_gbps=algbw * BUSBW_FACTORS[coll](n),
        redop=redop,
        root=root,
        channels=channels,
        breakdown=bd,
        notes=[str(x) for x in notes] if notes else [],
    )


#: Default size of the one collective a timeline, trace or report shows: 64 MiB (bytes).
REPRESENTATIVE_SIZE = 64 * 2**20


def representative_size(sizes: Iterable[int]) -> int:
    """The size a single-collective view shows: 64 MiB, or the largest of ``sizes`` when that is smaller.

    Parameters
    ----------
    sizes : iterable of int
        Candidate sizes in bytes (a scenario's sweep); empty means 64 MiB.

    Examples
    --------
    >>> representative_size([8, 1024**3]), representative_size([8, 4096])
    (67108864, 4096)
    """
    largest = max(sizes, default=REPRESENTATIVE_SIZE)
    return min(REPRESENTATIVE_SIZE, int(largest))
