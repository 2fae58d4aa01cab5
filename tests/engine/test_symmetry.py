"""The symmetry quotient finds only real symmetry and simulates exactly what the full model does."""

from __future__ import annotations

import pytest

from collsim.engine import ResourceSpec, refine


def _ring(n: int, caps: list[float]) -> tuple[dict, dict, list]:
    res = {i: ResourceSpec(f"l{i}", caps[i], "link") for i in range(n)}
    use = {r: {"send": [(r, 1.0)]} for r in range(n)}
    rel = [(r, "pred", (r - 1) % n) for r in range(n)]
    return use, res, rel


def test_uniform_ring_is_one_class() -> None:
    use, res, rel = _ring(6, [1e9] * 6)
    ent, rc = refine(use, res, dict.fromkeys(range(6), 0), rel)
    assert len(set(ent.values())) == 1 and len(set(rc.values())) == 1


def test_one_slow_link_breaks_the_ring_symmetry() -> None:
    use, res, rel = _ring(6, [1e9] * 5 + [5e8])
    ent, _ = refine(use, res, dict.fromkeys(range(6), 0), rel)
    # every rank is at a different distance from the slow link: all distinct
    assert len(set(ent.values())) == 6


def test_shared_pool_keeps_symmetry() -> None:
    # 4 ranks each with an own link and all sharing one memory: still one class of ranks
    res = {("l", i): ResourceSpec(f"l{i}", 1e9, "link") for i in range(4)}
    res["mem"] = ResourceSpec("mem", 1e10, "hostmem")
    use = {r: {"send": [(("l", r), 1.0), ("mem", 2.0)]} for r in range(4)}
    ent, rc = refine(use, res, dict.fromkeys(range(4), 0), [(r, "pred", (r - 1) % 4) for r in range(4)])
    assert len(set(ent.values())) == 1
    assert rc["mem"] != rc[("l", 0)]


@pytest.mark.parametrize("caps", [[1e9] * 4, [1e9, 2e9, 1e9, 2e9], [1e9, 1e9, 1e9, 3e8]])
def test_quotient_equals_full_simulation(caps: list[float]) -> None:
    from tests_support import ideal_ring_time

    t_sym, classes = ideal_ring_time(4, 8 * 2**20, caps=caps, symmetric=True)
    t_full, entities = ideal_ring_time(4, 8 * 2**20, caps=caps, symmetric=False)
    assert t_sym == pytest.approx(t_full, rel=1e-12)
    assert classes <= entities


# ------------------------------------------------------------------------------------------ decouple (issue 13)
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from collsim.engine import decouple  # noqa: E402


def _channels(n_ch: int, n_rank: int) -> tuple[dict, list]:
    """``n_ch`` rings of ``n_rank`` ranks: each rank sends on its own channel link and on its GPU's shared link."""
    use = {(c, r): {"send": [(("own", c, r), 1.0), (("gpu", r), 2.0)]} for c in range(n_ch) for r in range(n_rank)}
    rel = [((c, r), "succ", (c, (r + 1) % n_rank)) for c in range(n_ch) for r in range(n_rank)]
    return use, rel


def test_decouple_cuts_the_reached_channel_loose_from_the_shared_links_only() -> None:
    use, rel = _channels(3, 4)
    d = decouple(use, {("own", 1, 2)}, rel)
    assert d.affected == {(1, r) for r in range(4)}  # the rank on the slow link, and its whole ring
    assert d.shared == {("gpu", r) for r in range(4)}
    assert d.dropped == 4
    assert d.usage[(1, 0)] == {"send": [(("own", 1, 0), 1.0)]}  # its own link kept, the GPU's shared one dropped
    assert d.usage[(0, 0)] == use[(0, 0)] and d.usage[(2, 3)] == use[(2, 3)]
    # the two rings it does not reach stay one class: their GPU links no longer carry the reached ring's load
    res = {rk: ResourceSpec(str(rk), 1e9, "link") for u in d.usage.values() for ul in u.values() for rk, _ in ul}
    ent, _ = refine(d.usage, res, dict.fromkeys(d.usage, 0), rel)
    assert len({ent[(c, r)] for c in (0, 2) for r in range(4)}) == 1


def test_decouple_changes_nothing_without_a_reached_entity_or_when_all_are_reached() -> None:
    use, rel = _channels(2, 3)
    for perturbed in (set(), {("own", 9, 9)}, {("gpu", 0)}):  # nothing uses it; every channel uses it
        d = decouple(use, perturbed, rel)
        assert d.dropped == 0 and d.usage == use and not d.shared


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 4),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=3),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)), max_size=6),
)
def test_decouple_properties(n_ch: int, n_rank: int, slow: list, extra: list) -> None:  # type: ignore[type-arg]
    use, rel = _channels(n_ch, n_rank)
    for c, r, k in extra:  # a few more shared resources, used by arbitrary entities
        if (c, r) in use:
            use[(c, r)]["send"].append((("x", k), 1.0))
    d = decouple(use, {("own", c, r) for c, r in slow}, rel)
    affected = d.affected
    # closed under the relations
    assert all((a in affected) == (b in affected) for a, _, b in rel)
    # unaffected entities keep every use; affected ones keep exactly the uses of resources no unaffected entity uses
    used_by_rest = {rk for e, u in use.items() if e not in affected for ul in u.values() for rk, _ in ul}
    for e, u in use.items():
        if e not in affected:
            assert d.usage[e] == u
        else:
            assert d.usage[e] == {r: [(rk, c) for rk, c in ul if rk not in used_by_rest] for r, ul in u.items()}
    # no resource is left used by both sides, and what was dropped is counted
    left = {rk: {e in affected for e, u in d.usage.items() if any(k == rk for ul in u.values() for k, _ in ul)}
            for rk in {rk for u in d.usage.values() for ul in u.values() for rk, _ in ul}}  # fmt: skip
    assert all(len(sides) == 1 for sides in left.values())
    before = sum(len(ul) for u in use.values() for ul in u.values())
    assert before - sum(len(ul) for u in d.usage.values() for ul in u.values()) == d.dropped


# ---------------------------------------------------------------- the quotient bit for bit (exact weights, issue 13)
from collsim.engine.symmetry import build_quotient  # noqa: E402


def _shared_links_run(symmetric: bool, group: int, coef: float, other: float, steps: int) -> dict[object, list[float]]:
    """``2 * group`` senders ("a", i) in 2 groups on two shared links (coefficient ``coef``), each also on its own
    link; 2 more senders ("b", 0-1), one per shared link (coefficient ``other``) with a rate cap. Each sends ``steps``
    messages of sizes 1-3 MB back to back; when each one's messages finish (s)."""
    import simpy

    from collsim.engine import FluidNetwork

    res = {("s", k): ResourceSpec(f"s{k}", 10e9, "link") for k in range(2)}
    res |= {("own", i): ResourceSpec(f"own{i}", 4e9, "link") for i in range(2 * group)}
    usage: dict = {("a", i): {"send": [(("s", i // group), coef), (("own", i), 1.0)]} for i in range(2 * group)}
    usage |= {("b", k): {"send": [(("s", k), other)]} for k in range(2)}
    colors = {e: e[0] for e in usage}
    net = FluidNetwork(simpy.Environment())
    q = build_quotient(net, usage, res, colors=colors, symmetric=symmetric)
    ends: dict[object, list[float]] = {}

    def sender(e: object) -> simpy.events.ProcessGenerator:
        route = net.route(q.uses(e, "send"), 3e9 if e[0] == "b" else float("inf"))  # type: ignore[index]
        for k in range(steps):
            streamed, _ = net.send(route, (1 + k % 3) * 1e6 + (1e5 if e[0] == "b" else 0.0))
            yield streamed
            ends.setdefault(e, []).append(net.env.now)

    for e in q.reps():
        net.env.process(sender(e))
    net.env.run()
    return ends


@pytest.mark.parametrize("group", [3, 5, 7])
@pytest.mark.parametrize(("coef", "other"), [(1 / 0.92, 0.7), (0.1, 0.3), (1.0, 1.0)])
def test_quotient_rates_are_the_full_runs_bit_for_bit(group: int, coef: float, other: float) -> None:
    # a shared link carries a group's rows of ``coef`` (group x 1/0.92 is not a float) and another class's row: the
    # quotient's row of exactly group x coef weighs what the members' rows weigh, so every message ends at the same
    # float, not only to rounding (with weights summed in floats and group x coef rounded, 1/0.92 in groups of 5
    # and 7 ended a unit in the last place apart)
    sym = _shared_links_run(True, group, coef, other, 12)
    full = _shared_links_run(False, group, coef, other, 12)
    assert len(sym) == 2 and len(full) == 2 * group + 2
    for e, times in full.items():
        assert times == sym[(e[0], 0)], e  # type: ignore[index]


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 7),
    st.integers(2, 5),
    st.sampled_from([1 / 0.92, 0.1, 1 / 3, 1.0, 0.7, 2.0]),
    st.lists(st.sampled_from([1e6, 3e6, 2.5e5, 7e5]), min_size=1, max_size=5),
    st.none() | st.tuples(st.integers(0, 6), st.integers(0, 4)),
)
def test_quotient_of_channels_is_the_full_run_bit_for_bit(
    n_ch: int, n_rank: int, gpu_coef: float, sizes: list[float], slow: tuple[int, int] | None
) -> None:
    # n_ch channels x n_rank ranks, each on its own link and its GPU's shared link (n_ch rows of gpu_coef there: the
    # quotient's one row of exactly n_ch x gpu_coef); one own link optionally slow, which splits the classes. Every
    # entity sends the same messages back to back: each one's ends equal its representative's, bit for bit
    import simpy

    from collsim.engine import FluidNetwork

    use, rel = _channels(n_ch, n_rank)
    for ent in use.values():
        own, gpu = ent["send"]
        ent["send"] = [own, (gpu[0], gpu_coef)]
    slow_key = ("own", slow[0] % n_ch, slow[1] % n_rank) if slow else None
    res = {("own", c, r): ResourceSpec(f"own{c}.{r}", 5e9, "link") for c in range(n_ch) for r in range(n_rank)}
    res |= {("gpu", r): ResourceSpec(f"gpu{r}", 12e9, "link") for r in range(n_rank)}
    if slow_key is not None:
        res[slow_key] = ResourceSpec("slow", 2e9, "link")

    def run(symmetric: bool) -> tuple[dict[object, list[float]], object]:
        net = FluidNetwork(simpy.Environment())
        q = build_quotient(net, use, res, relations=rel, symmetric=symmetric)
        ends: dict[object, list[float]] = {}

        def sender(e: object) -> simpy.events.ProcessGenerator:
            route = net.route(q.uses(e, "send"))
            for size in sizes:
                streamed, _ = net.send(route, size)
                yield streamed
                ends.setdefault(e, []).append(net.env.now)

        for e in q.reps():
            net.env.process(sender(e))
        net.env.run()
        return ends, q

    sym, q = run(True)
    full, _ = run(False)
    assert len(full) == n_ch * n_rank
    for e, times in full.items():
        assert times == sym[q.rep(e)], e  # type: ignore[attr-defined]
