"""NCCL's other schedules: pipelined chains (broadcast, reduce, send/recv), the double binary tree, and NVLS.

Like :mod:`collsim.algorithms.ring`, each function is one (channel, rank) representative's SimPy process; costs
come from the caller as ``send(nbytes) -> (streamed, arrived)``; dependencies go through an
:class:`~collsim.algorithms.board.EventBoard` keyed by representatives.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Generator, Hashable, Sequence
from typing import Any

from simpy.events import AllOf, Event

from collsim.algorithms.board import EventBoard
from collsim.algorithms.ring import RingChunking, SendThen

__all__ = [
    "NcclNvlsTreeMachine",
    "NcclTreeMachine",
    "nccl_chain",
    "nccl_nvls_allgather",
    "nccl_nvls_reduce_scatter",
    "nccl_nvls_stage",
    "nccl_nvls_tree",
    "nccl_pat",
    "nccl_tree_down",
    "nccl_tree_up",
    "slices",
]

Send = Callable[[float], tuple[Event, Event]]
Proc = Generator[Event, Any, None]


def slices(data_bytes: float, chunking: RingChunking) -> list[float]:
    """Cut one channel's buffer into the slices a pipeline moves: chunks of ``chunk_bytes``, each in
    ``slices_per_chunk`` equal slices (bytes conserved).

    >>> slices(5 * 2**20, RingChunking(2 * 2**20, 2, 4))
    [1048576.0, 1048576.0, 1048576.0, 1048576.0, 524288.0, 524288.0]
    """
    n = max(1, math.ceil(data_bytes / chunking.chunk_bytes))
    out: list[float] = []
    for i in range(n):
        chunk = min(chunking.chunk_bytes, data_bytes - i * chunking.chunk_bytes)
        out += [chunk / chunking.slices_per_chunk] * chunking.slices_per_chunk
    return out


def _post(board: EventBoard, me: Hashable, key: Hashable, send: Send, nbytes: float) -> Event:
    """Start sending ``nbytes`` and post its arrival on the board as ``(me, key)``; return the event that fires
    when it has streamed (the sender is free)."""
    streamed, arrived = send(nbytes)
    board.bind(me, key, arrived)
    return streamed


def _step_end(i: int, nparts: int, chunking: RingChunking, whole_steps: bool) -> int | None:
    """The slice to wait for before sending slice ``i``: ``i`` itself, or with ``whole_steps`` the last slice of
    its chunk at the chunk's first slice and nothing (``None``) at the others (already waited for)."""
    if not whole_steps:
        return i
    spc = chunking.slices_per_chunk
    if i % spc:
        return None
    return min(i + spc - 1, nparts - 1)


def nccl_chain(
    board: EventBoard,
    me: Hashable,
    pred: Hashable | None,
    succ: Hashable | None,
    *,
    data_bytes: float,
    chunking: RingChunking,
    send: Send | None,
    whole_steps: bool = False,
    slots: int | None = None,
) -> Proc:
    """A pipelined chain (NCCL's ring broadcast and reduce, and a send/recv pair).

    Waits for: each slice from the predecessor (none at the head), and a free slot at the successor (the slice sent
    ``slots`` ago forwarded by it, or arrived if it is the tail). Pays: each slice's transfer (``send``), streamed
    back to back; a reduction into the slice (reduce) is fused into the copy and costs no separate time.
    With ``whole_steps`` (a send over the network) a chunk cut in several slices leaves only once all of it is
    here (NCCL's network proxy sends one step at a time, see :func:`~collsim.algorithms.nccl_ring_allreduce`).
    ``slots`` (None: ``chunking.slots``): what the connection to the successor holds
    (:func:`~collsim.algorithms.connection_slots`: twice as much across the network).
    Fires ``(me, ("arr", i))`` when slice ``i`` has reached the successor and ``(me, "done")`` at the end.
    """
    held = chunking.slots if slots is None else slots
    parts = slices(data_bytes, chunking)
    for i, b in enumerate(parts):
        wait = _step_end(i, len(parts), chunking, whole_steps and send is not None)
        if pred is not None and wait is not None:
            yield board.get(pred, ("arr", wait))
        if succ is None or send is None:  # the tail consumes each slice as it arrives
            board.fire(me, ("fwd", i))
            continue
        if i >= held:
            yield board.get(succ, ("fwd", i - held))
        streamed, arrived = send(b)
        board.bind(me, ("arr", i), arrived)
        yield streamed
        board.fire(me, ("fwd", i))
    if succ is not None and send is not None and parts:
        yield board.get(me, ("arr", len(parts) - 1))
    board.fire(me, "done")


def nccl_tree_up(
    board: EventBoard,
    me: Hashable,
    parent: Hashable | None,
    children: Sequence[Hashable],
    *,
    data_bytes: float,
    chunking: RingChunking,
    send_up: Send | None,
    whole_steps: bool = False,
    buffer_slots: bool = True,
    slots: int | None = None,
) -> Proc:
    """Reduce up the tree: per slice, wait for every child's slice and a free slot in the parent's buffer, send the
    (fused) sum to the parent.

    The root, having the full sum of a slice, makes it available to the broadcast down (``(me, ("down", i))``).
    With ``whole_steps`` (the send up crosses the network) a chunk's slices leave only once every child's whole
    chunk is here (one network send per step). With ``buffer_slots`` the parent's buffer holds ``chunking.slots``
    slices (NCCL_STEPS steps, as every NCCL connection): slice ``i`` waits until the parent has consumed slice
    ``i - slots``, i.e. sent its sum on (``(parent, ("cu", i))``: its own send up streamed, at the root its send
    down to every child streamed, :func:`nccl_tree_down`'s ``("cd", i)``); ``slots`` (None: ``chunking.slots``)
    says what the connection to the parent holds instead (:func:`~collsim.algorithms.connection_slots`).
    """
    held = chunking.slots if slots is None else slots
    parts = slices(data_bytes, chunking)
    for i, b in enumerate(parts):
        wait = _step_end(i, len(parts), chunking, whole_steps and send_up is not None)
        for ch in children if wait is not None else ():
            yield board.get(ch, ("up", wait))
        if parent is None or send_up is None:
            board.fire(me, ("down", i))
            if buffer_slots:  # the root's receive buffer frees the slice once it has gone down
                board.bind(me, ("cu", i), board.get(me, ("cd", i)))
            continue
        if buffer_slots and i >= held:
            yield board.get(parent, ("cu", i - held))
        yield _post(board, me, ("up", i), send_up, b)
        if buffer_slots:
            board.fire(me, ("cu", i))


def nccl_tree_down(
    board: EventBoard,
    me: Hashable,
    children: Sequence[Hashable],
    *,
    data_bytes: float,
    chunking: RingChunking,
    send_down: Sequence[Send],
    whole_steps: bool = False,
    buffer_slots: bool = True,
    slots: Sequence[int] | None = None,
) -> Proc:
    """Broadcast down the tree: per slice, wait for it to arrive from the parent (or the root's reduction) and, with
    ``buffer_slots``, for a free slot in every child's buffer (the child consumed slice ``i - slots``: ``(child,
    ("cd", i))``), then send it to every child at once (one connection each). Runs beside :func:`nccl_tree_up`
    (NCCL splits a channel's threads between the two directions). With ``whole_steps`` (a send down crosses the
    network) a chunk's slices leave only once the whole chunk is here. Fires ``(me, ("cd", i))`` when slice ``i``
    is consumed here (sent to every child and streamed; a leaf: arrived) and ``(me, "done")`` when the last slice
    is here and sent. ``slots`` (None: ``chunking.slots`` each) gives what each child's connection holds."""
    held = [chunking.slots] * len(children) if slots is None else list(slots)
    parts = slices(data_bytes, chunking)
    for i, b in enumerate(parts):
        wait = _step_end(i, len(parts), chunking, whole_steps and bool(send_down))
        if wait is not None:
            yield board.get(me, ("down", wait))
        if buffer_slots:
            for ch, h in zip(children, held, strict=True):
                if i >= h:
                    yield board.get(ch, ("cd", i - h))
        streams = []
        for ch, send in zip(children, send_down, strict=True):
            streamed, arrived = send(b)
            board.bind(ch, ("down", i), arrived)
            streams.append(streamed)
        if streams:
            yield AllOf(board.env, streams)
        if buffer_slots:
            board.fire(me, ("cd", i))
    board.fire(me, "done")


class _TreeLanes:
    """What the callback-driven tree machines share: an up lane whose arrivals the parents count per slice, and a
    down lane that sends each slice to every child at once and marks it here at the child.

    A machine registers itself under its class's name in ``board.shared``; the first one of a simulation to start links
    them all (a parent counts its children's shares from the start, its own launch paid or not). A child listed
    twice (a symmetric twin standing for several) is waited for once. Subclasses say when a lane may send
    (:meth:`_step`, which :meth:`_advance` repeats)."""

    __slots__ = (
        "board",
        "busy_down",
        "busy_up",
        "child_keys",
        "children",
        "down_ready",
        "down_to",
        "i_down",
        "i_up",
        "me",
        "n",
        "nchildren",
        "on_up",
        "parts",
        "root",
        "send_down",
        "send_up",
        "started",
        "up_count",
    )

    def __init__(
        self,
        board: EventBoard,
        me: Hashable,
        parent: Hashable | None,
        children: Sequence[Hashable],
        parts: list[float],
        send_up: SendThen | None,
        send_down: Sequence[SendThen],
    ) -> None:
        self.board = board
        self.me = me
        self.child_keys = list(dict.fromkeys(children))
        self.nchildren = len(self.child_keys)
        self.root = parent is None or send_up is None
        self.parts = parts
        self.n = n = len(parts)
        self.send_up = send_up
        self.send_down = list(zip(children, send_down, strict=True))
        self.up_count = _counts(n, self.nchildren)  # per slice: children whose share arrived
        self.down_ready = bytearray(n)  # per slice: here from the parent (or the root's own sum)
        self.i_up = self.i_down = 0  # each lane's next slice
        self.busy_up = False  # the up lane's last send has not streamed yet
        self.busy_down = 0  # sends to children of the current slice not streamed yet
        self.started = False
        self.children: dict[Hashable, _TreeLanes] = {}
        # per child (twice for a twin listed twice): its sender and what the child calls on arrival (set at linking)
        self.down_to: list[tuple[SendThen, Callable[[int], None]]] = []
        self.on_up: list[_TreeLanes] = []  # the machines that count this one's shares: its parents
        board.shared.setdefault(type(self).__qualname__, {})[me] = self

    def start(self) -> None:
        """Begin (the rank has paid its launch): from now on the machine advances on its own."""
        machines: dict[Hashable, _TreeLanes] = self.board.shared[type(self).__qualname__]
        linked = (type(self).__qualname__, "linked")
        if not self.board.shared.get(linked):
            self.board.shared[linked] = True
            for m in machines.values():
                m._link(machines)
        self.started = True
        self._advance()

    def _link(self, machines: dict[Hashable, Any]) -> None:
        self.children = {k: machines[k] for k in self.child_keys}
        self.down_to = [(send, self.children[key]._here) for key, send in self.send_down]
        for c in self.children.values():
            if self not in c.on_up:
                c.on_up.append(self)

    def _advance(self) -> None:
        """Send on every lane that may, until none may."""
        if self.started:
            while self._step():
                pass

    def _step(self) -> bool:
        """Try every lane once; whether any sent (or passed a slice on)."""
        raise NotImplementedError

    def _send_up(self, i: int, b: float, streamed_cb: Callable[[int], None]) -> None:
        """Send ``b`` bytes of slice ``i`` to the parent; ``streamed_cb(i)`` when they have left."""
        assert self.send_up is not None
        self.busy_up = True
        # the calls come later, never at once
        self.send_up(b, self._up_arrived, i, streamed_cb, i)

    def _up_arrived(self, i: int) -> None:
        for m in self.on_up:
            c = m.up_count[i] = m.up_count[i] + 1
            if c == m.nchildren:
                m._up_may_go()

    def _up_may_go(self) -> None:
        """Every child's share of a slice is here: the lanes may go."""
        self._advance()

    def _send_down(self, i: int, b: float) -> None:
        """Send ``b`` bytes of slice ``i`` to every child at once."""
        self.busy_down += len(self.down_to)  # the calls come later, never at once
        streamed = self._down_streamed
        for send, here in self.down_to:
            send(b, here, i, streamed, None)

    def _here(self, i: int) -> None:
        if not self.down_ready[i]:
            self.down_ready[i] = 1
            self._down_may_go()

    def _down_streamed(self, _arg: None) -> None:
        self.busy_down -= 1
        if not self.busy_down:
            self._down_free()

    def _down_free(self) -> None:
        """Every send of the down lane's last slice has streamed."""
        self._down_may_go()

    def _down_may_go(self) -> None:
        """What the down lane waits for changed (a slice here from the parent, the lane free): the lanes may go."""
        self._advance()


class NcclTreeMachine(_TreeLanes):
    """:func:`nccl_tree_up` and :func:`nccl_tree_down` for one entity, driven by callbacks instead of two
    generators: the same sends at the same simulated times, without a SimPy process resume or an
    :class:`EventBoard` event per slice and dependency (which the board kept for the whole run). Its senders are
    :data:`~collsim.engine.SendThen` (called back on arrival and release: no event per send).

    Waits and payments are those of the two generators, which stay the readable reference (the tests run both on
    random trees and compare the times): per slice,

    * up: every child's share of the slice arrived (with ``whole_steps``, at a chunk's first slice the chunk's
      last one, and nothing at its other slices) and a slot free in the parent's buffer (the parent consumed slice
      ``i - slots``: sent it up, at the root down), then ``send_up``; the next slice once this one has streamed. The
      root makes the slice available to its own down lane instead;
    * down: the slice here from the parent or the root's sum (the same rule for ``whole_steps``) and a slot free in
      every child's buffer (the child consumed slice ``i - slots``: sent it down, a leaf: received it), then
      ``send_down`` to every child at once; the next slice once all of them have streamed. Fires
      ``(me, "done")`` on the board when the last slice is here and sent on.

    Create every machine of a simulation before the clock starts, then :meth:`start` each from its process once its
    launch is paid.
    """

    __slots__ = ("chunking", "down_slots", "down_used", "slots", "up_used", "whole_down", "whole_up")

    def __init__(
        self,
        board: EventBoard,
        me: Hashable,
        parent: Hashable | None,
        children: Sequence[Hashable],
        *,
        data_bytes: float,
        chunking: RingChunking,
        send_up: SendThen | None,
        send_down: Sequence[SendThen],
        whole_steps_up: bool = False,
        whole_steps_down: bool = False,
        slots_up: int | None = None,
        slots_down: Sequence[int] | None = None,
    ) -> None:
        super().__init__(board, me, parent, children, _board_slices(board, data_bytes, chunking), send_up, send_down)
        self.chunking = chunking
        # what the connection to the parent holds, and each child's (keyed as ``children``; a twin listed twice
        # has one connection kind): chunking.slots, twice that across the network (connection_slots)
        self.slots = chunking.slots if slots_up is None else slots_up
        held = [chunking.slots] * len(children) if slots_down is None else list(slots_down)
        self.down_slots = dict(zip(children, held, strict=True))
        # per slice: consumed here, its buffer slot free again (NCCL_STEPS slots per connection); the up lane's
        # (children's shares summed and sent up; at the root, sent down), the down lane's (sent to every child; a
        # leaf, received)
        self.up_used = bytearray(self.n)
        self.down_used = bytearray(self.n)
        self.whole_up = whole_steps_up and send_up is not None
        self.whole_down = whole_steps_down and bool(send_down)

    def _step(self) -> bool:
        return self._up() | self._down()

    def _up(self) -> bool:
        i = self.i_up
        if self.busy_up or i >= self.n:
            return False
        w = _step_end(i, self.n, self.chunking, self.whole_up)
        if w is not None and self.up_count[w] < self.nchildren:
            return False
        if not self.root and i >= self.slots:
            old = i - self.slots
            for m in self.on_up:
                if not m.up_used[old]:  # type: ignore[attr-defined]
                    return False
        self.i_up = i + 1
        if self.root:  # the root has the total of the slice: it goes down the tree
            self.down_ready[i] = 1
        else:
            self._send_up(i, self.parts[i], self._up_streamed)
        return True

    def _up_streamed(self, i: int) -> None:
        self.busy_up = False
        self._used_up(i)
        self._advance()

    def _used_up(self, i: int) -> None:
        """Slice ``i`` of the up lane is consumed here: the children's up lanes may find their slot free."""
        self.up_used[i] = 1
        for c in self.children.values():
            c._advance()

    def _used_down(self, i: int) -> None:
        """Slice ``i`` of the down lane is consumed here: the parents' down lanes may find their slot free."""
        self.down_used[i] = 1
        for m in self.on_up:
            m._advance()

    def _down(self) -> bool:
        i = self.i_down
        if self.busy_down or i >= self.n:
            return False
        w = _step_end(i, self.n, self.chunking, self.whole_down)
        if w is not None and not self.down_ready[w]:
            return False
        for key, c in self.children.items():
            old = i - self.down_slots[key]
            if old >= 0 and not c.down_used[old]:  # type: ignore[attr-defined]
                return False
        self.i_down = i + 1
        self._send_down(i, self.parts[i])
        if not self.busy_down:  # a leaf: the slice is consumed as it passes
            self._used_down(i)
            if i + 1 == self.n:
                self.board.fire(self.me, "done")
        return True

    def _down_free(self) -> None:
        i = self.i_down - 1  # every send of this slice has streamed: consumed here
        if self.root:
            self._used_up(i)
        self._used_down(i)
        if self.i_down == self.n:
            self.board.fire(self.me, "done")
        else:
            self._advance()


def nccl_nvls_reduce_scatter(
    board: EventBoard,
    me: Hashable,
    *,
    data_bytes: float,
    chunking: RingChunking,
    send: Send,
    scattered: bool = False,
) -> Proc:
    """NVLS first half: the NVSwitch reduces each slice (multimem loads from every GPU); this rank's share flows
    GPU -> switch for the whole slice and switch -> GPU for its 1/n of the sum (the caller's ``send`` carries both
    coefficients). Waits for a free slot: no more than ``slots`` slices ahead of its own all-gather; with
    ``scattered``, for the slice's local copy into the NVLS buffer instead (``(me, ("sc", i))``, see
    :func:`nccl_local_copies`; that copy waits for the slot)."""
    for i, b in enumerate(slices(data_bytes, chunking)):
        if scattered:
            yield board.get(me, ("sc", i))
        elif i >= chunking.slots:
            yield board.get(me, ("ag", i - chunking.slots))
        yield _post(board, me, ("rs", i), send, b)


def nccl_local_copies(
    board: EventBoard,
    me: Hashable,
    *,
    data_bytes: float,
    chunking: RingChunking,
    send: Send,
    key: str,
    after: str | None = None,
    slot: str | None = None,
    done: bool = False,
) -> Proc:
    """One GPU's local copies of its channel's slices, one after another: the NVLS kernels' scatter group (the
    user's buffer into the NVLS buffers) or gather group (the multicast result out to the user's buffer).

    Waits for: slice ``i - slots``'s ``(me, (slot, ...))`` when ``slot`` is given (a free buffer slot), and
    ``(me, (after, i))`` when ``after`` is given (the data to copy). Pays: ``send`` of the whole slice (at the copy
    group's rate, on no shared resource), the next slice once this one has streamed. Binds ``(me, (key, i))``
    to the copy's arrival: NCCL posts a copied slice once, after every head's part of it is written
    (prims_simple.h ``ScatterGatherOp``), so the next stage waits for the whole slice. With ``done``, fires
    ``(me, "done")`` when the last copy has arrived. (:func:`nccl_nvls_stage` with this GPU as its only peer.)"""
    yield from nccl_nvls_stage(
        board, me, [me], data_bytes=data_bytes, chunking=chunking, send=send, key=key, wait=after, slot=slot,
        done=done,
    )  # fmt: skip


def nccl_nvls_allgather(
    board: EventBoard,
    me: Hashable,
    peers: Sequence[Hashable],
    *,
    data_bytes: float,
    chunking: RingChunking,
    send: Send,
    ready: str = "rs",
    gathered: bool = False,
) -> Proc:
    """NVLS second half: once every rank's share of a slice is ready (``(peer, (ready, i))`` for all ``peers``:
    reduced by the switch, or back from the inter-node tree), the switch multicasts it (GPU -> switch 1/n,
    switch -> every GPU the whole slice). Binds ``(me, ("ag", i))`` to the slice's arrival; fires
    ``(me, "done")`` after the last one unless ``gathered`` (a gather lane copies each slice out and fires it).
    (:func:`nccl_nvls_stage` waiting for ``ready``.)"""
    yield from nccl_nvls_stage(
        board, me, peers, data_bytes=data_bytes, chunking=chunking, send=send, key="ag", wait=ready,
        done=not gathered,
    )  # fmt: skip


def nccl_nvls_stage(
    board: EventBoard,
    me: Hashable,
    peers: Sequence[Hashable],
    *,
    data_bytes: float,
    chunking: RingChunking,
    send: Send,
    key: str,
    wait: str | None = None,
    slot: str | None = None,
    scale: float = 1.0,
    done: bool = False,
) -> Proc:
    """One stage of an NVLS kernel, slice by slice, one send after another: a stage of NCCL's one-node NVLS
    all-gather or reduce-scatter (all_gather.h, reduce_scatter.h ``RunWorkColl<..., NCCL_ALGO_NVLS,
    NCCL_PROTO_SIMPLE>``) over this rank's own share of the channel, and allreduce's multicast
    (:func:`nccl_nvls_allgather`) and local copies (:func:`nccl_local_copies`).

    Waits for: every peer's ``(peer, (wait, i))`` when ``wait`` is given (what the stage consumes: every GPU's
    multicast of slice ``i``, or every GPU's copy of it into the NVLS buffers), and every peer's ``(peer, (slot,
    i - slots))`` when ``slot`` is given (the stage writes into every GPU's NVLS buffer, whose slot is free once that
    slice was consumed everywhere). Pays: ``send`` of ``scale`` x the slice (the gather and scatter copies move every
    rank's slice: ``scale`` = ranks), the next slice once this one has streamed. Binds ``(me, (key, i))`` to the
    slice's arrival; with ``done`` fires ``(me, "done")`` after the last one."""
    parts = slices(data_bytes, chunking)
    last: Event | None = None
    for i, b in enumerate(parts):
        if slot is not None and i >= chunking.slots:
            for p in peers:
                yield board.get(p, (slot, i - chunking.slots))
        if wait is not None:
            for p in peers:
                yield board.get(p, (wait, i))
        streamed, arrived = send(b * scale)
        board.bind(me, (key, i), arrived)
        last = arrived
        if i + 1 < len(parts):  # the stage's own work after the last slice delays nothing
            yield streamed
    if last is not None:
        yield last
    if done:
        board.fire(me, "done")


def nccl_nvls_tree(
    board: EventBoard,
    me: Hashable,
    node_peers: Sequence[Hashable],
    parent: Hashable | None,
    children: Sequence[Hashable],
    *,
    data_bytes: float,
    chunking: RingChunking,
    share: float,
    send_rs: Send,
    send_up: Send | None,
    send_down: Sequence[Send],
    send_ag: Send,
    send_sc: Send | None = None,
    send_ga: Send | None = None,
    tree_peers: Sequence[Hashable] | None = None,
) -> list[Proc]:
    """NVLSTree: NVLS inside each node, a tree of NICs between nodes, NVLS multicast back. Four processes.

    Per slice: (1) the NVSwitch reduces the node's contributions (as :func:`nccl_nvls_reduce_scatter`); (2) once
    every GPU of the node has contributed (``node_peers``), this GPU's ``share`` of the node sum goes up its tree
    to the same GPU of the parent node, after the children's shares arrived; (3) the total comes down the tree and
    is forwarded to the children; (4) once every head of the node (``tree_peers``, default ``node_peers``: the GPUs
    with a share) has its share back, the switch multicasts the slice. Fires ``(me, "done")`` when the last slice's
    multicast has arrived. A GPU that is no head (NCCL's NVLS heads are the NICs' GPUs) has ``share`` 0, no parent
    and no children: it contributes in (1) and receives in (4).

    With ``send_sc`` and ``send_ga`` the kernel's local copies are their own stages (:func:`nccl_local_copies`):
    each slice is copied into the NVLS buffer before (1), and out of it after (4); the buffer slot then waits on
    the copy in, and ``done`` fires when the last copy out has arrived.
    """
    parts = slices(data_bytes, chunking)
    copies = send_sc is not None and send_ga is not None

    def reduce_scatter() -> Proc:
        for i, b in enumerate(parts):
            if copies:
                yield board.get(me, ("sc", i))
            elif i >= chunking.slots:  # the reduced share waits in a buffer of `slots` steps until sent up
                yield board.get(me, ("upsent", i - chunking.slots))
            streamed, arrived = send_rs(b)
            board.bind(me, ("rs", i), arrived)
            yield streamed

    def up() -> Proc:
        for i, b in enumerate(parts):
            for p in node_peers:
                yield board.get(p, ("rs", i))
            for ch in children:
                yield board.get(ch, ("up", i))
            if parent is None or send_up is None:
                board.fire(me, ("down", i))
                board.fire(me, ("upsent", i))
                continue
            streamed, arrived = send_up(b * share)
            board.bind(me, ("up", i), arrived)
            yield streamed
            board.fire(me, ("upsent", i))

    def down() -> Proc:
        for i, b in enumerate(parts):
            yield board.get(me, ("down", i))
            streams = []
            for ch, send in zip(children, send_down, strict=True):
                streamed, arrived = send(b * share)
                board.bind(ch, ("down", i), arrived)
                streams.append(streamed)
            board.fire(me, ("treedone", i))
            if streams:
                yield AllOf(board.env, streams)

    heads = node_peers if tree_peers is None else tree_peers
    allgather = nccl_nvls_allgather(
        board, me, heads, data_bytes=data_bytes, chunking=chunking, send=send_ag, ready="treedone", gathered=copies
    )
    procs = [reduce_scatter(), up(), down(), allgather]
    if send_sc is not None and send_ga is not None:
        procs.append(nccl_local_copies(
            board, me, data_bytes=data_bytes, chunking=chunking, send=send_sc, key="sc", slot="upsent"
        ))  # fmt: skip
        procs.append(nccl_local_copies(
            board, me, data_bytes=data_bytes, chunking=chunking, send=send_ga, key="ga", after="ag", done=True
        ))  # fmt: skip
    return procs


class NcclNvlsTreeMachine(_TreeLanes):
    """:func:`nccl_nvls_tree`'s schedule driven by callbacks instead of four generators: the same sends at the
    same simulated times, without a SimPy process resume or an :class:`EventBoard` event per dependency. Its
    senders are :data:`~collsim.engine.SendThen` (called back on arrival and release: no event per send).

    At scale (every GPU and channel of 1024 GPUs, thousands of slices each) the four generators of each entity
    spend their time resuming, and the board keeps an entry per slice and dependency for the whole run (every GPU
    waits for each of its node's GPUs twice per slice). A machine counts instead, per slice, the node peers whose
    reduce-scatter has arrived, the children whose share has arrived and the node peers that have the slice back
    from the tree, and keeps a flag per slice for its share sent up and the slice here from its parent; a count
    that reaches its total, a flag set or one of its own sends streamed makes it try the lanes that change can let
    go: between callbacks no lane of a machine can send, so a change to what one lane waits for needs that lane
    tried (and those its send lets go), not every lane (:meth:`_step` says which sends let others go).

    Waits and payments are those of :func:`nccl_nvls_tree`, which stays the readable reference (the tests run both
    on random trees, with heads and GPUs that are no heads, and compare the times): per slice,

    * reduce-scatter: a free buffer slot (the share sent up ``slots`` slices ago, or at once at the root), then
      ``send_rs``; the next slice once this one has streamed;
    * up: every node peer's reduce-scatter of the slice arrived and every child's share arrived, then
      ``send_up`` of ``share`` of the slice (the root makes the slice available to its own down lane instead);
    * down: the slice here (from the parent, or the root's own sum), then ``send_down`` to every child at once;
      the next slice once all of them have streamed;
    * all-gather: every head's slice back from the tree (``tree_peers``, default the node peers; each marks it when
      it starts sending it down),
      then ``send_ag``; the next slice once this one has streamed. Fires ``(me, "done")`` on the board when the
      last slice's multicast has arrived;
    * with ``send_sc`` and ``send_ga`` (the kernel's local copies, :func:`nccl_local_copies`): copy in, a free
      buffer slot (as the reduce-scatter's above, which then waits for the slice's copy in instead), then
      ``send_sc``; copy out, the slice's multicast arrived here, then ``send_ga``; each the next slice once this
      one has streamed; ``done`` fires when the last copy out has arrived instead.

    Create every machine of a simulation before the clock starts, then :meth:`start` each from its process once its
    launch is paid. A node peer listed twice (a symmetric twin) is waited for once.
    """

    __slots__ = (
        "ag_here",
        "busy_ag",
        "busy_ga",
        "busy_rs",
        "busy_sc",
        "copies",
        "i_ag",
        "i_ga",
        "i_rs",
        "i_sc",
        "npeers",
        "ntree",
        "on_peer",
        "on_tree_peer",
        "peer_keys",
        "rs_count",
        "sc_done",
        "send_ag",
        "send_ga",
        "send_rs",
        "send_sc",
        "share",
        "slots",
        "tree_count",
        "tree_keys",
        "up_sent",
    )

    def __init__(
        self,
        board: EventBoard,
        me: Hashable,
        node_peers: Sequence[Hashable],
        parent: Hashable | None,
        children: Sequence[Hashable],
        *,
        data_bytes: float,
        chunking: RingChunking,
        share: float,
        send_rs: SendThen,
        send_up: SendThen | None,
        send_down: Sequence[SendThen],
        send_ag: SendThen,
        send_sc: SendThen | None = None,
        send_ga: SendThen | None = None,
        tree_peers: Sequence[Hashable] | None = None,
    ) -> None:
        super().__init__(board, me, parent, children, _board_slices(board, data_bytes, chunking), send_up, send_down)
        self.copies = send_sc is not None and send_ga is not None
        self.send_sc, self.send_ga = send_sc, send_ga
        # per slice (with the copies): copied into the NVLS buffer; its multicast arrived here (flags)
        self.sc_done, self.ag_here = bytearray(self.n), bytearray(self.n)
        self.i_sc = self.i_ga = 0
        self.busy_sc = self.busy_ga = False
        self.peer_keys = list(dict.fromkeys(node_peers))
        self.npeers = len(self.peer_keys)
        self.tree_keys = self.peer_keys if tree_peers is None else list(dict.fromkeys(tree_peers))
        self.ntree = len(self.tree_keys)
        self.slots = chunking.slots
        self.share = share
        self.send_rs, self.send_ag = send_rs, send_ag
        # per slice: node peers whose reduce-scatter arrived, heads with the slice back from the tree (counts); this
        # GPU's share sent up (a flag)
        self.rs_count, self.tree_count = _counts(self.n, self.npeers), _counts(self.n, self.ntree)
        self.up_sent = bytearray(self.n)
        self.i_rs = self.i_ag = 0
        self.busy_rs = self.busy_ag = False
        self.on_peer: list[NcclNvlsTreeMachine] = []  # the machines that have this one as a node peer
        self.on_tree_peer: list[NcclNvlsTreeMachine] = []  # the machines that wait for this one's tree (a head)

    def _link(self, machines: dict[Hashable, Any]) -> None:
        super()._link(machines)
        for k in self.peer_keys:
            if self not in machines[k].on_peer:
                machines[k].on_peer.append(self)
        for k in self.tree_keys:
            if self not in machines[k].on_tree_peer:
                machines[k].on_tree_peer.append(self)

    def start(self) -> None:
        super().start()
        if self.copies:
            self._sc()

    def _step(self) -> bool:
        """Try every lane once, in the order rs, up, down, ag; whether another round may send more.

        Another round is needed only where this one passed a slice without making its lane busy: the root's up
        lane (its next slice, and a buffer slot for the reduce-scatter, tried before it) and a down lane without
        children (its next slice). Any other send makes its lane busy and enables only lanes tried after it in
        the same round (a slice down lets this GPU's own all-gather go), so a second round would send nothing: the
        same sends in the same order as repeating the round until it sends nothing, at half the tries. The copy
        lanes are tried where what they wait for changes (a slot freed, a slice here), not on every step."""
        self._rs()
        again = self._up()
        if self._down() and not self.send_down:
            again = True
        self._ag()
        return again

    def _free_slot(self, i: int) -> bool:
        """Slice ``i`` has a buffer slot: it is among the first ``slots``, or slice ``i - slots`` has gone up."""
        return i < self.slots or bool(self.up_sent[i - self.slots])

    def _sc(self) -> None:
        """Copy the next slice in if the lane is free and the slice has a slot."""
        i = self.i_sc
        if self.busy_sc or i >= self.n or not self._free_slot(i):
            return
        self.i_sc = i + 1
        self.busy_sc = True
        assert self.send_sc is not None
        self.send_sc(self.parts[i], self._sc_arrived, i, self._sc_streamed, None)

    def _sc_arrived(self, i: int) -> None:
        self.sc_done[i] = 1
        if i == self.i_rs:  # the reduce-scatter waits for this slice (no other lane changes: see _rs_streamed)
            self._rs()

    def _sc_streamed(self, _arg: None) -> None:
        self.busy_sc = False
        self._sc()

    def _rs(self) -> bool:
        i = self.i_rs
        if self.busy_rs or i >= self.n or not (self.sc_done[i] if self.copies else self._free_slot(i)):
            return False
        self.i_rs = i + 1
        self.busy_rs = True
        self.send_rs(self.parts[i], self._rs_arrived, i, self._rs_streamed, None)
        return True

    def _rs_arrived(self, i: int) -> None:
        for m in self.on_peer:
            c = m.rs_count[i] = m.rs_count[i] + 1
            if c == m.npeers:
                m._up_may_go()

    def _up_may_go(self) -> None:
        """What the up lane waits for (the node peers' reduce-scatters, the children's shares) is here: below the
        root only that lane may send, and its send enables no other (see :meth:`_rs_streamed`); the root's pass
        may let every lane go."""
        if self.root:
            self._advance()
        elif self.started:
            self._up()

    def _rs_streamed(self, _arg: None) -> None:
        # every callback finds the machine where :meth:`_advance` left it, no lane able to send; this one frees
        # only the reduce-scatter lane, whose send enables no other lane: trying it alone is the same
        self.busy_rs = False
        self._rs()

    def _up(self) -> bool:
        """Send the next slice's share up (or, at the root, pass it down); True only for the root's pass, which
        leaves the lane free (see :meth:`_step`)."""
        i = self.i_up
        if self.busy_up or i >= self.n or self.rs_count[i] < self.npeers or self.up_count[i] < self.nchildren:
            return False
        self.i_up = i + 1
        if self.root:  # the root has the total of the slice: it goes down the tree
            self.down_ready[i] = 1
            self.up_sent[i] = 1
            if self.copies:  # a buffer slot freed
                self._sc()
            return True
        self._send_up(i, self.parts[i] * self.share, self._up_streamed)
        return False

    def _down_may_go(self) -> None:
        """A slice is here from the parent, or the down lane is free: only that lane may send, and its send lets
        only this GPU's all-gather go (tried next, as in a round of :meth:`_step`); a down lane without children
        stays free and may pass the next slice."""
        if not self.started:  # a slice here before the launch is paid: :meth:`start` advances every lane
            return
        while self._down():
            self._ag()
            if self.send_down:
                return
        self._ag()

    _down_free = _down_may_go  # the lane free is the same change here (no frame between them per released slice)

    def _up_streamed(self, i: int) -> None:
        self.busy_up = False
        self.up_sent[i] = 1
        if self.copies:  # a buffer slot freed
            self._sc()
        self._advance()

    def _down(self) -> bool:
        i = self.i_down
        if self.busy_down or i >= self.n or not self.down_ready[i]:
            return False
        self.i_down = i + 1
        self._send_down(i, self.parts[i] * self.share)
        for m in self.on_tree_peer:  # this one's own all-gather: the round tries it next (see _step)
            c = m.tree_count[i] = m.tree_count[i] + 1
            if c == m.ntree and m is not self and m.started:  # only m's all-gather waits for this
                m._ag()
        return True

    def _ag(self) -> bool:
        i = self.i_ag
        if self.busy_ag or i >= self.n or self.tree_count[i] < self.ntree:
            return False
        self.i_ag = i + 1
        if self.copies:  # the copy out of the slice waits for its arrival
            self.busy_ag = True
            self.send_ag(self.parts[i], self._ag_arrived, i, self._ag_streamed, None)
        elif i + 1 < self.n:  # the sender's own work after the last slice delays nothing
            self.busy_ag = True
            self.send_ag(self.parts[i], None, None, self._ag_streamed, None)
        else:
            self.send_ag(self.parts[i], self._last_arrived, None, None, None)
        return True

    def _ag_arrived(self, i: int) -> None:
        self.ag_here[i] = 1
        self._ga()

    def _ga(self) -> None:
        """Copy the next slice out if the lane is free and the slice's multicast has arrived."""
        i = self.i_ga
        if self.busy_ga or i >= self.n or not self.ag_here[i]:
            return
        self.i_ga = i + 1
        assert self.send_ga is not None
        if i + 1 < self.n:  # the copier's own work after the last slice delays nothing
            self.busy_ga = True
            self.send_ga(self.parts[i], None, None, self._ga_streamed, None)
        else:
            self.send_ga(self.parts[i], self._last_arrived, None, None, None)

    def _ga_streamed(self, _arg: None) -> None:
        self.busy_ga = False
        self._ga()

    def _last_arrived(self, _arg: None) -> None:
        self.board.fire(self.me, "done")

    def _ag_streamed(self, _arg: None) -> None:
        self.busy_ag = False  # frees only the all-gather lane, whose send enables no other (see _rs_streamed)
        self._ag()


def _board_slices(board: EventBoard, data_bytes: float, chunking: RingChunking) -> list[float]:
    """:func:`slices` of ``data_bytes``, one list per simulation (``board``) shared by the machines that cut the same
    buffer the same way (read-only to them: every GPU and channel of a collective cuts its buffer alike)."""
    key = ("slices", data_bytes, chunking)
    parts: list[float] | None = board.shared.get(key)
    if parts is None:
        parts = board.shared[key] = slices(data_bytes, chunking)
    return parts


def _counts(n: int, most: int) -> bytearray | array[int]:
    """``n`` counters from 0 that reach at most ``most``: a byte each where that fits."""
    return bytearray(n) if most < 256 else array("I", bytes(4 * n))


def nccl_pat(
    board: EventBoard,
    me: Hashable,
    sources: Sequence[Hashable],
    *,
    sizes: Sequence[float],
    sends: Sequence[Send],
) -> Proc:
    """PAT-style all-gather or reduce-scatter with one GPU per node: ceil(log2 n) exchanges at doubling distance
    (Bruck's pattern, any n); exchange ``k`` sends ``sizes[k]`` bytes to the rank ``2^k`` ahead and receives from
    ``sources[k]``, the rank ``2^k`` behind, so each rank moves (n-1)/n of the buffer in ceil(log2 n) messages.

    Waits for: exchange ``k-1``'s data from its source before exchange ``k`` (it carries it on, reduced or
    gathered). Pays each exchange's transfer and its latency once.
    """
    for k, (b, send) in enumerate(zip(sizes, sends, strict=True)):
        if k > 0:
            yield board.get(sources[k - 1], ("pat", k - 1))
        streamed, arrived = send(b)
        board.bind(me, ("pat", k), arrived)
        yield streamed
    if sources:
        yield board.get(sources[-1], ("pat", len(sources) - 1))
    board.fire(me, "done")
