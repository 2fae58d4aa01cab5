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
11       size count type             + out-of-place + in-place (early versions and rccl-tests of their time,
         without ``redop``)
9        size count type redop root  + one block (in-place block cut off)
8        size count type redop       + one block
7        size + out-of-place (time algbw busbw) + in-place (time algbw busbw): hand-trimmed tables
4        size time algbw busbw: hand-trimmed tables
21       13 with ``i_min i_max i_p99 i_cv%`` after each block (``-I 1``, per-iteration timing, 2.19 on)
=======  =============================================================================================

A trailing ``YYYY-MM-DD HH:MM:SS`` (``-S 1``, a timestamp on each row) is removed first. A header naming ``cputime``
(``-C 1``) says the times are the host's, not the GPU's (:attr:`NcclTestsLog.timing`).

nccl-tests' JSON report (``-J results.json``, NVIDIA/nccl-tests from 2.17; JSON versions 1-3, ``src/util.cu``) is
read by :func:`parse_nccl_tests_json`: the same rows, plus what the text leaves out (the run's ``NCCL_*``
variables, its hosts and GPU names).

Units are nccl-tests': size in bytes, time in microseconds, algbw and busbw in GB/s with GB = 1e9 bytes.

Rank or time prefixes added by launchers are removed first (``0:`` from ``srun -l``, ``[1,0]<stdout>:`` from
``mpirun --tag-output``, ``[0]`` from MPICH's and Intel MPI's ``-prepend-rank``, ``Thu Jul 18 15:41:05
2024<stdout>:`` from ``mpirun --timestamp-output``, ISO timestamps, ``host:`` from pdsh), as are markdown table
pipes and code fences. Comments (``#``), ``NCCL INFO`` lines, command lines and column headers are skipped; they
give the collective (``all_reduce_perf`` ...), the number of ranks and each rank's host. Any other line emits a
:class:`ParseWarning` naming its line number and is skipped; parsing does not stop on bad lines. Several runs
appended to one file are read as one when they agree (collective, ranks, hosts, ``-g``, timing, release) and refused
when they do not.

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

import json
import math
import re
import statistics
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collsim.units import NCCL_TESTS_TYPE_NAMES
from collsim.vocab import REDUCING_COLLECTIVES, ROOTED_COLLECTIVES, canonical_collective

__all__ = [
    "MeasuredRow",
    "NcclTestsFormatError",
    "NcclTestsLog",
    "ParseWarning",
    "is_nccl_tests_json",
    "parse_nccl_tests",
    "parse_nccl_tests_json",
    "read_nccl_tests",
]


class ParseWarning(UserWarning):
    """A line of nccl-tests text that was skipped or looks suspicious; the message names the source and line."""


class NcclTestsFormatError(ValueError):
    """An nccl-tests JSON report that cannot be read; ``file`` and ``field`` say where, the message what is expected."""

    def __init__(self, message: str, *, file: str, field: str | None = None) -> None:
        self.file = file
        self.field = field
        self.reason = message
        super().__init__(": ".join(p for p in (file, field, message) if p))


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
        1-based line number of the row in the parsed text (in a JSON report: the 1-based index in ``results``).
    iterations : int or None
        Timed iterations behind the row (a JSON report's ``actual_iterations``); None when not printed.
    spread_us : float or None
        Interquartile range of the per-iteration times, microseconds (a JSON report with ``-I 1``: the
        out-of-place ``times_us`` after the ``-K`` skipped ones); None otherwise.
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
    iterations: int | None = None
    spread_us: float | None = None

    @classmethod
    def from_blocks(
        cls,
        size_bytes: int,
        series: tuple[int | None, str | None, str | None, int | None],
        out: tuple[float, float, float],
        inp: tuple[float, float, float] | None,
        line: int,
        **extra: Any,
    ) -> MeasuredRow:
        """A row from its ``(count, dtype, redop, root)``, the ``(time, algbw, busbw)`` of its first block and of
        the in-place one (None when absent); ``extra``: ``iterations``, ``spread_us``."""
        count, dtype, redop, root = series
        in_time, in_alg, in_bus = inp if inp is not None else (None, None, None)
        return cls(size_bytes, count, dtype, redop, root, out[0], out[1], out[2], in_time, in_alg, in_bus, line,
                   **extra)  # fmt: skip


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
    timing : str
        ``"gpu"``: nccl-tests' default, the GPU's time per call (CUDA events); ``"cputime"``: the host's wall time
        per call (``-C 1``; a column header or JSON key named ``cputime``).
    env : dict of str to str, or None
        The run's ``NCCL_*`` and ``OFI_NCCL_*`` variables (a JSON report's ``env``; nothing else of the environment
        is kept); None when the output does not record the environment (text).
    hosts : tuple of str
        Distinct host names of the run's processes, in rank order (text: the ``#  Rank N ... on HOST`` lines; a JSON
        report's ``devices``); empty when not printed.
    gpus : tuple of str
        Distinct GPU names as CUDA reports them (``"NVIDIA H100 80GB HBM3"``), from ``#  Rank`` lines or a JSON
        report's ``devices``.
    gpus_per_thread : int or None
        GPUs each nccl-tests thread drives (``-g N``: the header's ``nGpus N``, a JSON report's ``config.ngpus``);
        None when not printed.
    backend, device : str, str or None
        Who ran the collectives: ``"nccl"`` and None for nccl-tests; the backend and tensor device ``collsim bench``
        names in its text's first line (``torch.distributed gloo, cpu tensors``).
    host_ranks : tuple of int
        Ranks each of ``hosts`` ran, in its order (the ``#  Rank`` lines; a JSON report's processes a host x the
        GPUs a process drove); empty when the hosts are not printed.
    agg_iters : int or None
        Calls nccl-tests ran in one NCCL group per timed iteration (``-m N``: the header's ``agg iters: N``, a JSON
        report's ``config.aggregated_iterations``), its time divided by them; None when not printed.
    graph_launches : int or None
        Times the timed calls were replayed from one CUDA graph (``-G N``: the header's ``graph: N``, a JSON
        report's ``config.graph``; 0 without); None when not printed.
    """

    collective: str | None
    nranks: int | None
    rows: list[MeasuredRow] = field(default_factory=list)
    source: str = "<text>"
    nccl_version: str | None = None
    timing: str = "gpu"
    env: dict[str, str] | None = None
    hosts: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    gpus_per_thread: int | None = None
    backend: str = "nccl"
    device: str | None = None
    agg_iters: int | None = None
    graph_launches: int | None = None
    host_ranks: tuple[int, ...] = ()


# nccl-tests type names (``float``, ``half`` ...) to collsim dtype names (``float32``, ``float16`` ...).
_DTYPE_FROM_NCCL: dict[str, str] = {v: k for k, v in NCCL_TESTS_TYPE_NAMES.items()}

_MONTH_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\s+(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
#: Prefixes launchers put before each line; removed repeatedly (they combine, e.g. timestamp then rank tag).
_PREFIXES: tuple[re.Pattern[str], ...] = (
    # mpirun --timestamp-output: "Thu Jul 18 15:41:05 2024<stdout>:" (the tag may be followed by [1,0]<stdout>:)
    re.compile(rf"^\s*{_MONTH_DAY}\s+\d{{1,2}}\s+\d\d:\d\d:\d\d\s+\d{{4}}(?:<std(?:out|err)>:)?"),
    # mpirun --tag-output: "[1,0]<stdout>:"
    re.compile(r"^\s*\[\d+,\d+\]<std(?:out|err)>:"),
    # MPICH / Intel MPI (Hydra) -prepend-rank, -l: "[0] "
    re.compile(r"^\s*\[\d+\](?=\s)"),
    # ISO timestamps (kubectl logs --timestamps, loggers): "2024-07-18T15:41:05.123Z", "[2024-07-18 15:41:05]"
    re.compile(r"^\s*\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?(?=\s|$|:)"),
    # srun -l: "0:", "  12: "
    re.compile(r"^\s*\d+:(?=\s|$)"),
    # pdsh / clush: "node01: "
    re.compile(r"^\s*[A-Za-z][A-Za-z0-9._-]*:(?=\s)"),
)

_NCCL_LOG = re.compile(r"\bNCCL (?:INFO|WARN|TRACE|ABORT)\b")
#: A ``*_perf`` binary name (``all_reduce_perf``, ``./build/alltoall_perf_mpi``): found as a word ending in
#: ``_perf`` or ``_perf_mpi``, so a long line of word characters costs one pass, not one per underscore.
_PERF_BINARY = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z0-9_]*?[A-Za-z0-9])_perf(?:_mpi)?(?![A-Za-z0-9])")
_NRANKS = re.compile(r"\bnranks\s*[:=]?\s*(\d+)", re.IGNORECASE)
_NGPUS = re.compile(r"\bnGpus\s+(\d+)")
# the header's "agg iters: 8" (-m) and "graph: 1" (-G), src/util.cu writeDeviceReport
_AGG_ITERS = re.compile(r"\bagg iters:\s*(\d+)")
_GRAPH = re.compile(r"\bgraph:\s*(\d+)")
_NCCL_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)", re.IGNORECASE)
_NCCL_LIBRARY = re.compile(r"\bnccl-library=(\d{4,})")
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group|Pid)\b")
#: The GPU name at the end of a ``#  Rank`` line (``device  0 [0000:18:00] NVIDIA H100 80GB HBM3``).
_RANK_GPU = re.compile(r"\bdevice\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$")
#: The host of a ``#  Rank`` line (``Pid 4242 on node1 device  0``: src/common.cu prints ``on %10s device``).
_RANK_HOST = re.compile(r"\bPid\s+\d+\s+on\s+(\S+)\s+device\b")
#: The first line of ``collsim bench --text`` (collsim/bench/report.py ``format_text``): the backend and the device.
_COLLSIM_BENCH = re.compile(r"^#\s*collsim bench, like nccl-tests' \S+: torch\.distributed (\w+), (\w+) tensors\b")
#: The line nccl-tests prints once at the start of a run (src/common.cu ``Collective test starting``).
#: The first line of a run: nccl-tests 2.18 on print their version and NCCL's (``# nccl-tests version 2.19.6
#: nccl-headers=... nccl-library=...``) right before ``# Collective test starting`` (src/util.cu lines 623-624).
_RUN_START = re.compile(r"^#?\s*(Collective test starting|nccl-tests version)\b", re.IGNORECASE)
#: nccl-tests' ``-S 1`` timestamp after a row (TIME_STRING_FORMAT "%Y-%m-%d %H:%M:%S", src/util.cu).
_ROW_DATE = re.compile(r"^\d{4}-\d\d-\d\d$")
_ROW_TIME = re.compile(r"^\d\d:\d\d:\d\d$")
#: Environment variables a JSON report's ``env`` keeps: NCCL's and AWS's NCCL plugin's, nothing else.
_ENV_PREFIXES: tuple[str, ...] = ("NCCL_", "OFI_NCCL_")
_RULE = re.compile(r"^[\s\-=*_~`|:+.]*$")
_NUMBER = re.compile(r"^[+-]?(?:\d[\d_,]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")
#: Words of nccl-tests' column headers; a line made only of these is a header (with or without ``#``).
_HEADER_WORDS: frozenset[str] = frozenset(
    {"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "wrong", "error", "errors"}
    | {"out-of-place", "in-place", "(b)", "(elements)", "(us)", "(gb/s)", "#", "bytes", "elements", "|"}
    # -C 1, -S 1 and -I 1 headers (src/util.cu writeResultHeader)
    | {"cputime", "timestamp", "%y-%m-%d", "%h:%m:%s", "i_min", "i_max", "i_p99", "i_cv%", "(%)", "(+"}
    | {"per-iteration)"}
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
    """Number of wrong results in a ``#wrong`` cell; 0 for ``N/A``, words and old float ``error`` values below 1.

    nccl-tests prints the count with ``%6g`` (src/util.cu), so a million or more reads ``1.04858e+06``: a value
    of at least 1 is a count (rounded), in whatever notation. Old releases printed the largest error there
    (``2e-07``, ``0e+00``): a rounding error below 1 is no wrong result.

    >>> _wrong_count("3"), _wrong_count("1.04858e+06"), _wrong_count("2e-07"), _wrong_count("N/A")
    (3, 1048580, 0, 0)
    """
    value = _to_float(token)
    return round(value) if value is not None and value >= 1 else 0


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


def _without_extras(tokens: list[str]) -> list[str] | None:
    """``tokens`` without a trailing ``-S 1`` timestamp and, on a 21-column ``-I 1`` row, without the four
    per-iteration columns after each block (``i_min i_max i_p99 i_cv%``, checked to be numbers); None if those
    columns are not numbers."""
    if len(tokens) >= 2 and _ROW_DATE.match(tokens[-2]) and _ROW_TIME.match(tokens[-1]):
        tokens = tokens[:-2]
    if len(tokens) == 21:
        blocks = (tokens[5:13], tokens[13:21])
        if any(_to_float(t) is None for b in blocks for t in b[4:]):
            return None
        tokens = tokens[:5] + blocks[0][:4] + blocks[1][:4]
    return tokens


def _parse_row(tokens: list[str], line: int) -> tuple[MeasuredRow, list[str]] | None:
    """Read a data row from its cells by column count; return it with its #wrong cells, or None."""
    plain = _without_extras(tokens)
    if plain is None:
        return None
    tokens = plain
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
    elif n == 11 and _to_float(tokens[2]) is None:  # no redop column: early nccl-tests and rccl-tests
        count = _to_int(tokens[1])
        out = _block(tokens[3:7], with_wrong=True)
        inp = _block(tokens[7:11], with_wrong=True)
        if count is None or count < 0 or out is None or inp is None:
            return None
        dtype = _DTYPE_FROM_NCCL.get(tokens[2], tokens[2])
        wrong = [tokens[6], tokens[10]]
    elif n in (4, 7):
        out = _block(tokens[1:4], with_wrong=False)
        inp = _block(tokens[4:7], with_wrong=False) if n == 7 else None
        if out is None or (n == 7 and inp is None):
            return None
    else:
        return None
    return MeasuredRow.from_blocks(size, (count, dtype, redop, root), out, inp, line), wrong


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


def _binary_collective(text: str, source: str, line: int | None) -> str | None:
    """The collective of the ``*_perf`` binary ``text`` names (``all_gather_perf_mpi`` -> ``allgather``), None when
    it names none; an unknown binary (``hypercube_perf``) is a warning."""
    m = _PERF_BINARY.search(text)
    if m is None:
        return None
    try:
        return canonical_collective(m.group(1))
    except ValueError:
        _warn(source, line, f"unknown nccl-tests binary {m.group(1)}_perf; collective not taken from it")
        return None


def _warn(source: str, line: int | None, message: str) -> None:
    where = source if line is None else f"{source}, line {line}"
    warnings.warn(f"{where}: {message}", ParseWarning, stacklevel=3)


#: Lines not understood that are named one by one; the rest in one warning (a wrong file is hundreds of them).
_MAX_SKIPPED_SHOWN = 10


def _warn_skipped(source: str, skipped: Sequence[tuple[int, str]], has_rows: bool) -> None:
    """Warn of the lines that are neither data rows nor comments: each of the first few, then the count of the
    rest; a text of many such lines and no data row in one warning (the file is likely not nccl-tests output)."""
    if not has_rows and len(skipped) > _MAX_SKIPPED_SHOWN:
        number, shown = skipped[0]
        _warn(source, None, f"none of its {len(skipped)} lines that are not comments is an nccl-tests data row "
                            f"(line {number}: {shown!r})")  # fmt: skip
        return
    for number, shown in skipped[:_MAX_SKIPPED_SHOWN]:
        _warn(source, number, f"skipped a line that is neither an nccl-tests data row nor a comment: {shown!r}")
    rest = skipped[_MAX_SKIPPED_SHOWN:]
    if rest:
        _warn(source, None, f"skipped {len(rest)} more such line(s) (lines {rest[0][0]}-{rest[-1][0]})")


def _check_given(given: str, rows: Sequence[MeasuredRow], source: str) -> None:
    """Warn where the rows' ``redop`` and ``root`` columns contradict a collective the caller named (the text naming
    none): nccl-tests prints ``none`` as the redop of all_gather, alltoall, broadcast, gather and scatter and an
    operator's name for the others, and a root only for the rooted ones, -1 otherwise (``TimeTest`` calls in
    ``src/*.cu``, nccl-tests 2.19.6)."""
    redops = {r.redop for r in rows if r.redop}
    roots = {r.root for r in rows if r.root is not None}
    reducing = given in REDUCING_COLLECTIVES
    if redops and (reducing == (redops == {"none"})):
        said = ", ".join(sorted(redops))
        why = "a reducing collective prints its operator" if reducing else "nccl-tests prints none for it"
        _warn(source, None, f"collective={given!r} given, but the rows' redop column says {said}: {why} (is the log "
                            "another collective's?)")  # fmt: skip
    rooted = given in ROOTED_COLLECTIVES or given in ("gather", "scatter")
    if roots and rooted == (roots == {-1}):
        said = ", ".join(str(r) for r in sorted(roots))
        _warn(source, None, f"collective={given!r} given, but the rows' root column says {said}: nccl-tests prints "
                            f"{'the root' if rooted else '-1'} for it (is the log another collective's?)")  # fmt: skip


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
    NcclTestsFormatError
        If the text holds several runs (appended with ``tee -a`` or ``cat``: each starts with its ``Collective test
        starting``, ``nThread`` header or command line) that differ in collective, ranks, hosts, ``-g``, timing or
        NCCL release; runs of one shape are read as one.

    Warns
    -----
    ParseWarning
        For each line that is neither a data row nor a comment or known noise (the message names ``source`` and
        the 1-based line number), for a row reporting wrong results (``#wrong`` > 0), for an unknown ``*_perf``
        binary, for a text naming two different collectives and for several runs of one shape read as one.

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
    header = _Header(source)
    runs: list[tuple[int, _Header]] = []  # the runs before the current one: (first line, what they said)
    run_line, run_rows = 1, 0
    rows: list[MeasuredRow] = []
    skipped: list[tuple[int, str]] = []  # (line, text) of lines neither data nor comment nor known noise

    for number, raw in enumerate(text.removeprefix("\ufeff").split("\n"), start=1):
        stripped = _strip_prefixes(raw.rstrip("\r"))
        if stripped.startswith("|"):  # markdown table row: the pipes separate cells
            stripped = stripped.strip("|").replace("|", " ").strip()
        parsed = _parse_row(stripped.split(), number) if stripped and not stripped.startswith("#") else None
        if parsed is not None:
            row, wrong = parsed
            rows.append(row)
            run_rows += 1
            bad = sum(_wrong_count(w) for w in wrong)
            if bad:
                _warn(source, number, f"nccl-tests reports {bad} wrong result(s) for size {row.size_bytes} B")
            continue
        if run_rows and _starts_run(stripped):  # a second run appended to the file (tee -a, cat): keep them apart
            runs.append((run_line, header))
            header, run_line, run_rows = _Header(source), number, 0
        header.take(stripped, number)  # not a data row: what it says about the run, then is it known noise?
        if not _is_noise(stripped):
            shown = raw.strip()
            skipped.append((number, shown[:_MAX_SHOWN] + "..." if len(shown) > _MAX_SHOWN else shown))
    _warn_skipped(source, skipped, bool(rows))
    if runs:
        header = _one_run([*runs, (run_line, header)], source)
    detected = header.collective
    if detected is not None and given is not None and given != detected:
        _warn(source, None, f"collective={collective!r} ignored: the text is from {detected!r}")
    if detected is None and given is not None:
        _check_given(given, rows, source)
    return NcclTestsLog(
        collective=detected or given,
        nranks=header.nranks or (len(header.ranks) or None),
        rows=rows,
        source=source,
        nccl_version=header.version,
        timing=header.timing,
        hosts=header.hosts,
        host_ranks=header.host_ranks,
        gpus=tuple(header.gpus),
        gpus_per_thread=header.gpus_per_thread,
        backend=header.backend,
        device=header.device,
        agg_iters=header.agg_iters,
        graph_launches=header.graph_launches,
    )


def _starts_run(line: str) -> bool:
    """True for a line nccl-tests prints before a run's rows: its ``nccl-tests version`` line (2.18 on) and
    ``Collective test starting``, its ``nThread .. nGpus`` header, or a command line naming a ``*_perf`` binary (not
    its ``Collective test concluded``)."""
    if _RUN_START.match(line) or _NGPUS.search(line):
        return True
    return "concluded" not in line.lower() and _PERF_BINARY.search(line) is not None


def _shown(field_index: int, value: Any) -> str:
    """A run's shape field as :func:`_one_run`'s error shows it (hosts as counts)."""
    if field_index == 2:
        hosts = len(set(dict(value).values()))
        return f"{len(value)} ranks on {hosts} host{'s' if hosts != 1 else ''}"
    return str(value)


def _one_run(runs: list[tuple[int, _Header]], source: str) -> _Header:
    """The header of several runs in one text when they agree (a collective, rank count, each rank's host, GPUs a
    thread drove, timing, backend, device and release any of them leaves unsaid agree with the others'); their
    rows are then read as one run's, a size printed by several becoming the mean (a :class:`ParseWarning` says so).

    Raises
    ------
    NcclTestsFormatError
        When two runs differ in one of those: averaging them would describe neither.
    """
    first_line, first = runs[0]
    lines = ", ".join(str(n) for n, _ in runs)
    fields = ("collective", "ranks", "hosts", "GPUs a thread drove (-g)", "timing", "backend", "device",
              "NCCL release")  # fmt: skip
    known: dict[int, Any] = {}
    for line, h in runs:
        for i, value in enumerate((*h.shape(), h.version)):
            if value in (None, ()):
                continue
            if i in known and known[i][1] != value:
                raise NcclTestsFormatError(
                    f"holds {len(runs)} runs (from lines {lines}) that differ in {fields[i]}: "
                    f"{_shown(i, known[i][1])} (line {known[i][0]}) against {_shown(i, value)} (line {line}); split "
                    f"the file, one run each",
                    file=source,
                )
            known.setdefault(i, (line, value))
    for _, h in runs[1:]:
        first.collective = first.collective or h.collective
        first.nranks = first.nranks or h.nranks
        first.version = first.version or h.version
        first.gpus_per_thread = first.gpus_per_thread or h.gpus_per_thread
        first.agg_iters = _largest(first.agg_iters, h.agg_iters)
        first.graph_launches = _largest(first.graph_launches, h.graph_launches)
        first.ranks |= h.ranks
        first.rank_hosts = first.rank_hosts or h.rank_hosts
        first.gpus += [g for g in h.gpus if g not in first.gpus]
    _warn(source, first_line, f"holds {len(runs)} runs of one shape (from lines {lines}): read as one, a size "
                              f"printed by several the mean of its rows")  # fmt: skip
    return first


def _largest(a: int | None, b: int | None) -> int | None:
    """The larger of two header counts either run may leave unsaid (None)."""
    return max((v for v in (a, b) if v is not None), default=None)


@dataclass
class _Header:
    """What the lines of nccl-tests text that are not data rows say about the run, gathered line by line."""

    source: str
    collective: str | None = None
    nranks: int | None = None  # the largest "nranks N" printed
    version: str | None = None
    ranks: set[int] = field(default_factory=set)  # ranks of "#  Rank" lines
    rank_hosts: dict[int, str] = field(default_factory=dict)  # the host each "#  Rank" line names
    gpus: list[str] = field(default_factory=list)
    gpus_per_thread: int | None = None
    timing: str = "gpu"
    backend: str = "nccl"
    device: str | None = None
    agg_iters: int | None = None  # -m: "agg iters: N"
    rank_clash: bool = False  # a rank printed on two hosts (warned once)
    graph_launches: int | None = None  # -G: "graph: N"

    def take(self, line: str, number: int) -> None:
        """Gather what ``line`` (line ``number``, launcher prefixes removed) says."""
        bench = _COLLSIM_BENCH.match(line)
        if bench:
            self.backend, self.device = bench.group(1), bench.group(2)
        found = _binary_collective(line, self.source, number)
        if found is not None and self.collective is None:
            self.collective = found
        elif found is not None and found != self.collective:
            _warn(self.source, number, f"text names a second collective {found!r}; keeping {self.collective!r}")
        for value in _NRANKS.findall(line):
            self.nranks = max(int(value), self.nranks or 0)
        if self.version is None:
            self.version = nccl_version(line)
        rank = _RANK_LINE.match(line)
        if rank:
            self.ranks.add(int(rank.group(1)))
            host = _RANK_HOST.search(line)
            if host:
                number_, name = int(rank.group(1)), host.group(1)
                earlier = self.rank_hosts.get(number_)
                if earlier is not None and earlier != name and not self.rank_clash:
                    self.rank_clash = True
                    _warn(self.source, number, f"rank {number_} is printed on {earlier} and on {name}: several "
                          "nccl-tests processes each ran a job of their own (a build without MPI under mpirun?); "
                          "read as one run, each size the mean of their rows")  # fmt: skip
                self.rank_hosts[number_] = name
            gpu = _RANK_GPU.search(line)
            if gpu and gpu.group(1) not in self.gpus:
                self.gpus.append(gpu.group(1))
        ngpus = _NGPUS.search(line) if self.gpus_per_thread is None else None
        if ngpus and int(ngpus.group(1)) > 0:
            self.gpus_per_thread = int(ngpus.group(1))  # nccl-tests' header: "# nThread 1 nGpus 8 minBytes ..."
        if line.startswith("#") and _NGPUS.search(line):  # the same header: "... agg iters: 1 validation: 1 graph: 0"
            agg, graph = _AGG_ITERS.search(line), _GRAPH.search(line)
            if agg:
                self.agg_iters = int(agg.group(1))
            if graph:
                self.graph_launches = int(graph.group(1))
        if line.startswith("#") and "cputime" in line.lower().split():
            self.timing = "cputime"  # -C 1: writeResultHeader names the time column "cputime"

    @property
    def hosts(self) -> tuple[str, ...]:
        """Distinct hosts of the ``#  Rank`` lines, in rank order."""
        return tuple(dict.fromkeys(self.rank_hosts[r] for r in sorted(self.rank_hosts)))

    @property
    def host_ranks(self) -> tuple[int, ...]:
        """Ranks of each of :attr:`hosts`, in its order."""
        counts = Counter(self.rank_hosts.values())
        return tuple(counts[h] for h in self.hosts)

    def shape(self) -> tuple[Any, ...]:
        """What tells two runs apart: collective, ranks, each rank's host, GPUs a thread drove, timing."""
        return (self.collective, self.nranks or len(self.ranks) or None, tuple(sorted(self.rank_hosts.items())),
                self.gpus_per_thread, self.timing, self.backend, self.device)  # fmt: skip


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
    if code:
        return _version_from_code(int(code.group(1)))
    return None


def _version_from_code(n: int) -> str:
    """``"2.26.2"`` from NCCL_VERSION_CODE 22602: major x 10000 + minor x 100 + patch from NCCL 2.9 (nccl.h),
    major x 1000 + minor x 100 + patch before (2.8.4 = 2804)."""
    if n >= 10000:
        return f"{n // 10000}.{n % 10000 // 100}.{n % 100}"
    return f"{n // 1000}.{n % 1000 // 100}.{n % 100}"


def is_nccl_tests_json(data: Any) -> bool:
    """True for a decoded nccl-tests JSON report (``-J``): an object with a ``results`` list and nccl-tests' header
    keys (``nccl_version``, ``config`` or ``args``), and no ``rows`` (collsim's own measurement format).

    >>> is_nccl_tests_json({"version": 3, "nccl_version": 22602, "results": []})
    True
    >>> is_nccl_tests_json({"collective": "allreduce", "rows": []})
    False
    """
    return (
        isinstance(data, Mapping)
        and isinstance(data.get("results"), list)
        and "rows" not in data
        and any(k in data for k in ("nccl_version", "config", "args"))
    )


def _json_count(value: Any, least: int = 1) -> int | None:
    """``value`` when it is a JSON integer of at least ``least`` (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= least else None


def _json_number(value: Any, source: str, where: str) -> float | None:
    """A result cell as a float: None for ``null`` and nccl-tests' ``"nan"``; a non-number is an error."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "nan"):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NcclTestsFormatError(f"expected a number, got {str(value)[:40]!r}", file=source, field=where)
    return float(value) if math.isfinite(value) else None


def _json_block(block: Any, source: str, where: str) -> tuple[tuple[float, float, float] | None, bool]:
    """``(time, alg_bw, bus_bw)`` of an ``out_of_place``/``in_place`` object, None for ``null``, a missing block or
    a ``"nan"`` cell; and whether its time was ``cpu_time`` (``-C 1``)."""
    if block is None:
        return None, False
    if not isinstance(block, Mapping):
        raise NcclTestsFormatError("expected an object with time, alg_bw and bus_bw", file=source, field=where)
    cpu = "cpu_time" in block and "time" not in block
    key = "cpu_time" if cpu else "time"
    if key not in block:
        raise NcclTestsFormatError("missing time (us)", file=source, field=where)
    cells = [_json_number(block.get(k), source, f"{where}.{k}") for k in (key, "alg_bw", "bus_bw")]
    if any(c is None or c < 0 for c in cells):
        return None, cpu
    t, a, b = cells
    assert t is not None and a is not None and b is not None  # checked above; narrows the types for mypy
    return (t, a, b), cpu


def _json_spread(per_iter: Any) -> float | None:
    """Interquartile range (us) of a ``*_per_iter`` object's ``times_us`` after its ``skipped_iterations``."""
    if not isinstance(per_iter, Mapping) or not isinstance(per_iter.get("times_us"), list):
        return None
    skip = per_iter.get("skipped_iterations")
    skip = _json_count(skip) or 0
    times = [float(t) for t in per_iter["times_us"][skip:] if isinstance(t, int | float) and not isinstance(t, bool)]
    if len(times) < 2:
        return None
    q = statistics.quantiles(times, n=4, method="inclusive")
    return q[2] - q[0]


def parse_nccl_tests_json(
    data: str | Mapping[str, Any], *, source: str = "<text>", collective: str | None = None
) -> NcclTestsLog:
    """Parse an nccl-tests JSON report (``all_reduce_perf ... -J results.json``).

    The layout is nccl-tests' ``src/util.cu`` (JSON versions 1-3): ``args`` (the command line: its binary names
    the collective), ``env`` (``KEY=VALUE`` strings), ``nccl_version`` (NCCL_VERSION_CODE), ``config``
    (``nthreads``, ``ngpus``, iterations ... and ``devices``: one object per process, the first rank's
    ``hostname`` and ``device_info``; read at the top level too), and ``results``: per size ``size``, ``count``,
    ``type``, ``redop``, ``root`` and the ``out_of_place`` and ``in_place`` objects (``time`` or, with ``-C 1``,
    ``cpu_time`` in us; ``alg_bw`` and ``bus_bw`` in GB/s, GB = 1e9 bytes; ``"nan"`` where nccl-tests had no
    value).

    Parameters
    ----------
    data : str or mapping
        The report's text, or the decoded object.
    source : str, optional
        Name used in messages, e.g. the file's path.
    collective : str, optional
        Collective to assume when ``args`` names no ``*_perf`` binary.

    Returns
    -------
    NcclTestsLog
        Rows as the text parser gives them (a row's ``line`` is its 1-based index in ``results``), with
        ``iterations`` and, with ``-I 1``, ``spread_us``; ``nranks`` = processes x ``nthreads`` x ``ngpus`` (None
        when ``NCCL_TESTS_SPLIT`` put the processes in several groups); the run's ``NCCL_*`` and ``OFI_NCCL_*``
        variables in ``env`` (nothing else of the environment is kept), its hosts and GPU names.

    Raises
    ------
    NcclTestsFormatError
        For invalid JSON or a field of the wrong type; the message names the source and the field.

    Warns
    -----
    ParseWarning
        For a result without a time (``"nan"``, both blocks ``null``): it is skipped; for a row reporting wrong
        results.

    Examples
    --------
    >>> report = {"version": 3, "args": ["./build/all_gather_perf", "-b", "1M"], "env": ["NCCL_ALGO=Ring", "HOME=/x"],
    ...           "nccl_version": 22602, "config": {"nthreads": 1, "ngpus": 1,
    ...           "devices": [{"rank": 0, "hostname": "n1", "device_info": "NVIDIA H100 80GB HBM3"},
    ...                       {"rank": 1, "hostname": "n2", "device_info": "NVIDIA H100 80GB HBM3"}]},
    ...           "results": [{"size": 1048576, "count": 131072, "type": "float", "redop": "none", "root": "    -1",
    ...                        "out_of_place": {"time": 20.5, "alg_bw": 51.15, "bus_bw": 25.58, "nwrong": 0},
    ...                        "in_place": {"time": 19.9, "alg_bw": 52.69, "bus_bw": 26.35, "nwrong": None},
    ...                        "actual_iterations": 20, "experiment_name": ""}]}
    >>> log = parse_nccl_tests_json(report)
    >>> log.collective, log.nranks, log.nccl_version, log.env, log.hosts
    ('allgather', 2, '2.26.2', {'NCCL_ALGO': 'Ring'}, ('n1', 'n2'))
    >>> row = log.rows[0]
    >>> row.size_bytes, row.dtype, row.root, row.time_us, row.inplace_time_us, row.iterations
    (1048576, 'float32', -1, 20.5, 19.9, 20)
    """
    data = _json_report(data, source)
    given = None if collective is None else canonical_collective(collective)
    args = data.get("args")
    first = args[0] if isinstance(args, list) and args and isinstance(args[0], str) else ""
    detected = _binary_collective(first.replace("\\", "/").rsplit("/", 1)[-1], source, None)  # the binary's name
    if detected is not None and given is not None and given != detected:
        _warn(source, None, f"collective={collective!r} ignored: the report is from {detected!r}")
    code = _json_count(data.get("nccl_version"))
    hosts, gpus, nranks, per_thread, host_ranks = _json_devices(data)
    config = data["config"] if isinstance(data.get("config"), Mapping) else {}
    rows: list[MeasuredRow] = []
    timing = "gpu"
    for i, r in enumerate(data["results"]):
        row, cpu = _json_row(r, i, source)
        timing = "cputime" if cpu else timing
        if row is not None:
            rows.append(row)
    return NcclTestsLog(
        collective=detected or given,
        nranks=nranks,
        rows=rows,
        source=source,
        nccl_version=_version_from_code(code) if code is not None else None,
        timing=timing,
        env=_json_env(data.get("env")),
        hosts=tuple(hosts),
        host_ranks=host_ranks,
        gpus=tuple(gpus),
        gpus_per_thread=per_thread,
        agg_iters=_json_count(config.get("aggregated_iterations")),
        graph_launches=_json_count(config.get("graph"), 0),
    )


def _json_report(data: str | Mapping[str, Any], source: str) -> Mapping[str, Any]:
    """A report's decoded object, checked to be nccl-tests' (``results`` and ``nccl_version``); invalid JSON (a
    report nccl-tests did not finish writing) or another object is an :class:`NcclTestsFormatError`."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise NcclTestsFormatError(f"invalid JSON: {exc.msg} (line {exc.lineno}); a report nccl-tests did not "
                                       "finish writing ends early", file=source) from None  # fmt: skip
        except RecursionError:
            raise NcclTestsFormatError("invalid JSON: nested too deeply", file=source) from None
    if not is_nccl_tests_json(data):
        raise NcclTestsFormatError("expected nccl-tests' JSON report: an object with results and nccl_version",
                                   file=source)  # fmt: skip
    assert isinstance(data, Mapping)  # is_nccl_tests_json checked it; narrows the type for mypy
    return data


def _json_env(items: Any) -> dict[str, str]:
    """The ``NCCL_*`` and ``OFI_NCCL_*`` variables of a report's ``env`` (``KEY=VALUE`` strings); nothing else."""
    env: dict[str, str] = {}
    for item in items or []:
        if isinstance(item, str) and "=" in item:
            key, value = item.split("=", 1)
            if key.startswith(_ENV_PREFIXES):
                env[key] = value
    return env


def _json_devices(
    data: Mapping[str, Any],
) -> tuple[list[str], list[str], int | None, int | None, tuple[int, ...]]:
    """A report's distinct hosts and GPU names (``devices``: one object per process), its rank count (processes x
    ``config.nthreads`` x ``config.ngpus``; None for several ``NCCL_TESTS_SPLIT`` groups), GPUs per thread, and
    the ranks of each host (empty unless every process names its host)."""
    config = data.get("config") if isinstance(data.get("config"), Mapping) else {}
    assert isinstance(config, Mapping)
    # nccl-tests writes "devices" inside "config" (src/util.cu writeDeviceReport: the config object stays open
    # through the devices list, v2.18.0 on); a report that has it at the top level is read as well
    listed = config.get("devices") if isinstance(config.get("devices"), list) else data.get("devices")
    devices = [d for d in listed or [] if isinstance(d, Mapping)]
    hosts: list[str] = []
    gpus: list[str] = []
    for d in devices:
        for name, seen in ((d.get("hostname"), hosts), (d.get("device_info"), gpus)):
            if isinstance(name, str) and name.strip() and name.strip() not in seen:
                seen.append(name.strip())
    threads, per_thread = _json_count(config.get("nthreads")), _json_count(config.get("ngpus"))
    per_process = (threads or 1) * (per_thread or 1)
    groups = {d.get("group") for d in devices}
    nranks = len(devices) * per_process if devices and len(groups) <= 1 else None
    names = [h.strip() if isinstance(h := d.get("hostname"), str) else "" for d in devices]
    counts = Counter(names)
    host_ranks = tuple(counts[h] * per_process for h in hosts) if nranks and all(names) else ()
    return hosts, gpus, nranks, per_thread, host_ranks


def _json_row(r: Any, i: int, source: str) -> tuple[MeasuredRow | None, bool]:
    """Result ``i`` of a report as a row (None, with a warning, when it has no time) and whether it was timed on
    the host (``cpu_time``)."""
    where = f"results[{i}]"
    if not isinstance(r, Mapping):
        raise NcclTestsFormatError("expected an object with size and out_of_place", file=source, field=where)
    size = r.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise NcclTestsFormatError(f"expected a size in bytes, got {str(size)[:40]!r}", file=source,
                                   field=f"{where}.size")  # fmt: skip
    out, cpu_out = _json_block(r.get("out_of_place"), source, f"{where}.out_of_place")
    inp, cpu_in = _json_block(r.get("in_place"), source, f"{where}.in_place")
    main = out or inp
    if main is None:
        _warn(source, None, f"{where}: size {size} B has no time (nan or null); skipped")
        return None, cpu_out or cpu_in
    type_name, root = r.get("type"), r.get("root")
    wrong = sum(
        int(b["nwrong"])
        for b in (r.get("out_of_place"), r.get("in_place"))
        if isinstance(b, Mapping) and isinstance(b.get("nwrong"), int | float) and b["nwrong"] > 0
    )
    if wrong:
        _warn(source, None, f"{where}: nccl-tests reports {wrong} wrong result(s) for size {size} B")
    series = (
        _json_count(r.get("count"), 0),
        _DTYPE_FROM_NCCL.get(type_name, type_name) if isinstance(type_name, str) else None,
        r.get("redop") if isinstance(r.get("redop"), str) else None,
        _to_int(root.strip()) if isinstance(root, str) else root if isinstance(root, int) else None,
    )
    row = MeasuredRow.from_blocks(
        size, series, main, inp, i + 1, iterations=_json_count(r.get("actual_iterations")),
        spread_us=_json_spread(r.get("out_of_place_per_iter" if out is not None else "in_place_per_iter")),
    )  # fmt: skip
    return row, cpu_out or cpu_in


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
