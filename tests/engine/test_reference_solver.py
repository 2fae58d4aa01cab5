"""The engine's rates against independent max-min fair oracles (water-filling, LPs), and its memo against fresh solves.

The oracles live in reference_maxmin.py and are written from the definition, not from collsim/engine/fluid.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_maxmin import (
    FlowSpec,
    Instance,
    MaxMinCheckedNetwork,
    assert_max_min_fair,
    engine_rates,
    lp_max_min_violation,
    water_filling,
)
from simpy.events import AllOf

from collsim.engine import FluidNetwork, Tag

INF = math.inf

# A on l1, B on l1 and l2, C on l2: two unit links (GB/s). Max-min: 0.5 each; A=1, B=0, C=1 saturates both but
# starves B.
ABC = Instance((1e9, 1e9), (FlowSpec(((0, 1.0),)), FlowSpec(((0, 1.0), (1, 1.0))), FlowSpec(((1, 1.0),))))


# ---------------------------------------------------------------------------------------------------- hand-checked
@dataclass
class _Rated:
    uses: tuple
    max_rate: float = INF
    rate: float = 0.0


def test_abc_example_exact() -> None:
    rates, _net = engine_rates(ABC)
    assert rates == [0.5e9, 0.5e9, 0.5e9]
    assert list(water_filling(ABC)) == [0.5e9, 0.5e9, 0.5e9]
    assert lp_max_min_violation(ABC, rates) is None


def test_oracles_reject_the_unfair_abc_allocation() -> None:
    net = FluidNetwork(simpy.Environment())
    l1, l2 = net.resource("l1", 1e9), net.resource("l2", 1e9)
    uses = [((l1, 1.0),), ((l1, 1.0), (l2, 1.0)), ((l2, 1.0),)]
    for rates in ([1e9, 0.0, 1e9], [0.9e9, 0.1e9, 0.9e9]):  # both saturate l1 and l2, and B crosses them
        with pytest.raises(AssertionError, match="no bottleneck"):
            assert_max_min_fair([_Rated(u, rate=r) for u, r in zip(uses, rates, strict=True)])
        assert lp_max_min_violation(ABC, rates) == (1, pytest.approx(1e9))
    assert_max_min_fair([_Rated(u, rate=0.5e9) for u in uses])  # the fair one passes


def test_hand_checked_coefficients_and_caps() -> None:
    # l0 = 3 GB/s carries A (coef 2) and B (coef 1); l1 = 1 GB/s carries B and C (coef 1); C capped at 0.2 GB/s.
    # The common level would fill l0 at 3/(2+1) = 1 and l1 at 1/2 = 0.5; C's cap binds first, at 0.2. Then l1
    # (0.8 left, B alone) fills at level 0.8 before l0 (3 - 3*0.2 = 2.4 left for 2+1 per unit) would at 0.8 + 0.2:
    # B freezes at 0.8. A, alone on l0 with 3 - 0.8 left at 2 per unit, rises to 1.1. Both links end full.
    inst = Instance((3e9, 1e9), (FlowSpec(((0, 2.0),)), FlowSpec(((0, 1.0), (1, 1.0))), FlowSpec(((1, 1.0),), 2e8)))
    expect = [1.1e9, 0.8e9, 0.2e9]
    assert engine_rates(inst)[0] == pytest.approx(expect, rel=1e-12)
    assert list(water_filling(inst)) == pytest.approx(expect, rel=1e-12)


def test_max_min_is_on_rates_not_on_consumption() -> None:
    # A (coef 3) and B (coef 1) share a 4 GB/s link: equal rates 1 GB/s each (A consumes 3 of the 4), not equal
    # consumption (which would give A 2/3 and B 2).
    inst = Instance((4e9,), (FlowSpec(((0, 3.0),)), FlowSpec(((0, 1.0),))))
    assert engine_rates(inst)[0] == pytest.approx([1e9, 1e9], rel=1e-12)
    assert list(water_filling(inst)) == pytest.approx([1e9, 1e9], rel=1e-12)


# ---------------------------------------------------------------------------------------------------- random instances
_capacity = st.one_of(st.sampled_from([1e9, 2e9, 4e9]), st.floats(1e8, 1e10))  # repeats make exact ties
_coef = st.one_of(st.sampled_from([0.5, 1.0, 2.0]), st.floats(0.1, 8.0))
_cap = st.one_of(st.just(INF), st.just(INF), st.sampled_from([2.5e8, 1e9]), st.floats(1e7, 1e10))


@st.composite
def instances(draw: st.DrawFn, max_resources: int = 6, max_flows: int = 10) -> Instance:
    """Random resources, and flows over random subsets of them (a repeated resource adds its coefficients)."""
    nres = draw(st.integers(1, max_resources))
    caps = draw(st.lists(_capacity, min_size=nres, max_size=nres))
    flow = st.builds(
        FlowSpec,
        st.lists(st.tuples(st.integers(0, nres - 1), _coef), min_size=1, max_size=min(4, nres + 1)).map(tuple),
        _cap,
    )
    flows = draw(st.lists(flow, min_size=1, max_size=max_flows))
    return Instance(tuple(caps), tuple(flows))


@settings(max_examples=150, deadline=None)
@given(instances())
def test_engine_matches_water_filling(inst: Instance) -> None:
    got, net = engine_rates(inst, MaxMinCheckedNetwork)  # also asserts the bottleneck characterisation
    want = water_filling(inst)
    assert got == pytest.approx(list(want), rel=1e-9)
    assert net.solves == 1


@settings(max_examples=40, deadline=None)
@given(instances(max_resources=5, max_flows=7))
def test_engine_meets_the_lp_definition(inst: Instance) -> None:
    got, _net = engine_rates(inst)
    assert lp_max_min_violation(inst, got) is None


@settings(max_examples=40, deadline=None)
@given(instances(max_resources=5, max_flows=7))
def test_water_filling_meets_the_lp_definition(inst: Instance) -> None:
    # the reference checked against the definition, so that agreeing with it means something
    assert lp_max_min_violation(inst, list(water_filling(inst))) is None


# ---------------------------------------------------------------------------------------------------- the memo
@dataclass
class _Solve:
    time: float
    rates: dict[str, float]  # tag -> rate of every streaming flow
    hit: bool


class _Recording(FluidNetwork):
    """Records every solve's rates; with ``memo=False`` it forgets the memo before each solve (a fresh solve)."""

    def __init__(self, env: simpy.Environment, memo: bool = True) -> None:
        super().__init__(env)
        self.memo = memo
        self.log: list[_Solve] = []

    def _solve(self) -> None:
        if not self.memo:
            self._memo.clear()
        hits = self.memo_hits
        super()._solve()
        self.log.append(_Solve(self.env.now, {f.tag.label: f.rate for f in self.active}, self.memo_hits > hits))


class _NoRelay(_Recording):
    """Solves after every change, relays included."""

    def _relay(self) -> bool:
        return False


@dataclass
class _Scenario:
    """Waves of flows over an instance's resources: a wave starts when the previous one has fully streamed.

    Every wave starts the same flows (signatures) with new sizes, each after its own offset in the wave, so the
    multisets of signatures seen in one wave recur in the next.
    """

    inst: Instance
    sizes: list[list[float]]  # per wave, per flow
    offsets: list[float]  # per flow, seconds after the wave starts

    def run(self, net: FluidNetwork) -> dict[str, float]:
        env = net.env
        res = [net.resource(f"r{k}", c) for k, c in enumerate(self.inst.capacities)]
        ends: dict[str, float] = {}

        def one(tag: str, size: float, spec: FlowSpec, offset: float):  # type: ignore[no-untyped-def]
            if offset > 0:
                yield env.timeout(offset)
            streamed, _arrived = net.transfer(
                size, [(res[k], c) for k, c in spec.uses], max_rate=spec.max_rate, tag=Tag(tag, "send", "")
            )
            yield streamed
            ends[tag] = env.now

        def waves():  # type: ignore[no-untyped-def]
            for w, sizes in enumerate(self.sizes):
                procs = [
                    env.process(one(f"w{w}f{j}", s, spec, off))
                    for j, (s, spec, off) in enumerate(zip(sizes, self.inst.flows, self.offsets, strict=True))
                ]
                yield AllOf(env, procs)

        env.process(waves())
        env.run()
        return ends


def _signature(spec: FlowSpec) -> tuple:
    """What the engine interns a flow's signature from: its merged ``uses`` (in order) and its cap."""
    merged: dict[int, float] = {}
    for k, coef in spec.uses:
        merged[k] = merged.get(k, 0.0) + coef
    return tuple(merged.items()), spec.max_rate


@st.composite
def scenarios(draw: st.DrawFn, distinct: bool = False) -> _Scenario:
    """Random waves over a random instance; ``distinct``: no two flows with the same signature."""
    inst = draw(instances(max_resources=4, max_flows=6))
    if distinct:
        unique = {_signature(f): f for f in inst.flows}
        inst = Instance(inst.capacities, tuple(unique.values()))
    n = len(inst.flows)
    nwaves = draw(st.integers(2, 3))
    size = st.one_of(st.sampled_from([1e6, 4e6]), st.floats(1e5, 1e7))
    sizes = [draw(st.lists(size, min_size=n, max_size=n)) for _ in range(nwaves)]
    offsets = draw(st.lists(st.one_of(st.just(0.0), st.floats(0.0, 2e-3)), min_size=n, max_size=n))
    return _Scenario(inst, sizes, offsets)


def _check_memo(sc: _Scenario, rel: float) -> None:
    """Run ``sc`` with the memo, and compare what it handed out with fresh solves and with a run without memo.

    Parameters
    ----------
    sc : _Scenario
        The simulation.
    rel : float
        Relative tolerance on rates and times; 0 for bit-for-bit equality.
    """

    def same(a: list[float], b: list[float]) -> bool:
        return a == b if rel == 0 else a == pytest.approx(b, rel=rel, abs=0)

    memo = _Recording(simpy.Environment())
    ends = sc.run(memo)
    assert len(ends) == len(sc.sizes) * len(sc.inst.flows)
    # every wave after the first starts as the one before ends: its flows relay theirs (FluidNetwork._relay), or,
    # where the waves' flows do not line up, its first solve hits the memo
    assert memo.memo_hits + memo.relays > 0
    assert sum(s.hit for s in memo.log) <= memo.memo_hits  # a solve may take several components from it
    for solve in memo.log:
        # every rate handed out, against a new network (no memo, no history) solving the same flows in the same order
        alive = Instance(sc.inst.capacities, tuple(sc.inst.flows[int(tag.split("f")[1])] for tag in solve.rates))
        fresh, _ = engine_rates(alive)
        assert same(list(solve.rates.values()), fresh), f"solve at t={solve.time} (hit={solve.hit})"
        assert fresh == pytest.approx(list(water_filling(alive)), rel=1e-9)
    # the whole simulation again, the memo forgotten before every solve: the same solves, rates and times
    plain = _Recording(simpy.Environment(), memo=False)
    plain_ends = sc.run(plain)
    assert plain.memo_hits == 0
    assert [list(s.rates) for s in plain.log] == [list(s.rates) for s in memo.log]
    assert same([s.time for s in plain.log], [s.time for s in memo.log])
    for a, b in zip(plain.log, memo.log, strict=True):
        assert same(list(a.rates.values()), list(b.rates.values())), f"solve at t={a.time}"
    assert list(plain_ends) == list(ends)
    assert same(list(plain_ends.values()), list(ends.values()))
    # and once more without relays: every new flow solved, the same times bit for bit
    solved = _NoRelay(simpy.Environment())
    solved_ends = sc.run(solved)
    assert solved.relays == 0
    assert list(solved_ends) == list(ends)
    assert same(list(solved_ends.values()), list(ends.values()))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(distinct=True))
def test_memo_is_bit_exact_when_signatures_are_distinct(sc: _Scenario) -> None:
    # a recurring multiset is then the same flows in the same order: the memo must give back the very same floats
    _check_memo(sc, rel=0.0)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_memo_returns_what_a_fresh_solve_would(sc: _Scenario) -> None:
    # flows with equal signatures may come back in another order; the engine solves them in a canonical order, so
    # the memo hands out bit for bit what a fresh solve would (see test_memo_hit_is_bit_identical_to_a_fresh_solve)
    _check_memo(sc, rel=0.0)


def test_memo_hits_on_a_repeated_pattern() -> None:
    # two identical waves of the ABC flows, sizes 1, 2, 3 MB: wave 2 replays wave 1's solves from the memo.
    # Hand check: A, B, C at 0.5 GB/s; A ends at 2 ms (1 MB); B and C have 1 and 2 MB left and share l2 at 0.5
    # GB/s: B ends at 4 ms; C's last 1 MB alone at 1 GB/s: 5 ms. Wave 2 starts at 5 ms.
    sc = _Scenario(ABC, [[1e6, 2e6, 3e6], [1e6, 2e6, 3e6]], [0.0, 0.0, 0.0])
    memo = _Recording(simpy.Environment())
    ends = sc.run(memo)
    assert [ends[f"w0f{j}"] for j in range(3)] == pytest.approx([2e-3, 4e-3, 5e-3], rel=1e-12)
    t0 = ends["w0f2"]
    assert [ends[f"w1f{j}"] - t0 for j in range(3)] == pytest.approx([2e-3, 4e-3, 5e-3], rel=1e-9)
    wave1 = [s for s in memo.log if s.time < t0]
    wave2 = [s for s in memo.log if s.time >= t0 and s.rates]
    assert [len(s.rates) for s in wave1] == [len(s.rates) for s in wave2] == [3, 2, 1]
    assert [list(s.rates.values()) for s in wave1] == [list(s.rates.values()) for s in wave2]
    assert not any(s.hit for s in wave1) and all(s.hit for s in wave2)
    assert memo.memo_hits == 3
    assert memo.log[-1].rates == {} and len(memo.log) == 7  # the last solve, of no flow, is new
    plain = _Recording(simpy.Environment(), memo=False)
    assert sc.run(plain) == ends and plain.memo_hits == 0


class _Searched(_Recording):
    """Also records, per solve, the flows of the components the search re-solved (by tag)."""

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self.searched: list[tuple[float, list[str]]] = []

    def _components(self) -> list[list[int]]:
        comps = super()._components()
        flows = [f for c in comps for s in c for f in self._by_sig[s]]
        self.searched.append((self.env.now, sorted(f.tag.label for f in flows)))
        return comps


def test_a_relay_beside_a_change_re_solves_only_the_change() -> None:
    # f0 and f1 on links of their own (coefficient 0.5: 2 GB/s each). Wave 0: f0 (1 MB) ends at 0.5 ms, f1 (4 MB) at
    # 2 ms; wave 1 starts both at 2 ms (1 MB each). f1's successor replaces it on l1 (a relay: it takes the 2 GB/s
    # it left); f0's successor is new on l0 (nothing ended there at 2 ms): only its component is searched and solved.
    # Both end at 2.5 ms, in the order they started, as when every change is solved.
    inst = Instance((1e9, 1e9), (FlowSpec(((0, 0.5),)), FlowSpec(((1, 0.5),))))
    sc = _Scenario(inst, [[1e6, 4e6], [1e6, 1e6]], [0.0, 0.0])
    net = _Searched(simpy.Environment())
    ends = sc.run(net)
    assert ends == pytest.approx({"w0f0": 0.5e-3, "w0f1": 2e-3, "w1f0": 2.5e-3, "w1f1": 2.5e-3}, rel=1e-12)
    assert (net.relays, net.relayed) == (0, 1)
    assert [labels for t, labels in net.searched if t == 2e-3] == [["w1f0"]]
    (solve,) = [s for s in net.log if s.time == 2e-3]
    assert solve.rates == {"w1f0": 2e9, "w1f1": 2e9}
    solved = _NoRelay(simpy.Environment())
    assert list(sc.run(solved).items()) == list(ends.items())
    assert solved.relayed == 0


@pytest.mark.parametrize("net_class", [_Searched, _NoRelay])
def test_a_flow_that_ends_beside_a_relay_frees_its_link(net_class: type[_Recording]) -> None:
    # l0 (1 GB/s): A (1 MB) ends at 1 ms and its successor A2 (1 MB) starts on it at once (a relay). l1 (1 GB/s):
    # X (0.5 MB) and Y (2 MB) at 0.5 GB/s each; X ends at 1 ms too, with no successor: Y, 1.5 MB left, runs alone
    # at 1 GB/s and ends at 2.5 ms (not 4 ms, as it would if X's end were taken for part of the relay)
    env = simpy.Environment()
    net = net_class(env)
    l0, l1 = net.resource("l0", 1e9), net.resource("l1", 1e9)
    ends: dict[str, float] = {}

    def lane():  # type: ignore[no-untyped-def]
        for name in ("A", "A2"):
            streamed, _ = net.transfer(1e6, [(l0, 1.0)], tag=Tag(name, "send", ""))
            yield streamed
            ends[name] = env.now

    def one(name: str, size: float):  # type: ignore[no-untyped-def]
        streamed, _ = net.transfer(size, [(l1, 1.0)], tag=Tag(name, "send", ""))
        yield streamed
        ends[name] = env.now

    env.process(lane())
    env.process(one("X", 0.5e6))
    env.process(one("Y", 2e6))
    env.run()
    assert ends == pytest.approx({"A": 1e-3, "X": 1e-3, "A2": 2e-3, "Y": 2.5e-3}, rel=1e-12)
    assert net.relayed == (1 if net_class is _Searched else 0)
    if isinstance(net, _Searched):
        assert [labels for t, labels in net.searched if t == 1e-3] == [["Y"]]  # l1's component, not A2's


# S1 and S2 have the same signature (coefficient 0.1 on r); P and Q have 0.2 and 0.3. S1 (1 kB) ends at once; S2
# starts at 1 ms, after P and Q: the multiset {S, P, Q} recurs, the second time in the order P, Q, S.
_REORDERED = _Scenario(
    Instance((1e9,), (FlowSpec(((0, 0.1),)), FlowSpec(((0, 0.2),)), FlowSpec(((0, 0.3),)), FlowSpec(((0, 0.1),)))),
    [[1e3, 1e7, 1e7, 1e6]],
    [0.0, 0.0, 0.0, 1e-3],
)


def _reordered_runs() -> tuple[_Solve, list[float], dict[str, float], dict[str, float]]:
    """The memo hit of ``_REORDERED``, a fresh solve of its flows, and the end times with and without memo."""
    memo = _Recording(simpy.Environment())
    ends = _REORDERED.run(memo)
    (hit,) = [s for s in memo.log if s.time == 1e-3]
    assert hit.hit and list(hit.rates) == ["w0f1", "w0f2", "w0f3"]
    fresh, _ = engine_rates(Instance((1e9,), tuple(_REORDERED.inst.flows[1:])))
    plain_ends = _REORDERED.run(_Recording(simpy.Environment(), memo=False))
    return hit, fresh, ends, plain_ends


def test_memo_hit_matches_a_fresh_solve_to_rounding() -> None:
    hit, fresh, ends, plain_ends = _reordered_runs()
    assert list(hit.rates.values()) == pytest.approx(fresh, rel=1e-15, abs=0)
    assert fresh == pytest.approx([1e9 / 0.6] * 3, rel=1e-15, abs=0)
    assert list(ends.values()) == pytest.approx(list(plain_ends.values()), rel=1e-15, abs=0)


def test_memo_hit_is_bit_identical_to_a_fresh_solve() -> None:
    # found by these tests: the engine's float sums depended on the order the flows started in, so a memo hit
    # replayed 1e9/((0.1+0.2)+0.3) = 1666666666.6666665 where a fresh solve gave 1e9/((0.2+0.3)+0.1) =
    # 1666666666.6666667. The engine now solves in an order set by what the flows are: bit for bit the same
    hit, fresh, ends, plain_ends = _reordered_runs()
    assert ends == plain_ends
    assert list(hit.rates.values()) == fresh


def test_water_filling_handles_uncapped_flows_without_resources() -> None:
    # the reference's own edge: a flow with nothing to share and no cap is infinitely fast
    inst = Instance((1e9,), (FlowSpec((), INF), FlowSpec(((0, 1.0),), 2e8)))
    assert list(water_filling(inst)) == [INF, 2e8]
    assert np.isinf(water_filling(Instance((1e9,), (FlowSpec(()),)))).all()


# ---------------------------------------------------------------------------------------------------- incremental
class _Global(FluidNetwork):
    """The engine re-solving every streaming flow at every solve (one component of all of them, by signature): what
    it did before it re-solved only the components that changed."""

    def _components(self) -> list[list[int]]:
        super()._components()
        sigs = [s for s, flows in enumerate(self._by_sig) if flows]
        return [sigs] if sigs else []


@st.composite
def timelines(draw: st.DrawFn) -> tuple[Instance, list[float], list[float]]:
    """Flows over up to 8 resources, each with a start time and a size: as they come and go, components form,
    merge (a flow bridging two groups starts) and split (it ends)."""
    inst = draw(instances(max_resources=8, max_flows=12))
    n = len(inst.flows)
    starts = draw(st.lists(st.one_of(st.just(0.0), st.sampled_from([1e-3, 2e-3]), st.floats(0, 5e-3)),
                           min_size=n, max_size=n))
    sizes = draw(st.lists(st.one_of(st.sampled_from([1e6, 2e6]), st.floats(1e4, 1e7)), min_size=n, max_size=n))
    return inst, starts, sizes


def _run_timeline(net: FluidNetwork, inst: Instance, starts: list[float], sizes: list[float]) -> list[float]:
    env = net.env
    res = [net.resource(f"r{k}", c) for k, c in enumerate(inst.capacities)]
    ends = [math.nan] * len(inst.flows)

    def one(j: int):  # type: ignore[no-untyped-def]
        yield env.timeout(starts[j])
        spec = inst.flows[j]
        streamed, _ = net.transfer(sizes[j], [(res[k], c) for k, c in spec.uses], max_rate=spec.max_rate)
        yield streamed
        ends[j] = env.now

    for j in range(len(inst.flows)):
        env.process(one(j))
    env.run()
    return ends


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timelines())
def test_incremental_solver_against_global_solves_and_the_oracle(tl: tuple[Instance, list[float], list[float]]) -> None:
    # after every solve the checked network asserts the bottleneck characterisation of max-min fairness on *every*
    # streaming flow (re-solved or not); the end times equal those of a network that re-solves all flows each time
    inst, starts, sizes = tl
    incremental = MaxMinCheckedNetwork(simpy.Environment())
    got = _run_timeline(incremental, inst, starts, sizes)
    want = _run_timeline(_Global(simpy.Environment()), inst, starts, sizes)
    assert all(t == t for t in got)
    assert got == pytest.approx(want, rel=1e-9)


def test_a_bridging_flow_merges_two_components_and_its_end_splits_them() -> None:
    # A on l0, B on l1 (1 GB/s each): 1 GB/s each. At 1 ms C starts on l0 and l1: all three at 0.5 GB/s (one
    # component). C (0.5 MB) ends at 2 ms; A and B, with 0.5 MB left at 2 ms... A: 1 MB by 1 ms at 1 GB/s, then
    # 0.5 GB/s: sizes 2 MB for A and B: A has 1 MB left at 1 ms, 0.5 MB at 2 ms, then alone again at 1 GB/s: 2.5 ms
    inst = Instance((1e9, 1e9), (FlowSpec(((0, 1.0),)), FlowSpec(((1, 1.0),)), FlowSpec(((0, 1.0), (1, 1.0)))))
    net = MaxMinCheckedNetwork(simpy.Environment())
    ends = _run_timeline(net, inst, [0.0, 0.0, 1e-3], [2e6, 2e6, 0.5e6])
    assert ends == pytest.approx([2.5e-3, 2.5e-3, 2e-3], rel=1e-12)
