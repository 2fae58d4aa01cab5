"""Timelines of simulated collectives: lanes, bars, link usage and Chrome trace export.

A simulation that records (``record=True``) keeps one :class:`~collsim.engine.FlowRecord` per finished flow and per
pure delay: who did it (``owner``), what it was (``tag``), how many bytes, when it streamed and which resources it
crossed. This module turns such records into

* **lanes**: one per rank and NCCL channel (``rank 3 ch 5``), one per rank for Gloo (``rank 3``), one per extra
  participant such as CollNet's in-network reducer (:func:`owner_lane`);
* **bars**: an interval of one activity on one lane (:func:`flow_bars`): ``send`` (a transfer leaving its owner),
  ``receive`` (the same transfer arriving at another rank, where its path visibly ends at that rank's GPU),
  ``reduce``, ``copy`` (D2H/H2D staging and memcpy) and ``overhead`` (kernel launch, work enqueue);
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
>>> from collsim.engine import FlowRecord
>>> recs = [FlowRecord("(0, 'n0/gpu0')", "NVLink", 1e6, 0.0, 1e-4, 1e-6, ("n0/gpu0->n0/gpu1",))]
>>> [(b.lane.label, b.activity, b.peer) for b in flow_bars(recs, {"n0/gpu0": 0, "n0/gpu1": 1})]
[('rank 0 ch 0', 'send', 'n0/gpu1'), ('rank 1 ch 0', 'receive', 'n0/gpu0')]
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from collsim.engine import FlowRecord

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

#: Default size of the one collective a timeline, trace or report shows: 64 MiB (bytes).
REPRESENTATIVE_SIZE = 64 * 2**20

#: Activities a bar can show, in legend order.
ACTIVITIES: tuple[str, ...] = ("send", "receive", "reduce", "copy", "overhead")

_SYMMETRIC = re.compile(r" \(\+\d+ symmetric\)$")


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


def owner_lane(owner: str, rank_of: Mapping[str, int], devices: Sequence[str] = ()) -> Lane:
    """The lane of a record's owner.

    Owners are what the backends write: NCCL ``"(channel, 'n0/gpu3')"`` (a channel of a rank) or ``"n0/gpu3"``
    (all-to-all, every channel at once); Gloo ``"3"`` (a rank index); anything else (CollNet's in-network reducer
    ``"('sharp', 0, 'fabric/leaf0', 0)"``) gets a lane of its own.

    Parameters
    ----------
    owner : str
        ``FlowRecord.owner``.
    rank_of : mapping
        Rank device name to rank index (:func:`rank_map`).
    devices : sequence of str
        Rank index to device name (for Gloo's integer owners), optional.

    Examples
    --------
    >>> owner_lane("(2, 'n0/gpu1')", {"n0/gpu1": 1}).label, owner_lane("5", {}).label
    ('rank 1 ch 2', 'rank 5')
    """
    if owner in rank_of:
        return _lane(rank_of[owner], -1, owner)
    try:
        value = ast.literal_eval(owner)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        value = owner
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return _lane(value, -1, devices[value] if value < len(devices) else "")
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], int)
        and isinstance(value[1], str)
        and value[1] in rank_of
    ):
        return _lane(rank_of[value[1]], value[0], value[1])
    label = " ".join(str(v) for v in value) if isinstance(value, tuple) else str(value)
    return Lane(1, -1, -1, label or "(unnamed)")


def activity(tag: str, size: float = 1.0) -> str:
    """The activity a record's tag stands for: ``reduce``, ``copy``, ``overhead`` or ``send``.

    Tags are the backends' labels: ``"CPU reduction"``/``"GPU reduction (HBM)"`` reduce; ``"D2H copy (PCIe)"``,
    ``"H2D copy (PCIe)"``, ``"CPU copy"``, ``"GPU copy (HBM)"`` copy; ``"launch + base latency"``, ``"enqueue on
    worker thread"`` and any record of zero bytes are overheads; every other transfer is a send.

    >>> activity("CPU reduction"), activity("D2H copy (PCIe)"), activity("launch + base latency", 0.0)
    ('reduce', 'copy', 'overhead')
    >>> activity("NVLink (NVLS)", 1e6)
    'send'
    """
    low = tag.lower()
    if "reduction" in low:
        return "reduce"
    if "copy" in low:
        return "copy"
    if size <= 0 or "launch" in low or "enqueue" in low or "latency" in low:
        return "overhead"
    return "send"


@dataclass(frozen=True)
class Bar:
    """One activity on one lane, in seconds: ``start``/``end``; ``latency`` is the flow's arrival delay after
    ``end``; ``peer`` the device at the other end of a transfer (when its path shows it)."""

    lane: Lane
    activity: str
    tag: str
    start: float
    end: float
    nbytes: float
    latency: float
    peer: str | None
    resources: tuple[str, ...]


def _endpoint(resources: Sequence[str], rank_of: Mapping[str, int], own: str) -> str | None:
    """The rank device a path ends at, if its last device hop enters one other than ``own``."""
    for name in reversed(resources):
        base = strip_symmetric(name)
        if "->" not in base:
            continue
        dst = base.split("->", 1)[1]
        return dst if dst in rank_of and dst != own else None
    return None


def flow_bars(
    records: Iterable[FlowRecord],
    rank_of: Mapping[str, int],
    *,
    devices: Sequence[str] = (),
    receives: bool = True,
) -> list[Bar]:
    """Bars of every record with a positive duration, sorted by (start, lane).

    A transfer is a ``send`` bar on its owner's lane over its streaming interval. With ``receives``, a transfer
    whose path ends at another rank's device (NCCL's P2P, SHM and GPUDirect paths) also gets a ``receive`` bar on
    that rank's lane of the same channel, shifted by the flow's latency (cut-through: the first byte arrives
    ``latency`` after it left, the last ``latency`` after the stream ended). Gloo's TCP paths end in CPU time and
    host memory, so they show sends only.

    Parameters
    ----------
    records : iterable of FlowRecord
        ``Outcome.records`` of a recorded simulation.
    rank_of : mapping
        Rank device to rank index (:func:`rank_map`).
    devices : sequence of str
        Rank index to device name (Gloo owners are rank indices).
    receives : bool
        Add receive bars.
    """
    bars: list[Bar] = []
    lanes: dict[str, Lane] = {}
    for r in records:
        if not r.t_end > r.t_start:
            continue
        lane = lanes.get(r.owner)
        if lane is None:
            lane = lanes[r.owner] = owner_lane(r.owner, rank_of, devices)
        act = activity(r.tag, r.size)
        peer = _endpoint(r.resources, rank_of, lane.device) if act == "send" else None
        bars.append(Bar(lane, act, r.tag, r.t_start, r.t_end, r.size, r.latency, peer, r.resources))
        if receives and peer is not None:
            other = _lane(rank_of[peer], lane.channel, peer)
            bars.append(
                Bar(
                    other,
                    "receive",
                    r.tag,
                    r.t_start + r.latency,
                    r.t_end + r.latency,
                    r.size,
                    r.latency,
                    lane.device or lane.label,
                    r.resources,
                )
            )
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
    """Resource name to (kind, capacity in bytes/s) for every resource measured in bytes.

    Names follow the backends' resource catalogue: ``"src->dst"`` per link direction (its bandwidth),
    ``"<cpu> memory"`` per CPU socket (``memory_bandwidth``), ``"<gpu> HBM"`` per GPU (``hbm_bandwidth``).
    """
    caps: dict[str, tuple[str, float]] = {}
    for ln in topology.links():
        caps[f"{ln.src}->{ln.dst}"] = (ln.kind, float(ln.bandwidth))
    for cpu in topology.devices("cpu"):
        bw = cpu.spec.get("memory_bandwidth")
        if bw:
            caps[f"{cpu.name} memory"] = ("hostmem", float(bw))
    for gpu in topology.devices("gpu"):
        bw = gpu.spec.get("hbm_bandwidth")
        if bw:
            caps[f"{gpu.name} HBM"] = ("hbm", float(bw))
    return caps


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

    >>> r = FlowRecord("0", "x", 1e6, 0.0, 1e-3, 0.0, ("a->b",))
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
    (complete) events in microseconds: ``name`` = the backend's tag (``"NVLink"``, ``"TCP over loopback"``,
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
    """
    rank_of = rank_map(topology)
    devices = [d.name for d in topology.rank_devices()]
    caps = resource_capacities(topology)
    events: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    pid = 0
    for out in outcomes:
        if not out.records:
            raise ValueError(
                f"{out.backend} {out.collective}: the outcome has no flow records; simulate with record=True"
            )
        group = f"{out.backend} {out.collective}"
        bars = flow_bars(out.records, rank_of, devices=devices, receives=receives)
        sub = pack_lanes(bars)
        lanes: dict[Lane, None] = {}
        for b in bars:
            lanes.setdefault(b.lane, None)
        ranks_seen = sorted({lane.rank for lane in lanes if lane.group == 0})
        others = sorted({lane.label for lane in lanes if lane.group == 1})
        pids: dict[tuple[int, str], int] = {}
        base_sort = pid
        for r in range(out.nranks):  # every rank gets a process, even one with nothing recorded
            pid += 1
            pids[(r, "")] = pid
            dev = devices[r] if r < len(devices) else ""
            events.append(_meta("process_name", pid, 0, f"{group} rank {r}" + (f" ({dev})" if dev else "")))
            events.append(_meta("process_sort_index", pid, 0, base_sort + pid, key="sort_index"))
            events.append(_meta("process_labels", pid, 0, f"{out.algorithm}/{out.protocol}", key="labels"))
        for label in others:
            pid += 1
            pids[(-1, label)] = pid
            events.append(_meta("process_name", pid, 0, f"{group} {label}"))
            events.append(_meta("process_sort_index", pid, 0, base_sort + pid, key="sort_index"))
        tids: dict[tuple[Lane, int], tuple[int, int]] = {}
        used_tids: dict[int, int] = {}
        for b, s in sorted(zip(bars, sub, strict=True), key=lambda bs: (bs[0].lane, bs[1])):
            key = (b.lane, s)
            if key in tids:
                continue
            pkey = (b.lane.rank, "") if b.lane.group == 0 else (-1, b.lane.label)
            if pkey not in pids:  # a rank beyond nranks (should not happen): a process of its own
                pid += 1
                pids[pkey] = pid
                events.append(_meta("process_name", pid, 0, f"{group} {b.lane.label}"))
            p = pids[pkey]
            tid = used_tids.get(p, 0) + 1
            used_tids[p] = tid
            tids[key] = (p, tid)
            if b.lane.group == 1:
                tname = "activity" if s == 0 else f"activity ({s + 1})"
            elif b.lane.channel >= 0:
                tname = f"channel {b.lane.channel}" + ("" if s == 0 else f" ({s + 1})")
            else:
                tname = ("worker" if out.backend == "gloo" else "all channels") + ("" if s == 0 else f" ({s + 1})")
            events.append(_meta("thread_name", p, tid, tname))
            events.append(_meta("thread_sort_index", p, tid, tid, key="sort_index"))
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
            events.append(
                {
                    "name": b.tag,
                    "cat": b.activity,
                    "ph": "X",
                    "ts": ts,
                    "dur": dur,
                    "pid": p,
                    "tid": tid,
                    "args": args,
                }
            )
        pid += 1
        link_pid = pid
        events.append(_meta("process_name", link_pid, 0, f"{group} links (utilisation)"))
        events.append(_meta("process_sort_index", link_pid, 0, base_sort + pid, key="sort_index"))
        usage = link_usage(out.records, caps, total_s=out.time_s, bins=counter_bins)
        for u in sorted(usage, key=lambda u: u.name):
            prev: float | None = None
            for t0, value in zip(u.edges[:-1], u.utilisation, strict=True):
                v = round(float(value), 6)
                if v == prev:
                    continue
                prev = v
                events.append(
                    {
                        "name": u.name,
                        "cat": u.kind,
                        "ph": "C",
                        "ts": _us(float(t0)),
                        "pid": link_pid,
                        "tid": 0,
                        "args": {"utilisation": v},
                    }
                )
            if prev != 0.0:
                events.append(
                    {
                        "name": u.name,
                        "cat": u.kind,
                        "ph": "C",
                        "ts": _us(out.time_s),
                        "pid": link_pid,
                        "tid": 0,
                        "args": {"utilisation": 0.0},
                    }
                )
        summary.append(
            {
                "backend": out.backend,
                "collective": out.collective,
                "algorithm": out.algorithm,
                "protocol": out.protocol,
                "size_bytes": out.size_bytes,
                "nranks": out.nranks,
                "time_us": _us(out.time_s),
                "ranks_with_events": len(ranks_seen),
                "busy_links": len(usage),
                "simulated_classes": out.classes,
                "entities": out.entities,
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"title": title, "generator": "collsim", "time_unit": "us", "collectives": summary},
    }


def _meta(name: str, pid: int, tid: int, value: Any, *, key: str = "name") -> dict[str, Any]:
    return {"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": {key: value}}


def write_chrome_trace(path: str | Path, trace: Mapping[str, Any]) -> None:
    """Write a trace from :func:`chrome_trace` as compact JSON (strict: no NaN or Infinity)."""
    text = json.dumps(trace, separators=(",", ":"), allow_nan=False)
    Path(path).write_text(text, encoding="utf-8")
