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
A record gives a flow's streaming interval, size and rate history (``rates``: its max-min fair rate from each
change to the next). Bars span the streaming interval; link utilisation follows the rate history (a record without
one, made by hand, counts at its *average* rate ``size / (t_end - t_start)``). Each record carries the units the
flow consumes per data byte on each of its resources (``coefficients``: protocol wire overhead, NVLS's switch
reduction, the host-memory traffic of TCP), so utilisation is the engine's own consumption over the resource's
capacity (records without coefficients count data bytes), and a saturated resource reads 1.0.
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
from collsim.files import write_atomic
from collsim.results import REPRESENTATIVE_SIZE, representative_size

if TYPE_CHECKING:
    from collsim.backends import Outcome
    from collsim.scenario import Scenario
    from collsim.topology import Topology

__all__ = [
    "ACTIVITIES",
    "REPRESENTATIVE_SIZE",
    "TRACE_MAX_EVENTS",
    "Bar",
    "Lane",
    "LinkUse",
    "MergedBar",
    "MergedBars",
    "activity",
    "chrome_trace",
    "flow_bars",
    "link_usage",
    "merge_bars",
    "owner_lane",
    "pack_lanes",
    "rank_map",
    "representative_size",
    "resource_capacities",
    "strip_symmetric",
    "unsymmetric",
    "write_chrome_trace",
]


#: Activity events a Chrome trace holds by default (:func:`chrome_trace`'s ``max_events``): beyond it bars are
#: merged into time bins. About 200 bytes an event: a trace of 10-20 MB whatever the cluster and size.
TRACE_MAX_EVENTS = 50_000

#: Activities a bar can show, in legend order.
ACTIVITIES: tuple[str, ...] = ("send", "receive", "reduce", "copy", "overhead")

#: Relative excess over a resource's capacity that :func:`link_usage` reads as float rounding (and shows as 1.0).
_ROUNDING = 1e-9

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


@dataclass(slots=True)
class Bar:
    """One activity on one lane, in seconds: ``start``/``end``; ``latency`` is the flow's arrival delay after
    ``end``; ``peer`` the device at the other end of a transfer (when its path shows it); ``tag`` the record's.

    Read-only by convention: not frozen, because a trace of a large cluster builds millions of them and a frozen
    dataclass costs about seven times as much to construct."""

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
    received: dict[tuple[int, int], Lane] = {}
    ends: dict[tuple[tuple[Hashable, ...], str], str | None] = {}  # (route keys, own device) -> peer
    for r in records:
        if not r.t_end > r.t_start:
            continue
        lane = lanes.get(r.owner)
        if lane is None:
            lane = lanes[r.owner] = owner_lane(r.owner)
        act = r.tag.activity
        peer = None
        if act == "send":
            ek = (r.keys, lane.device)
            peer = ends[ek] if ek in ends else ends.setdefault(ek, _endpoint(r.keys, rank_of, lane.device))
        bars.append(Bar(lane, act, r.tag, r.t_start, r.t_end, r.size, r.latency, peer, r.resources))
        if receives and peer is not None:
            # on the receiving rank's lane of the flow's channel (a reducer's lane has none of its own)
            rc = (rank_of[peer], -1 if r.owner.channel is None else r.owner.channel)
            other = received.get(rc)
            if other is None:
                other = received[rc] = _lane(rc[0], rc[1], peer)
            start, end = r.t_start + r.latency, r.t_end + r.latency
            sender = lane.device or lane.label
            bars.append(Bar(other, "receive", r.tag, start, end, r.size, r.latency, sender, r.resources))
    bars.sort(key=lambda b: (b.start, _lane_key(b.lane), b.activity))
    return bars


def _lane_key(lane: Lane) -> tuple[int, int, int, str]:
    """A lane's sort order as a plain tuple (compares faster than the dataclass)."""
    return (lane.group, lane.rank, lane.channel, lane.label)


@dataclass(frozen=True)
class MergedBar:
    """Several bars of one lane and activity within one time bin, drawn as one (:func:`merge_bars`).

    Attributes
    ----------
    bar : Bar
        The merged bar: from the first start to the last end (seconds) of its pieces in the bin, their bytes, the
        tag with the most busy time in the bin, the peer when all its bars share one (else None), as latency the
        time from its end to its pieces' last arrival (a bar's end arrives its latency later); no resources.
    count : int
        How many bars have a piece in the bin.
    busy_s : float
        Their summed streaming time within the bin, seconds (more than ``end - start`` where bars overlap).
    tags : tuple of Tag
        Every tag among them, once each.
    """

    bar: Bar
    count: int
    busy_s: float
    tags: tuple[Tag, ...]


@dataclass(frozen=True)
class MergedBars:
    """What :func:`merge_bars` returns: the merged bars (sorted by start, lane, activity) and how they were cut."""

    bars: list[MergedBar]
    bins: int
    width_s: float
    merged_from: int

    @property
    def note(self) -> str:
        """One line for a title: how many bars became how many, and the bins."""
        return (
            f"{self.merged_from} bars merged into {len(self.bars)} (per row and activity, {self.bins} bins of "
            f"{self.width_s * 1e6:.3g} us)"
        )


def merge_bars(bars: Sequence[Bar], max_bars: int, total_s: float, *, max_bins: int = 4096) -> MergedBars:
    """Bars merged per lane and activity into equal time bins, as many bins as keep the result within ``max_bars``.

    The span ``[0, total_s]`` (seconds; a bar ending later belongs to the last bin) is cut into ``bins`` equal bins,
    the most (at most ``max_bins``) whose merged bars number at most ``max_bars``, and at least one: a lane and
    activity is never dropped, so with fewer than one bin's worth of room per (lane, activity) the result has one
    merged bar each, over ``max_bars``. Each bar is cut at the bin edges; the pieces of one (lane, activity) in one
    bin become one :class:`MergedBar` spanning their first start to their last end and carrying their bytes pro
    rata of time, so the bytes of every activity are kept and the whole collective stays covered.

    Parameters
    ----------
    bars : sequence of Bar
        From :func:`flow_bars` (positive durations).
    max_bars : int
        The most merged bars wanted (>= 1).
    total_s : float
        The span to bin, seconds (the collective's time, or the last end).
    max_bins : int
        The finest binning tried.

    Returns
    -------
    MergedBars

    Examples
    --------
    >>> lane = Lane(0, 0, 0, "rank 0 ch 0")
    >>> tag = Tag("NVLink", "send", "NVLink")
    >>> bars = [Bar(lane, "send", tag, i / 4, i / 4 + 0.125, 100.0, 0.0, None, ()) for i in range(8)]  # 0-2 s
    >>> merged = merge_bars(bars, 2, 2.0)
    >>> [(m.count, m.bar.start, m.bar.end, m.bar.nbytes) for m in merged.bars]
    [(4, 0.0, 0.875, 400.0), (4, 1.0, 1.875, 400.0)]
    >>> merged.note
    '8 bars merged into 2 (per row and activity, 2 bins of 1e+06 us)'
    """
    if max_bars < 1:
        raise ValueError(f"max_bars must be >= 1, got {max_bars!r}")
    n = len(bars)
    if n == 0:
        return MergedBars([], 1, float(total_s), 0)
    groups: dict[tuple[Lane, str], int] = {}
    tag_code: dict[Tag, int] = {}
    peer_code: dict[str, int] = {}
    g = np.fromiter((groups.setdefault((b.lane, b.activity), len(groups)) for b in bars), np.int64, n)
    t_of = np.fromiter((tag_code.setdefault(b.tag, len(tag_code)) for b in bars), np.int64, n)
    p_of = np.fromiter(
        (-1 if b.peer is None else peer_code.setdefault(b.peer, len(peer_code)) for b in bars), np.int64, n
    )
    starts = np.fromiter((b.start for b in bars), np.float64, n)
    ends = np.fromiter((b.end for b in bars), np.float64, n)
    nbytes = np.fromiter((b.nbytes for b in bars), np.float64, n)
    latency = np.fromiter((b.latency for b in bars), np.float64, n)
    span = max(float(total_s), float(ends.max()), 1e-300)

    bins = _finest_bins(g, len(groups), starts, ends, span, max_bars, max_bins)
    width = span / bins
    idx, k = _bin_pieces(starts, ends, span, bins)
    p0 = np.maximum(starts[idx], k * width)
    p1 = np.where(k == bins - 1, ends[idx], np.minimum(ends[idx], (k + 1) * width))
    key = g[idx] * bins + k
    order = np.argsort(key, kind="stable")
    key, idx, p0, p1 = key[order], idx[order], p0[order], p1[order]
    _, at = np.unique(key, return_index=True)
    busy = p1 - p0
    piece_bytes = nbytes[idx] * busy / np.maximum(ends[idx] - starts[idx], 1e-300)
    seg_start = np.minimum.reduceat(p0, at)
    seg_end = np.maximum.reduceat(p1, at)
    seg_busy = np.add.reduceat(busy, at)
    seg_bytes = np.add.reduceat(piece_bytes, at)
    # the last arrival: a piece holding its bar's end arrives its latency later; a piece cut at a bin edge at once
    seg_arrival = np.maximum.reduceat(np.where(p1 >= ends[idx], p1 + latency[idx], p1), at)
    count = np.diff(np.append(at, len(key)))
    shape = np.repeat(np.arange(len(at)), count)  # each piece's merged bar
    codes = t_of[idx]
    seg_pmin = np.minimum.reduceat(p_of[idx], at)
    seg_pmax = np.maximum.reduceat(p_of[idx], at)
    main_tag, pair_tag, tag_at = _tags_per_shape(shape, codes, busy, len(tag_code))
    lanes = list(groups)
    tags = list(tag_code)
    peers = list(peer_code)
    out: list[MergedBar] = []
    for j in range(len(at)):
        lane, act = lanes[int(g[idx[at[j]]])]
        seen = tuple(tags[int(c)] for c in pair_tag[tag_at[j] : tag_at[j + 1]])
        pmin = int(seg_pmin[j])
        peer = peers[pmin] if pmin >= 0 and pmin == int(seg_pmax[j]) else None
        bar = Bar(
            lane, act, tags[int(main_tag[j])], float(seg_start[j]), float(seg_end[j]),
            float(seg_bytes[j]), max(0.0, float(seg_arrival[j] - seg_end[j])), peer, (),
        )
        out.append(MergedBar(bar, int(count[j]), float(seg_busy[j]), seen))
    out.sort(key=lambda m: (m.bar.start, _lane_key(m.bar.lane), m.bar.activity))
    return MergedBars(out, bins, width, n)


def _bin_pieces(starts: np.ndarray, ends: np.ndarray, span: float, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Every interval (seconds) cut at the edges of ``bins`` equal bins over ``[0, span]``: per piece its interval's
    index and its bin (an interval past the span belongs to the last bin)."""
    width = span / bins
    first = np.clip(np.floor(starts / width).astype(np.int64), 0, bins - 1)
    last = np.clip(np.ceil(ends / width).astype(np.int64) - 1, first, bins - 1)
    count = last - first + 1
    idx = np.repeat(np.arange(len(starts)), count)
    k = first[idx] + (np.arange(len(idx)) - np.repeat(np.cumsum(count) - count, count))
    return idx, k


def _finest_bins(
    g: np.ndarray, ngroups: int, starts: np.ndarray, ends: np.ndarray, span: float, max_bars: int, max_bins: int
) -> int:
    """The most bins (1 to ``max_bins``) whose distinct (group ``g``, bin) pairs number at most ``max_bars``, by
    bisection (the count grows with the bins, bar for bar); 1 when even one bin has more."""

    def shapes(bins: int) -> int:
        idx, k = _bin_pieces(starts, ends, span, bins)
        if ngroups * bins <= 1 << 26:  # distinct (group, bin) pairs by marking a table: faster than hashing
            seen = np.zeros(ngroups * bins, dtype=bool)
            seen[g[idx] * bins + k] = True
            return int(np.count_nonzero(seen))
        return len(np.unique(g[idx] * bins + k))

    lo, hi = 1, max(1, max_bins)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if shapes(mid) <= max_bars:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _tags_per_shape(
    shape: np.ndarray, codes: np.ndarray, busy: np.ndarray, ntags: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per merged bar (``shape`` of each piece, sorted) the busiest of its pieces' tags (``codes``, weighted by
    ``busy`` seconds), and every tag it holds once: ``(main tag per bar, tag per (bar, tag) pair, each bar's first
    pair index and the end)``."""
    pair, inv = np.unique(shape * ntags + codes, return_inverse=True)
    weight = np.bincount(inv.ravel(), weights=busy)
    pair_shape, pair_tag = pair // ntags, pair % ntags
    best = np.lexsort((-weight, pair_shape))  # by merged bar, busiest tag first
    first_of = np.unique(pair_shape[best], return_index=True)[1]
    tag_at = np.append(np.unique(pair_shape, return_index=True)[1], len(pair))
    return pair_tag[best][first_of], pair_tag, tag_at


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


def _rate_segments(r: FlowRecord) -> list[tuple[float, float, float]]:
    """A flow's streaming interval as ``(start s, end s, data bytes/s)`` pieces: its rate history
    (:attr:`FlowRecord.rates`) where the engine kept one, else one piece at the average rate."""
    rates: Sequence[tuple[float, float]] = getattr(r, "rates", ()) or ()
    if not rates:
        return [(r.t_start, r.t_end, r.size / (r.t_end - r.t_start))]
    out: list[tuple[float, float, float]] = []
    for (t0, rate), (t1, _next) in zip(rates, [*rates[1:], (r.t_end, 0.0)], strict=True):
        t1 = min(t1, r.t_end)
        if t1 > t0 and rate > 0:
            out.append((t0, t1, rate))
    return out


def link_usage(
    records: Iterable[FlowRecord],
    capacities: Mapping[str, tuple[str, float]],
    *,
    total_s: float | None = None,
    bins: int = 200,
) -> list[LinkUse]:
    """Busy time and utilisation over time of every resource with a known capacity that a flow crossed.

    Each flow counts at its rate history (:attr:`FlowRecord.rates`: the engine's max-min fair rate, piece by
    piece), or at its average rate over its streaming interval where a record has none; the bytes per bin are exact
    for that step function. With the history, a resource is never above its capacity (the engine's invariant), so a
    saturated one reads 1.0 (to float rounding, which is clipped) and never more. At the average rate it could read
    more: a flow that shared a link and then ran alone spreads its later, faster bytes over its earlier time.
    Resources are returned by decreasing :attr:`LinkUse.load_share`, then busy time, then name.

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
    known: dict[tuple[str, ...], list[tuple[int, str]]] = {}  # a route's resources with a capacity (routes repeat)
    last = 0.0
    for r in records:
        if not r.resources or not r.t_end > r.t_start or r.size <= 0:
            continue
        last = max(last, r.t_end)
        coefs: Sequence[float] = getattr(r, "coefficients", ()) or ()
        segments = _rate_segments(r)
        on = known.get(r.resources)
        if on is None:
            bases = [(i, strip_symmetric(name)) for i, name in enumerate(r.resources)]
            on = known[r.resources] = [(i, base) for i, base in bases if base in capacities]
        for i, base in on:
            coef = float(coefs[i]) if i < len(coefs) else 1.0
            per.setdefault(base, []).extend((t0, t1, rate * coef) for t0, t1, rate in segments)
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
        # a saturated resource integrates to its capacity up to float rounding (~1e-14): read it as 1.0 exactly;
        # anything further above 1 is left visible (records without a rate history, drawn at their average rate)
        util = np.where((util > 1.0) & (util <= 1.0 + _ROUNDING), 1.0, util)
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
    max_events: int | None = TRACE_MAX_EVENTS,
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
    max_events : int or None
        At most about this many activity events in all, shared equally by the outcomes: an outcome with more
        bars than its share has each thread's bars of one activity merged into time bins (:func:`merge_bars`;
        such an event's ``args`` give ``merged`` bars, their ``busy_us`` and ``tags``, and its ``otherData``
        entry says ``"detail": "merged"`` with the bin width), so the file stays small whatever the cluster.
        None: every bar is an event (``"detail": "full"``).

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
    if max_events is not None and max_events < 1:
        raise ValueError(f"max_events must be >= 1 or None, got {max_events!r}")
    share = None if max_events is None else max(1, max_events // max(1, len(outcomes)))
    summary = [trace.add(out, counter_bins=counter_bins, receives=receives, max_bars=share) for out in outcomes]
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

    def add(self, out: Outcome, *, counter_bins: int, receives: bool, max_bars: int | None) -> dict[str, Any]:
        """Add one outcome's processes, threads, activities and link counters; return its ``otherData`` summary.
        More than ``max_bars`` bars are merged into time bins (:func:`merge_bars`)."""
        if not out.records:
            raise ValueError(
                f"{out.backend} {out.collective}: the outcome has no flow records; simulate with record=True"
            )
        group = f"{out.backend} {out.collective}"
        bars = flow_bars(out.records, self.rank_of, receives=receives)
        merged: MergedBars | None = None
        extra: list[dict[str, Any]] | None = None
        detail: dict[str, Any] = {"detail": "full", "bars": len(bars)}
        if max_bars is not None and len(bars) > max_bars:
            merged = merge_bars(bars, max_bars, out.time_s)
            bars = [m.bar for m in merged.bars]
            extra = [
                {"merged": m.count, "busy_us": _us(m.busy_s), "tags": [t.label for t in m.tags]} for m in merged.bars
            ]
            detail = {"detail": "merged", "bars": merged.merged_from, "events": len(bars),
                      "bin_us": _us(merged.width_s)}
        sub = pack_lanes(bars)
        lanes = dict.fromkeys(b.lane for b in bars)
        base_sort = self.pid
        pids = self._processes(out, group, sorted({lane.label for lane in lanes if lane.group == 1}), base_sort)
        tids = self._threads(bars, sub, pids, group, out.backend)
        self.events += _activity_events(bars, sub, tids, extra)
        link_pid = self._process(f"{group} links (utilisation)", base_sort)
        usage = link_usage(out.records, self.caps, total_s=out.time_s, bins=counter_bins)
        for u in sorted(usage, key=lambda u: u.name):
            self.events += _counter_events(u, link_pid, out.time_s)
        ranks_seen = len({lane.rank for lane in lanes if lane.group == 0})
        return {**_summary(out, ranks_seen, len(usage)), **detail}

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
    bars: Sequence[Bar],
    sub: Sequence[int],
    tids: Mapping[tuple[Lane, int], tuple[int, int]],
    extra: Sequence[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """A complete (``"X"``) event per bar, in microseconds, with ``extra[i]`` added to bar ``i``'s args (merged
    bars); bars shorter than the trace's resolution are left out."""
    events: list[dict[str, Any]] = []
    for i, (b, s) in enumerate(zip(bars, sub, strict=True)):
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
        if extra is not None:
            args.update(extra[i])
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
    """Write a trace from :func:`chrome_trace` as compact JSON (strict: no NaN or Infinity), whole or not at all
    (:func:`collsim.files.write_atomic`)."""
    text = json.dumps(trace, separators=(",", ":"), allow_nan=False)
    write_atomic(path, text)
