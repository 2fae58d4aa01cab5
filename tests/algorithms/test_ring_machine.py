"""The callback-driven ring (NcclRingMachine) against the generator it replaces (nccl_ring_allreduce): the same
schedule, so every rank finishes at the same time, on random rings that are not symmetric."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from simpy.events import Event

from collsim.algorithms import (
    EventBoard,
    NcclRingMachine,
    RingChunking,
    SendThen,
    connection_slots,
    nccl_ring_allreduce,
    send_then_of,
)
from collsim.engine import NO_OWNER, UNTAGGED, FluidNetwork


def _ring(
    caps: list[float],
    lats: list[float],
    holds: list[float],
    size: float,
    chunking: RingChunking,
    *,
    machine: bool,
    nsteps: int | None,
    whole_steps: bool,
    shared: float,
    starts: list[float],
    slots: list[int] | None = None,
) -> tuple[list[float], int]:
    """Each rank's done time and the number of flows: rank i sends over its own link (caps[i] bytes/s) and one
    link all ranks share (``shared`` bytes/s), paying lats[i] on arrival and holds[i] after every slice; its
    connection to its successor holds slots[i] slices (None: the chunking's)."""
    n = len(caps)
    env = simpy.Environment()
    net = FluidNetwork(env, check=True)
    links = [net.resource(f"l{i}", c) for i, c in enumerate(caps)]
    common = net.resource("shared", shared)
    board = EventBoard(env)
    flows = [0]

    def sender(i: int) -> Any:
        def send(b: float) -> tuple[Event, Event]:
            flows[0] += 1
            return net.transfer(b, [(links[i], 1.0), (common, 0.5)], latency=lats[i], hold=holds[i])

        return send

    def then(i: int) -> SendThen:  # the machine's sender: the engine's calls, no events
        route = net.route([(links[i], 1.0), (common, 0.5)])

        def send(b: float, fa: Any, a: Any, fs: Any, s: Any) -> None:
            flows[0] += 1
            net.send_then(route, b, lats[i], holds[i], UNTAGGED, NO_OWNER, fa, a, fs, s)

        return send

    def launch(i: int) -> Generator[Event, Any, None]:
        yield env.timeout(starts[i])
        kw: dict[str, Any] = {
            "nranks": n, "data_bytes": size, "chunking": chunking, "send": sender(i), "nsteps": nsteps,
            "whole_steps": whole_steps, "slots": None if slots is None else slots[i],
        }
        if machine:
            machines[i].start()
        else:
            yield from nccl_ring_allreduce(board, i, (i - 1) % n, (i + 1) % n, **kw)

    machines = []
    if machine:
        for i in range(n):
            machines.append(
                NcclRingMachine(
                    board, i, (i - 1) % n, (i + 1) % n, nranks=n, data_bytes=size, chunking=chunking,
                    send=then(i), nsteps=nsteps, whole_steps=whole_steps,
                    slots=None if slots is None else slots[i],
                )
            )
    for i in range(n):
        env.process(launch(i))
    ends = [float("nan")] * n
    for i in range(n):
        board.get(i, "done").callbacks.append(lambda _e, i=i: ends.__setitem__(i, env.now))
    env.run()
    return ends, flows[0]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 6),
    data=st.data(),
    spc=st.integers(1, 3),
    extra=st.integers(0, 4),
    loops=st.floats(0.3, 3.5),
    whole=st.booleans(),
    half=st.booleans(),
    shared=st.floats(5e9, 100e9),
)
def test_machine_equals_generator(
    n: int, data: st.DataObject, spc: int, extra: int, loops: float, whole: bool, half: bool, shared: float
) -> None:
    caps = data.draw(st.lists(st.floats(1e9, 50e9), min_size=n, max_size=n))
    lats = data.draw(st.lists(st.sampled_from([0.0, 1e-6, 3e-6]), min_size=n, max_size=n))
    holds = data.draw(st.lists(st.sampled_from([0.0, 5e-7, 1e-6, 3e-6]), min_size=n, max_size=n))
    starts = data.draw(st.lists(st.sampled_from([0.0, 2e-6, 1e-5]), min_size=n, max_size=n))
    # NCCL_STEPS / slice steps slots: at least two steps' slices (fewer deadlock the generator too); some
    # connections twice that (across the network: connection_slots)
    chunking = RingChunking(65536.0, spc, 2 * spc + extra)
    remote = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    slots = [connection_slots(chunking.slots, far) for far in remote]
    size = loops * n * chunking.chunk_bytes
    nsteps = n - 1 if half else None
    kw: dict[str, Any] = {"nsteps": nsteps, "whole_steps": whole, "shared": shared, "starts": starts, "slots": slots}
    gen, gen_flows = _ring(caps, lats, holds, size, chunking, machine=False, **kw)
    mac, mac_flows = _ring(caps, lats, holds, size, chunking, machine=True, **kw)
    assert mac_flows == gen_flows
    assert all(t == t for t in gen)  # no deadlock (NaN: a rank never finished)
    assert mac == gen  # bit for bit: the same sends at the same simulated times


def test_machine_keeps_no_board_event_per_slice() -> None:
    # 4 ranks, 64 slices each: the generator leaves an event per slice and dependency on the board, the machine
    # only the four "done" events
    chunking = RingChunking(65536.0, 2, 4)
    env = simpy.Environment()
    net = FluidNetwork(env)
    link = net.resource("l", 10e9)
    board = EventBoard(env)
    machines = [
        NcclRingMachine(
            board, i, (i - 1) % 4, (i + 1) % 4, nranks=4, data_bytes=4 * 4 * 65536.0, chunking=chunking,
            send=send_then_of(lambda b: net.transfer(b, [(link, 1.0)], latency=1e-6)),
        )
        for i in range(4)
    ]
    for m in machines:
        m.start()
    env.run()
    assert all(board.get(i, "done").processed for i in range(4))
    assert len(board._events) == 4


@pytest.mark.parametrize("machine", [False, True])
def test_a_network_hop_holds_twice_the_slots_and_the_ring_runs_at_its_chain(machine: bool) -> None:
    # 8 ranks, a few bytes (Simple: 2 slices a step, 4 slots): 7 hops of 1 us and one network hop of 3 us. Every
    # step waits for the predecessor's step before it, so the last of the 14 steps arrives after 14 consecutive
    # hops, the network hop twice among them: 2 x 3 + 12 x 1 = 18 us. With the network connection holding 4 slices
    # (2 steps) its sender also waits, every second step, for its step two back to arrive and be forwarded (3 us
    # a 2 steps, where the chain gives 10 us per 8): slower. With 8 (NCCL's two buffers of NCCL_STEPS across the
    # network) the sender waits for its step four back (3 us a 4 steps, the chain 5 us): the chain's time.
    n, a, big = 8, 1e-6, 3e-6
    lats = [a] * (n - 1) + [big]  # rank 7 sends across the network
    chunking = RingChunking(65536.0, 2, 4)
    kw: dict[str, Any] = {
        "machine": machine, "nsteps": None, "whole_steps": False, "shared": 1e18, "starts": [0.0] * n
    }
    caps, holds, size = [1e18] * n, [0.0] * n, 16.0
    p2p = [chunking.slots] * n
    net = [*p2p[:-1], connection_slots(chunking.slots, True)]
    one, _ = _ring(caps, lats, holds, size, chunking, slots=p2p, **kw)
    two, _ = _ring(caps, lats, holds, size, chunking, slots=net, **kw)
    assert max(two) == pytest.approx(2 * big + 12 * a, rel=1e-6)
    assert max(one) > max(two) + 2 * a
