"""The callback-driven NVLSTree (NcclNvlsTreeMachine) against the four generators it replaces (nccl_nvls_tree): the
same schedule, so every GPU finishes at the same time, on random trees of nodes that are not alike, with and without
the kernel's local copies in and out of the NVLS buffers (two more lanes)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from simpy.events import Event

from collsim.algorithms import EventBoard, RingChunking, send_then_of
from collsim.algorithms.nccl_algos import NcclNvlsTreeMachine, nccl_nvls_tree
from collsim.engine import NO_OWNER, UNTAGGED, FluidNetwork

Entity = tuple[int, int]  # (node, GPU index)


def _tree(
    parents: list[int | None],
    ppn: int,
    caps: dict[Entity, float],
    lats: dict[Entity, float],
    holds: dict[Entity, float],
    starts: dict[Entity, float],
    size: float,
    chunking: RingChunking,
    *,
    machine: bool,
    switch: float,
    nic: float,
    copy: dict[Entity, float] | None = None,
    overtake: float = 0.0,
    heads: list[int] | None = None,
) -> tuple[dict[Entity, float], int]:
    """Each GPU's done time and the number of flows. GPU (k, g) sends its NVLS slices over its own NVLink
    (caps[(k, g)] bytes/s) and node k's switch (``switch`` bytes/s, shared by the node's GPUs), its tree hops over
    its own NIC and its parent's or child's (``nic`` bytes/s each), paying lats[(k, g)] on arrival and holds[(k, g)]
    after each NVLS slice; with ``copy``, it copies each slice in and out over its own memory (copy[(k, g)] bytes/s,
    two bytes per byte). With ``overtake``, every other slice sent down the tree pays that much more latency (the
    1st, 3rd, ... of each sender), so the next slice can arrive first (as per-step jitter can make it). With
    ``heads`` only those GPU indices are NVLS heads (NCCL's: the NICs' GPUs): the others have no share and no tree,
    and every GPU's multicast waits for the heads alone."""
    env = simpy.Environment()
    net = FluidNetwork(env, check=True)
    nodes = len(parents)
    ents = [(k, g) for k in range(nodes) for g in range(ppn)]
    link = {e: net.resource(f"nvl{e}", caps[e]) for e in ents}
    nics = {e: net.resource(f"nic{e}", nic) for e in ents}
    switches = [net.resource(f"sw{k}", switch) for k in range(nodes)]
    mems = {e: net.resource(f"mem{e}", 2.0 * copy[e]) for e in ents} if copy is not None else {}
    board = EventBoard(env)
    flows = [0]

    def sender(uses: list[tuple[Any, float]], lat: float, hold: float, extra: float = 0.0) -> Any:
        calls = [0]

        def latency() -> float:  # `extra` more on the sender's 1st, 3rd, ... send
            calls[0] += 1
            return lat + (extra if calls[0] % 2 else 0.0)

        def send(b: float) -> tuple[Event, Event]:
            flows[0] += 1
            return net.transfer(b, uses, latency=latency(), hold=hold)

        def then(b: float, fa: Any, a: Any, fs: Any, s: Any) -> None:  # the machine's: the engine's calls, no events
            flows[0] += 1
            net.send_then(route, b, latency(), hold, UNTAGGED, NO_OWNER, fa, a, fs, s)

        route = net.route(uses)
        return then if machine else send

    kids = {k: [c for c, p in enumerate(parents) if p == k] for k in range(nodes)}
    machines = []

    tree_peers = list(range(ppn)) if heads is None else heads

    def args(e: Entity) -> tuple[list[Any], dict[str, Any]]:
        k, g = e
        head = g in tree_peers
        par = parents[k] if head else None
        sw = switches[k]
        nvls = [(link[e], 1.0), (sw, 1.0 / ppn)]
        tree = sender([(nics[e], 1.0)] + ([(nics[(par, g)], 1.0)] if par is not None else []), lats[e], 0.0)
        down_to = kids[k] if head else []
        downs = [sender([(nics[e], 1.0), (nics[(c, g)], 1.0)], lats[e], 0.0, overtake) for c in down_to]
        pos = [[(k, h) for h in range(ppn)], (par, g) if par is not None else None, [(c, g) for c in down_to]]
        kw = {
            "data_bytes": size, "chunking": chunking, "share": 1.0 / len(tree_peers) if head else 0.0,
            "send_rs": sender(nvls, lats[e], holds[e]),
            "send_up": tree if par is not None else None,
            "send_down": downs,
            "send_ag": sender(nvls, lats[e], holds[e]),
        }  # fmt: skip
        if heads is not None:
            kw["tree_peers"] = [(k, h) for h in heads]
        if mems:
            kw["send_sc"] = sender([(mems[e], 2.0)], 0.0, 0.0)
            kw["send_ga"] = sender([(mems[e], 2.0)], 0.0, 0.0)
        return pos, kw

    def launch(e: Entity, i: int) -> Generator[Event, Any, None]:
        yield env.timeout(starts[e])
        if machine:
            machines[i].start()
            return
        pos, kw = args(e)
        for body in nccl_nvls_tree(board, e, *pos, **kw):
            env.process(body)

    if machine:
        for e in ents:
            pos, kw = args(e)
            machines.append(NcclNvlsTreeMachine(board, e, *pos, **kw))
    for i, e in enumerate(ents):
        env.process(launch(e, i))
    ends = {e: float("nan") for e in ents}
    for e in ents:
        board.get(e, "done").callbacks.append(lambda _e, e=e: ends.__setitem__(e, env.now))
    env.run()
    return ends, flows[0]


@settings(max_examples=80, deadline=None)
@given(
    nodes=st.integers(1, 5),
    ppn=st.integers(1, 3),
    data=st.data(),
    slots=st.integers(1, 4),
    pieces=st.floats(0.3, 6.5),
    switch=st.floats(5e9, 100e9),
    nic=st.floats(2e9, 50e9),
    copies=st.booleans(),
    some_heads=st.booleans(),
)
def test_machine_equals_generators(
    nodes: int, ppn: int, data: st.DataObject, slots: int, pieces: float, switch: float, nic: float, copies: bool,
    some_heads: bool,
) -> None:  # fmt: skip
    # a random tree of nodes: node k > 0 hangs under one of the nodes before it
    parents: list[int | None] = [None] + [data.draw(st.integers(0, k - 1)) for k in range(1, nodes)]
    ents = [(k, g) for k in range(nodes) for g in range(ppn)]

    def per(values: st.SearchStrategy[float]) -> dict[Entity, float]:
        return {e: data.draw(values) for e in ents}

    caps = per(st.floats(1e9, 50e9))
    lats = per(st.sampled_from([0.0, 1e-6, 3e-6]))
    holds = per(st.sampled_from([0.0, 5e-7, 2e-6]))
    starts = per(st.sampled_from([0.0, 2e-6, 1e-5]))
    chunking = RingChunking(65536.0, 1, slots)
    size = pieces * chunking.chunk_bytes
    # NCCL's NVLS heads are the NICs' GPUs: a node with fewer NICs than GPUs has GPUs that are no heads
    heads = sorted(data.draw(st.sets(st.integers(0, ppn - 1), min_size=1))) if some_heads else None
    kw: dict[str, Any] = {"switch": switch, "nic": nic, "copy": per(st.floats(5e9, 80e9)) if copies else None,
                          "heads": heads}  # fmt: skip
    gen, gen_flows = _tree(parents, ppn, caps, lats, holds, starts, size, chunking, machine=False, **kw)
    mac, mac_flows = _tree(parents, ppn, caps, lats, holds, starts, size, chunking, machine=True, **kw)
    assert mac_flows == gen_flows
    assert all(t == t for t in gen.values())  # no deadlock (NaN: a GPU never finished)
    assert mac == gen  # bit for bit: the same sends at the same simulated times


@settings(max_examples=30, deadline=None)
@given(nodes=st.integers(2, 4), ppn=st.integers(1, 2), slots=st.integers(1, 3), pieces=st.floats(2.5, 6.5))
def test_machine_equals_generators_when_slices_overtake(nodes: int, ppn: int, slots: int, pieces: float) -> None:
    # a chain of nodes whose sends down alternate 20 us of extra latency: a slice streams in about 3 us, so the next
    # one arrives first. The machine then has a slice here that is not the next one; when the late one arrives, a
    # GPU without children passes both at once (the loop of _down_may_go), as the generators' rounds do
    parents: list[int | None] = [None, *range(nodes - 1)]
    ents = [(k, g) for k in range(nodes) for g in range(ppn)]
    chunking = RingChunking(65536.0, 1, slots)
    common: dict[str, Any] = {"switch": 50e9, "nic": 25e9, "overtake": 20e-6}
    fixed = ({e: 20e9 for e in ents}, {e: 1e-6 for e in ents}, {e: 0.0 for e in ents}, {e: 0.0 for e in ents})
    size = pieces * chunking.chunk_bytes
    gen, gen_flows = _tree(parents, ppn, *fixed, size, chunking, machine=False, **common)
    mac, mac_flows = _tree(parents, ppn, *fixed, size, chunking, machine=True, **common)
    assert all(t == t for t in gen.values())
    assert (mac, mac_flows) == (gen, gen_flows)


def test_machine_keeps_no_board_event_per_slice() -> None:
    # two nodes of two GPUs, 16 slices each: the generators leave an event per slice and dependency on the board,
    # the machines only the four "done" events
    env = simpy.Environment()
    net = FluidNetwork(env)
    link = net.resource("l", 10e9)
    board = EventBoard(env)

    send = send_then_of(lambda b: net.transfer(b, [(link, 1.0)], latency=1e-6))
    ents = [(k, g) for k in range(2) for g in range(2)]
    machines = [
        NcclNvlsTreeMachine(
            board, (k, g), [(k, 0), (k, 1)], (0, g) if k else None, [] if k else [(1, g)],
            data_bytes=16 * 65536.0, chunking=RingChunking(65536.0, 1, 4), share=0.5,
            send_rs=send, send_up=send if k else None, send_down=[] if k else [send], send_ag=send,
        )
        for k, g in ents
    ]  # fmt: skip
    for m in machines:
        m.start()
    env.run()
    assert all(board.get(e, "done").processed for e in ents)
    assert len(board._events) == 4
