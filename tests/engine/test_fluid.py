"""The fluid engine: exact times on tiny cases, and invariants on random flow sets (hypothesis)."""

from __future__ import annotations

import math
from collections.abc import Generator

import pytest
import simpy
from hypothesis import example, given, settings
from hypothesis import strategies as st
from reference_maxmin import MaxMinCheckedNetwork, assert_max_min_fair

from collsim.engine import NO_OWNER, UNTAGGED, Flow, FlowRecord, FluidNetwork, Owner, Resource, Tag, attribute_time
from collsim.engine.fluid import Callback, SendThen


def _run(net: FluidNetwork, env: simpy.Environment, transfers: list[tuple[float, list, dict]]) -> list[float]:
    ends = [math.nan] * len(transfers)
    for i, (size, uses, kw) in enumerate(transfers):
        _s, arrived = net.transfer(size, uses, **kw)
        arrived.callbacks.append(lambda _e, i=i: ends.__setitem__(i, env.now))
    env.run()
    return ends


def test_two_flows_share_a_link_fairly() -> None:
    env = simpy.Environment()
    net = FluidNetwork(env)
    link = net.resource("l", 1e9)
    ends = _run(net, env, [(1e6, [(link, 1.0)], {}), (3e6, [(link, 1.0)], {})])
    # both at 0.5 GB/s until the first finishes at 2 ms, then the second alone at 1 GB/s: 2 MB more
    assert ends == pytest.approx([2e-3, 4e-3], rel=1e-12)


def test_cap_and_latency() -> None:
    env = simpy.Environment()
    net = FluidNetwork(env)
    link = net.resource("l", 10e9)
    ends = _run(net, env, [(1e6, [(link, 1.0)], {"max_rate": 1e9, "latency": 5e-6})])
    assert ends == pytest.approx([1e-3 + 5e-6], rel=1e-12)


@pytest.mark.parametrize("prepared", [False, True], ids=["transfer", "route+send"])
@pytest.mark.parametrize(
    ("latency", "hold"), [(5e-6, 3e-6), (5e-6, 5e-6), (2e-6, 7e-6), (0.0, 4e-6), (3e-6, 0.0), (0.0, 0.0)]
)
def test_hold_delays_the_sender_not_the_arrival(latency: float, hold: float, prepared: bool) -> None:
    # 1 MB at 1 GB/s streams in 1 ms; the sender is free `hold` later, the receiver has it `latency` later, whether
    # the flow goes through transfer() or a prepared route (the fast path, which makes fewer events)
    env = simpy.Environment()
    net = FluidNetwork(env)
    link = net.resource("l", 1e9)
    times: dict[str, float] = {}
    if prepared:
        streamed, arrived = net.send(net.route([(link, 1.0)]), 1e6, latency=latency, hold=hold)
    else:
        streamed, arrived = net.transfer(1e6, [(link, 1.0)], latency=latency, hold=hold)
    streamed.callbacks.append(lambda _e: times.__setitem__("streamed", env.now))
    arrived.callbacks.append(lambda _e: times.__setitem__("arrived", env.now))
    env.run()
    assert times["streamed"] == pytest.approx(1e-3 + hold, rel=1e-12)
    assert times["arrived"] == pytest.approx(1e-3 + latency, rel=1e-12)


@pytest.mark.parametrize("then", ["", "timed_then", "timed_sender_then"], ids=["timed", "timed_then", "sender"])
@pytest.mark.parametrize(
    ("latency", "hold"), [(5e-6, 3e-6), (5e-6, 5e-6), (2e-6, 7e-6), (0.0, 4e-6), (3e-6, 0.0), (0.0, 0.0)]
)
def test_a_timed_transfer_is_a_flow_on_no_resource(latency: float, hold: float, then: str) -> None:
    # 1 MB capped at 1 GB/s on no resource streams 1 ms whatever else runs (a flow on a busy link beside it): the
    # timed transfer gives the times the flow gives, arrival before release when they fall together, and is no flow
    def run(timed: bool) -> tuple[list[tuple[str, float]], int]:
        env = simpy.Environment()
        net = FluidNetwork(env)
        busy = net.resource("busy", 1e8)
        net.transfer(5e5, [(busy, 1.0)])
        log: list[tuple[str, float]] = []
        if timed and then == "timed_then":
            net.timed_then(1e-3, latency, hold, lambda a: log.append((a, env.now)), "arrived",
                           lambda a: log.append((a, env.now)), "streamed")  # fmt: skip
        elif timed and then == "timed_sender_then":  # the size at the cap, with latency and hold bound once
            net.timed_sender_then(1e9, latency, hold)(1e6, lambda a: log.append((a, env.now)), "arrived",
                                                      lambda a: log.append((a, env.now)), "streamed")  # fmt: skip
        else:
            streamed, arrived = net.timed(1e-3, latency, hold) if timed else net.transfer(
                1e6, [], max_rate=1e9, latency=latency, hold=hold)  # fmt: skip
            arrived.callbacks.append(lambda _e: log.append(("arrived", env.now)))
            streamed.callbacks.append(lambda _e: log.append(("streamed", env.now)))
        env.run()
        return log, net.flows

    (timed_log, timed_flows), (flow_log, flow_flows) = run(True), run(False)
    assert [k for k, _ in timed_log] == [k for k, _ in flow_log]
    assert [t for _, t in timed_log] == pytest.approx([t for _, t in flow_log], rel=1e-12)
    assert dict(timed_log) == pytest.approx({"arrived": 1e-3 + latency, "streamed": 1e-3 + hold}, rel=1e-12)
    assert (timed_flows, flow_flows) == (1, 2)


def test_hold_paces_a_sender_of_back_to_back_messages() -> None:
    # a sender that waits for `streamed` before its next message pays the hold once per message: the last message
    # leaves at 4 ms + 3 holds and arrives 5 us later
    env = simpy.Environment()
    net = FluidNetwork(env)
    link = net.resource("l", 1e9)

    def sender() -> Generator[simpy.Event, None, None]:
        for _ in range(4):
            streamed, _arrived = net.transfer(1e6, [(link, 1.0)], latency=5e-6, hold=3e-6)
            yield streamed

    env.process(sender())
    env.run()
    assert env.now == pytest.approx(4e-3 + 3 * 3e-6 + 5e-6, rel=1e-12)


def test_coefficient_counts_wire_overhead() -> None:
    # NCCL LL puts 16 wire bytes per 8 data bytes: coefficient 2 halves the data rate
    env = simpy.Environment()
    net = FluidNetwork(env)
    link = net.resource("l", 1e9)
    assert _run(net, env, [(1e6, [(link, 2.0)], {})]) == pytest.approx([2e-3], rel=1e-12)


def test_max_min_not_proportional() -> None:
    # flow A crosses l1 (1 GB/s) and l2 (10 GB/s); B crosses l2 only: A gets 1, B gets the 9 left
    env = simpy.Environment()
    net = FluidNetwork(env, check=True)
    l1, l2 = net.resource("l1", 1e9), net.resource("l2", 10e9)
    ends = _run(net, env, [(1e6, [(l1, 1.0), (l2, 1.0)], {}), (9e6, [(l2, 1.0)], {})])
    assert ends == pytest.approx([1e-3, 1e-3], rel=1e-9)


def test_flow_started_later_does_not_finish_others_early() -> None:
    # regression: a wake-up armed for flow A must not complete A when flow B starts before it
    env = simpy.Environment()
    net = FluidNetwork(env)
    link = net.resource("l", 1e9)
    ends: dict[str, float] = {}
    _s, a = net.transfer(1e6, [(link, 1.0)])
    a.callbacks.append(lambda _e: ends.setdefault("a", env.now))

    def later(env: simpy.Environment):  # type: ignore[no-untyped-def]
        yield env.timeout(0.5e-3)
        _s2, b = net.transfer(1e6, [(link, 1.0)])
        b.callbacks.append(lambda _e: ends.setdefault("b", env.now))

    env.process(later(env))
    env.run()
    # A alone 0.5 ms (0.5 MB), then both at 0.5 GB/s: A's last 0.5 MB takes 1 ms -> 1.5 ms; B's rest alone
    assert ends["a"] == pytest.approx(1.5e-3, rel=1e-12)
    assert ends["b"] == pytest.approx(2.0e-3, rel=1e-12)


def test_flows_due_together_finish_in_the_order_they_were_queued() -> None:
    # eight flows on eight links, equal sizes: one finish time, one queue entry per flow under it; they finish in
    # the order they started (the order their rates were queued), and each exactly once
    env = simpy.Environment()
    net = FluidNetwork(env)
    order: list[int] = []
    for i in (3, 1, 7, 0, 6, 2, 5, 4):
        link = net.resource(f"l{i}", 1e9)
        _s, arrived = net.transfer(1e6, [(link, 1.0)])
        arrived.callbacks.append(lambda _e, i=i: order.append(i))
    env.run()
    assert order == [3, 1, 7, 0, 6, 2, 5, 4]
    assert env.now == pytest.approx(1e-3, rel=1e-12)


def test_a_flow_queued_twice_for_its_finish_time_finishes_once() -> None:
    # a re-rating that lands on the time the flow was already queued for adds a second entry to that time's list;
    # the flow finishes once, in its place, and its signature's table is left empty
    env = simpy.Environment()
    net = FluidNetwork(env)
    link = net.resource("l", 1e9)
    ends: list[str] = []
    for name, size in (("a", 1e6), ("b", 2e6)):
        _s, arrived = net.transfer(size, [(link, 1.0)], latency=1e-6)
        arrived.callbacks.append(lambda _e, name=name: ends.append(name))
    env.run(until=1e-4)
    first = net.active[0]
    net._rerate_all([first], env.now, first.rate)  # the same rate now: the same finish time, queued again
    assert sum(f is first for bucket in net._due.values() for f in bucket) == 2
    env.run()
    assert ends == ["a", "b"]
    assert env.now == pytest.approx(3e-3 + 1e-6, rel=1e-12)  # 1 MB each at 0.5 GB/s, then 1 MB alone
    assert net.active == [] and net.flows == 2


class _CountingEnv(simpy.Environment):
    """A clock that counts the entries pushed on its queue, and the timeouts among them."""

    def __init__(self) -> None:
        super().__init__()
        self.pushed = 0
        self.timeouts = 0

    def schedule(self, event, priority=1, delay=0):  # type: ignore[no-untyped-def,override]
        self.pushed += 1
        self.timeouts += isinstance(event, simpy.Timeout)
        super().schedule(event, priority, delay)


def test_events_due_together_share_one_queue_entry() -> None:
    # 100 flows on 100 links finish together and arrive together: the engine's own events (each flow's done and
    # arrival) wait behind one queue entry per time, not one each
    env = _CountingEnv()
    net = FluidNetwork(env)
    arrivals: list[float] = []
    for i in range(100):
        _s, arrived = net.transfer(1e6, [(net.resource(f"l{i}", 1e9), 1.0)], latency=2e-6)
        arrived.callbacks.append(lambda _e: arrivals.append(env.now))
    env.run()
    assert arrivals == [pytest.approx(1e-3 + 2e-6, rel=1e-12)] * 100
    # the solve at 0, one wake-up, the update after the finish and one batch for each of the two times
    assert env.pushed <= 6, env.pushed


def test_run_until_an_event_of_a_batch() -> None:
    # `env.run(until=ev)` stops at an engine event that shares its time with others; the rest still run after
    env = simpy.Environment()
    net = FluidNetwork(env)
    seen: list[str] = []
    events = {}
    for name in "abc":
        _s, events[name] = net.transfer(1e6, [(net.resource(name, 1e9), 1.0)], latency=1e-6)
        events[name].callbacks.append(lambda _e, name=name: seen.append(name))  # type: ignore[misc]
    env.run(until=events["b"])
    assert seen == ["a", "b"] and env.now == pytest.approx(1e-3 + 1e-6, rel=1e-12)
    env.run()
    assert seen == ["a", "b", "c"]


_TIMINGS = [(0.0, 0.0), (0.0, 4e-6), (3e-6, 0.0), (5e-6, 5e-6), (5e-6, 3e-6), (2e-6, 7e-6)]


@settings(max_examples=80, deadline=None)
@given(
    plan=st.lists(
        st.tuples(st.sampled_from([0.0, 2e5, 1e6]), st.integers(0, 2), st.sampled_from(_TIMINGS), st.booleans()),
        min_size=1,
        max_size=8,
    ),
)
def test_send_then_calls_as_the_events_callbacks_run(plan: list[tuple[float, int, tuple[float, float], bool]]) -> None:
    # the same flows sent with events (callbacks appended arrival first, then the sender's), with send_then and with
    # a sender_then bound once per message's route and timing: the same calls at the same times in the same order,
    # a sender that sends again when free included; where alike messages join one flow (not recording), the same
    # calls at the same times (the joined ones' calls run after their flow's first message's)
    def run(then: str, record: bool = True) -> list[tuple[float, str]]:
        env = simpy.Environment()
        net = FluidNetwork(env, record=record)
        links = [net.resource(f"l{k}", 1e9) for k in range(3)]
        log: list[tuple[float, str]] = []

        def note(label: str) -> None:
            log.append((env.now, label))

        def send(i: int, again: bool) -> None:
            size, k, (lat, hold), twice = plan[i]
            route = net.route([(links[k], 1.0), (links[(k + 1) % 3], 0.5)])
            label = f"{i}{'b' if again else ''}"

            def free(_arg: object) -> None:
                note(f"streamed {label}")
                if twice and not again:
                    send(i, True)

            arrived_then = lambda a: note(f"arrived {a}")  # noqa: E731
            if then == "send_then":
                net.send_then(route, size, lat, hold, UNTAGGED, NO_OWNER, arrived_then, label, free, None)
            elif then == "sender_then":
                net.sender_then(route, lat, hold, UNTAGGED, NO_OWNER)(size, arrived_then, label, free, None)
            else:
                streamed, arrived = net.send(route, size, latency=lat, hold=hold)
                arrived.callbacks.append(lambda _e: note(f"arrived {label}"))
                streamed.callbacks.append(free)

        for i in range(len(plan)):
            send(i, False)
        env.run()
        return log

    with_events = run("")
    assert run("send_then") == with_events
    assert run("sender_then") == with_events
    assert sorted(run("send_then", record=False)) == sorted(with_events)
    assert sorted(run("sender_then", record=False)) == sorted(with_events)
    assert len(with_events) == 2 * sum(2 if p[3] else 1 for p in plan)


def test_run_until_an_event_of_a_batch_with_calls() -> None:
    # `env.run(until=ev)` stops at an event of a batch that also holds send_then's calls: the calls after it run later
    env = simpy.Environment()
    net = FluidNetwork(env)
    seen: list[str] = []
    _s, stop = net.transfer(1e6, [(net.resource("a", 1e9), 1.0)], latency=1e-6)
    stop.callbacks.append(lambda _e: seen.append("a"))
    route = net.route([(net.resource("b", 1e9), 1.0)])
    net.send_then(route, 1e6, 1e-6, 0.0, UNTAGGED, NO_OWNER, seen.append, "b", None, None)
    env.run(until=stop)
    assert seen == ["a"] and env.now == pytest.approx(1e-3 + 1e-6, rel=1e-12)
    env.run()
    assert seen == ["a", "b"]


def test_a_solve_that_leaves_the_earliest_finish_adds_no_wake_up() -> None:
    # A (due at 1 ms) and nine flows on links of their own started at 10, 20, ... 90 us, each due after A (2 ms
    # from its start): the solves at their starts leave A's finish first and schedule no wake-up; the wake-ups are
    # A's and one per later flow's finish (each then the earliest)
    env = _CountingEnv()
    net = FluidNetwork(env)
    ends: list[float] = []
    _s, a = net.transfer(1e6, [(net.resource("a", 1e9), 1.0)])
    a.callbacks.append(lambda _e: ends.append(env.now))

    def later(env: simpy.Environment, k: int):  # type: ignore[no-untyped-def]
        yield env.timeout(k * 1e-5)
        net.transfer(2e6, [(net.resource(f"l{k}", 1e9), 1.0)])

    for k in range(1, 10):
        env.process(later(env, k))
    env.run()
    assert ends == [pytest.approx(1e-3, rel=1e-12)]
    assert env.timeouts - 9 == 1 + 9  # less the processes' own nine timeouts


def test_a_flow_re_rated_back_to_its_old_finish_time_finishes_once() -> None:
    # A (2 MB) alone at 1 GB/s is due at 2 ms; B (0.5 MB) joins at 0.5 ms and halves A's rate (A due later: its
    # first entry goes stale), B ends at 1.5 ms and A runs alone again, due at 2.5 ms; stale entries never finish A
    env = simpy.Environment()
    net = FluidNetwork(env)
    link = net.resource("l", 1e9)
    ends: list[tuple[str, float]] = []
    _s, a = net.transfer(2e6, [(link, 1.0)])
    a.callbacks.append(lambda _e: ends.append(("a", env.now)))

    def later(env: simpy.Environment):  # type: ignore[no-untyped-def]
        yield env.timeout(0.5e-3)
        _s2, b = net.transfer(0.5e6, [(link, 1.0)])
        b.callbacks.append(lambda _e: ends.append(("b", env.now)))

    env.process(later(env))
    env.run()
    assert [n for n, _ in ends] == ["b", "a"]
    assert [t for _, t in ends] == pytest.approx([1.5e-3, 2.5e-3], rel=1e-12)
    assert not net.active


def test_records_carry_typed_owner_tag_and_resource_keys() -> None:
    env = simpy.Environment()
    net = FluidNetwork(env, record=True)
    link = net.resource("a->b", 1e9, "pcie", key=("link", "a", "b"))
    me, tag = Owner(2, 1, "rank", "a"), Tag("PCIe P2P", "send", "transfer: PCIe P2P")
    net.transfer(1e6, [(link, 2.0)], tag=tag, owner=me)
    launch = Tag("launch", "overhead", "latency and overheads")
    net.delay(1e-6, tag=launch, owner=me)
    env.run()
    by_tag = {r.tag: r for r in net.records}
    flow, delay = by_tag[tag], by_tag[launch]
    assert (flow.owner, flow.resources, flow.coefficients, flow.keys) == (me, ("a->b",), (2.0,), (("link", "a", "b"),))
    assert (delay.owner, delay.size, delay.t_end, delay.keys) == (me, 0.0, 1e-6, ())


def test_display_strings_are_refused() -> None:
    net = FluidNetwork(simpy.Environment())
    link = net.resource("l", 1e9)
    with pytest.raises(TypeError, match="tag must be"):
        net.transfer(1.0, [(link, 1.0)], tag="NVLink")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="owner must be"):
        net.delay(1.0, tag=Tag("x", "overhead", ""), owner="(0, 'n0/gpu0')")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="activity 'fly'"):
        Tag("x", "fly", "")
    with pytest.raises(ValueError, match="idle time"):
        net.delay(1.0, tag=Tag("waiting", "wait", ""))


def test_owner_labels() -> None:
    assert Owner(3, 5, "rank", "n0/gpu3").label == "rank 3 ch 5"
    assert Owner(3, None, "rank", "n0/gpu3").label == "rank 3"
    assert (
        Owner(None, 0, "in-network reducer", "fabric/leaf0", index=2).label
        == "in-network reducer 2 ch 0 (fabric/leaf0)"
    )
    assert Owner(None, None, "", "").label == "(unnamed)"


def test_attribute_time_by_owner_and_pooled() -> None:
    a, b = Owner(0, None, "rank", "g0"), Owner(1, None, "rank", "g1")
    send, red = Tag("send", "send", "s"), Tag("reduce", "reduce", "r")
    lat, idle = Tag("latency", "overhead", "o"), Tag("idle", "wait", "w")
    recs = [FlowRecord(a, send, 1.0, 0.0, 1.0, 0.5, ()), FlowRecord(b, red, 1.0, 2.0, 3.0, 0.0, ())]
    mine = attribute_time(recs, a, 0.0, 4.0, [red, send], latency=lat, idle=idle)
    assert mine == {"reduce": 0.0, "send": 1.0, "latency": 0.5, "idle": 2.5}
    pooled = attribute_time(recs, None, 0.0, 4.0, [red, send], latency=lat, idle=idle)
    assert pooled == {"reduce": 1.0, "send": 1.0, "latency": 0.5, "idle": 1.5}
    assert sum(pooled.values()) == pytest.approx(4.0)


def test_bad_capacity_is_an_error() -> None:
    net = FluidNetwork(simpy.Environment())
    with pytest.raises(ValueError, match="capacity must be positive"):
        net.resource("x", 0.0)


flow_sets = st.lists(
    st.tuples(
        st.floats(1e3, 1e7),  # bytes
        st.lists(st.tuples(st.integers(0, 4), st.sampled_from([0.5, 1.0, 2.0])), min_size=1, max_size=3),
        st.one_of(st.just(math.inf), st.floats(1e8, 1e10)),  # cap
        st.floats(0, 1e-3),  # start time
    ),
    min_size=1,
    max_size=8,
)
capacities = st.lists(st.floats(1e8, 1e10), min_size=5, max_size=5)


def _simulate(caps: list[float], flows: list, scale: float = 1.0) -> tuple[list[float], FluidNetwork]:
    env = simpy.Environment()
    # after every solve: no resource above capacity, and every flow at its cap or with a bottleneck, a saturated
    # resource where no flow gets more (the engine's own check=True asks only for *a* saturated resource)
    net = MaxMinCheckedNetwork(env)
    res = [net.resource(f"r{i}", c) for i, c in enumerate(caps)]
    ends = [math.nan] * len(flows)

    def start(i: int, size: float, uses: list, cap: float, t0: float):  # type: ignore[no-untyped-def]
        yield env.timeout(t0)
        s, _a = net.transfer(size * (scale if i == 0 else 1.0), [(res[k], c) for k, c in uses], max_rate=cap)
        yield s
        ends[i] = env.now

    for i, (size, uses, cap, t0) in enumerate(flows):
        env.process(start(i, size, uses, cap, t0))
    env.run()
    return ends, net


@settings(max_examples=60, deadline=None)
@given(capacities, flow_sets)
def test_invariants_on_random_flow_sets(caps: list[float], flows: list) -> None:
    ends, net = _simulate(caps, flows)
    assert all(math.isfinite(t) for t in ends)
    # bytes conserved: every resource carried exactly sum(size * coefficient) of the flows crossing it
    expect = [0.0] * len(caps)
    for size, uses, _cap, _t0 in flows:
        merged: dict[int, float] = {}
        for k, c in uses:
            merged[k] = merged.get(k, 0.0) + c
        for k, c in merged.items():
            expect[k] += size * c
    got = [net.carried(net.resources[f"r{i}"]) for i in range(len(caps))]
    assert got == pytest.approx(expect, rel=1e-9)
    # no flow finishes before its size at the best rate it could ever get
    for (size, uses, cap, t0), end in zip(flows, ends, strict=True):
        best = min([cap] + [caps[k] / c for k, c in uses])
        assert end - t0 >= size / best * (1 - 1e-9)


@settings(max_examples=40, deadline=None)
@given(capacities, flow_sets)
def test_finish_time_monotone_in_size(caps: list[float], flows: list) -> None:
    base, _ = _simulate(caps, flows)
    bigger, _ = _simulate(caps, flows, scale=1.5)
    assert bigger[0] >= base[0] * (1 - 1e-9)


class _Greedy(MaxMinCheckedNetwork):
    """A wrong engine: each flow in turn takes all it can. Feasible, and every flow crosses a saturated resource."""

    def _progressive_filling(self, flows: list[Flow], counts: list[int] | None = None) -> list[float]:
        left: dict[Resource, float] = {}
        rates = []
        for i, f in enumerate(flows):
            n = 1 if counts is None else counts[i]
            rate = min([f.max_rate] + [left.setdefault(r, r.capacity) / (c * n) for r, c in f.uses])
            for r, c in f.uses:
                left[r] -= c * n * rate
            rates.append(rate)
        self._last_saturated = frozenset(r for r, v in left.items() if v <= 1e-9 * r.capacity)
        return rates


def test_invariant_rejects_an_unfair_allocation() -> None:
    # A on l1, B on l1 and l2, C on l2 (unit links). Greedy gives A=1, B=0, C=1: both links full and B crosses
    # them, so "no resource over capacity, every flow at a saturated resource" holds; max-min gives 0.5 each.
    def abc(network: type[FluidNetwork]) -> FluidNetwork:
        env = simpy.Environment()
        net = network(env)
        l1, l2 = net.resource("l1", 1e9), net.resource("l2", 1e9)
        for uses in ([(l1, 1.0)], [(l1, 1.0), (l2, 1.0)], [(l2, 1.0)]):
            net.transfer(1e6, uses)
        env.run(until=1e-4)
        return net

    with pytest.raises(AssertionError, match="no bottleneck"):
        abc(_Greedy)
    fair = abc(MaxMinCheckedNetwork).active
    assert [f.rate for f in fair] == [0.5e9] * 3
    assert_max_min_fair(fair)


def test_messages_sent_together_alike_join_one_flow() -> None:
    # three messages of one sender's route at one time, alike: one flow standing for three (counted three times for
    # fairness against a fourth flow on the link), their calls in the order they were sent
    env = simpy.Environment()
    net = FluidNetwork(env)
    link = net.resource("l", 1e9)
    send = net.sender_then(net.route([(link, 1.0)]), 1e-6, 0.0, UNTAGGED, NO_OWNER)
    seen: list[tuple[float, str]] = []

    def note(label: str) -> None:
        seen.append((env.now, label))

    for k in range(3):
        send(1e6, note, f"arrived {k}", note, f"free {k}")
    net.transfer(1e6, [(link, 1.0)])
    env.run(until=1e-9)
    assert [f.n for f in net.active] == [3, 1] and net.flows == 4
    env.run()
    assert [label for _, label in seen] == ["free 0", "free 1", "free 2", "arrived 0", "arrived 1", "arrived 2"]
    assert {t for t, _ in seen[:3]} == {4e-3}  # 1 GB/s shared by four messages of 1 MB
    assert net.carried(link) == 4e6


@pytest.mark.parametrize("change", ["size", "latency", "hold", "later", "record"])
def test_messages_that_differ_do_not_join(change: str) -> None:
    env = simpy.Environment()
    net = FluidNetwork(env, record=change == "record")
    route = net.route([(net.resource("l", 1e9), 1.0)])
    net.sender_then(route, 1e-6, 0.0, UNTAGGED, NO_OWNER)(1e6, None, None, None, None)

    def second(_arg: object = None) -> None:
        latency = 2e-6 if change == "latency" else 1e-6
        hold = 1e-6 if change == "hold" else 0.0
        size = 2e6 if change == "size" else 1e6
        net.sender_then(route, latency, hold, UNTAGGED, NO_OWNER)(size, None, None, None, None)

    if change == "later":
        net.timed_then(1e-4, 0.0, 0.0, second, None, None, None)
        env.run(until=2e-4)
    else:
        second()
        env.run(until=1e-9)
    assert [f.n for f in net.active] == [1, 1]


@settings(max_examples=80, deadline=None)
@given(
    plan=st.lists(
        st.tuples(
            st.sampled_from([0.0, 1e-4]),
            st.sampled_from([2e5, 1e6]),
            st.integers(0, 2),
            st.sampled_from(_TIMINGS[:3]),
            st.integers(0, 3),
        ),
        min_size=1,
        max_size=10,
    ),
)
@example(  # senders 0 and 2 join; 1 and 2 send again when free (found with a harness that bound calls late)
    plan=[(0.0, 2e5, 2, (3e-6, 0.0), 0), (0.0, 2e5, 0, (0.0, 0.0), 1), (0.0, 2e5, 2, (3e-6, 0.0), 2)],
)
def test_joined_messages_are_the_messages_sent_alone(
    plan: list[tuple[float, float, int, tuple[float, float], int]],
) -> None:
    # random senders (a start time, a message size, a route, a timing, how many more messages each sends when free)
    # on a network that joins alike messages and on one that does not (recording): every call at the same time, bit
    # for bit, and the same bytes carried on every resource; only the order of calls due at one time may differ
    def run(record: bool) -> tuple[list[tuple[float, str]], list[float], int]:
        env = simpy.Environment()
        net = FluidNetwork(env, record=record, check=True)
        links = [net.resource(f"l{k}", 1e9) for k in range(3)]
        log: list[tuple[float, str]] = []

        def arrived(label: str) -> None:
            log.append((env.now, f"arrived {label}"))

        def sender(i: int, send: SendThen, size: float, again: int) -> Callback:
            # the sender's first message, and each next one once it is free (its own calls, bound here)
            def free(label: str) -> None:
                log.append((env.now, f"free {label}"))
                left[0] -= 1
                if left[0] >= 0:
                    send(size, arrived, f"{label}+", free, f"{label}+")

            left = [again]
            return lambda _arg: send(size, arrived, str(i), free, str(i))

        for i, (start, size, k, (lat, hold), again) in enumerate(plan):
            route = net.route([(links[k], 1.0), (links[(k + 1) % 3], 0.5)])
            first = sender(i, net.sender_then(route, lat, hold, UNTAGGED, NO_OWNER), size, again)
            net.timed_then(start, 0.0, 0.0, first, None, None, None)
        env.run()
        return sorted(log), [net.carried(r) for r in links], net.flows

    joined, alone = run(False), run(True)
    assert joined == alone
