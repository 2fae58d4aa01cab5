"""Flows of bytes over shared resources, with max-min fair rates (a fluid model in SimPy time).

A :class:`Flow` moves ``size`` units (bytes, usually) and, while it streams at rate ``x`` (units/s), consumes
``coef * x`` of every resource it uses. Every resource has a capacity (units/s: bytes/s for a link direction,
core-seconds/s for a pool of CPU cores). All streaming flows share every resource max-min fairly (progressive
filling, SimGrid's model); a flow may also be capped by its own ``max_rate`` (e.g. what one NCCL channel or one CPU
thread can push). Rates are recomputed once per timestamp, after every event of that timestamp has run, so flows
that start and end together cost one solve.

Latency is separate from bandwidth: :meth:`FluidNetwork.transfer` streams first and reports arrival ``latency``
seconds after the last byte left, so a sender that pipelines messages pays the latency once per dependency chain,
not once per message. The events the network triggers for one time (flows' ends, arrivals, a sender's release after
its hold) wait behind one SimPy event and run in the order they were triggered. Messages of a callback-driven sender
that start together on the same resources with the same size and timing (the channels of one GPU in lockstep) join
one flow that stands for all of them (:attr:`Flow.n`): they would get the same rate at every solve and finish
together, so the solver counts each and carries one.

Every flow and delay names who does it (an :class:`Owner`: a rank, its NCCL channel, or another participant) and
what it is (a :class:`Tag`: a display label, an activity and a breakdown category). A recording network keeps both,
typed, in its :class:`FlowRecord` objects, with the names and keys of the resources crossed: breakdowns, traces and
figures read these fields and never parse display strings.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import simpy
from simpy.events import Event

from collsim.engine.budget import Meter
from collsim.engine.filling import EXACT_SCALE as _EXACT_SCALE
from collsim.engine.filling import SAT_TOL as _SAT_TOL
from collsim.engine.filling import SignatureArrays
from collsim.engine.filling import units as _units
from collsim.vocab import TAG_ACTIVITIES

__all__ = [
    "LATE",
    "NO_OWNER",
    "UNTAGGED",
    "Flow",
    "FlowRecord",
    "FluidNetwork",
    "Owner",
    "Resource",
    "Route",
    "SendThen",
    "Tag",
]

#: What :meth:`FluidNetwork.send_then` calls when a flow arrives or its sender is free: ``callback(argument)``.
Callback = Callable[[Any], None]
#: A callback-driven schedule's sender (:meth:`FluidNetwork.sender_then`): ``send(nbytes, on_arrived, arg,
#: on_streamed, arg)`` calls ``on_arrived(arg)`` when the bytes have arrived and ``on_streamed(arg)`` when the
#: sender is free (each when given).
SendThen = Callable[[float, Callback | None, Any, Callback | None, Any], None]

#: SimPy priority of the rate solve: after every NORMAL (1) event of the same timestamp.
LATE = 2

#: Components of at least this many signatures are filled on arrays (:mod:`collsim.engine.filling`), smaller ones in
#: Python (cheaper below it; measured, docs/performance.md). Both give the same rates.
ARRAY_FROM = 64

_INF = math.inf
#: :attr:`Flow.finish` before the flow's first rating, and once it has finished (no finish time is negative).
_UNRATED = -1.0
_FINISHED = -2.0
#: The sort key of flows due at one time: the order they started.
_SEQ = operator.attrgetter("seq")


@dataclass(frozen=True, slots=True)
class Owner:
    """Who does a flow: a rank (on one NCCL channel, or on none), or a participant that is not a rank.

    Attributes
    ----------
    rank : int or None
        The rank's index; None for a participant that is not a rank (CollNet's in-network reducer).
    channel : int or None
        The NCCL channel; None where not applicable (Gloo; NCCL's all-to-all, which uses every channel at once).
    role : str
        What the participant is: ``"rank"``, ``"in-network reducer"`` ...
    device : str
        The device it runs on (``"n0/gpu3"``, ``"fabric/leaf0"``), for labels; ``""`` when unknown.
    index : int or None
        Which of several participants of one role, channel and device (CollNet Direct: one reducer per GPU index).

    Examples
    --------
    >>> Owner(3, 5, "rank", "n0/gpu3").label, Owner(3, None, "rank", "n0/gpu3").label
    ('rank 3 ch 5', 'rank 3')
    >>> Owner(None, 0, "in-network reducer", "fabric/leaf0", index=1).label
    'in-network reducer 1 ch 0 (fabric/leaf0)'
    """

    rank: int | None
    channel: int | None
    role: str
    device: str
    index: int | None = None

    @property
    def label(self) -> str:
        """``"rank 3 ch 5"``, ``"rank 3"``, or the role, index, channel and device of another participant."""
        if self.rank is not None:
            head = f"rank {self.rank}"
        else:
            head = " ".join(x for x in (self.role, "" if self.index is None else str(self.index)) if x)
        parts = [head or "(unnamed)"]
        if self.channel is not None:
            parts.append(f"ch {self.channel}")
        if self.rank is None and self.device:
            parts.append(f"({self.device})")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Tag:
    """What a flow is: its display label, the activity it stands for and the breakdown category it is drawn in.

    Backends declare their tags once (:mod:`collsim.backends.tags` collects them); labels are unique across
    backends and are the keys of a record's time breakdown.

    Attributes
    ----------
    label : str
        Display text, e.g. ``"NVLink"``, ``"TCP over loopback"``, ``"launch + base latency"``.
    activity : str
        One of :data:`collsim.vocab.TAG_ACTIVITIES`: ``send``, ``reduce``, ``copy``, ``overhead`` (a flow or a
        delay), or ``wait`` (only the breakdown's idle time; never on a flow).
    category : str
        The breakdown category (:data:`collsim.vocab.BREAKDOWN_CATEGORIES`), ``""`` for the engine's untagged flows.

    Examples
    --------
    >>> Tag("NVLink", "send", "transfer: NVLink").activity
    'send'
    >>> Tag("x", "fly", "")
    Traceback (most recent call last):
    ...
    ValueError: tag 'x': activity 'fly' is not one of send, reduce, copy, overhead, wait
    """

    label: str
    activity: str
    category: str

    def __post_init__(self) -> None:
        if self.activity not in TAG_ACTIVITIES:
            raise ValueError(
                f"tag {self.label!r}: activity {self.activity!r} is not one of {', '.join(TAG_ACTIVITIES)}"
            )


#: The owner of flows started without one (engine tests, examples).
NO_OWNER = Owner(None, None, "", "")
#: The tag of flows started without one (engine tests, examples); no backend emits it.
UNTAGGED = Tag("", "send", "")


class Resource:
    """A capacity shared by flows.

    Parameters
    ----------
    name : str
        Unique name, e.g. ``"n0/gpu0->n0/nvswitch"``.
    capacity : float
        Units per second: bytes/s for a link direction or memory, core-seconds/s (= number of cores) for a CPU pool.
    kind : str
        What it is, for reports: ``nvlink``, ``pcie``, ``hostmem``, ``cpu``, ``ib`` ...
    key : hashable, optional
        The caller's key of the resource (a backend's ``("link", src, dst)``), carried by flow records.
    """

    __slots__ = ("capacity", "key", "kind", "mark", "name", "sigs")

    def __init__(self, name: str, capacity: float, kind: str = "", key: Hashable = None) -> None:
        if not capacity > 0 or math.isnan(capacity):
            raise ValueError(f"resource {name!r}: capacity must be positive, got {capacity!r}")
        self.name = name
        self.capacity = float(capacity)
        self.kind = kind
        self.key = key
        # the signatures of the flows streaming on it now (kept by its network, which keeps each signature's flows)
        self.sigs: dict[int, None] = {}
        self.mark = 0  # the last component search that reached it (its network's stamp)

    def __repr__(self) -> str:
        return f"Resource({self.name!r}, {self.capacity:.4g}, {self.kind!r})"


class Flow:
    """A transfer in progress. Created by :meth:`FluidNetwork.transfer`; read-only for callers.

    One flow may stand for ``n`` messages (:attr:`n`): a callback-driven sender's message that starts on the same
    signature, at the same time, with the same size, latency and hold as an unrated one joins it
    (:meth:`FluidNetwork.sender_then`), since such messages get the same rate at every solve and finish together.
    The solver counts each of the ``n`` for fairness; the joined messages' calls (:attr:`more_a`, :attr:`more_s`)
    run right after the first one's."""

    __slots__ = (
        "arrived",
        "arrived_arg",
        "done",
        "finish",
        "hold",
        "latency",
        "max_rate",
        "more_a",
        "more_s",
        "n",
        "on_arrived",
        "on_streamed",
        "owner",
        "rate",
        "rates",
        "remaining",
        "res",
        "seq",
        "sig",
        "size",
        "streamed",
        "streamed_arg",
        "t_ref",
        "t_start",
        "tag",
        "uses",
    )

    def __init__(
        self,
        size: float,
        route: Route,
        done: Event | None,
        tag: Tag,
        owner: Owner,
        latency: float,
        now: float,
        seq: int,
        on_arrived: Callback | None = None,
        arrived_arg: Any = None,
        on_streamed: Callback | None = None,
        streamed_arg: Any = None,
        hold: float = 0.0,
    ) -> None:
        self.size = size
        self.remaining = size
        self.uses = route.uses
        self.res = route.res  # the resources of `uses`, for component searches
        self.max_rate = route.max_rate
        self.rate = 0.0
        self.done: Event | None = done  # fired when the last unit has left; None when nobody waits for that moment
        self.arrived: Event | None = None  # fired `latency` after the last unit left (None: it is `done`)
        self.streamed: Event | None = None  # fired `hold` after the last unit left (None: it is `done`)
        self.hold = hold
        self.tag = tag
        self.owner = owner
        self.t_start = now
        self.latency = latency
        self.sig = route.sig  # interned (uses, max_rate): flows with equal signatures get equal max-min fair rates
        self.seq = seq  # the network's count of flows when this one started: flows due together finish in this order
        self.t_ref = now  # `remaining` is exact at t_ref; it falls at `rate` since (progress is lazy)
        # the time of its live entry in the finish queue: _UNRATED before its first rating, inf while its rate is 0,
        # _FINISHED once finished (an entry queued for any other time is stale: re-rated since, or finished)
        self.finish = _UNRATED
        self.rates: list[tuple[float, float]] | None = None  # (time s, rate) at each rate change, when recording
        # what to call instead of events (FluidNetwork.send_then): on arrival, with its argument, and once the sender
        # is free, with its argument (slots of the flow, not a tuple: one object less per flow); None for a flow with
        # events
        self.on_arrived = on_arrived
        self.arrived_arg = arrived_arg
        self.on_streamed = on_streamed
        self.streamed_arg = streamed_arg
        # the messages this flow stands for (1: itself), and the joined ones' calls in the order they joined, flat
        # as a batch is (a callable, its argument, ...): on arrival, and once the sender is free (None: none)
        self.n = 1
        self.more_a: list[Any] | None = None
        self.more_s: list[Any] | None = None


@dataclass(frozen=True)
class FlowRecord:
    """What one finished flow (or delay) did, kept when the network records.

    Attributes
    ----------
    owner : Owner
        Who did it.
    tag : Tag
        What it was.
    size : float
        Units moved (bytes); 0 for a delay.
    t_start, t_end : float
        The streaming interval (a delay's wait), seconds.
    latency : float
        Seconds paid after ``t_end`` until arrival.
    resources : tuple of str
        Names of the resources crossed (a symmetry class's name ends in ``" (+N symmetric)"``).
    coefficients : tuple of float
        Units consumed on each of ``resources`` per data byte.
    keys : tuple of hashable
        The caller's key of each of ``resources`` (:attr:`Resource.key`; None where it has none).
    rates : tuple of (float, float)
        The flow's rate history: ``(time s, rate units/s)`` at each change of its max-min fair rate, the first at
        ``t_start``, each rate holding until the next time (the last until ``t_end``); empty for a delay, an
        instant transfer, or a record made by hand (readers then assume the average rate
        ``size / (t_end - t_start)``).
    """

    owner: Owner
    tag: Tag
    size: float
    t_start: float
    t_end: float
    latency: float
    resources: tuple[str, ...]
    coefficients: tuple[float, ...] = ()
    keys: tuple[Hashable, ...] = ()
    rates: tuple[tuple[float, float], ...] = ()


class Route:
    """Resources a sender's flows cross, prepared once (:meth:`FluidNetwork.route`) for many
    :meth:`FluidNetwork.send` calls: the merged uses, the rate cap and the interned signature, so a send costs no
    merging or hashing. Read-only for callers.
    """

    __slots__ = ("flows", "max_rate", "res", "sig", "uses")

    def __init__(
        self, uses: tuple[tuple[Resource, float], ...], max_rate: float, sig: int, flows: dict[Flow, None]
    ) -> None:
        self.uses = uses
        self.max_rate = max_rate
        self.sig = sig
        self.res = tuple(res for res, _ in uses)
        # the signature's streaming flows, the keys of a dict in the order they started (its network's table,
        # looked up once)
        self.flows = flows


class FluidNetwork:
    """Max-min fair fluid flows on SimPy time.

    Parameters
    ----------
    env : simpy.Environment
        The simulation clock.
    record : bool
        Keep a :class:`FlowRecord` per finished flow and per :meth:`delay` (for breakdowns and traces).
    check : bool
        After every solve, assert the invariants (no resource above capacity; every streaming flow is at its own
        cap or crosses a saturated resource). For tests; costs time.

    Examples
    --------
    Two flows of 1 MB share a 1 GB/s link, then the second runs alone:

    >>> env = simpy.Environment()
    >>> net = FluidNetwork(env)
    >>> link = net.resource("a->b", 1e9)
    >>> a = net.transfer(1e6, [(link, 1.0)])
    >>> b = net.transfer(2e6, [(link, 1.0)])
    >>> env.run()
    >>> round(env.now * 1e3, 6)  # 2 MB at 0.5 GB/s each, then the remaining 1 MB alone at 1 GB/s
    3.0
    """

    def __init__(self, env: simpy.Environment, *, record: bool = False, check: bool = False) -> None:
        self.env = env
        self.record = record
        self.check = check
        self.resources: dict[str, Resource] = {}
        self.records: list[FlowRecord] = []
        self.solves = 0
        self.flows = 0  # flows started that streamed bytes (the engine's work, for benchmarks)
        self._meter = Meter(record)  # the work budget in force (collsim.engine.budget) and the heartbeat
        self._check_at = self._meter.limit + 1 if 0 <= self._meter.limit < Meter.EVERY else Meter.EVERY
        self._streaming = 0  # flows streaming now (each is in its signature's table, _by_sig)
        self._stamp = 0  # the last component search's stamp (Resource.mark, and each signature's mark)
        # finish times: a heap of the distinct times, and per time the flows queued for it (flows of one lockstep
        # wave share a time: one heap entry, not one per flow; they finish in the order they started, whatever order
        # the solves queued them in: sorted by seq); an entry is the flow itself, stale unless the flow's `finish`
        # is its time (no entry object per rating: a solve re-rates millions)
        self._times: list[float] = []
        self._due: dict[float, list[Flow]] = {}
        self._update_pending = False
        self._generation = 0
        self._wake_at = _INF  # the time of the live wake-up (inf: none pending)
        self._units_seen: dict[tuple[int, ...], tuple[int, ...]] = {}  # one tuple of exact coefficients per value
        # (uses, rate cap, the uses' exact coefficients: `filling.units`) -> signature number
        self._signatures: dict[tuple[tuple[tuple[Resource, float], ...], float, tuple[int, ...]], int] = {}
        self._sig_order: list[tuple[tuple[tuple[str, float], ...], float]] = []  # per signature: what it is
        self._sig_res: list[tuple[Resource, ...]] = []  # per signature: the resources its flows cross
        self._sig_moved: list[float] = []  # per signature: units its finished flows moved (see carried)
        # per signature: its flows streaming now, the keys of a dict (hashed by identity, no id() per flow; a
        # resource lists the signatures on it, not every flow: a flow that starts or ends touches its resources only
        # when it is its signature's first or last), and the last component search that reached it
        self._by_sig: list[dict[Flow, None]] = []
        self._sig_n: list[int] = []  # per signature: the messages its streaming flows stand for (Flow.n summed)
        # per signature: the flow a callback-driven sender's next message may join (see sender_then), until rated;
        # none when recording (a record per message)
        self._head: list[Flow | None] = []
        self._sig_mark: list[int] = []
        self._sig_rate: list[float] = []  # per signature: the rate of its streaming flows (all alike)
        # per signature: its place in the canonical order of what signatures are (an int compares faster than the
        # names and coefficients themselves; every signature differs, so the order is the same)
        self._sig_rank: list[int] = []
        self._memo: dict[tuple[tuple[int, ...], tuple[int, ...]], dict[int, float]] = {}
        # the signatures as arrays, for the array filling of large components (collsim.engine.filling); their ranks
        # as an array
        self._arrays = SignatureArrays()
        self._np_rank: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        #: components of at least this many signatures are filled on arrays (the same rates; below it the Python
        #: filling is cheaper: measured, see docs/performance.md)
        self.array_from = ARRAY_FROM
        # what changed since the last solve: flows started, and the resources of flows that finished (a solve
        # re-solves only the connected components these touch)
        self._started: list[Flow] = []
        self._freed: list[Resource] = []
        # per signature of flows finished since the last solve (in the order each first finished): [the rate of its
        # last one, how many]
        self._ended: dict[int, list[Any]] = {}
        self._relayed: list[tuple[Flow, float]] = []  # started flows that take a finished one's rate (see _relay)
        # what is due at a time, by time: events triggered for it and send_then's calls (see _after, _call)
        self._batches: dict[float, list[Any]] = {}  # flat: a callable, its argument, ... (see _batch)
        self.memo_hits = 0
        self.array_fills = 0  # components filled on arrays (collsim.engine.filling)
        self.relays = 0  # solves skipped: flows replaced by flows of the same kinds (see _relay)
        self.relayed = 0  # flows that took their predecessor's rate in a solve that was not skipped (see _relay)

    # ------------------------------------------------------------------ resources
    def carried(self, res: Resource) -> float:
        """Units ``res`` consumed for the flows that finished on it: each signature's coefficient on ``res`` x the
        units its finished flows moved (kept per signature, not per flow and resource)."""
        moved = self._sig_moved
        return sum((c * moved[s] for (uses, _, _), s in self._signatures.items() for r, c in uses if r is res), 0.0)

    def resource(self, name: str, capacity: float, kind: str = "", key: Hashable = None) -> Resource:
        """Create (or return the existing) resource called ``name`` with ``capacity`` units/s and an optional
        ``key`` (flow records carry it)."""
        res = self.resources.get(name)
        if res is None:
            res = Resource(name, capacity, kind, key)
            self.resources[name] = res
        elif not math.isclose(res.capacity, capacity, rel_tol=1e-12):
            raise ValueError(f"resource {name!r} exists with capacity {res.capacity}, asked for {capacity}")
        return res

    # ------------------------------------------------------------------ flows
    def transfer(
        self,
        size: float,
        uses: Sequence[tuple[Resource, float]],
        *,
        latency: float = 0.0,
        max_rate: float = math.inf,
        tag: Tag = UNTAGGED,
        owner: Owner = NO_OWNER,
        hold: float = 0.0,
    ) -> tuple[Event, Event]:
        """Start a flow now and return ``(streamed, arrived)`` events.

        The flow streams ``size`` units at its max-min fair rate; ``streamed`` fires ``hold`` seconds after the last
        unit has left (the sender is free), ``arrived`` ``latency`` seconds after the last unit left (the receiver
        has it). Waits for nothing; pays ``latency`` once, after streaming, without holding any resource; the
        sender pays ``hold`` serially (a per-message cost of its own, such as the fence and flag store after an
        NCCL step), during which it holds no resource either.

        Parameters
        ----------
        size : float
            Units to move (bytes), >= 0.
        uses : sequence of (Resource, float)
            Resources crossed and the units consumed per unit moved (1 for a plain link; 2 for a link carrying
            NCCL LL, whose lines are half flags; 1/rate for a CPU pool measured in core-seconds).
        latency : float
            Seconds from the end of streaming to arrival.
        max_rate : float
            Cap on this flow's rate in units/s (one channel, one thread).
        tag : Tag
            What the flow is, for breakdowns and traces.
        owner : Owner
            Who does it.
        hold : float
            Seconds from the end of streaming to ``streamed`` (0: the sender is free at once).

        Raises
        ------
        TypeError
            When ``tag`` or ``owner`` is not typed (a display string).
        ValueError
            For a tag of activity ``wait`` (the breakdown's idle time).
        """
        if tag.__class__ is not Tag or owner.__class__ is not Owner or tag.activity == "wait":
            _check_typed(tag, owner)  # slow path: a subclass passes; a display string or an idle tag raises
        if size <= 0 or (not uses and math.isinf(max_rate)):
            return self._instant(size, latency, hold, tag, owner)
        return self.send(self.route(uses, max_rate), size, latency=latency, tag=tag, owner=owner, hold=hold)

    def route(self, uses: Sequence[tuple[Resource, float]], max_rate: float = math.inf) -> Route:
        """Prepare ``uses`` (resources and units consumed per unit moved; repeated resources add up, exactly, zero
        coefficients drop) and a rate cap ``max_rate`` (units/s) for :meth:`send`. A coefficient may carry its exact
        value (:class:`collsim.engine.filling.ExactCoef`, the symmetry quotient's): the fillings weigh that."""
        merged: dict[Resource, int] = {}
        given: dict[Resource, float] = {}  # the coefficient as given, where a resource comes once (no new float)
        for res, coef in uses:
            if coef > 0:
                u = merged.get(res)
                if u is None:
                    merged[res], given[res] = _units(coef), coef
                else:
                    merged[res] = u + _units(coef)
                    given.pop(res, None)
        units_t = tuple(merged.values())
        units_t = self._units_seen.setdefault(units_t, units_t)  # one tuple for every route with these (memory)
        # each rounded once
        uses_t = tuple((res, given[res] if res in given else u / _EXACT_SCALE) for res, u in merged.items())
        sig = self._signatures.setdefault((uses_t, max_rate, units_t), len(self._signatures))
        if sig == len(self._sig_order):  # a new signature: its place in the canonical solve order
            self._sig_order.append((tuple((r.name, c) for r, c in uses_t), max_rate))
            self._sig_res.append(tuple(r for r, _ in uses_t))
            self._sig_moved.append(0.0)
            self._by_sig.append({})
            self._sig_n.append(0)
            self._head.append(None)
            self._sig_mark.append(0)
            self._sig_rate.append(0.0)
            # the table keeps the coefficients exactly, in its unit: the fillings' weights
            self._arrays.add([(r, r.capacity, u) for r, u in zip(self._sig_res[sig], units_t, strict=True)], max_rate)
        return Route(uses_t, max_rate, sig, self._by_sig[sig])

    def send(
        self,
        route: Route,
        size: float,
        *,
        latency: float = 0.0,
        tag: Tag = UNTAGGED,
        owner: Owner = NO_OWNER,
        hold: float = 0.0,
    ) -> tuple[Event, Event]:
        """:meth:`transfer` over a prepared :class:`Route` (the fast path of a sender that sends many messages on
        the same resources): the same flow, events and costs. ``tag`` and ``owner`` are not checked here (the
        caller made them once)."""
        if size <= 0:
            return self._instant(size, latency, hold, tag, owner)
        env = self.env
        # the events the caller waits for; the moment the last unit leaves needs an event of its own only when
        # one of them is that moment (no latency, or no hold)
        done = Event(env) if latency <= 0 or hold <= 0 else None
        arrived = done if latency <= 0 else Event(env)
        if hold <= 0:
            streamed = done
        elif hold == latency:
            streamed = arrived
        else:
            streamed = Event(env)
        flow = self._start(route, size, done, tag, owner, latency)
        if arrived is not done:
            flow.arrived = arrived
        if streamed is not done and streamed is not arrived:
            flow.streamed = streamed
            flow.hold = hold
        return streamed, arrived  # type: ignore[return-value]  # each is done or an event of its own

    def send_then(
        self,
        route: Route,
        size: float,
        latency: float,
        hold: float,
        tag: Tag,
        owner: Owner,
        on_arrived: Callback | None,
        arrived_arg: Any,
        on_streamed: Callback | None,
        streamed_arg: Any,
    ) -> None:
        """:meth:`send` for a caller that reacts with plain calls instead of waiting for events (a callback-driven
        schedule): ``on_arrived(arrived_arg)`` when ``arrived`` would fire, then ``on_streamed(streamed_arg)`` when
        ``streamed`` would (each if given), in the order the callbacks of the two events would run had the caller
        appended them in that order (the same simulated times and, unless the message joins a flow of alike ones
        started at this instant, the same order: :meth:`sender_then`; no SimPy event per flow). Arguments are
        positional and unchecked."""
        if size <= 0:  # nothing streams: the events of :meth:`_instant`, then the calls
            streamed, arrived = self._instant(size, latency, hold, tag, owner)
            if on_arrived is not None:
                arrived.callbacks.append(lambda _e: on_arrived(arrived_arg))  # type: ignore[union-attr]
            if on_streamed is not None:
                streamed.callbacks.append(lambda _e: on_streamed(streamed_arg))  # type: ignore[union-attr]
            return
        self.sender_then(route, latency, hold, tag, owner)(size, on_arrived, arrived_arg, on_streamed, streamed_arg)

    def sender_then(self, route: Route, latency: float, hold: float, tag: Tag, owner: Owner) -> SendThen:
        """:meth:`send_then` with everything but the message fixed: ``send(size, on_arrived, arrived_arg,
        on_streamed, streamed_arg)`` makes the same flow with the same calls (a sender that sends many messages
        the same way pays for its fixed arguments once, not per message).

        A message that starts on the signature of a flow not rated yet (started at this time), with that flow's size,
        latency and hold, joins it (:attr:`Flow.n`) instead of starting a flow of its own: from now on the two get the
        same rate at every solve (a signature's flows all have its rate) and finish at the same time, so one flow
        carries both through the solver (counted twice for fairness); the joined message's calls run right after
        the first one's, before those of other flows due then (which start them in another order at the same time;
        the schedules built on this engine send the same messages at the same times whatever order their
        same-time calls run in). Not when recording (a record per message).

        Examples
        --------
        >>> env = simpy.Environment()
        >>> net = FluidNetwork(env)
        >>> send = net.sender_then(net.route([(net.resource("l", 1e9), 1.0)]), 1e-6, 0.0, UNTAGGED, NO_OWNER)
        >>> send(1e6, print, "arrived", print, "free")
        >>> env.run()
        free
        arrived
        >>> round(env.now * 1e6, 6)  # 1 MB at 1 GB/s, then 1 us of latency
        1001.0
        """
        send_then, start, sig = self.send_then, self._start, route.sig
        heads, sig_n = self._head, self._sig_n
        joins = not self.record  # a record per message: no joining (no flow is ever a head)

        def send(size: float, fa: Callback | None, a: Any, fs: Callback | None, s: Any) -> None:
            if size <= 0:
                send_then(route, size, latency, hold, tag, owner, fa, a, fs, s)
                return
            p = heads[sig]
            if p is not None and p.finish == _UNRATED and p.size == size and p.latency == latency and p.hold == hold:
                # join it (see above): one more message, its calls after the flow's own
                more_a, more_s = p.more_a, p.more_s
                if more_a is None or more_s is None:  # the first message to join
                    p.more_a = more_a = []
                    p.more_s = more_s = []
                if fa is not None:
                    more_a += (fa, a)
                if fs is not None:
                    more_s += (fs, s)
                p.n += 1
                sig_n[sig] += 1
                self.flows += 1  # a message: the count (and the seq of later flows) as if it were a flow of its own
                if self.flows >= self._check_at:
                    self._budget()
            else:
                f = start(route, size, None, tag, owner, latency, fa, a, fs, s, hold)
                if joins:
                    heads[sig] = f

        return send

    def timed(self, seconds: float, latency: float = 0.0, hold: float = 0.0) -> tuple[Event, Event]:
        """A transfer that shares no resource and streams for ``seconds`` (its size over its cap): ``(streamed,
        arrived)`` events as :meth:`send` returns them, ``hold`` and ``latency`` after the end. Max-min fairness
        gives such a flow its cap whatever else streams, so it needs no solve and is not a flow of this network
        (not counted, not listed in :attr:`active`, not recorded: a caller that traces sends a flow instead)."""
        streamed, arrived = Event(self.env), Event(self.env)
        self._after(seconds + latency, arrived)
        self._after(seconds + hold, streamed)
        return streamed, arrived

    def timed_then(
        self,
        seconds: float,
        latency: float,
        hold: float,
        on_arrived: Callback | None,
        arrived_arg: Any,
        on_streamed: Callback | None,
        streamed_arg: Any,
    ) -> None:
        """:meth:`timed` for a callback-driven schedule (as :meth:`send_then` is :meth:`send`'s): ``on_arrived``
        ``seconds + latency`` from now, then ``on_streamed`` ``seconds + hold`` from now (each if given)."""
        if on_arrived is not None:
            self._call(seconds + latency, on_arrived, arrived_arg)
        if on_streamed is not None:
            self._call(seconds + hold, on_streamed, streamed_arg)

    def timed_sender_then(self, cap: float, latency: float, hold: float) -> SendThen:
        """:meth:`timed_then` for a sender whose messages all stream alone at ``cap`` units/s:
        ``send(size, on_arrived, arrived_arg, on_streamed, streamed_arg)`` makes the calls ``timed_then(size /
        cap, latency, hold, ...)`` makes, at the same times (a sender of millions of local copies pays one call per
        message).

        Examples
        --------
        >>> env = simpy.Environment()
        >>> net = FluidNetwork(env)
        >>> send = net.timed_sender_then(1e9, 2e-6, 0.0)
        >>> send(1e6, print, "arrived", print, "free")
        >>> env.run()
        free
        arrived
        >>> round(env.now * 1e6, 6)  # 1 MB at 1 GB/s, then 2 us of latency
        1002.0
        """
        env, batches, batch = self.env, self._batches, self._batch

        def send(size: float, fa: Callback | None, a: Any, fs: Callback | None, s: Any) -> None:
            seconds = size / cap
            if fa is not None:  # _call(seconds + latency, fa, a), written out
                delay = seconds + latency
                due = batches.get(env._now + delay)
                (due if due is not None else batch(delay)).extend((fa, a))
            if fs is not None:
                delay = seconds + hold
                due = batches.get(env._now + delay)
                (due if due is not None else batch(delay)).extend((fs, s))

        return send

    def _start(
        self,
        route: Route,
        size: float,
        done: Event | None,
        tag: Tag,
        owner: Owner,
        latency: float,
        on_arrived: Callback | None = None,
        arrived_arg: Any = None,
        on_streamed: Callback | None = None,
        streamed_arg: Any = None,
        hold: float = 0.0,
    ) -> Flow:
        """A flow of ``size`` units over ``route``, streaming from now (the caller sets its events, or gives the
        calls of :meth:`send_then` and the sender's hold)."""
        env = self.env
        self.flows += 1
        flow = Flow(
            float(size),
            route,
            done,
            tag,
            owner,
            latency,
            env._now,
            self.flows,
            on_arrived,
            arrived_arg,
            on_streamed,
            streamed_arg,
            hold,
        )
        if self.record:
            flow.rates = []
        if self.flows >= self._check_at:
            self._budget()
        self._streaming += 1
        flows = route.flows
        sig = route.sig
        if not flows:  # the signature's first streaming flow: its resources list it
            for res in route.res:
                res.sigs[sig] = None
        flows[flow] = None
        self._sig_n[sig] += 1
        self._started.append(flow)
        if not self._update_pending:
            self._schedule_update()
        return flow

    def _budget(self) -> None:
        """The work budget: over its limit (raises), or a heartbeat due (every Meter.EVERY messages)."""
        self._meter.over(self.flows, self.env.now)
        self._check_at = self.flows + Meter.EVERY
        if 0 <= self._meter.limit < self._check_at:
            self._check_at = max(self.flows + 1, self._meter.limit + 1)

    def _instant(self, size: float, latency: float, hold: float, tag: Tag, owner: Owner) -> tuple[Event, Event]:
        """A transfer with nothing to stream (no bytes, or no resource and no cap): done now, arrived ``latency``
        later, the sender free ``hold`` later."""
        env = self.env
        done = Event(env)  # the last unit has left
        arrived = Event(env) if latency > 0 else done
        if latency > 0:
            done.callbacks.append(lambda _ev: self._after(latency, arrived))
        streamed = done
        if hold > 0:
            streamed = arrived if hold == latency else Event(env)
            if streamed is not arrived:
                done.callbacks.append(lambda _ev: self._after(hold, streamed))
        done.succeed()
        if self.record:
            self.records.append(FlowRecord(owner, tag, size, env.now, env.now, latency, ()))
        return streamed, arrived

    def delay(self, seconds: float, *, tag: Tag = UNTAGGED, owner: Owner = NO_OWNER) -> Event:
        """A pure wait of ``seconds`` (an overhead such as a kernel launch), recorded like a flow of 0 bytes."""
        if tag.__class__ is not Tag or owner.__class__ is not Owner or tag.activity == "wait":
            _check_typed(tag, owner)
        if self.record:
            now = self.env.now
            self.records.append(FlowRecord(owner, tag, 0.0, now, now + seconds, 0.0, ()))
        return self.env.timeout(seconds)

    def _after(self, seconds: float, ev: Event) -> None:
        """Trigger ``ev`` ``seconds`` from now (what a Timeout does, without a second event).

        The events due at one time wait in one batch behind one SimPy event (:meth:`_fire`): a lockstep pipeline
        triggers thousands at each time (a wave's arrivals), and one heap entry per time instead of per event keeps
        SimPy's queue short (its push and pop cost the log of its length)."""
        ev._ok = True
        ev._value = None
        self._batch(seconds).extend((_process, ev))

    def _call(self, seconds: float, fn: Callback, arg: Any) -> None:
        """Call ``fn(arg)`` ``seconds`` from now, in the batch of that time, where an event triggered now for then
        would have its callbacks run (:meth:`_after`)."""
        self._batch(seconds).extend((fn, arg))

    def _batch(self, seconds: float) -> list[Any]:
        """The batch of what is due ``seconds`` from now (created with the SimPy event that fires it): calls, each
        a callable then its argument, flat (no pair object per call kept until its time; an event's call is
        :func:`_process` of it)."""
        env = self.env
        when = env._now + seconds  # the time SimPy's schedule computes for this delay (the same float)
        batch = self._batches.get(when)
        if batch is None:
            self._batches[when] = batch = []
            tick = Event(env)
            tick._ok = True
            tick._value = None
            tick.callbacks.append(self._fire)
            env.schedule(tick, delay=seconds)
        return batch

    def _fire(self, _tick: Event) -> None:
        """Process the batch due now (:meth:`_after`, :meth:`_call`) in the order it was filled: an event as SimPy's
        ``step`` processes it (its callbacks run, then it is processed), a call by calling it. What is triggered for
        now while the batch runs goes into a new batch, processed after it (and after SimPy's other events of this
        time)."""
        calls = iter(self._batches.pop(self.env._now))
        try:
            for fn, arg in zip(calls, calls, strict=True):  # the batch is flat: a callable, its argument, ...
                fn(arg)
        except simpy.core.StopSimulation:  # `env.run(until=ev)` (see _process): the rest as SimPy's own events
            env = self.env
            for fn, arg in zip(calls, calls, strict=True):
                env.schedule(arg if fn is _process else _call_event(env, fn, arg))
            raise

    # ------------------------------------------------------------------ solver
    def _schedule_update(self) -> None:
        if self._update_pending:
            return
        self._update_pending = True
        ev = Event(self.env)
        ev._ok = True
        ev._value = None
        ev.callbacks.append(lambda _e: self._update(due=False))
        self.env.schedule(ev, LATE)  # type: ignore[arg-type]  # SimPy accepts any int priority

    def _update(self, due: bool) -> None:
        """Finish the flows whose finish time has come, then re-solve once the timestamp's other events ran.

        Progress is lazy: a flow's ``remaining`` is brought up to date only when its rate changes, and its finish
        time waits in a queue (a heap of distinct times, the flows due at each, finished in the order they started),
        so an update costs the flows that change, not all of them (``due`` is unused: the queue knows what is due).
        """
        self._update_pending = False
        now = self.env.now
        horizon = now + now * 1e-12 + 1e-15
        times, queued, by_sig = self._times, self._due, self._by_sig
        ended, moved, after, record, sig_n = self._ended, self._sig_moved, self._after, self.record, self._sig_n
        batches, batch = self._batches, self._batch
        finished = 0
        while times and times[0] <= horizon:
            when = heapq.heappop(times)
            bucket = queued.pop(when)
            if len(bucket) > 1:  # by finish time, then in the order they started (not the order solves queued them)
                bucket.sort(key=_SEQ)  # a flow queued twice for this time (re-rated to it) is adjacent, then skipped
            for f in bucket:
                if f.finish != when:  # stale: re-rated since, or finished (queued twice for this time)
                    continue
                finished += 1
                sig = f.sig
                flows = by_sig[sig]
                del flows[f]
                if not flows:  # the signature's last streaming flow
                    for res in f.res:
                        del res.sigs[sig]
                n = f.n
                sig_n[sig] -= n
                e = ended.get(sig)
                if e is None:
                    ended[sig] = [f.rate, n]
                else:
                    e[0] = f.rate
                    e[1] += n
                f.remaining = 0.0
                f.rate = 0.0
                f.finish = _FINISHED
                moved[sig] += f.size
                if n > 1:  # messages joined (only send_then's flows join, never when recording)
                    self._finish_joined(f, now)
                    continue
                if record:
                    self._record(f, now)
                fa, fs = f.on_arrived, f.on_streamed
                if fa is not None or fs is not None:  # send_then's calls, in the order its two events' callbacks
                    # would run (what _call does, written out: the batch of the time `now + delay`, as _batch
                    # computes it); a flow with events has neither (and a flow with neither calls nor events, none)
                    if fa is not None:
                        b = batches.get(now + f.latency)
                        (b if b is not None else batch(f.latency)).extend((fa, f.arrived_arg))
                    if fs is not None:
                        b = batches.get(now + f.hold)
                        (b if b is not None else batch(f.hold)).extend((fs, f.streamed_arg))
                    continue
                if f.done is not None:
                    after(0.0, f.done)
                if f.arrived is not None:
                    after(f.latency, f.arrived)
                if f.streamed is not None:
                    after(f.hold, f.streamed)
        if finished:
            self._streaming -= finished
            # the finished flows' callbacks run at this timestamp and may start flows: solve after them
            self._schedule_update()
            return
        self._solve()
        self._arm()

    def _finish_joined(self, f: Flow, now: float) -> None:
        """The rest of a finished flow that messages joined (:meth:`sender_then`): the joined messages' bytes, each
        added as its own flow's would be, and the calls, each of the flow's own followed by the joined ones' (its
        arrival calls in the batch of ``now + latency``, its sender calls in that of ``now + hold``)."""
        moved = self._sig_moved
        for _ in range(f.n - 1):
            moved[f.sig] += f.size
        for call, arg, more, delay in (
            (f.on_arrived, f.arrived_arg, f.more_a, f.latency),
            (f.on_streamed, f.streamed_arg, f.more_s, f.hold),
        ):
            if call is not None or more:
                b = self._batches.get(now + delay)
                if b is None:
                    b = self._batch(delay)
                if call is not None:
                    b += (call, arg)
                if more:
                    b += more

    def _record(self, f: Flow, now: float) -> None:
        """Keep the record of flow ``f``, finished at ``now`` (seconds)."""
        self.records.append(
            FlowRecord(
                f.owner,
                f.tag,
                f.size,
                f.t_start,
                now,
                f.latency,
                tuple(r.name for r, _ in f.uses),
                tuple(c for _, c in f.uses),
                tuple(r.key for r, _ in f.uses),
                tuple(f.rates) if f.rates is not None else (),
            )
        )

    def _components(self) -> list[list[int]]:
        """The connected components (signatures linked by shared resources) that changed since the last solve: those
        of the flows started (with a resource) and of the resources freed by flows that finished, each as the list of
        its signatures (every streaming flow of a signature is in its component: equal signatures cross the same
        resources). Other components keep their rates: max-min fairness decomposes over components."""
        # a search stamp marks the resources and signatures reached (cheaper than sets of them)
        self._stamp += 1
        stamp = self._stamp
        comps: list[list[int]] = []
        seeds: list[Resource] = self._freed
        sig_res, sig_mark = self._sig_res, self._sig_mark
        # the started flows' resources, once per signature (a later flow of a signature finds every resource of its
        # first one's component marked: the same components, found in the same order)
        for sig in dict.fromkeys([f.sig for f in self._started]):
            seeds.extend(sig_res[sig])
        # a search goes resource -> signatures on it -> their resources
        for r0 in seeds:
            if r0.mark == stamp:
                continue
            r0.mark = stamp
            comp: list[int] = []
            stack = [r0]
            while stack:
                for sig in stack.pop().sigs:
                    if sig_mark[sig] == stamp:
                        continue
                    sig_mark[sig] = stamp
                    comp.append(sig)
                    for res in sig_res[sig]:
                        if res.mark != stamp:
                            res.mark = stamp
                            stack.append(res)
            if comp:
                comps.append(comp)
        self._freed = []
        return comps

    def _key(self, sigs: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The memo key of signatures ``sigs`` (distinct) with their streaming flows: the multiset, as the sorted
        signatures and how many flows each has."""
        ordered = sorted(sigs)
        sig_n = self._sig_n
        return tuple(ordered), tuple([sig_n[s] for s in ordered])

    def _component_rates(self, key: tuple[tuple[int, ...], tuple[int, ...]]) -> dict[int, float]:
        """One component's rates by signature (``key``: its signatures and their flow counts, :meth:`_key`), from
        the memo or a progressive filling of its flows in canonical order (by what the flows are, not when they
        started: the float sums then do not depend on the history, and a memo hit returns bit for bit what a fresh
        solve of the same flows would); from :attr:`array_from` signatures the filling runs on arrays
        (:mod:`collsim.engine.filling`: the same rates). Both fill a row per signature that weighs its number of
        flows times its coefficients (the flows of a signature freeze together)."""
        hit = self._memo.get(key)
        if hit is not None:
            self.memo_hits += 1
            return hit
        if len(self._sig_rank) != len(self._sig_order):  # signatures were added: rank them all again (once a run)
            order = self._sig_order
            by_rank = np.array(sorted(range(len(order)), key=order.__getitem__), dtype=np.int64)
            self._np_rank = np.empty(len(order), dtype=np.int64)
            self._np_rank[by_rank] = np.arange(len(order))
            self._sig_rank = self._np_rank.tolist()  # a list indexes faster than an array in the Python filling
        distinct, counts = key
        if len(distinct) >= self.array_from:  # the same filling on arrays: a row per signature, in rank order
            ids = np.array(distinct, dtype=np.int64)
            in_rank = np.argsort(self._np_rank[ids])
            ids, many = ids[in_rank], np.array(counts, dtype=np.int64)[in_rank]
            hit = dict(zip(ids.tolist(), self._arrays.fill(ids, many).tolist(), strict=True))
            self.array_fills += 1
        else:
            # a row per signature, in rank order, with its number of flows; flows of one signature are alike, so any
            # of them stands for the others
            rank, by_sig = self._sig_rank, self._by_sig
            rows = sorted(zip(distinct, counts, strict=True), key=lambda sc: rank[sc[0]])
            ordered = [next(iter(by_sig[sig])) for sig, _ in rows]
            rates = self._progressive_filling(ordered, [n for _, n in rows])
            hit = {f.sig: r for f, r in zip(ordered, rates, strict=True)}
        if len(self._memo) < 100_000:
            self._memo[key] = hit
        return hit

    def _relay(self) -> bool:
        """Pair the flows started since the last solve with the flows finished since then, signature for signature
        (a sender's next slice on the route its last one left). Max-min rates depend only on the multiset of
        signatures in a component, and equal signatures cross the same resources (one component), so a component
        that changed only by such pairs keeps every rate, and each new flow of the pair takes its predecessor's:
        the floats the solve would hand out (from the memo or a filling of the same flows).

        When every started and finished flow pairs up, do that and return True: the solve is skipped. Otherwise
        leave the search only the unpaired changes (the unpaired started flows, the resources of the unpaired
        finished ones), keep the pairs for :meth:`_solve` (a pair in a component the search reaches is solved with
        it; one outside takes its predecessor's rate), and return False."""
        started, ended = self._started, self._ended
        if not ended or not started:
            return False
        paired: list[Flow] = []
        rest: list[Flow] = []
        for f in started:
            e = ended.get(f.sig)
            if e is not None and e[1] >= f.n:  # finished messages of its signature not paired yet, as many
                e[1] -= f.n
                paired.append(f)
            else:
                rest.append(f)
        if not paired:
            return False
        rate_of = {sig: e[0] for sig, e in ended.items()}
        unpaired_ended = [sig for sig, e in ended.items() if e[1]]
        self._ended = {}
        if rest or unpaired_ended:
            self._started = rest
            sig_res = self._sig_res
            self._freed = [r for sig in unpaired_ended for r in sig_res[sig]]
            self._relayed = [(f, rate_of[f.sig]) for f in paired]
            return False
        self._rerate_all(paired, self.env.now, rate_of=rate_of)
        self._started = []
        self._freed = []
        self.relays += 1
        if self.check:
            self.check_invariants()
        return True

    def _solve(self) -> None:
        """Set the max-min fair rate of every flow in a component that changed (memoised per component on the
        multiset of its flows' signatures), unless the change is a relay (:meth:`_relay`); a started flow paired
        with a finished one in a component nothing else changed takes its predecessor's rate."""
        if self._relay():
            return
        if self._ended:  # flows finished that no started flow took over from: their resources seed the search
            sig_res = self._sig_res
            self._freed = [r for sig in self._ended for r in sig_res[sig]]
            self._ended = {}
        self.solves += 1
        now = self.env.now
        rerate = self._rerate
        started = self._started  # none has finished: a flow is queued to finish only once rated
        for f in started:
            if not f.res:  # nothing shared: a component of its own (its cap)
                rerate(f, self._component_rates(((f.sig,), (1,)))[f.sig], now)
        self._started = [f for f in started if f.res]
        comps = self._components()
        # one memo entry for everything this solve touched (a lockstep pipeline repeats the same set of components),
        # else one per component; a component's rates are always its own progressive filling's, so which entry
        # answers does not change a bit
        sigs_all = comps[0] if len(comps) == 1 else [s for c in comps for s in c]
        key = self._key(sigs_all)
        hit = self._memo.get(key)
        if hit is not None:
            self.memo_hits += 1
        else:
            if len(comps) == 1:
                hit = self._component_rates(key)
            else:
                hit = {}
                for sigs in comps:
                    # equal signatures share resources: never in two components
                    hit.update(self._component_rates(self._key(sigs)))
                if len(self._memo) < 100_000:
                    self._memo[key] = hit
        # every streaming flow of a signature has its signature's rate (`_sig_rate`): a signature whose rate is
        # unchanged needs no pass over its flows; the flows new since the last solve (rate 0) are rated below
        sig_rate, by_sig = self._sig_rate, self._by_sig
        for sig in sigs_all:
            rate = hit[sig]
            if rate != sig_rate[sig]:
                sig_rate[sig] = rate
                self._rerate_all([f for f in by_sig[sig] if f.finish != _UNRATED], now, rate)
        self._rerate_all(self._started, now, rate_of=hit)
        self._started = []
        if self._relayed:
            # the relayed flows of a signature the search reached take its new rate, the others their predecessor's
            stamp, sig_mark = self._stamp, self._sig_mark
            for f, rate in self._relayed:
                if f.res and sig_mark[f.sig] == stamp:
                    rerate(f, hit[f.sig], now)
                else:
                    rerate(f, rate, now)
                    self.relayed += 1
            self._relayed = []
        if self.check:
            self.check_invariants()

    def _rerate(self, f: Flow, rate: float, now: float) -> None:
        """:meth:`_rerate_all` for one flow."""
        self._rerate_all((f,), now, rate)

    def _rerate_all(
        self, flows: Iterable[Flow], now: float, rate: float = 0.0, rate_of: dict[int, float] | None = None
    ) -> None:
        """Bring each of ``flows`` up to ``now`` (seconds), give it ``rate`` (units/s), or ``rate_of`` its
        signature when given, and queue its finish time (its older queue entries go stale: `finish` moves on). One
        call for many flows: a solve re-rates millions."""
        due, times = self._due, self._times
        for f in flows:
            if rate_of is not None:
                rate = rate_of[f.sig]
            left = f.remaining - f.rate * (now - f.t_ref)
            f.remaining = left
            f.t_ref = now
            f.rate = rate
            if f.rates is not None:
                f.rates.append((now, rate))
            if rate > 0:
                finish = now + left / rate if left > 0.0 and rate != _INF else now
                bucket = due.get(finish)
                if bucket is None:
                    due[finish] = bucket = []
                    heapq.heappush(times, finish)
                bucket.append(f)
                f.finish = finish
            else:
                f.finish = _INF

    def _filling_rows(
        self, flows: list[Flow], counts: list[int] | None
    ) -> tuple[list[float], list[int], list[list[int]], list[list[tuple[int, int]]]]:
        """What :meth:`_progressive_filling` fills: the component's resources by local index, in order of first use
        (lists index faster than dicts of resources; the tie-breaks are those of that order), with their capacities
        (units/s), their exact weights (Python ints in the signature table's unit, 2**-scale: the sum does not depend
        on the order or grouping of the rows) and the rows on each; and per row, its (local index, exact weight)
        uses, ``counts[i]`` times its coefficients."""
        where: dict[Resource, int] = {}
        caps: list[float] = []
        total: list[int] = []
        members: list[list[int]] = []
        uses: list[list[tuple[int, int]]] = []
        # the network's table is keyed by its own resources
        weights = cast(list[tuple[tuple[Resource, int], ...]], self._arrays.weights)
        for i, f in enumerate(flows):
            mine = []
            many = 1 if counts is None else counts[i]
            for res, exact in weights[f.sig]:
                j = where.get(res)
                if j is None:
                    j = where[res] = len(caps)
                    caps.append(res.capacity)
                    total.append(0)
                    members.append([])
                w = exact if many == 1 else exact * many
                total[j] += w
                members[j].append(i)
                mine.append((j, w))
            uses.append(mine)
        return caps, total, members, uses

    def _progressive_filling(self, flows: list[Flow], counts: list[int] | None = None) -> list[float]:
        """Raise all unfrozen rates together until a resource or a flow cap binds; freeze those; repeat.

        With ``counts``, ``flows[i]`` stands for ``counts[i]`` alike flows (its signature's): they weigh
        ``counts[i]`` times its coefficients on every resource and get one rate (alike flows freeze together).
        Every round freezes at least one row or retires one resource, so it ends after at most (rows + resources)
        rounds; each round costs one pass over the resources still in play.
        """
        caps, total, members, uses = self._filling_rows(flows, counts)
        table = self._arrays
        # an exact weight (int) as the nearest float: int -> float rounds to nearest and scaling by 2**-scale is
        # exact (float() of an int above 2**1024 overflows: a weight above 2**524 at this bound), or, for a unit
        # below 2**-500 (inv 0), Python's integer division, correctly rounded too
        inv = 2.0**-table.scale if table.scale <= 500 else 0.0
        unit = 1 << table.scale
        left = caps[:]
        weight = [float(w) * inv for w in total] if inv else [w / unit for w in total]
        # an insertion-ordered dict, not a set: the order of first use, so that tie-breaks are the same from run to
        # run
        live = {j: None for j, w in enumerate(total) if w > 0}
        frozen = [False] * len(flows)
        rates = [0.0] * len(flows)
        nfrozen = 0
        by_cap = sorted(range(len(flows)), key=lambda i: flows[i].max_rate)
        cp = 0
        level = 0.0
        while nfrozen < len(flows):
            step = math.inf
            binding = -1  # the resource that binds, -1 for none (a flow cap, or nothing)
            for j in live:
                s = left[j] / weight[j]
                if s < step:
                    step, binding = s, j
            while cp < len(by_cap) and frozen[by_cap[cp]]:
                cp += 1
            if cp < len(by_cap) and flows[by_cap[cp]].max_rate - level < step:
                step, binding = flows[by_cap[cp]].max_rate - level, -1
            if math.isinf(step):
                for i in range(len(flows)):
                    if not frozen[i]:
                        rates[i] = math.inf
                break
            step = max(step, 0.0)
            level += step
            newly: list[int] = []
            for j in live:
                left[j] -= step * weight[j]
                if left[j] <= _SAT_TOL * caps[j]:
                    newly.append(j)
            if binding >= 0 and binding not in newly:
                newly.append(binding)
            to_freeze: list[int] = []
            if binding < 0:  # a flow cap binds: freeze every flow at that cap
                to_freeze.append(by_cap[cp])
            while cp < len(by_cap) and (
                frozen[by_cap[cp]] or flows[by_cap[cp]].max_rate - level <= _SAT_TOL * max(level, 1.0)
            ):
                to_freeze.append(by_cap[cp])
                cp += 1
            for j in newly:
                live.pop(j, None)
                to_freeze.extend(members[j])
            given: list[int] = []  # the live resources frozen rows gave weight back to
            for i in to_freeze:
                if frozen[i]:
                    continue
                frozen[i] = True
                nfrozen += 1
                rates[i] = level
                for j, w in uses[i]:
                    if j in live:
                        total[j] -= w
                        given.append(j)
            for j in given:
                if total[j] > 0:
                    weight[j] = float(total[j]) * inv if inv else total[j] / unit
                else:  # no unfrozen flow left on it
                    live.pop(j, None)
        return rates

    def _arm(self) -> None:
        """Schedule a wake-up at the earliest finish time with a live entry (older wake-ups become stale), unless
        the live one is already for that time (solves that leave the earliest finish where it was add none)."""
        times, due = self._times, self._due
        while times:
            when = times[0]
            bucket = due[when]
            stale = 0  # drop the stale entries ahead of the first live one (each entry is looked at once here)
            for f in bucket:
                if f.finish == when:  # a finished flow's finish moved on at its end
                    break
                stale += 1
            if stale < len(bucket):
                if stale:
                    del bucket[:stale]
                break
            del due[heapq.heappop(times)]
        if not times:
            if self._streaming:
                names = ", ".join(f"{f.owner.label}:{f.tag.label}" for f in self.active[:5])
                raise RuntimeError(f"flows cannot progress (zero rate): {names}")
            self._generation += 1  # nothing left to wake for: a pending wake-up is stale
            self._wake_at = _INF
            return
        if times[0] == self._wake_at:
            return
        self._generation += 1
        gen = self._generation
        self._wake_at = times[0]
        self.env.timeout(max(times[0] - self.env.now, 0.0)).callbacks.append(lambda _e: self._wake(gen))

    def _wake(self, gen: int) -> None:
        if gen == self._generation:
            self._wake_at = _INF
            self._update(due=True)

    # ------------------------------------------------------------------ checks
    def check_invariants(self, rel_tol: float = 1e-6) -> None:
        """Assert: no resource above capacity; every streaming flow is capped or crosses a saturated resource."""
        load: dict[Resource, float] = {}
        flows = self.active
        for f in flows:
            for res, coef in f.uses:
                load[res] = load.get(res, 0.0) + coef * f.rate * f.n
        for res, value in load.items():
            if value > res.capacity * (1 + rel_tol):
                raise AssertionError(f"{res.name}: load {value} above capacity {res.capacity}")
        for f in flows:
            if f.rate >= f.max_rate * (1 - rel_tol):
                continue
            if not any(load[res] >= res.capacity * (1 - rel_tol) for res, _ in f.uses):
                raise AssertionError(f"flow {f.owner.label}:{f.tag.label} at {f.rate} is not bottlenecked")

    @property
    def active(self) -> list[Flow]:
        """Flows streaming now, in the order they started (a flow that stands for several messages once, see
        :attr:`Flow.n`)."""
        return sorted((f for flows in self._by_sig for f in flows), key=lambda f: f.seq)


def _process(ev: Event) -> None:
    """Process a triggered event from a batch (:meth:`FluidNetwork._fire`) as SimPy's ``step`` does: its callbacks
    run, then it is processed; on ``StopSimulation`` (``env.run(until=ev)``) its remaining callbacks wait in SimPy's
    queue, as ``step`` leaves them."""
    callbacks, ev.callbacks = ev.callbacks, None  # type: ignore[assignment]  # processed, as SimPy marks it
    try:
        for callback in callbacks:  # type: ignore[union-attr]
            callback(ev)
    except simpy.core.StopSimulation:
        ev.callbacks = callbacks[callbacks.index(callback) + 1 :]  # type: ignore[union-attr]
        ev.env.schedule(ev, simpy.core.EventPriority(-1))  # type: ignore[arg-type]
        raise


def _call_event(env: simpy.Environment, fn: Callback, arg: Any) -> Event:
    """A triggered event whose one callback calls ``fn(arg)`` (a batch's call, rescheduled as SimPy's own event)."""
    ev = Event(env)
    ev._ok = True
    ev._value = None
    ev.callbacks.append(lambda _e: fn(arg))
    return ev


def _check_typed(tag: object, owner: object) -> None:
    """Refuse display strings where the typed contract is expected, and the breakdown's idle tags on a flow.

    Called only off the fast path (``transfer`` and ``delay`` test the exact classes first, so a well-typed flow pays
    no call)."""
    if not isinstance(tag, Tag):
        raise TypeError(f"tag must be a collsim.engine.Tag, got {type(tag).__name__} {tag!r}")
    if not isinstance(owner, Owner):
        raise TypeError(f"owner must be a collsim.engine.Owner, got {type(owner).__name__} {owner!r}")
    if tag.activity == "wait":
        raise ValueError(f"tag {tag.label!r} stands for idle time (activity 'wait'): no flow or delay carries it")
