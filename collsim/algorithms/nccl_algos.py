"""NCCL's other schedules: pipelined chains (broadcast, reduce, send/recv), the double binary tree, and NVLS.

Like :mod:`collsim.algorithms.ring`, each function is one (channel, rank) representative's SimPy process; costs
come from the caller as ``send(nbytes) -> (streamed, arrived)``; dependencies go through an
:class:`~collsim.algorithms.board.EventBoard` keyed by representatives.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Hashable, Sequence
from typing import Any

from simpy.events import AllOf, Event

from collsim.algorithms.board import EventBoard
from collsim.algorithms.ring import RingChunking

__all__ = [
    "nccl_chain",
    "nccl_nvls_allgather",
    "nccl_nvls_reduce_scatter",
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
) -> Proc:
    """A pipelined chain (NCCL's ring broadcast and reduce, and a send/recv pair).

    Waits for: each slice from the predecessor (none at the head), and a free slot at the successor (the slice sent
    ``slots`` ago forwarded by it, or arrived if it is the tail). Pays: each slice's transfer (``send``), streamed
    back to back; a reduction into the slice (reduce) is fused into the copy and costs no separate time.
    With ``whole_steps`` (a send over the network) a chunk cut in several slices leaves only once all of it is
    here (NCCL's network proxy sends one step at a time, see :func:`~collsim.algorithms.nccl_ring_allreduce`).
    Fires ``(me, ("arr", i))`` when slice ``i`` has reached the successor and ``(me, "done")`` at the end.
    """
    parts = slices(data_bytes, chunking)
    for i, b in enumerate(parts):
        wait = _step_end(i, len(parts), chunking, whole_steps and send is not None)
        if pred is not None and wait is not None:
            yield board.get(pred, ("arr", wait))
        if succ is None or send is None:  # the tail consumes each slice as it arrives
            board.fire(me, ("fwd", i))
            continue
        if i >= chunking.slots:
            yield board.get(succ, ("fwd", i - chunking.slots))
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
) -> Proc:
    """Reduce up the tree: per slice, wait for every child's slice, send the (fused) sum to the parent.

    The root, having the full sum of a slice, makes it available to the broadcast down (``(me, ("down", i))``).
    With ``whole_steps`` (the send up crosses the network) a chunk's slices leave only once every child's whole
    chunk is here (one network send per step).
    """
    parts = slices(data_bytes, chunking)
    for i, b in enumerate(parts):
        wait = _step_end(i, len(parts), chunking, whole_steps and send_up is not None)
        for ch in children if wait is not None else ():
            yield board.get(ch, ("up", wait))
        if parent is None or send_up is None:
            board.fire(me, ("down", i))
            continue
        yield _post(board, me, ("up", i), send_up, b)


def nccl_tree_down(
    board: EventBoard,
    me: Hashable,
    children: Sequence[Hashable],
    *,
    data_bytes: float,
    chunking: RingChunking,
    send_down: Sequence[Send],
    whole_steps: bool = False,
) -> Proc:
    """Broadcast down the tree: per slice, wait for it to arrive from the parent (or the root's reduction), then
    send it to every child at once (one connection each). Runs beside :func:`nccl_tree_up` (NCCL splits a
    channel's threads between the two directions). With ``whole_steps`` (a send down crosses the network) a
    chunk's slices leave only once the whole chunk is here. Fires ``(me, "done")`` when the last slice is here and
    sent."""
    parts = slices(data_bytes, chunking)
    for i, b in enumerate(parts):
        wait = _step_end(i, len(parts), chunking, whole_steps and bool(send_down))
        if wait is not None:
            yield board.get(me, ("down", wait))
        streams = []
        for ch, send in zip(children, send_down, strict=True):
            streamed, arrived = send(b)
            board.bind(ch, ("down", i), arrived)
            streams.append(streamed)
        if streams:
            yield AllOf(board.env, streams)
    board.fire(me, "done")


def nccl_nvls_reduce_scatter(
    board: EventBoard, me: Hashable, *, data_bytes: float, chunking: RingChunking, send: Send
) -> Proc:
    """NVLS first half: the NVSwitch reduces each slice (multimem loads from every GPU); this rank's share flows
    GPU -> switch for the whole slice and switch -> GPU for its 1/n of the sum (the caller's ``send`` carries both
    coefficients). Waits for a free slot: no more than ``slots`` slices ahead of its own all-gather."""
    for i, b in enumerate(slices(data_bytes, chunking)):
        if i >= chunking.slots:
            yield board.get(me, ("ag", i - chunking.slots))
        yield _post(board, me, ("rs", i), send, b)


def nccl_nvls_allgather(
    board: EventBoard,
    me: Hashable,
    peers: Sequence[Hashable],
    *,
    data_bytes: float,
    chunking: RingChunking,
    send: Send,
    ready: str = "rs",
) -> Proc:
    """NVLS second half: once every rank's share of a slice is ready (``(peer, (ready, i))`` for all ``peers``:
    reduced by the switch, or back from the inter-node tree), the switch multicasts it (GPU -> switch 1/n,
    switch -> every GPU the whole slice)."""
    parts = slices(data_bytes, chunking)
    last: Event | None = None
    for i, b in enumerate(parts):
        for p in peers:
            yield board.get(p, (ready, i))
        streamed, arrived = send(b)
        board.bind(me, ("ag", i), arrived)
        last = arrived
        if i + 1 < len(parts):  # the sender's own work after the last slice delays nothing
            yield streamed
    if last is not None:
        yield last
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
) -> list[Proc]:
    """NVLSTree: NVLS inside each node, a tree of NICs between nodes, NVLS multicast back. Four processes.

    Per slice: (1) the NVSwitch reduces the node's contributions (as :func:`nccl_nvls_reduce_scatter`); (2) once
    every GPU of the node has contributed (``node_peers``), this GPU's ``share`` of the node sum goes up its tree
    to the same GPU of the parent node, after the children's shares arrived; (3) the total comes down the tree and
    is forwarded to the children; (4) once every GPU of the node has its share back, the switch multicasts the
    slice. Fires ``(me, "done")`` when the last slice's multicast has arrived.
    """
    parts = slices(data_bytes, chunking)

    def reduce_scatter() -> Proc:
        for i, b in enumerate(parts):
            if i >= chunking.slots:  # the reduced share waits in a buffer of `slots` steps until sent up
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

    allgather = nccl_nvls_allgather(
        board, me, node_peers, data_bytes=data_bytes, chunking=chunking, send=send_ag, ready="treedone"
    )
    return [reduce_scatter(), up(), down(), allgather]


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
