"""PyTorch profiler traces: the NCCL kernels a job ran, with what PyTorch recorded about each collective.

``torch.profiler`` (with CUDA activities) exports a Kineto trace (``prof.export_chrome_trace("trace.json")``,
``tensorboard_trace_handler``: ``*.pt.trace.json``, gzip-compressed or not), one file a rank. Each NCCL kernel is a
complete event (``"ph": "X", "cat": "kernel"``) whose ``args`` carry the metadata of the ``record_param_comms`` CPU
op that launched it: Kineto copies them from the CPU op to the GPU kernel (libkineto ``output_json.cpp``,
``appendCollectiveArgs``, pytorch/kineto at 114171d of 2026-08-20)::

    {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...)", "ts": 1.5e6, "dur": 412.2,
     "args": {"Collective name": "allreduce", "In msg nelems": 67108864, "Out msg nelems": 67108864,
              "Group size": 8, "dtype": "BFloat16", "Process Group Name": "0",
              "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1, ...]", "Seq": 42}}

and the trace's top level names the rank (``distributedInfo.rank``), the NCCL release (``distributedInfo
.nccl_version``) and the host (``host_name``). What collsim takes:

- a call: ``(Process Group Name, Collective name, dtype, Seq)``: ``Seq`` is the process group's count of its
  collectives, the same on every rank; a trace without it (older PyTorch) has its calls matched by their order in
  each trace, which holds only when every rank's trace covers the same calls (a warning says so);
- the size: nccl-tests' ``size``, the larger of ``In msg nelems`` and ``Out msg nelems`` times the type's size
  (all-gather's output, reduce-scatter's input, all-to-all's whole buffer); an all-to-all with uneven splits
  (``In split size``) is no nccl-tests all-to-all and is skipped;
- the time: ``dur``, the kernel's duration on the GPU (CUPTI), in microseconds to the nanosecond: no rounding to
  add back. As with NCCL's Inspector (:mod:`collsim.calibration.calls`), a call's time is the least of its ranks'.

A kernel's name (``..._RING_LL``) is the kernel NCCL compiled for that function, not the (algorithm, protocol)
its work ran with, so it is not read as one.

Examples
--------
>>> event = {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL", "ts": 10.0, "dur": 80.25,
...          "args": {"Collective name": "_allgather_base", "In msg nelems": 1024, "Out msg nelems": 8192,
...                   "Group size": 8, "dtype": "BFloat16", "Process Group Name": "3", "Seq": 7}}
>>> log = CallLog("t.json", kind="PyTorch profiler")
>>> add_trace(log, {"distributedInfo": {"rank": 5}, "host_name": "node1"}, [event], file="t.json")
>>> comm = log.comms["3"]
>>> call = comm.calls[("_allgather_base:bfloat16", 7)]
>>> comm.nranks, call.size_bytes, call.least_us, comm.rank_hosts
(8, 16384, 80.25, {5: 'node1'})
"""

from __future__ import annotations

import gzip
import json
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from collsim.calibration.calls import CallLog, CallLogError, Communicator
from collsim.calibration.nccltests import ParseWarning
from collsim.units import DTYPE_SIZES

__all__ = ["TORCH_DTYPES", "add_trace", "read_torch_traces", "starts_like_torch_trace", "torch_trace_files"]

#: PyTorch's names of element types (``c10::toString(ScalarType)``, the ``dtype`` the trace records) to collsim's.
TORCH_DTYPES: dict[str, str] = {
    "Float": "float32", "Half": "float16", "BFloat16": "bfloat16", "Double": "float64", "Char": "int8",
    "Byte": "uint8", "Bool": "uint8", "Int": "int32", "Long": "int64", "UInt32": "uint32", "UInt64": "uint64",
}  # fmt: skip
#: File names a trace has (``export_chrome_trace``'s choice; ``tensorboard_trace_handler`` writes ``*.pt.trace.json``).
TRACE_SUFFIXES: tuple[str, ...] = (".json", ".json.gz")
#: Top-level keys kept (the rest, such as ``deviceProperties``, are passed over).
_KEPT = ("distributedInfo", "host_name")
_CHUNK = 1 << 20  # characters read at a time
_VERSION = re.compile(r"\d+\.\d+\.\d+")
_SPACE = re.compile(r"[ \t\r\n]*")


def _open(path: Path) -> IO[str]:
    return gzip.open(path, "rt", encoding="utf-8") if path.name.endswith(".gz") else path.open(encoding="utf-8")


class _Stream:
    """A JSON document read a chunk at a time, its values decoded one by one (``json.JSONDecoder.raw_decode``), so
    that a trace of hundreds of MB is never held whole."""

    def __init__(self, fh: IO[str], file: str) -> None:
        self.fh, self.file, self.buf, self.pos, self.eof = fh, file, "", 0, False
        self.decoder = json.JSONDecoder()

    def _more(self) -> bool:
        if self.eof:
            return False
        chunk = self.fh.read(_CHUNK)
        self.eof = not chunk
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0
        return bool(chunk)

    def peek(self) -> str:
        """The next character that is not white space (``""`` at the end)."""
        while True:
            self.pos = _SPACE.match(self.buf, self.pos).end()  # type: ignore[union-attr]  # always matches
            if self.pos < len(self.buf) or not self._more():
                return self.buf[self.pos : self.pos + 1]

    def expect(self, char: str) -> None:
        if self.peek() != char:
            got = self.buf[self.pos : self.pos + 20] or "the end of the file"
            raise CallLogError(f"expected {char!r}, got {got!r}: not a PyTorch profiler trace", file=self.file)
        self.pos += 1

    def value(self) -> Any:
        """The next JSON value."""
        self.peek()
        while True:
            try:
                obj, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                if self._more():
                    continue
                raise CallLogError("invalid JSON (cut short?)", file=self.file) from None
            except RecursionError:
                raise CallLogError("invalid JSON: nested too deeply", file=self.file) from None
            if end == len(self.buf) and self._more():  # a number may go on in the next chunk
                continue
            self.pos = end
            return obj

    def members(self) -> Iterator[tuple[str, Any | None]]:
        """The top-level object's keys, each with its value (None for ``traceEvents``, left to :meth:`items`)."""
        self.expect("{")
        while self.peek() != "}":
            key = self.value()
            if not isinstance(key, str):
                raise CallLogError("expected a key", file=self.file)
            self.expect(":")
            if key == "traceEvents":
                yield key, None
            else:
                yield key, self.value()
            if self.peek() == ",":
                self.pos += 1

    def items(self) -> Iterator[Any]:
        """The elements of the array that starts here."""
        self.expect("[")
        while self.peek() not in ("]", ""):
            yield self.value()
            if self.peek() == ",":
                self.pos += 1
        self.expect("]")


def _events(stream: _Stream, head: dict[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The collective kernels among ``traceEvents``; the kept top-level keys go into ``head`` as they pass."""
    for key, value in stream.members():
        if key != "traceEvents":
            if key in _KEPT:
                head[key] = value
            continue
        for event in stream.items():
            if isinstance(event, Mapping) and event.get("cat") == "kernel" and isinstance(event.get("args"), Mapping) \
                    and "Collective name" in event["args"]:  # fmt: skip
                yield event


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _start(event: Mapping[str, Any]) -> float:
    """An event's ``ts`` (microseconds), 0 where it has none: the order calls without ``Seq`` are matched in."""
    ts = event.get("ts")
    return float(ts) if isinstance(ts, int | float) and not isinstance(ts, bool) else 0.0


def _uneven(splits: Any) -> bool:
    """True for an ``In split size`` that lists unequal parts (``"[3, 5]"``): an uneven all-to-all."""
    parts = [int(x) for x in re.findall(r"-?\d+", splits)] if isinstance(splits, str) else []
    return len(set(parts)) > 1


def add_trace(log: CallLog, head: Mapping[str, Any], events: Iterable[Mapping[str, Any]], *, file: str) -> None:
    """Fold one rank's trace (its top-level ``head`` and collective kernel ``events``) into ``log``.

    Raises
    ------
    CallLogError
        Two records of one call with different sizes, naming the file.
    """
    info = head.get("distributedInfo") if isinstance(head.get("distributedInfo"), Mapping) else {}
    assert isinstance(info, Mapping)
    rank = _int(info.get("rank"))
    if rank is None:
        rank = log.files.index(file) if file in log.files else len(log.files)
        warnings.warn(f"{file}: the trace names no rank (distributedInfo.rank); taken as rank {rank}, its order "
                      "among the files", ParseWarning, stacklevel=3)  # fmt: skip
    found = _VERSION.search(str(info.get("nccl_version") or ""))
    if found and log.nccl_version is None:
        log.nccl_version = found.group(0)
    host = head.get("host_name") if isinstance(head.get("host_name"), str) else None
    ordinal: dict[tuple[str, str], int] = {}
    unnumbered = 0
    for event in sorted(events, key=_start):
        args = event["args"]
        name, dtype = args.get("Collective name"), TORCH_DTYPES.get(str(args.get("dtype")))
        nelems = [_int(args.get(k)) for k in ("In msg nelems", "Out msg nelems")]
        nranks, dur = _int(args.get("Group size")), event.get("dur")
        if not isinstance(name, str) or dtype is None or None in nelems or not nranks or nranks < 1 \
                or not isinstance(dur, int | float) or dur <= 0 or _uneven(args.get("In split size")):  # fmt: skip
            log.skipped += 1
            continue
        size = max(n for n in nelems if n is not None) * DTYPE_SIZES[dtype]
        if size <= 0:
            log.skipped += 1
            continue
        pg = str(args.get("Process Group Name", "0"))
        desc = args.get("Process Group Description")
        comm = log.comms.setdefault(pg, _communicator(pg, desc, nranks))
        seq = _int(args.get("Seq"))
        if seq is None:  # older PyTorch: the calls' order in this trace
            unnumbered += 1
            seq = ordinal[(pg, name)] = ordinal.get((pg, name), -1) + 1
        try:
            comm.add(f"{name}:{dtype}", seq, rank=rank, size_bytes=size, time_us=float(dur), host=host,
                     timing="kernel_gpu")  # fmt: skip
        except ValueError as exc:
            raise CallLogError(str(exc), file=file) from None
        log.records += 1
    if unnumbered:
        warnings.warn(f"{file}: {unnumbered} collective kernels carry no Seq (PyTorch before it recorded one): "
                      "matched across ranks by their order in each trace, which holds only where every rank's trace "
                      "covers the same calls", ParseWarning, stacklevel=3)  # fmt: skip


def _communicator(pg: str, desc: Any, nranks: int) -> Communicator:
    """A process group as a communicator: its name the id, its description the name; its nodes not yet known."""
    name = desc if isinstance(desc, str) and desc not in ("", "undefined") else ""
    return Communicator(pg, name, nranks, 0)


def starts_like_torch_trace(path: str | Path) -> bool:
    """True when ``path`` is a JSON file (gzip-compressed or not) that opens as a PyTorch profiler trace: an object
    whose first keys include ``traceEvents`` or Kineto's ``schemaVersion``."""
    p = Path(path)
    if not p.is_file() or not p.name.endswith(TRACE_SUFFIXES):
        return False
    try:
        with _open(p) as fh:
            head = fh.read(4096)
    except (OSError, EOFError, UnicodeDecodeError):
        return False
    return head.lstrip().startswith("{") and ('"traceEvents"' in head or '"schemaVersion"' in head)


def torch_trace_files(path: str | Path) -> list[Path]:
    """The traces under ``path``: the file itself, or every ``*.json`` and ``*.json.gz`` below a folder that opens as
    a trace (sorted).

    Raises
    ------
    CallLogError
        A path that does not exist, or a folder without traces.
    """
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise CallLogError("no such file or folder", file=str(path))
    found = sorted(f for f in p.rglob("*") if f.is_file() and starts_like_torch_trace(f))
    if not found:
        raise CallLogError("no PyTorch profiler traces (*.json, *.json.gz with traceEvents) in this folder or below",
                           file=str(path))  # fmt: skip
    return found


def read_torch_traces(
    path: str | Path, *, progress: Callable[[int, int], None] | None = None
) -> CallLog:
    """Read the NCCL collectives of PyTorch profiler traces: one trace, or a folder of every rank's.

    Each trace is read as a stream (its events one at a time), so its size does not set the memory used.

    Raises
    ------
    CallLogError
        No traces, a file that is not one, or no collective kernel in any (a trace without CUDA activities, or
        from a Gloo job, has none).
    """
    files = torch_trace_files(path)
    log = CallLog(source=str(path), kind="PyTorch profiler")
    for i, f in enumerate(files, start=1):
        log.files.append(str(f))
        head: dict[str, Any] = {}
        try:
            with _open(f) as fh:
                events = list(_events(_Stream(fh, str(f)), head))
        except (OSError, EOFError, UnicodeDecodeError) as exc:
            raise CallLogError(f"cannot read: {exc}", file=str(f)) from None
        add_trace(log, head, events, file=str(f))
        if progress is not None:
            progress(i, len(files))
    if not log.records:
        raise CallLogError("no NCCL collective kernels (kernel events with a 'Collective name'): profile with CUDA "
                           "activities (ProfilerActivity.CUDA) on an NCCL process group", file=str(path))  # fmt: skip
    for comm in log.comms.values():  # the nodes, where every rank's trace names its host
        if len(comm.ranks) == comm.nranks and len(comm.rank_hosts) == comm.nranks:
            comm.nnodes = len(comm.hosts)
    twice = log.duplicates_text()
    if twice:
        warnings.warn(twice, ParseWarning, stacklevel=2)
    return log
