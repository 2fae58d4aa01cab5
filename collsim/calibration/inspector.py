"""NCCL Inspector logs: the collectives a real job ran, call by call.

NCCL's Inspector is a profiler plugin in NCCL's own tree (``ext-profiler/inspector`` from NCCL 2.28.3,
``plugins/profiler/inspector`` from 2.29.7). Loaded into any NCCL job (``NCCL_PROFILER_PLUGIN=.../
libnccl-profiler-inspector.so NCCL_INSPECTOR_ENABLE=1``: a training run, not only a benchmark), each process writes
``<NCCL_INSPECTOR_DUMP_DIR>/<host>-pid<pid>.log``, one JSON object a line for each collective it completed on each
communicator (output format ``v4.0`` in NCCL 2.28.3-2.30.7; a later ``v4.3``, read too, writes ``header`` and
``metadata`` once a dump on a ``dump_stats`` marker and adds each call's ``coll_algo`` and ``coll_proto``)::

    {"header": {"id": "0x7f8c496ae9f661", "comm_name": "DP Group 0", "rank": 2, "n_ranks": 8, "nnodes": 1},
     "metadata": {"inspector_output_format_version": "v4.0", "hostname": "node1", "pid": 1639453, ...},
     "coll_perf": {"coll": "AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": 17179869184,
                   "coll_exec_time_us": 61974, "coll_timing_source": "kernel_gpu", ...}}

What the fields mean, from the plugin's source (``inspector.cc``, ``inspector_plugin.cc`` and ``inspector_json.cc``
at NCCL v2.30.7-1; ``src/plugin/profiler.cc`` for the descriptor NCCL hands it):

- ``coll_sn`` is NCCL's count of that collective on the communicator (``comm->seqNumber[func]``), the same on every
  rank: one call is the records of one (``id``, ``coll``, ``coll_sn``).
- ``coll_msg_size_bytes`` is the call's ``count`` times the type's size: the whole buffer for all-reduce, broadcast
  and reduce, one rank's share for all-gather (sendcount), reduce-scatter (recvcount) and all-to-all (per peer).
- ``coll_exec_time_us`` is this rank's time: the longest of its kernel's channels from start to stop on the GPU's
  global timer (``kernel_gpu``), else host timestamps (``kernel_cpu``, ``collective_cpu``; from 2.30 such records
  are dropped unless ``NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING=0``), in whole microseconds rounded down
  (``execTimeNanosecs / 1000``).
- ``comm_name`` (``ncclConfig_t.commName``) and ``p2p_perf`` records (sends and receives) from 2.30.
- Calls smaller than ``NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES`` (8192 by default) are not written.

A rank that starts its kernel early waits inside it for the others, so one call's ranks record different times and
the last rank to start records the collective itself (:mod:`collsim.calibration.calls`, which holds what is read).

Examples
--------
>>> line = ('{"header": {"id": "0x1", "rank": %d, "n_ranks": 2, "nnodes": 1}, "metadata": {"hostname": "n1"}, '
...         '"coll_perf": {"coll": "AllReduce", "coll_sn": 0, "coll_msg_size_bytes": 1048576, '
...         '"coll_exec_time_us": %d, "coll_timing_source": "kernel_gpu"}}')
>>> log = parse_inspector_lines([line % (0, 40), line % (1, 25)], file="n1-pid1.log")
>>> comm = log.comms["0x1"]
>>> comm.nranks, sorted(comm.ranks), comm.hosts
(2, [0, 1], {'n1'})
>>> call = comm.calls[("AllReduce", 0)]
>>> call.size_bytes, call.least_us, call.most_us, call.records
(1048576, 25.0, 40.0, 2)
"""

from __future__ import annotations

import gzip
import json
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from collsim.calibration.calls import CallLog, CallLogError, Communicator, simulated_collective
from collsim.calibration.nccltests import ParseWarning
from collsim.safeyaml import short_repr
from collsim.vocab import PER_RANK_COUNT_COLLECTIVES

__all__ = [
    "INSPECTOR_FORMAT",
    "INSPECTOR_ROUNDING_US",
    "INSPECTOR_SUFFIXES",
    "inspector_files",
    "is_inspector_record",
    "parse_inspector_lines",
    "read_inspector",
    "starts_like_inspector",
]

#: The output format the reader follows (``metadata.inspector_output_format_version``, NCCL 2.28.3 to 2.30.7).
INSPECTOR_FORMAT = "v4.0"
#: The plugin writes whole microseconds rounded down (``execTimeNanosecs / 1000``, inspector.cc at NCCL v2.30.7-1): a
#: time as read is on average half a microsecond short of the time measured, which is added back.
INSPECTOR_ROUNDING_US = 0.5
#: File names the plugin writes (``<host>-pid<pid>.log``) and the ones NVIDIA's exporter example also reads.
INSPECTOR_SUFFIXES: tuple[str, ...] = (".log", ".jsonl", ".log.gz", ".jsonl.gz")


#: Top-level keys of the plugin's lines: an operation, a v4.3 ``dump_stats`` marker, a network proxy trace.
_RECORD_KEYS: tuple[str, ...] = ("coll_perf", "p2p_perf", "dump_stats", "proxy_trace")


def is_inspector_record(obj: Any) -> bool:
    """True for one line of an Inspector log: an object with ``coll_perf`` or ``p2p_perf`` (an operation),
    ``dump_stats`` (format v4.3's marker) or ``proxy_trace``.

    >>> is_inspector_record({"header": {}, "coll_perf": {}}), is_inspector_record({"results": []})
    (True, False)
    """
    return isinstance(obj, Mapping) and any(k in obj for k in _RECORD_KEYS)


def _field(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str, file: str) -> Any:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, kind):
        what = "a string" if kind is str else "a number" if kind == (int, float) else "an integer"
        got = "nothing" if value is None else short_repr(value)
        raise CallLogError(f"expected {what}, got {got}", file=file, field=f"{where}.{key}")
    return value


def _count(obj: Mapping[str, Any], key: str, where: str, file: str, *, least: int = 0) -> int:
    value = _field(obj, key, int, where, file)
    if value < least:
        raise CallLogError(f"expected an integer >= {least}, got {value}", file=file, field=f"{where}.{key}")
    return int(value)


def _object(obj: Mapping[str, Any], key: str, file: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if not isinstance(value, Mapping):
        raise CallLogError(f"expected an object, got {short_repr(value)}", file=file, field=key)
    return value


def _comm(log: CallLog, context: Mapping[str, Any], file: str) -> tuple[Communicator, int, Mapping[str, Any]]:
    """The communicator, rank and metadata a record's (or its marker's) ``header`` and ``metadata`` name."""
    header = _object(context, "header", file)
    meta = context.get("metadata") if isinstance(context.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    comm_id = str(_field(header, "id", str, "header", file))
    rank = _count(header, "rank", "header", file)
    nranks = _count(header, "n_ranks", "header", file, least=1)
    nnodes = _count(header, "nnodes", "header", file, least=1)
    if isinstance(meta.get("inspector_output_format_version"), str):
        log.versions.add(meta["inspector_output_format_version"])
    name = str(header["comm_name"]) if isinstance(header.get("comm_name"), str) else ""
    comm = log.comms.setdefault(comm_id, Communicator(comm_id, "" if name == "unknown" else name, nranks, nnodes))
    if (comm.nranks, comm.nnodes) != (nranks, nnodes):
        raise CallLogError(f"communicator {comm_id} has {comm.nranks} ranks on {comm.nnodes} nodes in "
                                   f"earlier records, {nranks} on {nnodes} here", file=file,
                                   field="header")  # fmt: skip
    return comm, rank, meta


def _add_stats(log: CallLog, obj: Mapping[str, Any], file: str) -> None:
    """A ``dump_stats`` marker (format v4.3): the records its rank's ring overwrote before they were written."""
    comm, rank, _ = _comm(log, obj, file)
    stats = _object(obj, "dump_stats", file)
    dropped = stats.get("coll_dropped_total")
    if isinstance(dropped, int) and not isinstance(dropped, bool):
        comm.dropped[rank] = max(comm.dropped.get(rank, 0), dropped)


def _add_record(log: CallLog, obj: Mapping[str, Any], context: Mapping[str, Any], file: str) -> bool:
    """Fold one operation record into ``log``, its ``header`` and ``metadata`` its own or (format v4.3, records
    after a ``dump_stats`` marker) ``context``'s; False when it carries no time or size (the plugin writes 0)."""
    comm, rank, meta = _comm(log, context, file)
    kind = "coll_perf" if "coll_perf" in obj else "p2p_perf"
    perf = _object(obj, kind, file)
    prefix = "coll" if kind == "coll_perf" else "p2p"
    op = str(_field(perf, prefix, str, kind, file))
    sn = _count(perf, f"{prefix}_sn", kind, file)
    size = _count(perf, f"{prefix}_msg_size_bytes", kind, file)
    time_us = float(_field(perf, f"{prefix}_exec_time_us", (int, float), kind, file))
    if time_us <= 0 or size <= 0:
        return False
    # a collective's call is one sequence number on every rank; a send or receive is kept per rank and peer (they
    # are listed, not compared: a log does not say which pattern of sends a job ran). Sizes are nccl-tests': a
    # one-rank count (all-gather's sendcount, reduce-scatter's recvcount, all-to-all's per peer) times the ranks
    key = op if kind == "coll_perf" else f"{op}:{rank}:{perf.get('p2p_peer')}"
    if kind == "coll_perf" and simulated_collective(op) in PER_RANK_COUNT_COLLECTIVES:
        size *= comm.nranks
    algo, proto = perf.get("coll_algo"), perf.get("coll_proto")
    source = perf.get(f"{prefix}_timing_source")
    host = meta.get("hostname")
    try:
        comm.add(key, sn, rank=rank, size_bytes=size, time_us=time_us, host=host if isinstance(host, str) else None,
                 timing=source if isinstance(source, str) else "unknown",
                 pair=(algo, proto) if isinstance(algo, str) and isinstance(proto, str) else None)  # fmt: skip
    except ValueError as exc:
        raise CallLogError(str(exc), file=file, field=kind) from None
    return True


def parse_inspector_lines(lines: Iterable[str], *, file: str, log: CallLog | None = None) -> CallLog:
    """Read one Inspector log's lines into ``log`` (a new one by default).

    Format v4.0 (NCCL 2.28-2.30) gives every record its ``header`` and ``metadata``; format v4.3 writes them once, on
    a ``dump_stats`` marker, and the records after it belong to it, so each file is read in order. ``proxy_trace``
    records (the network proxy's steps) are passed over. Blank lines are skipped; a line that is not a JSON object (the
    last one of a job that was stopped while the plugin wrote it), a JSON object that is not a record, and a record
    without a time are skipped and counted, with one :class:`~collsim.calibration.nccltests.ParseWarning` a file
    naming the first such line.

    Raises
    ------
    CallLogError
        A record with a field of the wrong type, or an operation record before any header, naming ``file``, the
        line and the field.
    """
    out = log if log is not None else CallLog(source=file, kind="NCCL Inspector", rounding_us=INSPECTOR_ROUNDING_US)
    out.files.append(file)
    first_bad: int | None = None
    bad = 0
    context: Mapping[str, Any] | None = None  # the last header and metadata seen: the marker records follow
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # bad JSON, nested deeper than Python's stack, a 4300-digit integer
            obj = None
        if not is_inspector_record(obj):
            bad += 1
            first_bad = first_bad or n
            continue
        kept = True
        try:
            if "header" in obj:
                context = obj
            if "coll_perf" in obj or "p2p_perf" in obj:
                if context is None:
                    raise CallLogError("an operation before any header: a v4.3 file's records follow their "
                                               "dump_stats marker; read the file whole", file=file)  # fmt: skip
                kept = _add_record(out, obj, context, file)
                out.records += kept
            elif "dump_stats" in obj:
                _add_stats(out, obj, file)
        except CallLogError as exc:
            raise CallLogError(exc.reason, file=f"{file}, line {n}", field=exc.field) from None
        if not kept:
            bad += 1
            first_bad = first_bad or n
    out.skipped += bad
    if bad:
        what = "lines that are not Inspector records" if bad > 1 else "line that is not an Inspector record"
        warnings.warn(f"{file}: skipped {bad} {what} with a time (the first: line {first_bad})", ParseWarning,
                      stacklevel=2)  # fmt: skip
    return out


def inspector_files(path: str | Path) -> list[Path]:
    """The log files under ``path``: the file itself, or every ``*.log``, ``*.jsonl``, ``*.log.gz`` and
    ``*.jsonl.gz`` below a folder (sorted) whose first line is an Inspector record; one
    :class:`~collsim.calibration.nccltests.ParseWarning` counts the others (a process that completed no collective
    the plugin writes leaves an empty log; other programs' logs).

    Raises
    ------
    CallLogError
        A path that does not exist, or a folder without Inspector logs.
    """
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise CallLogError("no such file or folder", file=str(path))
    named = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(INSPECTOR_SUFFIXES))
    found = [f for f in named if starts_like_inspector(f)]
    patterns = ", ".join("*" + s for s in INSPECTOR_SUFFIXES)
    if not found:
        other = f" ({len(named)} {patterns} files, none one: nccl-tests logs are read a file at a time)"
        other = other if named else ""
        raise CallLogError(f"no Inspector logs in this folder or below (NCCL_INSPECTOR_DUMP_DIR){other}",
                                   file=str(path))  # fmt: skip
    if len(found) < len(named):
        warnings.warn(f"{path}: {len(named) - len(found)} of its {len(named)} {patterns} files are empty or not "
                      f"Inspector logs, e.g. {next(f for f in named if f not in found)}; read the others",
                      ParseWarning, stacklevel=3)  # fmt: skip
    return found


def _lines(path: Path) -> Iterator[str]:
    """The text lines of a log, gzip-compressed or not."""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                yield from fh
        else:
            with path.open(encoding="utf-8") as fh:
                yield from fh
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        reason = "not a UTF-8 text file" if isinstance(exc, UnicodeDecodeError) else f"cannot read: {exc}"
        raise CallLogError(reason, file=str(path)) from None


#: Characters of a file's first line read to tell an Inspector log (a record is a few hundred bytes; a verbose one
#: with every channel's events a few KB); a longer line is no record.
_FIRST_LINE_CHARS = 1 << 20


def starts_like_inspector(path: str | Path) -> bool:
    """True when ``path`` is a file (gzip-compressed or not) whose first non-blank line is an Inspector record
    (:func:`is_inspector_record`); how :func:`~collsim.calibration.measurement.read_measurement` tells a log from
    nccl-tests output."""
    p = Path(path)
    if not p.is_file():
        return False
    try:
        with gzip.open(p, "rt", encoding="utf-8") if p.name.endswith(".gz") else p.open(encoding="utf-8") as fh:
            first = fh.readline(_FIRST_LINE_CHARS)
            while first and not first.strip():
                first = fh.readline(_FIRST_LINE_CHARS)
        return is_inspector_record(json.loads(first))
    except (OSError, EOFError, UnicodeDecodeError, ValueError, RecursionError):  # unreadable, not JSON, too deep
        return False


def read_inspector(
    path: str | Path, *, progress: Callable[[int, int], None] | None = None
) -> CallLog:
    """Read an Inspector dump: one log file, or a folder (``NCCL_INSPECTOR_DUMP_DIR``) of every process's logs.

    Parameters
    ----------
    path : str or Path
        A log file or a folder searched recursively (:func:`inspector_files`).
    progress : callable, optional
        Called as ``progress(files_done, files_total)`` after each file.

    Raises
    ------
    CallLogError
        No logs, a file that cannot be read, a malformed record, or no record at all.
    """
    files = inspector_files(path)
    log = CallLog(source=str(path), kind="NCCL Inspector", rounding_us=INSPECTOR_ROUNDING_US)
    for i, f in enumerate(files, start=1):
        parse_inspector_lines(_lines(f), file=str(f), log=log)
        if progress is not None:
            progress(i, len(files))
    if not log.records:
        raise CallLogError("no Inspector records with a time (lines with header and coll_perf or p2p_perf)",
                                   file=str(path))  # fmt: skip
    odd = sorted(v for v in log.versions if v != INSPECTOR_FORMAT)
    if odd:
        warnings.warn(f"{path}: Inspector output format {', '.join(odd)}; read as {INSPECTOR_FORMAT}, the format "
                      "this reader follows", ParseWarning, stacklevel=2)  # fmt: skip
    twice = log.duplicates_text()
    if twice:
        warnings.warn(twice, ParseWarning, stacklevel=2)
    return log
