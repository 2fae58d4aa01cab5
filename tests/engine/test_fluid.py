"""The fluid engine: exact times on tiny cases, and invariants on random flow sets (hypothesis)."""

from __future__ import annotations

import math

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.engine import FluidNetwork


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
    net = FluidNetwork(env, check=True)  # asserts: no resource above capacity, every flow bottlenecked
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
    got = [net.resources[f"r{i}"].carried for i in range(len(caps))]
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
