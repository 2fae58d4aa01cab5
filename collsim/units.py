"""Parse and format physical quantities at the edges of collsim.

Inside collsim everything is SI: sizes in bytes, times in seconds, bandwidths in bytes per second.
This module turns the strings people write ("400Gb/s", "1GiB", "2us") into those numbers and back.

Conventions
-----------
* Decimal prefixes (k, M, G, T) are powers of 1000, binary prefixes (Ki, Mi, Gi, Ti) powers of 1024.
* ``b`` is a bit and ``B`` a byte: ``400Gb/s`` is 400e9 bits/s = 50e9 bytes/s.
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
    "DTYPE_SIZES",
    "NCCL_TESTS_TYPE_NAMES",
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

_QTY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z/µ]*)\s*$")


def _split(text: str | float | int, what: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise UnitError(f"expected a {what}, got a boolean")
    if isinstance(text, (int, float)):
        return float(text), ""
    m = _QTY.match(str(text))
    if not m:
        raise UnitError(f"cannot read {text!r} as a {what}")
    return float(m.group(1)), m.group(2)


def parse_size(text: str | int | float) -> int:
    """Read a size and return it in bytes.

    Parameters
    ----------
    text : str or int
        A number of bytes, or a number with a unit: ``B``, ``KB``/``kB`` (1e3 B), ``KiB`` (1024 B),
        ``MB``, ``MiB``, ``GB``, ``GiB``, ``TB``, ``TiB``. A bare ``K``/``M``/``G`` is read as binary
        (``1M`` = 1 MiB) as nccl-tests' ``-b``/``-e`` flags do.

    Returns
    -------
    int
        Size in bytes.

    Examples
    --------
    >>> parse_size("8B"), parse_size("64KiB"), parse_size("1MB"), parse_size("1M")
    (8, 65536, 1000000, 1048576)
    """
    value, unit = _split(text, "size (e.g. 8B, 64KiB, 1GiB)")
    if unit in ("", "B"):
        factor = 1.0
    elif unit in ("K", "M", "G", "T"):  # nccl-tests style: binary
        factor = 1024.0 ** ("KMGT".index(unit) + 1)
    elif unit.endswith("B") and unit[:-1] in _PREFIX:
        factor = _PREFIX[unit[:-1]]
    else:
        raise UnitError(f"unknown size unit {unit!r} in {text!r}; use B, KiB, MiB, GiB, KB, MB or GB")
    nbytes = value * factor
    if nbytes < 0 or not math.isfinite(nbytes):
        raise UnitError(f"size {text!r} must be a non-negative number of bytes")
    return round(nbytes)


def parse_bandwidth(text: str | int | float) -> float:
    """Read a bandwidth and return it in bytes per second.

    Parameters
    ----------
    text : str or float
        A number of bytes/s, or a number with a unit: ``GB/s`` (1e9 bytes/s), ``GiB/s``, ``Gb/s`` or
        ``Gbps`` (1e9 bits/s, divided by 8 to give bytes), and the k/M/T variants.

    Returns
    -------
    float
        Bandwidth in bytes/s.

    Examples
    --------
    >>> parse_bandwidth("25GB/s"), parse_bandwidth("100Gbps"), parse_bandwidth("1GiB/s")
    (25000000000.0, 12500000000.0, 1073741824.0)
    """
    value, unit = _split(text, "bandwidth (e.g. 25GB/s, 400Gb/s)")
    if unit in ("", "B/s"):
        return value
    m = re.fullmatch(r"(|k|K|M|G|T|Ki|Mi|Gi|Ti)(B|b)(/s|ps)", unit)
    if not m:
        raise UnitError(f"unknown bandwidth unit {unit!r} in {text!r}; use GB/s, GiB/s, Gb/s or Gbps")
    factor = _PREFIX[m.group(1)]
    if m.group(2) == "b":
        factor /= 8.0  # bits to bytes
    bw = value * factor
    if bw <= 0 or not math.isfinite(bw):
        raise UnitError(f"bandwidth {text!r} must be positive")
    return bw


_TIME_DIVISOR = {"s": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6, "ns": 1e9}


def parse_time(text: str | int | float) -> float:
    """Read a duration and return it in seconds.

    Parameters
    ----------
    text : str or float
        Seconds, or a number with ``s``, ``ms``, ``us`` (or ``µs``), ``ns``.

    Examples
    --------
    >>> parse_time("1.5ms"), parse_time("500ns"), parse_time(0.5)
    (0.0015, 5e-07, 0.5)
    """
    value, unit = _split(text, "duration (e.g. 2us, 1.5ms)")
    if unit == "":
        return value
    if unit not in _TIME_DIVISOR:
        raise UnitError(f"unknown time unit {unit!r} in {text!r}; use s, ms, us or ns")
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

    Examples
    --------
    >>> parse_size_range("8B:64B:x2")
    [8, 16, 32, 64]
    >>> parse_size_range("1KiB,4KiB")
    [1024, 4096]
    >>> parse_size_range("0:3KiB:+1KiB")
    [0, 1024, 2048, 3072]
    """
    text = str(text).strip()
    if "," in text:
        return [parse_size(p) for p in text.split(",") if p.strip()]
    parts = text.split(":")
    if len(parts) == 1:
        return [parse_size(parts[0])]
    if len(parts) != 3:
        raise UnitError(f"cannot read {text!r} as a size sweep; expected MIN:MAX:xFACTOR, MIN:MAX:+STEP or a list")
    lo, hi = parse_size(parts[0]), parse_size(parts[1])
    if hi < lo:
        raise UnitError(f"size sweep {text!r}: MAX is smaller than MIN")
    step = parts[2].strip()
    out: list[int] = []
    if step.startswith("x"):
        factor = float(step[1:])
        if factor <= 1 or lo <= 0:
            raise UnitError(f"size sweep {text!r}: a factor sweep needs MIN > 0 and a factor > 1")
        s = float(lo)
        while s <= hi * (1 + 1e-12):
            out.append(round(s))
            s *= factor
    elif step.startswith("+"):
        inc = parse_size(step[1:])
        if inc <= 0:
            raise UnitError(f"size sweep {text!r}: the step must be positive")
        s2 = lo
        while s2 <= hi:
            out.append(s2)
            s2 += inc
    else:
        raise UnitError(f"size sweep {text!r}: the third part must be xFACTOR or +STEP")
    if len(out) > 100_000:
        raise UnitError(f"size sweep {text!r} has {len(out)} sizes; at most 100000")
    return out


def format_size(nbytes: float) -> str:
    """Format bytes with a binary prefix, e.g. ``format_size(1048576) == '1MiB'``.

    >>> format_size(8), format_size(1536), format_size(8 * 1024**3)
    ('8B', '1.5KiB', '8GiB')
    """
    for unit, factor in (("GiB", 1024.0**3), ("MiB", 1024.0**2), ("KiB", 1024.0)):
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
