"""The callback-driven tree (NcclTreeMachine) against the two generators it replaces (nccl_tree_up and
nccl_tree_down): the same schedule, so every rank finishes at the same time, on random trees that are not alike."""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from simpy.events import Event

from collsim.algorithms import EventBoard, RingChunking, SendThen, connection_slots, send_then_of
from collsim.algorithms.nccl_algos import NcclTreeMachine, nccl_tree_down, nccl_tree_up
from collsim.engine import NO_OWNER, UNTAGGED, FluidNetwork


def _tree(
    parents: list[int | None],
    caps: list[float],
    lats: list[float],
    holds: list[float],
    starts: list[float],
    size: float,
    chunking: RingChunking,
    *,
    machine: bool,
    whole: list[bool],
    shared: float,
    log: dict[tuple[int, int], list[list[float]]] | None = None,
    remote: list[bool] | None = None,
) -> tuple[list[float], int]:
    """Each rank's done time and the number of flows. Rank k sends up and down over its own link (caps[k] bytes/s)
    and the receiver's, and a link all share (``shared`` bytes/s), paying lats[k] on arrival and holds[k] after
    every slice; whole[k]: its sends forward whole chunks (a network hop of LL/LL128); remote[k]: the connections
    between k and its parent hold twice the chunking's slots (across the network, connection_slots). ``log`` (the
    machine only) gets, per connection (k, to), each slice's [start, streamed, arrived] times, in order."""
    env = simpy.Environment()
    net = FluidNetwork(env, check=True)
    n = len(parents)
    links = [net.resource(f"l{k}", c) for k, c in enumerate(caps)]
    common = net.resource("shared", shared)
    board = EventBoard(env)
    flows = [0]

    def sender(k: int, to: int) -> Any:
        def send(b: float) -> tuple[Event, Event]:
            flows[0] += 1
            return net.transfer(b, [(links[k], 1.0), (links[to], 0.5), (common, 0.5)], latency=lats[k], hold=holds[k])

        return send

    def then(k: int, to: int) -> SendThen:  # the machine's sender: the engine's calls, no events
        route = net.route([(links[k], 1.0), (links[to], 0.5), (common, 0.5)])
        times = log.setdefault((k, to), []) if log is not None else None

        def send(b: float, fa: Any, a: Any, fs: Any, s: Any) -> None:
            flows[0] += 1
            if times is not None:
                row = [env.now, math.nan, math.nan]
                times.append(row)
                fa, a, fs, s = _logged(row, 2, fa, a), a, _logged(row, 1, fs, s), s
            net.send_then(route, b, lats[k], holds[k], UNTAGGED, NO_OWNER, fa, a, fs, s)

        def _logged(row: list[float], at: int, f: Any, arg: Any) -> Any:
            def call(x: Any) -> None:
                row[at] = env.now
                if f is not None:
                    f(x)

            return call

        return send

    kids = [[c for c, p in enumerate(parents) if p == k] for k in range(n)]
    far = remote or [False] * n

    def args(k: int) -> dict[str, Any]:
        par = parents[k]
        make = then if machine else sender
        return {
            "data_bytes": size,
            "chunking": chunking,
            "send_up": make(k, par) if par is not None else None,
            "send_down": [make(k, c) for c in kids[k]],
        }

    machines = []
    if machine:
        for k in range(n):
            kw = args(k)
            machines.append(
                NcclTreeMachine(
                    board, k, parents[k], kids[k], whole_steps_up=whole[k], whole_steps_down=whole[k],
                    slots_up=connection_slots(chunking.slots, far[k]),
                    slots_down=[connection_slots(chunking.slots, far[c]) for c in kids[k]], **kw
                )
            )

    def launch(k: int) -> Generator[Event, Any, None]:
        yield env.timeout(starts[k])
        if machine:
            machines[k].start()
            return
        kw = args(k)
        up, down = kw.pop("send_up"), kw.pop("send_down")
        env.process(
            nccl_tree_up(
                board, k, parents[k], kids[k], send_up=up, whole_steps=whole[k],
                slots=connection_slots(chunking.slots, far[k]), **kw
            )
        )
        env.process(
            nccl_tree_down(
                board, k, kids[k], send_down=down, whole_steps=whole[k],
                slots=[connection_slots(chunking.slots, far[c]) for c in kids[k]], **kw
            )
        )

    for k in range(n):
        env.process(launch(k))
    ends = [float("nan")] * n
    for k in range(n):
        board.get(k, "done").callbacks.append(lambda _e, k=k: ends.__setitem__(k, env.now))
    env.run()
    return ends, flows[0]


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(2, 7),
    data=st.data(),
    spc=st.integers(1, 3),
    pieces=st.floats(0.3, 5.5),
    shared=st.floats(5e9, 100e9),
)
def test_machine_equals_generators(n: int, data: st.DataObject, spc: int, pieces: float, shared: float) -> None:
    # a random tree: rank k > 0 hangs under one of the ranks before it
    parents: list[int | None] = [None] + [data.draw(st.integers(0, k - 1)) for k in range(1, n)]

    def per(values: st.SearchStrategy[Any]) -> list[Any]:
        return data.draw(st.lists(values, min_size=n, max_size=n))

    caps = per(st.floats(1e9, 50e9))
    lats = per(st.sampled_from([0.0, 1e-6, 3e-6]))
    holds = per(st.sampled_from([0.0, 5e-7, 2e-6]))
    starts = per(st.sampled_from([0.0, 2e-6, 1e-5]))
    whole = per(st.booleans())
    remote = per(st.booleans())
    chunking = RingChunking(65536.0, spc, 8)
    size = pieces * chunking.chunk_bytes
    kw: dict[str, Any] = {"whole": whole, "shared": shared, "remote": remote}
    gen, gen_flows = _tree(parents, caps, lats, holds, starts, size, chunking, machine=False, **kw)
    log: dict[tuple[int, int], list[list[float]]] = {}
    mac, mac_flows = _tree(parents, caps, lats, holds, starts, size, chunking, machine=True, log=log, **kw)
    assert mac_flows == gen_flows
    assert all(t == t for t in gen)  # no deadlock (NaN: a rank never finished)
    assert mac == gen  # bit for bit: the same sends at the same simulated times
    _assert_buffers_hold_slots(parents, log, [connection_slots(chunking.slots, far) for far in remote])


Log = dict[tuple[int, int], list[list[float]]]


def _assert_buffers_hold_slots(parents: list[int | None], log: Log, slots: list[int]) -> None:
    """No connection ever holds more than its slots (``slots[k]``: those between rank k and its parent; NCCL_STEPS,
    twice across the network): a sender starts slice i only once the receiver has consumed slice i - slots. The
    receiver consumes an up slice when it has sent its sum up (the root: down to every child), a down slice when it
    has sent it to every child (a leaf: when it arrived)."""
    kids = {k: [c for c, p in enumerate(parents) if p == k] for k in range(len(parents))}

    def used_up(k: int, j: int) -> float:
        p = parents[k]
        return log[(k, p)][j][1] if p is not None else max(log[(k, c)][j][1] for c in kids[k])

    def used_down(k: int, j: int) -> float:
        p = parents[k]
        return max(log[(k, c)][j][1] for c in kids[k]) if kids[k] else log[(p, k)][j][2]  # type: ignore[index]

    def held(k: int, to: int) -> int:
        return slots[k] if parents[k] == to else slots[to]

    checked = 0
    for (k, to), rows in log.items():
        for i in range(held(k, to), len(rows)):
            j = i - held(k, to)
            free = used_up(to, j) if parents[k] == to else used_down(to, j)
            assert rows[i][0] >= free, (k, to, i, rows[i][0], free)
            checked += 1
    assert checked or all(len(rows) <= held(k, to) for (k, to), rows in log.items())


def test_machine_keeps_no_board_event_per_slice() -> None:
    # a chain of three ranks, 16 slices each: the generators leave an event per slice and dependency on the board,
    # the machines only the three "done" events
    env = simpy.Environment()
    net = FluidNetwork(env)
    link = net.resource("l", 10e9)
    board = EventBoard(env)

    send = send_then_of(lambda b: net.transfer(b, [(link, 1.0)], latency=1e-6))
    chunking = RingChunking(65536.0, 1, 8)
    machines = [
        NcclTreeMachine(
            board, k, k - 1 if k else None, [k + 1] if k < 2 else [], data_bytes=16 * 65536.0, chunking=chunking,
            send_up=send if k else None, send_down=[send] if k < 2 else [],
        )
        for k in range(3)
    ]  # fmt: skip
    for m in machines:
        m.start()
    env.run()
    assert all(board.get(k, "done").processed for k in range(3))
    assert len(board._events) == 3


@pytest.mark.parametrize("machine", [False, True])
@pytest.mark.parametrize("remote", [False, True])
def test_a_network_edge_holds_twice_the_slots(machine: bool, remote: bool) -> None:
    # a root and one child, 32 slices of next to no bytes, 1 us a hop, 8 slots a connection (16 across the
    # network): the child sends slice i once the root has consumed slice i - slots (sent it down, 1 us after the
    # child sent it), so its slices leave in waves of `slots`, 1 us apart: the last wave at (32 / slots - 1) us,
    # up and down again 2 us later
    lat, n = 1e-6, 32
    chunking = RingChunking(65536.0, 1, 8)
    slots = connection_slots(chunking.slots, remote)
    ends, _ = _tree(
        [None, 0], [1e18] * 2, [lat] * 2, [0.0] * 2, [0.0] * 2, n * chunking.chunk_bytes, chunking,
        machine=machine, whole=[False, False], shared=1e18, remote=[False, remote],
    )
    assert ends[1] == pytest.approx((n / slots + 1) * lat, rel=1e-5)
