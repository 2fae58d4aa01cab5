"""Gloo's legacy allreduce algorithms and its other collectives against closed forms on ideal networks.

Ideal networks (``tests_support.ideal_gloo_schedule_time``): per-rank egress and ingress links of B = 5 GB/s
(``per_rank``) or a link per ordered pair (``per_pair``); message latency alpha = 10 us once per message, control
messages (notifications, receive-ready notices) 10 us; reductions and copies free.
"""

from __future__ import annotations

import math

import pytest
from tests_support import GLOO, ideal_gloo_schedule_time

from collsim.algorithms.gloo_algos import GlooParams, bcube_radices, gloo_schedule
from collsim.vocab import COLLECTIVES
from collsim.vocab import GLOO_ALGORITHMS as ALLREDUCE_ALGORITHMS

MiB = 2**20
B, ALPHA, NOTICE = 5e9, 10e-6, 10e-6


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_halving_doubling_closed_form(n: int) -> None:
    # 2 log2 P messages, 2(P-1)/P * S bytes, plus the notification at the turn and the final one
    size = 256 * MiB
    k = int(math.log2(n))
    t, classes = ideal_gloo_schedule_time("allreduce", "halving_doubling", n, size, bw=B, alpha=ALPHA, notice=NOTICE)
    brief = 2 * (n - 1) / n * size / B + 2 * k * ALPHA
    assert t == pytest.approx(brief + 2 * NOTICE, rel=1e-9)
    assert t == pytest.approx(brief, rel=0.01)
    assert classes == 1


def test_halving_doubling_latency_bound_is_exact() -> None:
    t, _ = ideal_gloo_schedule_time("allreduce", "halving_doubling", 8, 8.0, bw=B, alpha=ALPHA, notice=NOTICE)
    assert t == pytest.approx(2 * 7 / 8 * 8.0 / B + 6 * ALPHA + 2 * NOTICE, rel=1e-9)


@pytest.mark.parametrize(("n", "base"), [(4, 2), (16, 4), (16, 8), (9, 3)])
def test_bcube_closed_form(n: int, base: int) -> None:
    # steps = len(radices); each step's B-1 sends share the rank's link: 2(P-1)/P * S / B + 2 steps * alpha
    size = 256 * MiB
    steps = len(bcube_radices(n, base))
    t, _ = ideal_gloo_schedule_time("allreduce", "bcube", n, size, bw=B, alpha=ALPHA, notice=NOTICE, base=base)
    brief = 2 * (n - 1) / n * size / B + 2 * steps * ALPHA
    assert t == pytest.approx(brief + 2 * NOTICE, rel=1e-9)
    assert t == pytest.approx(brief, rel=0.01)


def test_bcube_radices() -> None:
    assert bcube_radices(16, 8) == [8, 2]
    assert bcube_radices(8, 2) == [2, 2, 2]
    assert bcube_radices(12, 8) == [12]
    assert bcube_radices(1, 2) == []
    with pytest.raises(ValueError, match="base"):
        bcube_radices(8, 1)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_chunked_closed_form(n: int) -> None:
    # 4P-4 messages of S/2P streamed back to back: 2(P-1)/P * S / B plus two latencies at the ends
    size = 256 * MiB
    t, _ = ideal_gloo_schedule_time("allreduce", "ring_chunked", n, size, bw=B, alpha=ALPHA, notice=NOTICE)
    assert t == pytest.approx(2 * (n - 1) / n * size / B + 2 * ALPHA, rel=1e-3)
    sched = gloo_schedule("allreduce", "ring_chunked", n, size, params=GLOO)
    assert sched.notes[0] == f"{2 * n} chunks of {size / (2 * n):.0f} B, {4 * n - 4} messages per rank"


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_ring_allgather_closed_form(n: int) -> None:
    # nbytes is the whole output; each rank forwards (P-1)/P of it in half chunks, two in flight
    size = 256 * MiB
    t, _ = ideal_gloo_schedule_time("allgather", "ring", n, size, bw=B, alpha=ALPHA, notice=NOTICE)
    assert t == pytest.approx((n - 1) / n * size / B + ALPHA + NOTICE, rel=1e-6)
    assert t == pytest.approx((n - 1) / n * size / B, rel=0.01)


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_direct_alltoall_closed_form(n: int) -> None:
    # all P-1 sends of S/P at once share the rank's own link
    size = 256 * MiB
    t, _ = ideal_gloo_schedule_time("alltoall", "-", n, size, bw=B, alpha=ALPHA, notice=NOTICE)
    assert t == pytest.approx((n - 1) / n * size / B + ALPHA + NOTICE, rel=1e-6)
    assert t == pytest.approx((n - 1) / n * size / B, rel=0.01)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16])
def test_binomial_broadcast_closed_form(n: int) -> None:
    # a link per pair: every rank posts its sends at once, so rank v is popcount(v) hops from the root; the deepest
    # has ceil(log2 P) hops when P is a power of two (fewer otherwise: P = 3 and 5 have 1 and 2)
    size = 64 * MiB
    hops = max(bin(v).count("1") for v in range(n))
    t, _ = ideal_gloo_schedule_time("broadcast", "-", n, size, bw=B, alpha=ALPHA, notice=NOTICE, network="per_pair")
    assert t == pytest.approx(NOTICE + hops * (ALPHA + size / B), rel=1e-9)
    assert t == pytest.approx(hops * (ALPHA + size / B), rel=0.01)
    if n & (n - 1) == 0:
        assert hops == math.ceil(math.log2(n))


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_binomial_broadcast_on_per_rank_links_shares_the_senders_link(n: int) -> None:
    # Gloo posts a rank's sends at once; on one link per rank the root's d sends share it, its first child's d-1
    # sends, ...: the critical path carries d(d+1)/2 buffers, not d
    size = 64 * MiB
    d = int(math.log2(n))
    t, _ = ideal_gloo_schedule_time("broadcast", "-", n, size, bw=B, alpha=ALPHA, notice=NOTICE)
    assert t == pytest.approx(NOTICE + d * (d + 1) / 2 * size / B + d * ALPHA, rel=1e-9)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_reduce_closed_form(n: int) -> None:
    # gloo/reduce.cc: segments - 2 sends of a segment each (S - 2 segments), then P-1 chunks of S/P into the root
    size = 256 * MiB
    sched = gloo_schedule("reduce", "-", n, size, params=GLOO)
    nseg = size // MiB
    t, _ = ideal_gloo_schedule_time("reduce", "-", n, size, bw=B, alpha=ALPHA, notice=NOTICE)
    assert sched.notes[0].startswith(f"{nseg} segments")
    assert t == pytest.approx((nseg - 2) / nseg * size / B + (n - 1) / n * size / B, rel=0.01)


def test_sendrecv_is_one_message() -> None:
    t, classes = ideal_gloo_schedule_time("sendrecv", "-", 4, 1e6, bw=B, alpha=ALPHA, notice=NOTICE)
    assert t == pytest.approx(NOTICE + 1e6 / B + ALPHA, rel=1e-12)
    assert classes == 3  # sender, receiver, bystanders


@pytest.mark.parametrize("n", [3, 5, 6, 7, 12])
@pytest.mark.parametrize("algorithm", ALLREDUCE_ALGORITHMS)
def test_allreduce_symmetry_is_exact_for_any_rank_count(n: int, algorithm: str) -> None:
    size = 16 * MiB
    a, _ = ideal_gloo_schedule_time("allreduce", algorithm, n, size, base=3)
    b, _ = ideal_gloo_schedule_time("allreduce", algorithm, n, size, base=3, symmetric=False)
    assert a == pytest.approx(b, rel=1e-12)
    assert a > 2 * (n - 1) / n * size / 5e9  # never beats the bandwidth bound


def test_non_power_of_two_halving_doubling_folds_the_extra_ranks() -> None:
    # P = 6 = 4 + 2: two folded ranks hand their whole buffer over first and get the result back last
    sched = gloo_schedule("allreduce", "halving_doubling", 6, 1e6, params=GLOO)
    assert sched.peers[1] == {"fold": 0}
    assert sched.peers[0] == {"hd0": 2, "hd1": 4, "unfold": 1}
    assert sched.roles == {0: "folding", 1: "folded", 2: "folding", 3: "folded", 4: "plain", 5: "plain"}
    # on a link per pair nothing contends: the fold and the unfold add one whole-buffer message each; the turn
    # notification from the plain partner (which started early) is already there, saving one notice
    t6, _ = ideal_gloo_schedule_time("allreduce", "halving_doubling", 6, 64 * MiB, network="per_pair")
    t4, _ = ideal_gloo_schedule_time("allreduce", "halving_doubling", 4, 64 * MiB, network="per_pair")
    assert t6 == pytest.approx(t4 + 2 * (64 * MiB / 5e9 + 10e-6) - 10e-6, rel=1e-9)
    # on one ingress link per rank the plain ranks' first messages reach a folding rank while its fold arrives
    t6s, _ = ideal_gloo_schedule_time("allreduce", "halving_doubling", 6, 64 * MiB)
    assert t6 < t6s < t6 + 64 * MiB / 5e9 / 2


@pytest.mark.parametrize("collective", [c for c in COLLECTIVES if c != "allreduce"])
def test_other_collectives_symmetry_is_exact(collective: str) -> None:
    for n in (4, 6):
        a, ca = ideal_gloo_schedule_time(collective, "ring", n, 8 * MiB)
        b, cb = ideal_gloo_schedule_time(collective, "ring", n, 8 * MiB, symmetric=False)
        assert a == pytest.approx(b, rel=1e-12)
        assert cb == n and ca <= n


def test_single_rank_does_nothing() -> None:
    for coll in ("allreduce", "allgather", "broadcast", "alltoall", "reduce"):
        for alg in ALLREDUCE_ALGORITHMS:
            assert ideal_gloo_schedule_time(coll, alg, 1, MiB)[0] == 0.0


def test_unknown_names_are_refused_with_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="valid: allreduce, allgather, reduce_scatter"):
        gloo_schedule("gather", "ring", 4, 1.0, params=GLOO)
    with pytest.raises(ValueError, match="valid: ring, ring_chunked, halving_doubling, bcube"):
        gloo_schedule("allreduce", "tree", 4, 1.0, params=GLOO)
    with pytest.raises(ValueError, match="at least 2"):
        gloo_schedule("sendrecv", "ring", 1, 1.0, params=GLOO)


def test_every_name_of_the_vocabulary_has_a_schedule() -> None:
    for collective in COLLECTIVES:
        for algorithm in ALLREDUCE_ALGORITHMS:
            sched = gloo_schedule(collective, algorithm, 4, 1e6, params=GLOO)
            assert sched.nranks == 4 and set(sched.peers) == set(range(4))


def test_params_come_from_gloo_yaml() -> None:
    # the backend reads gloo.yaml (GlooConstants.params); the algorithms layer reads no YAML
    from collsim.api import Simulator

    p = Simulator.from_source("loopback-gloo-cpu").gloo_constants.params
    assert p == GLOO
    assert (p.max_segment_bytes, p.min_segments_per_rank, p.segments_in_flight, p.bcube_base) == (MiB, 2, 2, 2)


def test_params_reach_the_segmented_rings_and_bcube() -> None:
    # 1 MiB on 4 ranks: max(ceil(S/M), m x P) segments; reduce segments the same way; bcube takes the base
    p3 = GlooParams(max_segment_bytes=MiB, min_segments_per_rank=3, segments_in_flight=2, bcube_base=4)
    assert gloo_schedule("allreduce", "ring", 4, MiB, params=GLOO).notes[0].startswith("8 segments")
    assert gloo_schedule("allreduce", "ring", 4, MiB, params=p3).notes[0].startswith("12 segments")
    assert gloo_schedule("reduce", "-", 4, MiB, params=p3).notes[0].startswith("12 segments")
    assert gloo_schedule("allreduce", "bcube", 16, MiB, params=p3).notes[0].startswith("base 4: 2 steps")
    assert gloo_schedule("allreduce", "bcube", 16, MiB, params=p3, base=2).notes[0].startswith("base 2: 4 steps")
