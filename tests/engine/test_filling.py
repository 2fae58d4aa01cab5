"""The array filling (collsim.engine.filling) against the Python filling and the reference solver: the same rates,
bit for bit (both sum a resource's weights exactly), and the engine's times unchanged when every component is filled
on arrays."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_maxmin import FlowSpec, Instance, MaxMinCheckedNetwork, engine_rates, water_filling
from test_reference_solver import _run_timeline, timelines

from collsim.engine import FluidNetwork
from collsim.engine.filling import SignatureArrays
from collsim.engine.fluid import ARRAY_FROM

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")  # e.g. a share over a resource nobody is left on

INF = math.inf
_exact_coef = st.sampled_from([0.5, 1.0, 2.0, 0.125, 4.0])  # sums of these are exact in binary floating point
_any_coef = st.one_of(_exact_coef, st.floats(0.1, 8.0))
_capacity = st.one_of(st.sampled_from([1e9, 2e9, 4e9, 25e9]), st.floats(1e8, 1e10))
_cap = st.one_of(st.just(INF), st.just(INF), st.sampled_from([2.5e8, 1e9]), st.floats(1e7, 1e10))


@st.composite
def components(draw: st.DrawFn, coef: st.SearchStrategy[float]) -> Instance:
    """Up to 40 resources and 150 flows over random subsets of them (some flows over none, capped)."""
    nres = draw(st.integers(1, 40))
    caps = draw(st.lists(_capacity, min_size=nres, max_size=nres))
    flow = st.builds(
        FlowSpec,
        st.lists(st.tuples(st.integers(0, nres - 1), coef), min_size=0, max_size=min(6, nres + 1)).map(tuple),
        _cap,
    )
    flows = draw(st.lists(flow, min_size=1, max_size=150))
    return Instance(tuple(caps), tuple(f if f.uses or f.max_rate < INF else FlowSpec(f.uses, 1e9) for f in flows))


def _both_fillings(inst: Instance) -> tuple[list[float], list[float]]:
    """The Python filling's and the array filling's rates of the instance's flows, in the engine's canonical
    order."""
    net = FluidNetwork(simpy.Environment())
    res = [net.resource(f"r{k}", c) for k, c in enumerate(inst.capacities)]
    for f in inst.flows:
        net.transfer(1e6, [(res[k], c) for k, c in f.uses], max_rate=f.max_rate)
    rank = {s: r for r, s in enumerate(sorted(range(len(net._sig_order)), key=net._sig_order.__getitem__))}
    flows = sorted(net._started, key=lambda f: rank[f.sig])
    python = net._progressive_filling(flows)
    arrays = net._arrays.fill(np.array([f.sig for f in flows], dtype=np.int64)).tolist()
    return python, arrays


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(components(_exact_coef))
def test_array_filling_is_the_python_filling_bit_for_bit(inst: Instance) -> None:
    python, arrays = _both_fillings(inst)
    assert arrays == python


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(components(_any_coef))
def test_array_filling_is_the_python_filling_bit_for_bit_with_any_coefficients(inst: Instance) -> None:
    # weights are summed exactly and rounded once in both, whatever order the frozen rows give them back in
    python, arrays = _both_fillings(inst)
    assert arrays == python


def _rows_and_every_flow(inst: Instance, data: st.DataObject) -> tuple[list[list[float]], list[list[float]]]:
    """Each signature of the instance once with a drawn number of flows, and every flow given once: the rates of
    each row (array and Python fillings), and of each row's first flow."""
    net = FluidNetwork(simpy.Environment())
    res = [net.resource(f"r{k}", c) for k, c in enumerate(inst.capacities)]
    for f in inst.flows:
        net.transfer(1e6, [(res[k], c) for k, c in f.uses], max_rate=f.max_rate)
    first_of = {f.sig: f for f in net._started}
    ids = np.array(list(first_of), dtype=np.int64)
    counts = np.array(data.draw(st.lists(st.integers(1, 6), min_size=len(ids), max_size=len(ids))), dtype=np.int64)
    first = np.cumsum(counts) - counts
    each = net._arrays.fill(np.repeat(ids, counts))[first].tolist()
    every = [first_of[s] for s, n in zip(ids.tolist(), counts.tolist(), strict=True) for _ in range(n)]
    python_each = [net._progressive_filling(every)[k] for k in first.tolist()]
    rows = net._arrays.fill(ids, counts).tolist()
    python_rows = net._progressive_filling([first_of[s] for s in ids.tolist()], counts.tolist())
    assert net._arrays.fill(ids, np.ones(len(ids), dtype=np.int64)).tolist() == net._arrays.fill(ids).tolist()
    return [rows, python_rows], [each, python_each]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(components(_exact_coef), st.data())
def test_rows_with_counts_fill_as_every_flow_bit_for_bit(inst: Instance, data: st.DataObject) -> None:
    # the engine passes each signature once with its number of flows: where the coefficients add exactly, the rates
    # of every flow given once, bit for bit, on arrays and in Python
    rows, each = _rows_and_every_flow(inst, data)
    assert rows[0] == each[0] and rows[1] == each[1]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(components(_any_coef), st.data())
def test_rows_with_counts_fill_as_every_flow_bit_for_bit_with_any_coefficients(
    inst: Instance, data: st.DataObject
) -> None:
    # any coefficients: a row weighs exactly n x its coefficient, what every flow adding it n times sums to exactly
    rows, each = _rows_and_every_flow(inst, data)
    assert rows[0] == each[0] and rows[1] == each[1]


class _Arrays(MaxMinCheckedNetwork):
    """Every component filled on arrays; the bottleneck characterisation asserted after every solve."""

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self.array_from = 1


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(components(_any_coef))
def test_array_filling_in_the_engine_matches_water_filling(inst: Instance) -> None:
    got, net = engine_rates(inst, _Arrays)
    assert net.array_fills >= 1  # one per component
    assert got == pytest.approx(list(water_filling(inst)), rel=1e-9)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timelines())
def test_engine_times_are_the_same_with_every_component_on_arrays(
    tl: tuple[Instance, list[float], list[float]],
) -> None:
    # components form, merge and split; the checked network asserts max-min fairness after every solve
    inst, starts, sizes = tl
    got = _run_timeline(_Arrays(simpy.Environment()), inst, starts, sizes)
    want = _run_timeline(FluidNetwork(simpy.Environment()), inst, starts, sizes)
    assert got == pytest.approx(want, rel=1e-9)


def test_hand_checked_levels_on_arrays() -> None:
    # a (10) carries flows 0 and 1; b (2) carries flow 1 with coefficient 2 (an LL line: half flags); flow 2 is on
    # a alone, capped at 3: flow 1 is bound by b at 1, flow 2 by its cap at 3, flow 0 takes what a has left, 6
    table = SignatureArrays()
    table.add([("a", 10.0, 1.0)], INF)
    table.add([("a", 10.0, 1.0), ("b", 2.0, 2.0)], INF)
    table.add([("a", 10.0, 1.0)], 3.0)
    assert table.fill(np.array([0, 1, 2])).tolist() == [6.0, 1.0, 3.0]
    assert table.fill(np.array([1])).tolist() == [1.0]
    assert table.fill(np.array([], dtype=np.int64)).tolist() == []


def test_signatures_added_after_a_fill_are_seen() -> None:
    table = SignatureArrays()
    table.add([("a", 4.0, 1.0)], INF)
    assert table.fill(np.array([0, 0])).tolist() == [2.0, 2.0]
    # wider than any signature so far (the arrays widen), then enough signatures that the rows double twice
    table.add([("a", 4.0, 1.0), ("b", 1.0, 1.0), ("c", 8.0, 0.5), ("d", 9.0, 1.0), ("e", 9.0, 1.0)], INF)
    assert table.fill(np.array([0, 1, 0])).tolist() == [1.5, 1.0, 1.5]
    for k in range(40):
        table.add([(f"x{k}", float(k + 1), 1.0), ("a", 4.0, 1.0)], INF)
    assert len(table) == 42
    assert table.fill(np.array([41, 2, 1])).tolist() == [2.0, 1.0, 1.0]  # x0 and b bind at 1; a leaves 2 to x39
    assert table.fill(np.array([0, 1])).tolist() == [3.0, 1.0]


def test_a_flow_bound_by_nothing_gets_an_infinite_rate() -> None:
    table = SignatureArrays()
    table.add([], INF)
    table.add([("a", 4.0, 1.0)], INF)
    assert table.fill(np.array([0, 1])).tolist() == [INF, 4.0]


def test_large_components_are_filled_on_arrays_by_default() -> None:
    # ARRAY_FROM signatures on one link (each flow also on a link of its own): one array filling; one signature
    # fewer: the Python filling; the same rates. Twice as many flows of one signature: the Python filling
    for n, fills in ((ARRAY_FROM, 1), (ARRAY_FROM - 1, 0)):
        inst = Instance((1e9,) + (4e9,) * n, tuple(FlowSpec(((0, 1.0), (k + 1, 1.0))) for k in range(n)))
        got, net = engine_rates(inst)
        assert net.array_fills == fills
        assert got == [1e9 / n] * n
    got, net = engine_rates(Instance((1e9,), tuple(FlowSpec(((0, 1.0),)) for _ in range(2 * ARRAY_FROM))))
    assert net.array_fills == 0 and got == [1e9 / (2 * ARRAY_FROM)] * (2 * ARRAY_FROM)


@pytest.mark.parametrize("tiny", [1e-300, 3e-310])
def test_coefficients_finer_than_float_halves_still_fill_exactly(tiny: float) -> None:
    # a coefficient with more than 1000 fractional bits makes the table's unit too fine for its float halves: both
    # fillings then sum Python integers, with the same floats (and the halves are not used again)
    net = FluidNetwork(simpy.Environment())
    a, b = net.resource("a", 10.0), net.resource("b", 2.0)
    net.transfer(1e6, [(a, 1.0)])
    net.transfer(1e6, [(a, 0.75), (b, tiny)])
    net.transfer(1e6, [(a, 1 / 3), (b, 1.0)])
    assert net._arrays._wide and net._arrays.scale > 1000
    flows = list(net._started)
    python = net._progressive_filling(flows)
    arrays = net._arrays.fill(np.array([f.sig for f in flows], dtype=np.int64)).tolist()
    assert arrays == python
    # b (2/s) saturates first, at level 2 (the tiny use adds nothing that rounds): both flows on it freeze there, and
    # the first flow takes what a has left
    assert python[1] == python[2] == 2.0 and python[0] == pytest.approx(10 - 0.75 * 2 - 2 / 3)


def test_counts_too_large_for_exact_float_sums_fill_as_python() -> None:
    # 2**30 flows of coefficient 1/0.92 on one link: their halves' sum passes 2**53, so the array filling sums Python
    # integers for that filling (the same floats as the Python filling, whose integers have no bound)
    net = FluidNetwork(simpy.Environment())
    a, b = net.resource("a", 1e12), net.resource("b", 5e3)
    net.transfer(1e6, [(a, 1 / 0.92)])
    net.transfer(1e6, [(a, 0.3), (b, 1.0)])
    flows = list(net._started)
    for counts in ([2**30, 3], [3, 2**30], [1, 1]):
        python = net._progressive_filling(flows, counts)
        arrays = net._arrays.fill(np.array([f.sig for f in flows], dtype=np.int64), np.array(counts)).tolist()
        assert arrays == python, counts
    assert not net._arrays._wide
