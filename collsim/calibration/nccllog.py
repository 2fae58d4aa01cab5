"""NCCL's own account of a communicator (its ``NCCL_DEBUG=INFO`` lines), and collsim's plan set beside it.

A run with ``NCCL_DEBUG=INFO`` prints, at init, what NCCL built: the ranks and nodes, the ring channels and their
order, every connection's transport, the network devices and the search's graphs. Those lines are the quickest check
that a scenario describes the cluster the way NCCL saw it. The formats are NCCL's ``INFO`` strings (v2.30.7-1; the
same in 2.18-2.29 where noted):

================================  ===================================================================================
what                              line (source)
================================  ===================================================================================
release                           ``NCCL version 2.26.2+cuda12.8`` (init.cc)
ranks, nodes, ranks per node      ``comm 0x.. rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0`` (init.cc,
                                  from 2.19; 2.18 prints no nNodes)
channels                          ``24 coll channels, 0 collnet channels, 16 nvls channels, 32 p2p channels, ...``
                                  (init.cc; 2.18 without the collnet count)
ring order                        ``Channel 00/24 :    0   1   2 ...`` (graph/rings.cc, rank 0 only); the trees,
                                  one ``[c]`` entry a channel: ``Trees [0] 1/-1/-1->0->-1 [1] ...`` (init.cc)
NVLS heads                        ``NVLS Head  0:  0  8`` (graph/connect.cc: a head's rank on each node)
a connection's transport          ``Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read`` (transport/p2p.cc),
                                  ``Channel 00 : 1[1] -> 2[2] via SHM/direct/direct`` (transport/shm.cc),
                                  ``Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA`` (transport/net.cc)
network                           ``Using network IB`` (init.cc), ``NET/IB : Using [0]mlx5_0:1/IB [1]... ; OOB ..``
                                  (transport/net_ib/init.cc)
NCCL's cost model                 ``  Algorithm   |  Tree  Ring  CollNetDirect |``, then per function
                                  ``    AllReduce |    15.2/  44.9 |    31.5/ 132.7 | ...`` (latency us / algorithm
                                  bandwidth GB/s per algorithm's LL, LL128, Simple; tuning.cc, TUNING, rank 0)
a call's algorithm and protocol   ``AllReduce: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..7}``
                                  (``NCCL_DEBUG_SUBSYS=TUNING``, rank 0; enqueue.cc from 2.24; 2.23:
                                  ``AllReduce: 1048576 Bytes -> Algo 1 proto 1 time 81.0``, indices; 2.20-2.22
                                  the same without the name)
================================  ===================================================================================

Lines keep whatever prefix the launcher and NCCL put before ``NCCL INFO`` (``host:pid:tid [dev]``); other lines
are ignored. A log from several ranks repeats the same facts; they are read once each.

Examples
--------
>>> log = parse_nccl_log('''
... n1:42:42 [0] NCCL INFO NCCL version 2.26.2+cuda12.8
... n1:42:60 [0] NCCL INFO comm 0x5a rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0
... n1:42:60 [0] NCCL INFO Channel 00/16 :    0   1   2   3   4   5   6   7   8   9  10  11  12  13  14  15
... n1:42:60 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
... n1:42:61 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA
... n1:42:61 [7] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/7/GDRDMA
... [0] NCCL INFO 16 coll channels, 0 collnet channels, 16 nvls channels, 32 p2p channels, 2 p2p channels per peer
... ''')
>>> log.version, log.nranks, log.nnodes, log.local_ranks, log.ring_channels, log.nvls_channels
('2.26.2', 16, 2, 8, 16, 16)
>>> sorted(log.transports)
['NET/GDR', 'P2P']
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from collsim.calibration.measurement import MeasurementError
from collsim.calibration.nccltests import nccl_version
from collsim.files import FileReadError, read_text_file
from collsim.units import format_size
from collsim.vocab import (
    NCCL_ALGORITHMS,
    NCCL_PRINTED_ALGORITHMS,
    NCCL_PRINTED_PROTOCOLS,
    NCCL_PROTOCOLS,
    PER_RANK_COUNT_COLLECTIVES,
    canonical_collective,
)

__all__ = [
    "HINTS",
    "Choice",
    "ChoiceCheck",
    "NcclInitLog",
    "PlanCheck",
    "TunerCheck",
    "check_choices",
    "check_plan",
    "check_tuner",
    "logged_pairs",
    "parse_nccl_log",
    "read_nccl_log",
    "render_checks",
    "render_choices",
    "render_tuner",
    "transport_class",
]

_INFO = re.compile(r"NCCL INFO (.*)$")
_COMM = re.compile(r"comm \S+ rank (\d+) nRanks (\d+)(?: nNodes (\d+) localRanks (\d+) localRank (\d+))?")
_CHANNELS = re.compile(r"(\d+) coll channels, (?:(\d+) collnet channels, )?(\d+) nvls channels, (\d+) p2p channels")
_RING = re.compile(r"^Channel (\d+)/(\d+) :((?:\s+\d+)+)\s*$")
_CONN = re.compile(r"^Channel (\d+)(?:/\d+)? : (\d+)\[\w+\] -> (\d+)\[\w+\] (?:\[(send|receive)\] )?via (.+?)\s*$")
_NVLS_HEAD = re.compile(r"^NVLS Head\s+(\d+):((?:\s+\d+)+)\s*$")
_TREES = re.compile(r"^Trees((?: \[\d+\] -?\d+/-?\d+/-?\d+->-?\d+->-?\d+)+)\s*$")
_NETWORK = re.compile(r"^Using network (.+?)\s*$")
#: NCCL_DEBUG_SUBSYS=TUNING, rank 0, per collective: from 2.24 (enqueue.cc) with its name, algorithm, protocol and
#: channels; 2.20-2.23 with the algorithm's and protocol's indices and the model's time, 2.23 after the name
#: (v2.20.5-1 line 1498, v2.22.3-1 line 1613, v2.23.4-1 line 1855, v2.24.3-1 line 678)
_CHOICE = re.compile(
    r"^(?:(\w+): )?(\d+) Bytes -> Algo (\w+) proto (\w+)(?: channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\})?"
)
#: NCCL's algorithm and protocol indices (src/include/device.h NCCL_ALGO_*, NCCL_PROTO_*) as collsim names them
_ALGOS, _PROTOS = NCCL_ALGORITHMS, NCCL_PROTOCOLS
#: tuning.cc's table (NCCL_DEBUG_SUBSYS=TUNING, rank 0, at init): a header of up to three algorithms (ncclAlgoStr),
#: then per function (ncclFuncStr) "latency/bandwidth" for each algorithm's LL, LL128 and Simple
_TABLE_ALGOS = re.compile(r"^Algorithm\s*\|(.*)$")
_ALGO_WORD = re.compile(r"\b(Tree|Ring|CollNetDirect|CollNetChain|NVLSTree|NVLS|PAT)\b")
_TABLE_ROW = re.compile(r"^(Broadcast|Reduce|AllGather|ReduceScatter|AllReduce)\s*\|(.*)$")
#: a cell "latency/bandwidth" of that table, whatever its text (an unreadable one keeps its place: nan/-inf)
_CELL = re.compile(r"(\S+)/\s*(\S+)")
_NET_DEVICES = re.compile(r"^NET/(\S+) : Using((?: \[\d+\]\S+)+)")
_DEVICE = re.compile(r"\[\d+\](\S+)")


def transport_class(via: str) -> str:
    """collsim's transport name for what follows ``via`` in NCCL's connection line: ``P2P`` (any P2P: NVLink or
    PCIe, direct, IPC, cuMem, through an intermediate GPU), ``SHM``, ``NET/GDR`` (the NIC reads or writes GPU memory:
    ``/GDRDMA``), ``NET/socket`` (NCCL's socket transport) or ``NET/staged`` (any other network path, through host
    memory).

    >>> [transport_class(v) for v in ("P2P/CUMEM/read", "P2P/indirect/4[4]", "SHM/direct/direct", "NET/IB/0/GDRDMA",
    ...  "NET/IB/3(7)/GDRDMA/Shared", "NET/Socket/0", "NET/AWS Libfabric/0/GDRDMA", "NET/IB/1")]
    ['P2P', 'P2P', 'SHM', 'NET/GDR', 'NET/GDR', 'NET/socket', 'NET/GDR', 'NET/staged']
    """
    if via.startswith("P2P/"):
        return "P2P"
    if via.startswith("SHM/"):
        return "SHM"
    if "/GDRDMA" in via:
        return "NET/GDR"
    if via.startswith("NET/Socket/"):
        return "NET/socket"
    return "NET/staged"


@dataclass(frozen=True)
class Choice:
    """One collective call's (algorithm, protocol) from NCCL's ``TUNING`` line.

    ``collective`` is collsim's name, None where the line does not say (NCCL 2.20-2.22); ``nbytes`` the bytes NCCL
    prints (from 2.24 a rank's part of an all-gather or reduce-scatter, ``per_rank``; before, the whole buffer);
    ``channels`` the channels it ran on (from 2.24), else None.
    """

    collective: str | None
    nbytes: int
    algorithm: str
    protocol: str
    channels: int | None
    per_rank: bool = False  # nbytes a rank's part (2.24 on: an all-gather's or reduce-scatter's count x type)


@dataclass
class NcclInitLog:
    """What one NCCL communicator's ``INFO`` lines say about it; None (or empty) where the log does not say.

    Attributes
    ----------
    version : str or None
        The release, ``"major.minor.patch"``.
    nranks, nnodes, local_ranks : int or None
        Ranks, nodes, and ranks on rank 0's node.
    ring_channels, nvls_channels : int or None
        NCCL's ring (and tree) channels, and its NVLS channels (0 where NVLS is off).
    transports : Counter
        Connections by collsim's transport name (:func:`transport_class`): P2P and SHM lines and the network's
        ``[send]`` lines (each network connection's ``[receive]`` line is its other end).
    network : str or None
        The network plugin NCCL uses (``IB``, ``Socket``, a plugin's name).
    net_devices : list of str
        The devices the IB transport lists (``mlx5_0:1/IB``); empty for other networks or when not printed.
    choices : list of Choice
        The (algorithm, protocol) NCCL ran each collective with (``NCCL_DEBUG_SUBSYS=TUNING``), one per collective
        and size (the first of its calls).
    nvls_heads : dict
        NVLS head -> its rank on node 0 (``NVLS Head  0:  0  8``: connect.cc, printed across nodes).
    communicators : list of int
        The rank counts of the communicators whose ``comm ... nRanks`` lines the log holds, each once, in order: a
        job's log may hold several (PyTorch's process groups), whose other lines cannot be told apart; the facts
        above are the first's where a line names it, and :meth:`notes` says so.
    tuner : dict
        NCCL's cost model as it prints it at init (``NCCL_DEBUG_SUBSYS=TUNING``): (collective, algorithm, protocol)
        -> (latency in us, algorithm bandwidth in GB/s, GB = 1e9 bytes), 0 bandwidth where the pair is off.
    unread : int
        Cells of that table and TUNING choice lines that could not be read (not finite numbers, unknown names).
    """

    version: str | None = None
    nranks: int | None = None
    nnodes: int | None = None
    local_ranks: int | None = None
    ring_channels: int | None = None
    nvls_channels: int | None = None
    transports: Counter[str] = field(default_factory=Counter)
    network: str | None = None
    net_devices: list[str] = field(default_factory=list)
    choices: list[Choice] = field(default_factory=list)
    nvls_heads: dict[int, int] = field(default_factory=dict)
    tuner: dict[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)
    communicators: list[int] = field(default_factory=list)
    source: str = "<text>"
    unread: int = 0

    def notes(self) -> list[str]:
        """What to keep in mind when comparing: several communicators in one log, lines of its cost model that could
        not be read."""
        out = []
        if len(self.communicators) >= 2:
            sizes = ", ".join(str(n) for n in self.communicators)
            out.append(f"the log holds communicators of {sizes} ranks; lines that do not name theirs (channels, "
                       "connections, choices) may mix them: a log of one communicator compares cleanly")  # fmt: skip
        if self.unread:
            out.append(f"{self.unread} cell(s) of NCCL's cost-model table or TUNING choice line(s) could not be read "
                       "and are left out (shown as off)")  # fmt: skip
        return out

    def run_notes(self, nranks: int, nnodes: int, version: str | None) -> list[str]:
        """:meth:`notes`, and what says the log may not be of the run compared with it: a communicator of other
        ranks or nodes than the scenario's (``nranks``, ``nnodes``), another release than the measurement names
        (``version``, ``"2.26.2"``; None when it names none).

        >>> log = NcclInitLog(version="2.26.2", nranks=8, nnodes=1, communicators=[8])
        >>> log.run_notes(16, 2, "2.21.5")[0][:64]
        'the log is of a communicator of 8 ranks on 1 node, the scenario '
        """
        out = self.notes()
        if (self.nranks, self.nnodes) != (nranks, nnodes) and self.nranks is not None:
            on = "" if self.nnodes is None else f" on {self.nnodes} node{'s' if self.nnodes != 1 else ''}"
            out.append(f"the log is of a communicator of {self.nranks} ranks{on}, the scenario has {nranks} on "
                       f"{nnodes}: its choices may not be this run's (all-gather and reduce-scatter sizes are the "
                       "log's bytes x the ranks)")  # fmt: skip
        if version and self.version and not version.startswith(self.version):
            out.append(f"the log is of NCCL {self.version}, the measurement names {version}")
        return out

    @property
    def empty(self) -> bool:
        """True when no line the parser knows was found."""
        return not (
            self.version
            or self.nranks
            or self.ring_channels
            or self.transports
            or self.network
            or self.choices
            or self.tuner
            or self.nvls_heads
            or self.net_devices
        )


def parse_nccl_log(text: str, *, source: str = "<text>") -> NcclInitLog:
    """Read NCCL's ``INFO`` lines from ``text`` (a whole job's output is fine: other lines are skipped).

    Parameters
    ----------
    text : str
        Log text, with or without launcher prefixes.
    source : str
        Its name, for messages.

    Returns
    -------
    NcclInitLog
        The first value of each fact (rank 0's where rank 0 prints it); connections counted once per line.
    """
    log = NcclInitLog(source=source)
    state = _Reading()
    for raw in text.splitlines():
        if log.version is None:
            log.version = nccl_version(raw)
        found = _INFO.search(raw)
        if not found:
            continue
        line = found.group(1).strip()
        _read_line(log, line, state)
    return log


@dataclass
class _Reading:
    """What reading a log keeps between lines: the connections and calls already counted, and the algorithms of
    the cost-model table's current block."""

    connections: set[tuple[str, str, str, str]] = field(default_factory=set)
    calls: set[tuple[str | None, int]] = field(default_factory=set)
    table_algos: list[str] = field(default_factory=list)


def _read_line(log: NcclInitLog, line: str, state: _Reading) -> None:
    if comm := _COMM.search(line):
        if int(comm.group(2)) not in log.communicators:
            log.communicators.append(int(comm.group(2)))
        if log.nranks is None:
            log.nranks = int(comm.group(2))
        if comm.group(3) is not None and log.nnodes is None:
            log.nnodes, log.local_ranks = int(comm.group(3)), int(comm.group(4))
    elif counts := _CHANNELS.search(line):
        if log.ring_channels is None:
            log.ring_channels = int(counts.group(1))
        if log.nvls_channels is None:
            log.nvls_channels = int(counts.group(3))
    elif conn := _CONN.match(line):
        channel, src, dst, side, via = conn.groups()
        if side == "receive":
            return
        key = (channel, src, dst, via)
        if key not in state.connections:
            state.connections.add(key)
            log.transports[transport_class(via)] += 1
    elif ring := _RING.match(line):
        if log.ring_channels is None:
            log.ring_channels = int(ring.group(2))
    elif head := _NVLS_HEAD.match(line):
        log.nvls_heads.setdefault(int(head.group(1)), int(head.group(2).split()[0]))
    elif trees := _TREES.match(line):  # one [c] entry per channel (init.cc: "Trees [0] 1/-1/-1->0->-1 [1] ...")
        if log.ring_channels is None:
            log.ring_channels = trees.group(1).count("[")
    elif network := _NETWORK.match(line):
        log.network = log.network or network.group(1)
    elif (devices := _NET_DEVICES.match(line)) and not log.net_devices:
        log.net_devices = _DEVICE.findall(devices.group(2))
    elif header := _TABLE_ALGOS.match(line):
        state.table_algos = _ALGO_WORD.findall(header.group(1))
    elif (row := _TABLE_ROW.match(line)) and state.table_algos:
        func = canonical_collective(row.group(1))
        for i, (lat, bw) in enumerate(_CELL.findall(row.group(2).replace("|", " "))):
            number = _finite_pair(lat, bw)
            if i // 3 >= len(state.table_algos):
                continue
            if number is None:  # a cell not read is skipped in its place
                log.unread += 1
                continue
            log.tuner.setdefault((func, state.table_algos[i // 3], _PROTOS[i % 3]), number)
    elif choice := _CHOICE.match(line):
        parsed = _choice(choice)
        log.unread += parsed is None
        if parsed is not None and (parsed.collective, parsed.nbytes) not in state.calls:
            state.calls.add((parsed.collective, parsed.nbytes))
            log.choices.append(parsed)


def _finite_pair(lat: str, bw: str) -> tuple[float, float] | None:
    """A table cell's latency and bandwidth as numbers, or None where either is not a finite number.

    >>> _finite_pair("23.4", "19.2"), _finite_pair("nan", "-inf"), _finite_pair("x", "1")
    ((23.4, 19.2), None, None)
    """
    try:
        pair = (float(lat), float(bw))
    except ValueError:
        return None
    return pair if all(math.isfinite(x) for x in pair) else None


def _choice(found: re.Match[str]) -> Choice | None:
    """A TUNING line's choice in collsim's names; None for names or indices collsim does not know."""
    func, nbytes, algo, proto, lo, hi = found.groups()
    if algo.isdigit() and proto.isdigit():
        a, p = int(algo), int(proto)
        algorithm = _ALGOS[a] if a < len(_ALGOS) else None
        protocol = _PROTOS[p] if p < len(_PROTOS) else None
    else:
        algorithm, protocol = NCCL_PRINTED_ALGORITHMS.get(algo), NCCL_PRINTED_PROTOCOLS.get(proto)
    if algorithm is None or protocol is None:
        return None
    try:
        collective = canonical_collective(func) if func else None
    except ValueError:
        return None
    channels = int(hi) - int(lo) + 1 if lo is not None else None
    # 2.24 on print the task's count x type (enqueue.cc, a rank's part of an all-gather or reduce-scatter); 2.20-2.23
    # the model's nBytes, the whole buffer (ncclFuncMaxSendRecvCount): they print indices, not names
    per_rank = collective in PER_RANK_COUNT_COLLECTIVES and not algo.isdigit()
    return Choice(collective, int(nbytes), algorithm, protocol, channels, per_rank)


def read_nccl_log(path: str | Path) -> NcclInitLog:
    """Read and parse an ``NCCL_DEBUG=INFO`` log file (:func:`parse_nccl_log`).

    Raises
    ------
    MeasurementError
        For a missing or unreadable file, or one without any NCCL ``INFO`` line collsim reads.
    """
    file = str(path)
    try:
        text = read_text_file(Path(path))
    except FileReadError as exc:
        raise MeasurementError(str(exc).removeprefix(f"{file}: "), file=file) from None
    log = parse_nccl_log(text, source=file)
    if log.empty:
        raise MeasurementError(
            "no NCCL INFO line collsim reads (NCCL version, comm ... nRanks, channels, 'via' connections, "
            "'Using network'); run with NCCL_DEBUG=INFO",
            file=file,
        )
    return log


@dataclass(frozen=True)
class PlanCheck:
    """One fact as NCCL's log gives it and as collsim plans it.

    ``agree`` is None where the log does not say; ``hint`` says what to change in the scenario when they differ.
    """

    what: str
    log: str
    collsim: str
    agree: bool | None
    hint: str = ""


#: What to look at in a scenario where collsim's plan and NCCL's log differ, by fact.
HINTS: dict[str, str] = {
    "version": "set backends.nccl.version to the log's release (NCCL's tuner tables and defaults differ by release)",
    "nranks": "cluster.nodes and the GPUs a node runs (cluster.visible_gpus, as CUDA_VISIBLE_DEVICES lists them; "
              "node_params.gpus where the template takes it), as the job ran",
    "nnodes": "cluster.nodes",
    "local_ranks": "cluster.visible_gpus (the job's CUDA_VISIBLE_DEVICES), or node_params.gpus where the template "
                   "takes it",
    "ring_channels": (
        "NCCL's search found another count: the GPUs' links (the template's NVLink and PCIe), the NICs per node, "
        "NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS / NCCL_MIN_CTAS in backends.nccl.env, backends.nccl.version"
    ),
    "nvls_channels": (
        "NVLS needs Hopper or newer and an NVSwitch with multicast; NCCL_NVLS_ENABLE / NCCL_NVLS_NCHANNELS in "
        "backends.nccl.env; backends.nccl.version"
    ),
    "transports": (
        "P2P or SHM: the GPU preset's p2p (node_params.p2p), NCCL_P2P_LEVEL / NCCL_P2P_DISABLE; NET/GDR or staged: "
        "cluster.fabric.gpudirect, the GPU's gpudirect_rdma, NCCL_NET_GDR_LEVEL; sockets: cluster.fabric.transport"
    ),
    "nics": "the node template's NICs (node_params.nic, nics_per_gpu) or NCCL_IB_HCA in backends.nccl.env",
    "nvls_heads": (
        "NVLS takes a head GPU per NIC, the GPU nearest it: where the NICs sit (the template's PCIe switches, "
        "cluster.fabric.nics_per_node, NCCL_IB_HCA)"
    ),
}


def check_plan(
    log: NcclInitLog, planned: Mapping[str, object], hints: Mapping[str, str] | None = None
) -> list[PlanCheck]:
    """Set collsim's plan beside NCCL's log, fact by fact.

    Parameters
    ----------
    log : NcclInitLog
        What NCCL printed.
    planned : mapping
        collsim's values under the keys ``version`` (str or None: the latest tables), ``nranks``, ``nnodes``,
        ``local_ranks``, ``ring_channels``, ``nvls_channels`` (int), ``transports`` (a set of transport names,
        :data:`~collsim.vocab.NCCL_TRANSPORTS`), ``nics`` (int, per node) and ``nvls_heads`` (node 0's ranks that
        are NVLS heads, in head order; empty where NVLS cannot run).
    hints : mapping
        What to change in the scenario, by the same keys, shown where the two differ (default :data:`HINTS`).

    Returns
    -------
    list of PlanCheck
        In the order above.
    """
    rows: list[PlanCheck] = []
    hints = HINTS if hints is None else hints

    def add(key: str, what: str, theirs: object, ours: object, same: bool | None = None) -> None:
        agree = None if theirs is None else (theirs == ours if same is None else same)
        shown = "-" if theirs is None else str(theirs)
        rows.append(PlanCheck(what, shown, str(ours), agree, hints.get(key, "") if agree is False else ""))

    ours_version = planned.get("version")
    same_release = None if log.version is None else _same_release(log.version, ours_version)
    add("version", "NCCL release", log.version, ours_version or "latest tables", same_release)
    add("nranks", "ranks", log.nranks, planned.get("nranks"))
    add("nnodes", "nodes", log.nnodes, planned.get("nnodes"))
    add("local_ranks", "ranks per node", log.local_ranks, planned.get("local_ranks"))
    add("ring_channels", "ring/tree channels", log.ring_channels, planned.get("ring_channels"))
    add("nvls_channels", "NVLS channels", log.nvls_channels, planned.get("nvls_channels"))
    ours = _classes(planned.get("transports"))
    theirs = sorted(log.transports) if log.transports else None
    add("transports", "transports", ", ".join(theirs) if theirs else None, ", ".join(ours),
        None if theirs is None else set(theirs) == set(ours))  # fmt: skip
    nics = len(log.net_devices) if log.net_devices else None
    add("nics", "NICs NCCL lists (per node)", nics, planned.get("nics"))
    heads = " ".join(str(r) for _, r in sorted(log.nvls_heads.items())) if log.nvls_heads else None
    planned_heads = planned.get("nvls_heads")
    ours_heads = " ".join(str(r) for r in planned_heads) if isinstance(planned_heads, list) and planned_heads else "-"
    add("nvls_heads", "NVLS heads (node 0's ranks)", heads, ours_heads)
    return rows


def _same_release(theirs: str, ours: object) -> bool:
    """The log's release against ``backends.nccl.version``, which may leave out the patch (``2.26`` is 2.26.x).

    >>> _same_release("2.26.2", "2.26"), _same_release("2.26.2", "2.26.2"), _same_release("2.26.2", None)
    (True, True, False)
    """
    if not ours:
        return False
    mine = str(ours).split(".")
    return theirs.split(".")[: len(mine)] == mine


def _classes(transports: object) -> list[str]:
    """collsim's hop transports as the log's classes (P2P over NVLink or PCIe is one class there)."""
    names = transports if isinstance(transports, (set, frozenset, list, tuple)) else ()
    return sorted({"P2P" if str(t).startswith("P2P/") else str(t) for t in names})


def render_checks(rows: Sequence[PlanCheck], source: str, notes: Sequence[str] = ()) -> str:
    """The checks as a table with a header naming the log, then the hints where they differ and ``notes``."""
    width = max(len(r.what) for r in rows)
    head = f"# {'':{width}}  {'NCCL log':>24}  {'collsim':>24}  same"
    lines = [f"# collsim's plan against NCCL's log {source}", head]
    for r in rows:
        mark = "-" if r.agree is None else ("yes" if r.agree else "NO")
        lines.append(f"  {r.what:{width}}  {r.log:>24}  {r.collsim:>24}  {mark}")
    hints = [f"  {r.what}: {r.hint}" for r in rows if r.hint]
    if hints:
        lines += ["# where they differ:", *hints]
    lines += [f"# note: {n}" for n in notes]
    return "\n".join(lines)


@dataclass(frozen=True)
class ChoiceCheck:
    """NCCL's (algorithm, protocol) at one size, as its log says and as collsim picks it."""

    size_bytes: int
    log: str
    collsim: str
    agree: bool


def logged_pairs(log: NcclInitLog, collective: str, nranks: int) -> dict[int, tuple[str, str]]:
    """The (algorithm, protocol) NCCL's log says each call of ``collective`` ran with, by size in nccl-tests'
    convention (all-gather and reduce-scatter: the line's bytes x ``nranks``; a line without the collective's name,
    2.20-2.22, only for an allreduce), as :func:`check_choices` reads them.

    >>> log = parse_nccl_log("[0] NCCL INFO AllGather: 65536 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..15}")
    >>> logged_pairs(log, "allgather", 16)
    {1048576: ('Ring', 'LL128')}
    """
    out: dict[int, tuple[str, str]] = {}
    for c in log.choices:
        if (c.collective is None and collective != "allreduce") or (c.collective not in (None, collective)):
            continue
        size = c.nbytes * nranks if c.per_rank else c.nbytes
        out.setdefault(size, (c.algorithm, c.protocol))
    return out


def check_choices(
    log: NcclInitLog, collective: str, nranks: int, picks: Mapping[int, tuple[str, str]]
) -> list[ChoiceCheck]:
    """The log's choice for ``collective`` at each size collsim also explained (``picks``: size in nccl-tests'
    convention, bytes -> collsim's (algorithm, protocol)), in size order.

    nccl-tests' size of an all-gather or reduce-scatter is the whole buffer, NCCL's TUNING line (from 2.24) prints a
    rank's part: the line's bytes x ``nranks`` (2.23's line, with indices, the whole buffer as it is). A line
    without the collective's name (2.20-2.22) is taken for the
    scenario's collective only when that is an allreduce, whose bytes read the same either way.
    """
    channels = {
        (c.nbytes * nranks if c.per_rank else c.nbytes): c.channels
        for c in log.choices
        if c.collective in (None, collective)
    }
    rows: list[ChoiceCheck] = []
    for size, pair in logged_pairs(log, collective, nranks).items():
        if size not in picks:
            continue
        ours = picks[size]
        ch = channels.get(size)
        theirs = "/".join(pair) + (f" ({ch} ch)" if ch else "")
        rows.append(ChoiceCheck(size, theirs, "/".join(ours), pair == tuple(ours)))
    return sorted(rows, key=lambda r: r.size_bytes)


def render_choices(rows: Sequence[ChoiceCheck], collective: str) -> str:
    """The per-size choices of ``collective`` as a table, with how many agree."""
    lines = [f"# NCCL's choice for {collective} in the log (NCCL_DEBUG_SUBSYS=TUNING) against collsim's",
             f"# {'size':>10}  {'NCCL log':>26}  {'collsim':>18}  same"]  # fmt: skip
    for r in rows:
        lines.append(f"  {format_size(r.size_bytes):>10}  {r.log:>26}  {r.collsim:>18}  {'yes' if r.agree else 'NO'}")
    same = sum(r.agree for r in rows)
    lines.append(f"# the same pair at {same} of {len(rows)} sizes")
    return "\n".join(lines)


@dataclass(frozen=True)
class TunerCheck:
    """One (algorithm, protocol) of NCCL's cost model: latency (us) and algorithm bandwidth (GB/s) as NCCL printed
    them and as collsim computes them, None where a pair is off (NCCL prints its bandwidth as 0)."""

    pair: str
    log: tuple[float, float] | None
    collsim: tuple[float, float] | None
    agree: bool


def check_tuner(
    log: NcclInitLog, collective: str, table: Mapping[tuple[str, str], tuple[float, float, bool]],
    tolerance: float = 0.05,
) -> list[TunerCheck]:  # fmt: skip
    """NCCL's printed cost model for ``collective`` against collsim's (``table``: (algorithm, protocol) ->
    (latency s, algorithm bandwidth bytes/s, enabled), :meth:`collsim.api.Simulator.nccl_tuner_table`).

    A pair on for both agrees when latency and bandwidth are within ``tolerance`` of NCCL's (or 0.15 of its printed
    unit: NCCL prints one decimal); a pair on for one side only differs; one off for both is left out. Empty when
    the log has no table for the collective.
    """
    theirs = {(a, p): v for (c, a, p), v in log.tuner.items() if c == collective}
    if not theirs:
        return []
    rows: list[TunerCheck] = []
    for pair in dict.fromkeys([*theirs, *table]):
        t = theirs.get(pair)
        t_on = t if t is not None and t[1] > 0 else None
        o = table.get(pair)
        o_on = (o[0] * 1e6, o[1] / 1e9) if o is not None and o[2] else None  # s -> us; bytes/s -> GB/s (1e9)
        if t_on is None and o_on is None:  # off on both sides: nothing to compare
            continue
        if t_on is None or o_on is None:
            agree = False
        else:
            agree = all(abs(x - y) <= max(0.15, tolerance * abs(x)) for x, y in zip(t_on, o_on, strict=True))
        rows.append(TunerCheck("/".join(pair), t_on, o_on, agree))
    return rows


def render_tuner(rows: Sequence[TunerCheck], collective: str) -> str:
    """NCCL's printed cost model against collsim's for ``collective``, with how many pairs agree."""

    def cell(v: tuple[float, float] | None) -> str:
        return "off" if v is None else f"{v[0]:.1f} us / {v[1]:.1f} GB/s"

    lines = [f"# NCCL's cost model for {collective} in the log (NCCL_DEBUG_SUBSYS=TUNING) against collsim's: "
             "latency / algorithm bandwidth",
             f"# {'pair':>20}  {'NCCL log':>24}  {'collsim':>24}  same"]  # fmt: skip
    for r in rows:
        lines.append(f"  {r.pair:>20}  {cell(r.log):>24}  {cell(r.collsim):>24}  {'yes' if r.agree else 'NO'}")
    lines.append(f"# the same at {sum(r.agree for r in rows)} of {len(rows)} pairs")
    return "\n".join(lines)
