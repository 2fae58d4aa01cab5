"""Timelines of simulated collectives: lanes, bars, link usage and Chrome trace export.

A simulation that records (``record=True``) keeps one :class:`~collsim.engine.FlowRecord` per finished flow and per
pure delay, typed: who did it (``owner``, an :class:`~collsim.engine.Owner`: rank, channel, role, device), what it
was (``tag``, a declared :class:`~collsim.engine.Tag`: label, activity, breakdown category), how many bytes, when it
streamed and which resources it crossed (names and keys). This module reads those fields, never parses display
strings, and turns the records into

* **lanes**: one per rank and NCCL channel (``rank 3 ch 5``), one per rank for Gloo (``rank 3``), one per extra
  participant such as CollNet's in-network reducer (:func:`owner_lane`);
* **bars**: an interval of one activity on one lane (:func:`flow_bars`): the tag's activity (``send``, ``reduce``,
  ``copy`` (D2H/H2D staging and memcpy), ``overhead`` (kernel launch, work enqueue)), and ``receive`` (a transfer
  arriving at another rank, where its path's last link enters that rank's device);
* **link usage** (:func:`link_usage`): per resource (a link direction, a socket's memory, a GPU's HBM) its busy time
  and its utilisation over time;
* a **Chrome trace** (:func:`chrome_trace`): the JSON object format of the Trace Event Format that Perfetto
  (https://ui.perfetto.dev) and ``chrome://tracing`` open.

What the records do and do not say
-----------------------------------
A record gives a flow's streaming interval and size, not its rate history, so a flow is drawn at its *average* rate
``size / (t_end - t_start)``. Each record carries the units the flow consumes per data byte on each of its resources
(``coefficients``: protocol wire overhead, NVLS's switch reduction, the host-memory traffic of TCP), so utilisation
is the engine's own consumption over the resource's capacity (records without coefficients count data bytes).
CPU-core pools are not shown: their capacity is core-seconds per second, not bytes.

Symmetry: with ``engine.symmetry`` on, only representative ranks and channels are simulated, and resource names carry
a ``(+N symmetric)`` suffix. Simulate with ``engine.symmetry=false`` to see every rank (what ``collsim run --trace``
and ``collsim report`` do).

Examples
--------
>>> from collsim.engine import FlowRecord, Owner, Tag
>>> me, nvlink = Owner(0, 0, "rank", "n0/gpu0"), Tag("NVLink", "send", "transfer: NVLink")
>>> link = ("link", "n0/gpu0", "n0/gpu1")
>>> recs = [FlowRecord(me, nvlink, 1e6, 0.0, 1e-4, 1e-6, ("n0/gpu0->n0/gpu1",), (1.0,), (link,))]
>>> [(b.lane.label, b.activity, b.peer) for b in flow_bars(recs, {"n0/gpu0": 0, "n0/gpu1": 1})]
[('rank 0 ch 0', 'send', 'n0/gpu1'), ('rank 1 ch 0', 'receive', 'n0/gpu0')]
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from collsim.backends.common import ResourceCatalog, link_end
from collsim.engine import FlowRecord, Owner, Tag
from collsim.results import REPRESENTATIVE_SIZE, representative_size

if TYPE_CHECKING:
    from collsim.backends import Outcome
    from collsim.scenario import Scenario
    from collsim.topology import Topology

__all__ = [
    "ACTIVITIES",
    "REPRESENTATIVE_SIZE",
    "Bar",
    "Lane",
    "LinkUse",
    "activity",
    "chrome_trace",
    "flow_bars",
    "link_usage",
    "owner_lane",
    "pack_lanes",
    "rank_map",
    "representative_size",
    "resource_capacities",
    "strip_symmetric",
    "unsymmetric",
    "write_chrome_trace",
]


#: Activities a bar can show, in legend order.
ACTIVITIES: tuple[str, ...] = ("send", "receive", "reduce", "copy", "overhead")

_SYMMETRIC = re.compile(r" \(\+\d+ symmetric\)$")


def unsymmetric(scenario: Scenario) -> Scenario:
    """The same scenario with ``engine.symmetry`` off, so that every rank and channel is simulated (timelines,
    traces); the scenario's source file is kept for error messages."""
    engine = scenario.engine.model_copy(update={"symmetry": False})
    return scenario.model_copy(update={"engine": engine})


def strip_symmetric(name: str) -> str:
    """A resource name without the ``" (+N symmetric)"`` suffix the symmetry quotient adds.

    >>> strip_symmetric("n0/gpu0->n0/nvswitch (+7 symmetric)")
    'n0/gpu0->n0/nvswitch'
    """
    return _SYMMETRIC.sub("", name)


@dataclass(frozen=True, order=True)
class Lane:
    """One row of a timeline: a rank and channel, a rank, or another participant (``rank == -1``).

    Lanes sort ranks first (by rank, then channel), then the other participants by label.

    Attributes
    ----------
    group : int
        0 for rank lanes, 1 for other participants.
    rank, channel : int
        Rank index and NCCL channel; -1 where none (Gloo has no channels; all-to-all uses every channel at once).
    label : str
        ``"rank 3 ch 5"``, ``"rank 3"`` or the participant's name.
    device : str
        The rank's device (``"n0/gpu3"``), or ``""``.
    """

    group: int
    rank: int
    channel: int
    label: str
    device: str = field(default="", compare=False)


def rank_map(topology: Topology) -> dict[str, int]:
    """Rank device name to rank index, in the order both backends rank devices (GPUs node-major).

    For a CPU-only topology several ranks share a socket device; the first rank on it is returned.
    """
    out: dict[str, int] = {}
    for i, dev in enumerate(topology.rank_devices()):
        out.setdefault(dev.name, i)
    return out


def _lane(rank: int, channel: int, device: str) -> Lane:
    label = f"rank {rank}" if channel < 0 else f"rank {rank} ch {channel}"
    return Lane(0, rank, channel, label, device)


def owner_lane(owner: Owner) -> Lane:
    """The lane of a record's owner: its rank and channel (``channel`` -1 where it has none), or a lane of its own
    for a participant that is not a rank (CollNet's in-network reducer), labelled :attr:`Owner.label`.

    Examples
    --------
    >>> owner_lane(Owner(1, 2, "rank", "n0/gpu1")), owner_lane(Owner(5, None, "rank", "n0/cpu0")).label
    (Lane(group=0, rank=1, channel=2, label='rank 1 ch 2', device='n0/gpu1'), 'rank 5')
    >>> owner_lane(Owner(None, 0, "in-network reducer", "fabric/leaf0", index=0)).label
    'in-network reducer 0 ch 0 (fabric/leaf0)'
    """
    if owner.rank is not None:
        return _lane(owner.rank, -1 if owner.channel is None else owner.channel, owner.device)
    return Lane(1, -1, -1, owner.label)


def activity(tag: Tag) -> str:
    """The activity a record's tag stands for (its declared :attr:`Tag.activity`): ``send``, ``reduce``, ``copy``
    or ``overhead``.

    >>> activity(Tag("CPU reduction", "reduce", "CPU reduction"))
    'reduce'
    """
    return tag.activity


@dataclass(frozen=True)
class Bar:
    """One activity on one lane, in seconds: ``start``/``end``; ``latency`` is the flow's arrival delay after
    ``end``; ``peer`` the device at the other end of a transfer (when its path shows it); ``tag`` the record's."""

    lane: Lane
    activity: str
    tag: Tag
    start: float
    end: float
    nbytes: float
    latency: float
    peer: str | None
    resources: tuple[str, ...]


def _endpoint(keys: Sequence[Hashable], rank_of: Mapping[str, int], own: str) -> str | None:
    """The rank device a path ends at: the device its last link enters, if that is a rank device other than
    ``own`` (the record's resource keys, :func:`collsim.backends.common.link_end`)."""
    for key in reversed(keys):
        dst = link_end(key)
        if dst is not None:
            return dst if dst in rank_of and dst != own else None
    return None


def flow_bars(
    records: Iterable[FlowRecord],
    rank_of: Mapping[str, int],
    *,
    receives: bool = True,
) -> list[Bar]:
    """Bars of every record with a positive duration, sorted by (start, lane).

    A record is a bar of its tag's activity on its owner's lane over its streaming interval. With ``receives``, a
    send whose path ends at another rank's device (NCCL's P2P, SHM and GPUDirect paths, CollNet's reducer sending
    the sum down) also gets a ``receive`` bar on that rank's lane of the flow's channel, shifted by the flow's
    latency (cut-through: the first byte arrives ``latency`` after it left, the last ``latency`` after the stream
    ended). Gloo's TCP paths end in CPU time and host memory, so they show sends only.

    Parameters
    ----------
    records : iterable of FlowRecord
        ``Outcome.records`` of a recorded simulation.
    rank_of : mapping
        Rank device to rank index (:func:`rank_map`), for receivers.
    receives : bool
        Add receive bars.

    Returns
    -------
    list of Bar
        Sorted by start time (seconds), then lane, then activity.
    """
    bars: list[Bar] = []
    lanes: dict[Owner, Lane] = {}
    for r in records:
        if not r.t_end > r.t_start:
            continue
        lane = lanes.get(r.owner)
        if lane is None:
            lane = lanes[r.owner] = owner_lane(r.owner)
        act = r.tag.activity
        peer = _endpoint(r.keys, rank_of, lane.device) if act == "send" else None
        bars.append(Bar(lane, act, r.tag, r.t_start, r.t_end, r.size, r.latency, peer, r.resources))
        if receives and peer is not None:
            # on the receiving rank's lane of the flow's channel (a reducer's lane has none of its own)
            other = _lane(rank_of[peer], -1 if r.owner.channel is None else r.owner.channel, peer)
            start, end = r.t_start + r.latency, r.t_end + r.latency
            sender = lane.device or lane.label
            bars.append(Bar(other, "receive", r.tag, start, end, r.size, r.latency, sender, r.resources))
    bars.sort(key=lambda b: (b.start, b.lane, b.activity))
    return bars


# ---------------------------------------------------------------------------------------------- link usage


@dataclass(frozen=True)
class LinkUse:
    """How one resource was used during a collective.

    Attributes
    ----------
    name : str
        Resource name (``"n0/gpu0->n0/nvswitch"``, ``"n0/cpu0 memory"``, ``"n0/gpu0 HBM"``).
    kind : str
        ``nvlink``, ``pcie``, ``upi``, ``ib``, ``roce``, ``eth``, ``hostmem`` or ``hbm``.
    capacity : float
        Bytes/s.
    nbytes : float
        Data bytes that crossed it (times the record's coefficient where known).
    busy_s : float
        Seconds during which at least one flow streamed over it.
    total_s : float
        The interval considered (the collective's time).
    edges : numpy.ndarray
        Bin edges in seconds, ``bins + 1`` values from 0 to ``total_s``.
    utilisation : numpy.ndarray
        Per bin, bytes moved over (bin width x capacity): 1 = the whole bandwidth for the whole bin.
    """

    name: str
    kind: str
    capacity: float
    nbytes: float
    busy_s: float
    total_s: float
    edges: np.ndarray
    utilisation: np.ndarray

    @property
    def busy_share(self) -> float:
        """Fraction of the collective's time with at least one flow on the resource."""
        return self.busy_s / self.total_s if self.total_s > 0 else 0.0

    @property
    def load_share(self) -> float:
        """Time the bytes would take at full bandwidth, as a fraction of the collective's time (mean utilisation)."""
        return self.nbytes / self.capacity / self.total_s if self.total_s > 0 else 0.0


def resource_capacities(topology: Topology) -> dict[str, tuple[str, float]]:
    """Resource name to (kind, capacity in bytes/s) for every resource measured in bytes: the backends' own resource
    catalogue (:class:`collsim.backends.common.ResourceCatalog`, names by
    :func:`collsim.backends.common.resource_name`): every link direction, every CPU socket's memory, every GPU's
    HBM; CPU-core pools (core-seconds per second) are left out."""
    return ResourceCatalog(topology).byte_capacities()


def link_usage(
    records: Iterable[FlowRecord],
    capacities: Mapping[str, tuple[str, float]],
    *,
    total_s: float | None = None,
    bins: int = 200,
) -> list[LinkUse]:
    """Busy time and utilisation over time of every resource with a known capacity that a flow crossed.

    Each flow counts at its average rate over its streaming interval; the bytes per bin are exact for that step
    function. Resources are returned by decreasing :attr:`LinkUse.load_share`, then busy time, then name.

    Parameters
    ----------
    records : iterable of FlowRecord
        A recorded simulation's flows.
    capacities : mapping
        Resource name to (kind, bytes/s), see :func:`resource_capacities`; names with a ``(+N symmetric)`` suffix
        are looked up without it.
    total_s : float, optional
        The collective's time in seconds (default: the last flow's end).
    bins : int
        Time bins for :attr:`LinkUse.utilisation`, >= 1.

    Examples
    --------
    One 1 GB/s link, a 1 MB flow over the first half of 2 ms:

    >>> r = FlowRecord(Owner(0, None, "rank", "g0"), Tag("x", "send", ""), 1e6, 0.0, 1e-3, 0.0, ("a->b",))
    >>> u = link_usage([r], {"a->b": ("pcie", 1e9)}, total_s=2e-3, bins=2)[0]
    >>> u.busy_share, u.load_share, [float(x) for x in u.utilisation]
    (0.5, 0.5, [1.0, 0.0])
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins!r}")
    per: dict[str, list[tuple[float, float, float]]] = {}
    last = 0.0
    for r in records:
        if not r.resources or not r.t_end > r.t_start or r.size <= 0:
            continue
        last = max(last, r.t_end)
        coefs: Sequence[float] = getattr(r, "coefficients", ()) or ()
        rate = r.size / (r.t_end - r.t_start)  # data bytes/s, the flow's average
        for i, name in enumerate(r.resources):
            base = strip_symmetric(name)
            if base not in capacities:
                continue
            coef = float(coefs[i]) if i < len(coefs) else 1.0
            per.setdefault(base, []).append((r.t_start, r.t_end, rate * coef))
    total = float(total_s) if total_s is not None else last
    edges = np.linspace(0.0, total, bins + 1)
    out: list[LinkUse] = []
    for name, flows in per.items():
        kind, cap = capacities[name]
        arr = np.asarray(flows, dtype=float)
        times = np.concatenate([arr[:, 0], arr[:, 1]])
        rate_step = np.concatenate([arr[:, 2], -arr[:, 2]])
        count_step = np.concatenate([np.ones(len(arr)), -np.ones(len(arr))])
        order = np.argsort(times, kind="stable")
        times, rate_step, count_step = times[order], rate_step[order], count_step[order]
        level = np.cumsum(rate_step)  # bytes/s after each breakpoint
        active = np.cumsum(count_step)
        dt = np.diff(times)
        integral = np.concatenate([[0.0], np.cumsum(level[:-1] * dt)])  # bytes moved by each breakpoint
        busy = float(np.sum(dt[active[:-1] > 0.5]))
        at_edges = np.interp(edges, times, integral, left=0.0, right=float(integral[-1]))
        width = np.diff(edges)
        with np.errstate(divide="ignore", invalid="ignore"):
            util = np.where(width > 0, np.diff(at_edges) / (width * cap), 0.0)
        nbytes = float(np.sum(arr[:, 2] * (arr[:, 1] - arr[:, 0])))
        out.append(LinkUse(name, kind, cap, nbytes, busy, total, edges, util))
    out.sort(key=lambda u: (-u.load_share, -u.busy_s, u.name))
    return out


# ---------------------------------------------------------------------------------------------- Chrome trace


def pack_lanes(bars: Sequence[Bar]) -> list[int]:
    """Sub-lane of every bar so that bars on one (lane, sub-lane) never overlap (greedy interval colouring).

    ``bars`` must be sorted by start (as :func:`flow_bars` returns them). Chrome's complete events on one thread
    must nest; overlapping ones (NCCL's reduce-scatter and all-gather halves of NVLS, a tree's up and down, a
    send and a receive) go to a second thread of the lane.
    """
    ends: dict[Lane, list[float]] = {}
    out: list[int] = []
    for b in bars:
        free = ends.setdefault(b.lane, [])
        for i, end in enumerate(free):
            if end <= b.start:
                free[i] = b.end
                out.append(i)
                break
        else:
            free.append(b.end)
            out.append(len(free) - 1)
    return out


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 6)  # seconds to microseconds (trace time unit), to the picosecond


def chrome_trace(
    outcomes: Sequence[Outcome],
    topology: Topology,
    *,
    title: str = "",
    counter_bins: int = 200,
    receives: bool = True,
) -> dict[str, Any]:
    """A Chrome trace (Trace Event Format, JSON object form) of recorded collectives.

    Every outcome (one collective of one backend, recorded, ideally with ``engine.symmetry`` off) becomes a group of
    processes: one per rank (``pid``), named ``"<backend> <collective> rank <r> (<device>)"``, with one thread per
    NCCL channel (``"channel 3"``; Gloo: ``"worker"``) and a second thread of a channel where its activities
    overlap; one more process per participant that is not a rank; and one process ``"<backend> <collective> links"``
    with a counter track per busy link (``"C"`` events, ``args.utilisation`` = data bytes per second over the
    link's bandwidth, per bin of ``total / counter_bins``, repeated values dropped). Activities are ``"X"``
    (complete) events in microseconds: ``name`` = the tag's label (``"NVLink"``, ``"TCP over loopback"``,
    ``"CPU reduction"``), ``cat`` = send/receive/reduce/copy/overhead, ``args`` = bytes, latency, peer, resources.
    Every outcome's collective starts at ``ts = 0``; its duration is ``Outcome.time_s``, written in the ``"M"``
    metadata of its processes and in ``otherData``.

    Parameters
    ----------
    outcomes : sequence of Outcome
        Simulated with ``record=True``.
    topology : Topology
        The topology they ran on (rank devices, link capacities).
    title : str
        Stored in ``otherData.title``.
    counter_bins : int
        Time bins of the link counters.
    receives : bool
        Add receive events (see :func:`flow_bars`).

    Returns
    -------
    dict
        ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``; ``json.dumps`` writes it.

    Raises
    ------
    ValueError
        For an outcome without flow records.
    """
    trace = _Trace(rank_map(topology), [d.name for d in topology.rank_devices()], resource_capacities(topology))
    summary = [trace.add(out, counter_bins=counter_bins, receives=receives) for out in outcomes]
    return {
        "traceEvents": trace.events,
        "displayTimeUnit": "ns",
        "otherData": {"title": title, "generator": "collsim", "time_unit": "us", "collectives": summary},
    }


@dataclass
class _Trace:
    """A Chrome trace being built: its events and the last process id handed out.

    ``rank_of`` maps rank devices to rank indices, ``devices`` rank indices to devices, ``caps`` resource names to
    (kind, bytes/s).
    """

    rank_of: Mapping[str, int]
    devices: Sequence[str]
    caps: Mapping[str, tuple[str, float]]
    events: list[dict[str, Any]] = field(default_factory=list)
    pid: int = 0

    def add(self, out: Outcome, *, counter_bins: int, receives: bool) -> dict[str, Any]:
        """Add one outcome's processes, threads, activities and link counters; return its ``otherData`` summary."""
        if not out.records:
            raise ValueError(
                f"{out.backend} {out.collective}: the outcome has no flow records; simulate with record=True"
            )
        group = f"{out.backend} {out.collective}"
        bars = flow_bars(out.records, self.rank_of, receives=receives)
        sub = pack_lanes(bars)
        lanes = dict.fromkeys(b.lane for b in bars)
        base_sort = self.pid
        pids = self._processes(out, group, sorted({lane.label for lane in lanes if lane.group == 1}), base_sort)
        tids = self._threads(bars, sub, pids, group, out.backend)
        self.events += _activity_events(bars, sub, tids)
        link_pid = self._process(f"{group} links (utilisation)", base_sort)
        usage = link_usage(out.records, self.caps, total_s=out.time_s, bins=counter_bins)
        for u in sorted(usage, key=lambda u: u.name):
            self.events += _counter_events(u, link_pid, out.time_s)
        ranks_seen = len({lane.rank for lane in lanes if lane.group == 0})
        return _summary(out, ranks_seen, len(usage))

    def _process(self, name: str, base_sort: int | None) -> int:
        """A new process called ``name`` (sorted after the outcome's first, ``base_sort``; None: unsorted)."""
        self.pid += 1
        self.events.append(_meta("process_name", self.pid, 0, name))
        if base_sort is not None:
            self.events.append(_meta("process_sort_index", self.pid, 0, base_sort + self.pid, key="sort_index"))
        return self.pid

    def _processes(self, out: Outcome, group: str, others: Sequence[str], base_sort: int) -> dict[tuple[int, str], int]:
        """A process per rank (even one with nothing recorded) and per other participant; keys ``(rank, "")`` and
        ``(-1, label)``."""
        pids: dict[tuple[int, str], int] = {}
        for r in range(out.nranks):
            dev = self.devices[r] if r < len(self.devices) else ""
            pids[(r, "")] = self._process(f"{group} rank {r}" + (f" ({dev})" if dev else ""), base_sort)
            self.events.append(_meta("process_labels", self.pid, 0, f"{out.algorithm}/{out.protocol}", key="labels"))
        for label in others:
            pids[(-1, label)] = self._process(f"{group} {label}", base_sort)
        return pids

    def _threads(
        self, bars: Sequence[Bar], sub: Sequence[int], pids: dict[tuple[int, str], int], group: str, backend: str
    ) -> dict[tuple[Lane, int], tuple[int, int]]:
        """A thread per (lane, sub-lane) in lane order; returns its (pid, tid)."""
        tids: dict[tuple[Lane, int], tuple[int, int]] = {}
        used: dict[int, int] = {}
        for lane, s in sorted({(b.lane, s) for b, s in zip(bars, sub, strict=True)}):
            pkey = (lane.rank, "") if lane.group == 0 else (-1, lane.label)
            if pkey not in pids:  # a rank beyond nranks (should not happen): a process of its own
                pids[pkey] = self._process(f"{group} {lane.label}", None)
            p = pids[pkey]
            tid = used[p] = used.get(p, 0) + 1
            tids[(lane, s)] = (p, tid)
            self.events.append(_meta("thread_name", p, tid, _thread_name(lane, s, backend)))
            self.events.append(_meta("thread_sort_index", p, tid, tid, key="sort_index"))
        return tids


def _thread_name(lane: Lane, sub: int, backend: str) -> str:
    """``"channel 3"``, ``"worker"`` (Gloo), ``"all channels"`` (NCCL all-to-all) or ``"activity"`` (another
    participant), with `` (2)`` on a lane's second thread."""
    if lane.group == 1:
        base = "activity"
    elif lane.channel >= 0:
        base = f"channel {lane.channel}"
    else:
        base = "worker" if backend == "gloo" else "all channels"
    return base + ("" if sub == 0 else f" ({sub + 1})")


def _activity_events(
    bars: Sequence[Bar], sub: Sequence[int], tids: Mapping[tuple[Lane, int], tuple[int, int]]
) -> list[dict[str, Any]]:
    """A complete (``"X"``) event per bar, in microseconds; bars shorter than the trace's resolution are left out."""
    events: list[dict[str, Any]] = []
    for b, s in zip(bars, sub, strict=True):
        p, tid = tids[(b.lane, s)]
        ts = _us(b.start)
        dur = round(_us(b.end) - ts, 6)  # from rounded ends, so that touching events share a boundary
        if dur <= 0:  # shorter than the trace's picosecond resolution
            continue
        args: dict[str, Any] = {"bytes": b.nbytes}
        if b.latency > 0:
            args["latency_us"] = _us(b.latency)
        if b.peer:
            args["to" if b.activity == "send" else "from"] = b.peer
        if b.resources:
            args["resources"] = [strip_symmetric(x) for x in b.resources]
        event = {"name": b.tag.label, "cat": b.activity, "ph": "X", "ts": ts, "dur": dur, "pid": p, "tid": tid}
        events.append({**event, "args": args})
    return events


def _counter_events(u: LinkUse, pid: int, time_s: float) -> list[dict[str, Any]]:
    """Counter (``"C"``) events of one link's utilisation per bin, repeated values dropped, back to 0 at
    ``time_s`` (seconds)."""

    def counter(t_s: float, value: float) -> dict[str, Any]:
        args = {"utilisation": value}
        return {"name": u.name, "cat": u.kind, "ph": "C", "ts": _us(t_s), "pid": pid, "tid": 0, "args": args}

    events: list[dict[str, Any]] = []
    prev: float | None = None
    for t0, value in zip(u.edges[:-1], u.utilisation, strict=True):
        v = round(float(value), 6)
        if v != prev:
            events.append(counter(float(t0), v))
            prev = v
    if prev != 0.0:
        events.append(counter(time_s, 0.0))
    return events


def _summary(out: Outcome, ranks_seen: int, busy_links: int) -> dict[str, Any]:
    """One collective's entry of ``otherData.collectives``."""
    return {
        "backend": out.backend,
        "collective": out.collective,
        "algorithm": out.algorithm,
        "protocol": out.protocol,
        "size_bytes": out.size_bytes,
        "nranks": out.nranks,
        "time_us": _us(out.time_s),
        "ranks_with_events": ranks_seen,
        "busy_links": busy_links,
        "simulated_classes": out.classes,
        "entities": out.entities,
    }


def _meta(name: str, pid: int, tid: int, value: Any, *, key: str = "name") -> dict[str, Any]:
    return {"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": {key: value}}


def write_chrome_trace(path: str | Path, trace: Mapping[str, Any]) -> None:
    """Write a trace from :func:`chrome_trace` as compact JSON (strict: no NaN or Infinity)."""
    text = json.dumps(trace, separators=(",", ":"), allow_nan=False)
    Path(path).write_text(text, encoding="utf-8")
