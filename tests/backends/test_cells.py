"""NCCL's cell scheduling of Ring and Tree channels (enqueue.cc scheduleCollTasksToPlan, 2.23 on; LL cells x4 from
2.26): which channels run and with how many bytes (``chunking.cell_channels``), and that the simulation runs them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsim.api import Simulator
from collsim.backends.nccl.chunking import cell_channels

KiB = 1024


@given(
    data=st.integers(1, 1 << 31),
    tpb=st.sampled_from([1, 2, 8, 16]),
    nc=st.integers(1, 32),
    max_channels=st.integers(1, 32),
    factor=st.sampled_from([1, 4]),
)
def test_cells_conserve_bytes_and_stay_within_the_channels(
    data: int, tpb: int, nc: int, max_channels: int, factor: int
) -> None:
    shares = cell_channels(data, tpb, min(nc, max_channels), max_channels, factor)
    assert sum(shares) == data
    assert all(b > 0 for b in shares)
    assert 1 <= len(shares) <= max_channels
    if factor == 1:  # without LL's factor a channel's share is at least its fair part: never more than nc channels
        assert len(shares) <= min(nc, max_channels) + 1


def test_an_allreduce_of_one_mebibyte_on_24_channels_runs_on_22() -> None:
    """2 MiB of traffic over 24 channels is 87,392 bytes each (16-byte multiple): three cells of 32 KiB traffic (16 KiB
    of data) per channel, 64 cells: 1 + 20 + 1 channels, the last with one cell."""
    assert cell_channels(1 << 20, 2, 24, 24) == [48 * KiB] * 21 + [16 * KiB]


@pytest.mark.parametrize(
    ("version", "channels"),
    [(None, [4, 4, 8, 12, 16]), ("2.25.1", [1, 1, 2, 3, 4]), ("2.22.3", [1, 1, 2, 3, 4])],
)
def test_ring_ll_runs_on_the_channels_nccls_cells_give(version: str | None, channels: list[int]) -> None:
    """Two HGX H100 nodes, Ring/LL at 64-256 KiB: NCCL's shrink gives 1, 1, 2, 3, 4 channels (LL's threshold x 16
    ranks: 64 KiB a channel); from 2.26 LL's cells count 4x their traffic, so 4x as many channels run."""
    extra = [f'backends.nccl.version="{version}"'] if version else []
    sim = Simulator.from_source("2node-h100-ib", extra)
    sizes = [64 * KiB, 96 * KiB, 128 * KiB, 192 * KiB, 256 * KiB]
    assert [sim.simulate_one("nccl", s, choice=("Ring", "LL")).channels for s in sizes] == channels
