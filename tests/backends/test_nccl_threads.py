"""Threads per channel as NCCL sets them (tuning.cc ncclTopoTuneModel, getNthreads; enqueue.cc's channel shrink)
and what NCCL_NTHREADS, NCCL_LL128_NTHREADS and NCCL_THREAD_THRESHOLDS change.

NCCL drops channels for small sizes while bytes < channels x threads x threshold, with threads = maxThreads[algo]
[proto]: Ring and Tree LL 512, LL128 640, Tree/Simple 512, Ring/Simple 512 (256 on a ring of at most PCI_BW, 12
GB/s), CollNet 640 at 512 bytes a thread, PAT none (NCCL never sets it: PAT's channels do not shrink). The same
thread count is a Ring/Simple SHM channel's loads in flight (Little's law, docs/host-paths.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from collsim.api import Simulator
from collsim.backends.nccl.chunking import cell_channel_count, channels_for, shrink_threads
from collsim.backends.nccl.tuner import release_notes
from collsim.nccl_env import NcclEnvError, NcclOptions
from collsim.scenario import ScenarioError

KiB, MiB = 2**10, 2**20


def _largest_channels(nbytes: int, threads: int, threshold: int, nc: int) -> int:
    """The shrink's closed form: the most channels c <= nc with c x threads x threshold <= nbytes (at least 1)."""
    return max(1, min(nc, nbytes // (threads * threshold)))


def test_getnthreads_corrects_as_nccl_does() -> None:
    t = Simulator.from_source("hgx-h100").nccl_constants.threads
    assert t.resolve("NCCL_NTHREADS", None, 64, 512, 512) == (512, None)
    assert t.resolve("NCCL_NTHREADS", 256, 64, 512, 512) == (256, None)
    assert t.resolve("NCCL_NTHREADS", 100, 64, 512, 512)[0] == 512  # not a multiple of 32: the maximum
    assert t.resolve("NCCL_NTHREADS", 1024, 64, 512, 512)[0] == 512
    assert t.resolve("NCCL_LL128_NTHREADS", 96, 160, 640, 640)[0] == 160  # below max / 4
    assert (t.warp, t.least, t.ll, t.ll128, t.all, t.collnet_threshold) == (32, 64, 512, 640, 640, 512)


def test_ll128_shrinks_with_its_640_threads() -> None:
    # one HGX H100, 24 channels: 100,000 B of Ring/LL128 keep 100000 // (640 x 8) = 19 channels (512 threads
    # would have kept all 24: 24 x 512 x 8 = 98,304 <= 100,000)
    sim = Simulator.from_source("hgx-h100")
    plan, consts = sim.nccl_plan, sim.nccl_constants
    assert plan.channels == 24
    for algo in ("Ring", "Tree"):
        assert shrink_threads(plan, NcclOptions(), consts, algo, "LL128") == (640, 8)
        assert channels_for(plan, NcclOptions(), consts, "LL128", 100_000, 24, algo) == 19


@pytest.mark.parametrize(
    ("env", "threads", "threshold"),
    [({}, 512, 64), ({"NCCL_NTHREADS": 256}, 256, 64), ({"NCCL_THREAD_THRESHOLDS": "-1 -1 -1 -1 -1 32"}, 512, 32)],
)
def test_ring_simple_shrink_follows_nccl_nthreads_and_thresholds(env: dict[str, object], threads: int,
                                                                 threshold: int) -> None:
    sim = Simulator.from_source("hgx-h100", [f"backends.nccl.env.{k}={v}" for k, v in env.items()])
    plan, opts, consts = sim.nccl_plan, sim.nccl_options, sim.nccl_constants
    assert shrink_threads(plan, opts, consts, "Ring", "Simple") == (threads, threshold)
    for nbytes in (64 * KiB, 300 * KiB, 512 * KiB, 700 * KiB):
        want = _largest_channels(nbytes, threads, threshold, 24)
        assert channels_for(plan, opts, consts, "Simple", nbytes, 24, "Ring") == want
    # what the simulation runs: the shrunk count, then NCCL's cells (2.23 on: cell_channel_count). 700 KiB: 21
    # channels by default, 15 once the cells of 16 KiB go 3 to a channel; 24 and then 22 with half the threads (or
    # half the threshold) per channel
    shrunk = _largest_channels(700 * KiB, threads, threshold, 24)
    ran = sim.simulate_one("nccl", 700 * KiB, choice=("Ring", "Simple")).channels
    assert ran == cell_channel_count(plan, opts, consts, "Simple", "allreduce", 700 * KiB, shrunk, 24)
    assert ran == (15 if (threads, threshold) == (512, 64) else 22)


def test_thread_thresholds_replace_the_ring_ll_per_rank_threshold() -> None:
    # NCCL multiplies Ring/LL's threshold by the rank count, then NCCL_THREAD_THRESHOLDS replaces it as given
    sim = Simulator.from_source("hgx-h100")
    plan, consts = sim.nccl_plan, sim.nccl_constants
    assert shrink_threads(plan, NcclOptions(), consts, "Ring", "LL") == (512, 8 * 8)
    opts = NcclOptions.from_env({"NCCL_THREAD_THRESHOLDS": "-1 -1 -1 8"})
    assert shrink_threads(plan, opts, consts, "Ring", "LL") == (512, 8)
    assert shrink_threads(plan, opts, consts, "Tree", "LL") == (512, 8)  # Tree's entries left as they were


def test_ring_simple_on_a_pcie_ring_runs_256_threads() -> None:
    # two GPUs through host memory on PCIe Gen3: the ring carries 12 GB/s <= PCI_BW, so 256 threads (tuning.cc)
    sim = Simulator.from_source("pcie-2gpu-nop2p")
    plan, consts = sim.nccl_plan, sim.nccl_constants
    assert plan.intra_bw <= consts.host_paths.pci_bw
    assert shrink_threads(plan, NcclOptions(), consts, "Ring", "Simple")[0] == 256
    assert shrink_threads(plan, NcclOptions(), consts, "Tree", "Simple")[0] == 512  # no PCI rule for trees


def test_pat_never_shrinks_and_collnet_direct_halves_towards_its_switches() -> None:
    sim = Simulator.from_source("hgx-h100")
    consts = sim.nccl_constants
    plan = SimpleNamespace(ranks=["g"] * 16, ppn=8, intra_bw=370e9, bus_bw=370e9)
    assert channels_for(plan, NcclOptions(), consts, "Simple", 8, 16, "PAT") == 16  # type: ignore[arg-type]
    # CollNetDirect, 8 heads, 640 threads at 512 B: a unit of 640 x 8 x 512 = 2.5 MiB per channel, the threshold
    # halved at 24 channels (16 + 8) and 12 (8 + 4). 20 MiB: down to 16 (16 x 1.25 MiB = 20 MiB is not short);
    # 10 MiB: on to 12, the threshold halved again, 11 (11 x 0.625 MiB < 10 MiB)
    assert channels_for(plan, NcclOptions(), consts, "Simple", 20 * MiB, 32, "CollNetDirect") == 16  # type: ignore[arg-type]
    assert channels_for(plan, NcclOptions(), consts, "Simple", 10 * MiB, 32, "CollNetDirect") == 11  # type: ignore[arg-type]
    assert shrink_threads(plan, NcclOptions(), consts, "CollNetChain", "Simple") == (640, 512)  # type: ignore[arg-type]


def test_shm_channel_cap_follows_nccl_nthreads() -> None:
    # Little's law: a Ring/Simple SHM channel has threads x unroll x 16 B of loads in flight; 128 threads instead of
    # the PCI ring's 256 halve its cap
    base = Simulator.from_source("pcie-2gpu-nop2p")
    half = Simulator.from_source("pcie-2gpu-nop2p", ["backends.nccl.env.NCCL_NTHREADS=128"])
    hop, hop_half = base.nccl_plan.hops[(0, 0)], half.nccl_plan.hops[(0, 0)]
    assert hop.transport == "SHM"
    assert hop_half.max_rate == pytest.approx(hop.max_rate / 2, rel=1e-12)


def test_a_corrected_thread_count_is_noted_and_a_bad_threshold_list_is_an_error() -> None:
    sim = Simulator.from_source("hgx-h100", ["backends.nccl.env.NCCL_NTHREADS=100"])
    notes = release_notes(sim.nccl_plan, sim.nccl_options, sim.nccl_constants, "allreduce")
    assert notes[0] == "NCCL_NTHREADS=100 is not a multiple of 32: NCCL uses 512 threads"
    # 100 is corrected to 512: the shrink is the default's
    assert shrink_threads(sim.nccl_plan, sim.nccl_options, sim.nccl_constants, "Ring", "Simple") == (512, 64)
    with pytest.raises(NcclEnvError, match="one to six integers"):
        NcclOptions.from_env({"NCCL_THREAD_THRESHOLDS": "8 8 sixty-four"})
    with pytest.raises(ScenarioError, match=r"NCCL_THREAD_THRESHOLDS.*one to six integers"):
        Simulator.from_source("hgx-h100", ["backends.nccl.env.NCCL_THREAD_THRESHOLDS=1 2 3 4 5 6 7"])
