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
