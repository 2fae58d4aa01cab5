"""A tolerant parser for nccl-tests output as people paste it.

nccl-tests (NVIDIA/nccl-tests, ``src/common.cu``) prints one data row per message size::

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
             8             2     float     sum      -1    83.42    0.00    0.00      0    34.75    0.00    0.00      0

The first ``time algbw busbw #wrong`` block is out-of-place, the second in-place. Rows are recognised by their
column count, so every ``*_perf`` binary and every nccl-tests version is read the same way:

=======  =============================================================================================
columns  layout
=======  =============================================================================================
13       size count type redop root  + out-of-place (time algbw busbw #wrong) + in-place (same)
12       size count type redop       + out-of-place + in-place (versions before the ``root`` column)
9        size count type redop root  + one block (in-place block cut off)
8        size count type redop       + one block
7        size + out-of-place (time algbw busbw) + in-place (time algbw busbw): hand-trimmed tables
4        size time algbw busbw: hand-trimmed tables
=======  =============================================================================================

Units are nccl-tests': size in bytes, time in microseconds, algbw and busbw in GB/s with GB = 1e9 bytes.

Rank or time prefixes added by launchers are removed first (``0:`` from ``srun -l``, ``[1,0]<stdout>:`` from
``mpirun --tag-output``, ``Thu Jul 18 15:41:05 2024<stdout>:`` from ``mpirun --timestamp-output``, ISO
timestamps, ``host:`` from pdsh), as are markdown table pipes and code fences. Comments (``#``), ``NCCL INFO``
lines, command lines and column headers are skipped; they give the collective (``all_reduce_perf`` ...) and the
number of ranks. Any other line emits a :class:`ParseWarning` naming its line number and is skipped; parsing
never stops on bad input.

Examples
--------
>>> text = '''
... # Collective test starting: all_gather_perf
... #  Rank  0 Group  0 Pid 4242 on node1 device  0 [0x18] NVIDIA H100 80GB HBM3
... #  Rank  1 Group  0 Pid 4242 on node1 device  1 [0x2a] NVIDIA H100 80GB HBM3
... 0:    1048576   131072   float   none   -1   20.50  51.15  25.58  0   19.90  52.69  26.35  N/A
... # Avg bus bandwidth    : 25.96
... '''
>>> log = parse_nccl_tests(text)
>>> log.collective, log.nranks, len(log.rows)
('allgather', 2, 1)
>>> row = log.rows[0]
>>> row.size_bytes, row.count, row.dtype, row.redop, row.root, row.time_us, row.inplace_busbw_gbps, row.line
(1048576, 131072, 'float32', 'none', -1, 20.5, 26.35, 5)
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from collsim.units import NCCL_TESTS_TYPE_NAMES
from collsim.vocab import canonical_collective

__all__ = ["MeasuredRow", "NcclTestsLog", "ParseWarning", "parse_nccl_tests", "read_nccl_tests"]


class ParseWarning(UserWarning):
    """A line of nccl-tests text that was skipped or looks suspicious; the message names the source and line."""


@dataclass(frozen=True)
class MeasuredRow:
    """One data row of nccl-tests output: one message size, out-of-place and (if printed) in-place results.

    Attributes
    ----------
    size_bytes : int
        nccl-tests' ``size`` column, bytes (the larger of the send and receive buffers).
    count : int or None
        nccl-tests' ``count`` column, elements (per rank for allgather, reduce_scatter, alltoall, gather,
        scatter); None for hand-trimmed tables without it.
    dtype : str or None
        Element type in collsim's spelling (``"float32"`` for nccl-tests' ``float``, ``"float16"`` for ``half``,
        see :data:`collsim.units.NCCL_TESTS_TYPE_NAMES`); an unknown nccl-tests name (e.g. ``"f8e4m3"``) is kept
        as printed; None when the column is absent.
    redop : str or None
        Reduction operator as printed (``"sum"``, ``"none"`` ...); None when the column is absent.
    root : int or None
        Root rank as printed (-1 for collectives without a root); None for layouts without the column.
    time_us : float
        Out-of-place time of one collective, microseconds.
    algbw_gbps, busbw_gbps : float
        Out-of-place algorithm and bus bandwidth, GB/s with GB = 1e9 bytes.
    inplace_time_us : float or None
        In-place time, microseconds; None when the in-place block is absent.
    inplace_algbw_gbps, inplace_busbw_gbps : float or None
        In-place bandwidths, GB/s with GB = 1e9 bytes; None when the in-place block is absent.
    line : int
        1-based line number of the row in the parsed text.
    """

    size_bytes: int
    count: int | None
    dtype: str | None
    redop: str | None
    root: int | None
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    inplace_time_us: float | None
    inplace_algbw_gbps: float | None
    inplace_busbw_gbps: float | None
    line: int


@dataclass
class NcclTestsLog:
    """The result of parsing one nccl-tests output.

    Attributes
    ----------
    collective : str or None
        Canonical collective name (see :func:`collsim.vocab.canonical_collective`), detected from the binary
        name (``all_reduce_perf`` ...) in a command line or header, else the ``collective`` argument, else None.
    nranks : int or None
        Number of ranks: the largest ``nranks N`` printed in a header or ``NCCL INFO`` line, else the number of
        distinct ranks in ``#  Rank  N Group ...`` lines, else None.
    rows : list of MeasuredRow
        Data rows in text order.
    source : str
        Where the text came from (a file path or ``"<text>"``); used in warnings.
    nccl_version : str or None
        The NCCL release the run used, ``"2.26.2"``, when the text prints it: NCCL's own line ``NCCL version
        2.26.2+cuda12.8`` (NCCL_DEBUG=VERSION or INFO) or nccl-tests' header ``nccl-library=22602`` (major x 10000 +
        minor x 100 + patch, NCCL_VERSION_CODE); the first one found.
    """

    collective: str | None
    nranks: int | None
    rows: list[MeasuredRow] = field(default_factory=list)
    source: str = "<text>"
    nccl_version: str | None = None


# nccl-tests type names (``float``, ``half`` ...) to collsim dtype names (``float32``, ``float16`` ...).
_DTYPE_FROM_NCCL: dict[str, str] = {v: k for k, v in NCCL_TESTS_TYPE_NAMES.items()}

_MONTH_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\s+(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
#: Prefixes launchers put before each line; removed repeatedly (they combine, e.g. timestamp then rank tag).
_PREFIXES: tuple[re.Pattern[str], ...] = (
    # mpirun --timestamp-output: "Thu Jul 18 15:41:05 2024<stdout>:" (the tag may be followed by [1,0]<stdout>:)
    re.compile(rf"^\s*{_MONTH_DAY}\s+\d{{1,2}}\s+\d\d:\d\d:\d\d\s+\d{{4}}(?:<std(?:out|err)>:)?"),
    # mpirun --tag-output: "[1,0]<stdout>:"
    re.compile(r"^\s*\[\d+,\d+\]<std(?:out|err)>:"),
    # ISO timestamps (kubectl logs --timestamps, loggers): "2024-07-18T15:41:05.123Z", "[2024-07-18 15:41:05]"
    re.compile(r"^\s*\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?(?=\s|$|:)"),
    # srun -l: "0:", "  12: "
    re.compile(r"^\s*\d+:(?=\s|$)"),
    # pdsh / clush: "node01: "
    re.compile(r"^\s*[A-Za-z][A-Za-z0-9._-]*:(?=\s)"),
)

_NCCL_LOG = re.compile(r"\bNCCL (?:INFO|WARN|TRACE|ABORT)\b")
_PERF_BINARY = re.compile(r"(?<![A-Za-z0-9])([A-Za-z0-9_]+?)_perf(?:_mpi)?(?![A-Za-z0-9])")
_NRANKS = re.compile(r"\bnranks\s*[:=]?\s*(\d+)", re.IGNORECASE)
_NCCL_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)", re.IGNORECASE)
_NCCL_LIBRARY = re.compile(r"\bnccl-library=(\d{5,})")
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group|Pid)\b")
_RULE = re.compile(r"^[\s\-=*_~`|:+.]*$")
_NUMBER = re.compile(r"^[+-]?(?:\d[\d_,]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")
#: Words of nccl-tests' column headers; a line made only of these is a header (with or without ``#``).
_HEADER_WORDS: frozenset[str] = frozenset(
    {"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "wrong", "error", "errors"}
    | {"out-of-place", "in-place", "(b)", "(elements)", "(us)", "(gb/s)", "#", "bytes", "elements", "|"}
)
#: Starts of lines that are known noise (lower-cased), when pasted without their ``#``.
_NOISE_STARTS: tuple[str, ...] = (
    "nccl version",
    "avg bus bandwidth",
    "out of bounds values",
    "using devices",
    "collective test",
    "nthread",
    "[...]",
    "...",
    "…",
    "$ ",
    "+ ",
    "> ",
)
#: Accepted values of the #wrong / error column besides numbers.
_WRONG_WORDS: frozenset[str] = frozenset({"n/a", "na", "error", "-", "none"})

_MAX_SHOWN = 100  # characters of a skipped line quoted in a warning


def _strip_prefixes(line: str) -> str:
    """Remove launcher prefixes (rank tags, timestamps, host names) from the start of ``line``."""
    changed = True
    while changed:
        changed = False
        for pattern in _PREFIXES:
            m = pattern.match(line)
            if m and m.end() > 0:
                line = line[m.end() :]
                changed = True
    return line.strip()


def _to_float(token: str) -> float | None:
    """Return ``token`` as a finite float (printf formats such as ``16801``, ``1.0e+08``, ``1_048_576``), or None."""
    if not _NUMBER.match(token):
        return None
    value = float(token.replace("_", "").replace(",", ""))
    return value if math.isfinite(value) else None


def _to_int(token: str) -> int | None:
    """Return ``token`` as an integer (``1.0e+08`` accepted when integral), or None."""
    value = _to_float(token)
    if value is None or value != int(value):
        return None
    return int(value)


def _wrong_ok(token: str) -> bool:
    """True if ``token`` can be a ``#wrong``/``error`` value: a number, ``N/A``, ``error`` ..."""
    return token.lower() in _WRONG_WORDS or _to_float(token) is not None


def _wrong_count(token: str) -> int:
    """Number of wrong results in a ``#wrong`` cell; 0 for ``N/A``, words and old float ``error`` values."""
    if "." in token or "e" in token.lower():
        return 0  # old nccl-tests printed the maximum relative error as a float here, not a count
    value = _to_int(token)
    return value if value is not None and value > 0 else 0


def _block(tokens: list[str], with_wrong: bool) -> tuple[float, float, float] | None:
    """Read ``time algbw busbw [#wrong]`` from ``tokens``; None if a cell is not a number (or not a #wrong)."""
    values = [_to_float(t) for t in tokens[:3]]
    if any(v is None or v < 0 for v in values):
        return None
    if with_wrong and not _wrong_ok(tokens[3]):
        return None
    t, a, b = values
    assert t is not None and a is not None and b is not None  # checked above; narrows the types for mypy
    return t, a, b


def _parse_row(tokens: list[str], line: int) -> tuple[MeasuredRow, list[str]] | None:
    """Read a data row from its cells by column count; return it with its #wrong cells, or None."""
    n = len(tokens)
    size = _to_int(tokens[0]) if tokens else None
    if size is None or size < 0:
        return None
    count: int | None = None
    dtype: str | None = None
    redop: str | None = None
    root: int | None = None
    wrong: list[str] = []
    if n in (12, 13, 8, 9) and _to_float(tokens[2]) is None and _to_float(tokens[3]) is None:
        count = _to_int(tokens[1])
        if count is None or count < 0:
            return None
        dtype = _DTYPE_FROM_NCCL.get(tokens[2], tokens[2])
        redop = tokens[3]
        rest = tokens[4:]
        if n in (13, 9):
            root = _to_int(rest[0])
            if root is None:
                return None
            rest = rest[1:]
        out = _block(rest[0:4], with_wrong=True)
        inp = _block(rest[4:8], with_wrong=True) if len(rest) == 8 else None
        if out is None or (len(rest) == 8 and inp is None):
            return None
        wrong = [rest[3], rest[7]] if len(rest) == 8 else [rest[3]]
    elif n in (4, 7):
        out = _block(tokens[1:4], with_wrong=False)
        inp = _block(tokens[4:7], with_wrong=False) if n == 7 else None
        if out is None or (n == 7 and inp is None):
            return None
    else:
        return None
    row = MeasuredRow(
        size_bytes=size,
        count=count,
        dtype=dtype,
        redop=redop,
        root=root,
        time_us=out[0],
        algbw_gbps=out[1],
        busbw_gbps=out[2],
        inplace_time_us=None if inp is None else inp[0],
        inplace_algbw_gbps=None if inp is None else inp[1],
        inplace_busbw_gbps=None if inp is None else inp[2],
        line=line,
    )
    return row, wrong


def _is_noise(text: str) -> bool:
    """True for comments, NCCL log lines, command lines, code fences, rules and column headers."""
    if not text or text.startswith("#") or _RULE.match(text) or _NCCL_LOG.search(text):
        return True
    lower = text.lower()
    if lower.startswith(_NOISE_STARTS) or lower.startswith(("```", "~~~")):
        return True
    if _PERF_BINARY.search(text):
        return True  # a command line such as "mpirun ... ./build/all_reduce_perf -b 8 -e 8G"
    return all(word in _HEADER_WORDS for word in lower.split())


def _warn(source: str, line: int | None, message: str) -> None:
    where = source if line is None else f"{source}, line {line}"
    warnings.warn(f"{where}: {message}", ParseWarning, stacklevel=3)


def parse_nccl_tests(text: str, *, source: str = "<text>", collective: str | None = None) -> NcclTestsLog:
    """Parse nccl-tests output (any ``*_perf`` binary, any version, as pasted) into rows of measurements.

    Parameters
    ----------
    text : str
        The output, possibly with launcher prefixes, ``NCCL INFO`` lines, markdown pipes or fences.
    source : str, optional
        Name used in warnings, e.g. a file path. Default ``"<text>"``.
    collective : str, optional
        Collective to assume when the text names no ``*_perf`` binary (aliases accepted, e.g. ``"all_reduce"``).
        A binary name found in the text wins; a different ``collective`` then gives a :class:`ParseWarning`.

    Returns
    -------
    NcclTestsLog
        Collective, number of ranks, rows (out-of-place and in-place times in microseconds, bandwidths in GB/s
        with GB = 1e9 bytes) and ``source``. An empty text gives zero rows.

    Raises
    ------
    TypeError
        If ``text`` is not a string.
    ValueError
        If ``collective`` is not a known collective name (the message lists the valid ones).

    Warns
    -----
    ParseWarning
        For each line that is neither a data row nor a comment or known noise (the message names ``source`` and
        the 1-based line number), for a row reporting wrong results (``#wrong`` > 0), for an unknown ``*_perf``
        binary and for a text naming two different collectives.

    Examples
    --------
    >>> log = parse_nccl_tests('''$ ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 2
    ...   8   2   float   sum   1.0e+01   0.00   0.00   N/A   9.8   0.00   0.00   N/A''')
    >>> log.collective, log.rows[0].root, log.rows[0].time_us, log.rows[0].inplace_time_us
    ('allreduce', None, 10.0, 9.8)
    """
    if not isinstance(text, str):
        raise TypeError(f"{source}: nccl-tests text must be a str, got {type(text).__name__}")
    given = None if collective is None else canonical_collective(collective)
    detected: str | None = None
    explicit_nranks: int | None = None
    version: str | None = None
    ranks: set[int] = set()
    rows: list[MeasuredRow] = []

    for number, raw in enumerate(text.split("\n"), start=1):
        stripped = _strip_prefixes(raw.rstrip("\r"))
        if stripped.startswith("|"):  # markdown table row: the pipes separate cells
            stripped = stripped.strip("|").replace("|", " ").strip()
        parsed = _parse_row(stripped.split(), number) if stripped and not stripped.startswith("#") else None
        if parsed is not None:
            row, wrong = parsed
            rows.append(row)
            bad = sum(_wrong_count(w) for w in wrong)
            if bad:
                _warn(source, number, f"nccl-tests reports {bad} wrong result(s) for size {row.size_bytes} B")
            continue

        # Not a data row: harvest the collective and rank count, then decide whether it is known noise.
        m = _PERF_BINARY.search(stripped)
        if m:
            name = m.group(1)
            try:
                found = canonical_collective(name)
            except ValueError:
                _warn(source, number, f"unknown nccl-tests binary {name}_perf; collective not taken from it")
            else:
                if detected is None:
                    detected = found
                elif found != detected:
                    _warn(source, number, f"text names a second collective {found!r}; keeping {detected!r}")
        for value in _NRANKS.findall(stripped):
            explicit_nranks = max(int(value), explicit_nranks or 0)
        if version is None:
            version = nccl_version(stripped)
        rank = _RANK_LINE.match(stripped)
        if rank:
            ranks.add(int(rank.group(1)))
        if not _is_noise(stripped):
            shown = raw.strip()
            if len(shown) > _MAX_SHOWN:
                shown = shown[:_MAX_SHOWN] + "..."
            _warn(source, number, f"skipped a line that is neither an nccl-tests data row nor a comment: {shown!r}")

    if detected is not None and given is not None and given != detected:
        _warn(source, None, f"collective={collective!r} ignored: the text is from {detected!r}")
    nranks = explicit_nranks if explicit_nranks else (len(ranks) or None)
    return NcclTestsLog(collective=detected or given, nranks=nranks, rows=rows, source=source, nccl_version=version)


def nccl_version(line: str) -> str | None:
    """The NCCL release a line prints, as ``"major.minor.patch"``, or None.

    >>> nccl_version("node1:123:123 [0] NCCL INFO NCCL version 2.26.2+cuda12.8")
    '2.26.2'
    >>> nccl_version("# nccl-tests version 2.15.0 nccl-headers=22602 nccl-library=22602")
    '2.26.2'
    """
    found = _NCCL_VERSION.search(line)
    if found:
        return found.group(1)
    code = _NCCL_LIBRARY.search(line)
    if code:  # NCCL_VERSION_CODE: major x 10000 + minor x 100 + patch (nccl.h, from 2.9)
        n = int(code.group(1))
        return f"{n // 10000}.{n % 10000 // 100}.{n % 100}"
    return None


def read_nccl_tests(path: str | Path, *, collective: str | None = None) -> NcclTestsLog:
    """Read and parse an nccl-tests output file (see :func:`parse_nccl_tests`).

    Parameters
    ----------
    path : str or Path
        File holding the output; read as UTF-8, undecodable bytes replaced.
    collective : str, optional
        Collective to assume when the text names no ``*_perf`` binary.

    Returns
    -------
    NcclTestsLog
        With ``source`` set to ``str(path)``.

    Raises
    ------
    FileNotFoundError, IsADirectoryError, PermissionError
        If the file cannot be read (the message names it).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "ar.txt"
    >>> _ = p.write_text("#  size  time  algbw  busbw\\n  1024  5.0  0.20  0.36\\n")
    >>> log = read_nccl_tests(p, collective="allreduce")
    >>> log.rows[0].size_bytes, log.rows[0].count, log.rows[0].busbw_gbps, log.source == str(p)
    (1024, None, 0.36, True)
    """
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    return parse_nccl_tests(text, source=str(path), collective=collective)
