"""Ring schedules against closed forms on ideal rings (one channel, no contention)."""

from __future__ import annotations

import pytest
from tests_support import GLOO, ideal_gloo_ring_time, ideal_ring_time

from collsim.algorithms import RingChunking, gloo_ring_segments

MiB = 2**20


@pytest.mark.parametrize("n", [2, 4, 8, 16])
@pytest.mark.parametrize("size", [64 * MiB, 256 * MiB])
def test_nccl_simple_ring_matches_alpha_beta(n: int, size: int) -> None:
    bw, alpha = 10e9, 1e-6
    t, _ = ideal_ring_time(n, size, bw=bw, alpha=alpha)
    formula = 2 * (n - 1) * alpha + 2 * (n - 1) / n * size / bw
    assert t == pytest.approx(formula, rel=0.01)


@pytest.mark.parametrize("n", [2, 3, 8])
def test_ring_latency_bound_is_exact(n: int) -> None:
    # a few bytes: each of the 2(n-1) steps sends its first slice (of two, size/2n bytes each) once the
    # predecessor's first slice of the step before has arrived; the last step's second slice streams after that
    bw, alpha, size = 10e9, 2e-6, 4.0
    t, _ = ideal_ring_time(n, size, bw=bw, alpha=alpha)
    s = size / (2 * n)
    assert t == pytest.approx(2 * (n - 1) * (alpha + s / bw) + s / bw, rel=1e-9)


@pytest.mark.parametrize("pieces", [2, 4, 16])
def test_network_steps_leave_whole_and_cut_steps_pipeline(pieces: int) -> None:
    # one loop, each rank's 1 MiB chunk cut in `pieces`. Forwarded piece by piece, the next step's first piece is
    # already here when a step ends (alpha < (C - s)/B), so every link streams without a gap and the latency is
    # paid once: 2(n-1) C/B + alpha. Forwarded whole (NCCL's network proxy, one send per step), each step waits
    # for all of the previous one: 2(n-1)(alpha + C/B), the time of an uncut chunk
    n, bw, alpha, chunk = 4, 10e9, 2e-6, float(MiB)
    ch = RingChunking(chunk, pieces, 64)
    cut, _ = ideal_ring_time(n, n * chunk, bw=bw, alpha=alpha, chunking=ch)
    whole, _ = ideal_ring_time(n, n * chunk, bw=bw, alpha=alpha, chunking=ch, whole_steps=True)
    uncut, _ = ideal_ring_time(n, n * chunk, bw=bw, alpha=alpha, chunking=RingChunking(chunk, 1, 64))
    assert cut == pytest.approx(2 * (n - 1) * chunk / bw + alpha, rel=1e-9)
    assert whole == pytest.approx(2 * (n - 1) * (alpha + chunk / bw), rel=1e-9)
    assert whole == pytest.approx(uncut, rel=1e-9)


def test_ring_time_grows_with_size_and_falls_with_bandwidth() -> None:
    sizes = [MiB, 4 * MiB, 16 * MiB, 64 * MiB]
    times = [ideal_ring_time(4, s)[0] for s in sizes]
    assert times == sorted(times)
    assert ideal_ring_time(4, 16 * MiB, bw=20e9)[0] < ideal_ring_time(4, 16 * MiB, bw=10e9)[0]


def test_chunking_conserves_bytes() -> None:
    ch = RingChunking(2 * MiB, 2, 4)
    for size in (1, 3 * MiB + 5, 40 * MiB, 1000 * MiB):
        assert sum(ch.loops(8, size)) * 8 == pytest.approx(size, rel=1e-12)


def test_gloo_segmentation_matches_pytorch() -> None:
    # reference notes: 25 MiB / 8 ranks -> 32 segments of 800 KiB; 1 MiB / 8 -> 16 of 64 KiB; 100 MiB / 2 -> 100
    assert gloo_ring_segments(25 * MiB, 8, GLOO).segments == 32
    s = gloo_ring_segments(1 * MiB, 8, GLOO)
    assert (s.segments, s.segment_bytes) == (16, 64 * 1024)
    assert gloo_ring_segments(100 * MiB, 2, GLOO).segments == 100


@pytest.mark.parametrize("n", [2, 4, 8])
def test_gloo_ring_matches_its_step_structure(n: int) -> None:
    # 2(P-1)k segment messages per rank streamed back to back on one connection: 2(P-1)/P * S / B, plus the
    # latency of the last message of each phase and the first receive-ready notice
    bw, alpha, notice, size = 5e9, 10e-6, 10e-6, 64 * MiB
    t = ideal_gloo_ring_time(n, size, bw=bw, alpha=alpha, notice=notice)
    formula = 2 * (n - 1) / n * size / bw + 2 * alpha + notice
    assert t == pytest.approx(formula, rel=0.01)
    assert ideal_gloo_ring_time(n, size, bw=bw, alpha=alpha, notice=notice, symmetric=False) == pytest.approx(t)


def test_a_ring_of_more_slices_than_the_flow_limit_stops_before_allocating() -> None:
    """Every slice is a flow: a size whose slices alone pass engine.max_flows is refused when the ring is built, not
    after allocating a mark for each (1 PiB on 8 ranks with every rank simulated ran out of 24 GB)."""
    from collsim.api import Simulator
    from collsim.scenario import ScenarioError

    sim = Simulator.from_source("hgx-h100", ["backends.nccl.env.NCCL_ALGO=Ring", "engine.max_flows=1000"])
    with pytest.raises(ScenarioError, match="passed the limit of 1000 flows after 0 us"):
        sim.simulate_one("nccl", 1 << 40, symmetry=False)
