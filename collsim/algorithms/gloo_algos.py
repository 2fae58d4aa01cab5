"""Gloo's other allreduce algorithms and its other collectives, as SimPy schedules.

Each schedule is one rank's thread of a Gloo algorithm: what it waits for (data from a peer, a peer's notification
that a receive buffer is free, a peer's receive-ready notice) and what it pays, costed by the caller through a
:class:`GlooRankContext`:

* ``send(label, nbytes) -> (streamed, arrived)``: one message on the connection called ``label`` (its peer is
  ``GlooSchedule.peers[rank][label]``); latency is paid once per message, on arrival, and messages on one
  connection leave one after another (:meth:`GlooRankContext.post` queues them);
* ``reduce(nbytes) -> done``: reducing a received buffer into the local one (the CPU for host tensors; the GPU's HBM
  for ibverbs/GPUDirect), done by the rank's own thread after the receive, so it does not overlap that thread's next
  wait, but it does overlap messages already posted;
* ``copy(nbytes) -> done``: a memcpy out of a receive buffer (all-gather phases of the legacy algorithms);
* ``notice(label) -> arrived``: a control message (notification or receive-ready notice) to a peer.

Sources (facts read from pytorch/gloo): ``gloo/allreduce_ring_chunked.h``, ``gloo/allreduce_halving_doubling.h``,
``gloo/allreduce_bcube.h``, ``gloo/allgather.cc``, ``gloo/broadcast.cc``, ``gloo/reduce.cc``, ``gloo/alltoall.cc``.
Gloo's tunable constants (segment size and count, operations in flight, BCube's base) come in a
:class:`~collsim.algorithms.ring.GlooParams` read from ``topologies/software/gloo.yaml``; the algorithms, collectives
and their names are :data:`collsim.vocab.GLOO_ALGORITHMS` and :data:`collsim.vocab.COLLECTIVES`.

Processes run for *representatives* (see :mod:`collsim.engine.symmetry`): every event on the board is keyed by the
representative of the rank that fires it (``ctx.key(rank)``) and by what happened, never by who it was meant for, so
a class of symmetric ranks is simulated once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from simpy.events import Event

from collsim.algorithms.board import EventBoard
from collsim.algorithms.ring import (
    GlooParams,
    gloo_ring_allreduce,
    gloo_ring_receiver,
    gloo_ring_segments,
    merge_segments,
)
from collsim.vocab import COLLECTIVES, GLOO_ALGORITHMS, GLOO_COLLECTIVE_ALGORITHM

__all__ = [
    "GlooParams",
    "GlooRankContext",
    "GlooSchedule",
    "bcube_radices",
    "gloo_schedule",
]

Proc = Generator[Event, Any, None]

#: Chunks per rank of ``AllreduceRingChunked`` and pieces per rank of ``gloo::allgather``: both double-buffer (two
#: inboxes, two operations in flight), which their schedules below are written around, so this is their structure,
#: not a setting (``gloo/allreduce_ring_chunked.h:34`` ``chunks_ = this->contextSize_ * 2``; ``gloo/allgather.cc:62``
#: ``std::array<size_t, 2> chunkSize``, pytorch/gloo 70dc360).
_DOUBLE_BUFFER = 2


def _chain(src: Event, dst: Event) -> None:
    """Fire ``dst`` when ``src`` fires (now, if it already has)."""
    if src.processed:
        if not dst.triggered:
            dst.succeed()
    else:

        def fire(_e: Event) -> None:
            if not dst.triggered:
                dst.succeed()

        src.callbacks.append(fire)


@dataclass
class GlooRankContext:
    """What one (representative) rank can do, with costs supplied by the caller.

    Parameters
    ----------
    board : EventBoard
        Shared named events.
    me : int
        This rank's number (it is its class's representative).
    nranks : int
        Ranks in the collective.
    rep : callable
        Rank number -> its representative (identity without symmetry reduction).
    send : callable
        ``send(label, nbytes) -> (streamed, arrived)``: start a message of ``nbytes`` bytes on connection ``label``
        now (no queueing; use :meth:`post`).
    reduce, copy : callable
        ``f(nbytes) -> done``: reduce / copy ``nbytes`` bytes out of a receive buffer.
    notice : callable
        ``notice(label) -> arrived``: a control message to the peer of ``label`` (``None``: the rank's default).
    fresh : callable, optional
        ``fresh(nbytes) -> done``: a buffer of ``nbytes`` bytes allocated for this call gets its pages (the cost of
        first touching a fresh mapping; None: free).
    """

    board: EventBoard
    me: int
    nranks: int
    rep: Callable[[int], Hashable]
    send: Callable[[str, float], tuple[Event, Event]]
    reduce: Callable[[float], Event]
    copy: Callable[[float], Event]
    notice: Callable[[str | None], Event]
    fresh: Callable[[float], Event] | None = None
    _last: dict[str, Event] = field(default_factory=dict)

    def key(self, rank: int) -> Hashable:
        """The board owner standing for ``rank`` (taken modulo the rank count)."""
        return self.rep(rank % self.nranks)

    def post(self, label: str, nbytes: float, after: Iterable[Event] = ()) -> tuple[Event, Event]:
        """Queue a message on connection ``label``: it starts once every event in ``after`` has fired and the
        previous message on the connection has streamed. Returns ``(streamed, arrived)``."""
        env = self.board.env
        streamed, arrived = Event(env), Event(env)
        waits = list(after)
        prev = self._last.get(label)
        if prev is not None:
            waits.append(prev)
        self._last[label] = streamed

        def go() -> Proc:
            """Waits for: every event in ``after`` and the previous message on the connection to stream. Pays: the
            message, through ``send``."""
            if waits:
                yield env.all_of(waits)
            s, a = self.send(label, nbytes)
            _chain(s, streamed)
            _chain(a, arrived)

        env.process(go())
        return streamed, arrived

    def fire_on(self, what: Hashable, ev: Event) -> None:
        """Fire ``(me, what)`` on the board when ``ev`` fires."""
        self.board.bind(self.me, what, ev)

    def wait(self, rank: int, what: Hashable) -> Event:
        """The board event ``what`` of ``rank``'s representative."""
        return self.board.get(self.key(rank), what)


@dataclass(frozen=True)
class GlooSchedule:
    """One Gloo collective on ``nranks`` ranks: who talks to whom, and each rank's thread.

    Attributes
    ----------
    name : str
        ``collective/algorithm`` (e.g. ``allreduce/halving_doubling``).
    peers : dict
        ``peers[rank][label]`` = the rank this rank sends to on connection ``label``.
    roles : dict
        A structural colour per rank (ranks with different jobs, such as a broadcast root, differ).
    body : callable
        ``body(ctx) -> generator`` for one rank; the rank is done when it returns.
    notes : tuple of str
        What was chosen (segments, chunk counts, bases, folding).
    idle : frozenset of int
        Ranks that take no part (``workload.peers``' bystanders): they call nothing, so nothing of theirs is
        simulated or timed.
    """

    name: str
    nranks: int
    peers: dict[int, dict[str, int]]
    roles: dict[int, Hashable]
    body: Callable[[GlooRankContext], Proc]
    notes: tuple[str, ...] = ()
    idle: frozenset[int] = frozenset()

    def relations(self) -> list[tuple[int, str, int]]:
        """``(rank, label, peer)`` for every connection (for the symmetry refinement)."""
        return [(r, lab, p) for r, d in self.peers.items() for lab, p in sorted(d.items())]


# ---------------------------------------------------------------------------------------- allreduce: ring
def _ring_peers(n: int) -> dict[int, dict[str, int]]:
    """Every rank sends to its right neighbour on connection ``right`` (a single rank has no connection)."""
    return {i: {"right": (i + 1) % n} for i in range(n)} if n > 1 else {0: {}}


def _ring(n: int, nbytes: float, params: GlooParams, max_per_rank: int | None) -> GlooSchedule:
    real = gloo_ring_segments(nbytes, n, params)
    shape = real if max_per_rank is None else merge_segments(real, n, max_per_rank)
    inflight = params.segments_in_flight

    def body(ctx: GlooRankContext) -> Proc:
        """One rank of PyTorch's segmented ring: its sender (:func:`~collsim.algorithms.gloo_ring_allreduce`) and
        receiver (:func:`~collsim.algorithms.gloo_ring_receiver`) side by side.

        Waits for: both to finish (what each waits for and pays: their docstrings). Pays: nothing of its own.
        """
        env = ctx.board.env
        me = ctx.me
        succ, pred = ctx.key(me + 1), ctx.key(me - 1)
        s = env.process(
            gloo_ring_allreduce(
                ctx.board, me, succ, nranks=n, shape=shape, send=lambda b: ctx.send("right", b), inflight=inflight
            )
        )
        r = env.process(
            gloo_ring_receiver(
                ctx.board,
                me,
                pred,
                nranks=n,
                shape=shape,
                reduce=ctx.reduce,
                notice=lambda: ctx.notice("left"),
                inflight=inflight,
            )
        )
        yield s & r

    peers = _ring_peers(n)
    note = f"{real.segments} segments of {real.segment_bytes:.0f} B"
    if shape != real:
        note += f" (simulated as {shape.segments} of {shape.segment_bytes:.0f} B)"
    return _same_role("allreduce/ring", n, peers, body, (note,))


def _nothing(ctx: GlooRankContext) -> Proc:
    """A single rank has nothing to exchange: waits for nothing, pays nothing."""
    return
    yield  # pragma: no cover


def _same_role(name: str, n: int, peers: dict[int, dict[str, int]], body: Any, notes: tuple[str, ...]) -> GlooSchedule:
    """A schedule where every rank plays the same role (a single rank has nothing to exchange)."""
    return GlooSchedule(name, n, peers, dict.fromkeys(range(n), 0), body if n > 1 else _nothing, notes)


# ---------------------------------------------------------------------------------------- allreduce: ring_chunked
def _ring_chunked(n: int, nbytes: float) -> GlooSchedule:
    chunks = _DOUBLE_BUFFER * n
    chunk = nbytes / chunks
    total = 4 * n - 4  # messages each rank sends (and receives): 2P in the first pass, 2P-4 in the second

    def body(ctx: GlooRankContext) -> Proc:
        """One rank of ``AllreduceRingChunked`` (one thread, 2P chunks of S/2P, two inboxes).

        Waits for: before consuming receive ``j`` its arrival from the left; before send ``m >= 2`` (the chunk just
        consumed) the right neighbour's notification ``m-2`` (it has emptied the inbox that send will fill). Pays:
        ``4P-4`` messages of S/2P (``2(P-1)/P * S`` per rank; the first ``2P`` carry partial sums, one lap plus a
        hop, the rest the result), each with its latency once; a CPU reduction of each of the first ``2P-2``
        receives and a copy of each later one, in the thread, before its notification; notifications to the left
        (control messages); a final notification exchange (Gloo's local barrier).
        """
        me = ctx.me
        for m in range(2):
            _s, arr = ctx.post("right", chunk)
            ctx.fire_on(("rc", m), arr)
        for j in range(total):
            yield ctx.wait(me - 1, ("rc", j))
            yield ctx.reduce(chunk) if j < chunks - 2 else ctx.copy(chunk)
            m = j + 2
            if m < total:
                ctx.fire_on(("rcn", j), ctx.notice("left"))
                yield ctx.wait(me + 1, ("rcn", j))
                _s, arr = ctx.post("right", chunk)
                ctx.fire_on(("rc", m), arr)
        # local barrier: one more notification to the left, and wait for the right's
        ctx.fire_on(("rcn", total - 2), ctx.notice("left"))
        yield ctx.wait(me + 1, ("rcn", total - 2))

    return _same_role(
        "allreduce/ring_chunked",
        n,
        _ring_peers(n),
        body,
        (f"{chunks} chunks of {chunk:.0f} B, {total} messages per rank",),
    )


# ---------------------------------------------------------------------------------------- allreduce: halving_doubling
def _halving_doubling(n: int, nbytes: float) -> GlooSchedule:
    k = (n.bit_length() - 1) if n > 1 else 0  # floor(log2 P)
    p2 = 1 << k
    extra = n - p2  # ranks folded into a partner before the power-of-two exchange

    def real(v: int) -> int:
        return 2 * v if v < extra else v + extra

    def virtual(r: int) -> int | None:
        if r < 2 * extra:
            return None if r % 2 else r // 2
        return r - extra

    peers: dict[int, dict[str, int]] = {}
    roles: dict[int, Hashable] = {}
    for r in range(n):
        d: dict[str, int] = {}
        v = virtual(r)
        if v is None:
            d["fold"] = r - 1
            roles[r] = "folded"
        else:
            for s in range(k):
                d[f"hd{s}"] = real(v ^ (1 << s))
            if r < 2 * extra:
                d["unfold"] = r + 1
                roles[r] = "folding"
            else:
                roles[r] = "plain"
        peers[r] = d

    def body(ctx: GlooRankContext) -> Proc:
        """One rank of ``AllreduceHalvingDoubling`` (recursive halving, then recursive doubling).

        Reduce-scatter, step s = 0..log2(P)-1: send S/2^(s+1) to the partner whose rank differs in bit s (the largest
        message to the nearest rank, as Gloo does), wait for the partner's message, reduce it on the CPU, notify the
        partner. All-gather, steps in reverse: wait for the partner's reduce-scatter notification of that step (its
        receive buffer is free), send the S/2^(s+1) this rank owns, wait for the partner's, copy it out, notify.
        Done when every partner has notified the all-gather receive. Pays 2 log2 P messages (latency once each,
        ``2(P-1)/P * S`` bytes) and the reductions in the thread, between steps.

        Non-power-of-two P: ranks are *folded* (the MPICH/Rabenseifner scheme): with P = 2^k + r, each odd rank below
        2r first sends its whole buffer to the even rank below it, which reduces it, takes part in the 2^k exchange,
        and sends the result back. Gloo itself splits the ranks into binary blocks (e.g. 6 = 4 + 2) that exchange
        partial results between the phases; folding costs one extra S each way for the folded pairs instead.
        """
        me = ctx.me
        v = virtual(me)
        if v is None:  # folded: hand the buffer over, then wait for the result
            _st, arr = ctx.post("fold", nbytes)
            ctx.fire_on("folded", arr)
            yield ctx.wait(me - 1, "unfolded")
            yield ctx.copy(nbytes)
            return
        if me < 2 * extra:
            yield ctx.wait(me + 1, "folded")
            yield ctx.reduce(nbytes)
        for s in range(k):
            part = nbytes / (2 << s)
            peer = real(v ^ (1 << s))
            _st, arr = ctx.post(f"hd{s}", part)
            ctx.fire_on(("hrs", s), arr)
            yield ctx.wait(peer, ("hrs", s))
            yield ctx.reduce(part)
            ctx.fire_on(("hrsn", s), ctx.notice(f"hd{s}"))
        for s in reversed(range(k)):
            part = nbytes / (2 << s)
            peer = real(v ^ (1 << s))
            yield ctx.wait(peer, ("hrsn", s))
            _st, arr = ctx.post(f"hd{s}", part)
            ctx.fire_on(("hag", s), arr)
            yield ctx.wait(peer, ("hag", s))
            yield ctx.copy(part)
            ctx.fire_on(("hagn", s), ctx.notice(f"hd{s}"))
        for s in range(k):
            yield ctx.wait(real(v ^ (1 << s)), ("hagn", s))
        if me < 2 * extra:
            _st, arr = ctx.post("unfold", nbytes)
            ctx.fire_on("unfolded", arr)
            yield arr

    notes = [f"{k} halving + {k} doubling steps over {p2} ranks"]
    if extra:
        notes.append(f"{extra} rank(s) folded into a partner first (P={n} is not a power of two)")
    return GlooSchedule("allreduce/halving_doubling", n, peers, roles, body if n > 1 else _nothing, tuple(notes))


# ---------------------------------------------------------------------------------------- allreduce: bcube
def bcube_radices(nranks: int, base: int) -> list[int]:
    """Group sizes of BCube's steps: ``base`` while it divides what is left, then the rest in one step.

    >>> bcube_radices(16, 4), bcube_radices(16, 8), bcube_radices(12, 8), bcube_radices(8, 2)
    ([4, 4], [8, 2], [12], [2, 2, 2])
    """
    if base < 2:
        raise ValueError(f"bcube base must be >= 2, got {base}")
    out: list[int] = []
    left = nranks
    while left > 1:
        if left % base == 0:
            out.append(base)
            left //= base
        else:
            out.append(left)
            left = 1
    return out


def _bcube(n: int, nbytes: float, base: int) -> GlooSchedule:
    radices = bcube_radices(n, base)
    strides = [math.prod(radices[:s]) for s in range(len(radices))]

    def peer(r: int, s: int, j: int) -> int:
        """The rank whose digit s is this rank's plus ``j`` (mod the group size)."""
        g, st = radices[s], strides[s]
        d = (r // st) % g
        return r + (((d + j) % g) - d) * st

    peers = {
        r: {f"bc{s}.{j}": peer(r, s, j) for s in range(len(radices)) for j in range(1, radices[s])} for r in range(n)
    }

    def body(ctx: GlooRankContext) -> Proc:
        """One rank of ``AllreduceBcube``: log_B P steps of reduce-scatter in groups of B, then all-gather back.

        Step s: the rank and the ranks differing from it only in base-B digit s form a group; the rank posts all
        B-1 sends at once (its current share cut in B pieces, one per peer; they share its links), then, peer after
        peer, waits for that peer's piece, reduces it on the CPU and notifies the peer. All-gather, steps in
        reverse: per peer, waits for its reduce-scatter notification, posts the piece this rank owns; then
        receives the peers' pieces and copies them out (notifying after step 0). Done when the step-0 peers have
        notified. Pays 2 sum(B-1) messages, ``2(P-1)/P * S`` bytes, latency once per message.
        """
        me = ctx.me
        share = nbytes
        pieces: list[float] = []
        for s, g in enumerate(radices):
            piece = share / g
            pieces.append(piece)
            for j in range(1, g):
                _st, arr = ctx.post(f"bc{s}.{j}", piece)
                ctx.fire_on(("brs", s, j), arr)
            for j in range(1, g):
                src = peer(me, s, -j)
                yield ctx.wait(src, ("brs", s, j))
                yield ctx.reduce(piece)
                ctx.fire_on(("brsn", s, j), ctx.notice(f"bc{s}.{g - j}"))
            share = piece
        for s in reversed(range(len(radices))):
            g, piece = radices[s], pieces[s]
            for j in range(1, g):
                yield ctx.wait(peer(me, s, j), ("brsn", s, j))
                _st, arr = ctx.post(f"bc{s}.{j}", piece)
                ctx.fire_on(("bag", s, j), arr)
            for j in range(1, g):
                yield ctx.wait(peer(me, s, -j), ("bag", s, j))
                yield ctx.copy(piece)
                if s == 0:
                    ctx.fire_on(("bagn", j), ctx.notice(f"bc0.{g - j}"))
        if radices:
            for j in range(1, radices[0]):
                yield ctx.wait(peer(me, 0, j), ("bagn", j))

    return _same_role(
        "allreduce/bcube",
        n,
        peers,
        body,
        (f"base {base}: {len(radices)} steps in groups of {'x'.join(map(str, radices)) or '1'}",),
    )


# ---------------------------------------------------------------------------------------- other collectives
def _allgather(n: int, nbytes: float) -> GlooSchedule:
    own = nbytes / n
    halves = (own / _DOUBLE_BUFFER, own - own / _DOUBLE_BUFFER)
    ops = _DOUBLE_BUFFER * (n - 1)

    def body(ctx: GlooRankContext) -> Proc:
        """One rank of ``gloo::allgather`` (ring; ``nbytes`` is the whole output, each rank contributes S/P), as
        PyTorch's ProcessGroupGloo runs it.

        Copies its input into the output, then 2(P-1) operations, two in flight: operation i sends half a chunk to
        the right (its own first, then what arrived two operations before) and posts a receive from the left
        (a receive-ready notice to the left; an unbound send waits for it). From i = 2 on it first waits for send
        i-2 and receive i-2 to complete. Pays (P-1)/P * S per rank in 2(P-1) messages, latency once each. Then
        ProcessGroupGloo copies the whole output out of the one flat tensor Gloo filled into the caller's output
        tensors (``AsyncAllgatherWork::allgather``, torch/csrc/distributed/c10d/ProcessGroupGloo.cpp, torch
        2.13: ``newLikeFlat(outputs)``, ``gloo::allgather``, then ``outputs[i][j].copy_(flatOutputTensor[j])``;
        with CUDA tensors into the pinned host chunks before the copy back): S more bytes copied. The flat tensor
        is allocated every call: where it is a fresh mapping its pages fault in as it is first written, paid here
        up front (``ctx.fresh``).
        """
        me = ctx.me
        if ctx.fresh is not None:  # newLikeFlat(outputs): a new tensor every call, filled by the copy and receives
            yield ctx.fresh(nbytes)
        yield ctx.copy(own)
        sends: list[Event] = []
        for i in range(ops):
            if i >= _DOUBLE_BUFFER:
                yield sends[i - _DOUBLE_BUFFER]
                yield ctx.wait(me - 1, ("ag", i - _DOUBLE_BUFFER))
            ctx.fire_on(("agready", i), ctx.notice("left"))
            _st, arr = ctx.post("right", halves[i % _DOUBLE_BUFFER], after=[ctx.wait(me + 1, ("agready", i))])
            ctx.fire_on(("ag", i), arr)
            sends.append(arr)
        for i in range(max(0, ops - _DOUBLE_BUFFER), ops):
            yield sends[i]
            yield ctx.wait(me - 1, ("ag", i))
        yield ctx.copy(nbytes)  # ProcessGroupGloo: the flat output into the output tensors

    return _same_role(f"allgather/{GLOO_COLLECTIVE_ALGORITHM['allgather']}", n, _ring_peers(n), body,
                      (f"{ops} half chunks", "then ProcessGroupGloo copies the flat output into the output tensors"))


def _reduce_scatter_tensor(inner: GlooSchedule, n: int, nbytes: float, tensor_copies: bool) -> GlooSchedule:
    """PyTorch's ``reduce_scatter_tensor`` on Gloo around the allreduce schedule ``inner`` of the whole input.

    ``_reduce_scatter_base`` -> ``reduce_scatter_tensor_coalesced`` (torch/csrc/distributed/c10d/
    ProcessGroupGloo.cpp, torch 2.13): ``inputTensors[i].clone()``, an ``allreduce`` of the clone, and a
    ``LambdaWork`` whose ``wait`` copies this rank's chunk of it into the output.
    """

    def body(ctx: GlooRankContext) -> Proc:
        """One rank: the clone (a new tensor of S bytes, whose pages fault in where it is a fresh mapping, and a
        copy of S), the allreduce of the clone (``inner``: what it waits for and pays), then the copy of S/P into the
        output. Waits for: what the allreduce waits for. With CUDA tensors staged through the host
        (``tensor_copies`` false) the clone and the chunk copy are GPU kernels, not charged here.
        """
        if tensor_copies:
            if ctx.fresh is not None:
                yield ctx.fresh(nbytes)
            yield ctx.copy(nbytes)
        yield ctx.board.env.process(inner.body(ctx))
        if tensor_copies:
            yield ctx.copy(nbytes / n)

    note = ("reduce_scatter_tensor: the input cloned, the clone all-reduced, this rank's chunk copied out"
            if tensor_copies else "reduce_scatter_tensor: the clone all-reduced (clone and chunk copy on the GPU)")
    return GlooSchedule(inner.name.replace("allreduce", "reduce_scatter", 1), n, inner.peers, inner.roles, body,
                        (*inner.notes, note))  # fmt: skip


def _broadcast(n: int, nbytes: float) -> GlooSchedule:
    dim = math.ceil(math.log2(n)) if n > 1 else 0
    peers: dict[int, dict[str, int]] = {}
    roles: dict[int, Hashable] = {}
    plan: dict[int, tuple[int | None, tuple[int, ...]]] = {}
    for v in range(n):
        out = tuple(i for i in range(dim) if v < (1 << i) and v + (1 << i) < n)
        plan[v] = (None if v == 0 else v.bit_length() - 1, out)
        peers[v] = {f"bt{i}": v + (1 << i) for i in out}
        roles[v] = plan[v]

    def body(ctx: GlooRankContext) -> Proc:
        """One rank of ``gloo::broadcast`` from root 0: a binomial tree of whole buffers.

        Iteration i: ranks below 2^i send the whole buffer to rank + 2^i; rank v (2^i <= v < 2^(i+1)) receives from
        v - 2^i. A rank posts its receive first (a receive-ready notice to its parent) and waits for the data; it
        then posts all its sends at once (asynchronous in Gloo: they share its links), each starting when the
        child's notice has arrived, and finally waits for them. Pays ceil(log2 P) hops on the critical path, the
        whole buffer and the latency once per hop.
        """
        me = ctx.me
        recv, sends = plan[me]
        if recv is not None:
            ctx.fire_on(("bready", recv), ctx.notice(None))
            yield ctx.wait(me - (1 << recv), ("bdata", recv))
        done: list[Event] = []
        for i in sends:
            _st, arr = ctx.post(f"bt{i}", nbytes, after=[ctx.wait(me + (1 << i), ("bready", i))])
            ctx.fire_on(("bdata", i), arr)
            done.append(arr)
        yield from done

    return GlooSchedule(
        f"broadcast/{GLOO_COLLECTIVE_ALGORITHM['broadcast']}", n, peers, roles, body if n > 1 else _nothing,
        (f"binomial tree, {dim} rounds",),
    )


def _reduce(n: int, nbytes: float, params: GlooParams) -> GlooSchedule:
    shape = gloo_ring_segments(nbytes, n, params)
    nseg, seg = shape.segments, shape.segment_bytes
    inflight = params.segments_in_flight
    chunk = shape.per_rank * seg

    peers: dict[int, dict[str, int]] = {}
    for r in range(n):
        d = {"left": (r - 1) % n} if n > 1 else {}
        if r != 0:
            d["root"] = 0
        peers[r] = d

    def body(ctx: GlooRankContext) -> Proc:
        """One rank of ``gloo::reduce`` to root 0: a segmented ring reduce-scatter, then every chunk to the root.

        Reduce-scatter towards rank - 1, ``f`` = 2 operations in flight (as ``gloo/reduce.cc``): iteration i >= f
        waits for receive i-f from the right, reduces it on the CPU, and waits for send i-f; iterations below
        ``segments - f`` post a receive (notice to the right) and a send (which waits for the left's notice).
        Then each non-root rank waits for the root's receive-ready notice and sends its reduced chunk (S/P); the
        root posts all P-1 receives at once and waits for them. Pays ``segments - f`` segment messages and the
        reductions of the received ones, then one chunk message per non-root rank, latency once per message.
        """
        me = ctx.me
        sends: list[Event] = []
        for i in range(nseg):
            if i >= inflight:
                yield ctx.wait(me + 1, ("rd", i - inflight))
                yield ctx.reduce(seg)
                yield sends[i - inflight]
            if i < nseg - inflight:
                ctx.fire_on(("rdready", i), ctx.notice(None))
                _st, arr = ctx.post("left", seg, after=[ctx.wait(me - 1, ("rdready", i))])
                ctx.fire_on(("rd", i), arr)
                sends.append(arr)
        if me == 0:
            ctx.fire_on("gready", ctx.notice(None))
            for r in range(1, n):
                yield ctx.wait(r, "gather")
        else:
            _st, arr = ctx.post("root", chunk, after=[ctx.wait(0, "gready")])
            ctx.fire_on("gather", arr)
            yield arr

    return GlooSchedule(
        f"reduce/{GLOO_COLLECTIVE_ALGORITHM['reduce']}",
        n,
        peers,
        {r: r == 0 for r in range(n)},
        body if n > 1 else _nothing,
        (f"{nseg} segments of {seg:.0f} B, then chunks of {chunk:.0f} B to the root",),
    )


def _alltoall(n: int, nbytes: float) -> GlooSchedule:
    block = nbytes / n

    def body(ctx: GlooRankContext) -> Proc:
        """One rank of ``gloo::alltoall``: all P-1 receives and sends posted at once (S/P each), then wait.

        Waits for: each receiver's receive-ready notice before that send starts, then every peer's block and every
        own send to arrive. Pays: a local copy of the own block and P-1 messages of S/P (latency once each), which
        share the rank's links fairly.
        """
        me = ctx.me
        ctx.fire_on("a2aready", ctx.notice(None))
        yield ctx.copy(block)
        done: list[Event] = []
        for i in range(1, n):
            _st, arr = ctx.post(f"a2a{i}", block, after=[ctx.wait(me + i, "a2aready")])
            ctx.fire_on(("a2a", i), arr)
            done.append(arr)
        for i in range(1, n):
            yield ctx.wait(me - i, ("a2a", i))
        yield from done

    peers = {r: {f"a2a{i}": (r + i) % n for i in range(1, n)} for r in range(n)}
    return _same_role(f"alltoall/{GLOO_COLLECTIVE_ALGORITHM['alltoall']}", n, peers, body, (f"{n - 1} sends",))


def _sendrecv(n: int, nbytes: float, src: int = 0, dst: int = 1) -> GlooSchedule:
    if n < 2:
        raise ValueError("sendrecv needs at least 2 ranks")
    if not (0 <= src < n and 0 <= dst < n and src != dst):
        raise ValueError(f"sendrecv's peers must be two different ranks below {n}, got {src} and {dst}")

    def body(ctx: GlooRankContext) -> Proc:
        """Rank ``src`` sends one message of ``nbytes`` to rank ``dst``; others idle.

        Waits for: ``src``, ``dst``'s receive-ready notice; ``dst``, the data. Pays: the notice and the message
        (latency once).
        """
        if ctx.me == dst:
            ctx.fire_on("ready", ctx.notice(None))
            yield ctx.wait(src, "data")
        elif ctx.me == src:
            _st, arr = ctx.post("peer", nbytes, after=[ctx.wait(dst, "ready")])
            ctx.fire_on("data", arr)
            yield arr

    peers = {r: ({"peer": dst} if r == src else {}) for r in range(n)}
    roles: dict[int, Hashable] = {r: 0 if r == src else (1 if r == dst else 2) for r in range(n)}
    idle = frozenset(range(n)) - {src, dst}
    name = f"sendrecv/{GLOO_COLLECTIVE_ALGORITHM['sendrecv']}"
    return GlooSchedule(name, n, peers, roles, body, (f"rank {src} -> rank {dst}",), idle)


#: Collectives whose Gloo function returns before any message for 0 elements, and the function (gloo/allreduce.cc
#: ``allreduce``, gloo/reduce.cc ``reduce``: ``if (opts.elements == 0) return;``); PyTorch's reduce_scatter on Gloo
#: is an allreduce. Gloo's allgather, broadcast, alltoall and send/recv have no such check: they send 0-byte
#: messages.
_RETURN_AT_ONCE_WHEN_EMPTY: dict[str, str] = {
    "allreduce": "allreduce (gloo/allreduce.cc)",
    "reduce_scatter": "allreduce (gloo/allreduce.cc)",
    "reduce": "reduce (gloo/reduce.cc)",
}


def gloo_schedule(
    collective: str,
    algorithm: str,
    nranks: int,
    nbytes: float,
    *,
    params: GlooParams,
    base: int | None = None,
    max_per_rank: int | None = None,
    peers: tuple[int, int] = (0, 1),
    tensor_copies: bool = True,
) -> GlooSchedule:
    """The schedule Gloo runs for ``collective`` of ``nbytes`` bytes on ``nranks`` ranks.

    Parameters
    ----------
    collective : str
        One of :data:`collsim.vocab.COLLECTIVES`. ``reduce_scatter`` is PyTorch's ``reduce_scatter_tensor`` on
        Gloo: the input cloned, the clone all-reduced whole, this rank's chunk copied out
        (:func:`_reduce_scatter_tensor`).
    algorithm : str
        Allreduce algorithm (:data:`collsim.vocab.GLOO_ALGORITHMS`), for ``allreduce`` and ``reduce_scatter``.
    nranks : int
        Ranks (>= 1; ``sendrecv`` needs 2).
    nbytes : float
        Bytes, nccl-tests semantics: per-rank buffer for allreduce, broadcast, reduce, alltoall, sendrecv; the whole
        output (every rank's contribution) for allgather; the whole input for reduce_scatter.
    params : GlooParams
        Gloo's constants (segmentation of the segmented rings, operations in flight, BCube's default base), as
        ``topologies/software/gloo.yaml`` gives them (the backend reads them; this layer reads no YAML).
    base : int, optional
        BCube's group size; default ``params.bcube_base``.
    max_per_rank : int, optional
        Simulation setting: the ring allreduce merges segments beyond this many per rank (see
        :func:`~collsim.algorithms.ring.merge_segments`); None keeps Gloo's segments.
    peers : (int, int)
        sendrecv's sender and receiver ranks (``workload.peers``).
    tensor_copies : bool
        Whether PyTorch's own copies around a collective (reduce_scatter's clone and chunk copy) run where this
        schedule's copies do: true for CPU tensors (and GPU-resident ones); false for CUDA tensors staged through
        the host, where they are GPU kernels.

    Raises
    ------
    ValueError
        For an unknown collective or algorithm (the message names the valid ones).
    """
    if nranks < 1:
        raise ValueError(f"need at least one rank, got {nranks}")
    if nbytes == 0 and collective in _RETURN_AT_ONCE_WHEN_EMPTY:
        note = f"0 elements: Gloo's {_RETURN_AT_ONCE_WHEN_EMPTY[collective]} returns at once (elements == 0)"
        return GlooSchedule(f"{collective}/empty", nranks, {r: {} for r in range(nranks)},
                            dict.fromkeys(range(nranks), 0), _nothing, (note,))  # fmt: skip
    if collective == "reduce_scatter":
        inner = gloo_schedule("allreduce", algorithm, nranks, nbytes, params=params, base=base,
                              max_per_rank=max_per_rank)  # fmt: skip
        return _reduce_scatter_tensor(inner, nranks, nbytes, tensor_copies)
    if collective == "allreduce":
        if algorithm == "ring":
            return _ring(nranks, nbytes, params, max_per_rank)
        if algorithm == "ring_chunked":
            return _ring_chunked(nranks, nbytes)
        if algorithm == "halving_doubling":
            return _halving_doubling(nranks, nbytes)
        if algorithm == "bcube":
            return _bcube(nranks, nbytes, params.bcube_base if base is None else base)
        raise ValueError(f"unknown gloo allreduce algorithm {algorithm!r}; valid: {', '.join(GLOO_ALGORITHMS)}")
    if collective == "allgather":
        return _allgather(nranks, nbytes)
    if collective == "broadcast":
        return _broadcast(nranks, nbytes)
    if collective == "reduce":
        return _reduce(nranks, nbytes, params)
    if collective == "alltoall":
        return _alltoall(nranks, nbytes)
    if collective == "sendrecv":
        return _sendrecv(nranks, nbytes, *peers)
    raise ValueError(f"unknown collective {collective!r}; valid: {', '.join(COLLECTIVES)}")
