"""Parse and format physical quantities at the edges of collsim.

Inside collsim everything is SI: sizes in bytes, times in seconds, bandwidths in bytes per second.
This module turns the strings people write ("400Gb/s", "1GiB", "2us") into those numbers and back.

Conventions
-----------
* Decimal prefixes (k, M, G, T, P) are powers of 1000, binary prefixes (Ki, Mi, Gi, Ti, Pi) powers of 1024.
* ``b`` is a bit and ``B`` a byte: ``400Gb/s`` is 400e9 bits/s = 50e9 bytes/s.
* A size without a unit is bytes (as nccl-tests' ``-b 8``). A bandwidth or a duration without a unit is an error
  whose message lists the accepted units (:data:`BANDWIDTH_UNITS`, :data:`TIME_UNITS`); a duration of 0 needs none.
* Reports follow nccl-tests: GB/s with GB = 1e9 bytes, times in microseconds.

Examples
--------
>>> parse_size("1GiB")
1073741824
>>> parse_bandwidth("400Gb/s")
50000000000.0
>>> parse_time("2us")
2e-06
>>> parse_size_range("1KiB:8KiB:x2")
[1024, 2048, 4096, 8192]
"""

from __future__ import annotations

import math
import re

__all__ = [
    "BANDWIDTH_UNITS",
    "DTYPE_SIZES",
    "MAX_SWEEP_SIZES",
    "NCCL_TESTS_TYPE_NAMES",
    "SIZE_UNITS",
    "TIME_UNITS",
    "UnitError",
    "format_bandwidth",
    "format_size",
    "format_time",
    "parse_bandwidth",
    "parse_size",
    "parse_size_range",
    "parse_time",
]


class UnitError(ValueError):
    """A quantity string that cannot be read; the message says what was expected."""


#: Decimal prefixes (powers of 1000) and binary ones (powers of 1024) of sizes and bandwidths.
_PREFIX: dict[str, float] = {
    "": 1.0,
    "k": 1e3,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "Ki": 1024.0,
    "Mi": 1024.0**2,
    "Gi": 1024.0**3,
    "Ti": 1024.0**4,
    "Pi": 1024.0**5,
}
#: A bare K, M, G or T after a size is binary, as nccl-tests' ``-b``/``-e`` read it (``1M`` = 1 MiB).
_NCCL_TESTS_SIZE_SUFFIX: dict[str, float] = {"K": 1024.0, "M": 1024.0**2, "G": 1024.0**3, "T": 1024.0**4}
_TIME_DIVISOR: dict[str, float] = {"s": 1.0, "ms": 1e3, "us": 1e6, "\u00b5s": 1e6, "\u03bcs": 1e6, "ns": 1e9}

#: The size units :func:`parse_size` accepts, in words (error messages and docs quote it).
SIZE_UNITS = (
    "B, kB (or KB), MB, GB, TB, PB (powers of 1000), KiB, MiB, GiB, TiB, PiB (powers of 1024), or a bare K, M, G, T "
    "(KiB to TiB, as nccl-tests' -b/-e); a number without a unit is bytes"
)
#: The bandwidth units :func:`parse_bandwidth` accepts, in words.
BANDWIDTH_UNITS = (
    "B/s (bytes) or b/s, bps (bits) after a prefix k (or K), M, G, T, P or Ki, Mi, Gi, Ti, Pi, e.g. 25GB/s, "
    "400Gb/s, 100Gbps, 1GiB/s; a unit is required"
)
#: The time units :func:`parse_time` accepts, in words.
TIME_UNITS = "s, ms, us (or \u00b5s), ns, e.g. 2us, 1.5ms; a unit is required (except for 0)"

#: Most sizes one sweep (``MIN:MAX:xF``, ``MIN:MAX:+STEP`` or a list) may hold.
MAX_SWEEP_SIZES = 100_000

_QTY = re.compile(r"^\s*([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z/\u00b5\u03bc]*)\s*$")


def _split(text: str | float | int, what: str, units: str) -> tuple[float, str | None]:
    """(number, unit) of a quantity; the unit is None for a Python number, "" for a string without one. ``units``
    (the accepted units, in words) ends the message of a string that is no quantity at all."""
    if isinstance(text, bool):
        raise UnitError(f"expected a {what}, got a boolean")
    if isinstance(text, (int, float)):
        value = float(text)
        unit: str | None = None
    else:
        raw = str(text)
        m = _QTY.match(raw) if len(raw) <= 100 else None
        if not m:
            shown = raw if len(raw) <= 60 else raw[:57] + "..."
            raise UnitError(f"cannot read {shown!r} as a {what}; use {units}")
        value, unit = float(m.group(1)), m.group(2)
    if not math.isfinite(value):
        raise UnitError(f"{what} {str(text)[:60]!r} is not a finite number")
    return value, unit


def parse_size(text: str | int | float) -> int:
    """Read a size and return it in bytes.

    Parameters
    ----------
    text : str or int
        A number of bytes, or a number with a unit: ``B``; ``kB``/``KB``, ``MB``, ``GB``, ``TB``, ``PB`` (powers of
        1000); ``KiB``, ``MiB``, ``GiB``, ``TiB``, ``PiB`` (powers of 1024). A bare ``K``/``M``/``G``/``T`` is read
        as binary (``1M`` = 1 MiB) as nccl-tests' ``-b``/``-e`` flags do. A number without a unit is bytes (the one
        default unit of sizes). The result must be whole bytes (``"1.5KiB"`` is 1536; ``"1.5"`` is an error), to
        within a float's error; an integer, or whole bytes written out, is exact at any size.

    Returns
    -------
    int
        Size in bytes.

    Raises
    ------
    UnitError
        An unknown unit (the message lists :data:`SIZE_UNITS`), a negative or non-finite size, a fraction of a
        byte.

    Examples
    --------
    >>> parse_size("8B"), parse_size("64KiB"), parse_size("1MB"), parse_size("1M"), parse_size("1PiB") == 2**50
    (8, 65536, 1000000, 1048576, True)
    """
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text  # exact: a float would round sizes above 2**53
    exact = _QTY.match(text) if isinstance(text, str) and len(text) <= 100 else None
    if exact and re.fullmatch(r"\+?[0-9]+", exact.group(1)) and exact.group(2) in ("", "B"):
        return int(exact.group(1))  # whole bytes written out: exact, whatever their size
    value, unit = _split(text, "size", SIZE_UNITS)
    if not unit or unit == "B":
        factor = 1.0
    elif unit in _NCCL_TESTS_SIZE_SUFFIX:
        factor = _NCCL_TESTS_SIZE_SUFFIX[unit]
    elif unit.endswith("B") and unit[:-1] in _PREFIX:
        factor = _PREFIX[unit[:-1]]
    else:
        raise UnitError(f"unknown size unit {unit!r} in {text!r}; use {SIZE_UNITS}")
    nbytes = value * factor
    if nbytes < 0 or not math.isfinite(nbytes):
        raise UnitError(f"size {text!r} must be a non-negative number of bytes")
    if abs(nbytes - round(nbytes)) > 1e-6:  # beyond a float's error: a fraction of a byte nothing can move
        raise UnitError(f"size {text!r} is {nbytes:.6g} B, not whole bytes")
    return round(nbytes)


_BANDWIDTH_UNIT = re.compile(r"(|k|K|M|G|T|P|Ki|Mi|Gi|Ti|Pi)(B|b)(/s|ps)")


def parse_bandwidth(text: str | int | float) -> float:
    """Read a bandwidth and return it in bytes per second.

    Parameters
    ----------
    text : str
        A number with a unit: ``GB/s`` (1e9 bytes/s), ``GiB/s``, ``Gb/s`` or ``Gbps`` (1e9 bits/s, divided by 8 to
        give bytes), with any prefix of :data:`BANDWIDTH_UNITS` (``B/s`` alone is bytes/s). A number without a unit
        is refused: ``100`` could mean 100 Gb/s as easily as 100 bytes/s.

    Returns
    -------
    float
        Bandwidth in bytes/s (positive).

    Raises
    ------
    UnitError
        No unit or an unknown one (the message lists the accepted units), a bandwidth that is not positive or not
        finite.

    Examples
    --------
    >>> parse_bandwidth("25GB/s"), parse_bandwidth("100Gbps"), parse_bandwidth("1GiB/s")
    (25000000000.0, 12500000000.0, 1073741824.0)
    """
    value, unit = _split(text, "bandwidth", BANDWIDTH_UNITS)
    if not unit:
        raise UnitError(f"bandwidth {text!r} has no unit; use {BANDWIDTH_UNITS}")
    m = _BANDWIDTH_UNIT.fullmatch(unit)
    if not m:
        raise UnitError(f"unknown bandwidth unit {unit!r} in {text!r}; use {BANDWIDTH_UNITS}")
    factor = _PREFIX[m.group(1)]
    if m.group(2) == "b":
        factor /= 8.0  # bits to bytes
    bw = value * factor
    if bw <= 0 or not math.isfinite(bw):
        raise UnitError(f"bandwidth {text!r} must be positive")
    return bw


def parse_time(text: str | int | float) -> float:
    """Read a duration and return it in seconds.

    Parameters
    ----------
    text : str
        A number with ``s``, ``ms``, ``us`` (or ``\u00b5s``), ``ns``. A number without a unit is refused (is ``300``
        ns or us?), except 0.

    Raises
    ------
    UnitError
        No unit or an unknown one (the message lists :data:`TIME_UNITS`), a negative or non-finite duration.

    Examples
    --------
    >>> parse_time("1.5ms"), parse_time("500ns"), parse_time("0")
    (0.0015, 5e-07, 0.0)
    """
    value, unit = _split(text, "duration", TIME_UNITS)
    if not unit:
        if value == 0:
            return 0.0
        raise UnitError(f"duration {text!r} has no unit; use {TIME_UNITS}")
    if unit not in _TIME_DIVISOR:
        raise UnitError(f"unknown time unit {unit!r} in {text!r}; use {TIME_UNITS}")
    if value < 0:
        raise UnitError(f"duration {text!r} must not be negative")
    return value / _TIME_DIVISOR[unit]


def parse_size_range(text: str) -> list[int]:
    """Read a sweep of sizes and return the list in bytes.

    Parameters
    ----------
    text : str
        ``MIN:MAX:xF`` multiplies by F from MIN while <= MAX (nccl-tests ``-f``); ``MIN:MAX:+STEP`` adds
        STEP; a comma-separated list of sizes is taken as it is; a single size is a one-element sweep.

    Raises
    ------
    UnitError
        A size :func:`parse_size` refuses, a malformed sweep, or more than :data:`MAX_SWEEP_SIZES` sizes (counted
        before the list is built).

    Examples
    --------
    >>> parse_size_range("8B:64B:x2")
    [8, 16, 32, 64]
    >>> parse_size_range("1KiB,4KiB")
    [1024, 4096]
    >>> parse_size_range("0:3KiB:+1KiB")
    [0, 1024, 2048, 3072]
    >>> parse_size_range("4M-64M")
    Traceback (most recent call last):
    ...
    collsim.units.UnitError: cannot read '4M-64M' as a size; ... (a sweep is MIN:MAX:xFACTOR such as 4M:64M:x2, ...)
    """
    text = str(text).strip()
    if "," in text:
        items = [p for p in text.split(",") if p.strip()]
        if len(items) > MAX_SWEEP_SIZES:
            raise UnitError(f"{len(items)} sizes; at most {MAX_SWEEP_SIZES}")
        return [parse_size(p) for p in items]
    parts = text.split(":")
    if len(parts) == 1:
        try:
            return [parse_size(parts[0])]
        except UnitError as exc:  # "4M-64M", nccl-tests' -b/-e written as one: say how a sweep is written
            hint = "a sweep is MIN:MAX:xFACTOR such as 4M:64M:x2, MIN:MAX:+STEP, or a list a,b,c"
            raise UnitError(f"{exc} ({hint})") from None
    shown = text if len(text) <= 60 else text[:57] + "..."
    if len(parts) != 3:
        raise UnitError(f"cannot read {shown!r} as a size sweep; expected MIN:MAX:xFACTOR, MIN:MAX:+STEP or a list")
    lo, hi = parse_size(parts[0]), parse_size(parts[1])
    if hi < lo:
        raise UnitError(f"size sweep {shown!r}: MAX is smaller than MIN")
    step = parts[2].strip()
    out: list[int] = []
    if step.startswith("x"):
        try:
            factor = float(step[1:])
        except ValueError:
            raise UnitError(f"size sweep {shown!r}: expected a number after x, e.g. x2") from None
        if not math.isfinite(factor) or factor <= 1 or lo <= 0:
            raise UnitError(f"size sweep {shown!r}: a factor sweep needs MIN > 0 and a finite factor > 1")
        count = math.floor(math.log(hi / lo) / math.log(factor) + 1e-9) + 1
        _check_count(count, shown)
        s = float(lo)
        while s <= hi * (1 + 1e-12):
            out.append(round(s))
            s *= factor
    elif step.startswith("+"):
        inc = parse_size(step[1:])
        if inc <= 0:
            raise UnitError(f"size sweep {shown!r}: the step must be positive")
        _check_count((hi - lo) // inc + 1, shown)
        out = list(range(lo, hi + 1, inc))
    else:
        raise UnitError(f"size sweep {shown!r}: the third part must be xFACTOR or +STEP")
    return out


def _check_count(count: int, shown: str) -> None:
    if count > MAX_SWEEP_SIZES:
        raise UnitError(f"size sweep {shown!r} has {count} sizes; at most {MAX_SWEEP_SIZES}")


def format_size(nbytes: float) -> str:
    """Format bytes with a binary prefix, e.g. ``format_size(1048576) == '1MiB'``.

    >>> format_size(8), format_size(1536), format_size(8 * 1024**3), format_size(1024**5)
    ('8B', '1.5KiB', '8GiB', '1PiB')
    """
    for unit, factor in (("PiB", 1024.0**5), ("TiB", 1024.0**4), ("GiB", 1024.0**3), ("MiB", 1024.0**2),
                         ("KiB", 1024.0)):  # fmt: skip
        if abs(nbytes) >= factor:
            return f"{nbytes / factor:g}{unit}"
    return f"{nbytes:g}B"


def format_bandwidth(bytes_per_s: float) -> str:
    """Format bytes/s in GB/s (1e9 bytes), as nccl-tests prints it.

    >>> format_bandwidth(25e9)
    '25.00 GB/s'
    """
    return f"{bytes_per_s / 1e9:.2f} GB/s"


def format_time(seconds: float) -> str:
    """Format seconds as microseconds (nccl-tests' unit) or ms/s when large.

    >>> format_time(2e-6), format_time(0.0125)
    ('2.00 us', '12.50 ms')
    """
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


#: Bytes per element of each data type collsim knows, by its PyTorch-style name.
DTYPE_SIZES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "int8": 1,
    "uint8": 1,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
}

#: The type names nccl-tests prints in its ``type`` column.
NCCL_TESTS_TYPE_NAMES: dict[str, str] = {
    "float32": "float",
    "float16": "half",
    "bfloat16": "bfloat16",
    "float64": "double",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
}
