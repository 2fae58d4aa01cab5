"""Ring allreduce schedules: NCCL's pipelined ring and Gloo's segmented ring, as SimPy processes.

Both take the cost of moving data from the caller as functions: ``send(nbytes) -> (streamed, arrived)`` (the sender
is free at ``streamed``; the receiver has the data at ``arrived``) and, for Gloo, ``reduce(nbytes) -> done``. The
schedules know what waits for what; they never know link speeds.

Processes run for *representatives* (see :mod:`collsim.engine.symmetry`): ``pred`` and ``succ`` name the
representatives of the ring predecessor and successor, which may be the process itself when all ranks are alike.

Gloo's constants (segment size, segments per rank, operations in flight) are a :class:`GlooParams`, read from
``topologies/software/gloo.yaml`` where each one cites its line of Gloo.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from simpy.events import Event

from collsim.algorithms.board import EventBoard
from collsim.engine import Callback, SendThen
from collsim.engine.budget import WorkLimitExceeded, current_budget

__all__ = [
    "GlooParams",
    "GlooRingShape",
    "NcclRingMachine",
    "RingChunking",
    "connection_slots",
    "gloo_ring_allreduce",
    "gloo_ring_receiver",
    "gloo_ring_segments",
    "merge_segments",
    "nccl_ring_allreduce",
]

Send = Callable[[float], tuple[Event, Event]]
Reduce = Callable[[float], Event]
Proc = Generator[Event, Any, None]


def send_then_of(send: Send) -> SendThen:
    """A :data:`SendThen` over an event sender: the calls run as the callbacks of ``send``'s events, the arrival's
    first (the order in which a callback-driven schedule appends them, so the two kinds of sender run alike)."""

    def then(b: float, on_arrived: Callback | None, a: Any, on_streamed: Callback | None, s: Any) -> None:
        streamed, arrived = send(b)
        if on_arrived is not None:
            arrived.callbacks.append(lambda _e: on_arrived(a))  # type: ignore[union-attr]
        if on_streamed is not None:
            streamed.callbacks.append(lambda _e: on_streamed(s))  # type: ignore[union-attr]

    return then


def connection_slots(slots: int, net: bool) -> int:
    """Slices a connection holds between the sender's write and the receiver's consumption: ``slots`` (NCCL_STEPS
    over the slice's steps) for a P2P or SHM connection, whose one buffer is the receiver's, twice that across the
    network, where both ends hold NCCL_STEPS steps.

    NCCL's network transport gives the sender a buffer of its own (``src/transport/net.cc`` v2.30.7-1,
    ``sendProxyProgress``: the GPU writes into the send connection's ``localBuff`` and may run NCCL_STEPS steps
    ahead of the proxy's completed sends, ``*sendHead = sub->base + sub->done`` at line 1448), and the proxy's
    ``isend`` of a step goes out once the receiver's proxy has posted a receive for it, which it does up to
    NCCL_STEPS steps ahead of its GPU's consumption (``recvProxyProgress``: ``posted < done + maxDepth``, line 1532).
    So a sender may write 2 x NCCL_STEPS steps beyond what its successor has consumed.

    >>> connection_slots(4, False), connection_slots(4, True)  # Simple's 2-step slices: 4 over NVLink, 8 over IB
    (4, 8)
    """
    return 2 * slots if net else slots


@dataclass(frozen=True)
class RingChunking:
    """How NCCL's ring cuts one channel's data.

    Parameters
    ----------
    chunk_bytes : float
        Data bytes a rank handles per ring step in a full loop (Simple: 4 steps of 512 KiB = 2 MiB).
    slices_per_chunk : int
        Slices a chunk is cut into; each slice is one send (Simple: 2; LL and LL128: 1).
    slots : int
        Slices a sender may have in the receiver's buffer before it must wait (NCCL_STEPS / slice steps): a P2P or
        SHM connection's; one across the network holds twice as many (:func:`connection_slots`).
    slices_per_post : int
        Slices between two posts (the flag store after a step that tells the receiver it is there, and the fence
        before it): 1 when every slice is posted (Simple), ``slices_per_chunk`` for a step cut in pieces (posted
        once, after its last piece).
    steps_per_post : float
        NCCL steps one post stands for: 1, more for merged chunks (each merged step still posts). The sender pays
        its per-step cost that many times at each post.
    latency_steps : float
        NCCL steps whose arrival latency one slice pays: 1, or for a ring whose loops are merged the loops one
        merged loop stands for (a ring's steps form one serial chain, each waiting for the previous step's arrival,
        so a merged step pays the latency of every step it stands for; see ``step_chunking``).
    """

    chunk_bytes: float
    slices_per_chunk: int
    slots: int
    slices_per_post: int = 1
    steps_per_post: float = 1.0
    latency_steps: float = 1.0

    def loops(self, nranks: int, data_bytes: float) -> list[float]:
        """Per-rank chunk size of every loop for ``data_bytes`` on this channel (bytes are conserved).

        >>> RingChunking(2 * 2**20, 2, 4).loops(8, 40 * 2**20)  # 40 MiB: two full loops of 16 MiB, then 8 MiB
        [2097152.0, 2097152.0, 1048576.0]
        """
        loop = nranks * self.chunk_bytes
        n = max(1, math.ceil(data_bytes / loop))
        return [min(loop, data_bytes - i * loop) / nranks for i in range(n)]


def nccl_ring_allreduce(
    board: EventBoard,
    me: Hashable,
    pred: Hashable,
    succ: Hashable,
    *,
    nranks: int,
    data_bytes: float,
    chunking: RingChunking,
    send: Send,
    nsteps: int | None = None,
    whole_steps: bool = False,
    slots: int | None = None,
) -> Proc:
    """One (channel, rank) of NCCL's ring allreduce: reduce-scatter then all-gather, 2(n-1) steps per chunk.

    With ``nsteps = n - 1`` the same schedule is NCCL's ring all-gather or reduce-scatter (``data_bytes`` is then
    the whole buffer of the channel, each rank owning ``1/n`` of every loop).

    Waits for: at step k > 0, the predecessor's slice of step k-1 to arrive (the reduction is fused into the copy
    and overlaps the transfer: it costs no separate time); before each send, a free slot, i.e. the slice sent
    ``slots`` sends ago consumed by the successor (forwarded by its next step, or arrived if it was the last step).
    Pays: each slice's transfer as given by ``send`` (bandwidth while streaming, latency once on arrival); the sender
    streams slices back to back, so latency overlaps later slices.

    With ``whole_steps`` (a send over the network) a step cut in several slices leaves only once all of it is here:
    NCCL's network proxy posts one network send per step, after the GPU has written the whole step (net.cc), so
    step k waits for the predecessor's last slice of step k-1 before its first slice streams.

    ``slots`` (None: ``chunking.slots``) is what this rank's connection to its successor holds: a network
    connection holds twice a P2P one's (:func:`connection_slots`).

    Fires on the board: ``(me, ("arr", loop, step, slice))`` at arrival and ``(me, ("str", ...))`` when streamed,
    and ``(me, "done")`` at the end (last slice arrived).
    """
    nsteps = 2 * (nranks - 1) if nsteps is None else nsteps
    held = chunking.slots if slots is None else slots
    spc = chunking.slices_per_chunk
    order: list[tuple[int, int, int]] = []
    loops = chunking.loops(nranks, data_bytes)
    last_arrival: Event | None = None
    for li, chunk in enumerate(loops):
        slice_bytes = chunk / spc
        for k in range(nsteps):
            for s in range(spc):
                if k > 0 and not (whole_steps and s > 0):
                    yield board.get(pred, ("arr", li, k - 1, spc - 1 if whole_steps else s))
                seq = len(order)
                if seq >= held:
                    l0, k0, s0 = order[seq - held]
                    if k0 < nsteps - 1:
                        yield board.get(succ, ("str", l0, k0 + 1, s0))
                    else:
                        yield board.get(me, ("arr", l0, k0, s0))
                order.append((li, k, s))
                streamed, arrived = send(slice_bytes)
                board.bind(me, ("arr", li, k, s), arrived)
                last_arrival = arrived
                yield streamed
                board.fire(me, ("str", li, k, s))
    # the rank is done when its last slice has arrived and the predecessor's last slice has reached it
    if last_arrival is not None:
        yield last_arrival
    if loops:
        yield board.get(pred, ("arr", len(loops) - 1, nsteps - 1, spc - 1))
    board.fire(me, "done")


class NcclRingMachine:
    """:func:`nccl_ring_allreduce`'s schedule driven by callbacks instead of a generator: the same sends at the
    same times, without a SimPy process resume or an :class:`EventBoard` event per dependency. Its sender is a
    :data:`SendThen` (the network calls the machine back when a slice has streamed and arrived: no event per send).

    At scale (thousands of (channel, rank) entities each sending thousands of slices) the generator spends most of
    its time resuming and the board keeps one event per slice and dependency alive for the whole run. A machine
    keeps two flags per slice it sends (streamed, arrived) and, whenever one of its own sends or a neighbour's
    streams or arrives, checks whether its next send may start. The waits and payments are those of
    :func:`nccl_ring_allreduce`, which stays the readable reference (the tests run both and compare the times).

    Machines of one simulation are found by entity through ``board.shared``; create them with :meth:`create` before
    the clock starts, then start each with :meth:`start` from its process (after the launch latency). The machine
    fires ``(me, "done")`` on the board when it is done, as the generator does.
    """

    __slots__ = (
        "arrived",
        "board",
        "chunking",
        "done",
        "me",
        "nsteps",
        "on_arrive",
        "on_stream",
        "pred",
        "pred_key",
        "send",
        "sending",
        "seq",
        "sizes",
        "slots",
        "spc",
        "started",
        "streamed",
        "succ",
        "succ_key",
        "total",
        "whole_steps",
    )

    def __init__(
        self,
        board: EventBoard,
        me: Hashable,
        pred: Hashable,
        succ: Hashable,
        *,
        nranks: int,
        data_bytes: float,
        chunking: RingChunking,
        send: SendThen,
        nsteps: int | None = None,
        whole_steps: bool = False,
        slots: int | None = None,
    ) -> None:
        self.board = board
        self.me = me
        self.pred_key = pred
        self.succ_key = succ
        self.nsteps = 2 * (nranks - 1) if nsteps is None else nsteps
        self.spc = chunking.slices_per_chunk
        self.chunking = chunking
        self.slots = chunking.slots if slots is None else slots
        self.send = send
        self.whole_steps = whole_steps
        loops = chunking.loops(nranks, data_bytes)
        self.sizes = [chunk / self.spc for chunk in loops]  # slice bytes of each loop
        self.total = len(loops) * self.nsteps * self.spc
        limit, field = current_budget().limit(False)
        if limit is not None and self.total > limit:  # every slice is a flow: stop before allocating its marks
            raise WorkLimitExceeded(self.total, limit, field, 0.0)
        self.streamed = bytearray(self.total)
        self.arrived = bytearray(self.total)
        self.seq = 0  # index of the next slice to send
        self.sending = False  # the slice sent last has not streamed yet
        self.started = False
        self.done = False
        self.pred: NcclRingMachine = self
        self.succ: NcclRingMachine = self
        # machines a slice of this one may unblock: arrived, those it feeds (and itself: its last step's slots, its
        # end); streamed, those whose slots it frees (and itself: its next send)
        self.on_arrive: list[NcclRingMachine] = []
        self.on_stream: list[NcclRingMachine] = []
        machines = board.shared.setdefault(NcclRingMachine, {})
        machines[me] = self

    @classmethod
    def create(cls, board: EventBoard, me: Hashable, pred: Hashable, succ: Hashable, **kw: Any) -> NcclRingMachine:
        """A machine for ``me`` (keyword arguments as :func:`nccl_ring_allreduce`'s), registered on the board."""
        return cls(board, me, pred, succ, **kw)

    def _link(self) -> None:
        machines = self.board.shared[NcclRingMachine]
        self.pred = machines[self.pred_key]
        self.succ = machines[self.succ_key]
        for src, lst in ((self.pred, "on_arrive"), (self.succ, "on_stream"), (self, "on_arrive"), (self, "on_stream")):
            watchers = getattr(src, lst)
            if self not in watchers:
                watchers.append(self)

    def start(self) -> None:
        """Begin sending (the rank has paid its launch): from now on the machine advances on its own."""
        self._link()
        self.started = True
        self._advance()

    def _index(self, li: int, k: int, s: int) -> int:
        return (li * self.nsteps + k) * self.spc + s

    def _ready(self) -> bool:
        """Whether slice ``seq`` may be sent now: the predecessor's data is here and a slot is free."""
        seq, spc, nsteps = self.seq, self.spc, self.nsteps
        k = (seq // spc) % nsteps
        s = seq % spc
        if k > 0 and not (self.whole_steps and s > 0):
            need = seq - spc + (spc - 1 - s if self.whole_steps else 0)  # (li, k - 1, last slice or s)
            if not self.pred.arrived[need]:
                return False
        slots = self.slots
        if seq >= slots:
            old = seq - slots
            k0 = (old // spc) % nsteps
            if k0 < nsteps - 1:
                if not self.succ.streamed[old + spc]:  # (l0, k0 + 1, s0) streamed by the successor
                    return False
            elif not self.arrived[old]:
                return False
        return True

    def _advance(self) -> None:
        if not self.started or self.sending or self.done:
            return
        if self.seq >= self.total:
            last = self.total - 1
            if self.total == 0 or (self.arrived[last] and self.pred.arrived[last]):
                self.done = True
                self.board.fire(self.me, "done")
            return
        if not self._ready():
            return
        seq = self.seq
        size = self.sizes[seq // (self.nsteps * self.spc)]
        self.sending = True
        self.seq = seq + 1
        self.send(size, self._arrive, seq, self._stream, seq)

    def _arrive(self, seq: int) -> None:
        self.arrived[seq] = 1
        for m in self.on_arrive:
            m._advance()

    def _stream(self, seq: int) -> None:
        self.streamed[seq] = 1
        self.sending = False
        for m in self.on_stream:
            m._advance()


@dataclass(frozen=True)
class GlooRingShape:
    """Segments of Gloo's ring allreduce as PyTorch runs it.

    ``segments`` in all (a multiple of the rank count), ``per_rank`` of them in each rank's chunk, ``segment_bytes``
    each (float, so bytes are conserved).
    """

    segments: int
    per_rank: int
    segment_bytes: float


@dataclass(frozen=True)
class GlooParams:
    """Gloo's own algorithm constants, as ``topologies/software/gloo.yaml`` gives them (sources cited there).

    Parameters
    ----------
    max_segment_bytes : float
        Largest segment of the segmented rings (allreduce and reduce), bytes (``kMaxSegmentSize``, 1 MiB).
    min_segments_per_rank : int
        Fewest segments per rank of the segmented rings (2: one in flight while the other is reduced).
    segments_in_flight : int
        Operations the segmented rings keep in flight (2).
    bcube_base : int
        BCube's group size when the caller has no better one (``gloo::Context``'s default base, 2).
    """

    max_segment_bytes: float
    min_segments_per_rank: int
    segments_in_flight: int
    bcube_base: int

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> GlooParams:
        """Read the keys of ``topologies/software/gloo.yaml`` (bytes and counts, no unit conversion)."""
        return cls(
            max_segment_bytes=float(data["max_segment_bytes"]),
            min_segments_per_rank=int(data["min_segments_per_rank"]),
            segments_in_flight=int(data["segments_in_flight"]),
            bcube_base=int(data["bcube_base"]),
        )


def gloo_ring_segments(nbytes: float, nranks: int, params: GlooParams) -> GlooRingShape:
    """Gloo's segmentation of a ring allreduce (``gloo/allreduce.cc``, cited in ``gloo.yaml``).

    numSegments = roundUp(max(ceil(S / M), m * P), P) with M = ``params.max_segment_bytes`` (1 MiB) and
    m = ``params.min_segments_per_rank`` (2), so every rank's chunk has the same number of segments and at least
    ``m`` of them.

    >>> gloo = GlooParams(2**20, 2, 2, 2)  # gloo.yaml: 1 MiB segments, at least 2 per rank, 2 in flight
    >>> gloo_ring_segments(25 * 2**20, 8, gloo)   # 25 MiB on 8 ranks: 32 segments of 800 KiB
    GlooRingShape(segments=32, per_rank=4, segment_bytes=819200.0)
    >>> gloo_ring_segments(100 * 2**20, 2, gloo).segments
    100
    >>> gloo_ring_segments(2**20, 8, GlooParams(2**20, 3, 2, 2)).segments  # 1 MiB, at least 3 segments per rank
    24
    """
    want = max(math.ceil(nbytes / params.max_segment_bytes), params.min_segments_per_rank * nranks)
    segments = math.ceil(want / nranks) * nranks
    return GlooRingShape(segments, segments // nranks, nbytes / segments)


def merge_segments(shape: GlooRingShape, nranks: int, max_per_rank: int) -> GlooRingShape:
    """The same ring with consecutive segments merged so that a rank's chunk has at most ``max_per_rank`` of them
    (a simulation setting: across GPU nodes the ring is bandwidth-bound there and merging moves its time by under
    0.1%; on one CPU host over loopback by up to 0.8%: ``topologies/software/gloo.yaml``). Bytes are conserved.

    >>> gloo = GlooParams(2**20, 2, 2, 2)
    >>> merge_segments(gloo_ring_segments(8 * 2**30, 2, gloo), 2, 16)  # 8 GiB, 2 ranks: 8192 segments -> 32
    GlooRingShape(segments=32, per_rank=16, segment_bytes=268435456.0)
    >>> merge_segments(gloo_ring_segments(2**20, 8, gloo), 8, 16) == gloo_ring_segments(2**20, 8, gloo)
    True
    """
    if shape.per_rank <= max_per_rank:
        return shape
    per = math.ceil(shape.per_rank / math.ceil(shape.per_rank / max_per_rank))
    total = shape.per_rank * nranks * shape.segment_bytes
    return GlooRingShape(per * nranks, per, total / (per * nranks))


def gloo_ring_allreduce(
    board: EventBoard,
    me: Hashable,
    succ: Hashable,
    *,
    nranks: int,
    shape: GlooRingShape,
    send: Send,
    inflight: int,
) -> Proc:
    """One rank's sender side of Gloo's ring allreduce (run :func:`gloo_ring_receiver` beside it).

    Reduce-scatter: ``(P-1)*k`` segment sends; send ``t >= k`` forwards the segment received as ``t-k`` once this rank
    has reduced it. All-gather: ``(P-1)*k`` sends; send ``u >= k`` forwards received segment ``u-k``.
    Waits for: the data to send (own, reduced, or received), the send ``inflight`` before to have arrived
    (:attr:`GlooParams.segments_in_flight`, 2), and the successor's receive-ready notice
    for that segment (an unbound send waits for it).
    Pays: each segment's transfer (``send``), streamed one after another on the connection, and once per message
    its latency (TCP stack, preamble) on arrival.
    """
    k = shape.per_rank
    total = (nranks - 1) * k
    seg = shape.segment_bytes
    for phase in ("rs", "ag"):
        if phase == "ag" and total:  # the all-gather starts when this rank's own chunk is fully reduced
            yield board.get(me, ("red", total - 1))
        for t in range(total):
            if t >= k:
                yield board.get(me, ("red", t - k) if phase == "rs" else ("agarr", t - k))
            if t >= inflight:
                yield board.get(me, (phase + "sent", t - inflight))
            yield board.get(succ, (phase + "ready", t))
            streamed, arrived = send(seg)
            board.bind(me, (phase + "sent", t), arrived)
            yield streamed  # one TCP connection per peer: messages leave in order, one after another
    if total:
        yield board.get(me, ("agsent", total - 1))
    board.fire(me, "sent-all")


def gloo_ring_receiver(
    board: EventBoard,
    me: Hashable,
    pred: Hashable,
    *,
    nranks: int,
    shape: GlooRingShape,
    reduce: Reduce,
    notice: Callable[[], Event],
    inflight: int,
) -> Proc:
    """One rank's receiver side of Gloo's ring allreduce.

    Posts the first ``inflight`` receives at the start of each phase and receive ``t + inflight`` as soon as segment
    ``t`` is reduced (or, in the all-gather, received), telling the predecessor each time.
    Waits for: the predecessor's send ``t`` to arrive; the all-gather waits for this rank's last reduction.
    Pays: in the reduce-scatter a reduction of each received segment (``reduce``), one after another; a control
    message per posted receive (``notice()`` is its latency).
    Fires ``(me, ("red", t))`` and ``(me, ("agarr", u))``, and ``(me, "recv-all")`` at the end. ``inflight``
    is :attr:`GlooParams.segments_in_flight` (2).
    """
    total = (nranks - 1) * shape.per_rank
    seg = shape.segment_bytes
    for phase in ("rs", "ag"):
        if phase == "ag" and total:
            yield board.get(me, ("red", total - 1))
        for t in range(min(inflight, total)):
            board.bind(me, (phase + "ready", t), notice())
        for t in range(total):
            yield board.get(pred, (phase + "sent", t))
            if phase == "rs":
                yield reduce(seg)
                board.fire(me, ("red", t))
            else:
                board.fire(me, ("agarr", t))
            if t + inflight < total:  # the buffer is free again: post the receive `inflight` ahead
                board.bind(me, (phase + "ready", t + inflight), notice())
    board.fire(me, "recv-all")
