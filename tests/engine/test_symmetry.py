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
