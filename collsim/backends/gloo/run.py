"""What a rank does: its operations as flows on the engine, its jobs on the worker-thread pool, its breakdown."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import simpy
from simpy.events import Event

from collsim.algorithms import EventBoard
from collsim.algorithms.gloo_algos import GlooRankContext, GlooSchedule, Proc
from collsim.backends.background import BACKGROUND_TAG, is_background, start_background
from collsim.backends.common import (
    run_until_done,
)
from collsim.backends.gloo.options import _US, GlooConstants, GlooOptions
from collsim.backends.gloo.plan import _Plan, _RankCosts, send_role
from collsim.backends.gloo.tags import (
    BREAKDOWN_PRIORITY,
    D2H_TAG,
    ENQUEUE_TAG,
    H2D_TAG,
    IDLE_TAG,
    LATENCY_TAG,
    PAGE_FAULT_TAG,
    STRAGGLER_TAG,
)
from collsim.engine import FluidNetwork, Owner, Quotient, Tag, attribute_time
from collsim.noise import jitter_stream

#: Collectives whose ranks have different jobs (a root, a sender): their breakdown pools every rank's activities.
_MIXED_ROLES = frozenset({"broadcast", "reduce", "sendrecv"})


# ---------------------------------------------------------------------------------------------- what a rank does
@dataclass
class _RankOps:
    """The operations of one representative rank as flows on the engine.

    :meth:`_flow` and :meth:`_wait` are the only places this backend starts flows and waits: they set every
    record's declared tag (:mod:`collsim.backends.gloo.tags`) and its owner (the rank).
    """

    net: FluidNetwork
    quotient: Quotient
    costs: _RankCosts
    me: int
    preamble: float  # bytes in front of every message (Gloo's TCP preamble; 0 for RDMA)
    rdma: bool
    owner: Owner
    #: the options whose ``jitter`` and ``jitter_seed`` this rank's messages draw from (:meth:`_jitter`)
    opts: GlooOptions | None = None
    #: allocations of at least this many bytes are fresh mappings (gloo.yaml ``fresh_mapping_bytes``)
    fresh_mapping: float = math.inf
    #: the Gloo context (of ``opts.interfaces``) the collective runs on: its connections and receiving thread
    gloo_context: int = 0
    _streams: dict[str, Callable[[], float]] = field(default_factory=dict)

    def _jitter(self, what: str) -> float:
        """Seconds of jitter on this rank's next message on ``what`` (a connection or its notices): exponential with
        mean ``opts.jitter``, one stream per (rank, ``what``) seeded by ``opts.jitter_seed``; 0 without jitter."""
        if self.opts is None or self.opts.jitter <= 0:
            return 0.0
        if what not in self._streams:
            self._streams[what] = jitter_stream(self.opts.jitter, self.opts.jitter_seed, self.me, what)
        return self._streams[what]()

    def _flow(
        self, nbytes: float, role: str, *, latency: float, max_rate: float = math.inf, tag: Tag
    ) -> tuple[Event, Event]:
        """Start a flow of ``nbytes`` bytes in ``role``; ``(streamed, arrived)``."""
        uses = self.quotient.uses(self.me, role)
        return self.net.transfer(nbytes, uses, latency=latency, max_rate=max_rate, tag=tag, owner=self.owner)

    def _wait(self, seconds: float, tag: Tag) -> Event:
        """A pure wait of ``seconds``, recorded under ``tag``."""
        return self.net.delay(seconds, tag=tag, owner=self.owner)

    def hand_off(self, seconds: float) -> Event:
        """The worker thread picking the collective up (``work_enqueue_latency``)."""
        return self._wait(seconds, ENQUEUE_TAG)

    def straggle(self, seconds: float) -> Event:
        """A straggler issuing the collective ``seconds`` late."""
        return self._wait(seconds, STRAGGLER_TAG)

    def d2h(self, nbytes: float) -> Event:
        """Copy ``nbytes`` from the GPU to pinned host memory; fires on arrival."""
        return self._flow(nbytes, "d2h", latency=self._copy_latency(), tag=D2H_TAG)[1]

    def h2d(self, nbytes: float) -> Event:
        """Copy ``nbytes`` back from pinned host memory to the GPU; fires on arrival."""
        return self._flow(nbytes, "h2d", latency=self._copy_latency(), tag=H2D_TAG)[1]

    def _copy_latency(self) -> float:
        lat = self.costs.copy_latency
        assert lat is not None, "staging copy on a rank that stages nothing"
        return lat

    def send(self, label: str, nbytes: float) -> tuple[Event, Event]:
        """One message of ``nbytes`` on connection ``label`` (Gloo's TCP transport puts a preamble in front)."""
        lat, cap, tag = self.costs.links[label]
        lat += self._jitter("send:" + label)
        role = send_role(label, self.gloo_context)
        return self._flow(nbytes + self.preamble, role, latency=lat, max_rate=cap, tag=tag)

    def reduce(self, nbytes: float) -> Event:
        """Reduce ``nbytes`` of a receive buffer into the local one; fires when done."""
        c = self.costs.compute
        return self._flow(nbytes, "reduce", latency=c.latency, max_rate=c.cap, tag=c.red_tag)[1]

    def copy(self, nbytes: float) -> Event:
        """Copy ``nbytes`` out of a receive buffer; fires when done."""
        c = self.costs.compute
        return self._flow(nbytes, "copy", latency=c.latency, max_rate=c.copy_cap, tag=c.copy_tag)[1]

    def fresh(self, nbytes: float) -> Event:
        """A buffer of ``nbytes`` allocated for this call and written for the first time: from ``fresh_mapping``
        bytes on the allocator maps new pages, each faulting in on its first write (at the CPU preset's
        ``first_touch_bw``); smaller ones are reused heap memory, and a preset without the figure charges nothing.
        Fires when its pages are in."""
        rate = self.costs.compute.touch_cap
        if nbytes < self.fresh_mapping or rate <= 0:
            return self.net.env.timeout(0.0)
        return self._flow(nbytes, "touch", latency=0.0, max_rate=rate, tag=PAGE_FAULT_TAG)[1]

    def notice(self, label: str | None) -> Event:
        """A control message to the peer of ``label`` (None: the rank's default); fires on arrival."""
        links = self.costs.links
        lat = links[label][0] if (self.rdma and label in links) else self.costs.notice_latency
        return self.net.env.timeout(lat + self._jitter(f"notice:{label}"))

    def context(self, board: EventBoard, nranks: int) -> GlooRankContext:
        """The :class:`GlooRankContext` a schedule's body runs in, with this rank's costs."""
        return GlooRankContext(
            board=board,
            me=self.me,
            nranks=nranks,
            rep=self.quotient.rep,
            send=self.send,
            reduce=self.reduce,
            copy=self.copy,
            notice=self.notice,
            fresh=self.fresh,
        )


def _rank_job(
    ops: _RankOps,
    pool: simpy.Resource,
    sched: GlooSchedule,
    board: EventBoard,
    staged: tuple[float, float],
    enqueue: float,
    late: float = 0.0,
    issue: float = 0.0,
    on_thread: Callable[[bool], None] | None = None,
) -> Proc:
    """One rank's part in one collective, as ProcessGroupGloo runs it (a SimPy process).

    Waits for: a free worker thread of the rank (collectives take them in the order they were issued), then
    whatever the schedule waits for (peers' data and notices).
    Pays: the hand-off to the thread (``enqueue`` seconds); with CUDA tensors over TCP the D2H copy of the bytes
    the rank holds (``staged[0]``); the schedule's messages, reductions and copies; then it frees the thread and
    pays the H2D copy of the bytes it receives (``staged[1]``): PyTorch's worker issues the copy back without
    waiting for it (``AsyncWork::run`` copies non-blocking, ``synchronize`` only orders the caller's stream).
    A straggler (``late`` seconds) issues the collective that much later, before asking for a thread; ``issue``
    seconds is when the caller issues it (DDP: when the bucket's gradients are ready), not recorded as an activity.
    ``on_thread`` is told when the rank's worker thread takes the collective (True) and when it frees it (False).
    """
    if issue > 0:
        yield ops.net.env.timeout(issue)
    if late > 0:
        yield ops.straggle(late)
    thread = pool.request()
    if not thread.triggered:  # a free thread is granted at once: yielding it anyway would only reorder events
        yield thread
    if on_thread is not None:
        on_thread(True)
    yield ops.hand_off(enqueue)
    d2h, h2d = staged
    if d2h > 0:
        yield ops.d2h(d2h)
    yield ops.net.env.process(sched.body(ops.context(board, sched.nranks)))
    pool.release(thread)
    if on_thread is not None:
        on_thread(False)
    if h2d > 0:
        yield ops.h2d(h2d)


def _run(
    env: simpy.Environment,
    net: FluidNetwork,
    quotient: Quotient,
    scheds: list[GlooSchedule],
    plan: _Plan,
    opts: GlooOptions,
    consts: GlooConstants,
    background: Sequence[tuple[str, str, float]] = (),
    issue_at: Sequence[float] = (),
) -> tuple[float, int, list[float], list[tuple[float, float]]]:
    """Issue every collective on every representative rank (collective ``k`` at ``issue_at[k]`` seconds, default 0)
    and run until all are done; ``background`` streams (the topology's, :mod:`collsim.backends.background`) send
    meanwhile.

    Returns the completion time (s), the representative that finished last (the lowest on a tie), each
    collective's completion time (s), and when a worker thread first took each collective and first freed it (s:
    the earliest rank's; a thread is freed before the H2D copy back, which runs after it).
    """
    preamble = float(consts.preamble_bytes) if opts.transport == "tcp" else 0.0
    delays = dict(opts.launch_delay)
    reps = [int(rep) for rep in quotient.reps() if not is_background(rep)]  # type: ignore[call-overload]
    pools = {rep: simpy.Resource(env, capacity=opts.threads) for rep in reps}
    by_rank: dict[int, float] = {}
    by_collective = [0.0] * len(scheds)
    taken = [math.inf] * len(scheds)
    freed = [math.inf] * len(scheds)
    done: list[Event] = []

    def finished(rep: int, k: int) -> None:
        by_rank[rep] = max(by_rank.get(rep, 0.0), env.now)
        by_collective[k] = max(by_collective[k], env.now)

    def on_thread(k: int, take: bool) -> None:
        times = taken if take else freed
        times[k] = min(times[k], env.now)

    ops = [
        _RankOps(net, quotient, plan.costs[rep], rep, preamble, opts.transport != "tcp", plan.owners[rep], opts,
                 fresh_mapping=float(consts.fresh_mapping_bytes))
        for rep in reps
    ]
    for k, sched in enumerate(scheds):
        board = EventBoard(env)
        for rank_ops in map(partial(dataclasses.replace, gloo_context=k % opts.interfaces), ops):  # round robin
            rep = rank_ops.me
            if rep in sched.idle:  # a bystander calls nothing: no thread, no copy, no time
                continue
            late = delays.get(rep, 0.0)
            job = _rank_job(
                rank_ops, pools[rep], sched, board, plan.staging[k][rep], consts.work_enqueue_latency, late,
                issue_at[k] if issue_at else 0.0, partial(on_thread, k),
            )  # fmt: skip
            ev = env.process(job)
            ev.callbacks.append(lambda _e, rep=rep, k=k: finished(rep, k))  # type: ignore[misc]
            done.append(ev)
    start_background(env, net, quotient, background, done)
    t = run_until_done(env, done)
    threads = [(a if math.isfinite(a) else e, b if math.isfinite(b) else e)  # a collective no rank calls: its end
               for a, b, e in zip(taken, freed, by_collective, strict=True)]  # fmt: skip
    return t, max(reps, key=lambda r: (by_rank.get(r, 0.0), -r)), by_collective, threads


def _breakdown(net: FluidNetwork, collective: str, opts: GlooOptions, last: Owner, t: float) -> dict[str, float]:
    """Seconds per tag label over ``[0, t]``, adding up to ``t``: the ``last`` rank's, or for collectives whose ranks
    have different jobs every instant goes to the highest-priority activity of any rank (a receiver's wait shows as
    the sender's transfer)."""
    breakdown = attribute_time(
        [r for r in net.records if r.tag is not BACKGROUND_TAG],  # another job's flows are no rank's activity
        None if collective in _MIXED_ROLES else last,
        0.0,
        t,
        BREAKDOWN_PRIORITY,
        latency=LATENCY_TAG["tcp" if opts.transport == "tcp" else "ibverbs"],
        idle=IDLE_TAG,
    )
    return {k: v for k, v in breakdown.items() if v > 0}


def _notes(scheds: list[GlooSchedule], collective: str, opts: GlooOptions, plan: _Plan, ends: list[float]) -> list[str]:
    """What the outcome reports besides the time: the schedules' choices, how reduce_scatter runs, when each of
    several collectives finished (``ends``, s), and the transports used."""
    notes = list(dict.fromkeys(note for s in scheds for note in s.notes))
    if collective == "reduce_scatter":
        notes.append(
            "reduce_scatter on Gloo is a full allreduce of a clone of the input, then a copy of this rank's chunk: "
            "2x the bytes of a true reduce-scatter"
        )
    if len(scheds) > 1:
        done = ", ".join(f"{t / _US:.2f}" for t in ends)
        notes.append(
            f"{len(scheds)} collectives issued at once, {opts.threads} worker thread(s) per rank: done at {done} us"
        )
    tags = sorted({tag.label for c in plan.costs.values() for (_lat, _cap, tag) in c.links.values()})
    if tags:
        notes.append("transport: " + ", ".join(tags))
    return notes
