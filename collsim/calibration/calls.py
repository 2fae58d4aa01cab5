"""A real job's collective calls, rank by rank, as a profiler recorded them: the model both readers fill.

Two sources record each collective call on each rank with the time its kernel took: NCCL's Inspector plugin
(:mod:`collsim.calibration.inspector`) and PyTorch's profiler (:mod:`collsim.calibration.torchtrace`, a Kineto
trace). Both are read into a :class:`CallLog`: communicators, and for each the calls, one a (operation, sequence
number), with the least and greatest of its ranks' times.

A rank that starts its kernel before the others waits inside it, so one call's ranks record different times and the
rank that started last records the collective itself: :attr:`Call.least_us` is a call's time, ``most_us -
least_us`` how far apart its ranks arrived (the ranks' skew), and :attr:`Call.last_rank` which rank that was.

Examples
--------
>>> comm = Communicator("0x1", "DP", nranks=2, nnodes=1)
>>> comm.add("AllReduce", 0, rank=0, size_bytes=1 << 20, time_us=40.0, host="n1")
>>> comm.add("AllReduce", 0, rank=1, size_bytes=1 << 20, time_us=25.0, host="n1")
>>> call = comm.calls[("AllReduce", 0)]
>>> call.least_us, call.most_us, call.records, call.last_rank
(25.0, 40.0, 2, 1)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from collsim.vocab import COLLECTIVES, canonical_collective

__all__ = [
    "RECORDERS",
    "Call",
    "CallGroup",
    "CallLog",
    "CallLogError",
    "Communicator",
    "simulated_collective",
]


#: What records a job's calls, as a measurement of them names its benchmark (``software.benchmark``).
RECORDERS: tuple[str, ...] = ("NCCL Inspector", "PyTorch profiler")


class CallLogError(ValueError):
    """A profiler's output that cannot be read; ``file`` and ``field`` say where, the message what is expected."""

    def __init__(self, message: str, *, file: str, field: str | None = None) -> None:
        self.file = file
        self.field = field
        self.reason = message
        super().__init__(f"{file}: {field + ': ' if field else ''}{message}")


#: PyTorch's collective names (``record_param_comms``' "Collective name", ProcessGroupNCCL) that are not spelled as
#: collsim's after the suffixes below are cut.
_TORCH_NAMES: dict[str, str] = {"all_to_allv": "alltoall", "alltoall_base": "alltoall", "all_to_all_single": "alltoall"}
#: Suffixes PyTorch adds to a collective's name for its variants: the output in one tensor (``_allgather_base``,
#: ``all_gather_into_tensor``, ``reduce_scatter_tensor``), several tensors in one group (``_coalesced``), out of place
#: (``_broadcast_oop``).
_TORCH_SUFFIXES: tuple[str, ...] = ("_coalesced", "_base", "_oop", "_into_tensor", "_tensor")


def simulated_collective(operation: str) -> str | None:
    """collsim's name of a recorded operation (NCCL's ``AllReduce``, ``All2All``; PyTorch's ``allreduce``,
    ``_allgather_base``, ``reduce_scatter_tensor_coalesced``), or None for one collsim does not simulate (sends and
    receives, ``AllGatherV``, ``barrier``, ``gather``).

    >>> [simulated_collective(n) for n in ("AllReduce", "All2All", "_allgather_base", "allgather_into_tensor_coalesced",
    ...                                     "_reduce_scatter_base", "_broadcast_oop", "Send", "barrier", "AllGatherV")]
    ['allreduce', 'alltoall', 'allgather', 'allgather', 'reduce_scatter', 'broadcast', None, None, None]
    """
    name = operation.lower().lstrip("_")
    changed = True
    while changed:
        changed = False
        for suffix in _TORCH_SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name, changed = name[: -len(suffix)], True
    name = _TORCH_NAMES.get(name, name)
    try:
        found = canonical_collective(name)
    except ValueError:
        return None
    return found if found in COLLECTIVES and found != "sendrecv" else None


@dataclass
class Call:
    """One call of one operation on one communicator: the records of the ranks that wrote one.

    Attributes
    ----------
    size_bytes : int
        nccl-tests' ``size`` of the call (the larger of one rank's send and receive buffers), bytes.
    least_us, most_us : float
        The shortest and longest of the ranks' times, microseconds, as recorded.
    records : int
        How many ranks wrote one.
    pair : tuple of str, optional
        NCCL's (algorithm, protocol) for the call as the record names them (``RING``, ``SIMPLE``), None when it
        does not.
    last_rank : int
        The rank that recorded the least time (it started its kernel last), -1 while two or more share it.
    """

    size_bytes: int
    least_us: float
    most_us: float
    records: int = 1
    pair: tuple[str, str] | None = None
    last_rank: int = -1


@dataclass(eq=False)
class Communicator:
    """One communicator (an NCCL communicator, a PyTorch process group) as its records describe it.

    Attributes
    ----------
    comm_id : str
        Its identity in the records (NCCL's hash; PyTorch's process group name).
    name : str
        Its name or description (``DP Group 0``, ``default_pg``), ``""`` when none is recorded.
    nranks : int
        Its ranks.
    nnodes : int
        Its nodes, 0 when not recorded.
    ranks : set of int
        The ranks that wrote records.
    hosts : set of str
        The hosts of those records.
    rank_hosts : dict
        The host of each rank that wrote records.
    calls : dict
        ``(operation, sequence number) -> Call``; the operation as the records name it, with the element type when
        they record one (``allreduce:BFloat16``).
    timing : Counter
        Records by how they were timed (``kernel_gpu`` ...).
    dropped : dict
        Records each rank's profiler overwrote before they were written, by rank.
    duplicates : int
        Records of a call a rank had already recorded, ignored (a log read twice: a file and its ``.gz`` copy, a
        copy of the dump below the folder).
    """

    comm_id: str
    name: str
    nranks: int
    nnodes: int
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    rank_hosts: dict[int, str] = field(default_factory=dict)
    calls: dict[tuple[str, int], Call] = field(default_factory=dict)
    timing: Counter[str] = field(default_factory=Counter)
    dropped: dict[int, int] = field(default_factory=dict)
    duplicates: int = 0
    _recorded: set[tuple[str, int, int]] = field(default_factory=set, repr=False)

    @property
    def label(self) -> str:
        """The communicator's name and id (``DP Group 0 (0x7f8c...)``), or its id."""
        return f"{self.name} ({self.comm_id})" if self.name and self.name != self.comm_id else self.comm_id

    def add(
        self,
        operation: str,
        seq: int,
        *,
        rank: int,
        size_bytes: int,
        time_us: float,
        host: str | None = None,
        timing: str = "unknown",
        pair: tuple[str, str] | None = None,
    ) -> None:
        """Fold one rank's record of call ``seq`` of ``operation`` in; a second record of it by the same rank is
        counted in ``duplicates`` and ignored.

        Raises
        ------
        ValueError
            When another rank recorded the same call with another size.
        """
        if (operation, seq, rank) in self._recorded:
            self.duplicates += 1
            return
        self._recorded.add((operation, seq, rank))
        self.ranks.add(rank)
        if host is not None:
            self.hosts.add(host)
            self.rank_hosts[rank] = host
        self.timing[timing] += 1
        call = self.calls.get((operation, seq))
        if call is None:
            self.calls[(operation, seq)] = Call(size_bytes, time_us, time_us, pair=pair, last_rank=rank)
            return
        if call.size_bytes != size_bytes:
            raise ValueError(f"{operation.split(':')[0]} call {seq} of communicator {self.comm_id} is "
                             f"{call.size_bytes} bytes in another rank's record, {size_bytes} here")  # fmt: skip
        if time_us <= call.least_us:
            call.last_rank = rank if time_us < call.least_us else -1
            call.least_us = time_us
        call.most_us = max(call.most_us, time_us)
        call.records += 1
        call.pair = call.pair or pair


@dataclass
class CallGroup:
    """The calls of one operation (and element type) on one communicator, or pooled on every communicator of one
    shape.

    Attributes
    ----------
    operation : str
        As the records name it (``AllReduce``; ``_allgather_base``).
    dtype : str or None
        The element type the records name (PyTorch's, ``BFloat16``), None when they name none.
    comms : list of Communicator
        The communicator (several when pooled: same operation, type, ranks and nodes).
    nranks, nnodes : int
        Ranks and nodes of each communicator (nodes 0 when not recorded).
    calls : list of Call
        The calls every rank that wrote records for its communicator recorded (a call some of them lack is left
        out: its least time may be an early rank's, which waited).
    incomplete : int
        Calls left out for that reason.
    ranks_recorded : int
        Ranks of the group that wrote records (out of ``nranks`` x ``len(comms)``).
    """

    operation: str
    dtype: str | None
    comms: list[Communicator]
    nranks: int
    nnodes: int
    calls: list[Call] = field(default_factory=list)
    incomplete: int = 0
    ranks_recorded: int = 0

    @property
    def label(self) -> str:
        """The communicator's label, or ``N communicators`` when pooled."""
        return self.comms[0].label if len(self.comms) == 1 else f"{len(self.comms)} communicators"

    def last_to_start(self) -> tuple[int, int, int] | None:
        """The rank that most often started its kernel last (recorded the least time alone), the calls it did, and
        the calls one rank alone did; None for a pooled group, when some of the communicator's ranks wrote no
        records (the last of those that did need not be the last of all) or when no call had one last rank.

        A rank its computation, its host or its input pipeline holds back arrives last at most calls, where chance
        gives each rank 1 in ``nranks``.
        """
        if len(self.comms) != 1 or self.ranks_recorded < self.nranks:
            return None
        last = Counter(c.last_rank for c in self.calls if c.last_rank >= 0)
        if not last:
            return None
        rank, count = last.most_common(1)[0]
        return rank, count, sum(last.values())

    @property
    def timing(self) -> Counter[str]:
        """Records by how they were timed over the group's communicators."""
        total: Counter[str] = Counter()
        for c in self.comms:
            total.update(c.timing)
        return total


@dataclass
class CallLog:
    """Every communicator a profiler's output records.

    Attributes
    ----------
    source : str
        The file or folder read (for messages).
    kind : str
        What recorded it: ``NCCL Inspector`` or ``PyTorch profiler``.
    rounding_us : float
        What the recorder's rounding takes from a time on average, microseconds (added back to each call's time).
    files : list of str
        The files read.
    comms : dict
        ``comm_id -> Communicator``, in the order first seen.
    records : int
        Records read.
    skipped : int
        Records or lines skipped.
    versions : set of str
        Output format versions seen.
    nccl_version : str or None
        The NCCL release the output names, if any.
    """

    source: str
    kind: str = "profiler"
    rounding_us: float = 0.0
    files: list[str] = field(default_factory=list)
    comms: dict[str, Communicator] = field(default_factory=dict)
    records: int = 0
    skipped: int = 0
    versions: set[str] = field(default_factory=set)
    nccl_version: str | None = None

    @property
    def hosts(self) -> set[str]:
        """Every host that wrote records."""
        return {h for c in self.comms.values() for h in c.hosts}

    def duplicates_text(self) -> str | None:
        """What was ignored as records of calls a rank had already recorded (:attr:`Communicator.duplicates`), for
        a warning; None when nothing was."""
        twice = sum(c.duplicates for c in self.comms.values())
        if not twice:
            return None
        return (f"{self.source}: ignored {twice} records of calls a rank had already recorded (a file read twice: a "
                "log and its .gz copy, or a copy of the dump below the folder)")  # fmt: skip

    def groups(self, *, pool: bool = False) -> list[CallGroup]:
        """The calls by communicator, operation and element type; with ``pool``, communicators of the same shape
        (operation, type, ranks, nodes) together. Sends and receives (operations recorded per peer,
        ``Send:rank:peer``) are one group an operation and communicator.

        >>> log = CallLog("x", comms={c: Communicator(c, "", 8, 1) for c in ("0x1", "0x2")})
        >>> for c in log.comms.values():
        ...     c.ranks.update(range(8))
        ...     c.calls[("AllReduce", 0)] = Call(1024, 10.0, 12.0, records=8)
        >>> [(g.label, len(g.calls)) for g in log.groups()], [(g.label, len(g.calls)) for g in log.groups(pool=True)]
        ([('0x1', 1), ('0x2', 1)], [('2 communicators', 2)])
        """
        found: dict[tuple[Any, ...], CallGroup] = {}
        for comm in self.comms.values():
            joined: set[tuple[str, str | None]] = set()  # the groups this communicator has joined
            for (key, _), call in comm.calls.items():
                op, _, rest = key.partition(":")
                dtype = rest if rest and not rest[0].isdigit() else None  # "Send:0:1" is per peer, not a type
                gkey = (op, dtype, comm.nranks, comm.nnodes) if pool else (op, dtype, comm.comm_id)
                group = found.setdefault(gkey, CallGroup(op, dtype, [], comm.nranks, comm.nnodes))
                if (op, dtype) not in joined:
                    joined.add((op, dtype))
                    group.comms.append(comm)
                    group.ranks_recorded += len(comm.ranks)
                if (rest and dtype is None) or call.records == len(comm.ranks):
                    group.calls.append(call)
                else:
                    group.incomplete += 1
        return list(found.values())
